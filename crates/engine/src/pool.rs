//! Starting a process's zones: [`ZonePoolBuilder`], [`ZonePlan`], [`ZonePool`].

use std::io;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::handler::Handler;
use crate::listener::Listener;
use crate::run::{choose_engine, run_zone};
use crate::waker::Waker;
use crate::zone::{EngineKind, SqPoll, SqShare, ZoneConfig};

/// Which CPUs the zones run on, one zone per entry.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Placement {
    /// One zone per CPU the process may run on (its affinity mask).
    #[default]
    EveryCpu,
    /// This many zones over the allowed CPUs in order, wrapping around when there are more
    /// zones than CPUs.
    Zones(usize),
    /// One zone per listed CPU, in order.
    Cpus(Vec<usize>),
}

impl Placement {
    /// Explicit CPUs if given, else that many zones, else one per allowed CPU: what
    /// `[runtime] cpus` / `zones` and `ringx echo --cpus` / `--zones` say.
    pub fn new(cpus: Option<Vec<usize>>, zones: Option<usize>) -> Placement {
        match (cpus, zones) {
            (Some(c), _) => Placement::Cpus(c),
            (None, Some(n)) => Placement::Zones(n),
            (None, None) => Placement::EveryCpu,
        }
    }

    /// The CPU of each zone, given the CPUs the process may run on.
    fn resolve(&self, allowed: &[usize]) -> io::Result<Vec<usize>> {
        let cpus = match self {
            Placement::EveryCpu => allowed.to_vec(),
            Placement::Zones(n) => (0..*n).map(|i| allowed[i % allowed.len()]).collect(),
            Placement::Cpus(c) => c.clone(),
        };
        if cpus.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("zone placement {self:?}: no zones to start"),
            ));
        }
        Ok(cpus)
    }
}

