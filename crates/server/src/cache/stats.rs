//! A cache's event counters (one set per cache, shared by the zones: these count stores,
//! evictions and errors, which are rare; the per-request statuses are per zone).

use std::sync::atomic::AtomicU64;

/// Events of a cache, for `/metrics`.
#[derive(Default)]
pub struct Stats {
    /// Responses stored, and their bytes.
    pub stored: AtomicU64,
    pub stored_bytes: AtomicU64,
    /// Entries that left a tier for room (least recently used) or for idleness.
    pub mem_evicted: AtomicU64,
    pub disk_evicted: AtomicU64,
    /// Disk reads and writes that failed (the entry is then a miss).
    pub disk_errors: AtomicU64,
    /// Entries removed through the admin port.
    pub purged: AtomicU64,
}
