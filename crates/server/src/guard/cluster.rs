//! Limit zones with `scope = "cluster"`: the limit holds across the hosts of `[cluster]`
//! (issue 42), as Envoy's local + global rate limits and Kong's Redis policy do it. A
//! request never waits on Redis: each host decides from its own table (`limit.rs`), as a
//! local zone does, and notes the key; the sync thread (`cluster_sync.rs`) sends the keys
//! seen to Redis in one command per zone every `cluster_sync` (20 ms by default) and raises
//! the table's state by what the other hosts did (`cluster_wire.rs`).
//!
//! While a zone cannot sync (Redis gone, or slower than the budget), it falls back to
//! `cluster_fallback`: `local` (this host's share: the rate, burst and `max` divided by the
//! hosts last seen alive), `open` (no limit) or `closed` (refuse); logged once each way and
//! counted on `/metrics`; the next sync that succeeds ends it.
//!
//! A zone's state is one [`ClusterZone`] per limit table for the process's life (a reload
//! keeps it, as it keeps the table). What the request path adds to it: a few relaxed loads
//! ([`ClusterZone::enforce`]) and one uncontended lock of the zone thread's own shard, where
//! the key is noted and its budget for the sync period checked ([`ClusterZone::admit`]).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Duration;

use ringx_config::guard::{ClusterLimit, Fallback};

use super::cluster_wire::Kind;
use super::limit::{RateVerdict, Table};

/// Shards of the keys seen (a zone thread locks its own).
const SHARDS: usize = 16;
/// Keys one shard notes between two syncs at most; more are decided locally only.
const SEEN_MAX: usize = 8192;

/// Keys taken for a sync: local hash → (stable hash, count).
pub type Seen = HashMap<u64, (u128, u32), foldhash::fast::RandomState>;

/// What a shard noted of a key.
#[derive(Clone, Copy)]
struct Note {
    stable: u128,
    /// Requests not yet taken for a sync.
    unsent: u32,
    /// `limit_req`: admitted since the zone's last view of the cluster (a sync's reply).
    since_view: u32,
}

type Notes = HashMap<u64, Note, foldhash::fast::RandomState>;
type Outage = HashMap<u64, u128, foldhash::fast::RandomState>;

/// The hosts that synced lately (every zone's sync says; 0: never known, taken as 1).
static HOSTS: AtomicU32 = AtomicU32::new(0);

/// The hosts alive as last known, at least 1.
pub fn hosts() -> u32 {
    HOSTS.load(Relaxed).max(1)
}

pub fn set_hosts(n: u32) {
    HOSTS.store(n, Relaxed);
}

/// Held by the tests that set the hosts alive (a process-wide number).
#[cfg(test)]
pub(crate) static TEST_HOSTS: Mutex<()> = Mutex::new(());

/// How a cluster zone decides now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Enforce {
    /// Synced with Redis: the whole limit, with the other hosts' use in the table.
    Cluster,
    /// Cannot sync, `cluster_fallback = "local"`: this host's share, 1/hosts of the limit.
    Share(u32),
    Open,
    Closed,
}

/// One cluster zone: its table, settings, state and counters.
pub struct ClusterZone {
    pub kind: Kind,
    pub name: String,
    pub table: &'static Table,
    /// `limit_req`: ns a request takes of the rate (the configuration's, kept at reloads).
    pub interval_ns: AtomicU64,
    /// The sync period (ns).
    pub sync_every_ns: AtomicU64,
    fallback: AtomicU8,
    /// Falling back now (the last sync failed).
    falling_back: AtomicBool,
    /// The hosts whose shares the zone enforces while it falls back, fixed as it fell back
    /// (`cluster_sync.rs`), so that another zone's sync changing the hosts' count cannot
    /// change this zone's share; 0: the hosts alive now.
    share_of: AtomicU32,
    shards: Box<[Mutex<Notes>]>,
    /// `limit_req` keys admitted on this host's share while the zone fell back (local hash
    /// → stable hash), sharded as `shards`: charged to Redis when it is back
    /// (`cluster_sync.rs`), or the cluster would grant their burst again.
    outage: Box<[Mutex<Outage>]>,
    /// The shards (zone threads) that have used the zone, one bit each.
    threads: AtomicU32,
    /// When the zone last had a view of the cluster: a sync's reply (ns, as `limit::nanos`).
    view_at: AtomicU64,
    pub stats: Stats,
}

