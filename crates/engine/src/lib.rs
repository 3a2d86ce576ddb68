//! # ringx-engine: thread-per-core zones over io_uring or epoll
//!
//! A **zone** is one thread pinned to one CPU with everything it needs to serve its
//! connections and nothing shared with other zones: its own ring (or epoll set), receive
//! buffers, connection table and timers, and its own `SO_REUSEPORT` listening sockets, so the
//! kernel spreads new connections over zones and a connection never leaves the zone that
//! accepted it.
//!
//! A protocol plugs in by implementing [`Handler`]; the zone's [`Driver`] calls it with
//! accepted connections and received bytes (borrowed straight from the receive buffers), and
//! the handler answers by queueing output on [`Io`]. Both drivers offer the same contract:
//!
//! * [`uring::UringDriver`] (default): multishot accept into direct descriptors, multishot
//!   receive into a provided-buffer ring, sends resumed after short writes, files read from
//!   the page cache behind the response head or (large ones) sent with `sendfile`, spliced
//!   where not cached, everything submitted in one `io_uring_enter` per loop iteration.
//! * [`epoll::EpollDriver`]: readiness-based fallback, chosen when [`uring::probe::check`]
//!   says io_uring is refused.
//!
//! ```no_run
//! use ringx_engine::{bind_reuseport, run_zone, ConnId, EngineKind, Handler, Io, ListenOptions,
//!                    ListenerId, Waker, ZoneConfig};
//! use std::time::Duration;
//!
//! /// Echoes every byte back.
//! struct Echo;
//! impl Handler for Echo {
//!     fn on_accept(&mut self, _: &mut Io, _: ConnId, _: ListenerId) {}
//!     fn on_data(&mut self, io: &mut Io, c: ConnId, data: &[u8]) { io.write(c, data) }
//!     fn on_eof(&mut self, io: &mut Io, c: ConnId) { io.close_after_flush(c) }
//!     fn on_closed(&mut self, _: &mut Io, _: ConnId, _: Option<std::io::Error>) {}
//!     fn on_timer(&mut self, _: &mut Io) -> Option<Duration> { None }
//!     fn on_wake(&mut self, io: &mut Io) { io.exit() }
//! }
//!
//! let listener = bind_reuseport("127.0.0.1:7000".parse().unwrap(), &ListenOptions::default()).unwrap();
//! let cfg = ZoneConfig { engine: EngineKind::Uring, ..ZoneConfig::default() };
//! run_zone(&cfg, vec![listener], Waker::new().unwrap(), &mut Echo).unwrap();
//! ```
//!
//! A process with several zones starts them with [`ZonePoolBuilder`]: engine choice, CPU
//! placement, signal mask, shared SQPOLL thread, wakers, and one pinned thread per zone
//! (its docs show the whole sequence).
//!
//! The drivers share one neutral layer ([`Io`], [`Handler`], [`Waker`], the timer schedule
//! of [`driver::run`]) that imports neither of them; what only one driver needs per
//! connection stays in that driver.
//!
//! ## Testing a handler without sockets
//!
//! [`testio::TestDriver`] is a driver with no kernel under it: it owns a real [`Io`], so the
//! handler runs through the same API as on a zone, while the test scripts what the kernel
//! would report (accepts, bytes, FINs, resets, connects, the clock) and reads back what the
//! peers received. Each call carries out what the handler queued before it returns.
//!
//! ```
//! use ringx_engine::testio::TestDriver;
//! use ringx_engine::{ConnId, Handler, Io, ListenerId};
//! use std::time::Duration;
//!
//! /// Echoes every byte back; closes idle connections after a second.
//! #[derive(Default)]
//! struct Echo { idle: Vec<ConnId> }
//! impl Handler for Echo {
//!     fn on_accept(&mut self, _: &mut Io, c: ConnId, _: ListenerId) { self.idle.push(c) }
//!     fn on_data(&mut self, io: &mut Io, c: ConnId, data: &[u8]) {
//!         self.idle.retain(|&x| x != c);
//!         io.write(c, data)
//!     }
//!     fn on_eof(&mut self, io: &mut Io, c: ConnId) { io.close_after_flush(c) }
//!     fn on_closed(&mut self, _: &mut Io, _: ConnId, _: Option<std::io::Error>) {}
//!     fn on_timer(&mut self, io: &mut Io) -> Option<Duration> {
//!         for c in self.idle.drain(..) { io.close(c) }
//!         Some(Duration::from_secs(1))
//!     }
//!     fn on_wake(&mut self, io: &mut Io) { io.exit() }
//! }
//!
//! let (mut d, mut h) = (TestDriver::new(), Echo::default());
//! d.start(&mut h); // the first on_timer, as a zone makes it
//! let a = d.accept(&mut h, ListenerId(0), None);
//! let b = d.accept(&mut h, ListenerId(0), None);
//! d.set_window(a, Some(3)); // the peer reads three bytes, then stops
//! d.recv(&mut h, a, b"hello");
//! assert_eq!(d.take_output(a), b"hel");
//! assert_eq!(d.io().pending(a), 2);
//! d.advance(&mut h, Duration::from_secs(1)); // b never sent anything
//! assert!(d.closed(b) && d.is_open(a));
//! d.set_window(a, None);
//! d.eof(&mut h, a); // the FIN: the rest goes out, then the close
//! assert_eq!(d.take_output(a), b"lo");
//! assert!(d.closed(a));
//! ```

