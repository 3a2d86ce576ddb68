//! Large file bodies by `sendfile(2)` from the zone: no copy through user space and no kernel
//! worker thread.
//!
//! io_uring has no sendfile, and its splice always runs in `iou-wrk` workers. Reading into
//! the output buffer (`file_read.rs`) costs two copies of every byte, which for a 1 MB file
//! costs far more CPU than the epoll driver's sendfile (bench/NOTEBOOK.md). So bodies
//! larger than one read go by sendfile on an ordinary descriptor of the socket, installed once
//! per connection from its direct descriptor (`IORING_OP_FIXED_FD_INSTALL`, Linux 6.8) and
//! made non-blocking: each call sends what the socket buffer takes, and when it is full the
//! zone waits for room with `IORING_OP_POLL_ADD` (`POLLOUT`), like the epoll driver and
//! nginx. Each call covers at most `SENDFILE_WINDOW` bytes, and only once `cachestat(2)` says
//! the page cache holds all of them: a window not cached goes by splice instead, so the zone
//! does not wait for the disk (nginx's workers do, with sendfile and no aio threads). Kernels
//! without the install opcode keep the read path.
//!
//! The socket's open file stays non-blocking after the descriptor is dropped, which makes a
//! later splice into it fail with `EAGAIN` when it is full: `complete_splice_out` then waits
//! for room the same way.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use io_uring::{opcode, types};

use super::userdata::{pack, Kind};
use super::UringDriver;
use crate::io::{Chunk, ConnId, ConnState};

/// The most one `sendfile` call is asked for (checked to be in the page cache first).
const SENDFILE_WINDOW: u64 = 1 << 20;
/// `UringConn::flags` bit: no descriptor could be installed for this connection (EMFILE...); its
/// files are read and sent.
const NO_SENDFILE: u32 = 1 << 8;

impl UringDriver {
    /// Whether `remaining` bytes of a file go by sendfile on connection `c`: bodies larger
    /// than one read, and all of them while the connection has its descriptor (it is dropped
    /// when no file is queued, so it costs a descriptor per file being sent, not per
    /// connection; where none is left, EMFILE, the connection's files are read and sent).
    pub(super) fn use_sendfile(&self, c: ConnId, remaining: u64) -> bool {
        let u = &self.uconns[c.index()];
        self.sendfile_ok
            && u.flags & NO_SENDFILE == 0
            && (u.sock_fd.is_some() || remaining > super::file_read::FILE_READ_CHUNK as u64)
    }

    /// Sends the front file chunk by sendfile as far as the socket takes it. Called with
    /// nothing in flight.
    pub(super) fn sendfile_front(&mut self, c: ConnId) {
        let conn = &mut self.io.conns[c.index()];
        let Some(sock) = self.uconns[c.index()]
            .sock_fd
            .as_ref()
            .map(AsRawFd::as_raw_fd)
        else {
            let e = opcode::FixedFdInstall::new(types::Fixed(c.0), 0)
                .build()
                .user_data(pack(Kind::FdInstall, conn.gen, c.0));
            conn.in_flight = true;
            // SAFETY: the install refers to no memory of ours; `in_flight` keeps the slot
            // from being closed until it completes.
            return unsafe { self.push(&e) };
        };
        let Some(Chunk::File { file, off, end }) = conn.out.front() else {
            unreachable!("sendfile_front on a non-file chunk")
        };
        let (fd, start, end) = (file.as_raw_fd(), *off, *end);
        let count = (end - start).min(SENDFILE_WINDOW) as usize;
        if !cached(fd, start, count as u64) {
            return self.submit_splice(c);
        }
        let mut pos = start as libc::off_t;
        // SAFETY: both descriptors are open (the socket's is owned by the connection, the
        // file by the queued chunk); `pos` is a live local the kernel updates.
        let n = unsafe { libc::sendfile(sock, fd, &mut pos, count) };
        let err = match n {
            n if n > 0 => {
                let n = n as u64;
                conn.sent += n;
                self.wake.waker.add_out(n);
                if conn.advance(n) {
                    conn.pop_front(&mut self.io.spares);
                    // The next chunk, or what follows the flush; `flush_conn` drops the
                    // descriptor once no file is at the front.
                    self.io.mark_dirty(c);
                } else if n as usize == count {
                    self.io.mark_dirty(c); // the next window
                } else {
                    self.wait_writable(c); // the socket buffer is full
                }
                return;
            }
            0 => super::file_read::file_shrank(),
            _ => std::io::Error::last_os_error(),
        };
        match err.raw_os_error() {
            Some(libc::EAGAIN) => self.wait_writable(c),
            Some(libc::EINTR) => self.io.mark_dirty(c),
            _ => self.begin_close(c, Some(err)),
        }
    }

