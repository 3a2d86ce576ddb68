//! Where a response ringx makes itself is written: the response writers (`Responder`, the
//! answers of `answer/`, the cache's hits) build its head once, field by field, into a
//! [`HeadOut`], and each protocol serialises it its own way. HTTP/1 writes the text into the
//! connection's output buffer as the fields come (`Vec<u8>`: no copy, no second pass);
//! HTTP/2 (and HTTP/3 next) keeps them as [`Fields`] for HPACK, with the body beside them.
//! Nothing is written as HTTP/1.1 text to be parsed back.

use ringx_h2proto::response::FieldList;
pub use ringx_http::HeadSink;

use crate::route::Canned;

/// The `Connection` header a response carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnHdr {
    /// HTTP/1.1 keep-alive: nothing to say.
    Keep11,
    /// HTTP/1.0 keep-alive must be confirmed.
    Keep10,
    Close,
}

impl ConnHdr {
    /// The header for a response to a request of this version that keeps (or not) the
    /// connection.
    pub fn new(version11: bool, keep: bool) -> ConnHdr {
        match (keep, version11) {
            (false, _) => ConnHdr::Close,
            (true, true) => ConnHdr::Keep11,
            (true, false) => ConnHdr::Keep10,
        }
    }

    pub fn bytes(self) -> &'static [u8] {
        match self {
            ConnHdr::Keep11 => b"",
            ConnHdr::Keep10 => b"Connection: keep-alive\r\n",
            ConnHdr::Close => b"Connection: close\r\n",
        }
    }
}

/// A response head as it is built (field by field: [`HeadSink`]), and its body after it.
pub trait HeadOut: HeadSink {
    /// The end of the head (HTTP/1: the `Connection` header the request asks and the empty
    /// line).
    fn end(&mut self, ch: ConnHdr);
    /// Where the body goes.
    fn body(&mut self) -> &mut Vec<u8>;
    /// A `return` response's head as it was made at load time (`Canned`): its status and
    /// fields.
    fn canned_head(&mut self, c: &Canned);
    /// A `return` response whole, head and body, for an HTTP/1.1 keep-alive request, in one
    /// copy; None where the protocol has no such shortcut (the head is built as any).
    fn canned_whole(&mut self, c: &Canned, date: &[u8]) -> Option<usize>;
}

/// HTTP/1: the text, written into the connection's output buffer.
impl HeadOut for Vec<u8> {
    fn end(&mut self, ch: ConnHdr) {
        self.extend_from_slice(ch.bytes());
        self.extend_from_slice(b"\r\n");
    }

    fn body(&mut self) -> &mut Vec<u8> {
        self
    }

    fn canned_head(&mut self, c: &Canned) {
        self.extend_from_slice(&c.head);
    }

    #[inline]
    fn canned_whole(&mut self, c: &Canned, date: &[u8]) -> Option<usize> {
        // One copy of the prepared keep-alive response, the Date written over its
        // placeholder.
        let before = self.len();
        self.extend_from_slice(&c.keep11);
        let at = before + c.head.len();
        self[at..at + date.len()].copy_from_slice(date);
        Some(c.head.len() + date.len() + 2)
    }
}

/// HTTP/2 and HTTP/3: the head as fields (lowercase names, connection-specific fields left
/// out, RFC 9113 §8.2.2), and the body.
#[derive(Default)]
pub struct Fields {
    pub status: u16,
    pub fields: FieldList,
    pub body: Vec<u8>,
    /// The head's length as HTTP/1.1 would carry it ([`HeadOut::mark`]).
    len: usize,
}

impl Fields {
    /// Room for a usual head's fields; the body is sized by its writer.
    pub fn new() -> Fields {
        Fields {
            fields: FieldList::with_capacity(384, 12),
            ..Fields::default()
        }
    }

    /// One field (its name in any case; connection-specific ones are left out).
    pub fn field(&mut self, name: &[u8], value: &[u8]) {
        self.len += name.len() + value.len() + 4;
        self.fields.push_any_case(name, value);
    }
}

impl HeadSink for Fields {
    fn mark(&self) -> usize {
        self.len
    }

    fn status(&mut self, status: u16, _reason: &str) {
        self.status = status;
        self.len += 17; // "HTTP/1.1 200 OK\r\n", about
    }

    fn put(&mut self, name: &[u8], value: &[u8]) {
        self.field(name, value);
    }

    fn lines(&mut self, lines: &[u8]) {
        self.len += lines.len();
        self.fields.push_lines(lines);
    }

    fn length(&mut self, len: u64) {
        self.field(b"content-length", ringx_http::decimal(len, &mut [0; 20]));
    }
}

impl HeadOut for Fields {
    fn end(&mut self, _: ConnHdr) {
        self.len += 2;
    }

    fn body(&mut self) -> &mut Vec<u8> {
        &mut self.body
    }

    fn canned_head(&mut self, c: &Canned) {
        self.status = c.status;
        self.len += c.head.len(); // its status line included
        self.fields.extend_from(&c.fields);
    }

    fn canned_whole(&mut self, _: &Canned, _: &[u8]) -> Option<usize> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_become_lowercase_fields_without_the_connection_specific_ones() {
        let mut f = Fields::new();
        f.status(404, "");
        f.lines(
            b"Server: ringx\r\nX-A:  b c \r\nConnection: close\r\nTransfer-Encoding: chunked\r\n",
        );
        f.length(1234567);
        f.end(ConnHdr::Close);
        let got: Vec<(&[u8], &[u8])> = f.fields.iter().collect();
        assert_eq!(
            got,
            vec![
                (&b"server"[..], &b"ringx"[..]),
                (b"x-a", b"b c"),
                (b"content-length", b"1234567"),
            ]
        );
        assert_eq!(f.status, 404);
    }

    #[test]
    fn http1_text_is_the_same_head_written_as_it_comes() {
        let mut v: Vec<u8> = Vec::new();
        v.status(200, "");
        v.lines(b"Server: ringx\r\n");
        v.length(0);
        v.end(ConnHdr::Keep10);
        assert_eq!(
            v,
            b"HTTP/1.1 200 OK\r\nServer: ringx\r\nContent-Length: 0\r\nConnection: keep-alive\r\n\r\n"
        );
        assert_eq!(ringx_http::decimal(0, &mut [0; 20]), b"0");
        assert_eq!(
            ringx_http::decimal(u64::MAX, &mut [0; 20]),
            u64::MAX.to_string().as_bytes()
        );
    }

    #[test]
    fn a_canned_response_as_fields_has_its_load_time_fields_and_the_added_lines() {
        let head = b"HTTP/1.1 201 Created\r\nServer: ringx\r\nContent-Length: 2\r\n".to_vec();
        let c = Canned::new(201, head, b"ok".to_vec());
        let date = ringx_http::DateCache::new();
        let r = crate::response::Responder {
            server_header: b"Server: ringx\r\n",
            token: b"ringx",
            date: &date,
        };
        let mut f = Fields::new();
        let w = r.canned_extra(&mut f, &c, "X-Added: 1\r\n", ConnHdr::Close, false);
        assert_eq!((w.status, f.status), (201, 201));
        let names: Vec<&[u8]> = f.fields.iter().map(|(n, _)| n).collect();
        assert_eq!(
            names,
            vec![&b"server"[..], b"content-length", b"x-added", b"date"]
        );
        assert_eq!(f.body, b"ok");
        // The one-copy HTTP/1.1 form is HTTP/1's alone.
        assert!(Fields::new().canned_whole(&c, date.header()).is_none());
    }
}
