//! Control wake-ups as completions (`IORING_OP_MSG_RING`, Linux 5.18): a small ring owned by
//! the control side posts a CQE straight into a parked zone's ring, so the zone wakes from
//! the `io_uring_enter` it is blocked in with no eventfd and no extra read to re-arm.
//!
//! One process-wide sender ring, created on first use and used under a mutex: wake-ups are
//! control-plane events (reload, drain), never on a request path. The zone's driver registers
//! a [`MsgRingWake`] with its [`Waker`], which uses it before the eventfd.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Mutex;

use io_uring::{opcode, types, IoUring};

use super::userdata::{pack, Kind};
use crate::waker::{DirectWake, Waker};

static SENDER: Mutex<Option<IoUring>> = Mutex::new(None);

/// The `user_data` of the completion the zone receives.
pub(crate) fn wake_user_data() -> u64 {
    pack(Kind::Msg, 0, 0)
}

/// A zone's wake-up by MSG_RING: holds a duplicate of the zone's ring descriptor, so the
/// ring it posts into cannot be closed (and its number reused) under it.
struct MsgRingWake {
    ring: OwnedFd,
}

impl DirectWake for MsgRingWake {
    fn wake(&self) -> io::Result<()> {
        send(self.ring.as_raw_fd())
    }

    fn name(&self) -> &'static str {
        "MSG_RING"
    }
}

/// Lets `waker` wake the zone whose ring is `ring` with MSG_RING completions, until
/// [`Waker::clear_direct`] (the driver's drop). Without a duplicate descriptor (EMFILE) the
/// waker keeps using the eventfd.
pub(crate) fn register(waker: &Waker, ring: RawFd) {
    // SAFETY: F_DUPFD_CLOEXEC takes an integer; a non-negative result is a new descriptor
    // nothing else owns.
    let fd = unsafe { libc::fcntl(ring, libc::F_DUPFD_CLOEXEC, 0) };
    if fd >= 0 {
        // SAFETY: see above.
        let ring = unsafe { OwnedFd::from_raw_fd(fd) };
        waker.set_direct(Box::new(MsgRingWake { ring }));
    }
}

/// Posts one wake-up completion into the ring `target`.
fn send(target: RawFd) -> io::Result<()> {
    let mut guard = SENDER.lock().unwrap_or_else(|e| e.into_inner());
    if guard.is_none() {
        *guard = Some(IoUring::new(8)?);
    }
    let ring = guard.as_mut().expect("created above");
    let e = opcode::MsgRingData::new(types::Fd(target), 0, wake_user_data(), None)
        .build()
        .user_data(1);
    // SAFETY: the entry refers to no memory of ours; the target descriptor is kept open by
    // the caller (a `MsgRingWake`'s own duplicate, which the waker holds under its lock while
    // it calls) until the submission returns.
    unsafe { ring.submission().push(&e) }
        .map_err(|_| io::Error::other("MSG_RING sender queue full"))?;
    ring.submit_and_wait(1)?;
    let mut res = 0;
    for c in ring.completion() {
        res = c.result();
    }
    if res < 0 {
        return Err(io::Error::from_raw_os_error(-res));
    }
    Ok(())
}
