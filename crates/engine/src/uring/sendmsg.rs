//! A kernel TLS record of a given content type (`Io::send_tls_record`): `IORING_OP_SENDMSG`
//! (Linux 5.3) with the record's `SOL_TLS` / `TLS_SET_RECORD_TYPE` control message, on the
//! direct descriptor. A short write sends the rest the same way. The record's bytes are not
//! output-queue bytes: they do not count in `ConnIo::sent`, which orders control operations.

use io_uring::{opcode, types};

use super::close;
use super::conn::flush_has_work;
use super::state::UringDriver;
use super::userdata::{pack, Kind};
use crate::io::{ConnId, ConnState, Ctl};

fn record(d: &mut UringDriver, c: ConnId) -> &mut crate::tls_record::TlsRecord {
    match d.io.conns[c.index()].ctl_front() {
        Some(Ctl::TlsRecord(r)) => r,
        _ => unreachable!("sendmsg on another operation"),
    }
}

/// Submits `c`'s first control operation, a record. Called with nothing in flight.
pub(super) fn submit(d: &mut UringDriver, c: ConnId) {
    let gen = d.io.conns[c.index()].gen;
    let msg = record(d, c).msghdr();
    let e = opcode::SendMsg::new(types::Fixed(c.0), msg)
        .flags(libc::MSG_NOSIGNAL as u32)
        .build()
        .user_data(pack(Kind::SendMsg, gen, c.0));
    d.io.conns[c.index()].in_flight = true;
    // SAFETY: the message header, its iovec, the control buffer and the bytes all live in
    // the boxed record, the connection's first control operation; `in_flight` keeps it from
    // being popped, changed or dropped until this completion is handled, and a close waits
    // for it too.
    unsafe { d.push(&e) };
}

pub(super) fn complete(d: &mut UringDriver, c: ConnId, gen: u32, res: i32) {
    let conn = &mut d.io.conns[c.index()];
    if conn.gen != gen {
        debug_assert!(false, "a sendmsg completes before its slot can be reused");
        return;
    }
    conn.in_flight = false;
    if res > 0 {
        d.wake.waker.add_out(res as u64);
    }
    if conn.state == ConnState::Closing {
        conn.out.clear();
        return close::try_finish(d, c);
    }
    if res < 0 {
        if res == -libc::EAGAIN || res == -libc::EINTR {
            d.io.mark_dirty(c);
            return;
        }
        return close::begin(d, c, Some(crate::sys::errno(res)));
    }
    let r = record(d, c);
    r.pos += res as usize;
    if r.pos == r.buf.len() {
        d.io.conns[c.index()].ctl_pop();
    }
    if flush_has_work(&d.io.conns[c.index()], &d.uconns[c.index()]) {
        d.io.mark_dirty(c);
    }
}
