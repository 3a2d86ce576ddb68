//! Control operations of a connection (`Io::set_sockopt`, `Io::send_tls_record`): each is
//! carried out once the output queued before it has been written — and, for a file sent by
//! splice, once the pipe holding its last bytes has drained into the socket — with nothing
//! after it sent until it completes (`sockopt.rs`, `sendmsg.rs`). Until its turn, the output
//! before it goes as usual: `Io` ends the bytes chunk before an operation, so no send crosses
//! one. What waits for a drained queue (a close, a shutdown, `on_flushed`) waits for the
//! operations too.

use super::state::UringDriver;
use super::{sendmsg, sockopt};
use crate::io::{ConnId, Ctl};

/// `flush_conn` for a connection with control operations queued and nothing in flight.
#[cold]
pub(super) fn flush(d: &mut UringDriver, c: ConnId) {
    let conn = &mut d.io.conns[c.index()];
    if d.uconns[c.index()].pipe_fill == 0 && conn.ctl_due() {
        return match conn.ctl_front() {
            Some(Ctl::SockOpt(_)) => sockopt::submit(d, c),
            Some(Ctl::TlsRecord(_)) => sendmsg::submit(d, c),
            None => {}
        };
    }
    if !conn.out.is_empty() {
        d.start_output(c);
    }
    // Else the pipe drains first; its completion flushes again.
}