/// Starting a process's zones: one place for what every server built on the engine does
/// before its zones run, in the manner of glommio's `LocalExecutorPoolBuilder`.
///
/// Two steps, because the caller has work of its own between them:
///
/// 1. [`ZonePoolBuilder::plan`] settles what does not depend on sockets: the engine (io_uring,
///    or epoll with one warning line when io_uring is refused), which CPU each zone runs on,
///    the control signals blocked in the calling thread (so that every thread started from
///    then on inherits the mask and only the caller's `sigwait` receives them), one SQPOLL
///    thread shared by all zones, and one [`Waker`] per zone, all created up front (a worker
///    pool or a control thread needs every zone's before any zone runs).
/// 2. The caller binds each zone's listeners (or inherits them across a binary upgrade) and
///    steers connections to zones by CPU, both of which need the plan's CPUs; then
///    [`ZonePlan::spawn`] starts one named thread per zone (`ringx-zone-N`) that pins itself,
///    builds its handler there (handlers may be `!Send`: the caller hands over a `Send`
///    closure that makes one), runs [`run_zone`] on its listeners, drops the handler and
///    reports how it ended.
///
/// [`ZonePool`] then wakes the zones and waits for them, with a timeout when the caller
/// drains against a deadline.
///
/// ```no_run
/// use ringx_engine::{bind_reuseport, ConnId, EngineKind, Handler, Io, ListenOptions,
///                    ListenerId, Placement, ZoneConfig, ZonePoolBuilder};
/// use std::time::Duration;
///
/// /// Echoes every byte back; exits when woken.
/// struct Echo;
/// impl Handler for Echo {
///     fn on_accept(&mut self, _: &mut Io, _: ConnId, _: ListenerId) {}
///     fn on_data(&mut self, io: &mut Io, c: ConnId, data: &[u8]) { io.write(c, data) }
///     fn on_eof(&mut self, io: &mut Io, c: ConnId) { io.close_after_flush(c) }
///     fn on_closed(&mut self, _: &mut Io, _: ConnId, _: Option<std::io::Error>) {}
///     fn on_timer(&mut self, _: &mut Io) -> Option<Duration> { None }
///     fn on_wake(&mut self, io: &mut Io) { io.exit() }
/// }
///
/// let signals = ringx_engine::sys::sigset(&[libc::SIGTERM, libc::SIGINT]);
/// let plan = ZonePoolBuilder::new(EngineKind::Uring)
///     .placement(Placement::Zones(2))
///     .config(ZoneConfig { max_conns: 4096, ..ZoneConfig::default() })
///     .block_signals(signals)
///     .plan()?;
/// let addr = "127.0.0.1:7000".parse().unwrap();
/// let mut listeners = Vec::new();
/// for _ in plan.cpus() {
///     listeners.push(vec![bind_reuseport(addr, &ListenOptions::default())?]);
/// }
/// let mut pool = plan.spawn(listeners, |_zone| || Echo)?;
/// let mut sig = 0;
/// // SAFETY: sigwait reads a live, initialised set and writes one c_int.
/// unsafe { libc::sigwait(&signals, &mut sig) };
/// pool.wake_all();
/// for exit in pool.join(Some(Duration::from_secs(5))) {
///     if let Err(e) = exit.result {
///         eprintln!("zone {}: {e}", exit.id);
///     }
/// }
/// # Ok::<(), std::io::Error>(())
/// ```
///
/// `ringx serve` uses it the same way, with more between the two steps:
///
/// ```ignore
/// let plan = ZonePoolBuilder::new(requested)            // [runtime] engine
///     .placement(Placement::new(cpus, zones))           // [runtime] cpus / zones
///     .config(ZoneConfig { max_conns, recv_buffers, recv_buffer_size, peer_addrs,
///                          busy_poll, max_outbound, batch_wait, batch_when_pending,
///                          ..ZoneConfig::default() })
///     .sqpoll(cfg.runtime.sqpoll.then(|| SqPoll { idle, cpu, share: None, spin }))
///     .block_signals(signal_set())                      // TERM INT QUIT HUP USR1 USR2
///     .plan()?;
/// // Bind every zone's listeners (inherited sockets after a binary upgrade), steer new
/// // connections to the zone on their CPU, open the admin listener and access log, attach
/// // XDP, drop privileges:
/// let per_zone: Vec<Vec<TcpListener>> = plan.cpus().iter().map(|_| bind_all(..)).collect();
/// let _steering = reuseport::steer_zones(plan.cpus(), &per_zone);
/// let mut ctls = Vec::new();
/// let mut pool = plan.spawn(per_zone, |z| {
///     // On this thread: what the zone needs from the control side.
///     let ctl = Arc::new(ZoneCtl::new());
///     ctls.push((ctl.clone(), z.waker.clone()));
///     let zops = ops.zone(&log, z.listeners, ev_tx.clone());
///     let (id, routes, settings, ev_tx, ups) =
///         (z.id, routes.clone(), settings.clone(), ev_tx.clone(), ups.clone());
///     let connector = active.connector(z.id, z.cpu, zops.counters.clone());
///     // On the zone's thread: the handler.
///     move || {
///         let mut h = HttpZone::new(id, routes, settings, ctl, ev_tx, ups, connector);
///         h.set_ops(zops);
///         h // dropped before the zone reports its exit: its last log lines go first
///     }
/// })?;
/// // A zone that stops on its own is a failure; a drain waits until a deadline.
/// if let Some(exit) = pool.wait_exit(Duration::ZERO) { /* report exit.id, exit.result */ }
/// let deadline = Instant::now() + drain_timeout;
/// while pool.running() > 0 {
///     let left = deadline.saturating_duration_since(Instant::now());
///     if left.is_zero() { break } // "drain timeout: exiting with N zones still busy"
///     if let Some(ZoneExit { id, result: Err(e) }) = pool.wait_exit(left.min(TICK)) {
///         tracing::error!("zone {id}: {e}");
///     }
///     // SIGQUIT between waits exits at once.
/// }
/// ```
pub struct ZonePoolBuilder {
    engine: EngineKind,
    placement: Placement,
    template: ZoneConfig,
    sqpoll: Option<SqPoll>,
    signals: Option<libc::sigset_t>,
}

impl ZonePoolBuilder {
    /// Zones on `engine` (io_uring falls back to epoll where it is refused), one per allowed
    /// CPU, with the default [`ZoneConfig`], no SQPOLL and no signals blocked.
    pub fn new(engine: EngineKind) -> ZonePoolBuilder {
        ZonePoolBuilder {
            engine,
            placement: Placement::EveryCpu,
            template: ZoneConfig::default(),
            sqpoll: None,
            signals: None,
        }
    }

    /// Where the zones run.
    pub fn placement(mut self, placement: Placement) -> Self {
        self.placement = placement;
        self
    }

    /// The configuration every zone starts from (connections, buffers, peer addresses,
    /// outbound slots, batching...). Its `id`, `cpu`, `engine` and `sqpoll` are set per zone
    /// by the pool.
    pub fn config(mut self, template: ZoneConfig) -> Self {
        self.template = template;
        self
    }

    /// Kernel submission polling (io_uring only; ignored, with a warning, on epoll). The zones
    /// share one SQ thread: `share` is replaced by one [`SqShare`] for all of them.
    pub fn sqpoll(mut self, sqpoll: Option<SqPoll>) -> Self {
        self.sqpoll = sqpoll;
        self
    }

    /// Signals to block in the calling thread when the plan is made, before any zone (or
    /// other thread the caller starts afterwards) exists, so that the threads inherit the mask
    /// and only the caller's `sigwait`/`sigtimedwait` on the same set receives them.
    pub fn block_signals(mut self, set: libc::sigset_t) -> Self {
        self.signals = Some(set);
        self
    }

