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

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

/// The longest version 1 header line, CRLF included (`PROXY UNKNOWN` with two
/// full-length IPv6 addresses and ports, per the specification).
pub const V1_MAX_LEN: usize = 107;

/// The longest version 2 header this parser accepts, the 16 fixed bytes
/// included: the specification sizes both formats to fit the smallest TCP
/// segment every host must accept (576 - 40 = 536 bytes), so that a header
/// always arrives in one read.
pub const V2_MAX_LEN: usize = 536;

/// The 12-byte version 2 signature.
const V2_SIG: [u8; 12] = *b"\r\n\r\n\0\r\nQUIT\n";

/// Length of the fixed part of a version 2 header.
const V2_FIXED: usize = 16;

/// The v2 TLV type of a CRC32c checksum over the whole header.
const PP2_TYPE_CRC32C: u8 = 0x03;

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

/// The outcome of [`parse`] on the bytes received so far.
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

const NOT_PROXY: ProxyError = ProxyError("not a PROXY protocol header");

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
        Some(b'P') => parse_v1(buf),
        Some(b'\r') => parse_v2(buf),
        Some(_) => Err(NOT_PROXY),
    }
}

// ---------------------------------------------------------------------------
// Version 1
// ---------------------------------------------------------------------------

/// Why the v1 parser stopped before the end of the line.
enum Stop {
    /// The input ended; what was seen is a valid prefix.
    Partial,
    /// The line cannot be valid.
    Invalid(&'static str),
}

type Step<T> = Result<T, Stop>;

/// A cursor over the (at most [`V1_MAX_LEN`] bytes of the) v1 line.
struct Line<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Line<'a> {
    fn rest(&self) -> &'a [u8] {
        self.buf.get(self.pos..).unwrap_or_default()
    }

    /// Consumes `lit` exactly.
    fn literal(&mut self, lit: &[u8], err: &'static str) -> Step<()> {
        let rest = self.rest();
        let n = rest.len().min(lit.len());
        if rest[..n] != lit[..n] {
            return Err(Stop::Invalid(err));
        }
        if n < lit.len() {
            return Err(Stop::Partial);
        }
        self.pos += lit.len();
        Ok(())
    }

    /// Consumes a run of `allowed` bytes and the `end` byte after it, and
    /// returns the run. If the input ends inside the run, `prefix_ok` says
    /// whether it can still grow into a valid field.
    fn field(
        &mut self,
        allowed: fn(u8) -> bool,
        end: u8,
        prefix_ok: fn(&[u8]) -> bool,
        err: &'static str,
    ) -> Step<&'a [u8]> {
        let rest = self.rest();
        let len = rest.iter().position(|&b| !allowed(b)).unwrap_or(rest.len());
        let token = &rest[..len];
        match rest.get(len) {
            None if prefix_ok(token) => Err(Stop::Partial),
            Some(&b) if b == end => {
                self.pos += len + 1;
                Ok(token)
            }
            _ => Err(Stop::Invalid(err)),
        }
    }
}

#[derive(Clone, Copy)]
enum V1Proto {
    Tcp4,
    Tcp6,
    Unknown,
}

fn parse_v1(buf: &[u8]) -> Result<Parse, ProxyError> {
    let mut line = Line {
        buf: &buf[..buf.len().min(V1_MAX_LEN)],
        pos: 0,
    };
    match v1_line(&mut line) {
        Ok(header) => Ok(Parse::Done {
            header,
            consumed: line.pos,
        }),
        Err(Stop::Invalid(e)) => Err(ProxyError(e)),
        // The whole allowance was there and the line did not end in it.
        Err(Stop::Partial) if buf.len() >= V1_MAX_LEN => {
            Err(ProxyError("v1 line longer than 107 bytes"))
        }
        Err(Stop::Partial) => Ok(Parse::Partial),
    }
}

fn v1_line(line: &mut Line<'_>) -> Step<ProxyHeader> {
    line.literal(b"PROXY ", NOT_PROXY.0)?;
    let proto = v1_proto(line)?;
    let (src_ip, dst_ip) = match proto {
        V1Proto::Unknown => return v1_unknown_rest(line),
        V1Proto::Tcp4 => {
            let src = v1_ipv4(line, "v1 invalid source address")?;
            let dst = v1_ipv4(line, "v1 invalid destination address")?;
            (src.into(), dst.into())
        }
        V1Proto::Tcp6 => {
            let src = v1_ipv6(line, "v1 invalid source address")?;
            let dst = v1_ipv6(line, "v1 invalid destination address")?;
            (src.into(), dst.into())
        }
    };
    let src_port = v1_port(line, b' ', "v1 invalid source port")?;
    let dst_port = v1_port(line, b'\r', "v1 invalid destination port")?;
    line.literal(b"\n", "v1 line not ended by CRLF")?;
    Ok(ProxyHeader::Tcp {
        src: SocketAddr::new(src_ip, src_port),
        dst: SocketAddr::new(dst_ip, dst_port),
    })
}

fn v1_proto(line: &mut Line<'_>) -> Step<V1Proto> {
    const PROTOS: [(&[u8], V1Proto); 3] = [
        (b"TCP4 ", V1Proto::Tcp4),
        (b"TCP6 ", V1Proto::Tcp6),
        (b"UNKNOWN", V1Proto::Unknown),
    ];
    let rest = line.rest();
    for (name, proto) in PROTOS {
        if rest.starts_with(name) {
            line.pos += name.len();
            return Ok(proto);
        }
    }
    if PROTOS.iter().any(|(name, _)| name.starts_with(rest)) {
        Err(Stop::Partial)
    } else {
        Err(Stop::Invalid("v1 protocol is not TCP4, TCP6 or UNKNOWN"))
    }
}

