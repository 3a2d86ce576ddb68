//! Version 1: the text line `PROXY TCP4|TCP6|UNKNOWN ... CRLF`, parsed byte by byte so that a
//! wrong byte is rejected as soon as it arrives.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};

use super::header::{Parse, ProxyError, ProxyHeader, NOT_PROXY, V1_MAX_LEN};

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

pub(super) fn parse(buf: &[u8]) -> Result<Parse, ProxyError> {
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
