//! The control thread's operations: configuration reload (SIGHUP, `ringx reload`), binary
//! upgrade (SIGUSR2), access log reopening (SIGUSR1), and the pid file.
//!
//! A reload reads and validates the whole configuration first; any error (reported as
//! `FILE:LINE:COL: message`) leaves everything as it was. A valid one is compiled (routes,
//! settings, upstreams), its new listen addresses are bound for every zone, and each zone
//! gets it as a control message (`ZoneMsg::Reload`) that it applies at a safe point (see
//! `ringx_server::zone::ops`). What a reload cannot change ([runtime], [steering], [xdp],
//! [admin]) needs a binary upgrade or a restart.

use std::net::{SocketAddr, TcpListener};

use ringx_engine::Listener;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::process::Child;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ringx_engine::{ListenOptions, Waker};

use ringx_config::Config;
use ringx_server::accesslog::LogWriter;
use ringx_server::metrics::Metrics;
use ringx_server::zone::{ReloadMsg, ZoneCtl, ZoneEvent, ZoneMsg};
use ringx_server::{Compiled, Error};

/// How the control thread reaches one zone.
pub struct ZoneHandle {
    pub ctl: Arc<ZoneCtl>,
    pub waker: Waker,
}

/// Everything a reload or an upgrade needs.
pub struct Control {
    pub config_path: Option<PathBuf>,
    pub zones: Vec<ZoneHandle>,
    pub lopts: ListenOptions,
    /// Duplicates of every zone's listening socket, by address: handed to a new binary on
    /// upgrade. Dropped when draining starts, so closed listeners really close.
    pub sockets: Vec<(SocketAddr, Vec<OwnedFd>)>,
    /// Duplicates of every zone's UDP socket, by address (not handed over on upgrade: the
    /// new process binds its own beside them).
    pub udp_sockets: Vec<(SocketAddr, Vec<OwnedFd>)>,
    /// The configuration the zones serve (the last one sent to them).
    pub compiled: Compiled,
    pub health_stop: Arc<AtomicBool>,
    pub generation: u64,
    pub metrics: Arc<Metrics>,
    pub log: LogWriter,
    pub log_path: Option<PathBuf>,
    pub drain_timeout: Duration,
    /// The reload whose acknowledgements are awaited: generation, zones left, since.
    pub acks: Option<(u64, usize, Instant)>,
    pub pid_file: Option<crate::pidfile::PidFile>,
    pub upgrade: Option<Child>,
    /// `/healthz` says ok while this is set; cleared when draining begins.
    pub healthy: Arc<AtomicBool>,
    /// systemd's notification socket (inert without `NOTIFY_SOCKET`).
    pub notify: crate::sdnotify::Notify,
    /// The admin listener (a duplicate), handed to a new binary with the zones' sockets: the
    /// new process may run as `[runtime] user`, which cannot bind beside root's socket.
    pub admin_sock: Option<(SocketAddr, OwnedFd)>,
}

/// Duplicates of each zone's listeners, grouped by address.
pub fn dup_sockets(per_zone: &[Vec<TcpListener>]) -> Vec<(SocketAddr, Vec<OwnedFd>)> {
    let mut out: Vec<(SocketAddr, Vec<OwnedFd>)> = Vec::new();
    for ls in per_zone {
        for l in ls {
            let (Ok(addr), Ok(fd)) = (l.local_addr(), l.try_clone()) else {
                continue;
            };
            let fd = OwnedFd::from(fd);
            match out.iter_mut().find(|(a, _)| *a == addr) {
                Some((_, v)) => v.push(fd),
                None => out.push((addr, vec![fd])),
            }
        }
    }
    out
}

/// Duplicates of each zone's UDP sockets, grouped by address.
pub fn dup_udp_sockets(
    per_zone: &[Vec<ringx_engine::Listener>],
) -> Vec<(SocketAddr, Vec<OwnedFd>)> {
    let mut out: Vec<(SocketAddr, Vec<OwnedFd>)> = Vec::new();
    for ls in per_zone {
        for l in ls {
            let ringx_engine::Listener::Udp(u) = l else {
                continue;
            };
            let (Ok(addr), Ok(fd)) = (u.local_addr(), u.try_clone()) else {
                continue;
            };
            let fd = OwnedFd::from(fd);
            match out.iter_mut().find(|(a, _)| *a == addr) {
                Some((_, v)) => v.push(fd),
                None => out.push((addr, vec![fd])),
            }
        }
    }
    out
}

