//! Gives back to the kernel the memory a crowd of connections freed when it left.
//!
//! glibc keeps what is freed in its arenas for the next allocation and returns it to the
//! kernel only from the top of a heap, past a threshold that grows to 64 MiB. After a flood
//! (HTTP/2 clients that never open their windows, thousands of upstream exchanges), a zone's
//! arena holds hundreds of megabytes that nothing uses: the process looks as if it still held
//! them, for as long as it runs. So when at most half of the connections a zone has seen since
//! it last looked remain, it looks [`SETTLE`] later and, when the arenas hold at least
//! [`WORTH`] free bytes, asks glibc to give every whole free page back (`malloc_trim`, which
//! walks all arenas). A steady load, whose connections come and go, never halves, so this costs
//! nothing on the request path; a quiet server that sees one connection now and then looks at
//! a small heap at most once per [`SETTLE`].

use std::time::{Duration, Instant};

/// How long after the crowd left the zone looks: the rest of it leaves meanwhile, and one look
/// covers them all.
pub const SETTLE: Duration = Duration::from_millis(500);

/// Free bytes in the arenas below which trimming is not worth its system calls.
pub const WORTH: usize = 16 << 20;

/// What a look found and did.
#[derive(Debug, PartialEq, Eq)]
pub struct Look {
    /// Free bytes in the arenas before, and bytes in use; `None` when not worth a trim.
    pub trimmed: Option<(usize, usize)>,
    /// When to look again: connections were still leaving after a trim.
    pub again: Option<Instant>,
}

#[derive(Default)]
pub struct Trim {
    /// The most connections (clients and upstreams) open at once since the last look.
    high: usize,
    /// When the next look is due, once armed.
    at: Option<Instant>,
    /// Connections closed since the look was armed.
    closes: usize,
}

impl Trim {
    /// A connection closed and `live` remain. When the zone holds at most half of what it held,
    /// returns when to look (for the zone's timer).
    pub fn closed(&mut self, live: usize, now: Instant) -> Option<Instant> {
        self.high = self.high.max(live + 1);
        self.closes += 1;
        if self.at.is_some() || live > self.high / 2 {
            return None;
        }
        self.closes = 0;
        let at = now + SETTLE;
        self.at = Some(at);
        Some(at)
    }

    /// When the next look is due, if one is armed: the zone's timer must fire then (the
    /// interval `on_timer` returns replaces the engine's earlier `timer_at` requests).
    pub fn at(&self) -> Option<Instant> {
        self.at
    }

    /// From the zone's timer: once the look is due, trims when it is worth it. When it was,
    /// and connections closed meanwhile (the crowd is still leaving, and what it frees after
    /// this look would stay), looks again [`SETTLE`] later.
    pub fn timer(&mut self, live: usize, now: Instant) -> Option<Look> {
        if self.at.is_none_or(|at| at > now) {
            return None;
        }
        self.at = None;
        self.high = live;
        // (A trim changes no allocation: what is in use now is in use after.)
        let (free, used) = arena_bytes();
        if free < WORTH {
            return Some(Look {
                trimmed: None,
                again: None,
            });
        }
        release_free_pages();
        let again = (std::mem::take(&mut self.closes) > 0).then(|| now + SETTLE);
        self.at = again;
        Some(Look {
            trimmed: Some((free, used)),
            again,
        })
    }
}

/// The bytes the arenas hold free, and those in use (both allocated from arenas and mmapped).
#[cfg(target_env = "gnu")]
fn arena_bytes() -> (usize, usize) {
    // SAFETY: mallinfo2 takes no arguments and returns a structure by value; glibc takes each
    // arena's lock while it sums it, so it is safe beside other threads' allocations.
    let m = unsafe { libc::mallinfo2() };
    (m.fordblks, m.uordblks + m.hblkhd)
}

/// Allocations below this come from the arenas once a trim has run (glibc's own rule moves
/// it between 128 KiB and 32 MiB; [`release_free_pages`] has to fix it).
#[cfg(target_env = "gnu")]
const MMAP_AT: i32 = 4 << 20;

/// Free bytes at the top of an arena kept for the next allocations after a trim: twice
/// [`MMAP_AT`], as glibc's own rule keeps.
#[cfg(target_env = "gnu")]
const KEEP: i32 = 8 << 20;

/// A block above glibc's fast bins' consolidation size (64 KiB) and below its smallest mmap
/// threshold (128 KiB): freeing it makes glibc trim the top of this thread's arena.
#[cfg(target_env = "gnu")]
const PROBE: usize = 96 << 10;

