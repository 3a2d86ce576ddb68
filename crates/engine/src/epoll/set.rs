//! The zone's epoll instance and the tokens registered with it: what each event names (a
//! connection with its generation, a listener, or the waker's eventfd).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

pub(super) const T_CONN: u64 = 0;
pub(super) const T_LISTENER: u64 = 1 << 62;
pub(super) const T_WAKE: u64 = 2 << 62;
pub(super) const T_MASK: u64 = 3 << 62;

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// An epoll instance (`epoll_create1`), closed on drop.
pub(super) struct EpollSet {
    fd: OwnedFd,
}

impl EpollSet {
    pub(super) fn new() -> io::Result<Self> {
        // SAFETY: epoll_create1 takes no pointers; a non-negative result is a new descriptor.
        let fd = cvt(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
        // SAFETY: `fd` was just created and is owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(EpollSet { fd })
    }

    /// `epoll_ctl(op)` for `fd` with `events`, naming it by `token`.
    pub(super) fn ctl(
        &self,
        op: libc::c_int,
        fd: RawFd,
        events: u32,
        token: u64,
    ) -> io::Result<()> {
        let mut ev = libc::epoll_event { events, u64: token };
        // SAFETY: epoll_ctl reads one live epoll_event; both descriptors are ours.
        cvt(unsafe { libc::epoll_ctl(self.fd.as_raw_fd(), op, fd, &mut ev) }).map(drop)
    }

    /// Takes `fd` out of the set (`EPOLL_CTL_DEL`); an error (not in the set) is ignored.
    pub(super) fn remove(&self, fd: RawFd) {
        // SAFETY: removes a descriptor we own from our epoll set; DEL reads no event.
        unsafe {
            libc::epoll_ctl(
                self.fd.as_raw_fd(),
                libc::EPOLL_CTL_DEL,
                fd,
                std::ptr::null_mut(),
            );
        }
    }

    /// One `epoll_wait` into `events`: the number of events, or -1 with `errno` set.
    pub(super) fn wait(&self, events: &mut [libc::epoll_event], ms: i32) -> libc::c_int {
        // SAFETY: epoll_wait writes at most events.len() entries into the live slice.
        unsafe {
            libc::epoll_wait(
                self.fd.as_raw_fd(),
                events.as_mut_ptr(),
                events.len() as i32,
                ms,
            )
        }
    }
}
