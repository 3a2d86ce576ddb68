//! Sending queued bytes (`IORING_OP_SEND`, Linux 5.6). One send per connection is in flight
//! at a time, which keeps bytes in order; a short write resubmits the rest.
//!
//! The last send before a close carries the close with it: `SEND` linked to the cancel of the
//! connection's receive and a `CLOSE` (see `close.rs`), all in one submission, so the FIN
//! leaves as soon as the bytes do instead of two completion round trips later. That send
//! uses `MSG_WAITALL` (io_uring retries a short write itself, so only an error cuts the link)
//! and, when the peer sends nothing more (`Io::peer_done`), `MSG_MORE`, so the kernel holds the
//! tail segment and the FIN rides on it: one segment where nginx (write, then close) sends
//! two. On loopback the delivery of each segment to the client's socket runs on the server's
//! core. Not on SQPOLL rings, whose shared kernel thread may split a chain.

use io_uring::{opcode, types};

use super::close;
use super::conn::flush_has_work;
use super::state::UringDriver;
use super::userdata::{pack, Kind};
use crate::io::{AfterFlush, Chunk, ConnId, ConnState};

/// The most one submission sends; larger chunks go in several rounds.
const MAX_SEND: usize = 1 << 30;

pub(super) fn submit(d: &mut UringDriver, c: ConnId) {
    let shutdown_pending = close::shutdown_pending(d, c);
    let conn = &mut d.io.conns[c.index()];
    let Some(Chunk::Bytes { buf, pos }) = conn.out.front() else {
        unreachable!("send::submit on a non-bytes chunk")
    };
    let len = (buf.len() - pos).min(MAX_SEND);
    // A response head followed by a file body: let the kernel hold the head back and
    // send it in the same segments as the file's first bytes (what TCP_CORK does for
    // nginx's `tcp_nopush`).
    let more = matches!(conn.out.get(1), Some(Chunk::File { .. }));
    // The last bytes before the close: the close goes with them (module docs). Not with
    // SQPOLL: a kernel thread shared by several rings takes at most 8 entries per ring per
    // round and would cut the chain.
    let last = conn.out.len() == 1
        && pos + len == buf.len()
        && matches!(conn.after_flush, AfterFlush::Close)
        && d.sqpoll.is_none()
        && conn.ctl.is_none()
        && !shutdown_pending;
    // The FIN rides on the tail only if the peer sends nothing more (`Io::peer_done`).
    let cork = last && (conn.peer_done || conn.eof);
    let flags = libc::MSG_NOSIGNAL
        | if more || cork { libc::MSG_MORE } else { 0 }
        | if last { libc::MSG_WAITALL } else { 0 };
    // SAFETY: pos <= buf.len(), so the pointer stays within (or one past) the vector.
    let ptr = unsafe { buf.as_ptr().add(*pos) };
    conn.in_flight = true;
    let e = opcode::Send::new(types::Fixed(c.0), ptr, len as u32)
        .flags(flags)
        .build()
        .user_data(pack(Kind::Send, conn.gen, c.0));
    if last {
        // SAFETY: as below, for the send; the cancel and close refer to no memory of ours.
        return unsafe { close::close_after_send(d, c, &e) };
    }
    // SAFETY: the vector is the front chunk of the connection's queue; `in_flight` keeps it
    // from being popped, appended to (which could move it) or dropped until this
    // completion is handled, and close waits for it too.
    unsafe { d.push(&e) };
}

pub(super) fn complete(d: &mut UringDriver, c: ConnId, gen: u32, res: i32) {
    let conn = &mut d.io.conns[c.index()];
    if conn.gen != gen {
        debug_assert!(false, "a send completes before its slot can be reused");
        return;
    }
    conn.in_flight = false;
    if res > 0 {
        conn.sent += res as u64;
        d.wake.waker.add_out(res as u64);
    }
    let conn = &mut d.io.conns[c.index()];
    if conn.state == ConnState::Closing {
        conn.out.clear();
        if res < 0 && res != -libc::ECANCELED && conn.close_err.is_none() {
            conn.close_err = Some(crate::sys::errno(res));
        }
        return close::try_finish(d, c);
    }
    if res < 0 {
        if res == -libc::EAGAIN || res == -libc::EINTR {
            d.io.mark_dirty(c);
            return;
        }
        return close::begin(d, c, Some(crate::sys::errno(res)));
    }
    if conn.advance(res as u64) {
        conn.pop_front(&mut d.io.spares);
    }
    // `flush_conn` returns at once on the same test.
    if flush_has_work(conn, &d.uconns[c.index()]) {
        d.io.mark_dirty(c);
    }
}
