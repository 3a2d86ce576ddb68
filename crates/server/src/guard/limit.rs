//! The shared state of `limit_req` and `limit_conn`, and why it is shared.
//!
//! ringx shares nothing between zones on the request path, but a per-client limit must hold
//! across them: a client's connections land on different zones (the NIC's RSS hash and the
//! reuseport steering spread a client's source ports over every CPU), so per-zone limits
//! would let a client have `zones ×` the rate. nginx keeps this state in shared memory under a
//! mutex; HAProxy's stick tables take a lock per shard. Here each limit zone is one fixed-size
//! table of atomics that every zone reads and writes **without a lock**:
//!
//! * A key's state is one 64-bit word next to its 64-bit tag (the key's hash): for
//!   `limit_req` the *theoretical arrival time* of the generic cell rate algorithm (GCRA, the
//!   leaky bucket nginx runs, kept as one timestamp), advanced by one compare-and-swap per
//!   request; for `limit_conn` a counter of requests in progress.
//! * Tags live in buckets of four slots, one 64-byte cache line: a lookup reads one line.
//!   A key with no slot takes an empty one, or evicts the slot of its bucket whose state is
//!   oldest (nginx also drops the least recently used state when its zone is full).
//!
//! **Cost.** One CAS on one cache line per limited request. Lines move between cores only
//! when two zones serve the same key at the same moment (one client's parallel
//! connections), which costs a cache-line transfer (~100 ns) on a request that already costs
//! microseconds; different clients' keys fall on different lines.
//!
//! **Error bound.** The algorithm is exact across zones: every zone sees the same word, so a
//! client gets `rate × t + burst + 1` requests in any window of `t`, however its connections
//! are spread. Two things loosen it, never tighten it: an evicted key starts afresh (a zone
//! too small for its clients forgets the least recent ones, as nginx's does), and a slot
//! taken over while another zone is updating it for the old key may lose that one update (one
//! request per eviction race). A key is never refused for another key's requests: tags are
//! 64-bit hashes with a per-process seed.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Slots per bucket (one cache line of tag/state pairs).
const WAYS: usize = 4;

/// `limit_conn`: this host's requests in progress, in the low half of the state (the high
/// half is the other hosts' of a cluster zone).
const LOCAL: u64 = u32::MAX as u64;

#[repr(C, align(64))]
struct Bucket {
    slots: [Slot; WAYS],
}

struct Slot {
    /// The key's hash with the low bit set; 0: empty.
    tag: AtomicU64,
    /// GCRA: the theoretical arrival time (ns since [`epoch`]); connections: the count.
    state: AtomicU64,
}

/// One table of key states.
pub struct Table {
    buckets: Box<[Bucket]>,
    mask: usize,
    /// `limit_req_zone` or `limit_conn_zone`, its name, and its key count: what a reload
    /// must match to keep the state.
    pub kind: &'static str,
    pub name: String,
    keys: usize,
}

/// Nanoseconds since the process's first use of the limits: GCRA times fit a u64 and 0 is
/// "long ago".
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(|| Instant::now() - Duration::from_secs(1))
}

pub fn nanos(t: Instant) -> u64 {
    t.saturating_duration_since(epoch()).as_nanos() as u64
}

/// What `limit_req` decides for one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RateVerdict {
    Pass,
    /// Over the rate but within the burst: serve it after this long (not with `nodelay`).
    Delay(Duration),
    /// Over the burst: refuse; a request would pass again after this long.
    Refuse(Duration),
}

impl Table {
    fn new(kind: &'static str, name: &str, keys: usize) -> Table {
        let nb = (keys / WAYS).max(1).next_power_of_two();
        let buckets = (0..nb)
            .map(|_| Bucket {
                slots: std::array::from_fn(|_| Slot {
                    tag: AtomicU64::new(0),
                    state: AtomicU64::new(0),
                }),
            })
            .collect();
        Table {
            buckets,
            mask: nb - 1,
            kind,
            name: name.to_string(),
            keys,
        }
    }

    /// The table named `name` of `kind` with room for `keys`: the one an earlier
    /// configuration made (so a reload keeps every client's state), else a new one. Tables
    /// live as long as the process; one is made per distinct (kind, name, size).
    pub fn get(kind: &'static str, name: &str, keys: usize) -> &'static Table {
        static ALL: Mutex<Vec<&'static Table>> = Mutex::new(Vec::new());
        let mut all = ALL.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(t) = all
            .iter()
            .find(|t| t.kind == kind && t.name == name && t.keys == keys)
        {
            return t;
        }
        let t: &'static Table = Box::leak(Box::new(Table::new(kind, name, keys)));
        all.push(t);
        t
    }

    /// A fresh table, owned by the caller (tests).
    #[cfg(test)]
    pub fn standalone(keys: usize) -> &'static Table {
        Box::leak(Box::new(Table::new("test", "t", keys)))
    }

