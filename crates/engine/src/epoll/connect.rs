//! Outbound connections on epoll: a non-blocking `connect(2)` on the socket
//! [`crate::connect::socket_for`] made, completed when the socket turns writable (`EPOLLOUT`)
//! and checked with `SO_ERROR`.

use std::io;
use std::os::fd::{IntoRawFd, RawFd};

use super::{EpollDriver, WANT_IN, WANT_OUT};
use crate::handler::Handler;
use crate::io::{ConnId, ConnState};

impl EpollDriver {
    /// Starts a non-blocking connect on an outbound socket; completion is `EPOLLOUT`.
    pub(super) fn start_connect<H: Handler>(&mut self, h: &mut H, c: ConnId) {
        let conn = &mut self.io.conns[c.index()];
        if conn.state != ConnState::Connecting {
            return;
        }
        let Some(out) = conn.outbound.as_mut() else {
            return;
        };
        // From here the descriptor is owned by the connection table (closed in `close_now`).
        let fd = out.fd.take().map_or(c.0 as RawFd, |f| f.into_raw_fd());
        let (ptr, len) = (out.sa.as_ptr(), out.sa.len());
        // SAFETY: connect reads `len` bytes of a live, boxed socket address.
        let r = unsafe { libc::connect(fd, ptr.cast(), len) };
        let e = io::Error::last_os_error();
        if r < 0 && e.raw_os_error() != Some(libc::EINPROGRESS) {
            let e = io::Error::new(e.kind(), format!("connect to {}: {e}", peer_str(conn)));
            return self.close_now(c, Some(e), h);
        }
        self.set_interest(c, WANT_OUT);
        let token = self.token(c);
        let ev = libc::EPOLLOUT as u32 | libc::EPOLLIN as u32 | libc::EPOLLRDHUP as u32;
        if let Err(e) = self.set.ctl(libc::EPOLL_CTL_ADD, fd, ev, token) {
            self.close_now(c, Some(e), h);
        }
    }

    /// The connect of `c` finished (writable or failed).
    pub(super) fn connected<H: Handler>(&mut self, h: &mut H, c: ConnId) {
        let mut err: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: getsockopt writes one c_int into a live local and its length into another.
        let r = unsafe {
            libc::getsockopt(
                c.0 as RawFd,
                libc::SOL_SOCKET,
                libc::SO_ERROR,
                (&mut err as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        let e = if r < 0 {
            Some(io::Error::last_os_error())
        } else if err != 0 {
            Some(io::Error::from_raw_os_error(err))
        } else {
            None
        };
        let conn = &mut self.io.conns[c.index()];
        if let Some(e) = e {
            let e = io::Error::new(e.kind(), format!("connect to {}: {e}", peer_str(conn)));
            return self.close_now(c, Some(e), h);
        }
        conn.state = ConnState::Open;
        self.set_interest(c, WANT_IN | WANT_OUT); // recomputed below
        self.update_interest(c);
        self.io.mark_dirty(c);
        h.on_connected(&mut self.io, c);
    }
}

fn peer_str(conn: &crate::io::ConnIo) -> String {
    conn.peer.map_or_else(|| "?".to_string(), |p| p.to_string())
}
