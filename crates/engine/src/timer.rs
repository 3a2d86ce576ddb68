//! A hashed timer wheel with lazy re-arming, for connection timeouts.
//!
//! Timeouts in a server are set and pushed back far more often than they fire (every request
//! on a keep-alive connection moves its deadline). So an entry here is only a reminder:
//! `(key, generation)` in the slot of a deadline. When the slot comes due, the owner looks at
//! the key's *current* deadline and either expires it or re-inserts it. Moving a deadline is
//! a plain store into the owner's state; the wheel is touched once per deadline that is
//! actually reached, and never searched.

use std::time::{Duration, Instant};

/// A wheel of `slots` buckets, each `resolution` wide.
pub struct TimerWheel {
    slots: Vec<Vec<(u32, u32)>>,
    resolution: Duration,
    start: Instant,
    /// The next tick to process.
    cursor: u64,
    len: usize,
}

impl TimerWheel {
    /// A wheel whose horizon is `slots * resolution`; later deadlines wait in the last slot of
    /// the horizon and are re-inserted when it comes due.
    pub fn new(start: Instant, resolution: Duration, slots: usize) -> Self {
        assert!(slots.is_power_of_two() && !resolution.is_zero());
        TimerWheel {
            slots: (0..slots).map(|_| Vec::new()).collect(),
            resolution,
            start,
            cursor: 0,
            len: 0,
        }
    }

    fn tick_of(&self, t: Instant) -> u64 {
        let d = t.saturating_duration_since(self.start);
        (d.as_nanos() / self.resolution.as_nanos()) as u64
    }

    /// Entries waiting (including stale ones the owner has moved on from).
    pub fn len(&self) -> usize {
        self.len
    }

    /// True if nothing is waiting.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Remembers `(key, gen)` for `deadline` (rounded up to the next tick).
    pub fn insert(&mut self, deadline: Instant, key: u32, gen: u32) {
        let horizon = self.cursor + self.slots.len() as u64 - 1;
        let tick = (self.tick_of(deadline) + 1).clamp(self.cursor, horizon);
        let mask = self.slots.len() as u64 - 1;
        self.slots[(tick & mask) as usize].push((key, gen));
        self.len += 1;
    }

    /// Hands every entry whose slot is due at `now` to `f`, which decides (from the owner's
    /// current deadline) whether it expired or must be inserted again.
    pub fn advance(&mut self, now: Instant, mut f: impl FnMut(&mut Self, u32, u32)) {
        let target = self.tick_of(now);
        let mask = self.slots.len() as u64 - 1;
        let mut batch = Vec::new();
        while self.cursor <= target {
            let slot = (self.cursor & mask) as usize;
            std::mem::swap(&mut batch, &mut self.slots[slot]);
            self.cursor += 1;
            self.len -= batch.len();
            for (key, gen) in batch.drain(..) {
                f(self, key, gen);
            }
            if self.len == 0 {
                self.cursor = self.cursor.max(target + 1);
                break;
            }
        }
        // Give the (now empty) vector back to a slot so its capacity is reused.
        let slot = (self.cursor & mask) as usize;
        if self.slots[slot].capacity() == 0 {
            self.slots[slot] = batch;
        }
    }

    /// Time from `now` until the next non-empty slot may be due (`None` if empty).
    pub fn next_due(&self, now: Instant) -> Option<Duration> {
        if self.len == 0 {
            return None;
        }
        let mask = self.slots.len() as u64 - 1;
        let mut tick = self.cursor;
        while self.slots[(tick & mask) as usize].is_empty() {
            tick += 1;
        }
        let at = self.start + self.resolution * (tick as u32);
        Some(at.saturating_duration_since(now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fires_after_deadline_and_lazily_rearms() {
        let t0 = Instant::now();
        let res = Duration::from_millis(10);
        let mut w = TimerWheel::new(t0, res, 64);
        let mut deadlines = [
            t0 + Duration::from_millis(25),
            t0 + Duration::from_millis(5000),
        ];
        w.insert(deadlines[0], 0, 1);
        w.insert(deadlines[1], 1, 1);
        let mut fired = Vec::new();
        let run = |w: &mut TimerWheel, now: Instant, d: &mut [Instant; 2], fired: &mut Vec<u32>| {
            w.advance(now, |w, k, g| {
                if d[k as usize] <= now {
                    fired.push(k);
                } else {
                    w.insert(d[k as usize], k, g);
                }
            });
        };
        run(
            &mut w,
            t0 + Duration::from_millis(20),
            &mut deadlines,
            &mut fired,
        );
        assert!(fired.is_empty());
        // push key 0 back: the early reminder re-inserts it instead of firing
        deadlines[0] = t0 + Duration::from_millis(100);
        run(
            &mut w,
            t0 + Duration::from_millis(50),
            &mut deadlines,
            &mut fired,
        );
        assert!(fired.is_empty());
        run(
            &mut w,
            t0 + Duration::from_millis(120),
            &mut deadlines,
            &mut fired,
        );
        assert_eq!(fired, vec![0]);
        // key 1 is beyond the horizon (640 ms): it is re-inserted until its time comes
        for ms in (200..5000).step_by(150) {
            run(
                &mut w,
                t0 + Duration::from_millis(ms),
                &mut deadlines,
                &mut fired,
            );
        }
        assert_eq!(fired, vec![0]);
        run(
            &mut w,
            t0 + Duration::from_millis(5020),
            &mut deadlines,
            &mut fired,
        );
        assert_eq!(fired, vec![0, 1]);
        assert!(w.is_empty());
        assert_eq!(w.next_due(t0), None);
    }

    #[test]
    fn next_due_points_at_first_slot() {
        let t0 = Instant::now();
        let mut w = TimerWheel::new(t0, Duration::from_millis(100), 16);
        w.insert(t0 + Duration::from_millis(350), 7, 0);
        let d = w.next_due(t0).unwrap();
        assert!(
            d >= Duration::from_millis(350) && d <= Duration::from_millis(500),
            "{d:?}"
        );
    }
}