    fn bucket(&self, hash: u64) -> &Bucket {
        // The low bits make the tag; the bucket comes from the high ones.
        &self.buckets[(hash >> 32) as usize & self.mask]
    }

    /// The slot holding `hash`, or one taken over for it; `evictable` says whether a slot's
    /// state may be dropped (for connections: only when none is in progress).
    fn slot(&self, hash: u64, evictable: impl Fn(u64) -> bool) -> Option<(usize, &Slot)> {
        let tag = hash | 1;
        let b = self.bucket(hash);
        for _ in 0..4 {
            if let Some(i) = b
                .slots
                .iter()
                .position(|s| s.tag.load(Ordering::Relaxed) == tag)
            {
                return Some((i, &b.slots[i]));
            }
            // The empty slot, else the one with the oldest state that may go.
            let (i, victim) = b
                .slots
                .iter()
                .enumerate()
                .filter(|(_, s)| {
                    s.tag.load(Ordering::Relaxed) == 0 || evictable(s.state.load(Ordering::Relaxed))
                })
                .min_by_key(|(_, s)| {
                    if s.tag.load(Ordering::Relaxed) == 0 {
                        0
                    } else {
                        s.state.load(Ordering::Relaxed).saturating_add(1)
                    }
                })?;
            let old = victim.tag.load(Ordering::Relaxed);
            // Relaxed: the tag and the state are each their own atomic and no other memory
            // is published through them; a racing zone that sees the new tag with the old
            // key's state is the one-update error the module docs bound.
            if victim
                .tag
                .compare_exchange(old, tag, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
            {
                victim.state.store(0, Ordering::Relaxed);
                return Some((i, victim));
            }
            // Another zone took that slot first (maybe for this very key): look again.
        }
        None
    }

    /// `limit_req` for the key `hash` at `now`: one request costs `interval`; `burst`
    /// requests may be ahead of the rate.
    pub fn rate(
        &self,
        hash: u64,
        now: u64,
        interval: u64,
        burst: u32,
        nodelay: bool,
    ) -> RateVerdict {
        let tolerance = interval.saturating_mul(u64::from(burst));
        let Some((_, s)) = self.slot(hash, |tat| tat <= now) else {
            // Four clients of this bucket are all over their rate right now: the newcomer is
            // not limited by their state (limits only ever loosen, see the module docs).
            return RateVerdict::Pass;
        };
        let mut tat = s.state.load(Ordering::Relaxed);
        loop {
            let base = tat.max(now);
            if base - now > tolerance {
                return RateVerdict::Refuse(Duration::from_nanos(base - now - tolerance));
            }
            match s.state.compare_exchange_weak(
                tat,
                base + interval,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) if base > now && !nodelay => {
                    return RateVerdict::Delay(Duration::from_nanos(base - now))
                }
                Ok(_) => return RateVerdict::Pass,
                Err(cur) => tat = cur,
            }
        }
    }

    /// `limit_conn`: counts one more request in progress for `hash`, unless `max` are (with
    /// `remote`, counting those other hosts have in progress: [`Table::set_remote`]).
    /// None: over the limit (or no slot could be had: refused, as nginx does when its zone
    /// is full).
    pub fn enter(&'static self, hash: u64, max: u32, remote: bool) -> Option<ConnSlot> {
        let (i, s) = self.slot(hash, |n| n & LOCAL == 0)?;
        let prev = s.state.fetch_add(1, Ordering::Relaxed);
        let others = if remote { prev >> 32 } else { 0 };
        if (prev & LOCAL) + others >= u64::from(max) {
            s.state.fetch_sub(1, Ordering::Relaxed);
            return None;
        }
        Some(ConnSlot {
            table: self,
            bucket: (hash >> 32) as usize & self.mask,
            way: i as u8,
            tag: hash | 1,
        })
    }