/// After `UNKNOWN`: either CRLF, or a space and anything printable up to
/// CRLF (ignored, as the specification requires).
fn v1_unknown_rest(line: &mut Line<'_>) -> Step<ProxyHeader> {
    const ERR: &str = "v1 UNKNOWN not followed by a space or CRLF";
    match line.rest().first() {
        None => return Err(Stop::Partial),
        Some(b' ') => {
            line.pos += 1;
            line.field(
                |b| (0x20..0x7f).contains(&b),
                b'\r',
                |_| true,
                "v1 invalid byte after UNKNOWN",
            )?;
        }
        Some(b'\r') => line.pos += 1,
        Some(_) => return Err(Stop::Invalid(ERR)),
    }
    line.literal(b"\n", "v1 line not ended by CRLF")?;
    Ok(ProxyHeader::Unknown)
}

fn v1_ipv4(line: &mut Line<'_>, err: &'static str) -> Step<Ipv4Addr> {
    let token = line.field(
        |b| b.is_ascii_digit() || b == b'.',
        b' ',
        ipv4_prefix_ok,
        err,
    )?;
    parse_ascii(token).ok_or(Stop::Invalid(err))
}

fn v1_ipv6(line: &mut Line<'_>, err: &'static str) -> Step<Ipv6Addr> {
    let token = line.field(
        |b| b.is_ascii_hexdigit() || b == b':' || b == b'.',
        b' ',
        ipv6_prefix_ok,
        err,
    )?;
    parse_ascii(token).ok_or(Stop::Invalid(err))
}

/// Parses an address with the standard library's strict parsers (IPv4:
/// exactly four decimal octets without leading zeros; IPv6: RFC 4291 text,
/// an embedded IPv4 tail included, like `inet_pton`).
fn parse_ascii<T: std::str::FromStr>(token: &[u8]) -> Option<T> {
    std::str::from_utf8(token).ok()?.parse().ok()
}

/// Whether `s` (digits and dots) can be completed into a dotted quad.
fn ipv4_prefix_ok(s: &[u8]) -> bool {
    let parts = s.split(|&b| b == b'.').count();
    parts <= 4
        && s.split(|&b| b == b'.').enumerate().all(|(i, octet)| {
            // Only the octet being typed may still be empty.
            (i + 1 == parts || !octet.is_empty()) && decimal_prefix_ok(octet, 255)
        })
}

/// Whether `s` (hex digits, colons, dots) may still grow into IPv6 text.
/// This is a cheap necessary condition; the full syntax is checked once
/// the field is complete.
fn ipv6_prefix_ok(s: &[u8]) -> bool {
    // "ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255"
    const MAX_TEXT: usize = 45;
    let double = s.windows(2).filter(|w| w == b"::").count();
    s.len() <= MAX_TEXT
        && !s.windows(3).any(|w| w == b":::")
        && double <= 1
        && s.iter().filter(|&&b| b == b'.').count() <= 3
        && !s.windows(2).any(|w| w == b".." || w == b".:")
}

/// Whether `digits` (all ASCII digits) can start a decimal number up to
/// `max` written without leading zeros.
fn decimal_prefix_ok(digits: &[u8], max: u32) -> bool {
    if digits.len() > 1 && digits[0] == b'0' {
        return false;
    }
    let mut n: u32 = 0;
    for &d in digits {
        n = n * 10 + u32::from(d - b'0');
        if n > max {
            return false;
        }
    }
    true
}

fn v1_port(line: &mut Line<'_>, end: u8, err: &'static str) -> Step<u16> {
    let token = line.field(
        |b| b.is_ascii_digit(),
        end,
        |s| decimal_prefix_ok(s, 65535),
        err,
    )?;
    if token.is_empty() || !decimal_prefix_ok(token, 65535) {
        return Err(Stop::Invalid(err));
    }
    // At most five digits (checked above), so no overflow in u32.
    let n = token
        .iter()
        .fold(0u32, |n, &d| n * 10 + u32::from(d - b'0'));
    u16::try_from(n).map_err(|_| Stop::Invalid(err))
}

// ---------------------------------------------------------------------------
// Version 2
// ---------------------------------------------------------------------------

fn parse_v2(buf: &[u8]) -> Result<Parse, ProxyError> {
    let sig = buf.len().min(V2_SIG.len());
    if buf[..sig] != V2_SIG[..sig] {
        return Err(NOT_PROXY);
    }
    let Some(&ver_cmd) = buf.get(12) else {
        return Ok(Parse::Partial);
    };
    if ver_cmd >> 4 != 2 {
        return Err(ProxyError("v2 version is not 2"));
    }
    let proxy = match ver_cmd & 0xf {
        0 => false,
        1 => true,
        _ => return Err(ProxyError("v2 command is not LOCAL or PROXY")),
    };
    let Some(&fam) = buf.get(13) else {
        return Ok(Parse::Partial);
    };
    // The address block's length for the family; LOCAL ignores the family.
    let addr_len = if proxy {
        match fam {
            0x00 => 0,
            0x11 | 0x12 => 12,
            0x21 | 0x22 => 36,
            0x31 | 0x32 => 216,
            _ => return Err(ProxyError("v2 unknown address family or transport")),
        }
    } else {
        0
    };
    let (Some(&hi), Some(&lo)) = (buf.get(14), buf.get(15)) else {
        return Ok(Parse::Partial);
    };
    let len = usize::from(u16::from_be_bytes([hi, lo]));
    let total = V2_FIXED + len;
    if total > V2_MAX_LEN {
        return Err(ProxyError("v2 header longer than 536 bytes"));
    }
    if len < addr_len {
        return Err(ProxyError("v2 length shorter than the address block"));
    }
    let Some(header) = buf.get(..total) else {
        return Ok(Parse::Partial);
    };
    let block = &header[V2_FIXED..];
    let parsed = if !proxy {
        ProxyHeader::Local
    } else {
        match fam {
            0x11 => {
                let ip = |at: usize| {
                    Ipv4Addr::new(block[at], block[at + 1], block[at + 2], block[at + 3])
                };
                ProxyHeader::Tcp {
                    src: SocketAddrV4::new(ip(0), be16(block, 8)).into(),
                    dst: SocketAddrV4::new(ip(4), be16(block, 10)).into(),
                }
            }
            0x21 => {
                let ip = |at: usize| {
                    let mut octets = [0u8; 16];
                    octets.copy_from_slice(&block[at..at + 16]);
                    Ipv6Addr::from(octets)
                };
                ProxyHeader::Tcp {
                    src: SocketAddrV6::new(ip(0), be16(block, 32), 0, 0).into(),
                    dst: SocketAddrV6::new(ip(16), be16(block, 34), 0, 0).into(),
                }
            }
            _ => ProxyHeader::Unknown,
        }
    };
    // TLVs follow a known address block; with AF_UNSPEC or LOCAL the whole
    // block is opaque and skipped.
    if proxy && fam != 0x00 {
        check_tlvs(header, V2_FIXED + addr_len)?;
    }
    Ok(Parse::Done {
        header: parsed,
        consumed: total,
    })
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

/// Checks the TLV framing of `header[start..]` and the CRC32c if one is
/// present.
fn check_tlvs(header: &[u8], start: usize) -> Result<(), ProxyError> {
    let mut at = start;
    let mut crc_at = None;
    while at < header.len() {
        let Some(tl) = header.get(at..at + 3) else {
            return Err(ProxyError("v2 truncated TLV"));
        };
        let (kind, value) = (tl[0], at + 3);
        let end = value + usize::from(u16::from_be_bytes([tl[1], tl[2]]));
        if end > header.len() {
            return Err(ProxyError("v2 TLV longer than the header"));
        }
        if kind == PP2_TYPE_CRC32C {
            if end - value != 4 {
                return Err(ProxyError("v2 CRC32C TLV is not 4 bytes"));
            }
            if crc_at.replace(value).is_some() {
                return Err(ProxyError("v2 duplicate CRC32C TLV"));
            }
        }
        at = end;
    }
    if let Some(v) = crc_at {
        let want = u32::from_be_bytes([header[v], header[v + 1], header[v + 2], header[v + 3]]);
        let got = crc32c_finish(crc32c_update(
            crc32c_update(crc32c_update(!0, &header[..v]), &[0; 4]),
            &header[v + 4..],
        ));
        if got != want {
            return Err(ProxyError("v2 CRC32C mismatch"));
        }
    }
    Ok(())
}

/// CRC32c (Castagnoli, reflected polynomial 0x82F63B78) lookup table.
const CRC32C_TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 {
                (c >> 1) ^ 0x82F6_3B78
            } else {
                c >> 1
            };
            k += 1;
        }
        table[i] = c;
        i += 1;
    }
    table
};

