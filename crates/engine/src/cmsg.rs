//! The control messages of datagrams, received and sent: the destination address
//! (`IP_PKTINFO` / `IPV6_PKTINFO`: which address of a multi-address host the client wrote
//! to, and the source to answer from), the segment size of coalesced datagrams (`UDP_GRO`
//! on receive, `UDP_SEGMENT` on send: several datagrams in one pass through the stack) and
//! the ECN bits of the IP header (`IP_TOS` / `IPV6_TCLASS`, RFC 3168; QUIC reports them to
//! its peer, RFC 9000 §13.4).
//!
//! The libc crate has the `CMSG_*` arithmetic but no safe writer or reader: the two here
//! handle exactly these messages, in a buffer of [`CONTROL_SPACE`] 8-aligned bytes.

use std::net::{IpAddr, SocketAddr};

use crate::send_to::SendTo;

/// Room for every control message one datagram carries: an `IPV6_PKTINFO` (40 bytes with
/// its header), a segment size (24) and a traffic class (24), with some to spare.
pub(crate) const CONTROL_SPACE: usize = 128;

/// A control buffer: 8-aligned, as `cmsghdr` wants.
pub(crate) type ControlBuf = [u64; CONTROL_SPACE / 8];

use crate::sys::{UDP_GRO, UDP_SEGMENT};

/// What the control messages of a received datagram say.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Received {
    /// The address the datagram was sent to (wildcard listeners).
    pub local: Option<IpAddr>,
    /// The datagrams were coalesced by the kernel (`UDP_GRO`): each is this long but the
    /// last; 0: one datagram.
    pub segment: u16,
    /// The ECN bits of the IP header (0: not ECN-capable).
    pub ecn: u8,
}

/// Reads the control messages of a received datagram (`control`: the kernel's
/// `msg_control` bytes). Messages it does not know, or that are cut short, are skipped.
pub(crate) fn parse(control: &[u8]) -> Received {
    const HDR: usize = std::mem::size_of::<libc::cmsghdr>();
    let mut got = Received::default();
    let mut off = 0;
    while off + HDR <= control.len() {
        // SAFETY: HDR bytes from `off` are inside the slice (checked above); read_unaligned
        // because the control area has no alignment guarantee in a receive buffer.
        let h: libc::cmsghdr =
            unsafe { std::ptr::read_unaligned(control.as_ptr().add(off).cast()) };
        let len = h.cmsg_len;
        if len < HDR || off + len > control.len() {
            break;
        }
        let data = &control[off + HDR..off + len];
        match (h.cmsg_level, h.cmsg_type) {
            (libc::IPPROTO_IP, libc::IP_PKTINFO)
                if data.len() >= std::mem::size_of::<libc::in_pktinfo>() =>
            {
                // SAFETY: the message holds a whole in_pktinfo (length checked); unaligned read.
                let p: libc::in_pktinfo = unsafe { std::ptr::read_unaligned(data.as_ptr().cast()) };
                got.local = Some(IpAddr::from(p.ipi_addr.s_addr.to_ne_bytes()));
            }
            (libc::IPPROTO_IPV6, libc::IPV6_PKTINFO)
                if data.len() >= std::mem::size_of::<libc::in6_pktinfo>() =>
            {
                // SAFETY: as above, for in6_pktinfo.
                let p: libc::in6_pktinfo =
                    unsafe { std::ptr::read_unaligned(data.as_ptr().cast()) };
                got.local = Some(IpAddr::from(p.ipi6_addr.s6_addr));
            }
            (libc::SOL_UDP, UDP_GRO) => {
                got.segment = read_int(data).map_or(0, |n| u16::try_from(n).unwrap_or(0));
            }
            // The kernel gives IP_TOS as one byte on receive, IPV6_TCLASS as an int.
            (libc::IPPROTO_IP, libc::IP_TOS) if !data.is_empty() => got.ecn = data[0] & 0b11,
            (libc::IPPROTO_IPV6, libc::IPV6_TCLASS) => {
                got.ecn = read_int(data).map_or(0, |n| (n & 0b11) as u8);
            }
            _ => {}
        }
        // Each message is padded to the next multiple of the header's alignment.
        off += len.next_multiple_of(std::mem::align_of::<libc::cmsghdr>());
    }
    got
}

fn read_int(data: &[u8]) -> Option<libc::c_int> {
    let b: [u8; 4] = data.get(..4)?.try_into().ok()?;
    Some(libc::c_int::from_ne_bytes(b))
}

