//! A request that arrived as decoded fields (HTTP/2's HPACK now, HTTP/3's QPACK next), as
//! the pipeline takes it: the fields (`ringx-h2proto`'s `RequestHead`) given to
//! `ringx_http::request_from_parts` with the framing's field, with no HTTP/1.1 text in
//! between; and the fields of a request made that way, to make it again.

use ringx_h2proto::{Framing, RequestHead};
use ringx_http::Request;

/// Fields kept on the stack: a request's usual few need no allocation.
const ON_STACK: usize = 24;

/// Header storage per parse of a head (the HTTP/2 list size bounds the count before this).
pub const MAX_HEADERS: usize = 128;

/// A request's field list: on the stack for the usual few, in a vector past that.
pub struct HeaderList<'a> {
    small: [httparse::Header<'a>; ON_STACK],
    len: usize,
    spill: Vec<httparse::Header<'a>>,
}

impl Default for HeaderList<'_> {
    fn default() -> Self {
        HeaderList::new()
    }
}

impl<'a> HeaderList<'a> {
    /// An empty list (filled in place: it is not moved once it holds its fields).
    pub fn new() -> HeaderList<'a> {
        HeaderList {
            small: [httparse::EMPTY_HEADER; ON_STACK],
            len: 0,
            spill: Vec::new(),
        }
    }

    fn push(&mut self, h: httparse::Header<'a>) {
        if self.spill.is_empty() && self.len < ON_STACK {
            self.small[self.len] = h;
            self.len += 1;
            return;
        }
        if self.spill.is_empty() {
            self.spill.extend_from_slice(&self.small[..self.len]);
        }
        self.spill.push(h);
    }

    pub fn as_slice(&self) -> &[httparse::Header<'a>] {
        if self.spill.is_empty() {
            &self.small[..self.len]
        } else {
            &self.spill
        }
    }
}

/// The request from fields `head` framed by `framing`, held to what the HTTP/1 parser holds
/// a head to (`ringx_http::request_from_parts`). `length` and `headers` are storage it
/// borrows (on the caller's stack). Err: the status it is refused with.
pub fn make_request<'h, 'a>(
    (head, framing): (&'a RequestHead, Framing),
    limits: &ringx_http::Limits,
    length: &'a mut [u8; 20],
    headers: &'h mut HeaderList<'a>,
) -> Result<Request<'h, 'a>, u16> {
    request_fields(head, framing, length, limits.max_headers, headers).ok_or(400u16)?;
    let (Ok(method), Ok(target)) = (
        std::str::from_utf8(&head.method),
        std::str::from_utf8(head.path.as_deref().unwrap_or(b"/")),
    ) else {
        return Err(400); // the HTTP/1 parser refuses a target that is not UTF-8 too
    };
    ringx_http::request_from_parts(method, target, headers.as_slice(), limits).map_err(|e| e.status)
}

/// The fields of `head` as the request has them, with the framing's (`content-length`
/// written into `length`, or `transfer-encoding: chunked`); at most `max + 1` of them (the
/// request is then refused for having too many). None: a field name that is not text.
fn request_fields<'a>(
    head: &'a RequestHead,
    framing: Framing,
    length: &'a mut [u8; 20],
    max: usize,
    out: &mut HeaderList<'a>,
) -> Option<()> {
    for (name, value) in head.fields().take(max + 1) {
        let name = std::str::from_utf8(name).ok()?;
        out.push(httparse::Header { name, value });
    }
    let framed: Option<(&str, &[u8])> = match framing {
        Framing::None => None,
        Framing::Length(n) => {
            let digits = ringx_http::decimal(n, length);
            Some(("content-length", digits))
        }
        Framing::Chunked => Some(("transfer-encoding", b"chunked")),
    };
    if let Some((name, value)) = framed.filter(|_| out.as_slice().len() <= max) {
        out.push(httparse::Header { name, value });
    }
    Some(())
}

/// The fields of a request that was made from fields (`request_fields`), to make it again:
/// re-served at an `error_page` location. The framing fields are left out: the body sent
/// again says its own.
pub fn head_of(req: &Request) -> RequestHead {
    let mut head = RequestHead {
        method: req.method_str.as_bytes().to_vec(),
        path: Some(req.target.as_bytes().to_vec()),
        ..RequestHead::default()
    };
    for h in req.headers {
        match h.name {
            "host" => head.host = Some(h.value.to_vec()),
            "cookie" => head.cookie = h.value.to_vec(),
            "content-length" | "transfer-encoding" => {}
            _ => {
                head.lines.extend_from_slice(h.name.as_bytes());
                head.lines.extend_from_slice(b": ");
                head.lines.extend_from_slice(h.value);
                head.lines.extend_from_slice(b"\r\n");
            }
        }
    }
    head
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(fields: usize) -> RequestHead {
        let mut h = RequestHead {
            method: b"GET".to_vec(),
            path: Some(b"/".to_vec()),
            authority: Some(b"a.test".to_vec()),
            cookie: b"c=1".to_vec(),
            ..RequestHead::default()
        };
        for i in 0..fields {
            h.lines
                .extend_from_slice(format!("x-{i}: v{i}\r\n").as_bytes());
        }
        h
    }

    #[test]
    fn the_fields_stay_in_order_on_the_stack_and_past_it() {
        for n in [0, 3, ON_STACK - 3, ON_STACK, 40] {
            let h = head(n);
            let mut len = [0u8; 20];
            let mut list = HeaderList::new();
            request_fields(&h, Framing::Length(1234), &mut len, 128, &mut list).unwrap();
            let got: Vec<(&str, &[u8])> =
                list.as_slice().iter().map(|f| (f.name, f.value)).collect();
            assert_eq!(got.len(), n + 3, "host, the fields, cookie, content-length");
            assert_eq!(got[0], ("host", &b"a.test"[..]));
            for i in 0..n {
                assert_eq!(got[i + 1].0, format!("x-{i}"));
                assert_eq!(got[i + 1].1, format!("v{i}").as_bytes());
            }
            assert_eq!(got[n + 1], ("cookie", &b"c=1"[..]));
            assert_eq!(got[n + 2], ("content-length", &b"1234"[..]));
        }
    }

    #[test]
    fn too_many_fields_stop_one_past_the_limit() {
        let h = head(50);
        let mut len = [0u8; 20];
        let mut list = HeaderList::new();
        request_fields(&h, Framing::Chunked, &mut len, 10, &mut list).unwrap();
        assert_eq!(
            list.as_slice().len(),
            11,
            "one more than the limit: refused with 431"
        );
    }
}
