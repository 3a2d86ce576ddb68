//! Start-up, the control thread (signals) and shutdown.
//!
//! The main thread binds every zone's listeners (so address errors surface before anything
//! runs), drops privileges, starts one pinned thread per zone, and then only waits for
//! signals: SIGTERM/SIGINT drain gracefully, SIGQUIT exits at once.

use std::process::ExitCode;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use ringx_engine::{
    bind_reuseport, choose_engine, run_zone, EngineKind, ListenOptions, Waker, ZoneConfig,
};

use crate::config::{self, Config, Engine};
use crate::server::route::Routes;
use crate::server::settings::Settings;
use crate::server::zone::{HttpZone, ZoneCtl, ZoneEvent, CMD_DRAIN};

fn init_logging(level: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}

/// Signals the control thread waits for; blocked in every thread.
fn signal_set() -> libc::sigset_t {
    // SAFETY: sigemptyset/sigaddset initialise and fill a live local sigset_t.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in [
            libc::SIGTERM,
            libc::SIGINT,
            libc::SIGQUIT,
            libc::SIGHUP,
            libc::SIGUSR1,
            libc::SIGUSR2,
        ] {
            libc::sigaddset(&mut set, s);
        }
        set
    }
}

/// Waits up to `timeout` for one of the signals in `set`.
fn wait_signal(set: &libc::sigset_t, timeout: Option<Duration>) -> Option<i32> {
    let ts = timeout.map(|t| libc::timespec {
        tv_sec: t.as_secs() as libc::time_t,
        tv_nsec: t.subsec_nanos() as libc::c_long,
    });
    // SAFETY: sigtimedwait reads the live set and optional timespec; no siginfo is requested.
    let r = unsafe {
        libc::sigtimedwait(
            set,
            std::ptr::null_mut(),
            ts.as_ref().map_or(std::ptr::null(), |t| t as *const _),
        )
    };
    (r > 0).then_some(r)
}

fn drop_privileges(user: &str) -> Result<(), String> {
    let (uid, gid) = config::lookup_user(user).ok_or_else(|| format!("no such user {user:?}"))?;
    // SAFETY: setgroups reads one gid from a live local; setgid/setuid take integers. glibc
    // applies them to every thread of the process.
    unsafe {
        if libc::setgroups(1, &gid) != 0 {
            return Err(format!(
                "setgroups({gid}): {}",
                std::io::Error::last_os_error()
            ));
        }
        if libc::setgid(gid) != 0 {
            return Err(format!(
                "setgid({gid}): {}",
                std::io::Error::last_os_error()
            ));
        }
        if libc::setuid(uid) != 0 {
            return Err(format!(
                "setuid({uid}): {}",
                std::io::Error::last_os_error()
            ));
        }
    }
    Ok(())
}

