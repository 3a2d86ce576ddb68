//! Large file bodies by `sendfile(2)` from the zone: no copy through user space and no kernel
//! worker thread.
//!
//! io_uring has no sendfile, and its splice always runs in `iou-wrk` workers. Reading into
//! the output buffer (`file_read.rs`) costs two copies of every byte, which for a 1 MB file
//! costs far more CPU than the epoll driver's sendfile (bench/NOTEBOOK.md). So bodies
//! larger than one read go by sendfile on an ordinary descriptor of the socket, installed once
//! per connection from its direct descriptor (`IORING_OP_FIXED_FD_INSTALL`, Linux 6.8) and
//! made non-blocking: each call sends what the socket buffer takes, and when it is full the
//! zone waits for room with `IORING_OP_POLL_ADD` (`POLLOUT`, `poll.rs`), like the epoll driver and
//! nginx. Each call covers at most `SENDFILE_WINDOW` bytes, and only once `cachestat(2)` says
//! the page cache holds all of them: a window not cached goes by splice instead, so the zone
//! does not wait for the disk (nginx's workers do, with sendfile and no aio threads). Kernels
//! without the install opcode keep the read path.
//!
//! The socket's open file stays non-blocking after the descriptor is dropped, which makes a
//! later splice into it fail with `EAGAIN` when it is full: `splice::complete_out` then waits
//! for room the same way.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use io_uring::{opcode, types};

use super::pagecache::{cached, file_shrank};
use super::state::UringDriver;
use super::userdata::{pack, Kind};
use super::{close, poll, splice};
use crate::io::{Chunk, ConnId, ConnState};

/// The most one `sendfile` call is asked for (checked to be in the page cache first).
const SENDFILE_WINDOW: u64 = 1 << 20;
/// `UringConn::flags` bit: no descriptor could be installed for this connection (EMFILE...); its
/// files are read and sent.
pub(super) const NO_SENDFILE: u32 = 1 << 8;

/// Sends the front file chunk by sendfile as far as the socket takes it. Called with
/// nothing in flight.
pub(super) fn send_front(d: &mut UringDriver, c: ConnId) {
    let conn = &mut d.io.conns[c.index()];
    let Some(sock) = d.uconns[c.index()].sock_fd.as_ref().map(AsRawFd::as_raw_fd) else {
        let e = opcode::FixedFdInstall::new(types::Fixed(c.0), 0)
            .build()
            .user_data(pack(Kind::FdInstall, conn.gen, c.0));
        conn.in_flight = true;
        // SAFETY: the install refers to no memory of ours; `in_flight` keeps the slot
        // from being closed until it completes.
        return unsafe { d.push(&e) };
    };
    let Some(Chunk::File { file, off, end }) = conn.out.front() else {
        unreachable!("sendfile::send_front on a non-file chunk")
    };
    let (fd, start, end) = (file.as_raw_fd(), *off, *end);
    let count = (end - start).min(SENDFILE_WINDOW) as usize;
    if !cached(fd, start, count as u64) {
        return splice::submit(d, c);
    }
    let mut pos = start as libc::off_t;
    // SAFETY: both descriptors are open (the socket's is owned by the connection, the
    // file by the queued chunk); `pos` is a live local the kernel updates.
    let n = unsafe { libc::sendfile(sock, fd, &mut pos, count) };
    let err = match n {
        n if n > 0 => {
            let n = n as u64;
            conn.sent += n;
            d.wake.waker.add_out(n);
            if conn.advance(n) {
                conn.pop_front(&mut d.io.spares);
                // The next chunk, or what follows the flush; `flush_conn` drops the
                // descriptor once no file is at the front.
                d.io.mark_dirty(c);
            } else if n as usize == count {
                d.io.mark_dirty(c); // the next window
            } else {
                poll::wait_writable(d, c); // the socket buffer is full
            }
            return;
        }
        0 => file_shrank(),
        _ => std::io::Error::last_os_error(),
    };
    match err.raw_os_error() {
        Some(libc::EAGAIN) => poll::wait_writable(d, c),
        Some(libc::EINTR) => d.io.mark_dirty(c),
        _ => close::begin(d, c, Some(err)),
    }
}

pub(super) fn complete_fd_install(d: &mut UringDriver, c: ConnId, gen: u32, res: i32) {
    // SAFETY: the kernel installed a new descriptor for us; nothing else owns it.
    let fd = (res >= 0).then(|| unsafe { OwnedFd::from_raw_fd(res) });
    let conn = &mut d.io.conns[c.index()];
    if conn.gen != gen {
        debug_assert!(false, "an install completes before its slot can be reused");
        return; // `fd` is closed here
    }
    conn.in_flight = false;
    let u = &mut d.uconns[c.index()];
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
        if d.sendfile_ok {
            tracing::info!(
                "io_uring cannot install descriptors here (Linux 6.8); file bodies are read and sent"
            );
            d.sendfile_ok = false;
        }
    } else {
        // EMFILE, ENFILE...: this connection's files are read and sent.
        tracing::debug!("no descriptor for sendfile: {}", crate::sys::errno(res));
        u.flags |= NO_SENDFILE;
    }
    let conn = &mut d.io.conns[c.index()];
    if conn.state == ConnState::Closing {
        return close::try_finish(d, c);
    }
    d.io.mark_dirty(c);
}
