//! Writing response heads and small bodies into a connection's output buffer.

use ringx_http::DateCache;

use super::route::Canned;

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
    pub fn bytes(self) -> &'static [u8] {
        match self {
            ConnHdr::Keep11 => b"",
            ConnHdr::Keep10 => b"Connection: keep-alive\r\n",
            ConnHdr::Close => b"Connection: close\r\n",
        }
    }
}

/// A `return` response: pre-serialised head + Date + Connection + body.
/// Returns the length of the head it wrote (the counters and the access log need it; nothing
/// has to search the bytes for it).
pub fn canned(
    out: &mut Vec<u8>,
    c: &Canned,
    date: &DateCache,
    ch: ConnHdr,
    head_only: bool,
) -> usize {
    let before = out.len();
    if ch == ConnHdr::Keep11 && !head_only {
        out.extend_from_slice(&c.keep11);
        let date_at = before + c.head.len();
        out[date_at..date_at + ringx_http::DATE_HEADER_LEN].copy_from_slice(date.header());
        return c.head.len() + ringx_http::DATE_HEADER_LEN + 2;
    }
    out.extend_from_slice(&c.head);
    out.extend_from_slice(date.header());
    out.extend_from_slice(ch.bytes());
    out.extend_from_slice(b"\r\n");
    let head_len = out.len() - before;
    if !head_only {
        out.extend_from_slice(&c.body);
    }
    head_len
}

/// A response head with a Content-Length; `extra` holds further header lines (with CRLFs).
pub fn head(
    out: &mut Vec<u8>,
    status: u16,
    server_header: &[u8],
    extra: &str,
    len: u64,
    date: &DateCache,
    ch: ConnHdr,
) {
    ringx_http::write_status_line(out, status);
    out.extend_from_slice(server_header);
    out.extend_from_slice(date.header());
    out.extend_from_slice(extra.as_bytes());
    if status != 304 && status != 204 {
        out.extend_from_slice(b"Content-Length: ");
        out.extend_from_slice(itoa(len).as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(ch.bytes());
    out.extend_from_slice(b"\r\n");
}

/// An nginx-style HTML error page.
#[allow(clippy::too_many_arguments)]
pub fn error(
    out: &mut Vec<u8>,
    status: u16,
    server_header: &[u8],
    token: &[u8],
    date: &DateCache,
    ch: ConnHdr,
    extra: &str,
    head_only: bool,
) {
    let reason = ringx_http::reason(status);
    let token = String::from_utf8_lossy(token);
    let body = format!(
        "<html>\r\n<head><title>{status} {reason}</title></head>\r\n<body>\r\n<center><h1>{status} {reason}</h1></center>\r\n<hr><center>{token}</center>\r\n</body>\r\n</html>\r\n"
    );
    let extra = format!("Content-Type: text/html\r\n{extra}");
    head(
        out,
        status,
        server_header,
        &extra,
        body.len() as u64,
        date,
        ch,
    );
    if !head_only {
        out.extend_from_slice(body.as_bytes());
    }
}

fn itoa(n: u64) -> String {
    n.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The one-copy keep-alive form writes exactly what the appends write.
    #[test]
    fn canned_forms_agree() {
        let head = b"HTTP/1.1 200 OK\r\nServer: ringx\r\nContent-Length: 2\r\n".to_vec();
        let c = Canned::new(head, b"hi".to_vec());
        let date = DateCache::new();
        for ch in [ConnHdr::Keep11, ConnHdr::Keep10, ConnHdr::Close] {
            for head_only in [false, true] {
                let mut out = b"previous".to_vec();
                let n = canned(&mut out, &c, &date, ch, head_only);
                let mut want = b"previous".to_vec();
                want.extend_from_slice(&c.head);
                want.extend_from_slice(date.header());
                want.extend_from_slice(ch.bytes());
                want.extend_from_slice(b"\r\n");
                assert_eq!(n, want.len() - 8, "{ch:?} {head_only}");
                if !head_only {
                    want.extend_from_slice(&c.body);
                }
                assert_eq!(out, want, "{ch:?} {head_only}");
            }
        }
    }
}
