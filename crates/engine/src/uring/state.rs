//! What the io_uring driver holds ([`UringDriver`]'s fields, its listeners) and the few
//! primitives every operation uses: queueing submissions, and the receive state of a slot
//! with the count of armed receives the batching gate reads.
//!
//! The operations (`accept.rs`, `recv.rs`, ...) are functions over this state; `mod.rs` runs
//! the loop and routes completions to them. Nothing here calls an operation, so every
//! operation can use this module without a circle.

use std::time::Duration;

use io_uring::{squeue, IoUring};

use super::bufring::BufRing;
use super::busy::Busy;
use super::conn::{UringConn, RECV_ARMED, RECV_IDLE, RECV_MASK};
use super::enter::Enter;
use super::peer::PeerQueries;
use super::pipes::PipePool;
use super::wake::WakeOp;
use crate::io::{ConnId, Io};
use crate::zone::SqPoll;

/// A listening socket and its accept (`accept.rs`), or a UDP socket and its receive
/// (`dgram_recv.rs`).
pub(super) struct Listener {
    /// Closed once no accept, receive or datagram send in flight refers to it.
    pub(super) sock: Option<crate::listener::Listener>,
    pub(super) v6: bool,
    /// A UDP socket: its receive, not an accept, is what `armed` says is pending.
    pub(super) udp: bool,
    pub(super) armed: bool,
    /// The armed accept is multishot (else one connection, then re-armed).
    pub(super) multishot: bool,
    pub(super) closing: bool,
    /// Closing: the cancellation of its accept is in flight.
    pub(super) cancelling: bool,
    /// Closing, its accepts cancelled: connections left in its queue are being taken without
    /// waiting (`accept::sweep`).
    pub(super) sweeping: bool,
    /// Datagram sends in flight from this socket (`dgram_send.rs`): it stays open for them.
    pub(super) sends: u32,
}

/// A zone's io_uring back end. Field order matters: the ring is dropped before the buffer
/// memory it was told about.
pub struct UringDriver {
    pub(super) ring: IoUring,
    pub(super) bufs: BufRing,
    pub(super) io: Io,
    /// The driver's own state of each connection, indexed like `io.conns` (`conn.rs`).
    pub(super) uconns: Vec<UringConn>,
    pub(super) listeners: Vec<Listener>,
    pub(super) wake: WakeOp,
    pub(super) cqes: Vec<(u64, i32, u32)>,
    /// Connections whose multishot receive ended with ENOBUFS: re-armed after this batch's
    /// buffers are back in the ring. No data is lost: it waits in the socket.
    pub(super) rearm_recv: Vec<ConnId>,
    pub(super) accept_backoff: bool,
    /// The zone is exiting (`quiesce`): a closing listener is let go without a sweep, since
    /// nothing would serve what it took.
    pub(super) exiting: bool,
    /// Accepted connections open now (slots in use below `max_conns`), and the limit.
    pub(super) accepted: u32,
    pub(super) max_conns: u32,
    /// `max_conns` connections are open: accepting waits for one to close.
    pub(super) at_limit: bool,
    pub(super) pipes: PipePool,
    pub(super) waits: u64,
    pub(super) enter: Enter,
    pub(super) sqpoll: Option<SqPoll>,
    /// Ask for peer addresses before `on_accept`.
    pub(super) peer_addrs: bool,
    /// Per slot: where `SO_PEERNAME` writes, and the listener the connection came from.
    pub(super) peers: PeerQueries,
    /// How long to spin on the completion queue before parking (`busy_poll_us`).
    pub(super) busy_poll: Duration,
    /// Adaptive batching bound in microseconds (0: off), and the last batch's size.
    pub(super) batch_wait_us: u32,
    /// `ZoneConfig::batch_when_pending`.
    pub(super) batch_when_pending: bool,
    pub(super) last_batch: u32,
    /// Receives that brought data among them: the arrivals. Bookkeeping completions (sends,
    /// cancels, closes: four per short connection) do not make a zone saturated.
    pub(super) last_inputs: u32,
    /// Connections with a receive armed (`recv.rs`).
    pub(super) armed_recvs: u32,
    /// Completions the last wait asked for (1: no batching).
    pub(super) batch_want: u32,
    /// Batching is skipped until `waits` reaches this (see `park`).
    pub(super) batch_skip_until: u64,
    /// Waits to skip after the next batch that does not fill; doubles per miss.
    pub(super) batch_backoff: u64,
    /// Share of recent time spent outside the blocking wait (gates batching).
    pub(super) busy: Busy,
    /// Byte limit of each multishot receive (0: none; dropped on kernels that refuse it).
    pub(super) recv_limit: u32,
    /// Large file bodies go by sendfile (`sendfile.rs`); false where the kernel cannot
    /// install an ordinary descriptor.
    pub(super) sendfile_ok: bool,
    /// The datagram buffer ring (`ZoneConfig::dgram_buffers`; none when 0). Dropped after
    /// the ring, as `bufs` is.
    pub(super) dbufs: Option<BufRing>,
    /// What the multishot `recvmsg` of datagram sockets reads (`dgram_recv.rs`); boxed, the
    /// kernel reads them at each arm.
    pub(super) dgram_msgs: super::dgram_state::Templates,
    /// Datagram sends in flight, each owning its bytes and addresses (`dgram_send.rs`).
    pub(super) dgram_sends: super::dgram_state::Sends,
    /// UDP listeners whose receive ended for want of buffers: re-armed after this batch.
    pub(super) rearm_dgram: Vec<u32>,
}

