//! Closing a connection without leaking its slot or freeing memory the kernel still uses:
//! cancel its pending receive (or connect) by user_data (`IORING_OP_ASYNC_CANCEL`), wait until no send or
//! splice owns a buffer, then `IORING_OP_CLOSE` the direct descriptor (Linux 5.15). Only when
//! that completes is `on_closed` delivered and the slot reusable (`UringDriver::closed`).
//! Also write shutdown (`IORING_OP_SHUTDOWN`, Linux 5.11), which the kernel always runs in
//! an io-wq worker and which finds its descriptor only when it runs: the close waits for it
//! too, or under load it could shut a socket accepted into the slot after the close.
//!
//! A close that waits only for the last send is submitted with it instead
//! (`close_after_send`): `SEND` →(link) `ASYNC_CANCEL` →(hard link: runs whatever the cancel
//! found) `CLOSE`. If the send fails, the kernel cancels the other two (`-ECANCELED`) and the
//! close goes the ordinary way from there.

use io_uring::{opcode, squeue, types};

use super::state::UringDriver;
use super::userdata::{pack, Kind};
use crate::io::{ConnId, ConnState};

const CANCEL_DONE: u32 = 1 << 2;
const CLOSE_SUBMITTED: u32 = 1 << 3;
/// The cancel and close were linked behind the last send.
const CLOSE_LINKED: u32 = 1 << 4;
/// A write shutdown is submitted and has not completed.
const SHUTDOWN_PENDING: u32 = 1 << 5;

pub(super) fn begin(d: &mut UringDriver, c: ConnId, err: Option<std::io::Error>) {
    let conn = &mut d.io.conns[c.index()];
    if conn.state == ConnState::Closing && conn.in_flight {
        // An abort (`Io::close`) while the last output is still being written, the close
        // linked behind it or waiting for it: a peer that stopped reading would hold the
        // slot for ever. Cancel the write; a linked cancel and close then fail with it
        // and `complete` closes the ordinary way.
        return cancel_output(d, c);
    }
    if !matches!(conn.state, ConnState::Open | ConnState::Connecting) {
        return;
    }
    // The only operations that can stay pending on a connection indefinitely are its
    // multishot receive and, while connecting, its connect; sends and splices are waited
    // for (`in_flight`), the rest complete at once. Cancelling that one request by its
    // user_data is a hash lookup, where cancelling everything on the descriptor
    // (IORING_ASYNC_CANCEL_FD | ALL) scans every armed poll of the ring, per close.
    let target = if conn.state == ConnState::Connecting {
        Kind::Connect
    } else if conn.dgram {
        Kind::RecvDgram
    } else {
        Kind::Recv
    };
    conn.state = ConnState::Closing;
    conn.close_err = err;
    conn.drop_unsent();
    let e = cancel_entry(d, c, target, Kind::Cancel);
    // SAFETY: a cancellation refers to no memory of ours.
    unsafe { d.push(&e) };
    if d.io.conns[c.index()].in_flight {
        // Closing now drops unsent output: the write in flight too, or a peer that stopped
        // reading would keep it (and the slot) pending for ever.
        cancel_output(d, c);
    }
}

/// Cancels the connection's write in flight: a send, one of a splice's two halves, a
/// sendfile's wait for room, or a kernel TLS record's `SENDMSG` (whichever is pending; the
/// other cancels find nothing). Its completion, with `-ECANCELED` or the bytes it wrote,
/// then lets the close go on; until then the record stays queued (`sendmsg.rs`).
fn cancel_output(d: &mut UringDriver, c: ConnId) {
    for kind in [
        Kind::Send,
        Kind::SpliceIn,
        Kind::SpliceOut,
        Kind::PollOut,
        Kind::SendMsg,
    ] {
        let e = cancel_entry(d, c, kind, Kind::CancelQuiet);
        // SAFETY: a cancellation refers to no memory of ours.
        unsafe { d.push(&e) };
    }
}

/// The kind of the connection's receive: a datagram socket's is a `recvmsg`
/// (`dgram_recv.rs`).
pub(super) fn recv_kind(d: &UringDriver, c: ConnId) -> Kind {
    if d.io.conns[c.index()].dgram {
        Kind::RecvDgram
    } else {
        Kind::Recv
    }
}

/// Cancels the connection's request of kind `target` by its user_data (a hash lookup);
/// the cancel's own completion comes back as `done`.
pub(super) fn cancel_entry(d: &UringDriver, c: ConnId, target: Kind, done: Kind) -> squeue::Entry {
    let gen = d.io.conns[c.index()].gen;
    opcode::AsyncCancel2::new(types::CancelBuilder::user_data(pack(target, gen, c.0)))
        .build()
        .user_data(pack(done, gen, c.0))
}

