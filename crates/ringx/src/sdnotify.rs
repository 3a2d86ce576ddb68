//! systemd's notification protocol (`sd_notify(3)`), written by hand: one datagram of
//! `KEY=VALUE` lines to the `AF_UNIX` socket named in `NOTIFY_SOCKET` (a path, or `@name` for
//! the abstract namespace). Without `NOTIFY_SOCKET` every call does nothing, so ringx started
//! by hand, by another supervisor or in a container behaves as before.
//!
//! What ringx says and when (`Type=notify` in `ringx.service`):
//! - `READY=1` once every zone listens (`lifecycle.rs`), with `MAINPID=` and a `STATUS=` line;
//! - `RELOADING=1` with `MONOTONIC_USEC=` when a reload starts, `READY=1` when every zone has
//!   applied it or when it failed (the old configuration serving, the reason in `STATUS=`);
//! - `STOPPING=1` when a graceful stop begins draining;
//! - `MAINPID=` of the new process after a binary upgrade (`NotifyAccess=all` lets the new
//!   process, not yet the main one, send its own `READY=1`);
//! - `STATUS=` every few seconds: zones, connections, requests per second;
//! - `WATCHDOG=1` from the control thread while every zone makes progress (`WatchdogSec`):
//!   each ping of the watchdog also wakes every zone, and the next one is sent only if every
//!   zone picked up that wake-up, so a zone stuck in a callback lets systemd's watchdog fire.

use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::time::{Duration, Instant};

use ringx_engine::Waker;

/// How ringx talks to systemd; inert without `NOTIFY_SOCKET`.
pub struct Notify {
    target: Option<(UnixDatagram, SocketAddr)>,
    /// `WATCHDOG_USEC` for this process: ping every half of it.
    watchdog: Option<Duration>,
    last_ping: Option<Instant>,
    /// Each zone's wake-up count when it was last pinged.
    pinged: Vec<u64>,
    /// When the `STATUS=` line was last sent, with the request total then.
    last_status: Option<(Instant, u64)>,
}

/// The monotonic clock in microseconds, as `MONOTONIC_USEC=` wants it.
fn monotonic_usec() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into a live local.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1000
}

/// `NOTIFY_SOCKET`'s address: a path, or `@name` in the abstract namespace.
fn parse_addr(v: &str) -> std::io::Result<SocketAddr> {
    match v.strip_prefix('@') {
        Some(name) => SocketAddr::from_abstract_name(name.as_bytes()),
        None => SocketAddr::from_pathname(v),
    }
}

