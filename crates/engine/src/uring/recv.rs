//! Multishot receive into the provided-buffer ring (`IORING_OP_RECV` with
//! `IORING_RECV_MULTISHOT` and `IOSQE_BUFFER_SELECT`, Linux 6.0): one submission delivers
//! every arriving segment in a buffer the kernel picks. The bytes are handed to the handler as
//! a borrowed slice; a buffer goes back to the ring once the handler has returned and the
//! kernel has finished filling it (with incremental consumption, several receives share one
//! buffer: see `bufring`). Each arm takes at most `RECV_ARM_LIMIT` bytes, then is re-armed
//! unless the handler paused the connection.

use io_uring::{cqueue, opcode, types};

use super::userdata::{pack, Kind};
use super::{UringDriver, BGID};
use crate::handler::Handler;
use crate::io::{ConnId, ConnState};

/// Receive states kept in the low bits of `UringConn::flags`.
pub(super) const RECV_IDLE: u32 = 0;
pub(super) const RECV_ARMED: u32 = 1;
pub(super) const RECV_MASK: u32 = 3;

impl UringDriver {
    fn recv_state(&self, c: ConnId) -> u32 {
        self.uconns[c.index()].flags & RECV_MASK
    }

    fn set_recv_state(&mut self, c: ConnId, s: u32) {
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

    /// Before a slot is reused: a receive still marked armed (its last completion not seen
    /// yet) no longer counts.
    pub(super) fn forget_recv(&mut self, c: ConnId) {
        if self.recv_state(c) == RECV_ARMED {
            self.set_recv_state(c, RECV_IDLE);
        }
    }

    pub(super) fn arm_recv(&mut self, c: ConnId) {
        let conn = &self.io.conns[c.index()];
        if conn.state != ConnState::Open
            || conn.paused
            || conn.eof
            || self.recv_state(c) != RECV_IDLE
        {
            return;
        }
        let gen = conn.gen;
        self.set_recv_state(c, RECV_ARMED);
        let mut e = opcode::RecvMulti::new(types::Fixed(c.0), BGID).build();
        if self.recv_limit > 0 {
            e = super::sqe::with_optlen(e, self.recv_limit);
        }
        let e = e.user_data(pack(Kind::Recv, gen, c.0));
        // SAFETY: the receive writes only into ring buffers, which live as long as the ring;
        // the direct descriptor is closed only after this operation is cancelled.
        unsafe { self.push(&e) };
    }

    pub(super) fn pause_recv(&mut self, c: ConnId) {
        if self.recv_state(c) == RECV_ARMED {
            let e = self.cancel_entry(c, Kind::Recv, Kind::CancelQuiet);
            // SAFETY: a cancellation refers to no memory of ours.
            unsafe { self.push(&e) };
        }
    }

    pub(super) fn resume_recv(&mut self, c: ConnId) {
        // If the cancelled receive has not finished yet, its last completion re-arms.
        self.arm_recv(c);
    }

    /// Gives back (when the kernel is done with it) a buffer whose bytes nobody reads.
    fn release_unread(&mut self, bid: u16, res: i32, flags: u32) {
        let done = if res > 0 {
            self.bufs.consume(bid, res as usize, flags).1
        } else {
            self.bufs.empty_released()
        };
        if done {
            self.bufs.push(bid);
        }
    }

    pub(super) fn complete_recv<H: Handler>(
        &mut self,
        h: &mut H,
        c: ConnId,
        gen: u32,
        res: i32,
        flags: u32,
    ) {
        let bid = cqueue::buffer_select(flags);
        let more = cqueue::more(flags);
        let current = self.io.conns.get(c.index()).is_some_and(|x| x.gen == gen);
        if !current {
            // A late completion for an earlier connection in this slot.
            if let Some(bid) = bid {
                self.release_unread(bid, res, flags);
            }
            return;
        }
        if !more {
            self.set_recv_state(c, RECV_IDLE);
        }
        let open = self.io.conns[c.index()].state == ConnState::Open;
        if res > 0 {
            self.wake.waker.add_in(res as u64);
            let bid = bid.expect("a receive with data names its buffer");
            let (start, done) = self.bufs.consume(bid, res as usize, flags);
            if open {
                let data = self.bufs.get(bid, start, res as usize);
                h.on_data(&mut self.io, c, data);
            }
            if done {
                self.bufs.push(bid);
            }
        } else if res == 0 {
            if let Some(bid) = bid {
                self.release_unread(bid, res, flags);
            }
            if open {
                self.io.conns[c.index()].eof = true;
                h.on_eof(&mut self.io, c);
            }
            return;
        } else if res == -libc::ENOBUFS {
            // Every buffer is in use: try again once this batch's buffers are back.
            if open {
                self.rearm_recv.push(c);
            }
            return;
        } else if res == -libc::EINVAL && self.recv_limit > 0 {
            // Before Linux 6.17 a multishot receive refuses a byte limit: arm without one.
            tracing::info!(
                "io_uring multishot receive limit not supported here; receiving without it"
            );
            self.recv_limit = 0;
            self.arm_recv(c);
            return;
        } else if res != -libc::ECANCELED {
            if open {
                self.begin_close(c, Some(crate::sys::errno(res)));
            }
            return;
        }
        if !more {
            self.arm_recv(c);
        }
    }
}
