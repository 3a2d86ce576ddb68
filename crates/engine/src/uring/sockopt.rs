//! A socket option set in order with a connection's output (`Io::set_sockopt`: kernel TLS's
//! `TCP_ULP` and `TLS_TX`): `IORING_OP_URING_CMD` `SOCKET_URING_OP_SETSOCKOPT` on the direct
//! descriptor (Linux 6.7), submitted once everything before it has been written, with nothing
//! after it sent until it completes. A refusal closes the connection with the kernel's error.

use io_uring::{opcode, types};

use super::close;
use super::state::UringDriver;
use super::userdata::{pack, Kind};
use crate::io::{ConnId, ConnState, Ctl};

const SOCKET_URING_OP_SETSOCKOPT: u32 = 3;

/// Whether this kernel has the socket command (Linux 6.7); asked once per zone.
pub(super) fn supported() -> bool {
    crate::sys::kernel_at_least(6, 7)
}

/// Submits `c`'s first control operation, a socket option. Called with nothing in flight.
pub(super) fn submit(d: &mut UringDriver, c: ConnId) {
    let conn = &mut d.io.conns[c.index()];
    let gen = conn.gen;
    let Some(Ctl::SockOpt(o)) = conn.ctl_front() else {
        unreachable!("sockopt::submit on another operation")
    };
    let level_optname = o.level as u32 as u64 | ((o.name as u32 as u64) << 32);
    let mut cmd = [0u8; 16];
    cmd[..8].copy_from_slice(&(o.value.as_ptr() as u64).to_ne_bytes());
    let e = opcode::UringCmd16::new(types::Fixed(c.0), SOCKET_URING_OP_SETSOCKOPT)
        .addr(Some(level_optname)) // `level` and `optname` share the `addr` field
        .cmd(cmd) // `optval` is the first word of the command area
        .build();
    let e =
        super::sqe::with_optlen(e, o.value.len() as u32).user_data(pack(Kind::SockOpt, gen, c.0));
    conn.in_flight = true;
    // SAFETY: the option's value is a vector owned by the connection's first control
    // operation; `in_flight` keeps it from being popped or dropped until this completion is
    // handled (a new connection in the slot waits for it too: the close does).
    unsafe { d.push(&e) };
}

pub(super) fn complete(d: &mut UringDriver, c: ConnId, gen: u32, res: i32) {
    let conn = &mut d.io.conns[c.index()];
    if conn.gen != gen {
        debug_assert!(
            false,
            "a socket option completes before its slot can be reused"
        );
        return;
    }
    conn.in_flight = false;
    if conn.state == ConnState::Closing {
        conn.out.clear();
        return close::try_finish(d, c);
    }
    if res < 0 {
        let e = crate::sys::errno(res);
        let e = match conn.ctl_front() {
            Some(Ctl::SockOpt(o)) => o.error(e),
            _ => e,
        };
        return close::begin(d, c, Some(e));
    }
    conn.ctl_pop();
    d.io.mark_dirty(c);
}