/// Runs the server until a signal stops it.
pub fn serve(cfg: Config) -> ExitCode {
    init_logging(&cfg.runtime.log_level);
    ringx_engine::sys::ignore_sigpipe();
    let nofile = ringx_engine::sys::raise_nofile();

    let requested = match cfg.runtime.engine {
        Engine::Uring => EngineKind::Uring,
        Engine::Epoll => EngineKind::Epoll,
    };
    let (engine, why) = choose_engine(requested);
    if let Some(why) = why {
        tracing::warn!("io_uring is unavailable ({why}); using the epoll driver");
    }

    let allowed = ringx_engine::sys::allowed_cpus();
    let cpus: Vec<usize> = match (&cfg.runtime.cpus, &cfg.runtime.zones) {
        (Some(c), _) => c.get_ref().clone(),
        (None, Some(z)) => (0..*z.get_ref())
            .map(|i| allowed[i % allowed.len()])
            .collect(),
        (None, None) => allowed.clone(),
    };
    let zones = cpus.len();
    // Each zone holds at most this many connections; the registered-file table (accepted
    // plus as many outbound slots when something proxies) may not exceed RLIMIT_NOFILE, and
    // the process's other descriptors need room too.
    let proxies = !cfg.upstream.is_empty()
        || !cfg.stream.is_empty()
        || cfg.server.iter().any(|s| {
            s.get_ref()
                .location
                .iter()
                .any(|l| l.get_ref().proxy_pass.is_some())
        });
    let conns_share = if proxies { 2 } else { 1 };
    let max_conns = cfg
        .runtime
        .max_conns
        .min((nofile.saturating_sub(64) / conns_share).max(64) as u32);

    let mut upstreams = match crate::proxy::Upstreams::compile(&cfg) {
        Ok(u) => u,
        Err(e) => {
            tracing::error!("{e}");
            return ExitCode::FAILURE;
        }
    };
    let routes = match Routes::compile(&cfg, &mut upstreams) {
        Ok(r) => Arc::new(r),
        Err(e) => {
            tracing::error!("{e}");
            return ExitCode::FAILURE;
        }
    };
    let upstreams = (!upstreams.list.is_empty()).then(|| Arc::new(upstreams));
    let health_stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let _health = upstreams
        .as_ref()
        .and_then(|u| crate::proxy::health::spawn(u.clone(), health_stop.clone()));
    let settings = Arc::new(Settings::from_config(
        &cfg.http,
        cfg.runtime.recv_buffer_size.0,
    ));
    let lopts = ListenOptions {
        backlog: cfg.runtime.backlog,
        ..ListenOptions::default()
    };

    // Bind every zone's listeners before anything runs: an address error stops start-up.
    let mut per_zone = Vec::with_capacity(zones);
    for _ in 0..zones {
        let mut ls = Vec::new();
        for addr in &routes.listen {
            match bind_reuseport(*addr, &lopts) {
                Ok(l) => ls.push(l),
                Err(e) => {
                    tracing::error!("cannot listen: {e}");
                    return ExitCode::FAILURE;
                }
            }
        }
        per_zone.push(ls);
    }
    // Each new connection to the zone on the CPU that processed its SYN ([steering] listen);
    // set up before privileges are dropped (eBPF needs them), kept for the server's life.
    let _listen_steering = match cfg.steering.listen {
        config::steering::ListenSteering::Cpu => {
            ringx_engine::reuseport::steer_zones(&cpus, &per_zone)
        }
        config::steering::ListenSteering::Hash => Vec::new(),
    };
    // The XDP filter ([xdp]), attached while privileges last; dropping the guard (however
    // serve returns) logs its counters and detaches only with detach_on_exit.
    let _xdp = match &cfg.xdp {
        Some(x) => match crate::cli_xdp::ServeXdp::start(x, &routes.listen) {
            Ok(guard) => Some(guard),
            Err(e) => {
                tracing::error!("xdp: {e}");
                return ExitCode::FAILURE;
            }
        },
        None => None,
    };
    if let Some(u) = &cfg.runtime.user {
        if let Err(e) = drop_privileges(u.get_ref()) {
            tracing::error!("cannot drop privileges to {:?}: {e}", u.get_ref());
            return ExitCode::FAILURE;
        }
    }

    let sigs = signal_set();
    // SAFETY: blocks the signals in this thread; threads spawned afterwards inherit the mask,
    // so only `wait_signal` here ever receives them.
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &sigs, std::ptr::null_mut()) };

    let sqpoll = cfg.runtime.sqpoll.then(|| ringx_engine::SqPoll {
        idle: cfg.runtime.sqpoll_idle.0,
        cpu: None,
        share: Some(Arc::new(ringx_engine::SqShare::default())),
        spin: cfg.runtime.sqpoll_spin.0,
    });
    if sqpoll.is_some() && engine != EngineKind::Uring {
        tracing::warn!("sqpoll applies to the io_uring engine only; ignored");
    }
    let (ev_tx, ev_rx) = mpsc::channel::<ZoneEvent>();
    let (done_tx, done_rx) = mpsc::channel::<(usize, Result<(), String>)>();
    let mut ctls = Vec::new();
    for (id, listeners) in per_zone.into_iter().enumerate() {
        let waker = match Waker::new() {
            Ok(w) => w,
            Err(e) => {
                tracing::error!("eventfd: {e}");
                return ExitCode::FAILURE;
            }
        };
        let ctl = Arc::new(ZoneCtl {
            cmd: AtomicU8::new(0),
        });
        ctls.push((ctl.clone(), waker.clone()));
        let zcfg = ZoneConfig {
            id,
            cpu: Some(cpus[id]),
            engine,
            max_conns,
            recv_buffers: (*cfg.runtime.recv_buffers.get_ref()) as u16,
            recv_buffer_size: cfg.runtime.recv_buffer_size.0 as u32,
            ring_entries: 1024,
            sqpoll: sqpoll.clone(),
            // Client addresses for X-Forwarded-For and PROXY headers.
            peer_addrs: upstreams.is_some(),
            busy_poll: Duration::ZERO,
            max_outbound: if upstreams.is_some() { max_conns } else { 0 },
        };
        let (routes, settings, ev_tx, done_tx, ups) = (
            routes.clone(),
            settings.clone(),
            ev_tx.clone(),
            done_tx.clone(),
            upstreams.clone(),
        );
        let spawned = std::thread::Builder::new()
            .name(format!("ringx-zone-{id}"))
            .spawn(move || {
                let mut h = HttpZone::new(id, routes, settings, ctl, ev_tx, ups);
                let r = run_zone(&zcfg, listeners, waker, &mut h).map_err(|e| e.to_string());
                let _ = done_tx.send((id, r));
            });
        if let Err(e) = spawned {
            tracing::error!("cannot start zone {id}: {e}");
            return ExitCode::FAILURE;
        }
    }
    drop(done_tx);

    // Wait until every zone runs (or one fails to start).
    let mut ready = 0;
    let start = Instant::now();
    while ready < zones {
        if let Ok((id, r)) = done_rx.try_recv() {
            tracing::error!(
                "zone {id} stopped during start-up: {}",
                r.err().unwrap_or_default()
            );
            return ExitCode::FAILURE;
        }
        match ev_rx.recv_timeout(Duration::from_millis(20)) {
            Ok(ZoneEvent::Ready) => ready += 1,
            Err(mpsc::RecvTimeoutError::Timeout) if start.elapsed() < Duration::from_secs(30) => {}
            Err(_) => {
                tracing::error!("zones did not start within 30 s");
                return ExitCode::FAILURE;
            }
        }
    }
    let addrs: Vec<String> = routes.listen.iter().map(|a| a.to_string()).collect();
    tracing::info!(
        "ringx {} listening on {} ({zones} zones on CPUs {cpus:?}, engine {}, {max_conns} connections per zone)",
        env!("CARGO_PKG_VERSION"),
        addrs.join(", "),
        engine.as_str()
    );

    loop {
        // A zone that stops on its own is a failure: report it and stop the others.
        if let Ok((id, r)) = done_rx.try_recv() {
            tracing::error!(
                "zone {id} stopped: {}",
                r.err().unwrap_or_else(|| "exited".into())
            );
            return ExitCode::FAILURE;
        }
        match wait_signal(&sigs, Some(Duration::from_millis(500))) {
            Some(libc::SIGTERM) | Some(libc::SIGINT) => {
                tracing::info!(
                    "shutting down gracefully (draining for up to {:?})",
                    cfg.runtime.drain_timeout.0
                );
                return drain(&ctls, &done_rx, zones, cfg.runtime.drain_timeout.0, &sigs);
            }
            Some(libc::SIGQUIT) => {
                tracing::info!("SIGQUIT: exiting now");
                return ExitCode::SUCCESS;
            }
            Some(libc::SIGHUP) => tracing::warn!(
                "SIGHUP: configuration reload is not supported yet; restart to apply changes"
            ),
            Some(libc::SIGUSR1) => {
                tracing::info!("SIGUSR1: no log files to reopen (logs go to stderr)")
            }
            Some(libc::SIGUSR2) => tracing::warn!("SIGUSR2: binary upgrade is not supported yet"),
            _ => {}
        }
    }
}

