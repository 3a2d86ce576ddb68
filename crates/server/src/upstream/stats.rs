//! What the status page and `/metrics` show per upstream server: requests in flight,
//! responses, failures and the time to a response head (a histogram), kept per zone.
//!
//! Each zone writes its own slot, on a cache line of its own (`zone % slots`: more zones
//! than slots share one, and stay exact since every write is an atomic add); the admin
//! thread sums the slots when it reads. Also what an operator sets on the status page
//! (drain, weight), read by every zone's balancer.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds of the response-time buckets, in seconds (`+Inf` after the last).
pub const BOUNDS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// One zone's counts for one server.
#[repr(align(64))]
#[derive(Default)]
struct Slot {
    started: AtomicU64,
    finished: AtomicU64,
    responses: AtomicU64,
    failures: AtomicU64,
    /// Response-head times by [`BOUNDS`], the last for longer ones.
    buckets: [AtomicU64; BOUNDS.len() + 1],
    sum_us: AtomicU64,
}

/// One server's counts (every zone's slot) and the operator's settings.
pub struct ServerStats {
    slots: Box<[Slot]>,
    /// Drained on the status page: no new request picks it (in-flight ones finish).
    pub drained: AtomicBool,
    /// The weight set on the status page; 0: the configured one.
    pub weight: AtomicU32,
}

/// A sum over the zones.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Totals {
    pub active: u64,
    pub responses: u64,
    pub failures: u64,
    pub buckets: [u64; BOUNDS.len() + 1],
    pub sum_seconds: f64,
}

fn add(a: &AtomicU64, n: u64) {
    a.fetch_add(n, Ordering::Relaxed);
}

impl Default for ServerStats {
    fn default() -> Self {
        let n = std::thread::available_parallelism().map_or(1, |n| n.get());
        ServerStats {
            slots: (0..n).map(|_| Slot::default()).collect(),
            drained: AtomicBool::new(false),
            weight: AtomicU32::new(0),
        }
    }
}

impl ServerStats {
    fn slot(&self, zone: usize) -> &Slot {
        &self.slots[zone % self.slots.len()]
    }

    /// A request went to this server.
    pub fn started(&self, zone: usize) {
        add(&self.slot(zone).started, 1);
    }

    /// That request is over (answered, failed or cancelled).
    pub fn finished(&self, zone: usize) {
        add(&self.slot(zone).finished, 1);
    }

    /// A response head came back `took` after the request went out.
    pub fn responded(&self, zone: usize, took: Duration) {
        let s = self.slot(zone);
        add(&s.responses, 1);
        let secs = took.as_secs_f64();
        let i = BOUNDS
            .iter()
            .position(|&b| secs <= b)
            .unwrap_or(BOUNDS.len());
        add(&s.buckets[i], 1);
        add(&s.sum_us, took.as_micros() as u64);
    }

    /// A connect failed, or the connection was reset or timed out.
    pub fn failed(&self, zone: usize) {
        add(&self.slot(zone).failures, 1);
    }

    /// Every zone's counts summed.
    pub fn totals(&self) -> Totals {
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let mut t = Totals::default();
        let (mut started, mut finished, mut us) = (0u64, 0u64, 0u64);
        for s in self.slots.iter() {
            started += r(&s.started);
            finished += r(&s.finished);
            t.responses += r(&s.responses);
            t.failures += r(&s.failures);
            us += r(&s.sum_us);
            for (i, b) in s.buckets.iter().enumerate() {
                t.buckets[i] += r(b);
            }
        }
        t.active = started.saturating_sub(finished);
        t.sum_seconds = us as f64 / 1e6;
        t
    }
}

impl Totals {
    /// The `q` quantile (0..1) of the response times, in seconds, interpolated within its
    /// bucket as Prometheus's `histogram_quantile` does; None before any response. Beyond the
    /// last bound: that bound.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let n: u64 = self.buckets.iter().sum();
        if n == 0 {
            return None;
        }
        let rank = q * n as f64;
        let mut seen = 0u64;
        for (i, &c) in self.buckets.iter().enumerate() {
            if c > 0 && (seen + c) as f64 >= rank {
                let Some(&hi) = BOUNDS.get(i) else {
                    return Some(BOUNDS[BOUNDS.len() - 1]);
                };
                let lo = if i == 0 { 0.0 } else { BOUNDS[i - 1] };
                let within = (rank - seen as f64) / c as f64;
                return Some(lo + (hi - lo) * within.clamp(0.0, 1.0));
            }
            seen += c;
        }
        Some(BOUNDS[BOUNDS.len() - 1])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zones_are_summed_and_quantiles_interpolated() {
        let s = ServerStats::default();
        for z in 0..4 {
            s.started(z);
        }
        s.finished(1);
        for _ in 0..90 {
            s.responded(0, Duration::from_micros(1500)); // (1 ms, 2.5 ms]
        }
        for _ in 0..10 {
            s.responded(3, Duration::from_millis(200)); // (100 ms, 250 ms]
        }
        s.failed(2);
        let t = s.totals();
        assert_eq!((t.active, t.responses, t.failures), (3, 100, 1));
        let p50 = t.quantile(0.5).unwrap();
        assert!(p50 > 0.001 && p50 <= 0.0025, "{p50}");
        let p99 = t.quantile(0.99).unwrap();
        assert!(p99 > 0.1 && p99 <= 0.25, "{p99}");
        assert!((t.sum_seconds - (0.135 + 2.0)).abs() < 1e-9);
        assert_eq!(ServerStats::default().totals().quantile(0.5), None);
    }
}