/// Loads the configuration the server was started with.
fn load(path: &Option<PathBuf>) -> Result<Config, ringx_config::ConfigError> {
    match path {
        Some(p) => ringx_config::load(p),
        None => ringx_config::parse("(embedded default)", ringx_config::DEFAULT_CONFIG),
    }
}

impl Control {
    /// SIGHUP: read, validate, compile, and hand the new configuration to the zones. On any
    /// error nothing changes.
    pub fn reload(&mut self) {
        let name = self
            .config_path
            .as_ref()
            .map_or("(embedded default)".to_string(), |p| {
                p.display().to_string()
            });
        self.notify.reloading();
        match self.try_reload() {
            Ok(summary) => {
                self.metrics.reloads_ok.fetch_add(1, Ordering::Relaxed);
                tracing::info!(
                    "SIGHUP: configuration {name} is valid; reload {} sent to {} zones ({summary})",
                    self.generation,
                    self.zones.len()
                );
            }
            Err(e) => {
                self.metrics.reloads_failed.fetch_add(1, Ordering::Relaxed);
                tracing::error!("reload failed, configuration unchanged: {e}");
                let line = e.to_string().replace('\n', " ");
                self.notify.reloaded(&format!(
                    "reload failed, generation {} still serving: {line}",
                    self.generation
                ));
            }
        }
    }

