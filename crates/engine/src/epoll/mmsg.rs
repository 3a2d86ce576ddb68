//! Datagrams in batches on epoll: `recvmmsg(2)` takes up to [`RecvBatch::len`] waiting
//! datagrams from a UDP listener in one system call, and `sendmmsg(2)` sends the
//! datagrams a callback batch queued on one listener in one call — what io_uring's
//! multishot receive and its batched submissions give the other driver. Each message has
//! its own buffer, address and control messages (`IP_PKTINFO`, `UDP_GRO` / `UDP_SEGMENT`,
//! `IP_TOS`: `cmsg.rs`).
//!
//! The `mmsghdr`s point into vectors this module owns; they are filled in afresh before
//! each call, so a vector that moved since (none grows after `new`) is never pointed at.

use std::io;
use std::net::SocketAddr;
use std::os::fd::RawFd;

use crate::cmsg::{self, ControlBuf, CONTROL_SPACE};
use crate::send_to::SendTo;

/// What one received message holds.
pub(super) struct Got {
    pub peer: SocketAddr,
    pub control: cmsg::Received,
    pub len: usize,
    pub truncated: bool,
}

/// Buffers for one `recvmmsg`.
pub(super) struct RecvBatch {
    bufs: Vec<Vec<u8>>,
    names: Vec<libc::sockaddr_storage>,
    controls: Vec<ControlBuf>,
    iovs: Vec<libc::iovec>,
    hdrs: Vec<libc::mmsghdr>,
}

impl RecvBatch {
    /// Room for `n` datagrams of `size` bytes each.
    pub(super) fn new(n: usize, size: usize) -> RecvBatch {
        let n = n.max(1);
        RecvBatch {
            bufs: (0..n).map(|_| vec![0; size]).collect(),
            // SAFETY: sockaddr_storage is plain data; all-zero is valid.
            names: vec![unsafe { std::mem::zeroed() }; n],
            controls: vec![[0; CONTROL_SPACE / 8]; n],
            iovs: Vec::with_capacity(n),
            hdrs: Vec::with_capacity(n),
        }
    }

    /// Datagrams one call takes at most.
    pub(super) fn len(&self) -> usize {
        self.bufs.len()
    }

    /// The first buffer (connected sockets read one datagram at a time into it).
    pub(super) fn first(&mut self) -> &mut [u8] {
        &mut self.bufs[0]
    }

    /// Receives what is waiting on `fd`, up to [`len`](Self::len) datagrams; returns how many
    /// (0: none). Each is then read with [`get`](Self::get).
    pub(super) fn recv(&mut self, fd: RawFd) -> io::Result<usize> {
        let n = self.bufs.len();
        self.iovs.clear();
        for b in &mut self.bufs {
            self.iovs.push(libc::iovec {
                iov_base: b.as_mut_ptr().cast(),
                iov_len: b.len(),
            });
        }
        self.hdrs.clear();
        for i in 0..n {
            // SAFETY: msghdr is plain data; all-zero is valid.
            let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
            h.msg_name = (&mut self.names[i] as *mut libc::sockaddr_storage).cast();
            h.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            h.msg_iov = &mut self.iovs[i];
            h.msg_iovlen = 1;
            h.msg_control = self.controls[i].as_mut_ptr().cast();
            h.msg_controllen = CONTROL_SPACE as _;
            self.hdrs.push(libc::mmsghdr {
                msg_hdr: h,
                msg_len: 0,
            });
        }
        // SAFETY: `hdrs` holds `n` headers whose pointers lead into `names`, `iovs`,
        // `controls` and `bufs`, all owned by `self`, live, and not moved during the call
        // (nothing else touches them); the kernel writes at most the lengths they give.
        let r = unsafe {
            libc::recvmmsg(
                fd,
                self.hdrs.as_mut_ptr(),
                n as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::EAGAIN) | Some(libc::EINTR) => Ok(0),
                _ => Err(e),
            };
        }
        Ok(r as usize)
    }

    /// Message `i` of the last [`recv`](Self::recv) and its bytes; None for a sender that
    /// is not IPv4/IPv6.
    pub(super) fn get(&self, i: usize) -> Option<(Got, &[u8])> {
        let m = &self.hdrs[i];
        let h = &m.msg_hdr;
        let peer = crate::addr::to_addr(&self.names[i], h.msg_namelen as usize)?;
        // `msg_controllen` is a size_t on glibc, a socklen_t on other C libraries.
        #[allow(clippy::unnecessary_cast)]
        let clen = (h.msg_controllen as usize).min(CONTROL_SPACE);
        // SAFETY: the control array is CONTROL_SPACE initialised bytes; the kernel wrote
        // `clen` of them.
        let control: &[u8] =
            unsafe { std::slice::from_raw_parts(self.controls[i].as_ptr().cast(), clen) };
        let len = (m.msg_len as usize).min(self.bufs[i].len());
        let got = Got {
            peer,
            control: cmsg::parse(control),
            len,
            truncated: h.msg_flags & libc::MSG_TRUNC != 0,
        };
        Some((got, &self.bufs[i][..len]))
    }
}

