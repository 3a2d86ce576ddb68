//! Pipes for splicing files into sockets (file → pipe → socket, never through user space).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Bytes one splice round moves; the pipe is sized to hold it.
pub(crate) const PIPE_CHUNK: u32 = 1024 * 1024;

pub(crate) struct Pipe {
    pub(crate) r: OwnedFd,
    pub(crate) w: OwnedFd,
    /// Capacity the kernel granted (at most `PIPE_CHUNK`).
    pub(crate) cap: u32,
}

impl Pipe {
    pub(crate) fn new() -> io::Result<Pipe> {
        let mut fds = [0 as RawFd; 2];
        // SAFETY: pipe2 writes two descriptors into a live 2-element array; on success both
        // are new and owned by nobody else.
        let (r, w) = unsafe {
            if libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
                return Err(io::Error::last_os_error());
            }
            (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1]))
        };
        // SAFETY: fcntl on a descriptor we own; failure leaves the default 64 KiB size, which
        // only makes each round smaller. The pipe is blocking on purpose: a splice that must
        // wait then waits in the kernel's worker instead of failing with EAGAIN.
        unsafe {
            libc::fcntl(w.as_raw_fd(), libc::F_SETPIPE_SZ, PIPE_CHUNK as libc::c_int);
        }
        // SAFETY: fcntl query on a descriptor we own.
        let n = unsafe { libc::fcntl(w.as_raw_fd(), libc::F_GETPIPE_SZ) };
        let cap = if n > 0 {
            (n as u32).min(PIPE_CHUNK)
        } else {
            65536
        };
        Ok(Pipe { r, w, cap })
    }
}

/// Idle pipes of a zone, reused across file responses.
#[derive(Default)]
pub(crate) struct PipePool {
    idle: Vec<Pipe>,
}

impl PipePool {
    pub(crate) fn get(&mut self) -> io::Result<Pipe> {
        match self.idle.pop() {
            Some(p) => Ok(p),
            None => Pipe::new(),
        }
    }

    /// Returns an empty pipe; a pipe that may still hold bytes is dropped instead.
    pub(crate) fn put(&mut self, p: Pipe, empty: bool) {
        if empty && self.idle.len() < 64 {
            self.idle.push(p);
        }
    }
}
