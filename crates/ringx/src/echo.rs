//! `ringx echo`: the netpoll benchmark's echo server on the engine. Each message is a 4-byte
//! big-endian length and that many bytes; the server decodes each message into a new one and
//! encodes it back. A small, complete example of an RPC-style server without HTTP.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use clap::Args;

use crate::echo_pool;
use ringx_engine::framing::{encode, Deframer};
use ringx_engine::{
    bind_reuseport, choose_engine, run_zone, ConnId, EngineKind, Handler, Io, ListenOptions,
    ListenerId, Waker, ZoneConfig,
};

#[derive(Args, Debug)]
pub struct EchoArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:7000")]
    listen: SocketAddr,
    /// Zones (pinned threads); default: one per CPU.
    #[arg(long)]
    zones: Option<usize>,
    /// CPUs to pin zones to, comma-separated.
    #[arg(long, value_delimiter = ',')]
    cpus: Option<Vec<usize>>,
    /// "uring" or "epoll".
    #[arg(long, default_value = "uring")]
    engine: String,
    /// io_uring kernel submission polling, one SQ thread shared by the zones.
    #[arg(long)]
    sqpoll: bool,
    /// Milliseconds the SQ thread polls an idle ring before sleeping.
    #[arg(long, default_value_t = 100)]
    sqpoll_idle_ms: u64,
    /// Pin the shared SQ thread to this CPU.
    #[arg(long)]
    sqpoll_cpu: Option<u32>,
    /// With SQPOLL: microseconds a zone polls its completion queue before it sleeps in
    /// io_uring_enter (the only system call left in steady state).
    #[arg(long, default_value_t = 50)]
    sqpoll_spin_us: u64,
    /// Run handlers on a pool of this many threads (Netpoll's model); replies return through
    /// each zone's shared, lock-free, order-preserving send ring. 0: handlers run in the zone.
    #[arg(long, default_value_t = 0)]
    pool: usize,
    /// Which zone gets a new connection: "cpu" (the one on the CPU that processed its SYN) or
    /// "hash" (the kernel's reuseport hash); see `[steering] listen`.
    #[arg(long, default_value = "cpu", value_parser = ["cpu", "hash"])]
    steering: String,
    /// Adaptive completion batching (io_uring): wait up to this many microseconds for as many
    /// completions as the last (busy) wait brought before taking what came. 0: off.
    #[arg(long, default_value_t = 20)]
    batch_wait_us: u64,
    /// Also wait for a batch when completions are already waiting: the fewest system calls
    /// (an RPC server's aim, seed 001), at the price of more sleeps. "false" takes waiting
    /// work at once (the HTTP server's default).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    batch_when_pending: bool,
}

#[derive(Default)]
struct Echo {
    conns: Vec<Deframer>,
}

impl Handler for Echo {
    fn on_accept(&mut self, _: &mut Io, c: ConnId, _: ListenerId) {
        if self.conns.len() <= c.index() {
            self.conns.resize_with(c.index() + 1, Deframer::default);
        }
        self.conns[c.index()] = Deframer::default();
    }

    fn on_data(&mut self, io: &mut Io, c: ConnId, data: &[u8]) {
        let Some(out) = io.out_buf(c) else { return };
        // Decode into a new message and encode that back (the benchmark's contract), straight
        // from the receive buffer when a message arrived whole.
        let r = self.conns[c.index()].feed(data, |msg| encode(out, msg));
        if let Err(e) = r {
            tracing::debug!("echo: {e}; closing");
            io.close(c);
        }
    }

    fn on_eof(&mut self, io: &mut Io, c: ConnId) {
        io.close_after_flush(c);
    }

    fn on_closed(&mut self, _: &mut Io, c: ConnId, _: Option<std::io::Error>) {
        self.conns[c.index()] = Deframer::default();
    }

    fn on_timer(&mut self, _: &mut Io) -> Option<Duration> {
        None
    }

    fn on_wake(&mut self, io: &mut Io) {
        io.exit();
    }
}