impl Notify {
    /// Reads `NOTIFY_SOCKET`, `WATCHDOG_USEC` and `WATCHDOG_PID`. The variables stay set: a
    /// new binary started by an upgrade reports to the same socket.
    pub fn from_env() -> Notify {
        let mut n = Notify {
            target: None,
            watchdog: None,
            last_ping: None,
            pinged: Vec::new(),
            last_status: None,
        };
        let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
            return n;
        };
        let path = path.to_string_lossy().into_owned();
        let sock = parse_addr(&path).and_then(|a| Ok((UnixDatagram::unbound()?, a)));
        match sock {
            Ok(t) => n.target = Some(t),
            Err(e) => {
                tracing::warn!("NOTIFY_SOCKET={path}: {e}; not telling systemd anything");
                return n;
            }
        }
        // The watchdog is ours when WATCHDOG_PID names this process, or names the process this
        // one replaced by a binary upgrade (which told systemd our pid as MAINPID).
        let pid_ok = std::env::var("WATCHDOG_PID")
            .ok()
            .and_then(|p| p.parse::<u32>().ok())
            .is_none_or(|p| p == std::process::id() || crate::upgrade::is_upgrade());
        let usec = std::env::var("WATCHDOG_USEC")
            .ok()
            .and_then(|u| u.parse::<u64>().ok())
            .filter(|&u| u > 0);
        if let (true, Some(u)) = (pid_ok, usec) {
            n.watchdog = Some(Duration::from_micros(u / 2));
        }
        n
    }

    /// Sends one notification (`KEY=VALUE` lines); a failure is logged, never fatal.
    pub fn send(&self, msg: &str) {
        let Some((sock, addr)) = &self.target else {
            return;
        };
        if let Err(e) = sock.send_to_addr(msg.as_bytes(), addr) {
            tracing::warn!("NOTIFY_SOCKET: cannot tell systemd {msg:?}: {e}");
        }
    }

    /// Every zone listens.
    pub fn ready(&self, status: &str) {
        self.send(&format!(
            "READY=1\nMAINPID={}\nSTATUS={status}",
            std::process::id()
        ));
    }

    /// A reload starts.
    pub fn reloading(&self) {
        self.send(&format!(
            "RELOADING=1\nMONOTONIC_USEC={}\nSTATUS=reloading the configuration",
            monotonic_usec()
        ));
    }

    /// A reload ended, applied or refused (`status` says which).
    pub fn reloaded(&self, status: &str) {
        self.send(&format!("READY=1\nSTATUS={status}"));
    }

    /// A graceful stop begins.
    pub fn stopping(&self) {
        self.send("STOPPING=1\nSTATUS=draining");
    }

    /// A binary upgrade handed the service to process `pid`.
    pub fn main_pid(&self, pid: u32) {
        self.send(&format!(
            "MAINPID={pid}\nSTATUS=binary upgrade: process {pid} serves, {} drains",
            std::process::id()
        ));
    }

    /// The control thread's tick: the watchdog, when every zone made progress since the last
    /// ping, and the `STATUS=` line every 5 s. `requests` and `conns`: totals over the zones.
    pub fn tick(&mut self, wakers: &[Waker], requests: u64, conns: u64) {
        if self.target.is_none() {
            return;
        }
        let now = Instant::now();
        if self.watchdog_due(now) {
            self.watchdog(now, wakers.iter().map(|w| w.stats().wakes).collect());
            for w in wakers {
                w.wake();
            }
        }
        match self.last_status {
            Some((t, _)) if now.duration_since(t) < Duration::from_secs(5) => {}
            Some((t, before)) => {
                let rate =
                    requests.saturating_sub(before) as f64 / now.duration_since(t).as_secs_f64();
                self.send(&format!(
                    "STATUS={}",
                    summary(wakers.len(), conns, Some(rate))
                ));
                self.last_status = Some((now, requests));
            }
            None => self.last_status = Some((now, requests)),
        }
    }
}

impl Notify {
    /// Whether the watchdog is on and its ping is due at `now`.
    fn watchdog_due(&self, now: Instant) -> bool {
        self.watchdog.is_some_and(|every| {
            self.last_ping
                .is_none_or(|t| now.duration_since(t) >= every)
        })
    }

    /// The watchdog's ping: `wakes` holds each zone's wake-up count now; `WATCHDOG=1` goes
    /// only if every zone picked up a wake-up since the last ping (the caller then wakes
    /// them all again). Returns the zones that did not.
    fn watchdog(&mut self, now: Instant, wakes: Vec<u64>) -> Vec<usize> {
        let stuck: Vec<usize> = (0..wakes.len())
            .filter(|&z| self.pinged.get(z).is_some_and(|&p| wakes[z] <= p))
            .collect();
        if stuck.is_empty() {
            self.send("WATCHDOG=1");
        } else {
            tracing::error!(
                "watchdog: zones {stuck:?} did not pick up a wake-up within {:?}; \
                 not telling systemd this process is alive",
                self.watchdog.unwrap_or_default()
            );
        }
        self.pinged = wakes;
        self.last_ping = Some(now);
        stuck
    }
}

/// Requests read and client connections open, summed over the zones.
pub fn totals(m: &ringx_server::metrics::Metrics) -> (u64, u64) {
    let r = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
    m.zones
        .iter()
        .fold((0, 0), |(q, c), z| (q + r(&z.requests), c + r(&z.active)))
}

