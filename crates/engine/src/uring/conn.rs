//! What the io_uring driver keeps per connection beside the driver-neutral `ConnIo`: the
//! state bits of its operations, the splice pipe, and the ordinary descriptor of a file
//! being sent. One record per direct-descriptor slot, indexed by the same handle as
//! `Io::conns` and reset when the slot gets a new connection.

use std::os::fd::OwnedFd;

use super::pipes::Pipe;
use super::UringDriver;
use crate::io::{ConnId, ConnIo};

/// The io_uring driver's own per-connection state.
#[derive(Default)]
pub(super) struct UringConn {
    /// State bits: the receive's (`recv.rs`), the close's (`close.rs`), and whether files go
    /// by sendfile on this connection (`sendfile.rs`).
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
/// One predicate for `complete_send` (queue a flush?) and `flush_conn` (anything to do?), so
/// the two cannot drift.
#[inline]
pub(super) fn flush_has_work(conn: &ConnIo, u: &UringConn) -> bool {
    conn.flush_has_work() || u.sock_fd.is_some()
}

impl UringDriver {
    /// Resets the driver's state of slot `c` for a new connection (accepted, or outbound at
    /// its connect). A receive of the previous connection still marked armed (its last
    /// completion not seen yet) no longer counts. The pipe was handed back at the close.
    pub(super) fn open_slot(&mut self, c: ConnId) {
        self.forget_recv(c);
        let u = &mut self.uconns[c.index()];
        debug_assert!(u.pipe.is_none());
        u.flags = 0;
        u.pipe_fill = 0;
        u.sock_fd = None;
    }
}
