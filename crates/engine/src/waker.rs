//! Waking a parked zone from another thread (the control thread).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Arc;

/// An eventfd the zone's driver keeps a read armed on (io_uring) or registered (epoll).
/// Cloneable and `Send`: the control thread keeps one per zone.
#[derive(Clone)]
pub struct Waker {
    fd: Arc<OwnedFd>,
}

impl Waker {
    /// A new, unsignalled waker.
    pub fn new() -> io::Result<Self> {
        // SAFETY: eventfd has no memory arguments; a non-negative result is a new descriptor
        // that nothing else owns, so OwnedFd may take it.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: see above: `fd` is a fresh descriptor owned by no one else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Waker { fd: Arc::new(fd) })
    }

    /// Wakes the zone. Several wakes before the zone runs coalesce into one `on_wake`.
    pub fn wake(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to an eventfd we own; a failure (EAGAIN when
        // the counter is saturated) still leaves the zone woken, so it is ignored.
        unsafe {
            libc::write(self.fd.as_raw_fd(), (&one as *const u64).cast(), 8);
        }
    }

    pub(crate) fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}