/// Writes into `buf` the control messages of send `s`; returns their length (0: none).
pub(crate) fn write(buf: &mut ControlBuf, s: &SendTo) -> usize {
    let mut n = 0;
    if let Some(from) = s.from {
        n = write_pktinfo(buf, n, from);
    }
    if s.segment > 0 {
        n = push(
            buf,
            n,
            (libc::SOL_UDP, UDP_SEGMENT),
            &s.segment.to_ne_bytes(),
        );
    }
    if s.ecn != 0 {
        let tos = libc::c_int::from(s.ecn & 0b11).to_ne_bytes();
        // An IPv4 peer on an IPv6 socket (a mapped address) takes the IPv4 option.
        let v4 = match s.to {
            SocketAddr::V4(_) => true,
            SocketAddr::V6(a) => a.ip().to_ipv4_mapped().is_some(),
        };
        let which = if v4 {
            (libc::IPPROTO_IP, libc::IP_TOS)
        } else {
            (libc::IPPROTO_IPV6, libc::IPV6_TCLASS)
        };
        n = push(buf, n, which, &tos);
    }
    n
}

/// The `IP_PKTINFO` (`ipi_spec_dst`) or `IPV6_PKTINFO` (`ipi6_addr`) that makes a datagram
/// leave from `from`, written at `n`; returns the new length.
fn write_pktinfo(buf: &mut ControlBuf, n: usize, from: IpAddr) -> usize {
    match from {
        IpAddr::V4(a) => {
            let p = libc::in_pktinfo {
                ipi_ifindex: 0,
                ipi_spec_dst: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.octets()),
                },
                ipi_addr: libc::in_addr { s_addr: 0 },
            };
            // SAFETY: in_pktinfo is plain data without padding (three 4-byte fields).
            let bytes = unsafe { as_bytes(&p) };
            push(buf, n, (libc::IPPROTO_IP, libc::IP_PKTINFO), bytes)
        }
        IpAddr::V6(a) => {
            let p = libc::in6_pktinfo {
                ipi6_addr: libc::in6_addr {
                    s6_addr: a.octets(),
                },
                ipi6_ifindex: 0,
            };
            // SAFETY: in6_pktinfo is plain data without padding (16 bytes, then a u32).
            let bytes = unsafe { as_bytes(&p) };
            push(buf, n, (libc::IPPROTO_IPV6, libc::IPV6_PKTINFO), bytes)
        }
    }
}

/// The bytes of `v`.
///
/// # Safety
/// `T` must have no padding bytes (every byte of it initialised).
unsafe fn as_bytes<T>(v: &T) -> &[u8] {
    // SAFETY: `v` is a live reference of size_of::<T>() bytes, all initialised (the caller's
    // promise); the slice borrows it.
    unsafe { std::slice::from_raw_parts((v as *const T).cast(), std::mem::size_of::<T>()) }
}