pub fn run(args: EchoArgs) -> ExitCode {
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .try_init();
    ringx_engine::sys::ignore_sigpipe();
    ringx_engine::sys::raise_nofile();
    let requested = match args.engine.as_str() {
        "uring" => EngineKind::Uring,
        "epoll" => EngineKind::Epoll,
        other => {
            eprintln!("ringx echo: unknown engine {other:?}: use uring or epoll");
            return ExitCode::FAILURE;
        }
    };
    let (engine, why) = choose_engine(requested);
    if let Some(why) = why {
        tracing::warn!("io_uring is unavailable ({why}); using the epoll driver");
    }
    let allowed = ringx_engine::sys::allowed_cpus();
    let cpus = args.cpus.clone().unwrap_or_else(|| {
        (0..args.zones.unwrap_or(allowed.len()))
            .map(|i| allowed[i % allowed.len()])
            .collect()
    });
    // Block SIGTERM/SIGINT before the zones start, so only the wait below receives them.
    // SAFETY: builds a signal set in a live local and blocks it in this thread (inherited by
    // the zones spawned next).
    let set = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    };
    let sqpoll = args.sqpoll.then(|| ringx_engine::SqPoll {
        idle: Duration::from_millis(args.sqpoll_idle_ms),
        cpu: args.sqpoll_cpu,
        share: Some(std::sync::Arc::new(ringx_engine::SqShare::default())),
        spin: Duration::from_micros(args.sqpoll_spin_us),
    });
    // Wakers first: in pool mode the pool threads need every zone's before any zone runs.
    let mut wakers = Vec::new();
    for _ in &cpus {
        match Waker::new() {
            Ok(w) => wakers.push(w),
            Err(e) => {
                eprintln!("ringx echo: eventfd: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    let stop = Arc::new(AtomicBool::new(false));
    let mut pool_parts = None;
    if args.pool > 0 {
        let ends: Vec<_> = wakers
            .iter()
            .map(|w| echo_pool::zone_ends(w.clone(), 4096))
            .collect();
        let jobs = echo_pool::start_pool(args.pool, ends.iter().map(|e| e.link.clone()).collect());
        pool_parts = Some((ends, jobs));
    }
    let mut pool_ends = pool_parts
        .as_mut()
        .map(|(ends, _)| std::mem::take(ends).into_iter());
    let mut listeners = Vec::new();
    for _ in &cpus {
        match bind_reuseport(args.listen, &ListenOptions::default()) {
            Ok(l) => listeners.push(vec![l]),
            Err(e) => {
                eprintln!("ringx echo: cannot listen: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    let _steering = match args.steering.as_str() {
        "cpu" => ringx_steer::reuseport::steer_zones(&cpus, &listeners),
        _ => Vec::new(),
    };
    let mut threads = Vec::new();
    for ((id, &cpu), l) in cpus.iter().enumerate().zip(listeners) {
        let waker = wakers[id].clone();
        let cfg = ZoneConfig {
            id,
            cpu: Some(cpu),
            engine,
            sqpoll: sqpoll.clone(),
            batch_wait: std::time::Duration::from_micros(args.batch_wait_us),
            batch_when_pending: args.batch_when_pending,
            ..ZoneConfig::default()
        };
        let pooled = match (&mut pool_ends, &pool_parts) {
            (Some(ends), Some((_, jobs))) => {
                let e = ends.next().expect("one set of ends per zone");
                Some(echo_pool::PooledEcho::new(
                    id,
                    e,
                    jobs.clone(),
                    stop.clone(),
                ))
            }
            _ => None,
        };
        threads.push(std::thread::spawn(move || match pooled {
            Some(mut h) => run_zone(&cfg, l, waker, &mut h),
            None => run_zone(&cfg, l, waker, &mut Echo::default()),
        }));
    }
    tracing::info!(
        "ringx echo listening on {} ({} zones on CPUs {cpus:?}, engine {})",
        args.listen,
        cpus.len(),
        engine.as_str()
    );
    // Wait for SIGTERM or SIGINT, then stop the zones.
    let mut sig = 0;
    // SAFETY: sigwait reads the live set and writes one c_int.
    unsafe { libc::sigwait(&set, &mut sig) };
    stop.store(true, Ordering::Release);
    for w in &wakers {
        w.wake();
    }
    for t in threads {
        if let Ok(Err(e)) = t.join() {
            eprintln!("ringx echo: zone failed: {e}");
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}
