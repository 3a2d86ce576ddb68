//! Parking a zone and waking it from another thread (the control thread): the unified
//! blocking wait of seed 000 §4.3.
//!
//! A zone that has nothing to do blocks in `io_uring_enter` (or `epoll_wait`) and gives the
//! CPU back. Before it blocks it publishes `parked`; a control thread that has a message for
//! it sets the user-space flag `pending` (seed 000's flag *U*) and sends a wake-up **only if
//! the zone is parked**: the wake-up its driver registered ([`DirectWake`]; io_uring posts an
//! `IORING_OP_MSG_RING` completion into the zone's ring from a small sender ring), or else an
//! eventfd write (epoll, or a kernel that refuses MSG_RING). A running zone checks `pending`
//! with one atomic load per loop iteration and never makes a system call to look for control
//! messages.
//!
//! The handshake is the store-load pattern of Dekker's algorithm, with sequentially
//! consistent operations on both sides:
//!
//! ```text
//! zone:        parked = true;  if !pending { block }      parked = false
//! controller:  pending = true; if parked  { wake-up }
//! ```
//!
//! At least one side sees the other's store, so a message is never left waiting behind a
//! blocked zone; a wake-up that arrives when the zone did not block after all is one spare
//! completion, ignored.
//!
//! The same shared block carries the zone's wait statistics (waits, time parked, bytes),
//! written only by the zone and read by anyone, each side's fields on its own cache line.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Fields the control side writes.
#[repr(align(64))]
#[derive(Default)]
struct ControlLine {
    /// A control message is waiting (seed 000's flag *U*).
    pending: AtomicBool,
    /// Wake-ups sent by the driver's own way ([`DirectWake`]: MSG_RING on io_uring).
    sent_msg_ring: AtomicU64,
    /// Wake-ups sent as eventfd writes.
    sent_eventfd: AtomicU64,
    /// `wake` calls that found the zone running (no system call).
    sent_none: AtomicU64,
}

/// Fields only the zone writes (Relaxed load + store: no locked instruction).
#[repr(align(64))]
#[derive(Default)]
struct ZoneLine {
    parked: AtomicBool,
    /// When the current park began, in nanoseconds since [`epoch`].
    park_start: AtomicU64,
    waits: AtomicU64,
    parks: AtomicU64,
    parked_ns: AtomicU64,
    wakes: AtomicU64,
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
    accepts: AtomicU64,
    /// The zone holds `max_conns` connections: new ones wait in its listen queue.
    full: AtomicBool,
}

struct Shared {
    ctl: ControlLine,
    zone: ZoneLine,
    /// An eventfd the zone's driver keeps a read armed on (io_uring) or registered (epoll).
    fd: OwnedFd,
    /// The driver's own wake-up, tried before the eventfd; set by a driver that has one,
    /// cleared when it is dropped (it may hold the driver's resources: io_uring's holds a
    /// duplicate of the ring descriptor, which keeps the ring and its connections alive).
    direct: Mutex<Option<Box<dyn DirectWake>>>,
}

/// A driver's own way to end its zone's blocking wait from another thread, used instead of
/// the eventfd write when it works (io_uring: a completion posted into the zone's ring with
/// `IORING_OP_MSG_RING`, `uring/msg.rs`: no eventfd read to re-arm on the zone's side).
pub(crate) trait DirectWake: Send {
    /// Ends the zone's wait; an error makes the waker fall back to the eventfd.
    fn wake(&self) -> io::Result<()>;

    /// What the wake-up is, for logs ("MSG_RING").
    fn name(&self) -> &'static str;
}

/// A zone's wake-up handle and statistics. Cloneable and `Send`: the control thread keeps
/// one per zone.
#[derive(Clone)]
pub struct Waker {
    s: Arc<Shared>,
}

/// A snapshot of a zone's wait statistics ([`Waker::stats`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct WaitStats {
    /// `io_uring_enter` / `epoll_wait` calls made by the zone's loop.
    pub waits: u64,
    /// Waits that published `parked` (could block).
    pub parks: u64,
    /// Nanoseconds spent in those waits.
    pub parked_ns: u64,
    /// The zone is parked now.
    pub parked: bool,
    /// Control messages the zone picked up (`on_wake` calls).
    pub wakes: u64,
    /// Bytes received and sent on the zone's connections.
    pub bytes_in: u64,
    pub bytes_out: u64,
    /// Connections accepted.
    pub accepts: u64,
    /// Wake-ups sent by the driver's own way (MSG_RING on io_uring), by eventfd, and wakes
    /// that needed none (zone running).
    pub sent_msg_ring: u64,
    pub sent_eventfd: u64,
    pub sent_none: u64,
}

/// The reference point of `park_start`.
fn epoch() -> std::time::Instant {
    static EPOCH: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    *EPOCH.get_or_init(std::time::Instant::now)
}

