//! Binary upgrade with nginx's `USR2` semantics: the running process starts the binary now at
//! its path with the same arguments and hands it every listening socket; the new process
//! serves on those same sockets (so no connection waiting in an accept queue is lost, and
//! the kernel keeps accepting throughout), tells the old one it is ready, and the old one
//! drains and exits. If the new process fails to start, the old one keeps serving.
//!
//! The sockets travel as inherited descriptors named in `RINGX_INHERIT_FDS`
//! (`addr=fd,addr=fd,...`, every zone's socket for every address); readiness comes back as
//! one byte on a pipe whose write end is named in `RINGX_UPGRADE_READY_FD`.

use std::collections::HashMap;
use std::io::Read;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ringx_engine::{bind_reuseport, ListenOptions};

use crate::sockfd::{is_listener, set_cloexec};
use ringx_server::error::{Error, Kind, Side};

pub const INHERIT_ENV: &str = "RINGX_INHERIT_FDS";
pub const READY_ENV: &str = "RINGX_UPGRADE_READY_FD";
/// How long the old process waits for the new one to serve.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// Listening sockets inherited from the process this one replaces, by address.
#[derive(Default)]
pub struct Inherited {
    by_addr: HashMap<SocketAddr, Vec<TcpListener>>,
    /// Sockets systemd passed (socket activation), one per address: the zones past the
    /// first bind siblings beside it (`ReusePort=yes`), or share it where they cannot.
    activated: HashMap<SocketAddr, TcpListener>,
}

impl Inherited {
    /// Takes the sockets named in the environment (and clears it, so nothing started later
    /// sees stale numbers). Anything that is not a listening socket on its address is left
    /// alone, with a warning.
    pub fn take() -> Inherited {
        let mut out = Inherited::default();
        for (addr, l) in crate::activation::take() {
            if let Ok(d) = l.try_clone() {
                out.activated.insert(addr, d);
            }
            out.by_addr.entry(addr).or_default().push(l);
        }
        let Some(spec) = std::env::var_os(INHERIT_ENV) else {
            return out;
        };
        std::env::remove_var(INHERIT_ENV);
        let spec = spec.to_string_lossy();
        for item in spec.split(',').filter(|s| !s.is_empty()) {
            let parsed = item
                .rsplit_once('=')
                .and_then(|(a, f)| Some((a.parse::<SocketAddr>().ok()?, f.parse::<RawFd>().ok()?)));
            let Some((addr, fd)) = parsed else {
                tracing::warn!("{INHERIT_ENV}: ignoring {item:?}");
                continue;
            };
            if fd < 3 || !is_listener(fd, addr) {
                tracing::warn!(
                    "{INHERIT_ENV}: descriptor {fd} is not a socket listening on {addr}; ignored"
                );
                continue;
            }
            let _ = set_cloexec(fd, true);
            // SAFETY: the descriptor was handed to this process for it to own, and was just
            // checked to be a listening socket; nothing else in this process refers to it.
            let l = unsafe { TcpListener::from_raw_fd(fd) };
            let _ = l.set_nonblocking(true);
            out.by_addr.entry(addr).or_default().push(l);
        }
        let n: usize = out.by_addr.values().map(Vec::len).sum();
        if n > 0 {
            tracing::info!("binary upgrade: inherited {n} listening sockets");
        }
        out
    }

    /// An inherited socket for `addr` if one is left, else a new one.
    pub fn bind(&mut self, addr: SocketAddr, opts: &ListenOptions) -> std::io::Result<TcpListener> {
        if let Some(l) = self.by_addr.get_mut(&addr).and_then(Vec::pop) {
            return Ok(l);
        }
        match (bind_reuseport(addr, opts), self.activated.get(&addr)) {
            (Ok(l), _) => Ok(l),
            (Err(e), Some(shared)) => {
                tracing::info!(
                    "socket activation: another socket for {addr} cannot be bound ({e}); the \
                     zones share systemd's (ReusePort=yes in ringx.socket gives each its own)"
                );
                shared.try_clone()
            }
            (Err(e), None) => Err(e),
        }
    }

    /// The inherited socket for `addr`, taken out (the admin listener's).
    pub fn take_addr(&mut self, addr: SocketAddr) -> Option<TcpListener> {
        let l = self.by_addr.get_mut(&addr).and_then(Vec::pop);
        if self.by_addr.get(&addr).is_some_and(Vec::is_empty) {
            self.by_addr.remove(&addr);
        }
        l
    }