/// Gives whole free pages back to the kernel, in every arena and at the top of this thread's.
///
/// `malloc_trim` releases the free chunks of every arena, but the top of a thread's arena (the
/// zone's, where its connections' buffers were) only shrinks when a large block is freed there
/// and the top is past the trim threshold, which glibc raises to as much as 64 MiB. So the
/// threshold is lowered for the time of one such free, on this thread. Setting a threshold
/// ends glibc's moving of both: they are then fixed at [`MMAP_AT`] and [`KEEP`].
#[cfg(target_env = "gnu")]
fn release_free_pages() {
    // SAFETY: malloc_trim only gives whole free pages back (madvise) under each arena's lock;
    // no allocation moves, so no pointer the program holds is affected. mallopt sets glibc's
    // tunables under the main arena's lock; other threads read them as they allocate, and any
    // value they see is valid.
    unsafe {
        libc::malloc_trim(0);
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_AT);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 0);
    }
    let probe: Vec<u8> = Vec::with_capacity(PROBE);
    drop(std::hint::black_box(probe));
    // SAFETY: as above.
    unsafe {
        libc::mallopt(libc::M_TRIM_THRESHOLD, KEEP);
    }
}

// Other C libraries (musl) return freed memory to the kernel themselves.
#[cfg(not(target_env = "gnu"))]
fn arena_bytes() -> (usize, usize) {
    (0, 0)
}

#[cfg(not(target_env = "gnu"))]
fn release_free_pages() {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hint::black_box;

    #[test]
    fn a_steady_load_never_arms_and_a_crowd_leaving_arms_once() {
        let mut t = Trim::default();
        let now = Instant::now();
        // 100 connections come and go around 100.
        for _ in 0..1000 {
            assert_eq!(t.closed(99, now), None);
        }
        // The crowd leaves: armed once, when half have gone.
        let mut armed = Vec::new();
        for live in (0..99).rev() {
            armed.extend(t.closed(live, now));
        }
        assert_eq!(armed, vec![now + SETTLE]);
        assert_eq!(t.timer(0, now), None, "not due yet");
        assert!(t.timer(0, now + SETTLE).is_some());
        if t.at.is_some() {
            // Worth a trim (other tests' memory) and 49 closed meanwhile: looks again.
            assert_eq!(
                t.timer(0, now + SETTLE + SETTLE).map(|l| l.again),
                Some(None)
            );
        }
        assert_eq!(t.at, None);
        assert_eq!(t.high, 0);
        // The one connection of a quiet server arms again, once the look is done.
        let later = now + SETTLE * 3;
        assert_eq!(t.closed(0, later), Some(later + SETTLE));
    }

    #[test]
    fn a_crowd_still_leaving_after_a_trim_is_looked_at_again() {
        if !cfg!(target_env = "gnu") {
            eprintln!("SKIP a_crowd_still_leaving_after_a_trim_is_looked_at_again: not glibc");
            return;
        }
        // black_box: an optimised build would otherwise drop allocations nothing reads.
        let blocks: Vec<Vec<u8>> = black_box((0..1024).map(|_| vec![1u8; 32 << 10]).collect());
        let keep = black_box(vec![1u8; 32 << 10]);
        drop(blocks);
        let mut t = Trim::default();
        let now = Instant::now();
        // 10 connections and a client that stays: half leave, the look is armed, then the
        // others leave before it is due.
        for live in (5..11).rev() {
            t.closed(live, now);
        }
        let armed = t.at.expect("armed at half");
        for live in (1..5).rev() {
            assert_eq!(t.closed(live, now), None, "one look armed at a time");
        }
        let look = t.timer(1, armed).expect("due");
        assert!(look.trimmed.is_some());
        assert_eq!(look.again, Some(armed + SETTLE));
        // Nothing left since: the second look is the last.
        let last = t.timer(1, armed + SETTLE).expect("due");
        assert_eq!(last.again, None);
        drop(keep);
    }

    #[test]
    fn freed_memory_is_given_back() {
        if !cfg!(target_env = "gnu") {
            eprintln!("SKIP freed_memory_is_given_back: not glibc");
            return;
        }
        // 64 MiB in blocks below the mmap threshold: they live in an arena once freed.
        // black_box: an optimised build would otherwise drop allocations nothing reads.
        let blocks: Vec<Vec<u8>> = black_box((0..2048).map(|_| vec![1u8; 32 << 10]).collect());
        // The last one keeps the top of the heap in use, so glibc does not trim on its own.
        let keep = black_box(vec![1u8; 32 << 10]);
        drop(blocks);
        let before = arena_bytes().0;
        assert!(before >= WORTH, "{before}");
        let mut t = Trim::default();
        let now = Instant::now();
        t.closed(0, now);
        let look = t.timer(0, now + SETTLE).expect("due");
        // Other tests allocate beside this one: the figure is not exactly `before`.
        assert!(
            look.trimmed.is_some_and(|(free, _)| free >= WORTH),
            "{look:?}"
        );
        drop(keep);
    }
}
