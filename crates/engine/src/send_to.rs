//! [`SendTo`]: where a datagram send from a UDP listener goes, and what it asks of the kernel
//! beyond its bytes (a leaf: the queue of sends, the drivers and the control messages all
//! name it).

use std::net::{IpAddr, SocketAddr};

/// Where and how [`Io::send_with`](crate::Io::send_with) sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SendTo {
    /// The peer.
    pub to: SocketAddr,
    /// The source address, for a listener bound to a wildcard address (the
    /// [`Datagram::local`](crate::Datagram::local) the client wrote to).
    pub from: Option<IpAddr>,
    /// Cut the bytes into datagrams of this size (UDP GSO, `UDP_SEGMENT`): one pass through
    /// the stack for up to 64 datagrams, the last may be shorter. 0: the bytes are one.
    pub segment: u16,
    /// ECN bits for the IP header (RFC 3168: 0b10 ECT(0), 0b01 ECT(1)); 0: not ECN-capable.
    pub ecn: u8,
}

impl SendTo {
    /// One datagram to `to`, from `from`, without ECN.
    pub fn one(to: SocketAddr, from: Option<IpAddr>) -> SendTo {
        SendTo {
            to,
            from,
            segment: 0,
            ecn: 0,
        }
    }

    /// Whether a plain `sendto` does: no control message to write.
    pub(crate) fn is_plain(&self) -> bool {
        self.from.is_none() && self.segment == 0 && self.ecn == 0
    }
}
