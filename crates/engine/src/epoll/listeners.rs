//! When the zone accepts: the listening sockets leave the epoll set while `max_conns`
//! accepted connections are open (until one closes) or while the process is out of
//! descriptors (for a moment); connections wait in the kernel's accept queue meanwhile.

use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use super::{EpollDriver, T_LISTENER};

impl EpollDriver {
    /// `max_conns` connections are open: stop accepting until one closes (`close_now`).
    /// New connections wait in the kernel's accept queue meanwhile, as on io_uring.
    pub(super) fn table_full(&mut self) {
        if self.table_full {
            return;
        }
        self.table_full = true;
        self.waker.set_full(true);
        tracing::warn!(
            "connection limit reached (max_conns {}): new connections wait in the listen queue until one closes",
            self.max_conns
        );
        self.disarm_listeners();
    }

    /// Out of descriptors: stop accepting for a while.
    pub(super) fn pause_accepts(&mut self) {
        self.accept_paused_until = Some(Instant::now() + Duration::from_millis(100));
        self.disarm_listeners();
    }

    pub(super) fn resume_accepts(&mut self) {
        self.accept_paused_until = None;
        self.arm_listeners();
    }

    /// Takes the listeners out of the epoll set.
    pub(super) fn disarm_listeners(&mut self) {
        if !self.listeners_armed {
            return;
        }
        self.listeners_armed = false;
        for l in self.listeners.iter().flatten() {
            // SAFETY: removes a descriptor we own from our epoll set.
            unsafe {
                libc::epoll_ctl(
                    self.epfd.as_raw_fd(),
                    libc::EPOLL_CTL_DEL,
                    l.as_raw_fd(),
                    std::ptr::null_mut(),
                );
            }
        }
    }

    /// Puts the listeners back into the epoll set, unless the table is full or accepting is
    /// paused for lack of descriptors.
    pub(super) fn arm_listeners(&mut self) {
        if self.listeners_armed || self.table_full || self.accept_paused_until.is_some() {
            return;
        }
        self.listeners_armed = true;
        for (id, l) in self.listeners.iter().enumerate() {
            if let Some(l) = l {
                let _ = self.ctl(
                    libc::EPOLL_CTL_ADD,
                    l.as_raw_fd(),
                    libc::EPOLLIN as u32,
                    T_LISTENER | id as u64,
                );
            }
        }
    }
}
