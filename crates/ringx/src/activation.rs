//! Socket activation (`sd_listen_fds(3)`): systemd binds the listening sockets (a port below
//! 1024 with no capability left to the service) and passes them from descriptor 3 on, named
//! by `LISTEN_FDS` for the process `LISTEN_PID`. Each that is a listening TCP socket serves
//! its address as if ringx had bound it (`upgrade::Inherited` takes them); the variables are
//! cleared so nothing started later sees them.

use std::net::{SocketAddr, TcpListener};
use std::os::fd::{FromRawFd, RawFd};

/// The first descriptor systemd passes (`SD_LISTEN_FDS_START`).
const START: RawFd = 3;

/// The listening TCP sockets systemd passed to this process, by address.
pub fn take() -> Vec<(SocketAddr, TcpListener)> {
    let pid = std::env::var("LISTEN_PID").ok();
    let n = std::env::var("LISTEN_FDS").ok();
    for v in ["LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"] {
        std::env::remove_var(v);
    }
    let (Some(pid), Some(n)) = (pid, n) else {
        return Vec::new();
    };
    if pid.parse::<u32>().ok() != Some(std::process::id()) {
        return Vec::new();
    }
    let Ok(n) = n.parse::<RawFd>() else {
        tracing::warn!("LISTEN_FDS={n:?} is not a number; no socket activation");
        return Vec::new();
    };
    let mut out = Vec::new();
    for fd in START..START.saturating_add(n) {
        let Some(addr) = crate::sockfd::listening_addr(fd) else {
            tracing::warn!(
                "socket activation: descriptor {fd} is not a listening TCP socket; ignored \
                 (ringx takes ListenStream= sockets only)"
            );
            continue;
        };
        let _ = crate::sockfd::set_cloexec(fd, true);
        // SAFETY: systemd passed the descriptor to this process to own, and it was just
        // checked to be a listening socket; nothing else in this process refers to it.
        let l = unsafe { TcpListener::from_raw_fd(fd) };
        let _ = l.set_nonblocking(true);
        out.push((addr, l));
    }
    if !out.is_empty() {
        let list: Vec<String> = out.iter().map(|(a, _)| a.to_string()).collect();
        tracing::info!("socket activation: systemd passed {}", list.join(", "));
    }
    out
}
