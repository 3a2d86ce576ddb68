//! The one response writer: every response ringx makes itself (error pages, `return`
//! locations, static file heads) is written here into a connection's output buffer, and
//! each writer returns what it wrote — the status, the length of the head, the file part of
//! the body — so nothing downstream parses the bytes back.

use std::fs::File;
use std::rc::Rc;

use ringx_http::DateCache;

use crate::route::Canned;
pub use head::{ConnHdr, Fields, HeadOut, HeadSink};

pub mod head;

/// The file part of a response body: the file, the offset and the length to send.
pub type FilePart = (Rc<File>, u64, u64);

/// What a writer wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    pub status: u16,
    /// Bytes of the head (status line to the empty line), for the access log.
    pub head_len: u32,
}

/// A response written into a buffer: what was written, the file part of its body still to be
/// sent (or the file to compress as the client takes it), and whether the connection must
/// close after it (the request could not be framed, or the body is delimited by the close).
pub struct Reply {
    pub written: Written,
    pub file: Option<FilePart>,
    pub close: bool,
    pub encoder: Option<Box<crate::compress::file_encoder::FileEncoder>>,
    /// Nothing was written: an `error_page` sends the request to a location that proxies,
    /// which the role starts (`answer/fallback.rs`).
    pub fallback: Option<Box<crate::answer::fallback::Fallback>>,
}

impl Reply {
    pub fn bytes(written: Written) -> Reply {
        Reply {
            written,
            file: None,
            close: false,
            encoder: None,
            fallback: None,
        }
    }
}

/// Writes responses for one server identity (`Server:` header, error-page token) with the
/// zone's current `Date`.
#[derive(Clone, Copy)]
pub struct Responder<'a> {
    /// `Server:` header line, with CRLF.
    pub server_header: &'a [u8],
    /// The name on error pages.
    pub token: &'a [u8],
    pub date: &'a DateCache,
}

impl Responder<'_> {
    /// The first lines of every head ringx writes: the status, `Server`, `Date` and `extra`.
    fn start<O: HeadOut + ?Sized>(&self, out: &mut O, status: u16, extra: &str) {
        out.status(status, "");
        out.lines(self.server_header);
        out.lines(self.date.header());
        out.lines(extra.as_bytes());
    }

    /// A response head with a Content-Length; `extra` holds further header lines (with
    /// CRLFs).
    pub fn head<O: HeadOut + ?Sized>(
        &self,
        out: &mut O,
        status: u16,
        extra: &str,
        len: u64,
        ch: ConnHdr,
    ) -> Written {
        let before = out.mark();
        self.start(out, status, extra);
        if status != 304 && status != 204 {
            out.length(len);
        }
        out.end(ch);
        Written {
            status,
            head_len: (out.mark() - before) as u32,
        }
    }

    /// A response head for a body whose length is not known yet: chunked (`chunked`, for an
    /// HTTP/1.1 request), or delimited by the close (then `ch` must be [`ConnHdr::Close`]).
    pub fn head_unsized<O: HeadOut + ?Sized>(
        &self,
        out: &mut O,
        status: u16,
        extra: &str,
        ch: ConnHdr,
        chunked: bool,
    ) -> Written {
        let before = out.mark();
        self.start(out, status, extra);
        if chunked {
            out.lines(b"Transfer-Encoding: chunked\r\n");
        }
        out.end(ch);
        Written {
            status,
            head_len: (out.mark() - before) as u32,
        }
    }

    /// An nginx-style HTML error page (the body is left out for HEAD).
    pub fn error<O: HeadOut + ?Sized>(&self, out: &mut O, page: ErrorPage<'_>) -> Written {
        let status = page.status;
        let reason = ringx_http::reason(status);
        let token = String::from_utf8_lossy(self.token);
        let body = format!(
            "<html>\r\n<head><title>{status} {reason}</title></head>\r\n<body>\r\n<center><h1>{status} {reason}</h1></center>\r\n<hr><center>{token}</center>\r\n</body>\r\n</html>\r\n"
        );
        let extra = format!("Content-Type: text/html\r\n{}", page.extra);
        let w = self.head(out, status, &extra, body.len() as u64, page.conn);
        if !page.head_only {
            out.body().extend_from_slice(body.as_bytes());
        }
        w
    }

    /// A `return` response: its pre-serialised head, Date, Connection, body.
    #[inline]
    pub fn canned<O: HeadOut + ?Sized>(
        &self,
        out: &mut O,
        c: &Canned,
        ch: ConnHdr,
        head_only: bool,
    ) -> Written {
        let date = self.date.header();
        if ch == ConnHdr::Keep11 && !head_only {
            if let Some(head_len) = out.canned_whole(c, date) {
                return Written {
                    status: c.status,
                    head_len: head_len as u32,
                };
            }
        }
        self.canned_extra(out, c, "", ch, head_only)
    }

    /// A `return` response with header lines added (`add_header`): its pre-serialised head,
    /// the lines, Date, Connection, body.
    pub fn canned_extra<O: HeadOut + ?Sized>(
        &self,
        out: &mut O,
        c: &Canned,
        extra: &str,
        ch: ConnHdr,
        head_only: bool,
    ) -> Written {
        let before = out.mark();
        let body = if head_only { &[][..] } else { &c.body[..] };
        // One allocation for the lot: a new connection's output buffer is empty, and growing
        // it append by append costs a reallocation and a copy each time.
        out.body()
            .reserve(c.head.len() + extra.len() + ringx_http::DATE_HEADER_LEN + 26 + body.len());
        out.canned_head(c);
        out.lines(extra.as_bytes());
        out.lines(self.date.header());
        out.end(ch);
        let head_len = (out.mark() - before) as u32;
        out.body().extend_from_slice(body);
        Written {
            status: c.status,
            head_len,
        }
    }
}

