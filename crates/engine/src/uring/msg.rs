//! Control wake-ups as completions (`IORING_OP_MSG_RING`, Linux 5.18): a small ring owned by
//! the control side posts a CQE straight into a parked zone's ring, so the zone wakes from
//! the `io_uring_enter` it is blocked in with no eventfd and no extra read to re-arm.
//!
//! One process-wide sender ring, created on first use and used under a mutex: wake-ups are
//! control-plane events (reload, drain), never on a request path.

use std::io;
use std::os::fd::RawFd;
use std::sync::Mutex;

use io_uring::{opcode, types, IoUring};

use super::userdata::{pack, Kind};

static SENDER: Mutex<Option<IoUring>> = Mutex::new(None);

/// The `user_data` of the completion the zone receives.
pub(crate) fn wake_user_data() -> u64 {
    pack(Kind::Msg, 0, 0)
}

/// Posts one wake-up completion into the ring `target`.
pub(crate) fn send(target: RawFd) -> io::Result<()> {
    let mut guard = SENDER.lock().unwrap_or_else(|e| e.into_inner());
    if guard.is_none() {
        *guard = Some(IoUring::new(8)?);
    }
    let ring = guard.as_mut().expect("created above");
    let e = opcode::MsgRingData::new(types::Fd(target), 0, wake_user_data(), None)
        .build()
        .user_data(1);
    // SAFETY: the entry refers to no memory of ours; the target descriptor is kept open by
    // the caller (the waker's duplicate, held under its lock) until the submission returns.
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
