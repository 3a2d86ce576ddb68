//! The zone's handshake budget: the CPU that TLS handshakes may take, as a share of the
//! zone's time. Public-key operations (a signature, a key exchange) cost 50–1000 µs each, the
//! work of hundreds of keep-alive requests, and arrive in bursts; unchecked, a flood of new
//! connections fills every event batch and established connections wait behind it.
//!
//! A token bucket in nanoseconds: it fills at `share` of wall time, up to a burst of
//! `share` × 0.5 ms, and every expensive handshake step is charged what it took (measured,
//! not estimated). The burst is about one step: a step may run whenever the bucket is not
//! empty and drives it into debt, so between two steps the zone always serves what else
//! arrived (a larger burst let several handshakes run back to back, and an established
//! request arriving then waited for all of them: a p99 of 4.6 ms instead of 0.14 under a
//! flood, `bench/README.md`). A step that finds the bucket empty waits: the zone keeps the
//! bytes and goes on with the waiting handshakes, oldest first, on its timer tick (every
//! millisecond while any wait) as far as the refilled bucket allows. Established connections
//! are never charged and never wait.

use std::time::{Duration, Instant};

#[derive(Debug)]
pub struct Budget {
    share: f64,
    tokens_ns: i64,
    cap_ns: i64,
    last: Instant,
    /// Nanoseconds spent in handshake steps since start.
    pub spent_ns: u64,
    /// Handshake steps that had to wait for the bucket.
    pub waits: u64,
}

/// The burst a full bucket allows, at share 1.
const BURST: Duration = Duration::from_micros(500);

impl Budget {
    pub fn new(share: f64, now: Instant) -> Budget {
        let share = share.clamp(0.01, 1.0);
        let cap_ns = (BURST.as_nanos() as f64 * share) as i64;
        Budget {
            share,
            tokens_ns: cap_ns,
            cap_ns,
            last: now,
            spent_ns: 0,
            waits: 0,
        }
    }

    fn refill(&mut self, now: Instant) {
        let dt = now.saturating_duration_since(self.last).as_nanos() as f64;
        self.last = now;
        self.tokens_ns = (self.tokens_ns + (dt * self.share) as i64).min(self.cap_ns);
    }

    /// Whether a step may run now (not counted as a wait).
    pub fn ready(&mut self, now: Instant) -> bool {
        self.refill(now);
        self.tokens_ns > 0
    }

    /// Whether a handshake step may run now (counted as a wait when not).
    pub fn admit(&mut self, now: Instant) -> bool {
        if self.ready(now) {
            return true;
        }
        self.waits += 1;
        false
    }

    /// Charges a step's measured time.
    pub fn charge(&mut self, took: Duration) {
        let ns = took.as_nanos().min(i64::MAX as u128) as i64;
        self.tokens_ns -= ns;
        self.spent_ns += ns as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_share_of_wall_time_with_a_bounded_burst() {
        let t0 = Instant::now();
        let mut b = Budget::new(0.5, t0);
        // A full bucket (0.25 ms at share 0.5) admits one step, whatever it costs...
        assert!(b.admit(t0));
        b.charge(Duration::from_micros(400));
        // ... and the debt keeps the next one waiting.
        assert!(!b.admit(t0), "an empty bucket makes the next step wait");
        assert_eq!(b.waits, 1);
        // 0.3 ms of wall time refills 0.15 ms: still 0 in debt.
        assert!(!b.admit(t0 + Duration::from_micros(300)));
        // 1 ms refills 0.5 ms: 0.1 ms left.
        assert!(b.admit(t0 + Duration::from_millis(1)));
        b.charge(Duration::from_micros(600));
        assert!(!b.admit(t0 + Duration::from_millis(1)));
        // A long idle time refills no more than the burst: one step, then a wait.
        let later = t0 + Duration::from_secs(10);
        assert!(b.admit(later));
        b.charge(Duration::from_micros(300));
        assert!(!b.admit(later));
        assert_eq!(b.spent_ns, 1_300_000);
    }

    #[test]
    fn ready_does_not_count_a_wait() {
        let t0 = Instant::now();
        let mut b = Budget::new(0.5, t0);
        assert!(b.ready(t0));
        b.charge(Duration::from_micros(400));
        assert!(!b.ready(t0));
        assert_eq!(b.waits, 0);
        assert!(b.ready(t0 + Duration::from_millis(1)));
    }
}
