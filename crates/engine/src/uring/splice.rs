//! File bodies without a copy through user space: `IORING_OP_SPLICE` (Linux 5.7) from the
//! file into the connection's pipe, then from the pipe into the socket, round after round.

use std::os::fd::AsRawFd;

use io_uring::{opcode, types};

use super::userdata::{pack, Kind};
use super::UringDriver;
use crate::io::{Chunk, ConnId, ConnState};

impl UringDriver {
    /// Continues sending the file chunk at the front of the queue.
    pub(super) fn submit_splice(&mut self, c: ConnId) {
        if self.uconns[c.index()].pipe.is_none() {
            match self.pipes.get() {
                Ok(p) => self.uconns[c.index()].pipe = Some(p),
                Err(e) => return self.begin_close(c, Some(e)),
            }
        }
        let conn = &mut self.io.conns[c.index()];
        let u = &self.uconns[c.index()];
        let pipe = u.pipe.as_ref().expect("set above");
        let Some(Chunk::File { file, off, end }) = conn.out.front() else {
            unreachable!("submit_splice on a non-file chunk")
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
        unsafe { self.push(&e) };
    }

    pub(super) fn complete_splice_in(&mut self, c: ConnId, _gen: u32, res: i32) {
        let conn = &mut self.io.conns[c.index()];
        conn.in_flight = false;
        if conn.state == ConnState::Closing {
            return self.try_finish_close(c);
        }
        match res {
            n if n > 0 => {
                // Off the queue and into the pipe: counted as taken (`ConnIo::sent`).
                self.uconns[c.index()].pipe_fill = n as u32;
                conn.sent += n as u64;
                conn.advance(n as u64);
                self.io.mark_dirty(c);
            }
            n if n == -libc::EAGAIN || n == -libc::EINTR => self.io.mark_dirty(c),
            0 => {
                self.begin_close(c, Some(super::file_read::file_shrank()));
            }
            n => self.begin_close(c, Some(crate::sys::errno(n))),
        }
    }

    pub(super) fn complete_splice_out(&mut self, c: ConnId, _gen: u32, res: i32) {
        let conn = &mut self.io.conns[c.index()];
        conn.in_flight = false;
        if conn.state == ConnState::Closing {
            return self.try_finish_close(c);
        }
        if res == -libc::EAGAIN {
            // The socket is full and non-blocking (it had a descriptor for sendfile): wait
            // for room rather than resubmit at once.
            return self.wait_writable(c);
        }
        if res == -libc::EINTR || res == 0 {
            self.io.mark_dirty(c);
            return;
        }
        if res < 0 {
            return self.begin_close(c, Some(crate::sys::errno(res)));
        }
        // `ConnIo::sent` counted these bytes when they entered the pipe.
        let u = &mut self.uconns[c.index()];
        u.pipe_fill -= res as u32;
        self.wake.waker.add_out(res as u64);
        let chunk_done =
            matches!(conn.out.front(), Some(Chunk::File { off, end, .. }) if off == end);
        if u.pipe_fill == 0 && chunk_done {
            conn.pop_front(&mut self.io.spares);
            if !matches!(conn.out.front(), Some(Chunk::File { .. })) {
                if let Some(p) = u.pipe.take() {
                    self.pipes.put(p, true);
                }
            }
        }
        self.io.mark_dirty(c);
    }
}