    /// Sockets left over (the old process ran more zones): spread over the zones as extra
    /// listeners, so connections queued on them are still accepted.
    pub fn adopt_leftovers(&mut self, zones: &mut [Vec<TcpListener>]) {
        if zones.is_empty() {
            return;
        }
        let mut i = 0;
        for (_, ls) in self.by_addr.drain() {
            for l in ls {
                zones[i % zones.len()].push(l);
                i += 1;
            }
        }
    }
}

/// Whether this process was started by a running ringx to replace it (binary upgrade): the
/// old process still holds its addresses until this one serves.
pub fn is_upgrade() -> bool {
    std::env::var_os(READY_ENV).is_some()
}

/// An inherited socket is waiting for `addr`.
impl Inherited {
    pub fn holds(&self, addr: &SocketAddr) -> bool {
        self.by_addr.get(addr).is_some_and(|v| !v.is_empty()) || self.activated.contains_key(addr)
    }
}

/// Tells the process that started this one (binary upgrade) that it serves now.
pub fn notify_ready() {
    let Some(fd) = std::env::var_os(READY_ENV) else {
        return;
    };
    std::env::remove_var(READY_ENV);
    let Some(fd) = fd.to_str().and_then(|s| s.parse::<RawFd>().ok()) else {
        return;
    };
    if fd < 3 {
        return;
    }
    // SAFETY: the descriptor was handed to this process for this one write; we own it now.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: writes one byte from a live array.
    unsafe { libc::write(fd.as_raw_fd(), b"R".as_ptr().cast(), 1) };
}

/// Starts the new binary with `sockets` (address, descriptor) and, in `quic_steering`, the
/// QUIC steering to take over (`quic_steering.rs`), and waits until it serves. Returns the
/// running child; on error the child (if any) has exited or been killed.
pub fn spawn(
    sockets: &[(SocketAddr, RawFd)],
    quic_steering: Option<String>,
) -> Result<Child, Error> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: pipe2 writes two descriptors into a live array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(Error::io("pipe", std::io::Error::last_os_error()));
    }
    // SAFETY: pipe2 just created both descriptors; each is owned once.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let spec: String = sockets.iter().map(|(a, fd)| format!("{a}={fd},")).collect();
    let mut keep: Vec<RawFd> = sockets.iter().map(|s| s.1).collect();
    keep.push(w.as_raw_fd());
    let exe = std::fs::read_link("/proc/self/exe")
        .map_err(|e| Error::io("cannot find this binary (/proc/self/exe)", e))?;
    // A package upgrade replaced the file: the kernel names the old one "PATH (deleted)",
    // and the new binary is at PATH.
    let exe = match exe.to_str().and_then(|p| p.strip_suffix(" (deleted)")) {
        Some(p) => std::path::PathBuf::from(p),
        None => exe,
    };
    let mut cmd = Command::new(&exe);
    cmd.args(std::env::args_os().skip(1))
        .env(INHERIT_ENV, spec)
        .env(READY_ENV, w.as_raw_fd().to_string())
        .stdin(Stdio::null());
    if let Some(q) = quic_steering {
        cmd.env(crate::quic_steering::ENV, q);
    }
    // SAFETY: runs in the child between fork and exec and only calls fcntl, which is
    // async-signal-safe; it allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            for &fd in &keep {
                set_cloexec(fd, false)?;
            }
            Ok(())
        });
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| Error::io(format!("cannot start {}", exe.display()), e))?;
    drop(w);
    let start = Instant::now();
    let mut r = std::fs::File::from(r);
    loop {
        let mut pfd = libc::pollfd {
            fd: r.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: poll reads and writes one live pollfd.
        let n = unsafe { libc::poll(&mut pfd, 1, 100) };
        if n > 0 {
            let mut b = [0u8; 1];
            if matches!(r.read(&mut b), Ok(1)) {
                return Ok(child);
            }
            // EOF: the child closed the pipe without saying it was ready.
            let st = child.wait().map(|s| s.to_string()).unwrap_or_default();
            return Err(Error::new(Kind::Io, Side::Internal).context(format!(
                "the new process {} exited before serving ({st})",
                child.id()
            )));
        }
        if let Ok(Some(st)) = child.try_wait() {
            return Err(Error::new(Kind::Io, Side::Internal).context(format!(
                "the new process {} exited before serving ({st})",
                child.id()
            )));
        }
        if start.elapsed() > READY_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            return Err(Error::new(Kind::Io, Side::Internal).context(format!(
                "the new process did not serve within {READY_TIMEOUT:?}; killed it"
            )));
        }
    }
}
