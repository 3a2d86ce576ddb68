//! What the io_uring driver keeps per connection beside the driver-neutral `ConnIo`: the
//! state bits of its operations, the splice pipe, and the ordinary descriptor of a file
//! being sent. One record per direct-descriptor slot, indexed by the same handle as
//! `Io::conns` and reset when the slot gets a new connection (`UringDriver::open_slot`).

use std::os::fd::OwnedFd;

use super::pipes::Pipe;
use crate::io::ConnIo;

/// Receive states kept in the low bits of `UringConn::flags` (`recv.rs`).
pub(super) const RECV_IDLE: u32 = 0;
pub(super) const RECV_ARMED: u32 = 1;
pub(super) const RECV_MASK: u32 = 3;

/// The io_uring driver's own per-connection state.
#[derive(Default)]
pub(super) struct UringConn {
    /// State bits: the receive's (above, `recv.rs`), the close's (`close.rs`), and whether
    /// files go by sendfile on this connection (`sendfile.rs`).
    pub(super) flags: u32,
    /// Bytes sitting in this connection's splice pipe. `ConnIo::sent` already counts them:
    /// they left the output queue.
    pub(super) pipe_fill: u32,
    pub(super) pipe: Option<Pipe>,
    /// An ordinary, non-blocking descriptor of the socket, installed from the direct one for
    /// `sendfile` (`sendfile.rs`); dropped before the close.
    pub(super) sock_fd: Option<OwnedFd>,
}

/// Whether a flush of the connection has anything to do: what `ConnIo::flush_has_work`
/// says, or the descriptor a file send held (dropped by `flush_conn` once no file is queued).
/// One predicate for `send::complete` (queue a flush?) and `flush_conn` (anything to do?), so
/// the two cannot drift.
#[inline]
pub(super) fn flush_has_work(conn: &ConnIo, u: &UringConn) -> bool {
    conn.flush_has_work() || u.sock_fd.is_some()
}
