//! A kernel TLS record of a given content type (`Io::send_tls_record`): `IORING_OP_SENDMSG`
//! (Linux 5.3) with the record's `SOL_TLS` / `TLS_SET_RECORD_TYPE` control message. Its
//! completion is a send's (`send::complete`): the bytes written advance the front chunk.

use io_uring::{opcode, types};

use super::state::UringDriver;
use super::userdata::{pack, Kind};
use crate::io::{Chunk, ConnId};

/// Submits the record at the front of `c`'s output. Called with nothing in flight.
pub(super) fn submit(d: &mut UringDriver, c: ConnId) {
    let conn = &mut d.io.conns[c.index()];
    let gen = conn.gen;
    let Some(Chunk::TlsRecord(r)) = conn.out.front_mut() else {
        unreachable!("sendmsg::submit on another chunk")
    };
    let msg = r.msghdr();
    let e = opcode::SendMsg::new(types::Fixed(c.0), msg)
        .flags(libc::MSG_NOSIGNAL as u32)
        .build()
        .user_data(pack(Kind::Send, gen, c.0));
    conn.in_flight = true;
    // SAFETY: the message header, its iovec, the control buffer and the bytes all live in
    // the boxed front chunk; `in_flight` keeps it from being popped, changed or dropped until
    // this completion is handled, and a close waits for it too.
    unsafe { d.push(&e) };
}
