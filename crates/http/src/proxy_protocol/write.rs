//! Writing headers in front of a connection to a backend: version 1 and 2, PROXY (with the
//! client's addresses) and LOCAL/UNKNOWN (without).

use std::net::{SocketAddr, SocketAddrV6};

use super::header::V2_SIG;

/// Both addresses in one family: if they differ, the IPv4 one becomes a
/// v4-mapped IPv6 address.
pub(super) fn same_family(src: SocketAddr, dst: SocketAddr) -> (SocketAddr, SocketAddr) {
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