/// The one-line summary systemd shows (`systemctl status`).
pub fn summary(zones: usize, conns: u64, rate: Option<f64>) -> String {
    match rate {
        Some(r) => format!("{zones} zones, {conns} connections, {r:.0} requests/s"),
        None => format!("{zones} zones, {conns} connections"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn abstract_and_path_addresses() {
        let a = parse_addr("@ringx-test").unwrap();
        assert_eq!(a.as_abstract_name(), Some(&b"ringx-test"[..]));
        let p = parse_addr("/run/systemd/notify").unwrap();
        assert_eq!(
            p.as_pathname(),
            Some(std::path::Path::new("/run/systemd/notify"))
        );
    }

    #[test]
    fn sends_datagrams_to_the_socket() {
        let dir = std::env::temp_dir().join(format!("ringx-notify-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let path = dir.join("sock");
        let _ = std::fs::remove_file(&path);
        let rx = UnixDatagram::bind(&path).unwrap();
        let n = Notify {
            target: Some((
                UnixDatagram::unbound().unwrap(),
                parse_addr(path.to_str().unwrap()).unwrap(),
            )),
            watchdog: None,
            last_ping: None,
            pinged: Vec::new(),
            last_status: None,
        };
        n.reloading();
        let mut b = [0u8; 256];
        let len = rx.recv(&mut b).unwrap();
        let msg = std::str::from_utf8(&b[..len]).unwrap();
        assert!(msg.starts_with("RELOADING=1\nMONOTONIC_USEC="), "{msg}");
        let usec: u64 = msg.lines().nth(1).unwrap()[15..].parse().unwrap();
        assert!(usec.abs_diff(monotonic_usec()) < 10_000_000);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// WATCHDOG=1 only while every zone makes progress: one zone of three whose wake-up
    /// count stands still withholds it, and it comes back once that zone moves again.
    #[test]
    fn watchdog_withheld_while_one_zone_is_stuck() {
        let dir = std::env::temp_dir().join(format!("ringx-watchdog-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let path = dir.join("sock");
        let _ = std::fs::remove_file(&path);
        let rx = UnixDatagram::bind(&path).unwrap();
        rx.set_nonblocking(true).unwrap();
        let every = Duration::from_secs(15);
        let mut n = Notify {
            target: Some((
                UnixDatagram::unbound().unwrap(),
                parse_addr(path.to_str().unwrap()).unwrap(),
            )),
            watchdog: Some(every),
            last_ping: None,
            pinged: Vec::new(),
            last_status: None,
        };
        let got = || {
            let mut b = [0u8; 256];
            let mut msgs = Vec::new();
            while let Ok(len) = rx.recv(&mut b) {
                msgs.push(String::from_utf8_lossy(&b[..len]).into_owned());
            }
            msgs
        };
        let t0 = Instant::now();
        assert!(n.watchdog_due(t0));
        // The first ping: nothing to compare with yet.
        assert_eq!(n.watchdog(t0, vec![5, 7, 9]), Vec::<usize>::new());
        assert_eq!(got(), ["WATCHDOG=1"]);
        assert!(
            !n.watchdog_due(t0 + every / 2),
            "pinged every `every`, not more"
        );
        // Zone 1 picked up nothing since: no WATCHDOG=1, though zones 0 and 2 moved.
        let t1 = t0 + every;
        assert!(n.watchdog_due(t1));
        assert_eq!(n.watchdog(t1, vec![6, 7, 10]), vec![1]);
        assert_eq!(got(), Vec::<String>::new());
        // Still stuck at the next one.
        assert_eq!(n.watchdog(t1 + every, vec![7, 7, 11]), vec![1]);
        assert_eq!(got(), Vec::<String>::new());
        // All three moved again: the ping resumes.
        assert_eq!(
            n.watchdog(t1 + every * 2, vec![8, 8, 12]),
            Vec::<usize>::new()
        );
        assert_eq!(got(), ["WATCHDOG=1"]);
        // Every zone stuck.
        assert_eq!(n.watchdog(t1 + every * 3, vec![8, 8, 12]), vec![0, 1, 2]);
        assert_eq!(got(), Vec::<String>::new());
        // Without a watchdog nothing is ever due.
        n.watchdog = None;
        assert!(!n.watchdog_due(t1 + every * 10));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
