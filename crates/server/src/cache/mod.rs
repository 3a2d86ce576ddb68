//! The proxy cache: a memory tier and a disk tier per `[[proxy_cache_path]]`, shared by every
//! zone, with request collapsing (`proxy_cache_lock`) across zones.
//!
//! **Tiers.** Both are `moka` caches bounded by size with least-recently-used eviction and an
//! idle timeout (`inactive`): the memory tier holds whole responses (those up to
//! `memory_size / 8`), the disk tier is an index of files (one per response, written by the
//! cache's writer thread: a zone never writes to disk). A memory miss that the disk index
//! knows opens the file: a small body is read and promoted to memory, a large one is sent
//! from the file as static files are. The disk tier is read back when ringx starts (the
//! writer thread loads the index first), so a restart keeps it.
//!
//! **Collapsing across zones.** The first request to miss on a key takes the key's lock (one
//! of 16 mutex-guarded maps, touched on misses only; a hit takes no lock of ours) and fetches;
//! the others — in any zone — hold their request (its head stays buffered, no thread waits)
//! and look again after 1, 2, 4, 8, then every 16 ms, so they are answered from the entry at
//! most 16 ms after it is stored (nginx waits 500 ms between looks). Cost: one head parse and
//! lookup per look per waiting request; a waiter that waits `lock_timeout` goes to the
//! upstream itself and its response is not stored. A lock whose holder vanished expires
//! after [`LOCK_AGE`].
//!
//! | file | holds |
//! |---|---|
//! | `object.rs` | a stored response, its disk form, a hit written |
//! | `policy.rs` | what may be stored and for how long (Cache-Control, Expires, Vary) |
//! | `fill.rs` | an entry being filled from a response: its lock, what the request asked |
//! | `disk.rs` | the writer thread: files written and removed, the index loaded at start |
//! | `loc.rs` | a location's `proxy_cache`, and the lookup that decides hit, miss or wait |

mod disk;
pub mod fill;
pub mod loc;
pub mod object;
pub mod policy;
mod stats;

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::mpsc::SyncSender;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use moka::notification::RemovalCause;
use moka::policy::EvictionPolicy;

use object::Object;
pub use stats::Stats;

/// How long a fill may hold its key's lock before another request may take it over (nginx's
/// `proxy_cache_lock_age`).
pub const LOCK_AGE: Duration = Duration::from_secs(5);
/// How long a purge waits for the disk writer to reach it (behind the writes queued before).
const PURGE_WAIT: Duration = Duration::from_secs(10);
/// The first read of a disk entry: its record and, for a small entry, its body.
const FIRST_READ: usize = 16 * 1024;
/// The largest record (key, fields) a cache file may have: a response head is at most
/// 64 KiB, a key is bounded by the request head.
const MAX_META: usize = 1 << 20;

/// Reads into `buf` from `at` until it is full or the file ends; returns the bytes read.
fn read_full(f: &File, buf: &mut [u8], at: u64) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read_at(&mut buf[n..], at + n as u64)? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

/// One `[[proxy_cache_path]]`.
pub struct CacheZone {
    pub name: String,
    pub dir: PathBuf,
    mem: moka::sync::Cache<u128, Arc<Object>>,
    /// File sizes by key hash.
    disk: moka::sync::Cache<u128, u64>,
    locks: Box<[Mutex<HashMap<u128, Instant>>]>,
    /// Largest body kept in memory.
    mem_object_max: u64,
    /// Largest body stored at all.
    pub max_object: u64,
    jobs: SyncSender<disk::Job>,
    pub stats: Arc<Stats>,
    sizes: (u64, u64, Duration),
}

/// What a lookup found.
pub enum Found {
    /// In memory.
    Mem(Arc<Object>),
    /// On disk only: its metadata, the open file, where the body starts.
    Disk(Arc<Object>, File, u64),
}

impl Found {
    pub fn object(&self) -> &Arc<Object> {
        match self {
            Found::Mem(o) | Found::Disk(o, _, _) => o,
        }
    }
}

