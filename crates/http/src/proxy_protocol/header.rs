//! What a PROXY header says ([`ProxyHeader`]), the outcome of a parse, and the limits and
//! signature both versions share.

use std::fmt;
use std::net::SocketAddr;

/// The longest version 1 header line, CRLF included (`PROXY UNKNOWN` with two
/// full-length IPv6 addresses and ports, per the specification).
pub const V1_MAX_LEN: usize = 107;

/// The longest version 2 header this parser accepts, the 16 fixed bytes
/// included: the specification sizes both formats to fit the smallest TCP
/// segment every host must accept (576 - 40 = 536 bytes), so that a header
/// always arrives in one read.
pub const V2_MAX_LEN: usize = 536;

/// The 12-byte version 2 signature.
pub(super) const V2_SIG: [u8; 12] = *b"\r\n\r\n\0\r\nQUIT\n";

/// What a PROXY protocol header says about the connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProxyHeader {
    /// v2 LOCAL command (health checks from the LB): use the real connection
    /// addresses.
    Local,
    /// v1 "UNKNOWN" or v2 PROXY with AF_UNSPEC/unsupported family (UDP,
    /// UNIX sockets): use the real connection addresses.
    Unknown,
    /// TCP over IPv4/IPv6: the original client (`src`) and the address it
    /// connected to (`dst`). Both have the same family: a v4-mapped IPv6
    /// address on the wire stays an IPv6 address (see
    /// [`std::net::IpAddr::to_canonical`]).
    Tcp {
        /// The original client.
        src: SocketAddr,
        /// The address the client connected to.
        dst: SocketAddr,
    },
}

/// The outcome of [`parse`](super::parse) on the bytes received so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parse {
    /// Need more bytes (the buffer is a valid prefix so far).
    Partial,
    /// A complete header.
    Done {
        /// What the header says.
        header: ProxyHeader,
        /// The header's length: the connection's own bytes start at
        /// `buf[consumed..]`.
        consumed: usize,
    },
}

/// Bytes that are not a valid PROXY protocol header; the connection must be
/// closed. The string says why (for logs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyError(pub &'static str);

impl fmt::Display for ProxyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid PROXY protocol header: {}", self.0)
    }
}

impl std::error::Error for ProxyError {}

pub(super) const NOT_PROXY: ProxyError = ProxyError("not a PROXY protocol header");
