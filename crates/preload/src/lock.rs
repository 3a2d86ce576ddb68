//! A spin lock that `fork` cannot leave locked in the child.
//!
//! The library's shared state (the listener groups, each CPU's port table) is touched for a
//! few hundred nanoseconds at a time, from hooks that must not allocate; a spin lock (with
//! `sched_yield` after a while) fits. `pthread_atfork` handlers ([`crate::init`]) take every
//! lock before `fork` and release them in both processes after, so a child never inherits a
//! lock some other thread of the parent held mid-update (the child has only the forking
//! thread, and that holder would not exist there to release it).

use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};

pub struct SpinLock<T> {
    locked: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: the value is reached only through a guard, and one guard exists at a time (the
// flag's Acquire/Release pairs order each holder's accesses after the previous holder's), so
// sharing the lock between threads shares T by moving access between them: T: Send suffices.
unsafe impl<T: Send> Sync for SpinLock<T> {}

impl<T> SpinLock<T> {
    pub const fn new(value: T) -> SpinLock<T> {
        SpinLock {
            locked: AtomicBool::new(false),
            value: UnsafeCell::new(value),
        }
    }

    /// Takes the lock without a guard (for the `fork` handlers); [`SpinLock::unlock_raw`]
    /// releases it.
    pub fn lock_raw(&self) {
        let mut spins = 0u32;
        // Acquire: what the previous holder wrote before its Release is visible to us.
        while self
            .locked
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                // SAFETY: sched_yield has no arguments and no failure that matters here.
                unsafe { libc::sched_yield() };
            }
        }
    }

    /// Releases a lock taken with [`SpinLock::lock_raw`].
    ///
    /// # Safety
    /// The caller holds the lock (took it with `lock_raw`, or is the child of a `fork` made
    /// while its parent's forking thread held it) and no guard of it is alive.
    pub unsafe fn unlock_raw(&self) {
        // Release: our writes to the value happen before the next holder's Acquire.
        self.locked.store(false, Ordering::Release);
    }

    pub fn lock(&self) -> Guard<'_, T> {
        self.lock_raw();
        Guard { lock: self }
    }
}

pub struct Guard<'a, T> {
    lock: &'a SpinLock<T>,
}

impl<T> Deref for Guard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the guard proves this thread holds the lock: no other reference exists.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> DerefMut for Guard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`, and `&mut self` makes this the only use of the guard.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for Guard<'_, T> {
    fn drop(&mut self) {
        // SAFETY: the guard was made by `lock`, so this thread holds the lock, and the guard
        // is going away.
        unsafe { self.lock.unlock_raw() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn counts_under_contention() {
        let l = Arc::new(SpinLock::new(0u64));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let l = l.clone();
                std::thread::spawn(move || {
                    for _ in 0..10_000 {
                        *l.lock() += 1;
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(*l.lock(), 40_000);
    }

    #[test]
    fn raw_lock_blocks_guards_until_released() {
        let l = SpinLock::new(1);
        l.lock_raw();
        assert!(l.locked.load(Ordering::Relaxed));
        // SAFETY: this thread took it just above and holds no guard.
        unsafe { l.unlock_raw() };
        assert_eq!(*l.lock(), 1);
    }
}
