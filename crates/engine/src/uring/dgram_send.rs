//! Sending datagrams: from a UDP listener to a client `IORING_OP_SEND` with a destination
//! address (`sendto`, Linux 6.0, as the multishot receive), or `IORING_OP_SENDMSG` with the
//! source address in an `IP_PKTINFO` control message when the listener is bound to a wildcard
//! address; `IORING_OP_SEND` on a connected datagram socket. Many sends
//! may be in flight on one socket: each owns its slot here — bytes, address, `msghdr` — until
//! its completion, so nothing waits for the one before it (UDP keeps no order to protect).
//! Slots are reused; their number is bounded by the zone's limit of queued sends
//! (`Io::dgrams_pending`).

use io_uring::{opcode, types};

use super::close;
use super::state::UringDriver;
use super::userdata::{pack, Kind};
use crate::cmsg;
use crate::io::{ConnState, DgramOut, DgramTo};

/// Submits every datagram the handler queued.
pub(super) fn submit_all(d: &mut UringDriver) {
    if d.io.dgram_out.is_empty() {
        return;
    }
    let mut out = std::mem::take(&mut d.io.dgram_out);
    for o in out.drain(..) {
        submit(d, o);
    }
    if d.io.dgram_out.is_empty() {
        d.io.dgram_out = out;
    }
}

fn submit(d: &mut UringDriver, o: DgramOut) {
    match o.to {
        DgramTo::Listener { id, s: to } => {
            let fd = match d.listeners.get(id.0 as usize) {
                Some(l) if l.udp && !l.closing => {
                    l.sock.as_ref().map(std::os::fd::AsRawFd::as_raw_fd)
                }
                _ => None,
            };
            let Some(fd) = fd else {
                return d.io.dgram_done(o.buf, false); // the listener is gone
            };
            let i = d.dgram_sends.take();
            let s = &mut *d.dgram_sends.slots[i as usize];
            s.buf = o.buf;
            s.name = socket2::SockAddr::from(to.to);
            s.listener = Some(id.0);
            s.conn = None;
            s.segmented = to.segment > 0;
            let e = if to.is_plain() {
                // No source address, segment size or ECN to set: a send with a destination
                // (`sendto`), which spares the kernel copying and checking a `msghdr` and
                // its iovec per datagram (about a tenth of the send's cost, profiled).
                opcode::Send::new(types::Fd(fd), s.buf.as_ptr(), s.buf.len() as u32)
                    .dest_addr(s.name.as_ptr().cast())
                    .dest_addr_len(s.name.len())
                    .build()
            } else {
                s.iov = libc::iovec {
                    iov_base: s.buf.as_mut_ptr().cast(),
                    iov_len: s.buf.len(),
                };
                s.hdr.msg_name = s.name.as_ptr() as *mut libc::c_void;
                s.hdr.msg_namelen = s.name.len();
                s.hdr.msg_iov = &mut s.iov;
                s.hdr.msg_iovlen = 1;
                let n = cmsg::write(&mut s.cmsg, &to);
                s.hdr.msg_control = s.cmsg.as_mut_ptr().cast();
                s.hdr.msg_controllen = n as _;
                opcode::SendMsg::new(types::Fd(fd), &s.hdr).build()
            }
            .user_data(pack(Kind::DgramSend, 0, i));
            d.listeners[id.0 as usize].sends += 1;
            // SAFETY: the payload, the destination address and (sendmsg) the msghdr and the
            // control bytes it points to live in the boxed slot `i`, which is not reused or
            // dropped before this completion (`complete`); the socket stays open while
            // `sends` counts this one.
            unsafe { d.push(&e) };
        }
        DgramTo::Conn { c, gen } => {
            let open =
                d.io.conns
                    .get(c.index())
                    .is_some_and(|x| x.gen == gen && x.state == ConnState::Open && x.dgram);
            if !open {
                return d.io.dgram_done(o.buf, false); // closed before it went
            }
            let i = d.dgram_sends.take();
            let s = &mut *d.dgram_sends.slots[i as usize];
            s.buf = o.buf;
            s.listener = None;
            s.conn = Some((c, gen));
            let e = opcode::Send::new(types::Fixed(c.0), s.buf.as_ptr(), s.buf.len() as u32)
                .build()
                .user_data(pack(Kind::DgramSend, 0, i));
            // SAFETY: the bytes live in the boxed slot `i` until this completion; the direct
            // descriptor is resolved when the send is issued, before any later close of the
            // slot in the same submission.
            unsafe { d.push(&e) };
        }
    }
}

/// A datagram send completed: its slot is free, its buffer kept for the next send. An error
/// on a connected socket (`ECONNREFUSED`: the peer's port is closed) closes it with that
/// error, so the handler learns of it.
pub(super) fn complete(d: &mut UringDriver, i: u32, res: i32) {
    let Some(s) = d.dgram_sends.slots.get_mut(i as usize) else {
        tracing::warn!("datagram send completion for unknown slot {i}");
        return;
    };
    let buf = std::mem::take(&mut s.buf);
    let (listener, conn) = (s.listener.take(), s.conn.take());
    let segmented = std::mem::take(&mut s.segmented);
    d.dgram_sends.free.push(i);
    if let Some(id) = listener {
        let l = &mut d.listeners[id as usize];
        l.sends = l.sends.saturating_sub(1);
        d.release_listener(id);
    }
    if res < 0 && segmented {
        d.io.gso_failed(-res);
    }
    if res < 0 {
        if let Some((c, gen)) = conn {
            let open =
                d.io.conns
                    .get(c.index())
                    .is_some_and(|x| x.gen == gen && x.state == ConnState::Open);
            if open && res != -libc::ECANCELED {
                close::begin(d, c, Some(crate::sys::errno(res)));
            }
        }
    }
    d.io.dgram_done(buf, res >= 0);
}
