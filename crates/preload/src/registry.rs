//! The listener groups of a process tree, in memory shared by every process `fork` makes.
//!
//! A reuseport group (the listeners of one address) takes one steering program and one
//! CPU → listener map. The processes of a program may each create their own listener on the
//! address (workers that `listen` after `fork`); they must all fill the same map, or the
//! program attached last would steer to its own process's listeners only. So the first
//! process to see an address creates the map and program and records their ids here, under
//! the address; the others open them by id (`BPF_*_GET_FD_BY_ID`).
//!
//! The page is `MAP_SHARED | MAP_ANONYMOUS`, made in the constructor: every process forked
//! from the one that loaded the library shares it, and an `exec` (a new image, a new
//! constructor) starts a new tree. Entries are never removed: a group lives as long as the
//! tree. The lock is a flag in the page itself, so a thread of another process can hold it,
//! but never across a `fork` of its own (nothing in the library forks).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, Ordering};

/// Most distinct listening addresses a tree steers.
pub const GROUPS: usize = 16;

/// An address as three words: family and port, then the 16 address bytes (an IPv4 address
/// in the first four).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddrKey([u64; 3]);

impl AddrKey {
    pub fn of(a: SocketAddr) -> AddrKey {
        let (family, bytes) = match a {
            SocketAddr::V4(v) => {
                let mut b = [0u8; 16];
                b[..4].copy_from_slice(&v.ip().octets());
                (4u64, b)
            }
            SocketAddr::V6(v) => (6u64, v.ip().octets()),
        };
        let head = (family << 16) | u64::from(a.port()) | (1 << 32);
        let lo = u64::from_ne_bytes(bytes[..8].try_into().unwrap_or([0; 8]));
        let hi = u64::from_ne_bytes(bytes[8..].try_into().unwrap_or([0; 8]));
        AddrKey([head, lo, hi])
    }
}

#[repr(C)]
struct Entry {
    /// The key's words; word 0 is never 0 for a used entry (bit 32 is set in every key).
    key: [AtomicU64; 3],
    prog_id: AtomicU32,
    map_id: AtomicU32,
}

#[repr(C)]
struct Page {
    lock: AtomicU32,
    entries: [Entry; GROUPS],
}

const _: () = assert!(
    std::mem::size_of::<Page>() <= 4096,
    "the registry fits one page"
);

static PAGE: AtomicPtr<Page> = AtomicPtr::new(std::ptr::null_mut());

/// Maps the shared page (the constructor, once per image); false when mmap fails.
pub fn create() -> bool {
    // SAFETY: an anonymous shared mapping of one page at an address the kernel chooses; no
    // existing memory is affected. The kernel zero-fills it: every entry starts unused and
    // the lock free, which is what all-zero atomics mean.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return false;
    }
    // Release: a thread that loads the pointer sees the mapping (zero-filled by the kernel).
    PAGE.store(p.cast(), Ordering::Release);
    true
}

fn page() -> Option<&'static Page> {
    let p = PAGE.load(Ordering::Acquire);
    // SAFETY: a non-null pointer is the page mapped by `create`, never unmapped, valid for
    // the life of the process (and its forks), and made only of atomics.
    (!p.is_null()).then(|| unsafe { &*p })
}

/// What the registry holds for a key.
pub enum Found {
    /// Group `index`, with the program and map ids another process recorded.
    Known {
        index: usize,
        prog_id: u32,
        map_id: u32,
    },
    /// The key is new; `index` is free and now reserved for it (call [`Locked::record`]).
    New { index: usize },
}

/// The registry, locked (across every process of the tree).
pub struct Locked(&'static Page);

impl Locked {
    /// Takes the lock; None when the page was never mapped.
    pub fn lock() -> Option<Locked> {
        let p = page()?;
        let mut spins = 0u32;
        // Acquire/Release on the flag order the entries between processes, as between threads:
        // the page is the same physical memory in each.
        while p
            .lock
            .compare_exchange_weak(0, 1, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                // SAFETY: sched_yield has no arguments.
                unsafe { libc::sched_yield() };
            }
        }
        Some(Locked(p))
    }

    /// The group of `key`, or a free index for it; None when every index is taken.
    pub fn find(&self, key: AddrKey) -> Option<Found> {
        let mut free = None;
        for (index, e) in self.0.entries.iter().enumerate() {
            let w0 = e.key[0].load(Ordering::Relaxed);
            if w0 == 0 {
                free = free.or(Some(index));
                continue;
            }
            let words = [
                w0,
                e.key[1].load(Ordering::Relaxed),
                e.key[2].load(Ordering::Relaxed),
            ];
            if words == key.0 {
                return Some(Found::Known {
                    index,
                    prog_id: e.prog_id.load(Ordering::Relaxed),
                    map_id: e.map_id.load(Ordering::Relaxed),
                });
            }
        }
        free.map(|index| Found::New { index })
    }

    /// Records the group of `key` at `index` (from [`Found::New`]).
    pub fn record(&self, index: usize, key: AddrKey, prog_id: u32, map_id: u32) {
        let Some(e) = self.0.entries.get(index) else {
            return;
        };
        e.prog_id.store(prog_id, Ordering::Relaxed);
        e.map_id.store(map_id, Ordering::Relaxed);
        e.key[1].store(key.0[1], Ordering::Relaxed);
        e.key[2].store(key.0[2], Ordering::Relaxed);
        e.key[0].store(key.0[0], Ordering::Relaxed);
    }
}

impl Drop for Locked {
    fn drop(&mut self) {
        // Release: the entries written under the lock are seen by the next holder.
        self.0.lock.store(0, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_differ_by_family_port_and_address() {
        let k = |s: &str| AddrKey::of(s.parse().unwrap());
        assert_eq!(k("10.0.0.1:80"), k("10.0.0.1:80"));
        assert_ne!(k("10.0.0.1:80"), k("10.0.0.1:81"));
        assert_ne!(k("10.0.0.1:80"), k("10.0.0.2:80"));
        assert_ne!(k("0.0.0.0:80"), k("[::]:80"));
        assert_ne!(k("0.0.0.0:0").0[0], 0);
    }

    #[test]
    fn shared_across_fork() {
        assert!(create());
        let key = AddrKey::of("10.9.8.7:6543".parse().unwrap());
        // SAFETY: the child only touches the shared page (atomics, no allocation, no lock
        // another thread could hold: the registry lock is free) and leaves with _exit.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            let recorded = Locked::lock().is_some_and(|l| match l.find(key) {
                Some(Found::New { index }) => {
                    l.record(index, key, 11, 22);
                    true
                }
                _ => false,
            });
            let ok = if recorded { 0 } else { 1 };
            // SAFETY: ends the child without running the parent's atexit handlers.
            unsafe { libc::_exit(ok) };
        }
        let mut status = 0;
        // SAFETY: waits for the child just forked, into a live local.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert_eq!(status, 0);
        let l = Locked::lock().unwrap();
        match l.find(key) {
            Some(Found::Known {
                prog_id, map_id, ..
            }) => assert_eq!((prog_id, map_id), (11, 22)),
            _ => panic!("the child's entry is not visible to the parent"),
        }
    }
}
