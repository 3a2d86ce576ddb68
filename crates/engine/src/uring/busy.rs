//! How busy a zone has been lately: the share of wall time it spent outside its blocking
//! wait, over windows of about a millisecond. Adaptive completion batching reads it: a zone
//! that is busy most of the time is close to saturation, where waiting up to `batch_wait_us`
//! for a fuller batch costs little next to the queueing it already has and saves a wake-up
//! and a system call per batch. A lightly loaded zone never waits for a batch.

use std::time::{Duration, Instant};

/// Length of one measuring window.
const WINDOW: Duration = Duration::from_millis(1);

/// Busy share (per mille) from which the zone counts as near saturation.
pub(super) const NEAR_SATURATION: u32 = 800;

pub(super) struct Busy {
    window_start: Instant,
    parked: Duration,
    /// The last complete window's busy share, per mille.
    permille: u32,
}

impl Busy {
    pub(super) fn new(now: Instant) -> Self {
        Busy {
            window_start: now,
            parked: Duration::ZERO,
            permille: 0,
        }
    }

    /// Adds time spent blocked in the kernel waiting for completions.
    #[inline]
    pub(super) fn parked(&mut self, d: Duration) {
        self.parked += d;
    }

    /// Closes the window if it is a millisecond old (`now` is the loop's clock reading).
    #[inline]
    pub(super) fn tick(&mut self, now: Instant) {
        let wall = now.saturating_duration_since(self.window_start);
        if wall < WINDOW {
            return;
        }
        let parked = self.parked.min(wall);
        self.permille = (1000 - parked.as_nanos() * 1000 / wall.as_nanos()) as u32;
        self.window_start = now;
        self.parked = Duration::ZERO;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_share_of_a_window() {
        let t0 = Instant::now();
        let mut b = Busy::new(t0);
        b.parked(Duration::from_micros(100));
        b.tick(t0 + Duration::from_micros(500));
        assert_eq!(b.permille(), 0, "a window closes only after a millisecond");
        b.parked(Duration::from_micros(100));
        b.tick(t0 + Duration::from_millis(1));
        assert_eq!(b.permille(), 800);
        assert!(b.near_saturation());
        b.parked(Duration::from_micros(900));
        b.tick(t0 + Duration::from_millis(2));
        assert_eq!(b.permille(), 100);
        assert!(!b.near_saturation());
    }

    #[test]
    fn parked_longer_than_the_window_reads_idle() {
        let t0 = Instant::now();
        let mut b = Busy::new(t0);
        // A wait that began in an earlier window is charged whole to the one it ends in.
        b.parked(Duration::from_millis(5));
        b.tick(t0 + Duration::from_millis(2));
        assert_eq!(b.permille(), 0);
    }
}
