//! A read kept armed on the zone's eventfd (`IORING_OP_READ`, Linux 5.6): the fallback
//! wake-up for a parked zone when the control side cannot use `IORING_OP_MSG_RING`
//! ([`super::msg`]). Either completion only ends the wait; the driver then finds the pending
//! flag set and calls `on_wake` (see [`crate::Waker`]).

use io_uring::{opcode, types};

use super::userdata::{pack, Kind};
use super::UringDriver;
use crate::handler::Handler;
use crate::waker::Waker;

pub(super) struct WakeOp {
    pub(super) waker: Waker,
    /// The read's target; boxed so its address is stable while the driver moves.
    buf: Box<u64>,
}

impl WakeOp {
    /// Lets the control side wake this zone with MSG_RING completions on `ring`.
    pub(super) fn waker_set_ring(&self, ring: std::os::fd::RawFd) {
        super::msg::register(&self.waker, ring);
    }

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

    pub(super) fn complete_wake(&mut self) {
        self.arm_wake();
    }

    /// Once per loop iteration: one atomic load unless a control message is pending.
    #[inline]
    pub(super) fn check_wake<H: Handler>(&mut self, h: &mut H) {
        if self.wake.waker.take_pending() {
            h.on_wake(&mut self.io);
        }
    }

    pub(super) fn waker(&self) -> &Waker {
        &self.wake.waker
    }
}
