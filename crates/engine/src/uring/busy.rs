//! How busy a zone has been lately: the share of wall time its thread spent on the CPU (not
//! counting busy-poll spinning), over windows of two milliseconds. Adaptive completion
//! batching reads it: a zone that is busy most of the time is close to saturation, where
//! waiting up to `batch_wait_us` for a fuller batch costs little next to the queueing it
//! already has and saves a wake-up and a system call per batch. A lightly loaded zone never
//! waits for a batch.

use std::time::{Duration, Instant};

/// Length of one measuring window. Closing a window costs one system call (the thread's CPU
/// clock), so the window is long enough for that to stay out of the syscall count.
const WINDOW: Duration = Duration::from_millis(2);

/// Busy share (per mille) from which the zone counts as near saturation.
pub(super) const NEAR_SATURATION: u32 = 800;

/// The busy share is the thread's CPU time over wall time, not wall time outside the wait:
/// with DEFER_TASKRUN the kernel does the zone's receive and send work inside the waiting
/// `io_uring_enter`, so time "in the wait" is mostly work, and wall time outside the wait
/// would read a saturated zone as mostly idle. Spinning under `busy_poll_us` burns CPU but is
/// waiting; it is taken off.
pub(super) struct Busy {
    window_start: Instant,
    cpu_start: Duration,
    spun: Duration,
    /// The last complete window's busy share, per mille.
    permille: u32,
}

impl Busy {
    pub(super) fn new(now: Instant) -> Self {
        Busy {
            window_start: now,
            cpu_start: thread_cpu(),
            spun: Duration::ZERO,
            permille: 0,
        }
    }

    /// Adds time spent spinning on the completion queue (waiting, though on the CPU).
    #[inline]
    pub(super) fn spun(&mut self, d: Duration) {
        self.spun += d;
    }

    /// Closes the window if it is old enough (`now` is the loop's clock reading).
    #[inline]
    pub(super) fn tick(&mut self, now: Instant) {
        if now.saturating_duration_since(self.window_start) >= WINDOW {
            self.close(now, thread_cpu());
        }
    }

    /// Closes the window at `now` with the thread's CPU clock reading `cpu`.
    fn close(&mut self, now: Instant, cpu: Duration) {
        let wall = now.saturating_duration_since(self.window_start);
        if wall.is_zero() {
            return;
        }
        let work = cpu
            .saturating_sub(self.cpu_start)
            .saturating_sub(self.spun)
            .min(wall);
        self.permille = (work.as_nanos() * 1000 / wall.as_nanos()) as u32;
        self.window_start = now;
        self.cpu_start = cpu;
        self.spun = Duration::ZERO;
    }

    /// Busy share of the last complete window, per mille (0 before the first one).
    #[cfg(test)]
    fn permille(&self) -> u32 {
        self.permille
    }

    /// Whether the zone was busy at least [`NEAR_SATURATION`] of the last window.
    #[inline]
    pub(super) fn near_saturation(&self) -> bool {
        self.permille >= NEAR_SATURATION
    }
}

/// The calling thread's CPU time (user + system), or zero if the clock is unavailable
/// (then the zone never counts as near saturation and batching keeps its other gate).
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call; the call
    // touches no other memory.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if r != 0 {
        return Duration::ZERO;
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_share_is_cpu_over_wall() {
        let t0 = Instant::now();
        let mut b = Busy::new(t0);
        let c0 = b.cpu_start;
        b.close(
            t0 + Duration::from_millis(2),
            c0 + Duration::from_micros(1600),
        );
        assert_eq!(b.permille(), 800);
        assert!(b.near_saturation());
        b.close(
            t0 + Duration::from_millis(4),
            c0 + Duration::from_micros(1800),
        );
        assert_eq!(b.permille(), 100);
        assert!(!b.near_saturation());
    }

    #[test]
    fn spinning_counts_as_waiting() {
        let t0 = Instant::now();
        let mut b = Busy::new(t0);
        let c0 = b.cpu_start;
        // Two milliseconds on the CPU, of which 1.5 spinning on an empty completion queue.
        b.spun(Duration::from_micros(1500));
        b.close(t0 + Duration::from_millis(2), c0 + Duration::from_millis(2));
        assert_eq!(b.permille(), 250);
        assert!(!b.near_saturation());
    }

    #[test]
    fn a_window_closes_only_when_old_enough() {
        let t0 = Instant::now();
        let mut b = Busy::new(t0);
        b.tick(t0 + Duration::from_micros(500));
        assert_eq!(b.permille(), 0);
        assert_eq!(b.window_start, t0);
    }

    #[test]
    fn the_thread_cpu_clock_advances_with_work() {
        let a = thread_cpu();
        let mut x = 0u64;
        let t = Instant::now();
        while t.elapsed() < Duration::from_millis(5) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        assert!(
            thread_cpu() > a,
            "CLOCK_THREAD_CPUTIME_ID did not move after 5 ms of work"
        );
    }
}
