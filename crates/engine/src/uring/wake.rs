//! A read kept armed on the zone's eventfd (`IORING_OP_READ`, Linux 5.6), so another thread
//! can wake a zone parked in `io_uring_enter`.

use io_uring::{opcode, types};

use super::userdata::{pack, Kind};
use super::UringDriver;
use crate::handler::Handler;
use crate::waker::Waker;

pub(super) struct WakeOp {
    waker: Waker,
    /// The read's target; boxed so its address is stable while the driver moves.
    buf: Box<u64>,
}

impl WakeOp {
    pub(super) fn new(waker: Waker) -> Self {
        WakeOp {
            waker,
            buf: Box::new(0),
        }
    }
}

impl UringDriver {
    pub(super) fn arm_wake(&mut self) {
        let ptr: *mut u64 = &mut *self.wake.buf;
        let e = opcode::Read::new(types::Fd(self.wake.waker.raw()), ptr.cast(), 8)
            .build()
            .user_data(pack(Kind::Wake, 0, 0));
        // SAFETY: the boxed u64 and the eventfd live in the driver, which outlives the ring's
        // operations (the ring is dropped first); one read is armed at a time.
        unsafe { self.push(&e) };
    }

    pub(super) fn complete_wake<H: Handler>(&mut self, h: &mut H, res: i32) {
        self.arm_wake();
        if res >= 0 || res == -libc::EAGAIN {
            h.on_wake(&mut self.io);
        }
    }
}