/// Adds to a counter only one thread writes: a plain load and store, no locked instruction.
#[inline]
pub(crate) fn bump(a: &AtomicU64, n: u64) {
    a.store(a.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
}

impl Waker {
    /// A new, unsignalled waker.
    pub fn new() -> io::Result<Self> {
        epoch();
        // SAFETY: eventfd has no memory arguments; a non-negative result is a new descriptor
        // that nothing else owns, so OwnedFd may take it.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: see above: `fd` is a fresh descriptor owned by no one else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Waker {
            s: Arc::new(Shared {
                ctl: ControlLine::default(),
                zone: ZoneLine::default(),
                fd,
                direct: Mutex::new(None),
            }),
        })
    }

    /// Tells the zone a control message is waiting; wakes it only if it is parked. Several
    /// wakes before the zone runs coalesce into one `on_wake`.
    pub fn wake(&self) {
        self.s.ctl.pending.store(true, Ordering::SeqCst);
        if !self.s.zone.parked.load(Ordering::SeqCst) {
            self.s.ctl.sent_none.fetch_add(1, Ordering::Relaxed);
            return;
        }
        // Held while the wake-up is sent: the driver's `clear_direct` waits for it, so what
        // the wake-up uses (io_uring: its ring descriptor) stays valid until it returns.
        let direct = self.s.direct.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(d) = direct.as_ref() {
            match d.wake() {
                Ok(()) => {
                    self.s.ctl.sent_msg_ring.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                Err(e) => tracing::debug!("{} wake-up failed ({e}); using the eventfd", d.name()),
            }
        }
        drop(direct);
        self.s.ctl.sent_eventfd.fetch_add(1, Ordering::Relaxed);
        self.signal_eventfd();
    }

    fn signal_eventfd(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to an eventfd we own; a failure (EAGAIN when
        // the counter is saturated) still leaves the zone woken, so it is ignored.
        unsafe {
            libc::write(self.s.fd.as_raw_fd(), (&one as *const u64).cast(), 8);
        }
    }

    /// The zone's wait statistics now.
    pub fn stats(&self) -> WaitStats {
        let z = &self.s.zone;
        let c = &self.s.ctl;
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let parked = z.parked.load(Ordering::Relaxed);
        // The park in progress counts too (an idle zone may have been parked for hours).
        let current = if parked {
            (epoch().elapsed().as_nanos() as u64).saturating_sub(r(&z.park_start))
        } else {
            0
        };
        WaitStats {
            waits: r(&z.waits),
            parks: r(&z.parks),
            parked_ns: r(&z.parked_ns) + current,
            parked,
            wakes: r(&z.wakes),
            bytes_in: r(&z.bytes_in),
            bytes_out: r(&z.bytes_out),
            accepts: r(&z.accepts),
            sent_msg_ring: r(&c.sent_msg_ring),
            sent_eventfd: r(&c.sent_eventfd),
            sent_none: r(&c.sent_none),
        }
    }

    pub(crate) fn raw(&self) -> RawFd {
        self.s.fd.as_raw_fd()
    }

    /// Lets the controller wake this zone the driver's own way (kept until
    /// [`Waker::clear_direct`]).
    pub(crate) fn set_direct(&self, wake: Box<dyn DirectWake>) {
        *self.s.direct.lock().unwrap_or_else(|e| e.into_inner()) = Some(wake);
    }

    /// Drops the driver's wake-up (its driver is going away); wakes from then on use the
    /// eventfd. Waits for a wake-up being sent to finish.
    pub(crate) fn clear_direct(&self) {
        let old = self
            .s
            .direct
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        drop(old);
    }

    /// Zone side, before a wait that may block: publishes `parked` and returns whether a
    /// control message is already pending (then the wait must not block), and when the park
    /// began (for [`Waker::park_end`]).
    #[inline]
    pub(crate) fn park_begin(&self) -> (bool, std::time::Instant) {
        let now = std::time::Instant::now();
        let z = &self.s.zone;
        z.park_start.store(
            now.saturating_duration_since(epoch()).as_nanos() as u64,
            Ordering::Relaxed,
        );
        z.parked.store(true, Ordering::SeqCst);
        (self.s.ctl.pending.load(Ordering::SeqCst), now)
    }

    /// Zone side, after the wait that began at `start`.
    #[inline]
    pub(crate) fn park_end(&self, start: std::time::Instant) {
        let z = &self.s.zone;
        z.parked.store(false, Ordering::Relaxed);
        bump(&z.parks, 1);
        bump(&z.parked_ns, start.elapsed().as_nanos() as u64);
    }

    /// Zone side, once per loop iteration: one atomic load while nothing is pending.
    #[inline]
    pub(crate) fn take_pending(&self) -> bool {
        let p = &self.s.ctl.pending;
        if p.load(Ordering::Relaxed) && p.swap(false, Ordering::Acquire) {
            bump(&self.s.zone.wakes, 1);
            return true;
        }
        false
    }

    /// Zone side: a control message is pending (for busy polling).
    #[inline]
    pub(crate) fn is_pending(&self) -> bool {
        self.s.ctl.pending.load(Ordering::Relaxed)
    }

    #[inline]
    pub(crate) fn set_waits(&self, waits: u64) {
        self.s.zone.waits.store(waits, Ordering::Relaxed);
    }

    #[inline]
    pub(crate) fn add_in(&self, n: u64) {
        bump(&self.s.zone.bytes_in, n);
    }

    #[inline]
    pub(crate) fn add_out(&self, n: u64) {
        bump(&self.s.zone.bytes_out, n);
    }

    #[inline]
    pub(crate) fn add_accept(&self) {
        bump(&self.s.zone.accepts, 1);
    }

    /// The driver reached (`true`) or left (`false`) its connection limit.
    pub(crate) fn set_full(&self, full: bool) {
        self.s.zone.full.store(full, Ordering::Relaxed);
    }

    /// Whether the zone holds `max_conns` connections now (a control thread may then steer
    /// its CPU's new connections to another zone).
    pub fn is_full(&self) -> bool {
        self.s.zone.full.load(Ordering::Relaxed)
    }
}