/// Stops accepting, lets requests in flight finish, exits when all zones are idle or the
/// drain timeout passes. SIGQUIT during the drain exits at once.
fn drain(
    ctls: &[(Arc<ZoneCtl>, Waker)],
    done_rx: &mpsc::Receiver<(usize, Result<(), String>)>,
    zones: usize,
    timeout: Duration,
    sigs: &libc::sigset_t,
) -> ExitCode {
    for (ctl, waker) in ctls {
        ctl.cmd.store(CMD_DRAIN, Ordering::Release);
        waker.wake();
    }
    let deadline = Instant::now() + timeout;
    let mut done = 0;
    while done < zones {
        let now = Instant::now();
        if now >= deadline {
            tracing::warn!(
                "drain timeout: exiting with {} zones still busy",
                zones - done
            );
            return ExitCode::SUCCESS;
        }
        if let Ok((id, r)) = done_rx.recv_timeout((deadline - now).min(Duration::from_millis(100)))
        {
            if let Err(e) = r {
                tracing::error!("zone {id}: {e}");
            }
            done += 1;
        }
        if wait_signal(sigs, Some(Duration::ZERO)) == Some(libc::SIGQUIT) {
            tracing::info!("SIGQUIT during drain: exiting now");
            return ExitCode::SUCCESS;
        }
    }
    tracing::info!("all zones drained; bye");
    ExitCode::SUCCESS
}