/// What `/metrics` shows of a zone.
#[derive(Default)]
pub struct Stats {
    pub syncs_ok: AtomicU64,
    pub syncs_failed: AtomicU64,
    /// Times the zone went to its fallback.
    pub fallbacks: AtomicU64,
    pub keys_sent: AtomicU64,
    /// Keys not synced for want of room (decided locally only).
    pub keys_dropped: AtomicU64,
}

fn fallback_code(f: Fallback) -> u8 {
    match f {
        Fallback::Local => 0,
        Fallback::Open => 1,
        Fallback::Closed => 2,
    }
}

impl ClusterZone {
    /// The cluster zone of `table` (made on first use), with this configuration's settings.
    pub fn get(
        kind: Kind,
        table: &'static Table,
        interval: Duration,
        c: ClusterLimit,
    ) -> &'static ClusterZone {
        let mut all = ZONES.lock().unwrap_or_else(|e| e.into_inner());
        let z = match all.iter().find(|z| std::ptr::eq(z.table, table)) {
            Some(z) => *z,
            None => {
                let z: &'static ClusterZone = Box::leak(Box::new(ClusterZone::new(kind, table)));
                all.push(z);
                z
            }
        };
        z.interval_ns.store(interval.as_nanos() as u64, Relaxed);
        z.sync_every_ns
            .store(c.sync_every.as_nanos() as u64, Relaxed);
        z.fallback.store(fallback_code(c.fallback), Relaxed);
        z
    }

    /// Every cluster zone made so far.
    pub fn all() -> Vec<&'static ClusterZone> {
        ZONES.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn new(kind: Kind, table: &'static Table) -> ClusterZone {
        ClusterZone {
            kind,
            name: table.name.clone(),
            table,
            interval_ns: AtomicU64::new(0),
            sync_every_ns: AtomicU64::new(20_000_000),
            fallback: AtomicU8::new(0),
            falling_back: AtomicBool::new(false),
            share_of: AtomicU32::new(0),
            shards: (0..SHARDS).map(|_| Mutex::new(Notes::default())).collect(),
            outage: (0..SHARDS).map(|_| Mutex::new(Outage::default())).collect(),
            threads: AtomicU32::new(0),
            view_at: AtomicU64::new(super::limit::nanos(std::time::Instant::now())),
            stats: Stats::default(),
        }
    }

    /// How a request is decided now.
    #[inline]
    pub fn enforce(&self) -> Enforce {
        if !self.falling_back.load(Relaxed) {
            return Enforce::Cluster;
        }
        match self.fallback.load(Relaxed) {
            1 => Enforce::Open,
            2 => Enforce::Closed,
            _ => Enforce::Share(match self.share_of.load(Relaxed) {
                0 => hosts(),
                n => n,
            }),
        }
    }

    /// Fixes the hosts whose shares the zone enforces while it falls back (0: the hosts
    /// alive, whatever their number then).
    pub fn set_share_of(&self, hosts: u32) {
        self.share_of.store(hosts, Relaxed);
    }

    pub fn falling_back(&self) -> bool {
        self.falling_back.load(Relaxed)
    }

    /// Enters or leaves the fallback; true when that is a change.
    pub fn set_falling_back(&self, on: bool) -> bool {
        self.falling_back.swap(on, Relaxed) != on
    }

    pub fn fallback(&self) -> Fallback {
        match self.fallback.load(Relaxed) {
            1 => Fallback::Open,
            2 => Fallback::Closed,
            _ => Fallback::Local,
        }
    }

    /// Notes one request for the key of hashes `local` (this host's table) and `stable` (the
    /// same on every host): `limit_conn`'s, whatever its verdict.
    pub fn seen(&self, local: u64, stable: u128) {
        let i = self.shard();
        let mut s = self.shards[i].lock().unwrap_or_else(|e| e.into_inner());
        self.note(&mut s, local, stable);
    }

    /// `limit_req` while synced: `decide` (the table's verdict) unless this zone thread has
    /// admitted its budget for the key since the zone's last view of the cluster (the last
    /// sync's reply, [`ClusterZone::new_view`]); an admitted request is noted. `now` is ns as `limit::nanos`. The budget is what the rate gives in the sync
    /// period so far plus this thread's share
    /// of the burst (the burst divided by the hosts alive and by the zone threads that serve
    /// the zone): without it, every host would grant the whole burst of a key whose bucket
    /// is full before any of them heard of the others, the hosts' count times the burst.
    /// A host alone still gets the whole burst, over a few sync periods.
    pub fn admit(
        &self,
        (local, stable): (u64, u128),
        now: u64,
        burst: u32,
        decide: impl FnOnce() -> RateVerdict,
    ) -> RateVerdict {
        let i = self.shard();
        let threads = self.threads.load(Relaxed).count_ones().max(1);
        let every = self.sync_every_ns.load(Relaxed);
        // The time since the last view, at least a sync period: a sync that is late (a slow
        // Redis, a busy machine) does not hold the rate back.
        let period = now.saturating_sub(self.view_at.load(Relaxed)).max(every);
        let per_period = period.div_ceil(self.interval_ns.load(Relaxed).max(1));
        let share = burst
            .saturating_add(1)
            .div_ceil(hosts().saturating_mul(threads));
        let budget = per_period.saturating_add(u64::from(share));
        let mut s = self.shards[i].lock().unwrap_or_else(|e| e.into_inner());
        if s.get(&local)
            .is_some_and(|e| u64::from(e.since_view) >= budget)
        {
            return RateVerdict::Refuse(Duration::from_nanos(every));
        }
        let v = decide();
        if matches!(v, RateVerdict::Pass | RateVerdict::Delay(_)) {
            self.note(&mut s, local, stable);
        }
        v
    }

    /// `limit_req` while falling back to the shares: a request admitted for the key of
    /// hashes `local` and `stable` on this host's share, kept to be charged when Redis is back.
    pub fn share_admitted(&self, local: u64, stable: u128) {
        let i = shard();
        let mut o = self.outage[i].lock().unwrap_or_else(|e| e.into_inner());
        if o.len() < SEEN_MAX {
            o.insert(local, stable);
        } else if !o.contains_key(&local) {
            self.stats.keys_dropped.fetch_add(1, Relaxed);
        }
    }

    /// Takes the keys admitted on this host's share since the zone fell back.
    pub fn take_outage(&self) -> Vec<(u64, u128)> {
        let mut all = Vec::new();
        for sh in self.outage.iter() {
            let mut o = sh.lock().unwrap_or_else(|e| e.into_inner());
            all.extend(o.drain());
        }
        all
    }

    fn note(&self, s: &mut Notes, local: u64, stable: u128) {
        if let Some(e) = s.get_mut(&local) {
            e.unsent = e.unsent.saturating_add(1);
            e.since_view = e.since_view.saturating_add(1);
        } else if s.len() < SEEN_MAX {
            let n = Note {
                stable,
                unsent: 1,
                since_view: 1,
            };
            s.insert(local, n);
        } else {
            self.stats.keys_dropped.fetch_add(1, Relaxed);
        }
    }

    /// This thread's shard, counted among the zone's threads.
    fn shard(&self) -> usize {
        let i = shard();
        let bit = 1u32 << i;
        if self.threads.load(Relaxed) & bit == 0 {
            self.threads.fetch_or(bit, Relaxed);
        }
        i
    }

    /// Takes what the shards noted since the last call, into `into` (counts added up).
    pub fn take_seen(&self, into: &mut Seen, cap: usize) {
        for sh in self.shards.iter() {
            let mut s = sh.lock().unwrap_or_else(|e| e.into_inner());
            s.retain(|&local, e| {
                if e.unsent > 0 {
                    if let Some(t) = into.get_mut(&local) {
                        t.1 = t.1.saturating_add(e.unsent);
                    } else if into.len() < cap {
                        into.insert(local, (e.stable, e.unsent));
                    } else {
                        self.stats.keys_dropped.fetch_add(1, Relaxed);
                    }
                    e.unsent = 0;
                }
                e.since_view > 0
            });
        }
    }

    /// A sync's reply is in (at `now`, ns as `limit::nanos`): the zone threads' budgets
    /// ([`ClusterZone::admit`]) start again.
    pub fn new_view(&self, now: u64) {
        self.view_at.store(now, Relaxed);
        for sh in self.shards.iter() {
            let mut s = sh.lock().unwrap_or_else(|e| e.into_inner());
            s.retain(|_, e| {
                e.since_view = 0;
                e.unsent > 0
            });
        }
    }
}

