//! `ringx lb run`: the balancer's control plane as a process. It attaches the balancer to
//! [lb].devices with the configuration's services, then until SIGTERM or SIGINT checks each
//! backend's health (a TCP connect, or the upstream checker's HTTP request) and takes a
//! backend out of its services' rings after `fall` failures and back after `rise` successes,
//! and refreshes the backends' next hops. The balancer keeps forwarding when this process
//! stops: its link is pinned (unless `detach_on_exit`).

use std::net::{IpAddr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use ringx_config::lb as cfg;
use ringx_lb::control::{self, Out};
use ringx_server::upstream::health;

use crate::lb_setup::{bring_up, load_lb, resolve};

/// How often next hops are looked up again.
const REFRESH: Duration = Duration::from_secs(5);

struct Target {
    addr: IpAddr,
    /// What is checked: the backend's address at the health port.
    at: SocketAddr,
    health: cfg::Health,
    ok_run: u32,
    fail_run: u32,
    healthy: bool,
    next: Instant,
}

/// One check of `t`.
fn check(t: &Target) -> bool {
    match t.health.check {
        cfg::Check::Tcp => TcpStream::connect_timeout(&t.at, t.health.timeout.0).is_ok(),
        cfg::Check::Http => {
            let s = ringx_server::upstream::ServerDef {
                name: t.at.to_string(),
                addr: t.at,
                weight: 1,
                max_fails: 0,
                fail_timeout: Duration::ZERO,
                backup: false,
                healthy: AtomicBool::new(true),
            };
            let h = ringx_server::upstream::HealthDef {
                interval: t.health.interval.0,
                path: t.health.path.clone(),
                expect: t.health.expect,
                rise: t.health.rise,
                fall: t.health.fall,
                timeout: t.health.timeout.0,
            };
            health::check(&s, &h)
        }
    }
}

/// The backends to check: one target per backend address, with the health settings of the
/// first service that checks it.
fn targets(lb: &cfg::Lb) -> Vec<Target> {
    let mut out: Vec<Target> = Vec::new();
    let now = Instant::now();
    for s in &lb.services {
        let s = s.get_ref();
        let Some(h) = &s.health else { continue };
        let h = h.get_ref();
        for b in &s.backends {
            let addr = b.get_ref().addr;
            if out.iter().any(|t| t.addr == addr) {
                continue;
            }
            out.push(Target {
                addr,
                at: SocketAddr::new(addr, h.port.unwrap_or(s.vip.get_ref().port())),
                health: h.clone(),
                ok_run: 0,
                fail_run: 0,
                healthy: true,
                next: now,
            });
        }
    }
    out
}

pub fn run(config: &Path, pin: Option<PathBuf>) -> Result<(), String> {
    let lb = load_lb(config)?;
    let dir = pin.unwrap_or_else(|| lb.pin_dir.clone());
    if lb.devices.is_empty() {
        return Err(format!(
            "[lb] in {} lists no devices to attach to (devices = [\"eth0\"])",
            config.display()
        ));
    }
    // Blocked before anything else, so that only the wait below takes them.
    let set = ringx_engine::sys::sigset(&[libc::SIGTERM, libc::SIGINT]);
    // SAFETY: blocks signals for this thread only; `set` is a live, initialised sigset.
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    let devs: Vec<(String, ringx_xdp::Mode)> = lb
        .devices
        .iter()
        .map(|d| (d.get_ref().0.clone(), lb.mode.0))
        .collect();
    let b = bring_up(&lb, &dir, &devs)?;
    let maps = b.maps();
    let mut targets = targets(&lb);
    // Start from what the maps say (a restart keeps a backend that was down, down).
    for st in control::backend_states(maps).map_err(|e| e.to_string())? {
        if let Some(t) = targets.iter_mut().find(|t| t.addr == st.addr) {
            t.healthy = !st.down;
        }
    }
    println!(
        "ringx lb: running; {} backends health-checked; SIGTERM or SIGINT to stop",
        targets.len()
    );
    let mut next_refresh = Instant::now() + REFRESH;
    loop {
        let now = Instant::now();
        for t in targets.iter_mut().filter(|t| t.next <= now) {
            let ok = check(t);
            if ok {
                t.ok_run += 1;
                t.fail_run = 0;
            } else {
                t.fail_run += 1;
                t.ok_run = 0;
            }
            let flip = (t.healthy && t.fail_run >= t.health.fall)
                || (!t.healthy && t.ok_run >= t.health.rise);
            if flip {
                t.healthy = !t.healthy;
                match control::set_out(maps, t.addr, Out::Down, !t.healthy) {
                    Ok(_) if t.healthy => println!("ringx lb: backend {} is up again", t.addr),
                    Ok(_) => println!(
                        "ringx lb: backend {} is down ({} failed checks of {}): out of its \
                         services' rings",
                        t.addr, t.fail_run, t.at
                    ),
                    Err(e) => eprintln!("ringx lb: backend {}: {e}", t.addr),
                }
            }
            t.next = Instant::now() + t.health.interval.0;
        }
        if Instant::now() >= next_refresh {
            if let Err(e) = control::refresh_next_hops(maps, &resolve) {
                eprintln!("ringx lb: refreshing next hops: {e}");
            }
            next_refresh = Instant::now() + REFRESH;
        }
        let due = targets
            .iter()
            .map(|t| t.next)
            .min()
            .unwrap_or(next_refresh)
            .min(next_refresh);
        let wait = due
            .saturating_duration_since(Instant::now())
            .min(Duration::from_millis(200));
        let ts = libc::timespec {
            tv_sec: wait.as_secs() as libc::time_t,
            tv_nsec: wait.subsec_nanos() as libc::c_long,
        };
        // SAFETY: sigtimedwait reads the live set and timespec; no siginfo is asked for.
        let sig = unsafe { libc::sigtimedwait(&set, std::ptr::null_mut(), &ts) };
        if sig == libc::SIGTERM || sig == libc::SIGINT {
            break;
        }
    }
    if lb.detach_on_exit {
        for (dev, _) in &devs {
            if let Err(e) = ringx_xdp::detach(&dir, dev) {
                eprintln!("ringx lb: detach from {dev}: {e}");
            }
        }
        println!("ringx lb: detached; stopping");
    } else {
        println!("ringx lb: stopping; the balancer stays attached (its link is pinned)");
    }
    Ok(())
}
