//! Datagrams on epoll: `recvmsg(2)` on a readable UDP listener (the sender's address, and the
//! destination from `IP_PKTINFO` on wildcard listeners), `recv(2)` with `MSG_TRUNC` on a
//! readable connected datagram socket (its real length tells a datagram that did not fit the
//! buffer), and the handler's queued sends made at once, non-blocking: a full socket buffer
//! drops the datagram, as it would drop an arriving one.

use std::io;
use std::net::SocketAddr;
use std::os::fd::RawFd;

use crate::cmsg::{self, CONTROL_SPACE};
use crate::dgram::SendTo;
use crate::io::{ConnId, ConnState, DgramTo, Io};

/// Datagrams taken from one socket per readiness event before other sockets get a turn.
pub(super) const DGRAM_BUDGET: usize = 64;

/// What one `recvmsg` on a UDP listener got.
pub(super) struct Got {
    pub peer: SocketAddr,
    /// The destination, GRO's segment size, the ECN bits.
    pub control: cmsg::Received,
    pub len: usize,
    pub truncated: bool,
}

/// One datagram from UDP socket `fd` into `buf`. `Ok(None)`: nothing waiting (`EAGAIN`), or a
/// sender that is not IPv4/IPv6.
pub(super) fn recv_from(fd: RawFd, buf: &mut [u8]) -> io::Result<Option<Got>> {
    // SAFETY: sockaddr_storage and msghdr are plain data; all-zero is valid for each.
    let mut name: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut control = [0u64; CONTROL_SPACE / 8];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: as above.
    let mut hdr: libc::msghdr = unsafe { std::mem::zeroed() };
    hdr.msg_name = (&mut name as *mut libc::sockaddr_storage).cast();
    hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    hdr.msg_iov = &mut iov;
    hdr.msg_iovlen = 1;
    hdr.msg_control = control.as_mut_ptr().cast();
    hdr.msg_controllen = CONTROL_SPACE as _;
    // SAFETY: recvmsg writes at most the lengths the header gives into the live locals and
    // `buf` it points to, and updates the header's lengths and flags.
    let n = unsafe { libc::recvmsg(fd, &mut hdr, libc::MSG_DONTWAIT) };
    if n < 0 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::EAGAIN) | Some(libc::EINTR) => Ok(None),
            _ => Err(e),
        };
    }
    let Some(peer) = crate::addr::to_addr(&name, hdr.msg_namelen as usize) else {
        return Ok(None);
    };
    // SAFETY: the control array is CONTROL_SPACE initialised bytes; the kernel wrote
    // msg_controllen of them.
    let control: &[u8] = unsafe {
        std::slice::from_raw_parts(
            control.as_ptr().cast(),
            (hdr.msg_controllen as usize).min(CONTROL_SPACE),
        )
    };
    Ok(Some(Got {
        peer,
        control: cmsg::parse(control),
        len: n as usize,
        truncated: hdr.msg_flags & libc::MSG_TRUNC != 0,
    }))
}

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
    for o in out.drain(..) {
        let r = match o.to {
            DgramTo::Listener { id, s } => match listener_fd(id.0) {
                Some(fd) => {
                    let r = send_to(fd, &o.buf, &s);
                    if let (Err(e), true) = (&r, s.segment > 0) {
                        io.gso_failed(e.raw_os_error().unwrap_or(0));
                    }
                    r
                }
                None => Err(io::Error::from_raw_os_error(libc::EBADF)),
            },
            DgramTo::Conn { c, gen } => {
                let open = io
                    .conns
                    .get(c.index())
                    .is_some_and(|x| x.gen == gen && x.state == ConnState::Open && x.dgram);
                if !open {
                    Err(io::Error::from_raw_os_error(libc::EBADF))
                } else {
                    // SAFETY: sends from a live vector on the connection's own descriptor.
                    let n = unsafe {
                        libc::send(
                            c.0 as RawFd,
                            o.buf.as_ptr().cast(),
                            o.buf.len(),
                            libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
                        )
                    };
                    let r = if n < 0 {
                        Err(io::Error::last_os_error())
                    } else {
                        Ok(())
                    };
                    if let Err(e) = &r {
                        if !matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::ENOBUFS)) {
                            failed.push((c, io::Error::new(e.kind(), e.to_string())));
                        }
                    }
                    r
                }
            }
        };
        io.dgram_done(o.buf, r.is_ok());
    }
    if io.dgram_out.is_empty() {
        io.dgram_out = out;
    }
    failed
}

/// One datagram from UDP socket `fd` as `s` says (or several of `s.segment` bytes each, cut
/// by the kernel: GSO): `sendmsg` with `IP_PKTINFO`, `UDP_SEGMENT` and `IP_TOS` control
/// messages, or `sendto` when there is none to set (it spares the kernel copying and
/// checking a `msghdr`).
fn send_to(fd: RawFd, buf: &[u8], s: &SendTo) -> io::Result<()> {
    let name = socket2::SockAddr::from(s.to);
    if s.is_plain() {
        // SAFETY: sendto reads `buf` and the address, both live and unwritten meanwhile.
        let n = unsafe {
            libc::sendto(
                fd,
                buf.as_ptr().cast(),
                buf.len(),
                libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
                name.as_ptr().cast(),
                name.len(),
            )
        };
        return if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        };
    }
    let mut iov = libc::iovec {
        iov_base: buf.as_ptr() as *mut libc::c_void,
        iov_len: buf.len(),
    };
    let mut control = [0u64; CONTROL_SPACE / 8];
    // SAFETY: msghdr is plain data; all-zero is valid.
    let mut hdr: libc::msghdr = unsafe { std::mem::zeroed() };
    hdr.msg_name = name.as_ptr() as *mut libc::c_void;
    hdr.msg_namelen = name.len();
    hdr.msg_iov = &mut iov;
    hdr.msg_iovlen = 1;
    let n = cmsg::write(&mut control, s);
    hdr.msg_control = control.as_mut_ptr().cast();
    hdr.msg_controllen = n as _;
    // SAFETY: sendmsg reads the header and what it points to (all live locals and `buf`,
    // which it does not write).
    let n = unsafe { libc::sendmsg(fd, &hdr, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
