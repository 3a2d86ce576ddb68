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
pub use crate::send_to::SendTo;

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
    /// On a listener with [`ListenOptions::gro`](crate::ListenOptions::gro): `data` is
    /// several datagrams of one sender that the kernel coalesced (`UDP_GRO`), each `segment`
    /// bytes long but the last. 0: `data` is one datagram.
    pub segment: u16,
    /// The ECN bits of the datagram's IP header, on a listener with
    /// [`ListenOptions::ecn`](crate::ListenOptions::ecn) (0: not ECN-capable, or not asked).
    pub ecn: u8,
}

/// Spare datagram buffers a zone keeps (the sends' vectors, reused): of a datagram's size,
const MAX_DGRAM_SPARES: usize = 256;
/// and larger ones (segmented sends, up to [`MAX_SPARE_CAPACITY`]), fewer: 512 KiB at most.
const MAX_LARGE_SPARES: usize = 8;
/// A buffer larger than this is a large spare.
const LARGE_SPARE: usize = 16 * 1024;
/// A buffer larger than this is not kept.
const MAX_SPARE_CAPACITY: usize = 64 * 1024;

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
        self.send_with(listener, SendTo::one(to, from), data)
    }

    /// [`send_to`](Self::send_to) with what [`SendTo`] sets: several datagrams in one send
    /// (GSO), ECN bits. Where a segmented send fails, [`Io::gso_works`] turns false and the
    /// caller sends one datagram at a time from then on. False when the zone's queue of
    /// sends is full: nothing is sent.
    pub fn send_with(&mut self, listener: ListenerId, mut s: SendTo, data: &[u8]) -> bool {
        if usize::from(s.segment) >= data.len() {
            s.segment = 0; // one datagram: no segmentation to ask for
        }
        self.queue_dgram(DgramTo::Listener { id: listener, s }, data)
    }

    /// [`send_with`](Self::send_with) without a copy: the send takes `buf`'s bytes, and
    /// `buf` is left empty with a spare buffer's capacity (one of the zone's, reused,
    /// preferably a large one), so a caller that fills one scratch buffer send after send
    /// never copies its bytes again. Meant for large sends: the buffer is held until the
    /// send completes, whatever its capacity. False when the zone's queue of sends is full:
    /// nothing is sent, `buf` is as it was.
    pub fn send_buf(&mut self, listener: ListenerId, mut s: SendTo, buf: &mut Vec<u8>) -> bool {
        if usize::from(s.segment) >= buf.len() {
            s.segment = 0; // one datagram: no segmentation to ask for
        }
        if !self.dgram_room() {
            return false;
        }
        let spare = self.dgram_large_spares.pop();
        let spare = spare
            .or_else(|| self.dgram_spares.pop())
            .unwrap_or_default();
        let data = std::mem::replace(buf, spare);
        self.push_dgram(DgramTo::Listener { id: listener, s }, data);
        true
    }

    /// Whether the sockets take segmented sends ([`SendTo::segment`]): true until one failed
    /// (a kernel or device without UDP GSO), or when the zone was made without GSO
    /// ([`crate::ZoneConfig::gso`]).
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
        if !self.dgram_room() {
            return false;
        }
        let mut buf = self.dgram_spares.pop().unwrap_or_default();
        buf.extend_from_slice(data);
        self.push_dgram(to, buf);
        true
    }

    /// Whether one more send may be queued; counts a refusal.
    fn dgram_room(&mut self) -> bool {
        if self.dgram_pending >= self.dgram_limit {
            self.dgram_stats.queue_full += 1;
            return false;
        }
        true
    }

    fn push_dgram(&mut self, to: DgramTo, buf: Vec<u8>) {
        self.dgram_pending += 1;
        self.dgram_out.push(DgramOut { to, buf });
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
        buf.clear();
        match buf.capacity() {
            c if c > MAX_SPARE_CAPACITY => {}
            c if c > LARGE_SPARE => {
                if self.dgram_large_spares.len() < MAX_LARGE_SPARES {
                    self.dgram_large_spares.push(buf);
                }
            }
            _ => {
                if self.dgram_spares.len() < MAX_DGRAM_SPARES {
                    self.dgram_spares.push(buf);
                }
            }
        }
    }
}