/// What an error page says: its status, extra header lines (with CRLFs), the Connection
/// header, and whether the request was HEAD.
#[derive(Clone, Copy)]
pub struct ErrorPage<'a> {
    pub status: u16,
    pub extra: &'a str,
    pub conn: ConnHdr,
    pub head_only: bool,
}

impl ErrorPage<'static> {
    /// An error page that closes the connection.
    pub fn closing(status: u16) -> ErrorPage<'static> {
        ErrorPage {
            status,
            extra: "",
            conn: ConnHdr::Close,
            head_only: false,
        }
    }
}

impl<'a> ErrorPage<'a> {
    pub fn new(status: u16, conn: ConnHdr, head_only: bool) -> ErrorPage<'a> {
        ErrorPage {
            status,
            extra: "",
            conn,
            head_only,
        }
    }

    pub fn extra(self, extra: &'a str) -> ErrorPage<'a> {
        ErrorPage { extra, ..self }
    }

    pub fn head_only(self, head_only: bool) -> ErrorPage<'a> {
        ErrorPage { head_only, ..self }
    }
}

/// Turns a prepared response head of `head_len` bytes (`Connection: keep-alive` or no
/// Connection header) into one that announces the close: a response written before a drain
/// began, sent after it.
pub fn mark_close(resp: &mut Vec<u8>, head_len: usize) {
    const KEEP10: &[u8] = b"Connection: keep-alive\r\n";
    const CLOSE: &[u8] = b"Connection: close\r\n";
    let Some(end) = head_len.checked_sub(2) else {
        return;
    };
    let head = &resp[..end];
    if let Some(i) = head.windows(KEEP10.len()).position(|w| w == KEEP10) {
        resp.splice(i..i + KEEP10.len(), CLOSE.iter().copied());
    } else if !head.windows(CLOSE.len()).any(|w| w == CLOSE) {
        resp.splice(end..end, CLOSE.iter().copied());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn responder(date: &DateCache) -> Responder<'_> {
        Responder {
            server_header: b"Server: ringx\r\n",
            token: b"ringx",
            date,
        }
    }

    /// The one-copy keep-alive form writes exactly what the appends write, and both report
    /// the head they wrote.
    #[test]
    fn canned_forms_agree() {
        let head = b"HTTP/1.1 200 OK\r\nServer: ringx\r\nContent-Length: 2\r\n".to_vec();
        let c = Canned::new(200, head, b"hi".to_vec());
        let date = DateCache::new();
        let r = responder(&date);
        for ch in [ConnHdr::Keep11, ConnHdr::Keep10, ConnHdr::Close] {
            for head_only in [false, true] {
                let mut out = b"previous".to_vec();
                let w = r.canned(&mut out, &c, ch, head_only);
                let mut want = b"previous".to_vec();
                want.extend_from_slice(&c.head);
                want.extend_from_slice(date.header());
                want.extend_from_slice(ch.bytes());
                want.extend_from_slice(b"\r\n");
                assert_eq!(w.head_len as usize, want.len() - 8, "{ch:?} {head_only}");
                assert_eq!(w.status, 200);
                if !head_only {
                    want.extend_from_slice(&c.body);
                }
                assert_eq!(out, want, "{ch:?} {head_only}");
            }
        }
    }

    /// Each writer reports the status and the exact head length it wrote.
    #[test]
    fn writers_report_what_they_wrote() {
        let date = DateCache::new();
        let r = responder(&date);
        let mut out = b"x".to_vec();
        let page = ErrorPage::new(404, ConnHdr::Keep11, false).extra("X-A: b\r\n");
        let w = r.error(&mut out, page);
        assert_eq!(w.status, 404);
        let head = &out[1..1 + w.head_len as usize];
        assert!(head.starts_with(b"HTTP/1.1 404 Not Found\r\n"));
        assert!(
            head.ends_with(b"X-A: b\r\nContent-Length: 146\r\n\r\n"),
            "{head:?}"
        );
        assert_eq!(out.len() - 1 - w.head_len as usize, 146);
        let mut out = Vec::new();
        let w = r.error(&mut out, ErrorPage::new(405, ConnHdr::Close, true));
        assert_eq!(
            (w.status, w.head_len as usize),
            (405, out.len()),
            "HEAD: head only"
        );
        let mut out = Vec::new();
        let w = r.head(&mut out, 304, "ETag: \"1\"\r\n", 10, ConnHdr::Keep10);
        assert_eq!(w.head_len as usize, out.len());
        assert!(
            !out.windows(14).any(|x| x == b"Content-Length"),
            "no length on 304"
        );
        assert!(out.ends_with(b"Connection: keep-alive\r\n\r\n"));
    }

    #[test]
    fn marking_a_prepared_response_closed() {
        let date = DateCache::new();
        let r = responder(&date);
        for ch in [ConnHdr::Keep11, ConnHdr::Keep10, ConnHdr::Close] {
            let mut out = Vec::new();
            let w = r.error(&mut out, ErrorPage::new(404, ch, false));
            mark_close(&mut out, w.head_len as usize);
            let text = String::from_utf8(out).unwrap();
            let (head, body) = text.split_once("\r\n\r\n").unwrap();
            assert_eq!(
                head.matches("Connection: close").count(),
                1,
                "{ch:?}: {head}"
            );
            assert!(!head.contains("keep-alive"), "{ch:?}");
            assert!(body.contains("<h1>404 Not Found</h1>"), "{ch:?}");
        }
    }
}
