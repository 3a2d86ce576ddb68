//! Datagrams: what a UDP listener receives ([`Datagram`], handed to
//! [`Handler::on_datagram`](crate::Handler::on_datagram)), and the sends a handler queues on
//! [`Io`] — answers from a UDP listener to a client ([`Io::send_to`]) and datagrams on a
//! connected UDP socket opened with [`ConnectTo::datagram`](crate::ConnectTo::datagram)
//! ([`Io::send_datagram`]).
//!
//! Every datagram send owns a copy of its bytes until its completion (io_uring) or its system
//! call (epoll) is over, so a handler can send straight from the receive buffer it was handed.
//! Sends are not ordered against each other and never wait: UDP has no flow control, so at
//! the zone's limit of sends queued or in flight ([`crate::ZoneConfig::max_datagrams_queued`])
//! a send is refused (counted in [`DgramStats::queue_full`]) as a full socket buffer would
//! drop it; the handler decides what that means. The datagrams a callback batch queued go
//! out before the closes it queued, so a handler may send its last datagram on a socket and
//! close it in the same callback.

use std::net::{IpAddr, SocketAddr};

use crate::io::{ConnId, ConnState, DgramOut, DgramStats, DgramTo, Io, ListenerId};

/// A datagram received on a UDP listener.
#[derive(Clone, Copy, Debug)]
pub struct Datagram<'a> {
    /// Who sent it.
    pub peer: SocketAddr,
    /// The address it was sent to, when the listener is bound to a wildcard address (the
    /// kernel's `IP_PKTINFO`); answer from it with [`Io::send_to`]'s `from`.
    pub local: Option<IpAddr>,
    /// Its bytes: borrowed from the driver's receive buffer, valid during the callback only.
    pub data: &'a [u8],
    /// It was larger than the zone's datagram buffers ([`crate::ZoneConfig::dgram_buffer_size`]):
    /// `data` holds only its first bytes.
    pub truncated: bool,
}

/// Spare datagram buffers a zone keeps (the sends' vectors, reused).
const MAX_DGRAM_SPARES: usize = 256;

impl Io {
    /// Sends `data` as one datagram from UDP listener `listener` to `to`; for a listener bound
    /// to a wildcard address, `from` picks the source address (the [`Datagram::local`] the
    /// client wrote to). False when the zone's queue of sends is full: nothing is sent.
    pub fn send_to(
        &mut self,
        listener: ListenerId,
        to: SocketAddr,
        from: Option<IpAddr>,
        data: &[u8],
    ) -> bool {
        self.send_segments(listener, to, from, data, 0)
    }

    /// [`send_to`](Self::send_to) for several datagrams of `segment` bytes each (the last
    /// may be shorter) in one send, which the kernel cuts up (UDP GSO, `UDP_SEGMENT`): one
    /// pass through the stack for up to 64 datagrams. `segment` 0: `data` is one datagram.
    /// Where a segmented send fails, [`Io::gso_works`] turns false and the caller sends one
    /// datagram at a time from then on.
    pub fn send_segments(
        &mut self,
        listener: ListenerId,
        to: SocketAddr,
        from: Option<IpAddr>,
        data: &[u8],
        segment: u16,
    ) -> bool {
        let segment = if usize::from(segment) >= data.len() {
            0 // one datagram: no segmentation to ask for
        } else {
            segment
        };
        self.queue_dgram(
            DgramTo::Listener {
                id: listener,
                peer: to,
                from,
                segment,
            },
            data,
        )
    }

    /// Whether the sockets take segmented sends ([`send_segments`](Self::send_segments)):
    /// true until one failed (a kernel or device without UDP GSO).
    pub fn gso_works(&self) -> bool {
        !self.gso_failed
    }

    /// Sends `data` as one datagram on `c`, a socket opened with
    /// [`ConnectTo::datagram`](crate::ConnectTo::datagram) and connected
    /// ([`Handler::on_connected`](crate::Handler::on_connected) was called). False when it is
    /// not open, or the zone's queue of sends is full: nothing is sent.
    pub fn send_datagram(&mut self, c: ConnId, data: &[u8]) -> bool {
        let Some(conn) = self.conns.get(c.index()) else {
            return false;
        };
        if conn.state != ConnState::Open || !conn.dgram {
            return false;
        }
        let gen = conn.gen;
        self.queue_dgram(DgramTo::Conn { c, gen }, data)
    }

    /// The zone's datagram counters so far.
    pub fn dgram_stats(&self) -> DgramStats {
        self.dgram_stats
    }

    /// Datagram sends queued or in flight.
    pub fn dgrams_pending(&self) -> u32 {
        self.dgram_pending
    }

