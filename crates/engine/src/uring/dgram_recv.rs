//! Receiving datagrams: multishot `IORING_OP_RECVMSG` (`IORING_RECV_MULTISHOT` with
//! `IOSQE_BUFFER_SELECT`, Linux 6.0) on UDP listeners and on connected datagram sockets. One
//! submission delivers every arriving datagram, each into a whole buffer of the zone's
//! datagram ring (`BGID_DGRAM`), laid out by the kernel as an `io_uring_recvmsg_out` header,
//! the sender's address (listeners), the control messages (`IP_PKTINFO`: the destination
//! address, for wildcard listeners), then the payload, with `MSG_TRUNC` in the header's flags
//! when the payload did not fit.
//!
//! The datagram ring is not consumed incrementally as the stream ring is: a receive into the
//! tail of a partly used buffer would cut a datagram short.

use io_uring::{cqueue, opcode, types};

use super::bufring::BGID_DGRAM;
use super::close;
use super::conn::{RECV_ARMED, RECV_IDLE};
use super::dgram_state::NAME_LEN;
use super::state::UringDriver;
use super::userdata::{pack, Kind};
use crate::cmsg::{self, CONTROL_SPACE};
use crate::dgram::Datagram;
use crate::handler::Handler;
use crate::io::{ConnId, ConnState, ListenerId};

/// `struct io_uring_recvmsg_out`: four u32s (name, control and payload lengths, flags)
/// ahead of each received datagram.
const RECVMSG_OUT: usize = 16;

/// Bytes of each datagram buffer that are not payload on a listener: the kernel's header,
/// the address and the control messages. [`crate::ZoneConfig::dgram_buffer_size`] includes
/// them.
pub const OVERHEAD: u32 = (RECVMSG_OUT + NAME_LEN + CONTROL_SPACE) as u32;

/// Arms the receive of UDP listener `id`.
pub(super) fn arm_listener(d: &mut UringDriver, id: u32) {
    let l = &mut d.listeners[id as usize];
    let Some(sock) = l.sock.as_ref() else { return };
    if l.armed || l.closing || d.dbufs.is_none() {
        return;
    }
    l.armed = true;
    let fd = types::Fd(std::os::fd::AsRawFd::as_raw_fd(sock));
    let msg: *const libc::msghdr = &*d.dgram_msgs.listener;
    let e = opcode::RecvMsgMulti::new(fd, msg, BGID_DGRAM)
        .build()
        .user_data(pack(Kind::DgramRecv, 0, id));
    // SAFETY: the receive writes only into the datagram ring's buffers, which live as long as
    // the ring; the template is boxed in the driver, which outlives the ring's operations; the
    // socket is closed only after this receive's last completion (`release_listener`).
    unsafe { d.push(&e) };
}

/// Arms the receive of connected datagram socket `c` unless it is paused, closing or armed
/// already (`recv::arm` sends datagram sockets here; the same receive-state bits apply).
pub(super) fn arm_conn(d: &mut UringDriver, c: ConnId) {
    let conn = &d.io.conns[c.index()];
    if conn.state != ConnState::Open || conn.paused || d.recv_state(c) != RECV_IDLE {
        return;
    }
    if d.dbufs.is_none() {
        let e = std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "a datagram socket on a zone without datagram buffers (ZoneConfig::dgram_buffers)",
        );
        return close::begin(d, c, Some(e));
    }
    let gen = d.io.conns[c.index()].gen;
    d.set_recv_state(c, RECV_ARMED);
    let msg: *const libc::msghdr = &*d.dgram_msgs.conn;
    let e = opcode::RecvMsgMulti::new(types::Fixed(c.0), msg, BGID_DGRAM)
        .build()
        .user_data(pack(Kind::RecvDgram, gen, c.0));
    // SAFETY: as in `arm_listener`; the direct descriptor is closed only after this receive
    // is cancelled (`close.rs`).
    unsafe { d.push(&e) };
}

/// A received datagram's parts.
struct Received<'b> {
    /// The sender (listeners; `None` on connected sockets, or for another family).
    peer: Option<std::net::SocketAddr>,
    /// The destination (`IP_PKTINFO`), GRO's segment size, the ECN bits.
    control: cmsg::Received,
    payload: &'b [u8],
    truncated: bool,
}

/// The parts of a received datagram in buffer `buf`, laid out as `msg` asked.
fn parse<'b>(buf: &'b [u8], msg: &libc::msghdr) -> Option<Received<'b>> {
    let out = types::RecvMsgOut::parse(buf, msg).ok()?;
    let name = out.name_data();
    let peer = (!name.is_empty()).then(|| {
        // SAFETY: sockaddr_storage is plain data; all-zero is valid. At most NAME_LEN (32)
        // bytes are copied into its 128.
        let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let n = name
            .len()
            .min(std::mem::size_of::<libc::sockaddr_storage>());
        // SAFETY: `n` bytes fit in both the slice and the storage; they do not overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(
                name.as_ptr(),
                (&mut ss as *mut libc::sockaddr_storage).cast::<u8>(),
                n,
            )
        };
        crate::addr::to_addr(&ss, out.incoming_name_len().min(n as u32) as usize)
    });
    // The payload follows the fixed-size header, name and control fields (the parser's
    // slice borrows the parser, so it is taken again from the buffer).
    let start = RECVMSG_OUT + msg.msg_namelen as usize + msg.msg_controllen;
    let payload = buf.get(start..start + out.payload_data().len())?;
    Some(Received {
        peer: peer.flatten(),
        control: cmsg::parse(out.control_data()),
        payload,
        truncated: out.is_payload_truncated(),
    })
}

