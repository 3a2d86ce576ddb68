//! Closing a connection without leaking its slot or freeing memory the kernel still uses:
//! cancel its pending receive (or connect) by user_data (`IORING_OP_ASYNC_CANCEL`), wait until no send or
//! splice owns a buffer, then `IORING_OP_CLOSE` the direct descriptor (Linux 5.15). Only when
//! that completes is `on_closed` delivered and the slot reusable. Also write shutdown
//! (`IORING_OP_SHUTDOWN`, Linux 5.11).

use io_uring::{opcode, types};

use super::userdata::{pack, Kind};
use super::UringDriver;
use crate::handler::Handler;
use crate::io::{ConnId, ConnState};

const CANCEL_DONE: u32 = 1 << 2;
const CLOSE_SUBMITTED: u32 = 1 << 3;

impl UringDriver {
    pub(super) fn begin_close(&mut self, c: ConnId, err: Option<std::io::Error>) {
        let conn = &mut self.io.conns[c.index()];
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
        } else {
            Kind::Recv
        };
        conn.state = ConnState::Closing;
        conn.close_err = err;
        conn.drop_unsent();
        let e =
            opcode::AsyncCancel2::new(types::CancelBuilder::user_data(pack(target, conn.gen, c.0)))
                .build()
                .user_data(pack(Kind::Cancel, conn.gen, c.0));
        // SAFETY: a cancellation refers to no memory of ours.
        unsafe { self.push(&e) };
    }

    pub(super) fn complete_cancel(&mut self, c: ConnId, _gen: u32) {
        self.io.conns[c.index()].drv |= CANCEL_DONE;
        self.try_finish_close(c);
    }

    pub(super) fn try_finish_close(&mut self, c: ConnId) {
        let conn = &mut self.io.conns[c.index()];
        if conn.state != ConnState::Closing
            || conn.in_flight
            || conn.drv & CANCEL_DONE == 0
            || conn.drv & CLOSE_SUBMITTED != 0
        {
            return;
        }
        conn.drv |= CLOSE_SUBMITTED;
        let e = opcode::Close::new(types::Fixed(c.0))
            .build()
            .user_data(pack(Kind::Close, conn.gen, c.0));
        // SAFETY: closing a slot refers to no memory of ours; nothing in flight uses it.
        unsafe { self.push(&e) };
    }

    pub(super) fn complete_close<H: Handler>(&mut self, h: &mut H, c: ConnId, _gen: u32) {
        let conn = &mut self.io.conns[c.index()];
        conn.state = ConnState::Free;
        conn.out.clear();
        let fill = conn.pipe_fill;
        conn.pipe_fill = 0;
        let pipe = conn.pipe.take();
        let err = conn.close_err.take();
        if let Some(p) = pipe {
            self.pipes.put(p, fill == 0);
        }
        self.release_outbound(c);
        h.on_closed(&mut self.io, c, err);
    }

    pub(super) fn shutdown(&mut self, c: ConnId) {
        let conn = &self.io.conns[c.index()];
        if conn.state != ConnState::Open {
            return;
        }
        let e = opcode::Shutdown::new(types::Fixed(c.0), libc::SHUT_WR)
            .build()
            .user_data(pack(Kind::Shutdown, conn.gen, c.0));
        // SAFETY: refers to no memory of ours; the slot outlives it (close cancels it first).
        unsafe { self.push(&e) };
    }
}
