//! Start-up, the control thread (signals) and shutdown.
//!
//! The main thread binds every zone's listeners (so address errors surface before anything
//! runs), drops privileges, starts one pinned thread per zone, and then only waits for
//! signals: SIGTERM/SIGINT drain gracefully, SIGQUIT exits at once, SIGHUP reloads the
//! configuration, SIGUSR1 reopens the access log, SIGUSR2 upgrades the binary (control.rs).

use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use ringx_engine::{choose_engine, run_zone, EngineKind, ListenOptions, Waker, ZoneConfig};

use crate::config::{self, Config, Engine};
use crate::server::zone::{Zone, ZoneCtl, ZoneEvent, ZoneSetup, CMD_DRAIN};
use crate::server::Compiled;

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
pub fn serve(cfg: Config, config_path: Option<std::path::PathBuf>) -> ExitCode {
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

    let compiled = match Compiled::from(&cfg) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!("{e}");
            return ExitCode::FAILURE;
        }
    };
    let routes = compiled.routes.clone();
    let upstreams = compiled.upstreams.clone();
    let settings = compiled.settings.clone();
    let health_stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let _health = upstreams
        .as_ref()
        .and_then(|u| crate::proxy::health::spawn(u.clone(), health_stop.clone()));
    let lopts = ListenOptions {
        backlog: cfg.runtime.backlog,
        ..ListenOptions::default()
    };

    // Bind every zone's listeners before anything runs: an address error stops start-up.
    // After a binary upgrade, the sockets of the process this one replaces are used instead.
    let mut inherited = crate::upgrade::Inherited::take();
    // An address this process does not inherit must be free: no other server may share it.
    for addr in &routes.listen {
        if !inherited.holds(addr) {
            if let Err(e) = ringx_engine::ensure_unclaimed(*addr) {
                tracing::error!("cannot listen: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    let mut per_zone = Vec::with_capacity(zones);
    for _ in 0..zones {
        let mut ls = Vec::new();
        for addr in &routes.listen {
            match inherited.bind(*addr, &lopts) {
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
            ringx_steer::reuseport::steer_zones(&cpus, &per_zone)
        }
        config::steering::ListenSteering::Hash => Vec::new(),
    };
    inherited.adopt_leftovers(&mut per_zone);
    let sockets = crate::control::dup_sockets(&per_zone);
    // The admin listener and the access log file, opened while privileges last.
    let mut ops = match crate::ops_wiring::open(&cfg) {
        Ok(o) => o,
        Err(e) => {
            tracing::error!("{e}");
            return ExitCode::FAILURE;
        }
    };
    // The XDP filter ([xdp]), attached while privileges last; dropping the guard (however
    // serve returns) logs its counters and detaches only with detach_on_exit.
    let _xdp = match &cfg.xdp {
        Some(x) => match crate::serve_xdp::ServeXdp::start(x, &routes.listen) {
            Ok(guard) => Some(guard),
            Err(e) => {
                tracing::error!("xdp: {e}");
                return ExitCode::FAILURE;
            }
        },
        None => None,
    };
    // Active-side steering ([steering] mode): each zone's source-port table, and the XDP
    // program when steering in software; logs the counters and detaches when it drops.
    let mut active = match crate::steering::setup(&cfg, &cpus, upstreams.as_deref(), &routes.listen)
    {
        Ok(s) => s,
        Err(e) => {
            tracing::error!("steering: {e}");
            return ExitCode::FAILURE;
        }
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
        cpu: cfg.runtime.sqpoll_cpu.as_ref().map(|c| *c.get_ref()),
        share: Some(Arc::new(ringx_engine::SqShare::default())),
        spin: cfg.runtime.sqpoll_spin.0,
    });
    if sqpoll.is_some() && engine != EngineKind::Uring {
        tracing::warn!("sqpoll applies to the io_uring engine only; ignored");
    }
    let log = match ops.start_log() {
        Ok(l) => l,
        Err(e) => {
            tracing::error!("access log: {e}");
            return ExitCode::FAILURE;
        }
    };
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
        let ctl = Arc::new(ZoneCtl::new());
        ctls.push((ctl.clone(), waker.clone()));
        let zops = ops.zone(&log, &listeners);
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
            // ... and for the access log.
            peer_addrs: upstreams.is_some() || cfg.http.access_log.is_some(),
            busy_poll: config::ops::busy_poll(cfg.runtime.busy_poll_us),
            max_outbound: if upstreams.is_some() { max_conns } else { 0 },
            batch_wait: Duration::from_micros(cfg.runtime.batch_wait_us.into()),
            batch_when_pending: cfg.runtime.batch_when_pending,
        };
        let connector = active.connector(id, cpus[id], zops.counters.clone());
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
                let mut h = Zone::new(ZoneSetup {
                    id,
                    routes,
                    settings,
                    upstreams: ups,
                    ctl,
                    events: ev_tx,
                    connector,
                    log: zops.log,
                    listeners: zops.addrs,
                    max_conns,
                });
                let r = run_zone(&zcfg, listeners, waker, &mut h).map_err(|e| e.to_string());
                drop(h); // hands its last access log lines to the writer first
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
            Ok(_) => {}
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
    let mut control = ops.control(crate::ops_wiring::ControlParts {
        cfg: &cfg,
        config_path,
        zones: &ctls,
        lopts,
        sockets,
        compiled,
        health_stop: health_stop.clone(),
        engine: engine.as_str(),
        log,
    });

    loop {
        while let Ok(ev) = ev_rx.try_recv() {
            control.event(ev);
        }
        // A zone that stops on its own is a failure: report it and stop the others.
        if let Ok((id, r)) = done_rx.try_recv() {
            tracing::error!(
                "zone {id} stopped: {}",
                r.err().unwrap_or_else(|| "exited".into())
            );
            return ExitCode::FAILURE;
        }
        // Shorter while zones are applying a reload, to report when they are done.
        let tick = Duration::from_millis(if control.acks.is_some() { 20 } else { 500 });
        match wait_signal(&sigs, Some(tick)) {
            Some(libc::SIGTERM) | Some(libc::SIGINT) => {
                tracing::info!(
                    "shutting down gracefully (draining for up to {:?})",
                    cfg.runtime.drain_timeout.0
                );
                control.begin_drain();
                let rc = drain(&ctls, &done_rx, zones, cfg.runtime.drain_timeout.0, &sigs);
                control.finish();
                return rc;
            }
            Some(libc::SIGQUIT) => {
                tracing::info!("SIGQUIT: exiting now");
                return ExitCode::SUCCESS;
            }
            Some(libc::SIGHUP) => control.reload(),
            Some(libc::SIGUSR1) => {
                tracing::info!("SIGUSR1: reopening the access log");
                control.log.reopen();
            }
            Some(libc::SIGUSR2) if control.upgrade() => {
                control.begin_drain();
                let rc = drain(&ctls, &done_rx, zones, cfg.runtime.drain_timeout.0, &sigs);
                control.finish();
                return rc;
            }
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
