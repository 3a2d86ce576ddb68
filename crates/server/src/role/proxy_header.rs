//! The PROXY protocol header (v1 or v2) a load balancer in front sends before anything else,
//! on listeners that expect one: read into the connection's input buffer until complete, then
//! the client address it carries replaces the peer's.

use ringx_http::proxy_protocol::{self, ProxyHeader};

use crate::ctx::base::Base;

/// A PROXY v2 header is at most 16 + 536 bytes; v1 at most 107.
pub const MAX_PROXY_HEADER: usize = 16 + 536;

/// Where reading the header stands after more bytes arrived.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// Incomplete: wait for more.
    Partial,
    /// Not a PROXY header, or longer than one can be: close the connection.
    Refused,
    /// Complete: the client address (if it carried one) is in `base.addr`, and the bytes after
    /// the header are in `base.inbuf`.
    Done,
}

/// Feeds `data` (appended to what `base` holds) to the header parser.
pub fn feed(base: &mut Base, data: &[u8]) -> Step {
    base.inbuf.extend_from_slice(data);
    match proxy_protocol::parse(&base.inbuf) {
        Ok(proxy_protocol::Parse::Partial) if base.inbuf.len() > MAX_PROXY_HEADER => Step::Refused,
        Ok(proxy_protocol::Parse::Partial) => Step::Partial,
        Err(e) => {
            tracing::debug!("PROXY protocol header refused: {e}");
            Step::Refused
        }
        Ok(proxy_protocol::Parse::Done { header, consumed }) => {
            if let ProxyHeader::Tcp { src, .. } = header {
                base.addr = Some(src);
            }
            base.inbuf.drain(..consumed);
            Step::Done
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn a_header_in_pieces_sets_the_client_address_and_keeps_what_follows() {
        let mut b = Base::new(Instant::now());
        b.addr = Some("127.0.0.1:5000".parse().unwrap());
        let hdr = b"PROXY TCP4 203.0.113.7 10.0.0.1 40000 80\r\nGET / HTTP/1.1\r\n";
        assert_eq!(feed(&mut b, &hdr[..10]), Step::Partial);
        assert_eq!(feed(&mut b, &hdr[10..]), Step::Done);
        assert_eq!(b.addr, Some("203.0.113.7:40000".parse().unwrap()));
        assert_eq!(b.inbuf, b"GET / HTTP/1.1\r\n");
    }

    #[test]
    fn garbage_and_endless_headers_are_refused() {
        let mut b = Base::new(Instant::now());
        assert_eq!(feed(&mut b, b"GET / HTTP/1.1\r\n\r\n"), Step::Refused);
        let mut b = Base::new(Instant::now());
        // A v2 signature announcing more than any header holds never completes.
        let mut v2 = b"\r\n\r\n\0\r\nQUIT\n\x21\x11\xff\xff".to_vec();
        v2.resize(MAX_PROXY_HEADER + 1, 0);
        assert_ne!(feed(&mut b, &v2), Step::Done);
        assert_ne!(
            feed(&mut b, &v2),
            Step::Partial,
            "never waits past the largest header"
        );
    }
}
