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
mod cmsg;
mod conn_io;
mod connect;
mod dgram;
pub mod driver;
pub mod epoll;
pub mod framing;
mod handler;
mod io;
mod listen;
mod listener;
pub mod locality;
mod own_sockets;
mod pool;
mod prefetch;
mod run;
mod send_to;
mod slot;
pub mod sys;
pub mod testio;
pub mod timer;
mod tls_record;
pub mod uring;
mod waker;
mod zone;

pub use connect::ConnectTo;
pub use dgram::{Datagram, SendTo};
pub use driver::Driver;
pub use handler::Handler;
pub use io::{ConnId, DgramStats, Io, ListenerId};
pub use listen::{
    await_unclaimed, await_unclaimed_udp, bind_reuseport, bind_udp_reuseport, ensure_unclaimed,
    ensure_unclaimed_udp, ListenOptions, RELEASE_WAIT,
};
pub use listener::Listener;
pub use pool::{Placement, ZoneExit, ZonePlan, ZonePool, ZonePoolBuilder, ZoneStart};
pub use prefetch::prefetch;
pub use run::{choose_engine, run_zone};
pub use timer::TimerWheel;
pub use waker::{WaitStats, Waker};
pub use zone::{EngineKind, SqPoll, SqShare, ZoneConfig};