    /// A cluster `limit_conn`: the requests other hosts have in progress for `hash`, as Redis
    /// last said (kept in the state's high 32 bits, beside this host's count).
    pub fn set_remote(&self, hash: u64, others: u32) {
        let Some((_, s)) = self.slot(hash, |n| n & LOCAL == 0) else {
            return;
        };
        let _ = s
            .state
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                Some((u64::from(others) << 32) | (n & LOCAL))
            });
    }

    /// This host's requests in progress for `hash` (0 when it has no slot).
    pub fn local_count(&self, hash: u64) -> u32 {
        self.find(hash)
            .map_or(0, |s| (s.state.load(Ordering::Relaxed) & LOCAL) as u32)
    }

    /// A cluster `limit_req`: the cluster's theoretical arrival time for `hash` (ns, as
    /// [`nanos`]) learned from Redis; this host's state becomes at least that.
    pub fn raise(&self, hash: u64, now: u64, tat: u64) {
        if let Some((_, s)) = self.slot(hash, |t| t <= now) {
            s.state.fetch_max(tat, Ordering::Relaxed);
        }
    }

    /// A `limit_req` key's theoretical arrival time (ns, as [`nanos`]; 0 when it has no
    /// slot).
    pub fn tat(&self, hash: u64) -> u64 {
        self.find(hash)
            .map_or(0, |s| s.state.load(Ordering::Relaxed))
    }

    /// The slot of `hash`, without taking one.
    fn find(&self, hash: u64) -> Option<&Slot> {
        self.bucket(hash)
            .slots
            .iter()
            .find(|s| s.tag.load(Ordering::Relaxed) == hash | 1)
    }

    /// Counts one event of `hash` in a window of `within` ms starting at its first event;
    /// returns the count in the current window (escalation: refusals per client address).
    pub fn count_in_window(&self, hash: u64, now_ms: u64, within_ms: u64) -> u64 {
        // The state packs the window's start (ms, high 40 bits) and the count (low 24).
        const BITS: u32 = 24;
        const MAX: u64 = (1 << BITS) - 1;
        let expired = |st: u64| now_ms.saturating_sub(st >> BITS) > within_ms;
        let Some((_, s)) = self.slot(hash, expired) else {
            return 0;
        };
        let mut cur = s.state.load(Ordering::Relaxed);
        loop {
            let next = if cur == 0 || expired(cur) {
                (now_ms << BITS) | 1
            } else {
                cur + u64::from(cur & MAX < MAX)
            };
            match s
                .state
                .compare_exchange_weak(cur, next, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return next & MAX,
                Err(c) => cur = c,
            }
        }
    }

    #[cfg(test)]
    fn count(&self, hash: u64) -> u64 {
        self.find(hash)
            .map_or(0, |s| s.state.load(Ordering::Relaxed))
    }
}

/// A request counted by `limit_conn`; dropping it (the response is complete, or the
/// connection went away) counts it out.
pub struct ConnSlot {
    table: &'static Table,
    bucket: usize,
    way: u8,
    tag: u64,
}

impl Drop for ConnSlot {
    fn drop(&mut self) {
        let s = &self.table.buckets[self.bucket].slots[self.way as usize];
        // A slot is only taken over when its count is zero, and ours is not: the tag is ours.
        if s.tag.load(Ordering::Relaxed) == self.tag {
            let _ = s
                .state
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                    (n & LOCAL != 0).then(|| n - 1)
                });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// 10 r/s, burst 0: one request per 100 ms passes; the rest are refused.
    #[test]
    fn gcra_passes_exactly_the_rate() {
        let t = Table::standalone(64);
        let mut passed = 0;
        for i in 0..1000u64 {
            // A request every 10 ms for 10 s.
            if t.rate(7, i * 10 * MS, 100 * MS, 0, true) == RateVerdict::Pass {
                passed += 1;
            }
        }
        assert_eq!(passed, 100);
    }

    /// A burst of 5: six at once pass with nodelay, then the rate; without nodelay the five
    /// over the rate are delayed by 100, 200, ... ms, and the seventh is refused.
    #[test]
    fn burst_and_delay_follow_nginx() {
        let t = Table::standalone(64);
        let v: Vec<_> = (0..7).map(|_| t.rate(1, 0, 100 * MS, 5, true)).collect();
        assert_eq!(v.iter().filter(|x| **x == RateVerdict::Pass).count(), 6);
        assert!(matches!(v[6], RateVerdict::Refuse(_)));
        let v: Vec<_> = (0..7)
            .map(|_| t.rate(2 << 8, 0, 100 * MS, 5, false))
            .collect();
        assert_eq!(v[0], RateVerdict::Pass);
        assert_eq!(v[1], RateVerdict::Delay(Duration::from_millis(100)));
        assert_eq!(v[5], RateVerdict::Delay(Duration::from_millis(500)));
        assert!(matches!(v[6], RateVerdict::Refuse(_)));
        // Keys do not share state.
        assert_eq!(t.rate(3 << 8, 0, 100 * MS, 0, true), RateVerdict::Pass);
    }

