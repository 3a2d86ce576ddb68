//! Cache prefetch for per-connection state.
//!
//! A zone handles the completions of one wait as a batch: with hundreds of connections, the
//! state of the connection each completion names is cold, and the first touch of it stalls
//! (under many keep-alive connections those first loads dominate the functions that make
//! them; the profile is in bench/NOTEBOOK.md). The driver announces
//! every connection of a batch before handling the first ([`crate::Handler::prefetch`]), so
//! the loads overlap instead of following one another.

/// Asks the CPU to bring every cache line of `*r` into the cache. A hint: it has no effect
/// on what the program computes, and none at all off x86-64.
#[inline(always)]
pub fn prefetch<T>(r: &T) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let start = r as *const T as *const i8;
        let mut off = 0;
        while off < std::mem::size_of::<T>() {
            // SAFETY: `_mm_prefetch` needs SSE, part of the x86-64 baseline; it reads no
            // memory architecturally (a prefetch never faults), and `start + off` stays
            // inside `*r`, a live reference, so the pointer arithmetic is in bounds.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(start.add(off)) };
            off += 64;
        }
        // The last line, when `*r` does not start on a line boundary.
        if std::mem::size_of::<T>() > 0 {
            // SAFETY: as above; `size_of - 1` is the last byte of `*r`.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(start.add(std::mem::size_of::<T>() - 1)) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = r;
}