/// The cluster zones, for the process's life.
static ZONES: Mutex<Vec<&'static ClusterZone>> = Mutex::new(Vec::new());

/// This thread's shard (zone threads get one each, in the order they first note a key).
fn shard() -> usize {
    use std::cell::Cell;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    thread_local! {
        static MINE: Cell<usize> = const { Cell::new(usize::MAX) };
    }
    MINE.with(|m| {
        if m.get() == usize::MAX {
            m.set(NEXT.fetch_add(1, Relaxed) as usize % SHARDS);
        }
        m.get()
    })
}

/// The cluster zones' lines of `/metrics` (none without one).
pub fn render_metrics() -> String {
    let zones = ClusterZone::all();
    if zones.is_empty() {
        return String::new();
    }
    let mut s = String::new();
    let fam = |s: &mut String, name: &str, kind: &str, help: &str| {
        let _ = write!(s, "# HELP {name} {help}\n# TYPE {name} {kind}\n");
    };
    let label = |z: &ClusterZone| format!("limit=\"{}\",name=\"{}\"", z.kind.name(), z.name);
    fam(
        &mut s,
        "ringx_limit_cluster_sync_total",
        "counter",
        "Syncs of a scope = \"cluster\" limit zone with Redis, by result.",
    );
    for z in &zones {
        let l = label(z);
        let _ = writeln!(
            s,
            "ringx_limit_cluster_sync_total{{{l},result=\"ok\"}} {}\n\
             ringx_limit_cluster_sync_total{{{l},result=\"error\"}} {}",
            z.stats.syncs_ok.load(Relaxed),
            z.stats.syncs_failed.load(Relaxed)
        );
    }
    fam(
        &mut s,
        "ringx_limit_cluster_fallback_total",
        "counter",
        "Times a cluster limit zone could not sync and fell back to cluster_fallback.",
    );
    for z in &zones {
        let _ = writeln!(
            s,
            "ringx_limit_cluster_fallback_total{{{}}} {}",
            label(z),
            z.stats.fallbacks.load(Relaxed)
        );
    }
    fam(
        &mut s,
        "ringx_limit_cluster_falling_back",
        "gauge",
        "Whether a cluster limit zone is on its fallback now (1) or synced (0).",
    );
    for z in &zones {
        let _ = writeln!(
            s,
            "ringx_limit_cluster_falling_back{{{}}} {}",
            label(z),
            u8::from(z.falling_back())
        );
    }
    fam(
        &mut s,
        "ringx_limit_cluster_keys_total",
        "counter",
        "Keys of cluster limit zones sent to Redis (sent), or decided locally for want of \
         room (dropped).",
    );
    for z in &zones {
        let l = label(z);
        let _ = writeln!(
            s,
            "ringx_limit_cluster_keys_total{{{l},result=\"sent\"}} {}\n\
             ringx_limit_cluster_keys_total{{{l},result=\"dropped\"}} {}",
            z.stats.keys_sent.load(Relaxed),
            z.stats.keys_dropped.load(Relaxed)
        );
    }
    fam(
        &mut s,
        "ringx_limit_cluster_hosts",
        "gauge",
        "Hosts that synced cluster limits within the last 3 s, as last known (shares divide \
         by it).",
    );
    let _ = writeln!(s, "ringx_limit_cluster_hosts {}", HOSTS.load(Relaxed));
    s
}
