//! Multishot receive into the provided-buffer ring (`IORING_OP_RECV` with
//! `IORING_RECV_MULTISHOT` and `IOSQE_BUFFER_SELECT`, Linux 6.0): one submission delivers
//! every arriving segment in a buffer the kernel picks. The bytes are handed to the handler as
//! a borrowed slice; a buffer goes back to the ring once the handler has returned and the
//! kernel has finished filling it (with incremental consumption, several receives share one
//! buffer: see `bufring`). Each arm takes at most `RECV_ARM_LIMIT` bytes, then is re-armed
//! unless the handler paused the connection.

use io_uring::{cqueue, opcode, types};

use super::bufring::BGID;
use super::close;
use super::conn::{RECV_ARMED, RECV_IDLE};
use super::state::UringDriver;
use super::userdata::{pack, Kind};
use crate::handler::Handler;
use crate::io::{ConnId, ConnState};

/// Bytes a multishot receive takes before it ends and is re-armed (Linux 6.17's
/// `IORING_RECV_MSHOT_LIM`, the `optlen` of the submission): the most a connection can still
/// receive after its handler paused it, since the pause (a cancellation) takes effect only
/// after the receives already done. Without it a paused connection could drain its whole
/// socket buffer (up to `tcp_rmem`'s maximum) into the zone's buffers.
pub(super) const RECV_ARM_LIMIT: u32 = 256 * 1024;

pub(super) fn arm(d: &mut UringDriver, c: ConnId) {
    let conn = &d.io.conns[c.index()];
    if conn.dgram {
        return super::dgram_recv::arm_conn(d, c);
    }
    if conn.state != ConnState::Open || conn.paused || conn.eof || d.recv_state(c) != RECV_IDLE {
        return;
    }
    let gen = conn.gen;
    let limit = match conn.recv_limit {
        0 => d.recv_limit,
        own => d.recv_limit.min(own),
    };
    d.set_recv_state(c, RECV_ARMED);
    let mut e = opcode::RecvMulti::new(types::Fixed(c.0), BGID).build();
    if limit > 0 {
        e = super::sqe::with_optlen(e, limit);
    }
    let e = e.user_data(pack(Kind::Recv, gen, c.0));
    // SAFETY: the receive writes only into ring buffers, which live as long as the ring;
    // the direct descriptor is closed only after this operation is cancelled.
    unsafe { d.push(&e) };
}

pub(super) fn pause(d: &mut UringDriver, c: ConnId) {
    if d.recv_state(c) == RECV_ARMED {
        let e = close::cancel_entry(d, c, close::recv_kind(d, c), Kind::CancelQuiet);
        // SAFETY: a cancellation refers to no memory of ours.
        unsafe { d.push(&e) };
    }
}

pub(super) fn resume(d: &mut UringDriver, c: ConnId) {
    // If the cancelled receive has not finished yet, its last completion re-arms.
    arm(d, c);
}

/// Gives back (when the kernel is done with it) a buffer whose bytes nobody reads.
fn release_unread(d: &mut UringDriver, bid: u16, res: i32, flags: u32) {
    let done = if res > 0 {
        d.bufs.consume(bid, res as usize, flags).1
    } else {
        d.bufs.empty_released()
    };
    if done {
        d.bufs.push(bid);
    }
}

pub(super) fn complete<H: Handler>(
    d: &mut UringDriver,
    h: &mut H,
    c: ConnId,
    gen: u32,
    res: i32,
    flags: u32,
) {
    let bid = cqueue::buffer_select(flags);
    let more = cqueue::more(flags);
    let current = d.io.conns.get(c.index()).is_some_and(|x| x.gen == gen);
    if !current {
        // A late completion for an earlier connection in this slot.
        if let Some(bid) = bid {
            release_unread(d, bid, res, flags);
        }
        return;
    }
    if !more {
        d.set_recv_state(c, RECV_IDLE);
    }
    let open = d.io.conns[c.index()].state == ConnState::Open;
    if res > 0 {
        d.wake.waker.add_in(res as u64);
        let bid = bid.expect("a receive with data names its buffer");
        let (start, done) = d.bufs.consume(bid, res as usize, flags);
        if open {
            let data = d.bufs.get(bid, start, res as usize);
            h.on_data(&mut d.io, c, data);
        }
        if done {
            d.bufs.push(bid);
        }
    } else if res == 0 {
        if let Some(bid) = bid {
            release_unread(d, bid, res, flags);
        }
        if open {
            d.io.conns[c.index()].eof = true;
            h.on_eof(&mut d.io, c);
        }
        return;
    } else if res == -libc::ENOBUFS {
        // Every buffer is in use: try again once this batch's buffers are back.
        if open {
            d.rearm_recv.push(c);
        }
        return;
    } else if res == -libc::EINVAL && d.recv_limit > 0 {
        // Before Linux 6.17 a multishot receive refuses a byte limit: arm without one.
        tracing::info!("io_uring multishot receive limit not supported here; receiving without it");
        d.recv_limit = 0;
        arm(d, c);
        return;
    } else if res != -libc::ECANCELED {
        if open {
            close::begin(d, c, Some(crate::sys::errno(res)));
        }
        return;
    }
    if !more {
        arm(d, c);
    }
}
