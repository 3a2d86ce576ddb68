//! The balancer's control plane as a process (`ringx lb run`) or beside the server (`ringx
//! serve` with [lb].devices): attach the balancer to [lb].devices with the configuration's
//! services, then check each backend's health (a TCP connect, or the upstream checker's HTTP
//! request), take a backend out of its services' rings after `fall` failures and back after
//! `rise` successes, and refresh the backends' next hops. The balancer keeps forwarding when
//! the control plane stops: its link is pinned (unless `detach_on_exit`).

use std::net::{IpAddr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ringx_config::lb as cfg;
use ringx_lb::control::{self, Out};
use ringx_lb::LbMaps;
use ringx_server::upstream::health;

use crate::lb_setup::{bring_up, es, load_lb, resolve, Res};

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
                stats: Default::default(),
            };
            let h = ringx_server::upstream::HealthDef {
                interval: t.health.interval.0,
                path: t.health.path.clone(),
                expect: t.health.expect,
                rise: t.health.rise,
                fall: t.health.fall,
                timeout: t.health.timeout.0,
            };
            health::check(&s, &h, None)
        }
    }
}

/// The health checks and next-hop refreshes over the pinned maps.
struct Checker {
    maps: LbMaps,
    targets: Vec<Target>,
    next_refresh: Instant,
}

impl Checker {
    /// One target per backend address, with the health settings of the first service that
    /// checks it, starting from what the maps say (a backend that was down stays down until
    /// it passes `rise` checks).
    fn new(lb: &cfg::Lb, maps: LbMaps) -> Res<Checker> {
        let mut targets: Vec<Target> = Vec::new();
        let now = Instant::now();
        for s in &lb.services {
            let s = s.get_ref();
            let Some(h) = &s.health else { continue };
            let h = h.get_ref();
            for b in &s.backends {
                let addr = b.get_ref().addr;
                if targets.iter().any(|t| t.addr == addr) {
                    continue;
                }
                targets.push(Target {
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
        for st in control::backend_states(&maps).map_err(es)? {
            if let Some(t) = targets.iter_mut().find(|t| t.addr == st.addr) {
                t.healthy = !st.down;
            }
        }
        Ok(Checker {
            maps,
            targets,
            next_refresh: now + REFRESH,
        })
    }

    /// Runs the checks that are due; returns when the next one is.
    fn step(&mut self, say: &dyn Fn(String)) -> Instant {
        let now = Instant::now();
        for t in self.targets.iter_mut().filter(|t| t.next <= now) {
            if check(t) {
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
                match control::set_out(&self.maps, t.addr, Out::Down, !t.healthy) {
                    Ok(_) if t.healthy => say(format!("ringx lb: backend {} is up again", t.addr)),
                    Ok(_) => say(format!(
                        "ringx lb: backend {} is down ({} failed checks of {}): out of its \
                         services' rings",
                        t.addr, t.fail_run, t.at
                    )),
                    Err(e) => say(format!("ringx lb: backend {}: {e}", t.addr)),
                }
            }
            t.next = Instant::now() + t.health.interval.0;
        }
        if Instant::now() >= self.next_refresh {
            if let Err(e) = control::refresh_next_hops(&self.maps, &resolve) {
                say(format!("ringx lb: refreshing next hops: {e}"));
            }
            self.next_refresh = Instant::now() + REFRESH;
        }
        self.targets
            .iter()
            .map(|t| t.next)
            .min()
            .unwrap_or(self.next_refresh)
            .min(self.next_refresh)
    }
}

fn devices(lb: &cfg::Lb) -> Vec<(String, ringx_xdp::Mode)> {
    lb.devices
        .iter()
        .map(|d| (d.get_ref().0.clone(), lb.mode.0))
        .collect()
}

fn behind(lb: &cfg::Lb) -> Option<&Path> {
    lb.behind_filter.as_ref().map(|b| b.get_ref().as_path())
}

fn detach_all(lb: &cfg::Lb, dir: &Path, say: &dyn Fn(String)) {
    for (dev, _) in devices(lb) {
        match ringx_xdp::detach(dir, &dev) {
            Ok(()) => say(format!("ringx lb: detached the balancer from {dev}")),
            Err(e) => say(format!("ringx lb: detach from {dev}: {e}")),
        }
    }
}

/// `ringx lb run`.
pub fn run(config: &Path, pin: Option<PathBuf>) -> Res<()> {
    let lb = load_lb(config)?;
    let dir = pin.unwrap_or_else(|| lb.pin_dir.clone());
    if lb.devices.is_empty() && lb.behind_filter.is_none() {
        return Err(format!(
            "[lb] in {} lists no devices to attach to (devices = [\"eth0\"]) and no filter \
             to go behind (behind_filter)",
            config.display()
        ));
    }
    // Blocked before anything else, so that only the wait below takes them.
    let set = ringx_engine::sys::sigset(&[libc::SIGTERM, libc::SIGINT]);
    // SAFETY: blocks signals for this thread only; `set` is a live, initialised sigset.
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    let say = |l: String| println!("{l}");
    bring_up(&lb, &dir, &devices(&lb), behind(&lb), &say)?;
    let mut checker = Checker::new(&lb, LbMaps::open_pinned(&dir).map_err(es)?)?;
    println!(
        "ringx lb: running; {} backends health-checked; SIGTERM or SIGINT to stop",
        checker.targets.len()
    );
    loop {
        let due = checker.step(&say);
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
        detach_all(&lb, &dir, &say);
        println!("ringx lb: stopping");
    } else {
        println!("ringx lb: stopping; the balancer stays attached (its link is pinned)");
    }
    Ok(())
}

/// The balancer `ringx serve` runs for [lb] with devices (or behind_filter): attached at start (while
/// privileges last; the maps it keeps open work after they are dropped), the checks on a
/// thread of their own; dropping it stops them and detaches with `detach_on_exit`.
pub struct ServeLb {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    detach: Option<(cfg::Lb, PathBuf)>,
}

impl ServeLb {
    pub fn start(lb: cfg::Lb) -> Res<ServeLb> {
        let dir = lb.pin_dir.clone();
        let say = |l: String| tracing::info!("{l}");
        bring_up(&lb, &dir, &devices(&lb), behind(&lb), &say)?;
        let mut checker = Checker::new(&lb, LbMaps::open_pinned(&dir).map_err(es)?)?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("ringx-lb".into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    let due = checker.step(&|l| tracing::info!("{l}"));
                    let wait = due.saturating_duration_since(Instant::now());
                    std::thread::sleep(wait.min(Duration::from_millis(100)));
                }
            })
            .map_err(|e| format!("spawn the balancer's control thread: {e}"))?;
        let detach = lb.detach_on_exit.then_some((lb, dir));
        Ok(ServeLb {
            stop,
            thread: Some(thread),
            detach,
        })
    }
}

impl Drop for ServeLb {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        match &self.detach {
            Some((lb, dir)) => detach_all(lb, dir, &|l| tracing::info!("{l}")),
            None => tracing::info!("ringx lb: the balancer stays attached (its link is pinned)"),
        }
    }
}
