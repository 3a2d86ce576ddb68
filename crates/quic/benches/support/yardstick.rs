//! What the yardsticks share: a clock for the server's calls only (the client's work left
//! out), the rounds asked for on the command line, and the median of a round's figures.

use std::time::{Duration, Instant};

/// Time spent in the server's calls.
#[derive(Default)]
pub struct Clock(pub Duration);

impl Clock {
    /// Runs `f`, adding the time it took.
    pub fn time<T>(&mut self, f: impl FnOnce() -> T) -> T {
        let t0 = Instant::now();
        let out = f();
        self.0 += t0.elapsed();
        out
    }
}

/// The rounds to run: the first number among the arguments (`cargo bench` passes
/// `--bench` too), else 7.
pub fn rounds() -> usize {
    std::env::args()
        .skip(1)
        .find_map(|a| a.parse::<usize>().ok())
        .unwrap_or(7)
}

/// The median of `v`, which is left sorted.
pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
