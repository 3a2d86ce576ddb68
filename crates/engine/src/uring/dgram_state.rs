//! What the datagram operations keep in the driver (`dgram_recv.rs`, `dgram_send.rs`):
//! the `msghdr` templates of the multishot receives and the slots of the sends in flight.
//! A leaf: the driver's state (`state.rs`) holds these without importing the operations.

use crate::cmsg::{ControlBuf, CONTROL_SPACE};
use crate::io::ConnId;

/// Room for the sender's address in a listener's receive (a `sockaddr_in6`, rounded up so
/// the control messages after it stay 8-byte aligned).
pub(super) const NAME_LEN: usize = 32;

/// The two `msghdr`s the multishot receives are armed with: the kernel reads only the name
/// and control lengths (at each arm); the parser reads them back to find the payload.
pub(crate) struct Templates {
    pub(super) listener: Box<libc::msghdr>,
    pub(super) conn: Box<libc::msghdr>,
}

impl Templates {
    pub(crate) fn new() -> Templates {
        // SAFETY: msghdr is plain data (pointers and lengths); all-zero is a valid value.
        let mut listener: Box<libc::msghdr> = Box::new(unsafe { std::mem::zeroed() });
        listener.msg_namelen = NAME_LEN as libc::socklen_t;
        listener.msg_controllen = CONTROL_SPACE as _;
        // SAFETY: as above.
        let conn: Box<libc::msghdr> = Box::new(unsafe { std::mem::zeroed() });
        Templates { listener, conn }
    }
}

/// One datagram send: everything the kernel reads while it is in flight. Boxed, so the
/// `msghdr`'s pointers into it stay valid however the slot table grows.
pub(super) struct Slot {
    pub(super) hdr: libc::msghdr,
    pub(super) iov: libc::iovec,
    pub(super) name: socket2::SockAddr,
    pub(super) cmsg: ControlBuf,
    pub(super) buf: Vec<u8>,
    /// The listener it leaves from, or the connection it goes on.
    pub(super) listener: Option<u32>,
    pub(super) conn: Option<(ConnId, u32)>,
    /// A GSO send (several datagrams): its failure may mean the path cannot segment.
    pub(super) segmented: bool,
}

/// The zone's datagram send slots.
#[derive(Default)]
pub(crate) struct Sends {
    // Boxed: the kernel holds pointers into a slot (its msghdr, address, bytes) while the
    // send is in flight, and the vector moves its elements when it grows.
    #[allow(clippy::vec_box)]
    pub(super) slots: Vec<Box<Slot>>,
    pub(super) free: Vec<u32>,
}

impl Sends {
    /// A free slot (a new one when none is).
    pub(super) fn take(&mut self) -> u32 {
        if let Some(i) = self.free.pop() {
            return i;
        }
        let unspecified = std::net::SocketAddr::from(([0, 0, 0, 0], 0));
        self.slots.push(Box::new(Slot {
            // SAFETY: msghdr and iovec are plain data; all-zero is a valid value of each.
            hdr: unsafe { std::mem::zeroed() },
            // SAFETY: as above.
            iov: unsafe { std::mem::zeroed() },
            name: socket2::SockAddr::from(unspecified),
            cmsg: [0; CONTROL_SPACE / 8],
            buf: Vec::new(),
            listener: None,
            conn: None,
            segmented: false,
        }));
        (self.slots.len() - 1) as u32
    }
}
