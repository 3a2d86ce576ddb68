//! A read kept armed on the zone's eventfd (`IORING_OP_READ`, Linux 5.6): the fallback
//! wake-up for a parked zone when the control side cannot use `IORING_OP_MSG_RING`
//! ([`super::msg`]). Either completion only ends the wait; the driver then finds the pending
//! flag set and calls `on_wake` (see [`crate::Waker`]).

use io_uring::{opcode, squeue, types};

use super::userdata::{pack, Kind};
use crate::waker::Waker;

/// The zone's waker and the target of its eventfd read.
pub(super) struct WakeOp {
    pub(super) waker: Waker,
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

    /// Lets the control side wake this zone with MSG_RING completions on `ring`.
    pub(super) fn waker_set_ring(&self, ring: std::os::fd::RawFd) {
        super::msg::register(&self.waker, ring);
    }

    /// The eventfd read: 8 bytes into this op's box. One is armed at a time (the driver
    /// re-arms it at its completion), so the box is never the target of two reads.
    pub(super) fn entry(&mut self) -> squeue::Entry {
        let ptr: *mut u64 = &mut *self.buf;
        opcode::Read::new(types::Fd(self.waker.raw()), ptr.cast(), 8)
            .build()
            .user_data(pack(Kind::Wake, 0, 0))
    }
}