/// Submits `send` (the connection's last output) linked to the cancel of its receive and
/// the close, and marks the connection closing (module docs).
///
/// # Safety
///
/// As for `UringDriver::push`: the buffer `send` reads must stay valid until its completion.
pub(super) unsafe fn close_after_send(d: &mut UringDriver, c: ConnId, send: &squeue::Entry) {
    let conn = &mut d.io.conns[c.index()];
    debug_assert_eq!(conn.state, ConnState::Open);
    conn.state = ConnState::Closing;
    let gen = conn.gen;
    let u = &mut d.uconns[c.index()];
    u.flags |= CLOSE_SUBMITTED | CLOSE_LINKED;
    // An ordinary descriptor (sendfile) would keep the socket open past the CLOSE.
    u.sock_fd = None;
    let cancel = cancel_entry(d, c, Kind::Recv, Kind::Cancel).flags(squeue::Flags::IO_HARDLINK);
    let close = opcode::Close::new(types::Fixed(c.0))
        .build()
        .user_data(pack(Kind::Close, gen, c.0));
    let send = send.clone().flags(squeue::Flags::IO_LINK);
    // SAFETY: the caller's obligations for the send; the others refer to no memory of ours.
    unsafe { d.push_chain(&[send, cancel, close]) };
}

pub(super) fn complete_cancel(d: &mut UringDriver, c: ConnId, gen: u32, res: i32) {
    if d.io.conns[c.index()].gen != gen {
        return;
    }
    let u = &mut d.uconns[c.index()];
    if res == -libc::ECANCELED && u.flags & CLOSE_LINKED != 0 {
        return; // the send before it failed; the close's completion takes it from there
    }
    u.flags |= CANCEL_DONE;
    try_finish(d, c);
}

/// Submits the close once the cancel is done and nothing is in flight.
pub(super) fn try_finish(d: &mut UringDriver, c: ConnId) {
    let conn = &d.io.conns[c.index()];
    let u = &mut d.uconns[c.index()];
    if conn.state != ConnState::Closing
        || conn.in_flight
        || u.flags & CANCEL_DONE == 0
        || u.flags & (CLOSE_SUBMITTED | SHUTDOWN_PENDING) != 0
    {
        return;
    }
    u.flags |= CLOSE_SUBMITTED;
    // An ordinary descriptor (sendfile) would keep the socket open past the CLOSE.
    u.sock_fd = None;
    let e = opcode::Close::new(types::Fixed(c.0))
        .build()
        .user_data(pack(Kind::Close, conn.gen, c.0));
    // SAFETY: closing a slot refers to no memory of ours; nothing in flight uses it.
    unsafe { d.push(&e) };
}

/// The close's completion. `Some` with the connection's error once the slot is closed: the
/// caller (`UringDriver::closed`) then frees the slot and tells the handler.
pub(super) fn complete(
    d: &mut UringDriver,
    c: ConnId,
    gen: u32,
    res: i32,
) -> Option<Option<std::io::Error>> {
    let conn = &mut d.io.conns[c.index()];
    if conn.gen != gen {
        return None;
    }
    let u = &mut d.uconns[c.index()];
    if res == -libc::ECANCELED && u.flags & CLOSE_LINKED != 0 {
        // The linked send failed and took the cancel and close down with it: close the
        // ordinary way (the send's completion, which came first, released its buffer).
        u.flags &= !(CLOSE_LINKED | CLOSE_SUBMITTED);
        let e = cancel_entry(d, c, recv_kind(d, c), Kind::Cancel);
        // SAFETY: a cancellation refers to no memory of ours.
        unsafe { d.push(&e) };
        return None;
    }
    conn.state = ConnState::Free;
    conn.out.clear();
    // Bytes left in the pipe never reached the peer: they no longer count as sent.
    let fill = std::mem::take(&mut u.pipe_fill);
    debug_assert!(conn.sent >= u64::from(fill));
    conn.sent = conn.sent.saturating_sub(u64::from(fill));
    let pipe = u.pipe.take();
    let err = conn.close_err.take();
    if let Some(p) = pipe {
        d.pipes.put(p, fill == 0);
    }
    Some(err)
}

pub(super) fn shutdown(d: &mut UringDriver, c: ConnId) {
    let conn = &d.io.conns[c.index()];
    // One pending is enough (a second SHUT_WR does nothing), and one flag tracks one.
    if conn.state != ConnState::Open || shutdown_pending(d, c) {
        return;
    }
    let e = opcode::Shutdown::new(types::Fixed(c.0), libc::SHUT_WR)
        .build()
        .user_data(pack(Kind::Shutdown, conn.gen, c.0));
    d.uconns[c.index()].flags |= SHUTDOWN_PENDING;
    // SAFETY: refers to no memory of ours. The kernel resolves the slot only when an io-wq
    // worker runs the shutdown, maybe after later submissions: `try_finish` holds the
    // slot's close until this completes, so it still holds this connection's socket.
    unsafe { d.push(&e) };
}

/// Whether a write shutdown of `c` has yet to complete (a close must not be linked
/// behind a send while it is: `send.rs`).
pub(super) fn shutdown_pending(d: &UringDriver, c: ConnId) -> bool {
    d.uconns[c.index()].flags & SHUTDOWN_PENDING != 0
}

/// The shutdown's completion: a close waiting for it goes on. Its result does not matter
/// (a peer that reset the connection leaves nothing to shut).
pub(super) fn complete_shutdown(d: &mut UringDriver, c: ConnId, gen: u32) {
    if d.io.conns[c.index()].gen != gen {
        debug_assert!(false, "a shutdown completes before its slot can be reused");
        return;
    }
    d.uconns[c.index()].flags &= !SHUTDOWN_PENDING;
    try_finish(d, c);
}