/// A UDP listener's receive completed: the datagram goes to the handler, the buffer back to
/// the ring.
pub(super) fn complete_listener<H: Handler>(
    d: &mut UringDriver,
    h: &mut H,
    id: u32,
    res: i32,
    flags: u32,
) {
    let more = cqueue::more(flags);
    if !more {
        d.listeners[id as usize].armed = false;
    }
    if let Some(bid) = cqueue::buffer_select(flags) {
        if res >= 0 {
            let dbufs = d
                .dbufs
                .as_ref()
                .expect("a datagram completion names the datagram ring");
            let buf = dbufs.get(bid, 0, res as usize);
            let live = !d.listeners[id as usize].closing;
            match parse(buf, &d.dgram_msgs.listener) {
                Some(Received {
                    peer: Some(peer),
                    control,
                    payload,
                    truncated,
                }) if live => {
                    d.wake.waker.add_in(payload.len() as u64);
                    let dg = Datagram {
                        peer,
                        local: control.local,
                        data: payload,
                        truncated,
                        segment: control.segment,
                        ecn: control.ecn,
                    };
                    h.on_datagram(&mut d.io, ListenerId(id), dg);
                }
                _ => {} // no sender address (not IPv4/IPv6), or the listener is closing
            }
        }
        if let Some(r) = d.dbufs.as_mut() {
            r.push(bid);
        }
    }
    if res < 0 {
        match -res {
            libc::ECANCELED => {}
            libc::ENOBUFS => d.rearm_dgram.push(id),
            e => tracing::warn!(
                "udp listener {id}: receive failed: {} (receiving again)",
                std::io::Error::from_raw_os_error(e)
            ),
        }
    }
    if !more {
        if d.listeners[id as usize].closing {
            d.release_listener(id);
        } else if res != -libc::ENOBUFS {
            arm_listener(d, id);
        }
    }
}

/// A connected datagram socket's receive completed.
pub(super) fn complete_conn<H: Handler>(
    d: &mut UringDriver,
    h: &mut H,
    c: ConnId,
    gen: u32,
    res: i32,
    flags: u32,
) {
    let more = cqueue::more(flags);
    let bid = cqueue::buffer_select(flags);
    let current = d.io.conns.get(c.index()).is_some_and(|x| x.gen == gen);
    if current && !more {
        d.set_recv_state(c, RECV_IDLE);
    }
    let open = current && d.io.conns[c.index()].state == ConnState::Open;
    if let Some(bid) = bid {
        if res >= 0 && open {
            let dbufs = d
                .dbufs
                .as_ref()
                .expect("a datagram completion names the datagram ring");
            let buf = dbufs.get(bid, 0, res as usize);
            match parse(buf, &d.dgram_msgs.conn) {
                Some(r) if r.truncated => d.io.dgram_stats.truncated += 1,
                // An empty datagram carries nothing to pass on (and is no end of stream).
                Some(r) if !r.payload.is_empty() => {
                    d.wake.waker.add_in(r.payload.len() as u64);
                    h.on_data(&mut d.io, c, r.payload);
                }
                _ => {}
            }
        }
        if let Some(r) = d.dbufs.as_mut() {
            r.push(bid);
        }
    }
    if !current {
        return;
    }
    if res < 0 {
        match -res {
            libc::ECANCELED => {}
            libc::ENOBUFS => {
                if open {
                    d.rearm_recv.push(c);
                }
                return;
            }
            // ECONNREFUSED (the peer's port is closed: ICMP port unreachable) and the rest:
            // the socket is done, and the handler hears why.
            _ => {
                if open {
                    close::begin(d, c, Some(crate::sys::errno(res)));
                }
                return;
            }
        }
    }
    if !more {
        arm_conn(d, c);
    }
}

/// Stops receiving on UDP listener `id`; its socket is closed once nothing in flight uses it.
pub(super) fn cancel_listener(d: &mut UringDriver, id: u32) {
    let Some(l) = d.listeners.get_mut(id as usize) else {
        return;
    };
    if l.closing || l.sock.is_none() {
        return;
    }
    l.closing = true;
    if !l.armed {
        return d.release_listener(id);
    }
    let e = opcode::AsyncCancel2::new(types::CancelBuilder::user_data(pack(
        Kind::DgramRecv,
        0,
        id,
    )))
    .build()
    .user_data(pack(Kind::CancelDgram, 0, id));
    // SAFETY: a cancellation refers to no memory of ours.
    unsafe { d.push(&e) };
}
