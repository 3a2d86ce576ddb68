//! The peer address of an accepted connection. Multishot accept cannot return addresses (one
//! buffer would serve every connection of a batch), and direct descriptors take no
//! `getpeername`, so the zone asks with a socket command: `IORING_OP_URING_CMD`
//! `SOCKET_URING_OP_GETSOCKOPT` with `SOL_SOCKET`/`SO_PEERNAME` (Linux 6.7). Receiving starts
//! only after it answered, so the handler has the address before the first byte.

use io_uring::{opcode, squeue, types};

use super::userdata::{pack, Kind};
use super::UringDriver;
use crate::addr::to_addr;
use crate::handler::Handler;
use crate::io::{ConnId, ConnState, ListenerId};

const SOCKET_URING_OP_GETSOCKOPT: u32 = 2;

/// Storage for one answer, boxed per slot so its address is stable.
pub(super) type PeerBuf = Box<libc::sockaddr_storage>;

fn getsockopt_entry(slot: u32, optname: i32, optval: *mut u8, optlen: u32) -> squeue::Entry {
    let level_optname = libc::SOL_SOCKET as u32 as u64 | ((optname as u32 as u64) << 32);
    let mut cmd = [0u8; 16];
    cmd[..8].copy_from_slice(&(optval as u64).to_ne_bytes());
    let e = opcode::UringCmd16::new(types::Fixed(slot), SOCKET_URING_OP_GETSOCKOPT)
        .addr(Some(level_optname)) // `level` and `optname` share the `addr` field
        .cmd(cmd) // `optval` is the first word of the command area
        .build();
    super::sqe::with_optlen(e, optlen)
}

impl UringDriver {
    /// Asks for the peer address of a just-accepted connection on listener `id`.
    pub(super) fn query_peer(&mut self, c: ConnId, id: u32) {
        let len = if self.listeners[id as usize].v6 {
            std::mem::size_of::<libc::sockaddr_in6>()
        } else {
            std::mem::size_of::<libc::sockaddr_in>()
        } as u32;
        let i = c.index();
        if self.peer_bufs.len() <= i {
            self.peer_bufs.resize_with(i + 1, || (None, 0));
        }
        // SAFETY: sockaddr_storage is plain data; all-zero is a valid (unspecified) value.
        let buf = self.peer_bufs[i]
            .0
            .get_or_insert_with(|| Box::new(unsafe { std::mem::zeroed() }));
        let ptr = (&mut **buf as *mut libc::sockaddr_storage).cast::<u8>();
        let gen = self.io.conns[i].gen;
        let e = getsockopt_entry(c.0, libc::SO_PEERNAME, ptr, len).user_data(pack(
            Kind::PeerName,
            gen,
            c.0,
        ));
        self.peer_bufs[i].1 = id;
        // SAFETY: the kernel writes at most `len` bytes into the slot's boxed storage, which
        // is never freed while the driver lives; the slot is closed only after cancellation.
        unsafe { self.push(&e) };
    }

    pub(super) fn complete_peer<H: Handler>(&mut self, h: &mut H, c: ConnId, gen: u32, res: i32) {
        let id = self.peer_bufs[c.index()].1;
        let conn = &self.io.conns[c.index()];
        if conn.gen != gen || conn.state != ConnState::Open {
            return;
        }
        if res > 0 {
            let buf = self.peer_bufs[c.index()].0.as_deref();
            self.io.conns[c.index()].peer = buf.and_then(|b| to_addr(b, res as usize));
        } else if res != -libc::ENOTCONN {
            tracing::debug!("SO_PEERNAME: {}", crate::sys::errno(res));
        }
        self.arm_recv(c);
        h.on_accept(&mut self.io, c, ListenerId(id));
    }
}