/// Datagrams sent from one listener at most per `sendmmsg`.
pub(super) const SEND_BATCH: usize = 32;

/// Sends `msgs` (bytes and where and how each goes) from UDP socket `fd` in as few
/// `sendmmsg` calls as it takes; returns each message's outcome, in order.
pub(super) fn send_many(fd: RawFd, msgs: &[(&[u8], SendTo)]) -> Vec<io::Result<()>> {
    let mut out = Vec::with_capacity(msgs.len());
    let mut names: Vec<socket2::SockAddr> = Vec::with_capacity(SEND_BATCH);
    let mut controls: Vec<ControlBuf> = vec![[0; CONTROL_SPACE / 8]; SEND_BATCH];
    let mut iovs: Vec<libc::iovec> = Vec::with_capacity(SEND_BATCH);
    let mut hdrs: Vec<libc::mmsghdr> = Vec::with_capacity(SEND_BATCH);
    let mut at = 0;
    while at < msgs.len() {
        let chunk = &msgs[at..(at + SEND_BATCH).min(msgs.len())];
        names.clear();
        iovs.clear();
        hdrs.clear();
        for (data, s) in chunk {
            names.push(socket2::SockAddr::from(s.to));
            iovs.push(libc::iovec {
                iov_base: data.as_ptr() as *mut libc::c_void,
                iov_len: data.len(),
            });
        }
        for (i, (_, s)) in chunk.iter().enumerate() {
            let clen = cmsg::write(&mut controls[i], s);
            // SAFETY: msghdr is plain data; all-zero is valid.
            let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
            h.msg_name = names[i].as_ptr() as *mut libc::c_void;
            h.msg_namelen = names[i].len();
            h.msg_iov = &mut iovs[i];
            h.msg_iovlen = 1;
            if clen > 0 {
                h.msg_control = controls[i].as_mut_ptr().cast();
                h.msg_controllen = clen as _;
            }
            hdrs.push(libc::mmsghdr {
                msg_hdr: h,
                msg_len: 0,
            });
        }
        // SAFETY: each header points into `names`, `iovs`, `controls` and the caller's
        // bytes, all live and unchanged during the call; the kernel only reads them (and
        // writes `msg_len`).
        let r = unsafe {
            libc::sendmmsg(
                fd,
                hdrs.as_mut_ptr(),
                hdrs.len() as libc::c_uint,
                libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
            )
        };
        if r <= 0 {
            // The first message failed (a full socket buffer, a refused segmentation...):
            // it is dropped, as a full buffer drops a datagram, and the rest go on.
            out.push(Err(match r {
                0 => io::Error::from(io::ErrorKind::WouldBlock),
                _ => io::Error::last_os_error(),
            }));
            at += 1;
        } else {
            let sent = (r as usize).min(chunk.len());
            out.extend((0..sent).map(|_| Ok(())));
            at += sent;
        }
    }
    out
}