    /// Chooses the engine (logging one warning line when io_uring is refused and epoll runs
    /// instead), places the zones, blocks the signals, and creates each zone's [`Waker`].
    /// Errors: an empty placement, a refused signal mask, an eventfd that cannot be created.
    pub fn plan(self) -> io::Result<ZonePlan> {
        let (engine, why) = choose_engine(self.engine);
        if let Some(why) = why {
            tracing::warn!("io_uring is unavailable ({why}); using the epoll driver");
        }
        let cpus = self.placement.resolve(&crate::sys::allowed_cpus())?;
        if let Some(set) = &self.signals {
            // SAFETY: pthread_sigmask reads one live, initialised sigset_t and writes no old
            // set (null); it changes only the calling thread's mask.
            let r = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, set, std::ptr::null_mut()) };
            if r != 0 {
                let e = io::Error::from_raw_os_error(r);
                return Err(io::Error::new(
                    e.kind(),
                    format!("block the control signals: {e}"),
                ));
            }
        }
        let sqpoll = self.sqpoll.map(|sq| SqPoll {
            share: Some(Arc::new(SqShare::default())),
            ..sq
        });
        if sqpoll.is_some() && engine != EngineKind::Uring {
            tracing::warn!("sqpoll applies to the io_uring engine only; ignored");
        }
        let wakers = cpus
            .iter()
            .enumerate()
            .map(|(id, _)| {
                Waker::new().map_err(|e| {
                    io::Error::new(e.kind(), format!("eventfd for zone {id}'s waker: {e}"))
                })
            })
            .collect::<io::Result<Vec<_>>>()?;
        Ok(ZonePlan {
            engine,
            cpus,
            wakers,
            template: self.template,
            sqpoll,
        })
    }
}

/// The zones as planned: their engine, CPUs and wakers, before any runs.
pub struct ZonePlan {
    engine: EngineKind,
    cpus: Vec<usize>,
    wakers: Vec<Waker>,
    template: ZoneConfig,
    sqpoll: Option<SqPoll>,
}

/// What [`ZonePlan::spawn`]'s closure is told about the zone it prepares.
pub struct ZoneStart<'a> {
    /// Zone number (0, 1, ...), the index of its listeners and waker.
    pub id: usize,
    /// The CPU it is pinned to.
    pub cpu: usize,
    /// Its listeners, as handed to `spawn`.
    pub listeners: &'a [Listener],
    /// Its waker (the same as `ZonePlan::wakers()[id]`).
    pub waker: &'a Waker,
}

impl ZonePlan {
    /// The engine the zones run on (after any fallback to epoll).
    pub fn engine(&self) -> EngineKind {
        self.engine
    }

    /// Each zone's CPU, by zone number.
    pub fn cpus(&self) -> &[usize] {
        &self.cpus
    }

    /// Each zone's waker, by zone number.
    pub fn wakers(&self) -> &[Waker] {
        &self.wakers
    }

    /// The configuration zone `id` runs with.
    pub fn config(&self, id: usize) -> ZoneConfig {
        ZoneConfig {
            id,
            cpu: Some(self.cpus[id]),
            engine: self.engine,
            sqpoll: self.sqpoll.clone(),
            ..self.template.clone()
        }
    }

