//! Datagrams on epoll: `recv(2)` with `MSG_TRUNC` on a readable connected datagram socket
//! (its real length tells a datagram that did not fit the buffer), and the handler's queued
//! sends made at once, non-blocking — each listener's in `sendmmsg` batches (`mmsg.rs`, which
//! also receives a listener's datagrams with `recvmmsg`): a full socket buffer drops the
//! datagram, as it would drop an arriving one.

use std::io;
use std::os::fd::RawFd;

use super::mmsg;
use crate::dgram::SendTo;
use crate::io::{ConnId, ConnState, DgramOut, DgramTo, Io};

/// Datagrams taken from one socket per readiness event before other sockets get a turn.
pub(super) const DGRAM_BUDGET: usize = 64;

/// One datagram from connected socket `fd` into `buf`: `Ok(Some(len))` with its real length,
/// which exceeds `buf.len()` when it did not fit; `Ok(None)` when nothing is waiting.
pub(super) fn recv_conn(fd: RawFd, buf: &mut [u8]) -> io::Result<Option<usize>> {
    // SAFETY: recv writes at most buf.len() bytes into the live slice; MSG_TRUNC makes it
    // return the datagram's real length.
    let n = unsafe {
        libc::recv(
            fd,
            buf.as_mut_ptr().cast(),
            buf.len(),
            libc::MSG_DONTWAIT | libc::MSG_TRUNC,
        )
    };
    if n < 0 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::EAGAIN) | Some(libc::EINTR) => Ok(None),
            _ => Err(e),
        };
    }
    Ok(Some(n as usize))
}

/// Sends every datagram the handler queued. `listener_fd` gives a UDP listener's descriptor
/// (`None`: gone). Returns the connected sockets whose send failed for a reason that ends
/// them (`ECONNREFUSED`...), with the error, for the caller to close.
pub(super) fn send_all(
    io: &mut Io,
    listener_fd: impl Fn(u32) -> Option<RawFd>,
) -> Vec<(ConnId, io::Error)> {
    let mut failed = Vec::new();
    if io.dgram_out.is_empty() {
        return failed;
    }
    let mut out = std::mem::take(&mut io.dgram_out);
    // Each listener's sends go together, in sendmmsg batches (UDP keeps no order to keep).
    let mut by_listener: Vec<(u32, Vec<DgramOut>)> = Vec::new();
    for o in out.drain(..) {
        match o.to {
            DgramTo::Listener { id, .. } => match by_listener.iter_mut().find(|g| g.0 == id.0) {
                Some(g) => g.1.push(o),
                None => by_listener.push((id.0, vec![o])),
            },
            DgramTo::Conn { c, gen } => {
                let r = send_conn(io, c, gen, &o.buf);
                if let Err(e) = &r {
                    if !matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::ENOBUFS)) {
                        failed.push((c, io::Error::new(e.kind(), e.to_string())));
                    }
                }
                io.dgram_done(o.buf, r.is_ok());
            }
        }
    }
    for (id, group) in by_listener {
        let Some(fd) = listener_fd(id) else {
            for o in group {
                io.dgram_done(o.buf, false); // the listener is gone
            }
            continue;
        };
        let msgs: Vec<(&[u8], SendTo)> = group
            .iter()
            .filter_map(|o| match o.to {
                DgramTo::Listener { s, .. } => Some((&o.buf[..], s)),
                DgramTo::Conn { .. } => None,
            })
            .collect();
        let results = mmsg::send_many(fd, &msgs);
        drop(msgs);
        for (o, r) in group.into_iter().zip(results) {
            if let (Err(e), DgramTo::Listener { s, .. }) = (&r, o.to) {
                if s.segment > 0 {
                    io.gso_failed(e.raw_os_error().unwrap_or(0));
                }
            }
            io.dgram_done(o.buf, r.is_ok());
        }
    }
    if io.dgram_out.is_empty() {
        io.dgram_out = out;
    }
    failed
}

/// One datagram on connected datagram socket `c` (generation `gen`), if it is still open.
fn send_conn(io: &Io, c: ConnId, gen: u32, buf: &[u8]) -> io::Result<()> {
    let open = io
        .conns
        .get(c.index())
        .is_some_and(|x| x.gen == gen && x.state == ConnState::Open && x.dgram);
    if !open {
        return Err(io::Error::from_raw_os_error(libc::EBADF));
    }
    // SAFETY: sends from a live slice on the connection's own descriptor.
    let n = unsafe {
        libc::send(
            c.0 as RawFd,
            buf.as_ptr().cast(),
            buf.len(),
            libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