impl CacheZone {
    /// The cache for `[[proxy_cache_path]]` `name` at `dir` with these bounds: the one an
    /// earlier configuration made (a reload keeps its entries and locks), else a new one,
    /// whose writer thread loads what `dir` holds. Caches live as long as the process.
    pub fn get(
        name: &str,
        dir: &Path,
        max_size: u64,
        memory_size: u64,
        max_object: u64,
        inactive: Duration,
    ) -> std::io::Result<&'static CacheZone> {
        let mut all = CACHES.lock().unwrap_or_else(|e| e.into_inner());
        let sizes = (max_size, memory_size, inactive);
        if let Some(z) = all.iter().find(|z| {
            z.name == name && z.dir == dir && z.sizes == sizes && z.max_object == max_object
        }) {
            return Ok(z);
        }
        std::fs::create_dir_all(dir)?;
        let (tx, rx) = std::sync::mpsc::sync_channel(16384);
        let unlink = tx.clone();
        let stats = Arc::new(Stats::default());
        let counted = stats.clone();
        let z: &'static CacheZone = Box::leak(Box::new(CacheZone {
            name: name.to_string(),
            dir: dir.to_path_buf(),
            mem: moka::sync::Cache::builder()
                .max_capacity(memory_size)
                .weigher(|_, o: &Arc<Object>| o.weight())
                .eviction_policy(EvictionPolicy::lru())
                .time_to_idle(inactive)
                .eviction_listener(move |_, _, cause| {
                    if matches!(cause, RemovalCause::Size | RemovalCause::Expired) {
                        counted.mem_evicted.fetch_add(1, Ordering::Relaxed);
                    }
                })
                .build(),
            disk: moka::sync::Cache::builder()
                .max_capacity(max_size)
                .weigher(|_, size: &u64| (*size).min(u64::from(u32::MAX)) as u32)
                .eviction_policy(EvictionPolicy::lru())
                .time_to_idle(inactive)
                .eviction_listener(move |h: Arc<u128>, _, cause| {
                    // A replaced entry's file was replaced too; the others go.
                    if cause != RemovalCause::Replaced {
                        let _ =
                            unlink.try_send(disk::Job::Unlink(*h, cause == RemovalCause::Explicit));
                    }
                })
                .build(),
            locks: (0..16).map(|_| Mutex::new(HashMap::new())).collect(),
            mem_object_max: (memory_size / 8).min(max_object),
            max_object,
            jobs: tx,
            stats,
            sizes,
        }));
        disk::spawn(z, rx)?;
        all.push(z);
        Ok(z)
    }

    /// Finds `key` (hash `h`); for a response that varies, the variant whose fields
    /// `field(name)` gives. Returns the hash the object is stored under with it.
    pub fn lookup(
        &self,
        key: &[u8],
        h: u128,
        field: impl Fn(&str) -> Option<Vec<u8>>,
    ) -> Option<(u128, Found)> {
        let f = self.find(key, h)?;
        if !f.object().marker {
            return Some((h, f));
        }
        let vk = object::variant_key(key, &f.object().vary, field);
        let vh = crate::cache::key_hash(&vk);
        self.find(&vk, vh).map(|f| (vh, f))
    }

    fn find(&self, key: &[u8], h: u128) -> Option<Found> {
        if let Some(o) = self.mem.get(&h) {
            return (*o.key == *key).then_some(Found::Mem(o));
        }
        self.disk.get(&h)?;
        match self.read_file(key, h) {
            Ok(f) => f,
            Err(e) => {
                if e.kind() != std::io::ErrorKind::NotFound {
                    self.stats.disk_errors.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(
                        "cache {}: reading {}: {e}",
                        self.name,
                        self.path(h).display()
                    );
                }
                self.disk.invalidate(&h);
                None
            }
        }
    }

    /// Reads the file of `h`: promoted to memory when its body is small, else sent from the
    /// file. A file of another key (a hash collision) is a miss.
    fn read_file(&self, key: &[u8], h: u128) -> std::io::Result<Option<Found>> {
        let bad = || std::io::Error::new(std::io::ErrorKind::InvalidData, "not a cache file");
        let file = File::open(self.path(h))?;
        // One read for the record and, for a small entry, its body too.
        let mut buf = vec![0u8; FIRST_READ];
        let n = read_full(&file, &mut buf, 0)?;
        buf.truncate(n);
        let meta = buf
            .get(4..8)
            .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")) as usize)
            .ok_or_else(bad)?;
        if 8 + meta > buf.len() {
            if meta > MAX_META || n < FIRST_READ {
                return Err(bad());
            }
            buf.resize(8 + meta, 0);
            let k = read_full(&file, &mut buf[n..], n as u64)?;
            buf.truncate(n + k);
        }
        let (mut o, off) = Object::decode_head(&buf).ok_or_else(bad)?;
        if *o.key != *key {
            return Ok(None);
        }
        let end = off.checked_add(o.body_len).ok_or_else(bad)?;
        if file.metadata()?.len() < end {
            return Err(bad());
        }
        if end as usize > buf.len() && o.body_len <= self.mem_object_max {
            // Small enough for memory: read the rest and promote it.
            let have = buf.len();
            buf.resize(end as usize, 0);
            if read_full(&file, &mut buf[have..], have as u64)? < end as usize - have {
                return Err(bad());
            }
        }
        if end as usize <= buf.len() {
            o.body = buf[off as usize..end as usize].into();
            let o = Arc::new(o);
            if o.body_len <= self.mem_object_max {
                self.mem.insert(h, o.clone());
            }
            return Ok(Some(Found::Mem(o)));
        }
        Ok(Some(Found::Disk(Arc::new(o), file, off)))
    }

    /// Stores `obj` under `h` (and a marker under `primary` when it varies). The key's lock
    /// (on `primary`) is released once the entry can be found: at once for an entry kept in
    /// memory, after the file is written for one kept on disk only.
    pub fn store(
        &self,
        h: u128,
        obj: Arc<Object>,
        marker: Option<(u128, Object)>,
        unlock: Option<u128>,
    ) {
        let bytes = obj.body_len;
        self.stats.stored.fetch_add(1, Ordering::Relaxed);
        self.stats.stored_bytes.fetch_add(bytes, Ordering::Relaxed);
        if let Some((mh, m)) = marker {
            let m = Arc::new(m);
            self.mem.insert(mh, m.clone());
            let _ = self.jobs.try_send(disk::Job::Write(mh, m, None));
        }
        let in_mem = bytes <= self.mem_object_max;
        if in_mem {
            self.mem.insert(h, obj.clone());
        }
        let unlock_after = if in_mem {
            if let Some(p) = unlock {
                self.unlock(p);
            }
            None
        } else {
            unlock
        };
        if let Err(e) = self.jobs.try_send(disk::Job::Write(h, obj, unlock_after)) {
            // The writer is behind: the entry stays in memory only (or is not stored).
            self.stats.disk_errors.fetch_add(1, Ordering::Relaxed);
            use std::sync::mpsc::TrySendError::{Disconnected, Full};
            if let Full(disk::Job::Write(_, _, Some(p)))
            | Disconnected(disk::Job::Write(_, _, Some(p))) = e
            {
                self.unlock(p);
            }
        }
    }

    /// Takes the lock of `h` for a fill; false when another fill holds it (for less than
    /// [`LOCK_AGE`]).
    pub fn try_lock(&self, h: u128, now: Instant) -> bool {
        let mut m = self.shard(h);
        match m.get(&h) {
            Some(t) if now.saturating_duration_since(*t) < LOCK_AGE => false,
            _ => {
                m.insert(h, now);
                true
            }
        }
    }

    pub fn unlock(&self, h: u128) {
        self.shard(h).remove(&h);
    }

    pub fn is_locked(&self, h: u128) -> bool {
        self.shard(h).contains_key(&h)
    }

    fn shard(&self, h: u128) -> std::sync::MutexGuard<'_, HashMap<u128, Instant>> {
        self.locks[(h as usize) & (self.locks.len() - 1)]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Removes `key` from both tiers (and its file); true when it was there.
    /// Called off the zones (the admin thread): the purge is queued behind any write of the
    /// entry still queued (`disk::Job::Forget`) and answered once the writer did it, so a
    /// write that was in the queue cannot bring the entry back after the answer.
    pub fn purge(&self, key: &[u8]) -> bool {
        let h = crate::cache::key_hash(key);
        let in_memory = self.mem.contains_key(&h);
        self.mem.invalidate(&h);
        let there = self.forget_on_disk(Some(h)) > 0 || in_memory;
        if there {
            self.stats.purged.fetch_add(1, Ordering::Relaxed);
        }
        there
    }

    /// Removes every entry; returns how many there were.
    pub fn purge_all(&self) -> u64 {
        self.mem.run_pending_tasks();
        let in_memory = self.mem.entry_count();
        self.mem.invalidate_all();
        let n = in_memory.max(self.forget_on_disk(None));
        self.stats.purged.fetch_add(n, Ordering::Relaxed);
        n
    }

    /// Has the writer thread drop `h` (None: everything) from the disk index behind the
    /// writes queued before, and waits for it: how many entries left. A writer that does not
    /// answer within [`PURGE_WAIT`] (a disk that hangs) or is gone: the index is purged here
    /// as well, and the queued purge still follows the writes.
    fn forget_on_disk(&self, h: Option<u128>) -> u64 {
        let (tx, rx) = std::sync::mpsc::channel();
        if self.jobs.send(disk::Job::Forget(h, tx)).is_ok() {
            if let Ok(n) = rx.recv_timeout(PURGE_WAIT) {
                return n;
            }
            tracing::warn!(
                "cache {}: the disk writer did not take the purge within {PURGE_WAIT:?}; \
                 purged from the index now, its files follow when the writer catches up",
                self.name
            );
        }
        disk::Tier::forget(self, h)
    }

    /// Entries and bytes in each tier (memory, disk), after pending maintenance.
    pub fn usage(&self) -> ((u64, u64), (u64, u64)) {
        self.mem.run_pending_tasks();
        self.disk.run_pending_tasks();
        (
            (self.mem.entry_count(), self.mem.weighted_size()),
            (self.disk.entry_count(), self.disk.weighted_size()),
        )
    }

    /// The file of `h`: `DIR/ab/<32 hex digits>`.
    pub fn path(&self, h: u128) -> PathBuf {
        let hex = format!("{h:032x}");
        self.dir.join(&hex[..2]).join(hex)
    }

    /// Every cache made so far (the admin port's purge, `/metrics`).
    pub fn all() -> Vec<&'static CacheZone> {
        CACHES.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The cache named `name` (the newest, if a reload changed its bounds).
    pub fn named(name: &str) -> Option<&'static CacheZone> {
        Self::all().into_iter().rev().find(|z| z.name == name)
    }
}

