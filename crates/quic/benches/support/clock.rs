//! What the yardsticks time: only the server's calls, the client's work left out.

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
