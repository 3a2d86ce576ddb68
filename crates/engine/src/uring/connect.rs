//! Outbound connections on io_uring: the socket (created and bound by
//! [`crate::connect::socket_for`]) is installed in a direct-descriptor slot reserved for
//! outbound connections, then `IORING_OP_CONNECT` (Linux 5.5) runs on the slot. Accepts
//! allocate slots only below the reserved range (`IORING_REGISTER_FILE_ALLOC_RANGE`, 6.0),
//! so the two never collide.

use std::io;
use std::os::fd::AsRawFd;

use io_uring::{opcode, types, IoUring};

use super::state::UringDriver;
use super::userdata::{pack, Kind};
use super::{close, recv};
use crate::handler::Handler;
use crate::io::{ConnId, ConnState, Slots};

const IORING_REGISTER_FILE_ALLOC_RANGE: libc::c_uint = 25;

/// `struct io_uring_file_index_range`.
#[repr(C)]
struct FileIndexRange {
    off: u32,
    len: u32,
    resv: u64,
}
const _: () = assert!(std::mem::size_of::<FileIndexRange>() == 16);

/// Restricts the kernel's slot allocation (multishot accept) to `[0, len)`.
pub(super) fn limit_alloc_range(ring: &IoUring, len: u32) -> io::Result<()> {
    let arg = FileIndexRange {
        off: 0,
        len,
        resv: 0,
    };
    // SAFETY: io_uring_register reads one live, correctly laid out io_uring_file_index_range
    // (size checked above) during the call; the ring descriptor is ours.
    let r = unsafe {
        libc::syscall(
            libc::SYS_io_uring_register,
            ring.as_raw_fd(),
            IORING_REGISTER_FILE_ALLOC_RANGE,
            &arg as *const FileIndexRange,
            0,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Installs the outbound socket in its slot and starts the connect.
pub(super) fn start(d: &mut UringDriver, c: ConnId) {
    if d.io.conns[c.index()].state != ConnState::Connecting {
        return;
    }
    d.open_slot(c);
    let conn = &d.io.conns[c.index()];
    let Some(out) = conn.outbound.as_ref() else {
        return;
    };
    let raw = out.fd.as_ref().map_or(-1, |f| f.as_raw_fd());
    if let Err(e) = d.ring.submitter().register_files_update(c.0, &[raw]) {
        let e = io::Error::new(e.kind(), format!("install outbound socket: {e}"));
        return close::begin(d, c, Some(e));
    }
    let (ptr, len) = (out.sa.as_ptr(), out.sa.len());
    let e = opcode::Connect::new(types::Fixed(c.0), ptr.cast(), len)
        .build()
        .user_data(pack(Kind::Connect, conn.gen, c.0));
    // SAFETY: the address is boxed in the connection's `Outbound`, which is dropped only
    // after the slot is closed, and a close cancels (and waits for) the connect first.
    unsafe { d.push(&e) };
}

pub(super) fn complete<H: Handler>(d: &mut UringDriver, h: &mut H, c: ConnId, gen: u32, res: i32) {
    let conn = &mut d.io.conns[c.index()];
    if conn.gen != gen || conn.state != ConnState::Connecting {
        return;
    }
    if res < 0 {
        let e = crate::sys::errno(res);
        let peer = conn.peer.map_or(String::new(), |p| p.to_string());
        let e = io::Error::new(e.kind(), format!("connect to {peer}: {e}"));
        return close::begin(d, c, Some(e));
    }
    conn.state = ConnState::Open;
    recv::arm(d, c);
    d.io.mark_dirty(c);
    h.on_connected(&mut d.io, c);
}

/// Gives an outbound connection's slot back once its descriptor is closed.
pub(super) fn release(d: &mut UringDriver, c: ConnId) {
    if d.io.conns[c.index()].outbound.take().is_some() {
        if let Slots::Reserved(free) = &mut d.io.slots {
            free.push(c.0);
        }
    }
}
