//! What a completion belongs to, packed into the 64-bit `user_data` of its submission.
//!
//! `kind:8 | gen:24 | index:32`. The generation is bumped each time a slot gets a new
//! connection, so a completion that arrives for a connection already closed (a cancelled
//! multishot receive, say) can never be mistaken for one of its successor's (`crate::slot`).

use crate::slot::GEN_MASK;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Kind {
    Accept = 1,
    Recv = 2,
    Send = 3,
    SpliceIn = 4,
    SpliceOut = 5,
    Cancel = 6,
    Close = 7,
    Shutdown = 8,
    Wake = 9,
    /// A cancel whose completion needs no handling (pausing a receive, aborting a write).
    CancelQuiet = 10,
    CancelAccept = 11,
    Connect = 12,
    PeerName = 13,
    /// A control wake-up posted by another ring (`IORING_OP_MSG_RING`).
    Msg = 14,
    /// `IORING_OP_FIXED_FD_INSTALL`: an ordinary descriptor for `sendfile`.
    FdInstall = 15,
    /// `IORING_OP_POLL_ADD` for `POLLOUT`: the socket can take more of a `sendfile`.
    PollOut = 16,
    /// A UDP listener's multishot `recvmsg` (index: the listener).
    DgramRecv = 17,
    /// A datagram send (index: its slot in `dgram_send::Sends`).
    DgramSend = 18,
    /// A connected datagram socket's multishot `recvmsg` (index: the connection).
    RecvDgram = 19,
    /// The cancel of a UDP listener's receive.
    CancelDgram = 20,
    /// `SOCKET_URING_OP_SETSOCKOPT` of `Io::set_sockopt`.
    SockOpt = 21,
    /// `IORING_OP_SENDMSG` of `Io::send_tls_record`.
    SendMsg = 22,
}

impl Kind {
    fn from_u8(v: u8) -> Option<Kind> {
        use Kind::*;
        Some(match v {
            1 => Accept,
            2 => Recv,
            3 => Send,
            4 => SpliceIn,
            5 => SpliceOut,
            6 => Cancel,
            7 => Close,
            8 => Shutdown,
            9 => Wake,
            10 => CancelQuiet,
            11 => CancelAccept,
            12 => Connect,
            13 => PeerName,
            14 => Msg,
            15 => FdInstall,
            16 => PollOut,
            17 => DgramRecv,
            18 => DgramSend,
            19 => RecvDgram,
            20 => CancelDgram,
            21 => SockOpt,
            22 => SendMsg,
            _ => return None,
        })
    }
}

#[inline]
pub(crate) fn pack(kind: Kind, gen: u32, index: u32) -> u64 {
    ((kind as u64) << 56) | (((gen & GEN_MASK) as u64) << 32) | index as u64
}

#[inline]
pub(crate) fn unpack(ud: u64) -> Option<(Kind, u32, u32)> {
    let kind = Kind::from_u8((ud >> 56) as u8)?;
    Some((kind, ((ud >> 32) as u32) & GEN_MASK, ud as u32))
}

/// True if `ud` belongs to a connection's receive.
#[inline]
pub(crate) fn is_recv(ud: u64) -> bool {
    (ud >> 56) as u8 == Kind::Recv as u8
}

/// True if `ud` belongs to a connection's send.
#[inline]
pub(crate) fn is_send(ud: u64) -> bool {
    (ud >> 56) as u8 == Kind::Send as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        for (k, g, i) in [
            (Kind::Recv, 0, 0),
            (Kind::Close, GEN_MASK, u32::MAX),
            (Kind::Wake, 5, 77),
        ] {
            assert_eq!(unpack(pack(k, g, i)), Some((k, g, i)));
        }
        assert_eq!(unpack(0), None);
    }
}
