//! File bodies without a copy through user space: `IORING_OP_SPLICE` (Linux 5.7) from the
//! file into the connection's pipe, then from the pipe into the socket, round after round.

use std::os::fd::AsRawFd;

use io_uring::{opcode, types};

use super::pagecache::file_shrank;
use super::state::UringDriver;
use super::userdata::{pack, Kind};
use super::{close, poll};
use crate::io::{Chunk, ConnId, ConnState};

/// Continues sending the file chunk at the front of the queue.
pub(super) fn submit(d: &mut UringDriver, c: ConnId) {
    if d.uconns[c.index()].pipe.is_none() {
        match d.pipes.get() {
            Ok(p) => d.uconns[c.index()].pipe = Some(p),
            Err(e) => return close::begin(d, c, Some(e)),
        }
    }
    let conn = &mut d.io.conns[c.index()];
    let u = &d.uconns[c.index()];
    let pipe = u.pipe.as_ref().expect("set above");
    let Some(Chunk::File { file, off, end }) = conn.out.front() else {
        unreachable!("splice::submit on a non-file chunk")
    };
    let e = if u.pipe_fill > 0 {
        opcode::Splice::new(
            types::Fd(pipe.r.as_raw_fd()),
            -1,
            types::Fixed(c.0),
            -1,
            u.pipe_fill,
        )
        .build()
        .user_data(pack(Kind::SpliceOut, conn.gen, c.0))
    } else {
        let len = (end - off).min(pipe.cap as u64) as u32;
        opcode::Splice::new(
            types::Fd(file.as_raw_fd()),
            *off as i64,
            types::Fd(pipe.w.as_raw_fd()),
            -1,
            len,
        )
        .build()
        .user_data(pack(Kind::SpliceIn, conn.gen, c.0))
    };
    conn.in_flight = true;
    // SAFETY: the file (front chunk, pinned by `in_flight`) and the pipe (owned by the
    // connection until the chunk is done and nothing is in flight) outlive the operation;
    // the socket slot is closed only after in-flight operations complete.
    unsafe { d.push(&e) };
}

pub(super) fn complete_in(d: &mut UringDriver, c: ConnId, _gen: u32, res: i32) {
    let conn = &mut d.io.conns[c.index()];
    conn.in_flight = false;
    if conn.state == ConnState::Closing {
        return close::try_finish(d, c);
    }
    match res {
        n if n > 0 => {
            // Off the queue and into the pipe: counted as taken (`ConnIo::sent`).
            d.uconns[c.index()].pipe_fill = n as u32;
            conn.sent += n as u64;
            conn.advance(n as u64);
            d.io.mark_dirty(c);
        }
        n if n == -libc::EAGAIN || n == -libc::EINTR => d.io.mark_dirty(c),
        0 => {
            close::begin(d, c, Some(file_shrank()));
        }
        n => close::begin(d, c, Some(crate::sys::errno(n))),
    }
}

pub(super) fn complete_out(d: &mut UringDriver, c: ConnId, _gen: u32, res: i32) {
    let conn = &mut d.io.conns[c.index()];
    conn.in_flight = false;
    if conn.state == ConnState::Closing {
        return close::try_finish(d, c);
    }
    if res == -libc::EAGAIN {
        // The socket is full and non-blocking (it had a descriptor for sendfile): wait
        // for room rather than resubmit at once.
        return poll::wait_writable(d, c);
    }
    if res == -libc::EINTR || res == 0 {
        d.io.mark_dirty(c);
        return;
    }
    if res < 0 {
        return close::begin(d, c, Some(crate::sys::errno(res)));
    }
    // `ConnIo::sent` counted these bytes when they entered the pipe.
    let u = &mut d.uconns[c.index()];
    u.pipe_fill -= res as u32;
    d.wake.waker.add_out(res as u64);
    let chunk_done = matches!(conn.out.front(), Some(Chunk::File { off, end, .. }) if off == end);
    if u.pipe_fill == 0 && chunk_done {
        conn.pop_front(&mut d.io.spares);
        if !matches!(conn.out.front(), Some(Chunk::File { .. })) {
            if let Some(p) = u.pipe.take() {
                d.pipes.put(p, true);
            }
        }
    }
    d.io.mark_dirty(c);
}
