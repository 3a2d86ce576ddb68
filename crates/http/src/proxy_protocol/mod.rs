//! The PROXY protocol, versions 1 and 2 (HAProxy's "The PROXY protocol"
//! specification): the header a load balancer puts in front of a TCP
//! connection to tell the server who the real client is, and the same header
//! written in front of a connection to a backend.
//!
//! # Receiving
//!
//! Call [`parse`] with the bytes received so far on a listener configured for
//! the PROXY protocol (never guess whether a header is present: the
//! specification requires that only trusted peers may send one, and that a
//! listener expects it on every connection).
//!
//! ```
//! use ringx_http::proxy_protocol::{parse, Parse, ProxyHeader};
//!
//! let buf = b"PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\nGET / HTTP/1.1\r\n";
//! let Parse::Done { header, consumed } = parse(buf).unwrap() else {
//!     unreachable!("need more bytes")
//! };
//! assert_eq!(
//!     header,
//!     ProxyHeader::Tcp {
//!         src: "192.168.0.1:56324".parse().unwrap(),
//!         dst: "192.168.0.11:443".parse().unwrap(),
//!     }
//! );
//! assert_eq!(&buf[consumed..], b"GET / HTTP/1.1\r\n"); // the client's bytes follow
//! ```
//!
//! [`Parse::Partial`] means "read more and call again with the same buffer
//! start". It is only returned while the bytes are a prefix of a header that
//! could still be valid, so anything else (a plain HTTP or TLS client, a
//! malformed line) is rejected as soon as the first wrong byte arrives. A
//! header never needs more than [`V2_MAX_LEN`] bytes ([`V1_MAX_LEN`] for a
//! version 1 line), so a receiver can bound its buffer and its wait.
//!
//! The parser is strict, as HAProxy is:
//!
//! * version 1: exactly `PROXY`, one space, `TCP4`/`TCP6`/`UNKNOWN`, single
//!   spaces between fields, addresses of the announced family (dotted quads
//!   without leading zeros; IPv6 text as `inet_pton` accepts it), ports
//!   `0`..`65535` in decimal without leading zeros, and `CRLF` within the
//!   first 107 bytes. After `UNKNOWN` the rest of the line is ignored, but it
//!   must be printable ASCII;
//! * version 2: version nibble 2, command LOCAL or PROXY, one of the seven
//!   address family/transport bytes the specification defines (PROXY
//!   command; the family of a LOCAL header is ignored), a length that covers
//!   the family's address block and keeps the header within 536 bytes, and
//!   well-formed TLVs after the addresses. A `PP2_TYPE_CRC32C` TLV is
//!   verified. Other TLVs are skipped.
//!
//! # Sending
//!
//! ```
//! use ringx_http::proxy_protocol::{write_v1, write_v2};
//!
//! let (src, dst) = ("192.168.0.1:56324".parse().unwrap(), "192.168.0.11:443".parse().unwrap());
//! let mut out = Vec::new();
//! write_v1(&mut out, src, dst);
//! assert_eq!(out, b"PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\n");
//!
//! out.clear();
//! write_v2(&mut out, src, dst);
//! assert_eq!(out.len(), 16 + 12);
//! ```

mod crc32c;
mod header;
mod v1;
mod v2;
mod write;

pub use header::{Parse, ProxyError, ProxyHeader, V1_MAX_LEN, V2_MAX_LEN};
pub use write::{write_v1, write_v1_unknown, write_v2, write_v2_local};

/// Parses a PROXY header at the start of `buf` (v1 or v2, detected by
/// signature).
///
/// Returns [`Parse::Partial`] while `buf` is a strict prefix of a header that
/// may still turn out valid, [`Parse::Done`] with the header's length once it
/// is complete (bytes after it are not looked at), and an error as soon as
/// the bytes cannot be the start of a valid header: not PROXY at all, a v1
/// line longer than [`V1_MAX_LEN`] or malformed, a v2 header with a bad
/// version, command, family or length, more than [`V2_MAX_LEN`] bytes,
/// malformed TLVs or a wrong CRC32c. A v2 header's TLVs are otherwise
/// skipped; UDP and UNIX families map to [`ProxyHeader::Unknown`].
///
/// For version 1, a partial IPv6 address is only checked for its characters
/// and length; the full address is checked as soon as the space after it
/// arrives.
pub fn parse(buf: &[u8]) -> Result<Parse, ProxyError> {
    match buf.first() {
        None => Ok(Parse::Partial),
        Some(b'P') => v1::parse(buf),
        Some(b'\r') => v2::parse(buf),
        Some(_) => Err(header::NOT_PROXY),
    }
}

#[cfg(test)]
mod tests;
