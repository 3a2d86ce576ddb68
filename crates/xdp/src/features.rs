//! The one way every crate of the workspace makes an aya `EbpfLoader`.
//!
//! aya probes the kernel's BPF features once per process, on the first load, and caches the
//! answer. One of the probes verifies a tiny program, and the verifier returns EAGAIN when a
//! signal is pending on the calling thread (it checks between instructions; libbpf and
//! cilium/ebpf retry on EAGAIN, aya 0.13 does not). A probe that fails that way makes aya
//! believe this kernel has no BPF global data for the rest of the process, and every program
//! of ours that takes its settings as `const volatile` globals then fails to load with
//! "error relocating function: section N not found, referenced by symbol ..." (seen once in
//! CI, on the steering program). So the probe runs here with every signal blocked on the
//! calling thread (process-directed signals go to another thread meanwhile), and a load on a
//! kernel the probe says lacks global data fails with a message that says so.
//!
//! Blocking signals does not cover the other thing `signal_pending()` reports: io_uring's
//! task work (TIF_NOTIFY_SIGNAL), set on a thread whose rings have completions to post. So
//! `ringx serve` calls [`probe_features`] first thing, before any ring exists.

use aya::EbpfLoader;

use crate::error::{Error, Result};

/// Runs aya's feature probe (once per process) with all signals blocked on this thread, and
/// says whether it found BPF global data.
fn probe() -> bool {
    // SAFETY: an all-ones sigset_t is built by sigfillset on a zeroed value; pthread_sigmask
    // only reads `all` and writes `old`, both live locals; the old mask is restored below on
    // the same thread. No memory is shared with another thread.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        let blocked = libc::pthread_sigmask(libc::SIG_BLOCK, &all, &mut old) == 0;
        let f = aya::features().bpf_global_data();
        if blocked {
            libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        }
        f
    }
}

/// Runs aya's feature probe now (a no-op after the first call), so that it happens before the
/// caller creates io_uring rings. Returns whether the kernel has BPF global data.
pub fn probe_features() -> bool {
    probe()
}

/// An `EbpfLoader` for a program that takes `const volatile` globals, after the feature
/// probe ran safely. Errors when the kernel (or the probe) says there is no BPF global data
/// (Linux < 5.2), instead of aya's relocation error.
pub fn loader<'a>() -> Result<EbpfLoader<'a>> {
    if !probe() {
        return Err(Error::Invalid(
            "this kernel refused BPF global data (a read-only map, Linux 5.2 and later), which \
             ringx's BPF programs take their settings in; upgrade the kernel, or if it is 5.2 \
             or later, restart ringx (the probe runs once per process) and report it"
                .into(),
        ));
    }
    Ok(EbpfLoader::new())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_restores_the_signal_mask() {
        // SAFETY: as in probe(): locals only, read back on the same thread.
        let (before, after) = unsafe {
            let mut before: libc::sigset_t = std::mem::zeroed();
            let mut after: libc::sigset_t = std::mem::zeroed();
            libc::pthread_sigmask(libc::SIG_SETMASK, std::ptr::null(), &mut before);
            let _ = probe();
            libc::pthread_sigmask(libc::SIG_SETMASK, std::ptr::null(), &mut after);
            (before, after)
        };
        for sig in 1..32 {
            // SAFETY: sigismember reads initialised sets.
            let (b, a) = unsafe {
                (
                    libc::sigismember(&before, sig),
                    libc::sigismember(&after, sig),
                )
            };
            assert_eq!(b, a, "signal {sig} mask changed by the probe");
        }
    }
}
