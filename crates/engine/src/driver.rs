//! The narrow interface both back ends implement, and the loop that drives it.

use std::io;
use std::net::TcpListener;
use std::time::{Duration, Instant};

use crate::handler::Handler;
use crate::io::{Io, ListenerId};

/// A zone's I/O back end: io_uring ([`crate::uring::UringDriver`]) or epoll
/// ([`crate::epoll::EpollDriver`]).
pub trait Driver {
    /// Starts accepting on `listener` (already bound and listening, non-blocking).
    fn add_listener(&mut self, listener: TcpListener) -> io::Result<ListenerId>;

    /// Carries out what the handler queued, waits for events (at most `timeout`), and
    /// dispatches them to `handler`.
    fn poll<H: Handler>(&mut self, handler: &mut H, timeout: Option<Duration>) -> io::Result<()>;

    /// The handler-facing state.
    fn io(&mut self) -> &mut Io;

    /// "uring" or "epoll", for logs and metrics.
    fn name(&self) -> &'static str;

    /// Waits entered by this driver so far (io_uring_enter or epoll_wait calls).
    fn waits(&self) -> u64;
}

/// Runs `handler` on `driver` until the handler calls [`Io::exit`].
pub fn run<D: Driver, H: Handler>(driver: &mut D, handler: &mut H) -> io::Result<()> {
    let mut next_timer = Some(Instant::now());
    driver.io().now = Instant::now();
    loop {
        // `poll` reads the clock once after each wait; that reading serves the whole iteration.
        let now = driver.io().now;
        if next_timer.is_some_and(|t| t <= now) {
            next_timer = handler.on_timer(driver.io()).map(|d| now + d);
        }
        if let Some(t) = driver.io().timer_at.take() {
            next_timer = Some(next_timer.map_or(t, |n| n.min(t)));
        }
        if driver.io().exit {
            return Ok(());
        }
        let timeout = next_timer.map(|t| t.saturating_duration_since(now));
        driver.poll(handler, timeout)?;
        if driver.io().exit {
            return Ok(());
        }
    }
}