mod addr;
mod connect;
pub mod driver;
pub mod epoll;
pub mod framing;
mod handler;
mod io;
mod listen;
pub mod locality;
mod pool;
mod prefetch;
mod slot;
pub mod sys;
pub mod testio;
pub mod timer;
pub mod uring;
mod waker;

pub use connect::ConnectTo;
pub use driver::Driver;
pub use handler::Handler;
pub use io::{ConnId, Io, ListenerId};
pub use listen::{bind_reuseport, ensure_unclaimed, ListenOptions};
pub use pool::{Placement, ZoneExit, ZonePlan, ZonePool, ZonePoolBuilder, ZoneStart};
pub use prefetch::prefetch;
pub use timer::TimerWheel;
pub use waker::{WaitStats, Waker};

use std::net::TcpListener;

/// Which back end a zone runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EngineKind {
    /// io_uring (Linux 6.0 or later for everything the driver uses).
    Uring,
    /// epoll, the portable fallback.
    Epoll,
}

impl EngineKind {
    /// "uring" or "epoll".
    pub fn as_str(self) -> &'static str {
        match self {
            EngineKind::Uring => "uring",
            EngineKind::Epoll => "epoll",
        }
    }
}

/// The settings of one zone.
#[derive(Clone, Debug)]
pub struct ZoneConfig {
    /// Zone number, for logs.
    pub id: usize,
    /// CPU to pin the zone's thread to.
    pub cpu: Option<usize>,
    /// Back end.
    pub engine: EngineKind,
    /// Connections this zone can hold (direct-descriptor slots on io_uring).
    pub max_conns: u32,
    /// Receive buffers in the provided-buffer ring (a power of two). The pool is the zone's
    /// whole receive memory, shared by its connections: on Linux 6.12+ receives fill each
    /// buffer incrementally (many small messages share one buffer), and on 6.17+ a paused
    /// connection receives at most 256 KiB more before its receive stops.
    pub recv_buffers: u16,
    /// Size of each receive buffer.
    pub recv_buffer_size: u32,
    /// Submission queue entries.
    pub ring_entries: u32,
    /// Kernel submission polling (io_uring only): a kernel thread picks up submissions, so a
    /// busy zone submits and reaps without system calls.
    pub sqpoll: Option<SqPoll>,
    /// Learn each accepted connection's peer address before `on_accept` ([`Io::peer_addr`]).
    /// Free on epoll (accept4 returns it); on io_uring it costs one `SO_PEERNAME` socket
    /// command per connection (Linux 6.7), so it is off unless something needs the address.
    pub peer_addrs: bool,
    /// How long an idle zone keeps polling for completions before it parks (blocks in
    /// `io_uring_enter` / `epoll_wait`). Zero: park at once; `Duration::MAX`: never park
    /// (pure busy polling, for measurements). See [`Waker`].
    pub busy_poll: std::time::Duration,
    /// Outbound connections ([`Io::connect`]) this zone can hold at once; on io_uring they
    /// take direct-descriptor slots beside the accepted ones. 0: the zone does not connect.
    pub max_outbound: u32,
    /// Adaptive completion batching (io_uring, Linux 6.12): near saturation — the last wait
    /// brought 4 or more receives with data and the kernel already holds more completions, or
    /// the zone was busy at least 80% of its last measuring window (its thread's CPU time
    /// over 2 ms of wall time; busy-poll spinning counts as idle) and the last wait brought
    /// more than two — the next wait asks for as many completions as the last one brought (at
    /// least 8, at most 64), waiting at most this long for them before taking whatever came.
    /// Fewer `io_uring_enter` calls and wake-ups under load; a lightly loaded zone never
    /// waits. After a batch that does not fill, the gate stays shut for 1, 2, 4 ... 64 waits;
    /// a wait never asks for more than half the connections with a receive armed.
    /// Zero: off.
    pub batch_wait: std::time::Duration,
    /// With [`batch_wait`](Self::batch_wait): also wait for a batch when the kernel already
    /// holds completions (the first condition above). That is what takes a closed-loop echo
    /// to one `io_uring_enter` per twenty messages, but a zone that always has work waiting
    /// (many connections) then sleeps for batches it would not have slept for, and on a VM a
    /// sleep and its timer cost more CPU than the calls saved. It pays off for few connections
    /// that each wait for their answer (closed-loop echo); the measurements are in
    /// bench/NOTEBOOK.md. Off: a wait for a batch
    /// only replaces a sleep the zone takes anyway (nothing pending), so it wakes once for
    /// several completions instead of once for each.
    pub batch_when_pending: bool,
}

