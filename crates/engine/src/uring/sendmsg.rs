//! A kernel TLS record of a given content type (`Io::send_tls_record`): `IORING_OP_SENDMSG`
//! (Linux 5.3) with the record's `SOL_TLS` / `TLS_SET_RECORD_TYPE` control message, on the
//! direct descriptor. A short write sends the rest the same way. The record's bytes are not
//! output-queue bytes: they do not count in `ConnIo::sent`, which orders control operations.
//!
//! The kernel reads the record through the SQE's pointers until the completion: the header
//! and `iovec` when it takes the SQE (which, under SQPOLL, is whenever its thread gets to
//! it), and the control message at every attempt, again at each retry of a send parked
//! for room. So the record is boxed (`Ctl::TlsRecord`): a handler that queues more control
//! operations meanwhile grows the queue, which moves the box, not the record.

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
    // SAFETY: `msg` points at the header in the front record's box; the header points at
    // the `iovec` and control buffer in the same box and at the unsent bytes of its `buf`, a
    // heap allocation the record owns and never resizes. All stay valid, unmoved and
    // unchanged until this SQE's completion has been reaped:
    // - moved: the record is boxed (`TlsRecord::new` makes only boxes), so `queue_ctl`
    //   growing the control queue behind it moves the box pointer, not the record;
    // - popped or changed: only `complete` below advances `pos` or pops it, on this
    //   completion; until then `in_flight` makes `flush_conn` return before `ctl::flush`, so
    //   nothing submits, changes or pops a control operation;
    // - dropped: the queue is dropped only by `ctl_pop` (here, after the completion) and by
    //   `ConnIo::open` when the slot is reused, which needs the slot `Free`: that is set by
    //   the CLOSE's completion, and `close::try_finish` submits the CLOSE only once
    //   `in_flight` is clear. A close keeps the queue (`drop_unsent` trims only `out`)
    //   and, though it cancels this SENDMSG (`close::cancel_output`), waits for its CQE. At
    //   teardown the ring is dropped before `io` (`UringDriver`'s field order), as for
    //   every other buffer in flight.
    // Ordering: the header was written above, before the push; the submission queue's tail
    // is published with a Release store (or read by `io_uring_enter`), so the kernel sees the
    // writes. The kernel's reads end before it posts the CQE, which is read with an Acquire
    // load, so `complete`'s changes come after them.
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

#[cfg(test)]
mod tests {
    use crate::io::{ConnId, Ctl, Io};
    use crate::tls_record::TlsRecord;

    fn front(io: &mut Io, c: ConnId) -> &mut TlsRecord {
        match io.conns[c.index()].ctl_front() {
            Some(Ctl::TlsRecord(r)) => r,
            _ => panic!("no record in front"),
        }
    }

    /// The header `submit` hands the kernel points into the front record; the kernel reads it
    /// (and, at each retry of a send parked for room, the control message again) until the
    /// completion. A handler may queue more records meanwhile: the queue grows, and the
    /// record must not move with it.
    #[test]
    fn a_record_in_flight_stays_where_the_kernel_reads_it() {
        let mut io = Io::new(1);
        let c = ConnId(0);
        io.conns[c.index()].open();
        io.send_tls_record(c, 21, &[1, 0]);
        let msg = front(&mut io, c).msghdr(); // what `submit` puts in the SQE
        let at: *const TlsRecord = front(&mut io, c);
        io.conns[c.index()].in_flight = true;
        for i in 0..64 {
            io.send_tls_record(c, 23, &[i]); // the queue reallocates several times
        }
        let now: *const TlsRecord = front(&mut io, c);
        assert_eq!(now, at, "the record in flight moved");
        let off = (msg as usize).wrapping_sub(at as usize);
        assert!(
            off < std::mem::size_of::<TlsRecord>(),
            "the header is the record's"
        );
        // SAFETY: `msg` points into the front record, which is where it was (checked above)
        // and alive (still queued); its iovec and control pointers point into the record and
        // its byte vector, as `msghdr` set them, and nothing has changed either since.
        let (data, control) = unsafe {
            let iov = &*(*msg).msg_iov;
            (
                std::slice::from_raw_parts(iov.iov_base.cast::<u8>(), iov.iov_len),
                std::slice::from_raw_parts((*msg).msg_control.cast::<u8>(), (*msg).msg_controllen),
            )
        };
        assert_eq!(data, [1, 0]);
        assert_eq!(control, TlsRecord::control_bytes(21));
    }
}