/// Appends one control message (`level`, `ty`, `payload`) at offset `n` of `buf`; returns
/// the new length. Panics if the buffer is too small, which [`CONTROL_SPACE`] rules out for
/// the messages this module writes.
fn push(buf: &mut ControlBuf, n: usize, (level, ty): (i32, i32), payload: &[u8]) -> usize {
    let p = payload.len() as u32;
    // SAFETY: CMSG_LEN/CMSG_SPACE are arithmetic on the payload size.
    let (len, space) = unsafe { (libc::CMSG_LEN(p) as usize, libc::CMSG_SPACE(p) as usize) };
    assert!(
        n + space <= CONTROL_SPACE,
        "control messages overflow their buffer"
    );
    let hdr = libc::cmsghdr {
        cmsg_len: len as _,
        cmsg_level: level,
        cmsg_type: ty,
    };
    let bytes = buf.as_mut_ptr().cast::<u8>();
    // SAFETY: `n` is a multiple of the header's alignment (each message is CMSG_SPACE long,
    // which pads to it) and `n + space` bytes fit in the buffer (asserted): every write stays
    // inside it, and the header write is aligned (the buffer is u64s).
    unsafe {
        std::ptr::write_bytes(bytes.add(n), 0, space);
        std::ptr::write(bytes.add(n).cast::<libc::cmsghdr>(), hdr);
        let data = bytes.add(n + std::mem::size_of::<libc::cmsghdr>());
        std::ptr::copy_nonoverlapping(payload.as_ptr(), data, payload.len());
    }
    n + space
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(buf: &ControlBuf, n: usize) -> Vec<u8> {
        // SAFETY: the array is CONTROL_SPACE initialised bytes, n of them written.
        unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), n) }.to_vec()
    }

    /// The (level, type, payload) of each message in `b`.
    fn walk(b: &[u8]) -> Vec<(i32, i32, Vec<u8>)> {
        const HDR: usize = std::mem::size_of::<libc::cmsghdr>();
        let mut out = Vec::new();
        let mut off = 0;
        while off + HDR <= b.len() {
            // SAFETY: HDR bytes are inside the slice.
            let h: libc::cmsghdr = unsafe { std::ptr::read_unaligned(b.as_ptr().add(off).cast()) };
            out.push((
                h.cmsg_level,
                h.cmsg_type,
                b[off + HDR..off + h.cmsg_len].to_vec(),
            ));
            off += h.cmsg_len.next_multiple_of(8);
        }
        out
    }

    /// What the kernel gives on receive (the destination in `ipi_addr`, `UDP_GRO` as an int,
    /// `IP_TOS` as one byte, `IPV6_TCLASS` as an int) reads back; garbage reads as nothing.
    #[test]
    fn parse_what_the_kernel_gives() {
        let mut buf = [0u64; CONTROL_SPACE / 8];
        let p = libc::in_pktinfo {
            ipi_ifindex: 2,
            ipi_spec_dst: libc::in_addr { s_addr: 0 },
            ipi_addr: libc::in_addr {
                s_addr: u32::from_ne_bytes([192, 0, 2, 7]),
            },
        };
        // SAFETY: in_pktinfo has no padding.
        let n = push(&mut buf, 0, (libc::IPPROTO_IP, libc::IP_PKTINFO), unsafe {
            as_bytes(&p)
        });
        let n = push(
            &mut buf,
            n,
            (libc::SOL_UDP, UDP_GRO),
            &1200i32.to_ne_bytes(),
        );
        let n = push(
            &mut buf,
            n,
            (libc::IPPROTO_IP, libc::IP_TOS),
            &[0b1110_0110],
        );
        let got = parse(&bytes(&buf, n));
        assert_eq!(got.local, Some("192.0.2.7".parse().unwrap()));
        assert_eq!((got.segment, got.ecn), (1200, 0b10));

        let p6 = libc::in6_pktinfo {
            ipi6_addr: libc::in6_addr {
                s6_addr: "2001:db8::7"
                    .parse::<std::net::Ipv6Addr>()
                    .unwrap()
                    .octets(),
            },
            ipi6_ifindex: 2,
        };
        // SAFETY: in6_pktinfo has no padding.
        let n = push(
            &mut buf,
            0,
            (libc::IPPROTO_IPV6, libc::IPV6_PKTINFO),
            unsafe { as_bytes(&p6) },
        );
        let n = push(
            &mut buf,
            n,
            (libc::IPPROTO_IPV6, libc::IPV6_TCLASS),
            &3i32.to_ne_bytes(),
        );
        let got = parse(&bytes(&buf, n));
        assert_eq!(got.local, Some("2001:db8::7".parse().unwrap()));
        assert_eq!((got.segment, got.ecn), (0, 3));

        assert_eq!(parse(&[1, 2, 3]), Received::default());
        assert_eq!(parse(&[0xff; 40]), Received::default());
        assert_eq!(parse(&[]), Received::default());
    }

    /// A send's messages: the source, the segment size, and the ECN bits in the option of
    /// the peer's family (an IPv4-mapped peer on an IPv6 socket takes IP_TOS); a plain send
    /// writes nothing.
    #[test]
    fn write_each_message() {
        let mut buf = [0u64; CONTROL_SPACE / 8];
        let v4: SocketAddr = "198.51.100.1:443".parse().unwrap();
        assert_eq!(write(&mut buf, &SendTo::one(v4, None)), 0);
        assert!(SendTo::one(v4, None).is_plain());
        let s = SendTo {
            to: "[2001:db8::1]:443".parse().unwrap(),
            from: Some("2001:db8::7".parse().unwrap()),
            segment: 1350,
            ecn: 0b01,
        };
        let n = write(&mut buf, &s);
        let m = walk(&bytes(&buf, n));
        assert_eq!(m.len(), 3);
        assert_eq!((m[0].0, m[0].1), (libc::IPPROTO_IPV6, libc::IPV6_PKTINFO));
        assert_eq!(
            m[0].2[..16],
            "2001:db8::7"
                .parse::<std::net::Ipv6Addr>()
                .unwrap()
                .octets()
        );
        assert_eq!(
            (m[1].0, m[1].1, m[1].2.clone()),
            (libc::SOL_UDP, UDP_SEGMENT, 1350u16.to_ne_bytes().to_vec())
        );
        assert_eq!(
            (m[2].0, m[2].1, m[2].2.clone()),
            (
                libc::IPPROTO_IPV6,
                libc::IPV6_TCLASS,
                1i32.to_ne_bytes().to_vec()
            )
        );

        let mapped: SocketAddr = "[::ffff:192.0.2.1]:443".parse().unwrap();
        for to in [mapped, v4] {
            let s = SendTo {
                ecn: 0b10,
                ..SendTo::one(to, None)
            };
            let n = write(&mut buf, &s);
            let m = walk(&bytes(&buf, n));
            assert_eq!(
                m,
                vec![(libc::IPPROTO_IP, libc::IP_TOS, 2i32.to_ne_bytes().to_vec())]
            );
        }
    }
}