    fn try_reload(&mut self) -> Result<String, Error> {
        let cfg = load(&self.config_path)?;
        let mut next = Compiled::from(&cfg)?;
        let ups_changed = next.fingerprint != self.compiled.fingerprint;
        if !ups_changed {
            // The zones keep their upstream state, built on the upstreams they have.
            next.upstreams = self.compiled.upstreams.clone();
        }
        let routes = next.routes.clone();
        // A socket kept across the reload keeps its IP_TRANSPARENT: refuse to pretend.
        let old = &self.compiled.routes;
        let kept = routes
            .listen
            .iter()
            .map(|a| (*a, false))
            .filter(|(a, _)| old.listen.contains(a))
            .chain(
                routes
                    .udp_listen
                    .iter()
                    .map(|a| (*a, true))
                    .filter(|(a, _)| old.udp_listen.contains(a)),
            );
        for (a, udp) in kept {
            if routes.is_transparent(a, udp) != old.is_transparent(a, udp) {
                return Err(Error::invalid(format!(
                    "transparent changed for {a}: its socket is kept across a reload; restart \
                     ringx (or upgrade the binary) to change it"
                )));
            }
        }
        // A QUIC endpoint kept across the reload keeps the host byte it puts in every
        // connection ID (`ringx lb` routes by it): a new one would leave the endpoint
        // issuing IDs the balancer sends elsewhere. Refuse rather than pretend.
        let (was, now) = (self.compiled.settings.quic.host, next.settings.quic.host);
        if was != now {
            let quic = |a: &&SocketAddr| old.serves_quic(**a) && routes.serves_quic(**a);
            if let Some(a) = routes.udp_listen.iter().find(quic) {
                return Err(Error::invalid(format!(
                    "[http] quic_host changed from {was} to {now}: the QUIC endpoint on {a} \
                     keeps its connection IDs' host byte across a reload; restart ringx (or \
                     upgrade the binary, SIGUSR2) to change it"
                )));
            }
        }
        // New addresses: one socket per zone, bound now; any failure cancels the reload.
        let added: Vec<SocketAddr> = routes
            .listen
            .iter()
            .filter(|a| !self.sockets.iter().any(|(b, _)| b == *a))
            .copied()
            .collect();
        let removed: Vec<SocketAddr> = self
            .sockets
            .iter()
            .map(|(a, _)| *a)
            .filter(|a| !routes.listen.contains(a))
            .collect();
        let udp_added: Vec<SocketAddr> = routes
            .udp_listen
            .iter()
            .filter(|a| !self.udp_sockets.iter().any(|(b, _)| b == *a))
            .copied()
            .collect();
        let udp_removed: Vec<SocketAddr> = self
            .udp_sockets
            .iter()
            .map(|(a, _)| *a)
            .filter(|a| !routes.udp_listen.contains(a))
            .collect();
        let mut per_zone: Vec<Vec<(SocketAddr, Listener)>> =
            (0..self.zones.len()).map(|_| Vec::new()).collect();
        for &addr in &added {
            ringx_engine::ensure_unclaimed(addr).map_err(|e| Error::io("cannot listen", e))?;
            for z in per_zone.iter_mut() {
                let opts = ListenOptions {
                    transparent: routes.is_transparent(addr, false),
                    ..self.lopts.clone()
                };
                let l = ringx_engine::bind_reuseport(addr, &opts)
                    .map_err(|e| Error::io("cannot listen", e))?;
                z.push((addr, l.into()));
            }
        }
        for &addr in &udp_added {
            ringx_engine::ensure_unclaimed_udp(addr).map_err(|e| Error::io("cannot listen", e))?;
            for z in per_zone.iter_mut() {
                let opts = routes.udp_listen_options(addr, &self.lopts);
                let u = ringx_engine::bind_udp_reuseport(addr, &opts)
                    .map_err(|e| Error::io("cannot listen", e))?;
                z.push((addr, u.into()));
            }
        }
        // [cluster]'s client takes the new settings (a TLS file that cannot be used cancels
        // the reload, before anything below is committed).
        crate::cluster::start(&cfg).map_err(Error::invalid)?;
        // Committed from here on.
        for (udp, addrs) in [(false, &added), (true, &udp_added)] {
            for &addr in addrs {
                let mut fds = Vec::new();
                for z in &per_zone {
                    for (a, l) in z {
                        if *a == addr && l.is_udp() == udp {
                            if let Ok(d) = l.try_clone() {
                                fds.push(OwnedFd::from(d));
                            }
                        }
                    }
                }
                match udp {
                    false => self.sockets.push((addr, fds)),
                    true => self.udp_sockets.push((addr, fds)),
                }
            }
        }
        // HTTP/3 on a new address: its packets to the zone their connection ID names.
        crate::quic_steering::steer(
            &routes,
            per_zone.iter().map(|z| {
                z.iter()
                    .filter(|(a, l)| l.is_udp() && udp_added.contains(a))
                    .map(|(a, l)| (*a, l))
            }),
        );
        self.sockets.retain(|(a, _)| !removed.contains(a));
        self.udp_sockets.retain(|(a, _)| !udp_removed.contains(a));
        self.generation += 1;
        for (zone, z) in self.zones.iter().zip(per_zone) {
            let msg = ReloadMsg {
                generation: self.generation,
                routes: routes.clone(),
                settings: next.settings.clone(),
                upstreams: ups_changed.then(|| next.upstreams.clone()),
                listeners: z,
                log: next.log_format,
                deadline: self.drain_timeout,
                tls: next.tls.clone(),
            };
            zone.ctl
                .inbox
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(ZoneMsg::Reload(Box::new(msg)));
            zone.waker.wake();
        }
        self.acks = Some((self.generation, self.zones.len(), Instant::now()));
        if next.log_path != self.log_path {
            self.log.set_path(next.log_path.clone());
            self.log_path = next.log_path.clone();
        }
        if ups_changed {
            self.health_stop.store(true, Ordering::Relaxed);
            self.health_stop = Arc::new(AtomicBool::new(false));
            if let Some(u) = &next.upstreams {
                let _ = ringx_server::upstream::health::spawn(u.clone(), self.health_stop.clone());
            }
            *self
                .metrics
                .upstreams
                .lock()
                .unwrap_or_else(|e| e.into_inner()) = next.upstreams.clone();
        }
        *self.metrics.certs.lock().unwrap_or_else(|e| e.into_inner()) =
            next.tls.as_ref().map_or(Vec::new(), |t| t.certs.clone());
        *self
            .metrics
            .listeners
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = crate::status::listeners(&next);
        self.compiled = next;
        crate::acme::start(&cfg);
        let list = |v: &[SocketAddr]| {
            v.iter()
                .map(|a| a.to_string())
                .collect::<Vec<_>>()
                .join(" ")
        };
        let added: Vec<SocketAddr> = added.into_iter().chain(udp_added).collect();
        let removed: Vec<SocketAddr> = removed.into_iter().chain(udp_removed).collect();
        Ok(format!(
            "{} servers on {} addresses; added [{}], removed [{}]; upstreams {}",
            cfg.server.len(),
            self.compiled.routes.listen.len() + self.compiled.routes.udp_listen.len(),
            list(&added),
            list(&removed),
            if ups_changed { "changed" } else { "unchanged" }
        ))
    }

