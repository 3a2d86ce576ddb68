//! Descriptors handed to this process (a binary upgrade's, systemd's socket activation):
//! what they are, and whether they close on exec.

use std::net::{SocketAddr, TcpListener};
use std::os::fd::{FromRawFd, RawFd};

/// Sets or clears `FD_CLOEXEC` on `fd`.
pub fn set_cloexec(fd: RawFd, on: bool) -> std::io::Result<()> {
    // SAFETY: F_SETFD takes an integer flag set; no memory is passed.
    let r = unsafe { libc::fcntl(fd, libc::F_SETFD, if on { libc::FD_CLOEXEC } else { 0 }) };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Whether `fd` is a listening TCP socket bound to `addr`.
pub fn is_listener(fd: RawFd, addr: SocketAddr) -> bool {
    listening_addr(fd) == Some(addr)
}

/// The address `fd` listens on, if it is a listening TCP socket.
pub fn listening_addr(fd: RawFd) -> Option<SocketAddr> {
    let mut on: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt writes one c_int and its length into live locals.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ACCEPTCONN,
            (&mut on as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if r != 0 || on == 0 {
        return None;
    }
    // SAFETY: a borrowed view of the descriptor, never dropped (ManuallyDrop), only asked
    // for its address.
    let view = std::mem::ManuallyDrop::new(unsafe { TcpListener::from_raw_fd(fd) });
    view.local_addr().ok()
}
