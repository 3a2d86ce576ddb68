//! The synchronisation primitives the queue is built from.
//!
//! Under `--cfg loom` they are loom's instrumented versions, so `tests/loom.rs` can explore
//! every interleaving and every weak-memory outcome the C++11 model allows; otherwise they
//! are std's. [`UnsafeCell`] mirrors loom's closure API (`with_mut`) so the queue code is
//! the same in both builds: loom then also checks that no two threads touch a slot at once.

#[cfg(loom)]
pub(crate) use loom::cell::UnsafeCell;
#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, Ordering};
#[cfg(loom)]
pub(crate) use loom::sync::Arc;

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicU64, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::Arc;

/// `std::cell::UnsafeCell` with loom's access API.
#[cfg(not(loom))]
#[derive(Debug)]
pub(crate) struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

#[cfg(not(loom))]
impl<T> UnsafeCell<T> {
    pub(crate) const fn new(value: T) -> Self {
        Self(std::cell::UnsafeCell::new(value))
    }

    /// Runs `f` with a raw pointer to the contents. Dereferencing it is the caller's
    /// business (and needs its own `unsafe` block and argument).
    #[inline(always)]
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}

/// How many `spin_loop` hints a waiting producer issues before it starts yielding its
/// CPU. A wait in the token-checking stage normally lasts as long as another producer's
/// slot fill (tens of nanoseconds), so a short spin wins; but if the producer holding the
/// earlier token has been preempted, only giving the CPU away lets it run again. On an
/// oversubscribed machine (more producer threads than cores) pure spinning would burn
/// whole time slices waiting for a thread that cannot run.
#[cfg(not(loom))]
const SPIN_LIMIT: u32 = 64;

/// Spin-then-yield waiting for the token-checking stage.
#[derive(Debug, Default)]
pub(crate) struct Backoff {
    #[cfg(not(loom))]
    spins: u32,
}

impl Backoff {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Waits a little before the caller re-reads the counter it is waiting on.
    #[inline]
    pub(crate) fn snooze(&mut self) {
        #[cfg(loom)]
        {
            // loom must be told that this thread cannot make progress on its own,
            // otherwise it would explore an unbounded spin.
            loom::thread::yield_now();
        }
        #[cfg(not(loom))]
        {
            if self.spins < SPIN_LIMIT {
                self.spins += 1;
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }
}