    /// Waits until the socket can take more (`POLLOUT`), then sends on.
    pub(super) fn wait_writable(&mut self, c: ConnId) {
        let conn = &mut self.io.conns[c.index()];
        let e = opcode::PollAdd::new(types::Fixed(c.0), libc::POLLOUT as u32)
            .build()
            .user_data(pack(Kind::PollOut, conn.gen, c.0));
        conn.in_flight = true;
        // SAFETY: a poll refers to no memory of ours; closing cancels it (`cancel_output`)
        // and waits for its completion.
        unsafe { self.push(&e) };
    }

    pub(super) fn complete_fd_install(&mut self, c: ConnId, gen: u32, res: i32) {
        // SAFETY: the kernel installed a new descriptor for us; nothing else owns it.
        let fd = (res >= 0).then(|| unsafe { OwnedFd::from_raw_fd(res) });
        let conn = &mut self.io.conns[c.index()];
        if conn.gen != gen {
            debug_assert!(false, "an install completes before its slot can be reused");
            return; // `fd` is closed here
        }
        conn.in_flight = false;
        let u = &mut self.uconns[c.index()];
        if let Some(fd) = fd {
            // SAFETY: fcntl on a descriptor we own. The flag is on the socket's open file:
            // io_uring's sends and receives do not consult it (they never block), its splices
            // do (module docs).
            let ok = unsafe {
                let fl = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
                fl >= 0 && libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, fl | libc::O_NONBLOCK) == 0
            };
            if ok {
                u.sock_fd = Some(fd);
            } else {
                u.flags |= NO_SENDFILE;
            }
        } else if res == -libc::EINVAL || res == -libc::EOPNOTSUPP {
            // Before Linux 6.8: the read path serves files from now on.
            u.flags |= NO_SENDFILE;
            if self.sendfile_ok {
                tracing::info!(
                    "io_uring cannot install descriptors here (Linux 6.8); file bodies are read and sent"
                );
                self.sendfile_ok = false;
            }
        } else {
            // EMFILE, ENFILE...: this connection's files are read and sent.
            tracing::debug!("no descriptor for sendfile: {}", crate::sys::errno(res));
            u.flags |= NO_SENDFILE;
        }
        let conn = &mut self.io.conns[c.index()];
        if conn.state == ConnState::Closing {
            return self.try_finish_close(c);
        }
        self.io.mark_dirty(c);
    }

    pub(super) fn complete_poll_out(&mut self, c: ConnId, gen: u32, res: i32) {
        let conn = &mut self.io.conns[c.index()];
        if conn.gen != gen {
            debug_assert!(false, "a poll completes before its slot can be reused");
            return;
        }
        conn.in_flight = false;
        if conn.state == ConnState::Closing {
            return self.try_finish_close(c);
        }
        if res < 0 && res != -libc::ECANCELED {
            return self.begin_close(c, Some(crate::sys::errno(res)));
        }
        // POLLERR/POLLHUP too: the next sendfile reports what happened.
        self.io.mark_dirty(c);
    }
}

/// Whether the page cache holds all of `len` bytes of `fd` from `off`: `cachestat(2)` (Linux
/// 6.5, older than the install opcode this path needs); where it is refused (a seccomp
/// filter), one-byte `RWF_NOWAIT` reads of the first and last byte.
fn cached(fd: i32, off: u64, len: u64) -> bool {
    /// `struct cachestat_range` and `struct cachestat` of <linux/mman.h>; the libc crate has
    /// no binding for x86_64 (syscall 451 on every architecture).
    #[repr(C)]
    struct Range {
        off: u64,
        len: u64,
    }
    #[repr(C)]
    #[derive(Default)]
    struct Stat {
        nr_cache: u64,
        nr_dirty: u64,
        nr_writeback: u64,
        nr_evicted: u64,
        nr_recently_evicted: u64,
    }
    const SYS_CACHESTAT: libc::c_long = 451;
    let range = Range { off, len };
    let mut st = Stat::default();
    // SAFETY: both pointers are to live, properly laid out locals; the kernel reads `range`
    // and writes `st` during this synchronous call only.
    let r = unsafe {
        libc::syscall(
            SYS_CACHESTAT,
            fd,
            &raw const range,
            &raw mut st,
            0 as libc::c_uint,
        )
    };
    if r == 0 {
        let page = page_size();
        let pages = (off + len).div_ceil(page) - off / page;
        return st.nr_cache >= pages;
    }
    probe(fd, off) && probe(fd, off + len - 1)
}

fn page_size() -> u64 {
    thread_local! {
        // SAFETY: sysconf has no preconditions.
        static PAGE: u64 = match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
            n if n > 0 => n as u64,
            _ => 4096,
        };
    }
    PAGE.with(|p| *p)
}

/// Whether the byte of `fd` at `off` is in the page cache (a one-byte `RWF_NOWAIT` read).
fn probe(fd: i32, off: u64) -> bool {
    let mut b = [std::mem::MaybeUninit::uninit()];
    super::file_read::pread_nowait(fd, &mut b, off).is_ok_and(|n| n == 1)
}
