//! What the library did, counted in process-wide atomics and written at exit to
//! `RINGX_PRELOAD_STATS/ringx-preload.PID` (one `name value` per line) when that is set.
//! The port tables' own counters (table hits, dynamic searches, hash evaluations, kernel
//! fallbacks; `ringx_steer::ports::PortCounters`) are summed over the zones into the same file.

use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug, Clone, Copy)]
pub enum Counter {
    /// Reuseport TCP listeners put in a steered group.
    ListenersSteered,
    /// Listeners a thread took for its CPU.
    ListenerClaims,
    /// Threads pinned to a CPU of their own (`RINGX_PRELOAD_PIN=1`).
    ThreadsPinned,
    /// Listeners left to the kernel's hash: the thread may run on several CPUs.
    ClaimsUnpinned,
    /// Listeners left to the kernel's hash: a BPF call failed.
    ClaimErrors,
    /// `connect` calls bound to a table port.
    ConnectsSteered,
    /// `connect` to a table destination on a socket the program had bound.
    ConnectsPreBound,
    /// `connect` to a table destination from a thread on a CPU that is no zone's.
    ConnectsOffZone,
    /// `bind` of a table port refused (another socket holds it); another port was tried.
    BindRetries,
    /// `connect` to a table destination left to the kernel's port (no port, or binds refused).
    ConnectsFallback,
    /// Ports given back at `close`.
    PortsReleased,
    /// Descriptors beyond the state table (never steered).
    FdTooHigh,
}

const N: usize = Counter::FdTooHigh as usize + 1;

const NAMES: [&str; N] = [
    "listeners_steered",
    "listener_claims",
    "threads_pinned",
    "claims_unpinned",
    "claim_errors",
    "connects_steered",
    "connects_prebound",
    "connects_off_zone",
    "bind_retries",
    "connects_fallback",
    "ports_released",
    "fd_too_high",
];

static COUNTS: [AtomicU64; N] = [const { AtomicU64::new(0) }; N];

pub fn add(c: Counter) {
    // Relaxed: independent counters, read once at exit.
    COUNTS[c as usize].fetch_add(1, Ordering::Relaxed);
}

pub fn get(c: Counter) -> u64 {
    COUNTS[c as usize].load(Ordering::Relaxed)
}

/// Whether any counter moved.
pub fn any() -> bool {
    COUNTS.iter().any(|c| c.load(Ordering::Relaxed) != 0)
}

/// The counters as `name value` lines, then `extra` (the port tables' counters).
pub fn render(extra: &[(&str, u64)]) -> String {
    let mut out = String::new();
    for (i, name) in NAMES.iter().enumerate() {
        out.push_str(&format!("{name} {}\n", COUNTS[i].load(Ordering::Relaxed)));
    }
    for (name, v) in extra {
        out.push_str(&format!("{name} {v}\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_counter_has_a_name() {
        assert_eq!(NAMES.len(), N);
        add(Counter::FdTooHigh);
        let r = render(&[("table_hits", 7)]);
        assert!(
            r.contains("fd_too_high 1\n") || r.contains("fd_too_high "),
            "{r}"
        );
        assert!(r.ends_with("table_hits 7\n"));
        assert_eq!(r.lines().count(), N + 1);
    }
}