    fn queue_dgram(&mut self, to: DgramTo, data: &[u8]) -> bool {
        if self.dgram_pending >= self.dgram_limit {
            self.dgram_stats.queue_full += 1;
            return false;
        }
        let mut buf = self.dgram_spares.pop().unwrap_or_default();
        buf.extend_from_slice(data);
        self.dgram_pending += 1;
        self.dgram_out.push(DgramOut { to, buf });
        true
    }

    /// A segmented send failed for a reason segmentation explains (`EIO`: the device cannot
    /// segment; `EINVAL`: a kernel without UDP GSO, or segments it refuses): no more are
    /// asked for.
    pub(crate) fn gso_failed(&mut self, errno: i32) {
        if matches!(errno, libc::EIO | libc::EINVAL | libc::EOPNOTSUPP) && !self.gso_failed {
            tracing::warn!(
                "UDP GSO: a segmented send failed ({}): datagrams go one by one from now on",
                std::io::Error::from_raw_os_error(errno)
            );
            self.gso_failed = true;
        }
    }

    /// A send is over (sent or failed): its buffer is kept for the next one.
    pub(crate) fn dgram_done(&mut self, mut buf: Vec<u8>, ok: bool) {
        self.dgram_pending = self.dgram_pending.saturating_sub(1);
        if ok {
            self.dgram_stats.sent += 1;
        } else {
            self.dgram_stats.send_errors += 1;
        }
        if self.dgram_spares.len() < MAX_DGRAM_SPARES && buf.capacity() <= 64 * 1024 {
            buf.clear();
            self.dgram_spares.push(buf);
        }
    }
}

/// Control message space for one `IP_PKTINFO` or `IPV6_PKTINFO`, with room to spare.
pub(crate) const PKTINFO_SPACE: usize = 64;

/// The destination address of a received datagram, from its `IP_PKTINFO` / `IPV6_PKTINFO`
/// control message (`control`: the kernel's `msg_control` bytes). `None` without one.
pub(crate) fn parse_pktinfo(control: &[u8]) -> Option<IpAddr> {
    const HDR: usize = std::mem::size_of::<libc::cmsghdr>();
    let mut off = 0;
    while off + HDR <= control.len() {
        // SAFETY: HDR bytes from `off` are inside the slice (checked above); read_unaligned
        // because the control area has no alignment guarantee in a receive buffer.
        let h: libc::cmsghdr =
            unsafe { std::ptr::read_unaligned(control.as_ptr().add(off).cast()) };
        let len = h.cmsg_len;
        if len < HDR || off + len > control.len() {
            return None;
        }
        let data = &control[off + HDR..off + len];
        match (h.cmsg_level, h.cmsg_type) {
            (libc::IPPROTO_IP, libc::IP_PKTINFO)
                if data.len() >= std::mem::size_of::<libc::in_pktinfo>() =>
            {
                // SAFETY: the message holds a whole in_pktinfo (length checked); unaligned read.
                let p: libc::in_pktinfo = unsafe { std::ptr::read_unaligned(data.as_ptr().cast()) };
                return Some(IpAddr::from(p.ipi_addr.s_addr.to_ne_bytes()));
            }
            (libc::IPPROTO_IPV6, libc::IPV6_PKTINFO)
                if data.len() >= std::mem::size_of::<libc::in6_pktinfo>() =>
            {
                // SAFETY: as above, for in6_pktinfo.
                let p: libc::in6_pktinfo =
                    unsafe { std::ptr::read_unaligned(data.as_ptr().cast()) };
                return Some(IpAddr::from(p.ipi6_addr.s6_addr));
            }
            _ => {}
        }
        // Each message is padded to the next multiple of the header's alignment.
        off += len.next_multiple_of(std::mem::align_of::<libc::cmsghdr>());
    }
    None
}

/// `UDP_SEGMENT` (linux/udp.h; not in the libc crate for glibc targets).
const UDP_SEGMENT: libc::c_int = 103;

/// Writes into `buf` the control messages of a send: the source address (`from`, see
/// [`write_pktinfo`]) and the segment size of a GSO send (`segment` > 0); returns their
/// length (0: none).
pub(crate) fn write_control(
    buf: &mut [u64; PKTINFO_SPACE / 8],
    from: Option<IpAddr>,
    segment: u16,
) -> usize {
    let mut n = from.map_or(0, |ip| write_pktinfo(buf, ip));
    if segment > 0 {
        let payload = std::mem::size_of::<u16>() as u32;
        // SAFETY: CMSG_LEN/CMSG_SPACE are arithmetic on the payload size.
        let (len, space) = unsafe {
            (
                libc::CMSG_LEN(payload) as usize,
                libc::CMSG_SPACE(payload) as usize,
            )
        };
        assert!(
            n + space <= PKTINFO_SPACE,
            "control messages overflow their buffer"
        );
        let hdr = libc::cmsghdr {
            cmsg_len: len as _,
            cmsg_level: libc::SOL_UDP,
            cmsg_type: UDP_SEGMENT,
        };
        let bytes = buf.as_mut_ptr().cast::<u8>();
        // SAFETY: `n` is a multiple of the header's alignment (CMSG_SPACE pads to it) and
        // `n + space` bytes fit in the buffer (asserted); the writes stay inside.
        unsafe {
            std::ptr::write_bytes(bytes.add(n), 0, space);
            std::ptr::write(bytes.add(n).cast::<libc::cmsghdr>(), hdr);
            let data = bytes.add(n + std::mem::size_of::<libc::cmsghdr>());
            std::ptr::write_unaligned(data.cast::<u16>(), segment);
        }
        n += space;
    }
    n
}