/// Feeds `data` into a running CRC32c (start from `!0`).
fn crc32c_update(mut crc: u32, data: &[u8]) -> u32 {
    for &b in data {
        crc = CRC32C_TABLE[usize::from((crc as u8) ^ b)] ^ (crc >> 8);
    }
    crc
}

fn crc32c_finish(crc: u32) -> u32 {
    !crc
}

// ---------------------------------------------------------------------------
// Writing
// ---------------------------------------------------------------------------

/// Both addresses in one family: if they differ, the IPv4 one becomes a
/// v4-mapped IPv6 address.
fn same_family(src: SocketAddr, dst: SocketAddr) -> (SocketAddr, SocketAddr) {
    fn to_v6(a: SocketAddr) -> SocketAddr {
        match a {
            SocketAddr::V4(v4) => {
                SocketAddrV6::new(v4.ip().to_ipv6_mapped(), v4.port(), 0, 0).into()
            }
            v6 => v6,
        }
    }
    if src.is_ipv4() == dst.is_ipv4() {
        (src, dst)
    } else {
        (to_v6(src), to_v6(dst))
    }
}

/// Appends a version 1 header: `PROXY TCP4 <src> <dst> <sport> <dport>\r\n`
/// (`TCP6` for IPv6; with mixed families the IPv4 address is written as a
/// v4-mapped IPv6 address). IPv6 flow labels and scope ids are not carried.
///
/// ```
/// let mut out = Vec::new();
/// ringx_http::proxy_protocol::write_v1(
///     &mut out,
///     "[2001:db8::1]:40000".parse().unwrap(),
///     "[2001:db8::2]:443".parse().unwrap(),
/// );
/// assert_eq!(out, b"PROXY TCP6 2001:db8::1 2001:db8::2 40000 443\r\n");
/// ```
pub fn write_v1(out: &mut Vec<u8>, src: SocketAddr, dst: SocketAddr) {
    use std::io::Write;
    let (src, dst) = same_family(src, dst);
    let proto = if src.is_ipv4() { "TCP4" } else { "TCP6" };
    // Writing to a Vec cannot fail.
    let _ = write!(
        out,
        "PROXY {proto} {} {} {} {}\r\n",
        src.ip(),
        dst.ip(),
        src.port(),
        dst.port()
    );
}

/// Appends a version 2 header with the PROXY command, a STREAM (TCP)
/// transport and no TLVs: 28 bytes for IPv4, 52 for IPv6 (with mixed
/// families the IPv4 address is written as a v4-mapped IPv6 address). IPv6
/// flow labels and scope ids are not carried.
pub fn write_v2(out: &mut Vec<u8>, src: SocketAddr, dst: SocketAddr) {
    out.extend_from_slice(&V2_SIG);
    out.push(0x21); // version 2, PROXY
    match same_family(src, dst) {
        (SocketAddr::V4(s), SocketAddr::V4(d)) => {
            out.push(0x11); // AF_INET, STREAM
            out.extend_from_slice(&12u16.to_be_bytes());
            out.extend_from_slice(&s.ip().octets());
            out.extend_from_slice(&d.ip().octets());
        }
        (s, d) => {
            out.push(0x21); // AF_INET6, STREAM
            out.extend_from_slice(&36u16.to_be_bytes());
            for a in [s, d] {
                let octets = match a.ip() {
                    std::net::IpAddr::V6(ip) => ip.octets(),
                    std::net::IpAddr::V4(ip) => ip.to_ipv6_mapped().octets(),
                };
                out.extend_from_slice(&octets);
            }
        }
    }
    out.extend_from_slice(&src.port().to_be_bytes());
    out.extend_from_slice(&dst.port().to_be_bytes());
}

/// Appends `PROXY UNKNOWN\r\n` (version 1, addresses not known).
pub fn write_v1_unknown(out: &mut Vec<u8>) {
    out.extend_from_slice(b"PROXY UNKNOWN\r\n");
}