impl disk::Tier for CacheZone {
    fn name(&self) -> &str {
        &self.name
    }
    fn dir(&self) -> &Path {
        &self.dir
    }
    fn path(&self, h: u128) -> PathBuf {
        CacheZone::path(self, h)
    }
    fn indexed(&self, h: u128, size: u64) {
        self.disk.insert(h, size);
        // On this thread, not a zone's: the bound holds as soon as a file is added.
        self.disk.run_pending_tasks();
    }
    fn forget(&self, h: Option<u128>) -> u64 {
        let n = match h {
            Some(h) => u64::from(self.disk.remove(&h).is_some()),
            None => {
                self.disk.run_pending_tasks();
                let n = self.disk.entry_count();
                self.disk.invalidate_all();
                n
            }
        };
        self.disk.run_pending_tasks();
        n
    }
    fn unlock(&self, h: u128) {
        CacheZone::unlock(self, h)
    }
    fn stats(&self) -> &Stats {
        &self.stats
    }
}

/// The hash a cache entry is found by, and its file named after: the same in every process
/// (unlike the limits' keys, which are seeded per process), so a restart finds the files of
/// the one before. A collision costs nothing but a miss: a hit compares the whole key.
pub fn key_hash(key: &[u8]) -> u128 {
    xxhash_rust::xxh3::xxh3_128(key)
}

/// Every cache made, found by name, path and bounds.
static CACHES: Mutex<Vec<&'static CacheZone>> = Mutex::new(Vec::new());

#[cfg(test)]
mod tests;