/// `IORING_SETUP_SQPOLL` settings.
///
/// With the SQ thread on a core of its own and a `spin` longer than the gaps in the load, a
/// busy zone makes no system call: accepts, receives, sends and closes all go through the
/// ring. The allocator can still make some as connections come and go (heap trimming and
/// regrowth); call [`sys::keep_heap`] at start-up to stop that, as `ringx` does.
#[derive(Clone, Debug)]
pub struct SqPoll {
    /// How long the kernel's SQ thread polls before it sleeps (and the next submission needs
    /// a wake-up call).
    pub idle: std::time::Duration,
    /// Pin the SQ thread to this CPU.
    pub cpu: Option<u32>,
    /// Share one SQ thread between the zones that hold the same `SqShare`
    /// (`IORING_SETUP_ATTACH_WQ`).
    pub share: Option<std::sync::Arc<SqShare>>,
    /// How long a zone spins on its completion queue before it sleeps in io_uring_enter.
    pub spin: std::time::Duration,
}

/// The ring whose SQ thread the other zones attach to.
#[derive(Debug, Default)]
pub struct SqShare {
    pub(crate) first: std::sync::Mutex<Option<std::os::fd::RawFd>>,
}

impl Default for ZoneConfig {
    fn default() -> Self {
        ZoneConfig {
            id: 0,
            cpu: None,
            engine: EngineKind::Uring,
            max_conns: 16384,
            recv_buffers: 1024,
            recv_buffer_size: 16384,
            ring_entries: 1024,
            sqpoll: None,
            peer_addrs: false,
            busy_poll: std::time::Duration::ZERO,
            max_outbound: 0,
            batch_wait: std::time::Duration::ZERO,
            batch_when_pending: false,
        }
    }
}

/// Picks the engine: `requested` if it can run here, else epoll and the reason why not.
pub fn choose_engine(requested: EngineKind) -> (EngineKind, Option<String>) {
    match requested {
        EngineKind::Epoll => (EngineKind::Epoll, None),
        EngineKind::Uring => match uring::probe::check() {
            Ok(()) => (EngineKind::Uring, None),
            Err(why) => (EngineKind::Epoll, Some(why)),
        },
    }
}

/// Runs one zone on the calling thread until the handler calls [`Io::exit`]: pins the
/// thread, builds the driver, registers `listeners`, and loops.
pub fn run_zone<H: Handler>(
    cfg: &ZoneConfig,
    listeners: Vec<TcpListener>,
    waker: Waker,
    handler: &mut H,
) -> std::io::Result<()> {
    if let Some(cpu) = cfg.cpu {
        sys::pin_to_cpu(cpu)?;
    }
    match cfg.engine {
        EngineKind::Uring => {
            let mut d = uring::UringDriver::new(cfg, waker)?;
            for l in listeners {
                d.add_listener(l)?;
            }
            driver::run(&mut d, handler)
        }
        EngineKind::Epoll => {
            let mut d = epoll::EpollDriver::new(cfg, waker)?;
            for l in listeners {
                d.add_listener(l)?;
            }
            driver::run(&mut d, handler)
        }
    }
}