    /// Two threads (zones) hammering one key share its rate exactly. Their clock is one
    /// counter both advance by 10 us per request, so the outcome does not depend on how the
    /// threads are scheduled: 1 s of requests at 1000 r/s.
    #[test]
    fn the_rate_holds_across_threads() {
        use std::sync::atomic::AtomicU64;
        let t = Table::standalone(1024);
        let clock = AtomicU64::new(0);
        let passed: u64 = std::thread::scope(|s| {
            let hs: Vec<_> = (0..2)
                .map(|_| {
                    s.spawn(|| {
                        let mut n = 0;
                        for _ in 0..50_000 {
                            let now = clock.fetch_add(10_000, Ordering::Relaxed);
                            if t.rate(42 << 8, now, MS, 0, true) == RateVerdict::Pass {
                                n += 1;
                            }
                        }
                        n
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).sum()
        });
        // Never more than the rate allows; a thread holding a stale reading of the clock can
        // only lose its own request.
        assert!((990..=1001).contains(&passed), "{passed}");
    }

    #[test]
    fn conn_slots_count_in_and_out() {
        let t = Table::standalone(64);
        let a = t.enter(9, 2, false).unwrap();
        let b = t.enter(9, 2, false).unwrap();
        assert!(t.enter(9, 2, false).is_none(), "a third is over max");
        assert_eq!(t.count(9), 2);
        drop(a);
        let c = t.enter(9, 2, false).unwrap();
        drop((b, c));
        assert_eq!(t.count(9), 0);
    }

    /// A cluster zone's other hosts count against `max`; this host's count in and out
    /// leaves theirs alone, and a key whose own count is 0 can still be evicted.
    #[test]
    fn remote_counts_add_to_local_ones() {
        let t = Table::standalone(64);
        t.set_remote(9, 2);
        let a = t.enter(9, 3, true).unwrap();
        assert!(t.enter(9, 3, true).is_none(), "2 elsewhere + 1 here");
        let b = t.enter(9, 3, false).unwrap();
        assert_eq!(t.local_count(9), 2);
        drop((a, b));
        assert_eq!(t.local_count(9), 0);
        assert_eq!(t.count(9), 2 << 32, "the others' count stays");
        t.set_remote(9, 0);
        assert_eq!(t.count(9), 0);
    }

    /// Redis's arrival time raises this host's, never lowers it.
    #[test]
    fn raise_only_moves_forward() {
        let t = Table::standalone(64);
        assert_eq!(t.rate(5, 0, 100 * MS, 0, true), RateVerdict::Pass);
        t.raise(5, 0, 500 * MS);
        assert_eq!(
            t.rate(5, 0, 100 * MS, 0, true),
            RateVerdict::Refuse(Duration::from_millis(500))
        );
        t.raise(5, 0, 200 * MS);
        assert_eq!(t.count(5), 500 * MS);
    }

    #[test]
    fn windows_count_and_restart() {
        let t = Table::standalone(64);
        assert_eq!(t.count_in_window(5, 1000, 100), 1);
        assert_eq!(t.count_in_window(5, 1050, 100), 2);
        assert_eq!(t.count_in_window(5, 1100, 100), 3);
        assert_eq!(t.count_in_window(5, 1101, 100), 1, "a new window");
    }

    /// A full bucket evicts the key whose state is oldest; a key in progress is not evicted.
    #[test]
    fn eviction_takes_the_oldest_state() {
        let t = Table::standalone(4); // one bucket of four
        let keys: Vec<u64> = (1..=5).map(|k| k << 1).collect();
        for (i, k) in keys[..4].iter().enumerate() {
            assert_eq!(
                t.rate(*k, i as u64 * MS, 1000 * MS, 0, true),
                RateVerdict::Pass
            );
        }
        // Every slot is over its rate at 10 ms: a fifth key is not refused for that.
        assert_eq!(
            t.rate(keys[4], 10 * MS, 1000 * MS, 0, true),
            RateVerdict::Pass
        );
        // At 1000.5 ms the first key's state has run out: the fifth key takes its slot.
        assert_eq!(
            t.rate(keys[4], 1000 * MS + MS / 2, 1000 * MS, 0, true),
            RateVerdict::Pass
        );
        assert_eq!(
            t.rate(keys[1], 1000 * MS + MS / 2, 1000 * MS, 0, true),
            RateVerdict::Refuse(Duration::from_micros(500))
        );
        let t = Table::standalone(4);
        let held: Vec<_> = (1..=4u64)
            .map(|k| t.enter(k << 40, 1, false).unwrap())
            .collect();
        assert!(
            t.enter(99 << 40, 1, false).is_none(),
            "no slot without a request in progress"
        );
        drop(held);
        assert!(t.enter(99 << 40, 1, false).is_some());
    }
}
