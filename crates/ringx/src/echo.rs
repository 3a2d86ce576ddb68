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
use ringx_engine::{
    bind_reuseport, EngineKind, ListenOptions, Placement, ZoneConfig, ZonePoolBuilder,
};
use ringx_server::role::Echo;

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
    // SIGTERM/SIGINT are blocked before any thread starts (the pool's too), so only the wait
    // below receives them.
    let set = ringx_engine::sys::sigset(&[libc::SIGTERM, libc::SIGINT]);
    let sqpoll = args.sqpoll.then(|| ringx_engine::SqPoll {
        idle: Duration::from_millis(args.sqpoll_idle_ms),
        cpu: args.sqpoll_cpu,
        share: None,
        spin: Duration::from_micros(args.sqpoll_spin_us),
    });
    let plan = ZonePoolBuilder::new(requested)
        .placement(Placement::new(args.cpus.clone(), args.zones))
        .config(ZoneConfig {
            batch_wait: Duration::from_micros(args.batch_wait_us),
            batch_when_pending: args.batch_when_pending,
            ..ZoneConfig::default()
        })
        .sqpoll(sqpoll)
        .block_signals(set)
        .plan();
    let plan = match plan {
        Ok(p) => p,
        Err(e) => {
            eprintln!("ringx echo: {e}");
            return ExitCode::FAILURE;
        }
    };
    let (engine, cpus) = (plan.engine(), plan.cpus().to_vec());
    let stop = Arc::new(AtomicBool::new(false));
    // In pool mode the pool threads need every zone's waker before any zone runs.
    let mut pool_parts = None;
    if args.pool > 0 {
        let ends: Vec<_> = plan
            .wakers()
            .iter()
            .map(|w| echo_pool::zone_ends(w.clone(), 4096))
            .collect();
        let jobs = echo_pool::start_pool(args.pool, ends.iter().map(|e| e.link.clone()).collect());
        pool_parts = Some((ends, jobs));
    }
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
    let zones = match pool_parts {
        Some((ends, jobs)) => {
            let mut ends = ends.into_iter();
            plan.spawn(listeners, |z| {
                let e = ends.next().expect("one set of ends per zone");
                let (id, jobs, stop) = (z.id, jobs.clone(), stop.clone());
                move || echo_pool::PooledEcho::new(id, e, jobs, stop)
            })
        }
        None => plan.spawn(listeners, |_| Echo::default),
    };
    let mut zones = match zones {
        Ok(z) => z,
        Err(e) => {
            eprintln!("ringx echo: {e}");
            return ExitCode::FAILURE;
        }
    };
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
    zones.wake_all();
    for exit in zones.join(None) {
        if let Err(e) = exit.result {
            eprintln!("ringx echo: zone {} failed: {e}", exit.id);
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}
