//! Waiting for room in a socket (`IORING_OP_POLL_ADD` for `POLLOUT`, Linux 5.1): a
//! `sendfile` that found the socket buffer full, or a splice into a socket left
//! non-blocking by one, goes on when the socket can take more (`sendfile.rs`, `splice.rs`).

use io_uring::{opcode, types};

use super::close;
use super::state::UringDriver;
use super::userdata::{pack, Kind};
use crate::io::{ConnId, ConnState};

/// Waits until the socket can take more (`POLLOUT`), then sends on.
pub(super) fn wait_writable(d: &mut UringDriver, c: ConnId) {
    let conn = &mut d.io.conns[c.index()];
    let e = opcode::PollAdd::new(types::Fixed(c.0), libc::POLLOUT as u32)
        .build()
        .user_data(pack(Kind::PollOut, conn.gen, c.0));
    conn.in_flight = true;
    // SAFETY: a poll refers to no memory of ours; closing cancels it (`close::cancel_output`)
    // and waits for its completion.
    unsafe { d.push(&e) };
}

pub(super) fn complete(d: &mut UringDriver, c: ConnId, gen: u32, res: i32) {
    let conn = &mut d.io.conns[c.index()];
    if conn.gen != gen {
        debug_assert!(false, "a poll completes before its slot can be reused");
        return;
    }
    conn.in_flight = false;
    if conn.state == ConnState::Closing {
        return close::try_finish(d, c);
    }
    if res < 0 && res != -libc::ECANCELED {
        return close::begin(d, c, Some(crate::sys::errno(res)));
    }
    // POLLERR/POLLHUP too: the next sendfile reports what happened.
    d.io.mark_dirty(c);
}
