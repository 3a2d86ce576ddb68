//! The narrow interface both back ends implement, and the loop that drives it.

use std::io;
use std::time::{Duration, Instant};

use crate::handler::Handler;
use crate::io::{Io, ListenerId};
use crate::listener::Listener;

/// A zone's I/O back end: io_uring ([`crate::uring::UringDriver`]) or epoll
/// ([`crate::epoll::EpollDriver`]).
pub trait Driver {
    /// Starts accepting on `listener` (already bound and listening, non-blocking), or
    /// receiving datagrams on it (a UDP socket).
    fn add_listener(&mut self, listener: Listener) -> io::Result<ListenerId>;

    /// Carries out what the handler queued, waits for events (at most `timeout`), and
    /// dispatches them to `handler`.
    fn poll<H: Handler>(&mut self, handler: &mut H, timeout: Option<Duration>) -> io::Result<()>;

    /// The handler-facing state.
    fn io(&mut self) -> &mut Io;

    /// "uring" or "epoll", for logs and metrics.
    fn name(&self) -> &'static str;

    /// Waits entered by this driver so far (io_uring_enter or epoll_wait calls).
    fn waits(&self) -> u64;

    /// Before [`run`] returns: stops accepting and waits, at most `limit`, until no accept
    /// of this back end is pending in the kernel (dispatching what completes meanwhile to
    /// `handler`). A listening socket outlives the zone when a binary upgrade handed it to
    /// another process; an accept left pending would be torn down with the ring after the
    /// thread is gone, and until then its waiter on the socket takes wake-ups meant for the
    /// new process's accept. Nothing to do where closing removes the waiter at once (epoll).
    fn quiesce<H: Handler>(&mut self, _handler: &mut H, _limit: Duration) -> io::Result<()> {
        Ok(())
    }
}

/// How long [`run`] waits for the kernel to give back the accepts of an exiting zone.
const QUIESCE_LIMIT: Duration = Duration::from_secs(1);

/// When the handler's [`Handler::on_timer`] is due next: the interval it last returned, or
/// an earlier [`Io::timer_at`] request. One implementation for [`run`] and the test driver
/// ([`crate::testio`]), so the two cannot disagree about when timers fire.
pub(crate) struct TimerDue {
    next: Option<Instant>,
}

impl TimerDue {
    /// Nothing due until `at` (`None`: until a [`Io::timer_at`] request).
    pub(crate) fn new(at: Option<Instant>) -> Self {
        TimerDue { next: at }
    }

    /// Calls `on_timer` if it is due at `io.now`, then takes in the handler's `timer_at`
    /// request, if any.
    #[inline]
    pub(crate) fn tick<H: Handler>(&mut self, io: &mut Io, handler: &mut H) {
        let now = io.now;
        if self.next.is_some_and(|t| t <= now) {
            // Until `on_timer` returns, the next turn is not planned: every `timer_at`
            // request made meanwhile counts.
            io.timer_next = None;
            self.next = handler.on_timer(io).map(|d| now + d);
        }
        self.merge(io);
    }

    /// Takes in the handler's `timer_at` request, if any.
    #[inline]
    pub(crate) fn merge(&mut self, io: &mut Io) {
        if let Some(t) = io.timer_at.take() {
            self.next = Some(self.next.map_or(t, |n| n.min(t)));
        }
        io.timer_next = self.next;
    }

    /// When `on_timer` is due next.
    #[inline]
    pub(crate) fn next(&self) -> Option<Instant> {
        self.next
    }
}

/// Runs `handler` on `driver` until the handler calls [`Io::exit`].
pub fn run<D: Driver, H: Handler>(driver: &mut D, handler: &mut H) -> io::Result<()> {
    let mut timer = TimerDue::new(Some(Instant::now()));
    driver.io().now = Instant::now();
    loop {
        // `poll` reads the clock once after each wait; that reading serves the whole iteration.
        let now = driver.io().now;
        timer.tick(driver.io(), handler);
        if driver.io().exit {
            return driver.quiesce(handler, QUIESCE_LIMIT);
        }
        let timeout = timer.next().map(|t| t.saturating_duration_since(now));
        driver.poll(handler, timeout)?;
        if driver.io().exit {
            return driver.quiesce(handler, QUIESCE_LIMIT);
        }
    }
}