/// Writes into `buf` the control message that makes a datagram leave from `from`
/// (`IP_PKTINFO`'s `ipi_spec_dst`, `IPV6_PKTINFO`'s `ipi6_addr`); returns its length.
pub(crate) fn write_pktinfo(buf: &mut [u64; PKTINFO_SPACE / 8], from: IpAddr) -> usize {
    let bytes = buf.as_mut_ptr().cast::<u8>();
    let (level, ty, payload): (libc::c_int, libc::c_int, usize) = match from {
        IpAddr::V4(_) => (
            libc::IPPROTO_IP,
            libc::IP_PKTINFO,
            std::mem::size_of::<libc::in_pktinfo>(),
        ),
        IpAddr::V6(_) => (
            libc::IPPROTO_IPV6,
            libc::IPV6_PKTINFO,
            std::mem::size_of::<libc::in6_pktinfo>(),
        ),
    };
    // SAFETY: CMSG_LEN/CMSG_SPACE are arithmetic on the payload size.
    let (len, space) = unsafe {
        (
            libc::CMSG_LEN(payload as u32) as usize,
            libc::CMSG_SPACE(payload as u32) as usize,
        )
    };
    debug_assert!(space <= PKTINFO_SPACE);
    let hdr = libc::cmsghdr {
        cmsg_len: len as _,
        cmsg_level: level,
        cmsg_type: ty,
    };
    let data_off = std::mem::size_of::<libc::cmsghdr>();
    // SAFETY: `buf` is PKTINFO_SPACE bytes, 8-aligned (u64s), which holds the header and the
    // largest payload (checked above in debug builds; in6_pktinfo is 20 bytes). The writes
    // stay inside it.
    unsafe {
        std::ptr::write_bytes(bytes, 0, space);
        std::ptr::write(bytes.cast::<libc::cmsghdr>(), hdr);
        match from {
            IpAddr::V4(a) => {
                let p = libc::in_pktinfo {
                    ipi_ifindex: 0,
                    ipi_spec_dst: libc::in_addr {
                        s_addr: u32::from_ne_bytes(a.octets()),
                    },
                    ipi_addr: libc::in_addr { s_addr: 0 },
                };
                std::ptr::write_unaligned(bytes.add(data_off).cast(), p);
            }
            IpAddr::V6(a) => {
                let p = libc::in6_pktinfo {
                    ipi6_addr: libc::in6_addr {
                        s6_addr: a.octets(),
                    },
                    ipi6_ifindex: 0,
                };
                std::ptr::write_unaligned(bytes.add(data_off).cast(), p);
            }
        }
    }
    space
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The control message written for a send reads back as the same address, for both
    /// families, and garbage reads as none.
    #[test]
    fn pktinfo_round_trip() {
        for from in ["192.0.2.7", "2001:db8::7"] {
            let from: IpAddr = from.parse().unwrap();
            let mut buf = [0u64; PKTINFO_SPACE / 8];
            let n = write_pktinfo(&mut buf, from);
            // SAFETY: the array is PKTINFO_SPACE initialised bytes.
            let bytes: &[u8] =
                unsafe { std::slice::from_raw_parts(buf.as_ptr().cast(), PKTINFO_SPACE) };
            // A received IP_PKTINFO carries the destination in ipi_addr, not ipi_spec_dst:
            // patch it in for the v4 case to read it back as the kernel would give it.
            let mut rx = bytes[..n].to_vec();
            if from.is_ipv4() {
                let off = std::mem::size_of::<libc::cmsghdr>() + 8;
                if let IpAddr::V4(a) = from {
                    rx[off..off + 4].copy_from_slice(&a.octets());
                }
            }
            assert_eq!(parse_pktinfo(&rx), Some(from));
        }
        assert_eq!(parse_pktinfo(&[1, 2, 3]), None);
        assert_eq!(parse_pktinfo(&[0xff; 40]), None);
        assert_eq!(parse_pktinfo(&[]), None);
    }
}