    /// Zone events after start-up: reload acknowledgements.
    pub fn event(&mut self, ev: ZoneEvent) {
        if let ZoneEvent::Reloaded { zone, generation } = ev {
            tracing::debug!(zone, generation, "zone applied the reload");
            if let Some((g, left, since)) = self.acks.as_mut() {
                if *g == generation {
                    *left -= 1;
                    if *left == 0 {
                        tracing::info!(
                            "reload {generation} applied by every zone in {:?}",
                            since.elapsed()
                        );
                        self.metrics.generation.store(generation, Ordering::Relaxed);
                        self.acks = None;
                        self.notify.reloaded(&format!(
                            "configuration generation {generation} serving on {} zones",
                            self.zones.len()
                        ));
                    }
                }
            }
        }
    }

    /// SIGUSR2: starts the new binary on the same sockets and waits until it serves. True:
    /// the caller drains this process now.
    pub fn upgrade(&mut self) -> bool {
        if let Some(c) = self.upgrade.as_mut() {
            if matches!(c.try_wait(), Ok(None)) {
                tracing::warn!("SIGUSR2: an upgrade to process {} is in progress", c.id());
                return false;
            }
        }
        let socks: Vec<(SocketAddr, i32)> = self
            .sockets
            .iter()
            .flat_map(|(a, fds)| fds.iter().map(move |f| (*a, f.as_raw_fd())))
            .chain(self.admin_sock.iter().map(|(a, f)| (*a, f.as_raw_fd())))
            .collect();
        tracing::info!(
            "SIGUSR2: starting the new binary with {} listening sockets",
            socks.len()
        );
        match crate::upgrade::spawn(&socks, crate::quic_steering::for_upgrade()) {
            Ok(child) => {
                tracing::info!(
                    "binary upgrade: process {} serves; this process ({}) drains and exits",
                    child.id(),
                    std::process::id()
                );
                self.notify.main_pid(child.id());
                self.upgrade = Some(child);
                true
            }
            Err(e) => {
                tracing::error!("binary upgrade failed, this process keeps serving: {e}");
                false
            }
        }
    }

    /// Drain begins: say so on /healthz, and let closed listeners really close. With
    /// `stop_accepting` (a graceful stop, not an upgrade whose new process serves on the very
    /// same sockets) every listening socket is shut down first, at once for all zones: from
    /// the moment this returns no connection is accepted any more (connections still in the
    /// accept queues are reset, as nginx's closed listeners do), where the zones' own
    /// cancellations would take effect only once each zone has handled its drain message.
    pub fn begin_drain(&mut self, stop_accepting: bool) {
        self.healthy.store(false, Ordering::Relaxed);
        self.udp_sockets.clear();
        if stop_accepting {
            for (_, fds) in &self.sockets {
                for fd in fds {
                    // SAFETY: shutdown on a listening socket we hold a descriptor of; it
                    // takes no pointer. Failure (already shut down) changes nothing.
                    unsafe { libc::shutdown(fd.as_raw_fd(), libc::SHUT_RD) };
                }
            }
        }
        self.sockets.clear();
    }

    /// At exit: the log writer's last lines, the pid file.
    pub fn finish(&mut self) {
        self.log.stop();
        if let Some(p) = &self.pid_file {
            p.remove();
        }
    }
}