/// Appends a version 2 LOCAL header (AF_UNSPEC, no address block): for
/// connections the proxy makes on its own behalf, such as health checks.
pub fn write_v2_local(out: &mut Vec<u8>) {
    out.extend_from_slice(&V2_SIG);
    out.extend_from_slice(&[0x20, 0x00, 0x00, 0x00]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sa(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    fn done(buf: &[u8]) -> (ProxyHeader, usize) {
        match parse(buf) {
            Ok(Parse::Done { header, consumed }) => (header, consumed),
            other => panic!("{:?}: {other:?}", String::from_utf8_lossy(buf)),
        }
    }

    fn err(buf: &[u8]) -> &'static str {
        match parse(buf) {
            Err(ProxyError(e)) => e,
            other => panic!("{:?}: {other:?}", String::from_utf8_lossy(buf)),
        }
    }

    fn tcp(src: &str, dst: &str) -> ProxyHeader {
        ProxyHeader::Tcp {
            src: sa(src),
            dst: sa(dst),
        }
    }

    /// A v2 header with the given command/family bytes and block.
    fn v2(ver_cmd: u8, fam: u8, block: &[u8]) -> Vec<u8> {
        let mut out = V2_SIG.to_vec();
        out.push(ver_cmd);
        out.push(fam);
        out.extend_from_slice(&u16::try_from(block.len()).unwrap().to_be_bytes());
        out.extend_from_slice(block);
        out
    }

    /// The IPv4 address block of 192.0.2.1:1234 -> 198.51.100.2:80.
    const V4_BLOCK: [u8; 12] = [192, 0, 2, 1, 198, 51, 100, 2, 0x04, 0xd2, 0, 80];

    fn tlv(kind: u8, value: &[u8]) -> Vec<u8> {
        let mut out = vec![kind];
        out.extend_from_slice(&u16::try_from(value.len()).unwrap().to_be_bytes());
        out.extend_from_slice(value);
        out
    }

    /// A TCP4 v2 header with `tlvs` and a CRC32C TLV filled in correctly.
    fn v2_with_crc(tlvs: &[u8]) -> Vec<u8> {
        let mut block = V4_BLOCK.to_vec();
        block.extend_from_slice(tlvs);
        block.extend_from_slice(&tlv(PP2_TYPE_CRC32C, &[0; 4]));
        let mut h = v2(0x21, 0x11, &block);
        let crc = crc32c_finish(crc32c_update(!0, &h));
        let at = h.len() - 4;
        h[at..].copy_from_slice(&crc.to_be_bytes());
        h
    }

    #[test]
    fn crc32c_check_value() {
        assert_eq!(crc32c_finish(crc32c_update(!0, b"123456789")), 0xE306_9283);
        assert_eq!(crc32c_finish(crc32c_update(!0, b"")), 0);
    }

    // --- version 1 ---

    #[test]
    fn v1_specification_example() {
        let buf = b"PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\nGET / HTTP/1.1\r\nHost: 192.168.0.11\r\n\r\n";
        let (h, n) = done(buf);
        assert_eq!(h, tcp("192.168.0.1:56324", "192.168.0.11:443"));
        assert_eq!(&buf[n..], b"GET / HTTP/1.1\r\nHost: 192.168.0.11\r\n\r\n");
    }

    #[test]
    fn v1_longest_lines() {
        let v4 = b"PROXY TCP4 255.255.255.255 255.255.255.255 65535 65535\r\n";
        assert_eq!(v4.len(), 56);
        assert_eq!(
            done(v4),
            (tcp("255.255.255.255:65535", "255.255.255.255:65535"), 56)
        );
        let f = "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff";
        let v6 = format!("PROXY TCP6 {f} {f} 65535 65535\r\n");
        assert_eq!(v6.len(), 104);
        let a = format!("[{f}]:65535");
        assert_eq!(done(v6.as_bytes()), (tcp(&a, &a), 104));
        let unknown = format!("PROXY UNKNOWN {f} {f} 65535 65535\r\n");
        assert_eq!(unknown.len(), V1_MAX_LEN);
        assert_eq!(done(unknown.as_bytes()), (ProxyHeader::Unknown, 107));
        // One byte more does not fit.
        let long = format!("PROXY UNKNOWN {f} {f} 65535 655350\r\n");
        assert_eq!(err(long.as_bytes()), "v1 line longer than 107 bytes");
        assert_eq!(parse(&long.as_bytes()[..106]), Ok(Parse::Partial));
        assert_eq!(
            err(&long.as_bytes()[..107]),
            "v1 line longer than 107 bytes"
        );
    }

    #[test]
    fn v1_ipv6_forms() {
        for (line, src, dst) in [
            ("PROXY TCP6 ::1 ::1 1 2\r\n", "[::1]:1", "[::1]:2"),
            (
                "PROXY TCP6 :: 2001:DB8::A 0 80\r\n",
                "[::]:0",
                "[2001:db8::a]:80",
            ),
            (
                "PROXY TCP6 ::ffff:192.0.2.1 0001:0db8::1 1 2\r\n",
                "[::ffff:192.0.2.1]:1",
                "[1:db8::1]:2",
            ),
        ] {
            assert_eq!(done(line.as_bytes()), (tcp(src, dst), line.len()), "{line}");
        }
    }

    #[test]
    fn v1_unknown() {
        assert_eq!(done(b"PROXY UNKNOWN\r\n"), (ProxyHeader::Unknown, 15));
        assert_eq!(
            done(b"PROXY UNKNOWN whatever, ignored 1 2\r\nGET"),
            (ProxyHeader::Unknown, 37)
        );
        assert_eq!(done(b"PROXY UNKNOWN \r\n"), (ProxyHeader::Unknown, 16));
        assert_eq!(
            err(b"PROXY UNKNOWNX\r\n"),
            "v1 UNKNOWN not followed by a space or CRLF"
        );
        assert_eq!(
            err(b"PROXY UNKNOWN\n"),
            "v1 UNKNOWN not followed by a space or CRLF"
        );
        assert_eq!(err(b"PROXY UNKNOWN\rX"), "v1 line not ended by CRLF");
        assert_eq!(
            err(b"PROXY UNKNOWN a\tb\r\n"),
            "v1 invalid byte after UNKNOWN"
        );
        assert_eq!(
            err(b"PROXY UNKNOWN a\nb\r\n"),
            "v1 invalid byte after UNKNOWN"
        );
        assert_eq!(
            err(b"PROXY UNKNOWN \xff\r\n"),
            "v1 invalid byte after UNKNOWN"
        );
    }

    #[test]
    fn v1_errors() {
        let cases: &[(&[u8], &str)] = &[
            (b"GET / HTTP/1.1\r\n", "not a PROXY protocol header"),
            (b"PROXY\r\n", "not a PROXY protocol header"),
            (
                b"PROXY  TCP4 1.2.3.4 1.2.3.4 1 2\r\n",
                "v1 protocol is not TCP4, TCP6 or UNKNOWN",
            ),
            (
                b"proxy TCP4 1.2.3.4 1.2.3.4 1 2\r\n",
                "not a PROXY protocol header",
            ),
            (
                b"PROXY tcp4 1.2.3.4 1.2.3.4 1 2\r\n",
                "v1 protocol is not TCP4, TCP6 or UNKNOWN",
            ),
            (
                b"PROXY UDP4 1.2.3.4 1.2.3.4 1 2\r\n",
                "v1 protocol is not TCP4, TCP6 or UNKNOWN",
            ),
            (
                b"PROXY TCP4  1.2.3.4 1.2.3.4 1 2\r\n",
                "v1 invalid source address",
            ),
            (
                b"PROXY TCP4 1.2.3.4  1.2.3.4 1 2\r\n",
                "v1 invalid destination address",
            ),
            (
                b"PROXY TCP4 1.2.3.4 1.2.3.4  1 2\r\n",
                "v1 invalid source port",
            ),
            (
                b"PROXY TCP4 1.2.3.4 1.2.3.4 1  2\r\n",
                "v1 invalid destination port",
            ),
            (
                b"PROXY TCP4 1.2.3.4 1.2.3.4 1 2 \r\n",
                "v1 invalid destination port",
            ),
            (
                b"PROXY TCP4 1.2.3.4 1.2.3.4 1 2\n",
                "v1 invalid destination port",
            ),
            (
                b"PROXY TCP4 1.2.3.4 1.2.3.4 1 2\r\r\n",
                "v1 line not ended by CRLF",
            ),
            (
                b"PROXY TCP4 1.2.3.4 1.2.3.4 1 2\rX",
                "v1 line not ended by CRLF",
            ),
            (
                b"PROXY TCP4 1.2.3.4\t1.2.3.4 1 2\r\n",
                "v1 invalid source address",
            ),
            (
                b"PROXY TCP4 01.2.3.4 1.2.3.4 1 2\r\n",
                "v1 invalid source address",
            ),
            (
                b"PROXY TCP4 1.2.3.256 1.2.3.4 1 2\r\n",
                "v1 invalid source address",
            ),
            (
                b"PROXY TCP4 1.2.3 1.2.3.4 1 2\r\n",
                "v1 invalid source address",
            ),
            (
                b"PROXY TCP4 1.2.3.4.5 1.2.3.4 1 2\r\n",
                "v1 invalid source address",
            ),
            (
                b"PROXY TCP4 1..3.4 1.2.3.4 1 2\r\n",
                "v1 invalid source address",
            ),
            (
                b"PROXY TCP4 ::1 1.2.3.4 1 2\r\n",
                "v1 invalid source address",
            ),
            (
                b"PROXY TCP4 1.2.3.4 ::1 1 2\r\n",
                "v1 invalid destination address",
            ),
            (
                b"PROXY TCP6 1.2.3.4 ::1 1 2\r\n",
                "v1 invalid source address",
            ),
            (
                b"PROXY TCP6 ::1 1::2::3 1 2\r\n",
                "v1 invalid destination address",
            ),
            (
                b"PROXY TCP6 ::1%eth0 ::1 1 2\r\n",
                "v1 invalid source address",
            ),
            (b"PROXY TCP6 [::1] ::1 1 2\r\n", "v1 invalid source address"),
            (
                b"PROXY TCP6 00000::1 ::1 1 2\r\n",
                "v1 invalid source address",
            ),
            (
                b"PROXY TCP6 ::1:2:3:4:5:6:7:8 ::1 1 2\r\n",
                "v1 invalid source address",
            ),
            (
                b"PROXY TCP4 1.2.3.4 1.2.3.4 01 2\r\n",
                "v1 invalid source port",
            ),
            (
                b"PROXY TCP4 1.2.3.4 1.2.3.4 00 2\r\n",
                "v1 invalid source port",
            ),
            (
                b"PROXY TCP4 1.2.3.4 1.2.3.4 65536 2\r\n",
                "v1 invalid source port",
            ),
            (
                b"PROXY TCP4 1.2.3.4 1.2.3.4 1 65536\r\n",
                "v1 invalid destination port",
            ),
            (
                b"PROXY TCP4 1.2.3.4 1.2.3.4 1 -2\r\n",
                "v1 invalid destination port",
            ),
            (
                b"PROXY TCP4 1.2.3.4 1.2.3.4 +1 2\r\n",
                "v1 invalid source port",
            ),
            (
                b"PROXY TCP4 1.2.3.4 1.2.3.4 1 2 3\r\n",
                "v1 invalid destination port",
            ),
            (
                b"PROXY TCP4 1.2.3.4 1.2.3.4 1\r\n",
                "v1 invalid source port",
            ),
            (
                b"PROXY TCP4 1.2.3.4 1.2.3.4\r\n",
                "v1 invalid destination address",
            ),
        ];
        for &(line, want) in cases {
            assert_eq!(err(line), want, "{:?}", String::from_utf8_lossy(line));
        }
    }

    #[test]
    fn v1_edge_ports() {
        assert_eq!(
            done(b"PROXY TCP4 0.0.0.0 0.0.0.0 0 0\r\n").0,
            tcp("0.0.0.0:0", "0.0.0.0:0")
        );
        assert_eq!(
            done(b"PROXY TCP4 1.2.3.4 5.6.7.8 65535 10\r\n").0,
            tcp("1.2.3.4:65535", "5.6.7.8:10")
        );
    }

    #[test]
    fn v1_rejects_at_the_first_wrong_byte() {
        // A plain HTTP request is refused from its first byte on.
        assert_eq!(err(b"G"), "not a PROXY protocol header");
        assert_eq!(err(b"PRI * HTTP/2.0"), "not a PROXY protocol header");
        assert_eq!(err(b"\x16\x03\x01"), "not a PROXY protocol header");
        for (buf, want) in [
            (
                &b"PROXY TCP5"[..],
                "v1 protocol is not TCP4, TCP6 or UNKNOWN",
            ),
            (b"PROXY TCP4 1.2.3.", "v1 invalid source address"), // fine so far...
            (b"PROXY TCP4 256", "v1 invalid source address"),
            (b"PROXY TCP4 1.2.3.4.", "v1 invalid source address"),
            (b"PROXY TCP4 1..", "v1 invalid source address"),
            (b"PROXY TCP4 01", "v1 invalid source address"),
            (b"PROXY TCP6 1:::", "v1 invalid source address"),
            (b"PROXY TCP6 1::2::", "v1 invalid source address"),
            (
                b"PROXY TCP4 1.2.3.4 1.2.3.4 65536",
                "v1 invalid source port",
            ),
            (b"PROXY TCP4 1.2.3.4 1.2.3.4 0", "v1 invalid source port"),
        ] {
            if buf == b"PROXY TCP4 1.2.3." {
                assert_eq!(parse(buf), Ok(Parse::Partial)); // ...still a valid prefix
                continue;
            }
            if buf == b"PROXY TCP4 1.2.3.4 1.2.3.4 0" {
                assert_eq!(parse(buf), Ok(Parse::Partial)); // "0 " may follow
                assert_eq!(err(b"PROXY TCP4 1.2.3.4 1.2.3.4 00"), want);
                continue;
            }
            assert_eq!(err(buf), want, "{:?}", String::from_utf8_lossy(buf));
        }
    }

    #[test]
    fn v1_partial() {
        for buf in [
            &b""[..],
            b"P",
            b"PRO",
            b"PROXY",
            b"PROXY ",
            b"PROXY T",
            b"PROXY TCP",
            b"PROXY TCP4",
            b"PROXY U",
            b"PROXY UNKNOWN",
            b"PROXY UNKNOWN ",
            b"PROXY UNKNOWN ab",
            b"PROXY UNKNOWN\r",
            b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2",
            b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r",
            b"PROXY TCP6 ::1 ::",
            b"PROXY TCP6 ::ffff:1.2.3",
        ] {
            assert_eq!(
                parse(buf),
                Ok(Parse::Partial),
                "{:?}",
                String::from_utf8_lossy(buf)
            );
        }
    }

    // --- version 2 ---

    #[test]
    fn v2_tcp4_and_tcp6() {
        let h = v2(0x21, 0x11, &V4_BLOCK);
        let mut buf = h.clone();
        buf.extend_from_slice(b"GET /");
        assert_eq!(done(&buf), (tcp("192.0.2.1:1234", "198.51.100.2:80"), 28));

        let mut block = Vec::new();
        block.extend_from_slice(&"2001:db8::1".parse::<Ipv6Addr>().unwrap().octets());
        block.extend_from_slice(&"::ffff:10.0.0.1".parse::<Ipv6Addr>().unwrap().octets());
        block.extend_from_slice(&[0xff, 0xff, 0x01, 0xbb]);
        assert_eq!(
            done(&v2(0x21, 0x21, &block)),
            (tcp("[2001:db8::1]:65535", "[::ffff:10.0.0.1]:443"), 52)
        );
    }

    #[test]
    fn v2_local_ignores_family_and_block() {
        let mut out = Vec::new();
        write_v2_local(&mut out);
        assert_eq!(out, b"\r\n\r\n\0\r\nQUIT\n\x20\x00\x00\x00");
        assert_eq!(done(&out), (ProxyHeader::Local, 16));
        // Receivers must skip the announced length even for LOCAL.
        assert_eq!(done(&v2(0x20, 0x11, &V4_BLOCK)), (ProxyHeader::Local, 28));
        assert_eq!(done(&v2(0x20, 0xff, b"xyz")), (ProxyHeader::Local, 19));
        assert_eq!(done(&v2(0x20, 0x21, b"")), (ProxyHeader::Local, 16));
    }

    #[test]
    fn v2_unknown_families() {
        assert_eq!(done(&v2(0x21, 0x00, b"")), (ProxyHeader::Unknown, 16));
        assert_eq!(done(&v2(0x21, 0x00, b"opaque")), (ProxyHeader::Unknown, 22));
        assert_eq!(done(&v2(0x21, 0x12, &V4_BLOCK)), (ProxyHeader::Unknown, 28));
        assert_eq!(done(&v2(0x21, 0x22, &[0; 36])), (ProxyHeader::Unknown, 52));
        assert_eq!(
            done(&v2(0x21, 0x31, &[0; 216])),
            (ProxyHeader::Unknown, 232)
        );
        assert_eq!(
            done(&v2(0x21, 0x32, &[0; 216])),
            (ProxyHeader::Unknown, 232)
        );
    }

    #[test]
    fn v2_tlvs_are_skipped() {
        let mut block = V4_BLOCK.to_vec();
        block.extend_from_slice(&tlv(0x01, b"h2")); // ALPN
        block.extend_from_slice(&tlv(0x04, b"")); // NOOP
        block.extend_from_slice(&tlv(0xEA, &[1; 40])); // vendor (AWS-style)
        let (h, n) = done(&v2(0x21, 0x11, &block));
        assert_eq!(h, tcp("192.0.2.1:1234", "198.51.100.2:80"));
        assert_eq!(n, 16 + block.len());
    }

    #[test]
    fn v2_crc32c() {
        let good = v2_with_crc(&tlv(0x02, b"example.com"));
        assert_eq!(done(&good).1, good.len());
        // Every single-bit flip after the fixed part is caught (by the CRC,
        // or by the framing it breaks).
        let crc_type_at = good.len() - 7;
        assert_eq!(good[crc_type_at], PP2_TYPE_CRC32C);
        for i in V2_FIXED..good.len() {
            if i == crc_type_at {
                continue; // turns the checksum into an unknown TLV
            }
            let mut bad = good.clone();
            bad[i] ^= 0x10;
            assert!(parse(&bad).is_err(), "flip at {i}");
        }
        let mut bad = good.clone();
        let at = bad.len() - 1;
        bad[at] ^= 1;
        assert_eq!(err(&bad), "v2 CRC32C mismatch");

        let mut block = V4_BLOCK.to_vec();
        block.extend_from_slice(&tlv(PP2_TYPE_CRC32C, &[0; 3]));
        assert_eq!(err(&v2(0x21, 0x11, &block)), "v2 CRC32C TLV is not 4 bytes");
        let twice = v2_with_crc(&tlv(PP2_TYPE_CRC32C, &[0; 4]));
        assert_eq!(err(&twice), "v2 duplicate CRC32C TLV");
    }

    #[test]
    fn v2_errors() {
        let mut sig = V2_SIG.to_vec();
        sig[11] = b'X';
        assert_eq!(err(&sig), "not a PROXY protocol header");
        assert_eq!(err(b"\r\n\r\n\r\n"), "not a PROXY protocol header");
        assert_eq!(err(&v2(0x11, 0x11, &V4_BLOCK)), "v2 version is not 2");
        assert_eq!(err(&v2(0x31, 0x11, &V4_BLOCK)), "v2 version is not 2");
        assert_eq!(err(&v2(0x01, 0x11, &V4_BLOCK)), "v2 version is not 2");
        assert_eq!(
            err(&v2(0x22, 0x11, &V4_BLOCK)),
            "v2 command is not LOCAL or PROXY"
        );
        assert_eq!(
            err(&v2(0x2f, 0x11, &V4_BLOCK)),
            "v2 command is not LOCAL or PROXY"
        );
        for fam in [0x01, 0x02, 0x10, 0x13, 0x20, 0x30, 0x33, 0x41, 0xff] {
            assert_eq!(
                err(&v2(0x21, fam, &V4_BLOCK)),
                "v2 unknown address family or transport",
                "{fam:#x}"
            );
        }
        assert_eq!(
            err(&v2(0x21, 0x11, &V4_BLOCK[..11])),
            "v2 length shorter than the address block"
        );
        assert_eq!(
            err(&v2(0x21, 0x21, &[0; 35])),
            "v2 length shorter than the address block"
        );
        assert_eq!(
            err(&v2(0x21, 0x31, &[0; 215])),
            "v2 length shorter than the address block"
        );
        assert_eq!(
            err(&v2(0x21, 0x11, &[])),
            "v2 length shorter than the address block"
        );
        // The largest header accepted, then one byte more.
        let mut block = V4_BLOCK.to_vec();
        block.extend_from_slice(&tlv(0x04, &[0; V2_MAX_LEN - 16 - 12 - 3]));
        assert_eq!(done(&v2(0x21, 0x11, &block)).1, V2_MAX_LEN);
        block.push(0);
        assert_eq!(
            err(&v2(0x21, 0x11, &block)),
            "v2 header longer than 536 bytes"
        );
        // Rejected from the length field on, before the block arrives.
        assert_eq!(
            err(&v2(0x21, 0x11, &block)[..16]),
            "v2 header longer than 536 bytes"
        );
        assert_eq!(
            err(&v2(0x20, 0x00, &[0; 600])[..16]),
            "v2 header longer than 536 bytes"
        );
        // TLV framing.
        let mut block = V4_BLOCK.to_vec();
        block.extend_from_slice(&[0x01, 0x00]);
        assert_eq!(err(&v2(0x21, 0x11, &block)), "v2 truncated TLV");
        let mut block = V4_BLOCK.to_vec();
        block.extend_from_slice(&[0x01, 0x00, 0x03, b'a', b'b']);
        assert_eq!(
            err(&v2(0x21, 0x11, &block)),
            "v2 TLV longer than the header"
        );
    }

    #[test]
    fn v2_partial_and_early_rejection() {
        let h = v2(0x21, 0x11, &V4_BLOCK);
        assert_eq!(parse(&h[..1]), Ok(Parse::Partial));
        assert_eq!(parse(&h[..10]), Ok(Parse::Partial));
        assert_eq!(parse(&h[..16]), Ok(Parse::Partial));
        assert_eq!(parse(&h[..27]), Ok(Parse::Partial));
        // Bad bytes are refused as soon as they are seen.
        assert_eq!(err(&v2(0x11, 0, b"")[..13]), "v2 version is not 2");
        assert_eq!(
            err(&v2(0x25, 0, b"")[..13]),
            "v2 command is not LOCAL or PROXY"
        );
        assert_eq!(
            err(&v2(0x21, 0x44, b"")[..14]),
            "v2 unknown address family or transport"
        );
        assert_eq!(
            err(&v2(0x21, 0x21, &[0; 12])[..16]),
            "v2 length shorter than the address block"
        );
    }

    // --- writing ---

    #[test]
    fn writers() {
        let mut out = Vec::new();
        write_v1(&mut out, sa("192.0.2.1:1234"), sa("198.51.100.2:80"));
        assert_eq!(out, b"PROXY TCP4 192.0.2.1 198.51.100.2 1234 80\r\n");
        out.clear();
        write_v1(&mut out, sa("192.0.2.1:1234"), sa("[2001:db8::2]:80"));
        assert_eq!(out, b"PROXY TCP6 ::ffff:192.0.2.1 2001:db8::2 1234 80\r\n");
        out.clear();
        write_v1_unknown(&mut out);
        assert_eq!(out, b"PROXY UNKNOWN\r\n");
        assert_eq!(done(&out), (ProxyHeader::Unknown, 15));
        out.clear();
        write_v2(&mut out, sa("192.0.2.1:1234"), sa("198.51.100.2:80"));
        assert_eq!(out, v2(0x21, 0x11, &V4_BLOCK));
        out.clear();
        write_v2(&mut out, sa("[2001:db8::1]:1"), sa("198.51.100.2:80"));
        assert_eq!(
            done(&out),
            (tcp("[2001:db8::1]:1", "[::ffff:198.51.100.2]:80"), 52)
        );
        // Appends; does not clear.
        let mut out = b"x".to_vec();
        write_v2_local(&mut out);
        assert_eq!(out.len(), 17);
        assert_eq!(
            ProxyError("x").to_string(),
            "invalid PROXY protocol header: x"
        );
    }

    // --- properties ---

    fn addr() -> impl Strategy<Value = SocketAddr> {
        prop_oneof![
            (any::<[u8; 4]>(), any::<u16>()).prop_map(|(ip, port)| SocketAddr::from((ip, port))),
            (any::<[u8; 16]>(), any::<u16>()).prop_map(|(ip, port)| SocketAddr::from((ip, port))),
            // v4-mapped and other special forms print differently.
            (any::<[u8; 4]>(), any::<u16>()).prop_map(|(ip, port)| {
                SocketAddr::from((Ipv4Addr::from(ip).to_ipv6_mapped(), port))
            }),
            (any::<u16>(), any::<u16>()).prop_map(|(last, port)| SocketAddr::from((
                Ipv6Addr::new(0, 0, 0, 0, 0, 0, 0, last),
                port
            ))),
        ]
    }

    fn expected(src: SocketAddr, dst: SocketAddr) -> ProxyHeader {
        let (src, dst) = same_family(src, dst);
        ProxyHeader::Tcp { src, dst }
    }

    /// Valid headers of every kind: written ones, and v2 with TLVs/CRC.
    fn valid_header() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            (addr(), addr()).prop_map(|(s, d)| {
                let mut out = Vec::new();
                write_v1(&mut out, s, d);
                out
            }),
            (addr(), addr()).prop_map(|(s, d)| {
                let mut out = Vec::new();
                write_v2(&mut out, s, d);
                out
            }),
            Just(b"PROXY UNKNOWN\r\n".to_vec()),
            "[ -~]{0,91}".prop_map(|rest| format!("PROXY UNKNOWN {rest}\r\n").into_bytes()),
            Just(v2(0x20, 0x00, b"")),
            proptest::collection::vec(any::<u8>(), 0..=64).prop_map(|b| v2(0x20, 0x12, &b)),
            proptest::collection::vec(
                (any::<u8>(), proptest::collection::vec(any::<u8>(), 0..20)),
                0..5
            )
            .prop_map(|tlvs| {
                let bytes: Vec<u8> = tlvs
                    .iter()
                    .filter(|(k, _)| *k != PP2_TYPE_CRC32C)
                    .flat_map(|(k, v)| tlv(*k, v))
                    .collect();
                v2_with_crc(&bytes)
            }),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn never_panics(buf in proptest::collection::vec(any::<u8>(), 0..600)) {
            let _ = parse(&buf);
        }

        #[test]
        fn never_panics_near_signatures(
            v1 in any::<bool>(),
            tail in proptest::collection::vec(
                prop_oneof![Just(b' '), Just(b'\r'), Just(b'\n'), Just(b':'), Just(b'.'), Just(b'0'), Just(b'9'), Just(b'f'), any::<u8>()],
                0..120,
            ),
        ) {
            let mut buf = if v1 { b"PROXY TCP4 ".to_vec() } else { V2_SIG.to_vec() };
            buf.extend_from_slice(&tail);
            let _ = parse(&buf);
            if !v1 && buf.len() > 13 {
                // A valid version/command and family, so the rest is looked at.
                buf[12] = 0x20 | (buf[12] & 1);
                buf[13] = [0x00, 0x11, 0x12, 0x21, 0x22, 0x31, 0x32][usize::from(buf[13] % 7)];
                let _ = parse(&buf);
            }
        }

        #[test]
        fn round_trip_v1(src in addr(), dst in addr(), tail in proptest::collection::vec(any::<u8>(), 0..8)) {
            let mut out = Vec::new();
            write_v1(&mut out, src, dst);
            let n = out.len();
            prop_assert!(n <= V1_MAX_LEN);
            out.extend_from_slice(&tail);
            prop_assert_eq!(parse(&out), Ok(Parse::Done { header: expected(src, dst), consumed: n }));
        }

        #[test]
        fn round_trip_v2(src in addr(), dst in addr(), tail in proptest::collection::vec(any::<u8>(), 0..8)) {
            let mut out = Vec::new();
            write_v2(&mut out, src, dst);
            let n = out.len();
            out.extend_from_slice(&tail);
            prop_assert_eq!(parse(&out), Ok(Parse::Done { header: expected(src, dst), consumed: n }));
        }

        #[test]
        fn prefixes_are_partial(h in valid_header()) {
            let Ok(Parse::Done { consumed, .. }) = parse(&h) else {
                return Err(TestCaseError::fail(format!("not valid: {h:?}")));
            };
            prop_assert_eq!(consumed, h.len());
            for k in 0..h.len() {
                prop_assert_eq!(parse(&h[..k]), Ok(Parse::Partial), "prefix {}", k);
            }
        }

        /// Once an input is refused, no continuation makes it acceptable, and
        /// a completed header does not depend on what follows.
        #[test]
        fn verdicts_are_stable(h in valid_header(), cut in any::<prop::sample::Index>(), junk in proptest::collection::vec(any::<u8>(), 1..40)) {
            let at = cut.index(h.len());
            let mut bad = h[..at].to_vec();
            bad.extend_from_slice(&junk);
            let full = parse(&h);
            match parse(&bad) {
                Err(_) => {
                    let mut longer = bad.clone();
                    longer.extend_from_slice(&h);
                    prop_assert!(parse(&longer).is_err());
                }
                Ok(Parse::Done { consumed, .. }) => {
                    prop_assert_eq!(parse(&bad[..consumed]), parse(&bad));
                }
                Ok(Parse::Partial) => prop_assert!(bad.len() < V2_MAX_LEN),
            }
            let mut more = h.clone();
            more.extend_from_slice(&junk);
            prop_assert_eq!(parse(&more), full);
        }
    }
}