    /// Starts the zones: for each, calls `prepare` on this thread with what the zone will
    /// have, and runs the closure it returns on the zone's own thread (`ringx-zone-N`, pinned
    /// to its CPU first) to build the handler there; then [`run_zone`] with `listeners[id]`
    /// until the handler exits. The handler is dropped before the zone reports its end.
    ///
    /// `listeners`: TCP listeners, UDP sockets, or [`Listener`]s mixing both.
    ///
    /// Errors when `listeners` does not hold one set per zone, or a thread cannot be started;
    /// zones started before that keep running (the caller is expected to exit).
    pub fn spawn<F, B, H, L>(self, listeners: Vec<Vec<L>>, mut prepare: F) -> io::Result<ZonePool>
    where
        F: FnMut(ZoneStart<'_>) -> B,
        B: FnOnce() -> H + Send + 'static,
        H: Handler,
        L: Into<Listener>,
    {
        let listeners: Vec<Vec<Listener>> = listeners
            .into_iter()
            .map(|z| z.into_iter().map(Into::into).collect())
            .collect();
        if listeners.len() != self.cpus.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{} sets of listeners for {} zones",
                    listeners.len(),
                    self.cpus.len()
                ),
            ));
        }
        let (tx, exits) = mpsc::channel();
        let mut threads = Vec::with_capacity(self.cpus.len());
        for (id, ls) in listeners.into_iter().enumerate() {
            let build = prepare(ZoneStart {
                id,
                cpu: self.cpus[id],
                listeners: &ls,
                waker: &self.wakers[id],
            });
            let (cfg, waker, tx) = (self.config(id), self.wakers[id].clone(), tx.clone());
            let cpu = self.cpus[id];
            let t = std::thread::Builder::new()
                .name(format!("ringx-zone-{id}"))
                .spawn(move || {
                    let r = catch_unwind(AssertUnwindSafe(move || {
                        // Pinned before the handler is built, so its memory is first
                        // touched on the zone's CPU (`run_zone` pins again: a no-op).
                        crate::sys::pin_to_cpu(cpu)?;
                        let mut h = build();
                        let r = run_zone(&cfg, ls, waker, &mut h);
                        drop(h); // its drop may hand over last work (a server's log lines)
                        r
                    }));
                    let result = r.unwrap_or_else(|p| {
                        Err(io::Error::other(format!("panicked: {}", panic_text(&*p))))
                    });
                    let _ = tx.send(ZoneExit { id, result });
                })
                .map_err(|e| io::Error::new(e.kind(), format!("start zone {id}: {e}")))?;
            threads.push(Some(t));
        }
        Ok(ZonePool {
            engine: self.engine,
            cpus: self.cpus,
            wakers: self.wakers,
            running: threads.len(),
            threads,
            exits,
        })
    }
}

/// How one zone ended.
#[derive(Debug)]
pub struct ZoneExit {
    /// Zone number.
    pub id: usize,
    /// `Ok` when its handler exited; the error that stopped it otherwise (a failed set-up, a
    /// failed wait, a panic).
    pub result: io::Result<()>,
}

/// Running zones. Dropping it does not stop them: wake them with something that makes their
/// handlers exit, then [`join`](Self::join).
pub struct ZonePool {
    engine: EngineKind,
    cpus: Vec<usize>,
    wakers: Vec<Waker>,
    threads: Vec<Option<JoinHandle<()>>>,
    exits: mpsc::Receiver<ZoneExit>,
    running: usize,
}

impl ZonePool {
    /// The engine the zones run on.
    pub fn engine(&self) -> EngineKind {
        self.engine
    }

    /// Each zone's CPU, by zone number.
    pub fn cpus(&self) -> &[usize] {
        &self.cpus
    }

    /// Each zone's waker, by zone number.
    pub fn wakers(&self) -> &[Waker] {
        &self.wakers
    }

    /// Zones that have not ended (or whose end has not been collected yet).
    pub fn running(&self) -> usize {
        self.running
    }

    /// Wakes every zone ([`Waker::wake`]).
    pub fn wake_all(&self) {
        for w in &self.wakers {
            w.wake();
        }
    }

    /// The next zone to end, waiting at most `timeout` (zero: only one that has ended
    /// already); `None` if none ended in that time or none is running. Its thread is joined.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ZoneExit> {
        if self.running == 0 {
            return None;
        }
        let r = if timeout.is_zero() {
            self.exits
                .try_recv()
                .map_err(|e| e == mpsc::TryRecvError::Disconnected)
        } else {
            self.exits
                .recv_timeout(timeout)
                .map_err(|e| e == mpsc::RecvTimeoutError::Disconnected)
        };
        let exit = match r {
            Ok(exit) => exit,
            Err(gone) => {
                if gone {
                    // Every zone thread is gone without a word (the process is aborting).
                    self.running = 0;
                }
                return None;
            }
        };
        self.running -= 1;
        if let Some(t) = self.threads.get_mut(exit.id).and_then(Option::take) {
            // The thread has sent its last word; a panic was caught and reported in `exit`.
            let _ = t.join();
        }
        Some(exit)
    }

    /// Waits for the zones still running, for at most `timeout` in all (`None`: as long as it
    /// takes), and returns how each ended, in the order they did. Fewer than were running if
    /// the time ran out: [`running`](Self::running) says how many are left.
    pub fn join(&mut self, timeout: Option<Duration>) -> Vec<ZoneExit> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut done = Vec::with_capacity(self.running);
        while self.running > 0 {
            let left = match deadline {
                Some(d) => d.saturating_duration_since(Instant::now()),
                None => Duration::MAX,
            };
            if left.is_zero() && deadline.is_some() {
                break;
            }
            match self.wait_exit(left) {
                Some(e) => done.push(e),
                None if deadline.is_some() => break,
                None => {}
            }
        }
        done
    }
}

/// A panic's message, when it has one.
fn panic_text(p: &(dyn std::any::Any + Send)) -> &str {
    p.downcast_ref::<&str>()
        .copied()
        .or_else(|| p.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}
