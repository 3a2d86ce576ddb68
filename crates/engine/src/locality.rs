//! Where a connection's packets are processed, for the locality log both drivers write:
//! `SO_INCOMING_CPU` of a socket, and one debug line per accepted connection comparing it
//! with the zone's CPU. The steering that makes the two equal lives in `ringx-steer`
//! (`reuseport` for accepted connections, `active` for upstream ones).

use std::io;
use std::os::fd::RawFd;

/// The log target of the per-connection locality line (`RUST_LOG=ringx::locality=debug`).
pub const LOCALITY_LOG: &str = "ringx::locality";

/// The CPU that last processed a packet of this socket (`SO_INCOMING_CPU`); for a freshly
/// accepted connection, the CPU that processed its handshake.
pub fn incoming_cpu(fd: RawFd) -> io::Result<usize> {
    let mut v: libc::c_int = -1;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into the live c_int and updates `len`.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_INCOMING_CPU,
            (&mut v as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    usize::try_from(v).map_err(|_| io::Error::other("no incoming CPU yet"))
}

/// Logs, at debug level on [`LOCALITY_LOG`], where a just-accepted connection `fd` (from
/// listener `listener`) was handled: the zone's CPU (the calling thread is the pinned zone)
/// and the CPU that processed its handshake (`SO_INCOMING_CPU`). Equal numbers are locality.
/// Only the epoll driver can ask: io_uring's direct descriptors have no `fd`.
pub fn log_locality(fd: RawFd, listener: u32, peer: Option<std::net::SocketAddr>) {
    let zone_cpu = crate::sys::current_cpu().map_or(-1, |c| c as i64);
    let incoming = incoming_cpu(fd).map_or(-1, |c| c as i64);
    let peer = peer.map_or_else(|| "?".to_string(), |p| p.to_string());
    tracing::debug!(
        target: LOCALITY_LOG,
        "accepted zone_cpu={zone_cpu} incoming_cpu={incoming} listener={listener} peer={peer}"
    );
}