impl UringDriver {
    /// Queues a submission, making room by submitting if the queue is full.
    ///
    /// # Safety
    ///
    /// Every buffer and descriptor `e` refers to must stay valid until its completion (for
    /// multishot operations: the last one, without `IORING_CQE_F_MORE`) has been reaped.
    pub(super) unsafe fn push(&mut self, e: &squeue::Entry) {
        // SAFETY: the caller's obligations, passed on.
        unsafe { self.push_chain(std::slice::from_ref(e)) }
    }

    /// Queues entries all at once, making room by submitting if the queue is too full. For a
    /// chain of linked entries this matters: a submit between two of them would end the chain
    /// early and let the rest run on their own; and one queue handle publishes them together
    /// (its tail is written when it is dropped), so an SQPOLL thread cannot see the first
    /// without the rest.
    ///
    /// # Safety
    ///
    /// As for [`push`](Self::push), for every entry.
    pub(super) unsafe fn push_chain(&mut self, chain: &[squeue::Entry]) {
        loop {
            // SAFETY: the caller guarantees the entries' resources outlive the operations.
            if unsafe { self.ring.submission().push_multiple(chain) }.is_ok() {
                return;
            }
            // The queue is full: hand it to the kernel now. EBUSY means the completion queue
            // is overflowing: reap until the kernel takes submissions again.
            if let Err(err) = self.ring.submit() {
                if err.raw_os_error() != Some(libc::EBUSY) {
                    tracing::error!("io_uring submit failed: {err}");
                }
                let _ = self.ring.submit_and_wait(1);
            }
        }
    }

    /// The receive state of slot `c` (`RECV_IDLE` or `RECV_ARMED`, `conn.rs`).
    pub(super) fn recv_state(&self, c: ConnId) -> u32 {
        self.uconns[c.index()].flags & RECV_MASK
    }

    pub(super) fn set_recv_state(&mut self, c: ConnId, s: u32) {
        let d = &mut self.uconns[c.index()].flags;
        let was = *d & RECV_MASK;
        *d = (*d & !RECV_MASK) | s;
        // Receives armed: the connections that can bring an arrival (the batching gate's
        // bound on how many completions a wait can expect).
        match (was == RECV_ARMED, s == RECV_ARMED) {
            (false, true) => self.armed_recvs += 1,
            (true, false) => self.armed_recvs = self.armed_recvs.saturating_sub(1),
            _ => {}
        }
    }

    /// Closes listener `id`'s socket if it is closing and nothing in flight refers to it.
    pub(super) fn release_listener(&mut self, id: u32) {
        if let Some(l) = self.listeners.get_mut(id as usize) {
            if l.closing && !l.armed && l.sends == 0 {
                l.sock = None;
            }
        }
    }

    /// Resets the driver's state of slot `c` for a new connection (accepted, or outbound at
    /// its connect). A receive of the previous connection still marked armed (its last
    /// completion not seen yet) no longer counts. The pipe was handed back at the close.
    pub(super) fn open_slot(&mut self, c: ConnId) {
        if self.recv_state(c) == RECV_ARMED {
            self.set_recv_state(c, RECV_IDLE);
        }
        let u = &mut self.uconns[c.index()];
        debug_assert!(u.pipe.is_none());
        u.flags = 0;
        u.pipe_fill = 0;
        u.sock_fd = None;
    }
}
