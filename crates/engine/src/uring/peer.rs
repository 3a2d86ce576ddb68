//! The peer address of an accepted connection. Multishot accept cannot return addresses (one
//! buffer would serve every connection of a batch), and direct descriptors take no
//! `getpeername`, so the zone asks with a socket command: `IORING_OP_URING_CMD`
//! `SOCKET_URING_OP_GETSOCKOPT` with `SOL_SOCKET`/`SO_PEERNAME` (Linux 6.7). Receiving starts
//! only after it answered, so the handler has the address before the first byte
//! (`accept::complete_peer`).

use std::net::SocketAddr;

use io_uring::{opcode, squeue, types};

use super::userdata::{pack, Kind};
use crate::addr::to_addr;
use crate::io::ConnId;

const SOCKET_URING_OP_GETSOCKOPT: u32 = 2;

/// Storage for one answer, boxed per slot so its address is stable.
type PeerBuf = Box<libc::sockaddr_storage>;

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

/// The `SO_PEERNAME` queries of the zone's slots: per slot, the boxed storage the kernel
/// writes the answer into (made at the slot's first query and kept, at the same address, for
/// as long as this lives) and the listener the connection came from.
#[derive(Default)]
pub(super) struct PeerQueries {
    bufs: Vec<(Option<PeerBuf>, u32)>,
}

impl PeerQueries {
    /// The query for slot `c` (of generation `gen`), accepted on listener `id` (`v6`: an
    /// IPv6 one). The kernel writes at most the size of a `sockaddr_in` (`sockaddr_in6`)
    /// into the slot's box.
    pub(super) fn entry(&mut self, c: ConnId, gen: u32, id: u32, v6: bool) -> squeue::Entry {
        let len = if v6 {
            std::mem::size_of::<libc::sockaddr_in6>()
        } else {
            std::mem::size_of::<libc::sockaddr_in>()
        } as u32;
        let i = c.index();
        if self.bufs.len() <= i {
            self.bufs.resize_with(i + 1, || (None, 0));
        }
        // SAFETY: sockaddr_storage is plain data; all-zero is a valid (unspecified) value.
        let buf = self.bufs[i]
            .0
            .get_or_insert_with(|| Box::new(unsafe { std::mem::zeroed() }));
        let ptr = (&mut **buf as *mut libc::sockaddr_storage).cast::<u8>();
        let e = getsockopt_entry(c.0, libc::SO_PEERNAME, ptr, len).user_data(pack(
            Kind::PeerName,
            gen,
            c.0,
        ));
        self.bufs[i].1 = id;
        e
    }

    /// The listener of slot `c`'s last query.
    pub(super) fn listener(&self, c: ConnId) -> u32 {
        self.bufs[c.index()].1
    }

    /// The address in slot `c`'s answer of `len` bytes.
    pub(super) fn addr(&self, c: ConnId, len: usize) -> Option<SocketAddr> {
        let buf = self.bufs[c.index()].0.as_deref();
        buf.and_then(|b| to_addr(b, len))
    }
}
