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

use ringx_engine::{
    EngineKind, ListenOptions, Placement, Waker, ZoneConfig, ZoneExit, ZonePool, ZonePoolBuilder,
};

use ringx_config::{Config, Engine};
use ringx_server::zone::{Zone, ZoneCtl, ZoneEvent, ZoneSetup, CMD_DRAIN};
use ringx_server::{Compiled, Error};

pub(crate) fn init_logging(level: &str) {
    let _ = crate::errlog::init(level, None, None);
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

fn drop_privileges(user: &str) -> Result<(), Error> {
    let (uid, gid) = ringx_config::lookup_user(user)
        .ok_or_else(|| Error::invalid(format!("no such user {user:?}")))?;
    let os = |call: String| Error::io(call, std::io::Error::last_os_error());
    // SAFETY: getuid/getgid take nothing and cannot fail.
    if unsafe { libc::getuid() == uid && libc::getgid() == gid } {
        // Already that user: the new binary of an upgrade, started by a process that had
        // dropped its privileges.
        return Ok(());
    }
    // SAFETY: setgroups reads one gid from a live local; setgid/setuid take integers. glibc
    // applies them to every thread of the process.
    unsafe {
        if libc::setgroups(1, &gid) != 0 {
            return Err(os(format!("setgroups({gid})")));
        }
        if libc::setgid(gid) != 0 {
            return Err(os(format!("setgid({gid})")));
        }
        if libc::setuid(uid) != 0 {
            return Err(os(format!("setuid({uid})")));
        }
    }
    Ok(())
}

/// Whether a value of the configuration may name a variable (rewriting, added headers, a
/// `return` with `$`): then requests need their client's address.
fn has_variables(cfg: &Config) -> bool {
    cfg.server.iter().any(|s| {
        let s = s.get_ref();
        !s.rewrite.is_empty()
            || !s.add_header.is_empty()
            || s.location.iter().any(|l| {
                let l = l.get_ref();
                !l.rewrite.is_empty()
                    || !l.add_header.is_empty()
                    || !l.proxy_set_header.is_empty()
                    || l.try_files.is_some()
                    || l.ret.as_ref().is_some_and(|r| {
                        r.body.contains('$')
                            || r.location
                                .as_ref()
                                .is_some_and(|x| x.get_ref().contains('$'))
                    })
            })
    })
}

/// Runs the server until a signal stops it.
pub fn serve(cfg: Config, config_path: Option<std::path::PathBuf>) -> ExitCode {
    // The error log, opened while privileges last and given to the user they drop to.
    let owner = cfg
        .runtime
        .user
        .as_ref()
        .and_then(|u| ringx_config::lookup_user(u.get_ref()));
    let error_log = cfg
        .runtime
        .error_log
        .as_ref()
        .map(|p| p.get_ref().as_path());
    if let Err(e) = crate::errlog::init(cfg.runtime.log_level.get_ref(), error_log, owner) {
        eprintln!(
            "ringx: cannot open the error log {}: {e}",
            error_log.map_or(String::new(), |p| p.display().to_string())
        );
        return ExitCode::FAILURE;
    }
    ringx_engine::sys::ignore_sigpipe();
    // Read before the upgrade handshake clears its variable (the watchdog follows MAINPID).
    let notify = crate::sdnotify::Notify::from_env();
    let nofile = ringx_engine::sys::raise_nofile();
    // aya probes the kernel's BPF features once per process; a probe that a zone's io_uring
    // task work interrupts would be cached as "no global data" and fail every later load
    // (see ringx_xdp::probe_features), so it runs now, before any ring exists.
    if ringx_xdp::bpf_unavailable().is_none() && !ringx_xdp::probe_features() {
        tracing::warn!("the kernel refused BPF global data: XDP, steering and [lb] will not load");
    }

    let requested = match cfg.runtime.engine {
        Engine::Uring => EngineKind::Uring,
        Engine::Epoll => EngineKind::Epoll,
    };
    // Each zone holds at most this many connections; the registered-file table (accepted
    // plus as many outbound slots when something proxies) may not exceed RLIMIT_NOFILE, and
    // the process's other descriptors need room too.
    let proxies = !cfg.upstream.is_empty()
        || !cfg.stream.is_empty()
        || ringx_config::policy::has_subrequests(&cfg)
        || cfg.server.iter().any(|s| {
            s.get_ref()
                .location
                .iter()
                .any(|l| l.get_ref().proxy_pass.is_some())
        });
    let conns_share = if proxies { 2 } else { 1 };
    // UDP streams: the zones' datagram buffers hold the largest datagram any of them takes.
    let udp_max = cfg
        .stream
        .iter()
        .filter(|s| s.get_ref().protocol == ringx_config::upstream::StreamProtocol::Udp)
        .map(|s| {
            s.get_ref()
                .max_datagram_size
                .as_ref()
                .map_or(ringx_server::route::UDP_MAX_DATAGRAM, |m| {
                    m.get_ref().0 as u32
                })
        })
        .max();
    // HTTP/3: QUIC's datagrams (a larger one arrives truncated and is dropped), or with GRO
    // up to 64 KiB of them coalesced, in fewer buffers (each holds many).
    let quic = cfg.server.iter().any(|s| *s.get_ref().quic.get_ref());
    let gro = quic && cfg.runtime.quic_gro;
    let quic_max = match gro {
        true => ringx_server::route::QUIC_MAX_COALESCED,
        false => ringx_server::route::QUIC_MAX_DATAGRAM,
    };
    let udp_max = udp_max.max(quic.then_some(quic_max));
    let udp_buffers = match gro {
        true => (*cfg.runtime.udp_buffers.get_ref() / 4).max(32),
        false => *cfg.runtime.udp_buffers.get_ref(),
    };
    let max_conns = cfg
        .runtime
        .max_conns
        .min((nofile.saturating_sub(64) / conns_share).max(64) as u32);
    let sigs = signal_set();
    // The engine, the zones' CPUs and wakers; the control signals are blocked from here on,
    // so every thread started later (health checks, the log writer, the zones) leaves them
    // to `wait_signal` below.
    let plan = ZonePoolBuilder::new(requested)
        .placement(Placement::new(
            cfg.runtime.cpus.as_ref().map(|c| c.get_ref().clone()),
            cfg.runtime.zones.as_ref().map(|z| *z.get_ref()),
        ))
        .config(ZoneConfig {
            max_conns,
            recv_buffers: (*cfg.runtime.recv_buffers.get_ref()) as u16,
            recv_buffer_size: cfg.runtime.recv_buffer_size.0 as u32,
            ring_entries: 1024,
            // Client addresses for X-Forwarded-For, PROXY headers, the access log,
            // `$remote_addr`, access rules and limits.
            peer_addrs: proxies
                || cfg.http.access_log.is_some()
                || has_variables(&cfg)
                || !cfg.http.real_ip_from.is_empty()
                || ringx_config::policy::needs_client_address(&cfg),
            busy_poll: ringx_config::ops::busy_poll(cfg.runtime.busy_poll_us),
            max_outbound: if proxies { max_conns } else { 0 },
            batch_wait: Duration::from_micros(cfg.runtime.batch_wait_us.into()),
            batch_when_pending: cfg.runtime.batch_when_pending,
            dgram_buffers: udp_max.map_or(0, |_| udp_buffers as u16),
            gso: cfg.runtime.quic_gso,
            dgram_buffer_size: udp_max.unwrap_or(0) + ringx_engine::uring::DGRAM_OVERHEAD,
            ..ZoneConfig::default()
        })
        .sqpoll(cfg.runtime.sqpoll.then(|| ringx_engine::SqPoll {
            idle: cfg.runtime.sqpoll_idle.0,
            cpu: cfg.runtime.sqpoll_cpu.as_ref().map(|c| *c.get_ref()),
            share: None,
            spin: cfg.runtime.sqpoll_spin.0,
        }))
        .block_signals(sigs)
        .plan();
    let plan = match plan {
        Ok(p) => p,
        Err(e) => {
            tracing::error!("cannot start the zones: {e}");
            return ExitCode::FAILURE;
        }
    };
    let (engine, cpus) = (plan.engine(), plan.cpus().to_vec());
    let zones = cpus.len();

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
    let tls = compiled.tls.clone();
    let health_stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let _health = upstreams
        .as_ref()
        .and_then(|u| ringx_server::upstream::health::spawn(u.clone(), health_stop.clone()));
    let lopts = ListenOptions {
        backlog: cfg.runtime.backlog,
        gro: cfg.runtime.quic_gro,
        ..ListenOptions::default()
    };

    // Bind every zone's listeners before anything runs: an address error stops start-up.
    // After a binary upgrade, the sockets of the process this one replaces are used instead.
    let mut inherited = crate::upgrade::Inherited::take();
    // The admin listener's socket, when the process this one replaces handed it over (it
    // may run as [runtime] user, which cannot bind a second socket beside root's).
    let admin_sock = cfg
        .admin
        .as_ref()
        .and_then(|a| inherited.take_addr(*a.listen.get_ref()));
    // An address this process does not inherit must be free: no other server may share it.
    // A process that has just exited may still hold it for some milliseconds: waited for.
    for addr in &routes.listen {
        if !inherited.holds(addr) {
            if let Err(e) = ringx_engine::await_unclaimed(*addr, ringx_engine::RELEASE_WAIT) {
                tracing::error!("cannot listen: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    // UDP sockets are not handed over by a binary upgrade: the new process binds its own
    // beside the old one's (SO_REUSEPORT), which then drains.
    if !crate::upgrade::is_upgrade() {
        for addr in &routes.udp_listen {
            if let Err(e) = ringx_engine::await_unclaimed_udp(*addr, ringx_engine::RELEASE_WAIT) {
                tracing::error!("cannot listen: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    // The admin address too, before any listener is bound (the admin thread binds it later):
    // refused, it stops start-up before a client has queued on a listener no zone serves.
    let admin_addr = cfg.admin.as_ref().map(|a| *a.listen.get_ref());
    if let Some(addr) = admin_addr.filter(|_| admin_sock.is_none() && !crate::upgrade::is_upgrade())
    {
        if let Err(e) = ringx_engine::await_unclaimed(addr, ringx_engine::RELEASE_WAIT) {
            tracing::error!("cannot listen: admin listener: {e}");
            return ExitCode::FAILURE;
        }
    }
    let mut per_zone_udp = Vec::with_capacity(zones);
    for _ in 0..zones {
        let mut us = Vec::new();
        for addr in &routes.udp_listen {
            let opts = routes.udp_listen_options(*addr, &lopts);
            match ringx_engine::bind_udp_reuseport(*addr, &opts) {
                Ok(u) => us.push(ringx_engine::Listener::Udp(u)),
                Err(e) => {
                    tracing::error!("cannot listen: {e}");
                    return ExitCode::FAILURE;
                }
            }
        }
        per_zone_udp.push(us);
    }
    // Each QUIC packet to the zone its connection ID names, so a client that changes address
    // or port keeps its connection; set up before privileges are dropped (eBPF needs them).
    // The connection IDs carry this process's generation (a binary upgrade flips it).
    ringx_server::role::h3::set_epoch(crate::quic_steering::epoch());
    crate::quic_steering::set_cpus(&cpus);
    crate::quic_steering::steer(
        &routes,
        per_zone_udp
            .iter()
            .map(|us| routes.udp_listen.iter().copied().zip(us.iter())),
    );
    let mut per_zone = Vec::with_capacity(zones);
    for _ in 0..zones {
        let mut ls = Vec::new();
        for addr in &routes.listen {
            let opts = ListenOptions {
                transparent: routes.is_transparent(*addr, false),
                ..lopts.clone()
            };
            match inherited.bind(*addr, &opts) {
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
    let listen_steering = match cfg.steering.listen {
        ringx_config::steering::ListenSteering::Cpu => {
            ringx_steer::reuseport::steer_zones_by_address(&cpus, &per_zone)
        }
        ringx_config::steering::ListenSteering::Hash => Vec::new(),
    };
    // A full zone's CPU hands its new connections to the kernel's hash (handoff.rs).
    let mut handoff = crate::handoff::HandOff::new(
        listen_steering
            .into_iter()
            .filter_map(|(a, s)| Some((per_zone.first()?.get(a)?.local_addr().ok()?, s)))
            .collect(),
        &cpus,
    );
    inherited.adopt_leftovers(&mut per_zone);
    let sockets = crate::control::dup_sockets(&per_zone);
    let udp_sockets = crate::control::dup_udp_sockets(&per_zone_udp);
    // Each zone's listeners: TCP first (the steering above grouped them), then UDP.
    let per_zone: Vec<Vec<ringx_engine::Listener>> = per_zone
        .into_iter()
        .zip(per_zone_udp)
        .map(|(tcp, udp)| tcp.into_iter().map(Into::into).chain(udp).collect())
        .collect();
    // The admin listener, the access log file and the pid file, opened while privileges last.
    let mut ops = match crate::services::open(&cfg, admin_sock) {
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
    // Escalation of abusive clients into the filter's block list (limit_req escalate,
    // escalate_malformed), running whenever there is a filter so that a reload can add rules;
    // dropped before the filter, lifting the blocks it added.
    let _escalator = match &cfg.xdp {
        Some(x) => match ringx_server::guard::escalate::start(&x.pin_dir) {
            Ok(e) => Some(e),
            Err(e) => {
                tracing::error!("{e}");
                return ExitCode::FAILURE;
            }
        },
        None => None,
    };
    // The XDP load balancer ([lb] with devices or behind_filter), attached while privileges
    // last and after the filter, whose chain slot it may take; its health checks run on a
    // thread until serve returns.
    let _lb = match cfg
        .lb
        .as_ref()
        .filter(|l| !l.devices.is_empty() || l.behind_filter.is_some())
    {
        Some(l) => match crate::lb_run::ServeLb::start(l.clone()) {
            Ok(guard) => Some(guard),
            Err(e) => {
                tracing::error!("lb: {e}");
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
    // The Redis client of [cluster], its TLS files read while privileges last.
    if let Err(e) = crate::cluster::start(&cfg) {
        tracing::error!("{e}");
        return ExitCode::FAILURE;
    }
    // The ACME storage, made while privileges last and given to the user they drop to.
    crate::acme::prepare_storage(&cfg, owner);
    if let Some(u) = &cfg.runtime.user {
        if let Err(e) = drop_privileges(u.get_ref()) {
            tracing::error!("cannot drop privileges to {:?}: {e}", u.get_ref());
            return ExitCode::FAILURE;
        }
    }
    let log = match ops.start_log() {
        Ok(l) => l,
        Err(e) => {
            tracing::error!("access log: {e}");
            return ExitCode::FAILURE;
        }
    };
    // The auth pool (`[runtime] auth_threads`): slow password hashes verified off the zones;
    // its threads stop when serve returns.
    let (_auth_pool, mut auth_ends) = match *cfg.runtime.auth_threads.get_ref() {
        0 => (None, Vec::new()),
        n => match ringx_server::guard::verify::start(n, plan.wakers()) {
            Ok((p, ends)) => (Some(p), ends.into_iter().map(Some).collect()),
            Err(e) => {
                tracing::error!("cannot start the auth threads: {e}");
                return ExitCode::FAILURE;
            }
        },
    };
    let (ev_tx, ev_rx) = mpsc::channel::<ZoneEvent>();
    let ctls: Vec<(Arc<ZoneCtl>, Waker)> = plan
        .wakers()
        .iter()
        .map(|w| (Arc::new(ZoneCtl::new()), w.clone()))
        .collect();
    let spawned = plan.spawn(per_zone, |z| {
        let zops = ops.zone(&log, z.listeners);
        let setup = ZoneSetup {
            id: z.id,
            routes: routes.clone(),
            settings: settings.clone(),
            upstreams: upstreams.clone(),
            ctl: ctls[z.id].0.clone(),
            events: ev_tx.clone(),
            connector: active.connector(z.id, z.cpu, zops.counters.clone()),
            log: zops.log,
            listeners: zops.addrs,
            max_conns,
            tls: tls.clone(),
            verify: auth_ends.get_mut(z.id).and_then(Option::take),
        };
        move || Zone::new(setup)
    });
    let mut pool = match spawned {
        Ok(p) => p,
        Err(e) => {
            tracing::error!("cannot start the zones: {e}");
            return ExitCode::FAILURE;
        }
    };

    // Wait until every zone runs (or one fails to start).
    let mut ready = 0;
    let start = Instant::now();
    while ready < zones {
        if let Some(exit) = pool.wait_exit(Duration::ZERO) {
            tracing::error!(
                "zone {} stopped during start-up: {}",
                exit.id,
                outcome(&exit)
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
    let addrs: Vec<String> = routes
        .listen
        .iter()
        .map(|a| a.to_string())
        .chain(routes.udp_listen.iter().map(|a| format!("udp {a}")))
        .collect();
    tracing::info!(
        "ringx {} listening on {} ({zones} zones on CPUs {cpus:?}, engine {}, {max_conns} connections per zone)",
        env!("CARGO_PKG_VERSION"),
        addrs.join(", "),
        engine.as_str()
    );
    let mut control = ops.control(crate::services::ControlParts {
        cfg: &cfg,
        config_path,
        zones: &ctls,
        lopts,
        sockets,
        udp_sockets,
        compiled,
        health_stop: health_stop.clone(),
        engine: engine.as_str(),
        log,
        notify,
    });
    crate::acme::start(&cfg);
    control
        .notify
        .ready(&crate::sdnotify::summary(zones, 0, None));

    let wakers = pool.wakers().to_vec();
    loop {
        while let Ok(ev) = ev_rx.try_recv() {
            control.event(ev);
        }
        handoff.check(&wakers, &control.sockets);
        let (requests, conns) = crate::sdnotify::totals(&control.metrics);
        control.notify.tick(&wakers, requests, conns);
        // A zone that stops on its own is a failure: report it and stop the others.
        if let Some(exit) = pool.wait_exit(Duration::ZERO) {
            tracing::error!("zone {} stopped: {}", exit.id, outcome(&exit));
            return ExitCode::FAILURE;
        }
        // Each tick also looks for zones that became full or have room again (handoff.rs);
        // shorter while zones are applying a reload, to report when they are done.
        let tick = Duration::from_millis(if control.acks.is_some() { 20 } else { 100 });
        match wait_signal(&sigs, Some(tick)) {
            Some(libc::SIGTERM) | Some(libc::SIGINT) => {
                control.notify.stopping();
                control.begin_drain(true);
                tell_zones_to_drain(&ctls);
                tracing::info!(
                    "shutting down gracefully: no longer accepting; draining for up to {:?}",
                    cfg.runtime.drain_timeout.0
                );
                let rc = drain(&mut pool, cfg.runtime.drain_timeout.0, &sigs);
                control.finish();
                return rc;
            }
            Some(libc::SIGQUIT) => {
                tracing::info!("SIGQUIT: exiting now");
                return ExitCode::SUCCESS;
            }
            Some(libc::SIGHUP) => control.reload(),
            Some(libc::SIGUSR1) => {
                control.log.reopen();
                crate::errlog::reopen();
                tracing::info!("SIGUSR1: reopened the access log and the error log");
            }
            Some(libc::SIGUSR2) => {
                // The new process steers the listeners by CPU with a map of its own.
                handoff.release();
                if !control.upgrade() {
                    handoff.resume(&control.sockets);
                    continue;
                }
                control.begin_drain(false);
                tell_zones_to_drain(&ctls);
                let rc = drain(&mut pool, cfg.runtime.drain_timeout.0, &sigs);
                control.finish();
                return rc;
            }
            _ => {}
        }
    }
}

/// Every zone stops accepting and finishes what is in flight (`Zone`'s drain).
fn tell_zones_to_drain(ctls: &[(Arc<ZoneCtl>, Waker)]) {
    for (ctl, waker) in ctls {
        ctl.cmd.store(CMD_DRAIN, Ordering::Release);
        waker.wake();
    }
}

/// Waits until every zone has finished what was in flight, or the drain timeout passes.
/// SIGQUIT during the drain exits at once.
fn drain(pool: &mut ZonePool, timeout: Duration, sigs: &libc::sigset_t) -> ExitCode {
    let deadline = Instant::now() + timeout;
    while pool.running() > 0 {
        let now = Instant::now();
        if now >= deadline {
            tracing::warn!(
                "drain timeout: exiting with {} zones still busy",
                pool.running()
            );
            return ExitCode::SUCCESS;
        }
        if let Some(exit) = pool.wait_exit((deadline - now).min(Duration::from_millis(100))) {
            if let Err(e) = &exit.result {
                tracing::error!("zone {}: {e}", exit.id);
            }
        }
        if wait_signal(sigs, Some(Duration::ZERO)) == Some(libc::SIGQUIT) {
            tracing::info!("SIGQUIT during drain: exiting now");
            return ExitCode::SUCCESS;
        }
    }
    tracing::info!("all zones drained; bye");
    ExitCode::SUCCESS
}

/// How a zone ended, for the log.
fn outcome(exit: &ZoneExit) -> String {
    match &exit.result {
        Ok(()) => "exited".into(),
        Err(e) => e.to_string(),
    }
}
