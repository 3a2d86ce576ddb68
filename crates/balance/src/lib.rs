//! Load-balancing policies for the reverse proxy: which upstream server gets
//! the next request.
//!
//! Each zone (thread) owns a [`Balancer`] and drives it with `&mut self`:
//! no atomics, no sharing. Only the [`Maglev`] table for hashing is built
//! once and shared read-only through an [`Arc`](std::sync::Arc).
//!
//! [`Balancer::pick`] chooses among the servers that the caller reports
//! usable (health checks, circuit breakers, connection limits...) and that
//! were not already tried for this request (a retry goes elsewhere). Primary
//! servers come first; backup servers are only considered when no primary
//! qualifies. Within that set:
//!
//! * [`Policy::RoundRobin`] is nginx's smooth weighted round robin: every
//!   candidate's current weight grows by its weight, the largest wins and
//!   gives back the candidates' total. Weights 5, 1, 1 give `a a b a c a a`:
//!   proportional, and interleaved rather than bursty.
//! * [`Policy::LeastConn`] picks the fewest in-flight requests relative to
//!   weight (`active / weight`, compared exactly by cross-multiplication),
//!   breaking ties by smooth weighted round robin among the tied servers,
//!   like nginx's `least_conn`.
//! * [`Policy::RandomTwo`] draws two distinct candidates at random (in
//!   proportion to weight) and takes the one with fewer in-flight requests
//!   relative to weight: the "power of two choices", which avoids both the
//!   herding of a global least-connections choice made by many independent
//!   zones and the imbalance of pure random.
//! * [`Policy::Hash`] sends a key (client address, cookie, URI...) to the
//!   same server every time through a [`Maglev`] table; when that server is
//!   down or already tried, the key walks on to the next usable server in the
//!   table, so only the down server's keys move. Without a key or a table it
//!   falls back to round robin.
//!
//! In-flight counts are per zone: report [`Balancer::started`] and
//! [`Balancer::finished`] around every request.
//!
//! ```
//! use ringx_balance::{hash_key, Balancer, Maglev, Policy, ServerSpec};
//! use std::sync::Arc;
//!
//! let servers = [
//!     ServerSpec { weight: 5, backup: false },
//!     ServerSpec { weight: 1, backup: false },
//!     ServerSpec { weight: 1, backup: false },
//!     ServerSpec { weight: 1, backup: true },
//! ];
//! let all_up = |_| true;
//!
//! // Smooth weighted round robin (seed 0 starts nginx's sequence at its start).
//! let mut rr = Balancer::new(Policy::RoundRobin, &servers, None, 0);
//! let picks: Vec<_> = (0..7).map(|_| rr.pick(None, all_up, &[]).unwrap()).collect();
//! assert_eq!(picks, [0, 0, 1, 0, 2, 0, 0]);
//!
//! // A retry never goes back to a server already tried; the backup only
//! // serves when no primary can.
//! assert_eq!(rr.pick(None, |i| i == 0 || i == 3, &[0]), Some(3));
//!
//! // Least connections counts in-flight requests per zone.
//! let mut lc = Balancer::new(Policy::LeastConn, &servers, None, 0);
//! lc.started(0);
//! lc.started(0);
//! lc.started(0);
//! lc.started(0);
//! lc.started(0); // 5 in flight on weight 5: as loaded as 1 on weight 1
//! lc.started(1);
//! assert_eq!(lc.pick(None, all_up, &[]), Some(2)); // idle
//! lc.finished(1);
//!
//! // Consistent hashing: one table for all zones, built from stable names.
//! let names: Vec<String> = (1..=4).map(|i| format!("10.0.0.{i}:80")).collect();
//! let maglev = Arc::new(Maglev::new(&names, &[5, 1, 1, 1]));
//! let mut hash = Balancer::new(Policy::Hash, &servers, Some(maglev.clone()), 0);
//! let key = b"203.0.113.7";
//! let home = hash.pick(Some(key), all_up, &[]).unwrap();
//! assert_eq!(hash.pick(Some(key), all_up, &[]), Some(home)); // sticky
//! assert_eq!(maglev.lookup(hash_key(key)), home); // the key's slot (its owner is a primary)
//! let retry = hash.pick(Some(key), all_up, &[home]).unwrap(); // a retry moves on...
//! assert_ne!(retry, home);
//! assert_eq!(hash.pick(Some(key), |i| i != home, &[]), Some(retry)); // ...like a down server's key
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod hash;
mod maglev;

use std::sync::Arc;

pub use hash::hash_key;
pub use maglev::Maglev;

/// How a [`Balancer`] chooses among the qualifying servers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// nginx's smooth weighted round robin.
    RoundRobin,
    /// Fewest in-flight requests relative to weight; ties by round robin.
    LeastConn,
    /// The less loaded (relative to weight) of two random candidates.
    RandomTwo,
    /// Consistent hashing of a request key over a [`Maglev`] table.
    Hash,
}

/// One upstream server as the balancer sees it.
#[derive(Clone, Debug)]
pub struct ServerSpec {
    /// Relative share of the requests, at least 1 (0 counts as 1).
    pub weight: u32,
    /// Only used when no primary (non-backup) server qualifies.
    pub backup: bool,
}

#[derive(Clone, Debug)]
struct Server {
    weight: u32,
    backup: bool,
    /// Smooth weighted round robin state.
    current: i64,
    /// In-flight requests on this server from this zone.
    active: u32,
}

/// The per-zone load balancer of one upstream group.
#[derive(Clone, Debug)]
pub struct Balancer {
    policy: Policy,
    servers: Vec<Server>,
    maglev: Option<Arc<Maglev>>,
    rng: SplitMix64,
    /// Candidates and their cumulative weights (random two), kept to avoid
    /// allocating per pick.
    scratch: Vec<(usize, u64)>,
}

impl Balancer {
    /// A balancer for `servers` (indices into `servers` are what
    /// [`pick`](Self::pick) returns and what the other methods take).
    ///
    /// `maglev` is the shared table for [`Policy::Hash`], built over the same
    /// servers in the same order (entries beyond `servers.len()` are never
    /// returned). `seed` seeds the random choices of [`Policy::RandomTwo`]
    /// and also shifts the start of the round-robin sequence (by
    /// `seed % min(total primary weight, 4096)` picks), so that zones given
    /// different seeds do not all send their first requests to the same
    /// server. Seed 0 starts at the beginning of nginx's sequence.
    pub fn new(
        policy: Policy,
        servers: &[ServerSpec],
        maglev: Option<Arc<Maglev>>,
        seed: u64,
    ) -> Balancer {
        let mut b = Balancer {
            policy,
            servers: servers
                .iter()
                .map(|s| Server {
                    weight: s.weight.max(1),
                    backup: s.backup,
                    current: 0,
                    active: 0,
                })
                .collect(),
            maglev,
            rng: SplitMix64(seed),
            scratch: Vec::with_capacity(servers.len()),
        };
        let total: u64 = b
            .servers
            .iter()
            .filter(|s| !s.backup)
            .map(|s| u64::from(s.weight))
            .sum();
        let phase = seed % total.clamp(1, 4096);
        for _ in 0..phase {
            smooth_wrr(&mut b.servers, |_, s| !s.backup);
        }
        b
    }

    /// Picks a server for a request: among servers with `usable(i)` true and
    /// not in `tried` (already attempted for this request — retries must go
    /// elsewhere), primaries first, backups only if no primary qualifies.
    /// `key` is the hash key for [`Policy::Hash`] (ignored otherwise; `None`
    /// with `Hash` falls back to round robin). Returns `None` when nothing
    /// qualifies.
    ///
    /// `usable` is only called with indices below the number of servers.
    pub fn pick(
        &mut self,
        key: Option<&[u8]>,
        usable: impl Fn(usize) -> bool,
        tried: &[usize],
    ) -> Option<usize> {
        let hash = match self.policy {
            Policy::Hash => key.map(hash_key),
            _ => None,
        };
        for backup in [false, true] {
            let ok = |i: usize, s: &Server| s.backup == backup && !tried.contains(&i) && usable(i);
            let picked = match (self.policy, hash, &self.maglev) {
                (Policy::Hash, Some(h), Some(maglev)) => {
                    let servers = &self.servers;
                    maglev.lookup_usable(h, |i| servers.get(i).is_some_and(|s| ok(i, s)))
                }
                (Policy::LeastConn, ..) => least_conn(&mut self.servers, ok),
                (Policy::RandomTwo, ..) => {
                    random_two(&self.servers, &mut self.rng, &mut self.scratch, ok)
                }
                _ => smooth_wrr(&mut self.servers, ok),
            };
            if picked.is_some() {
                return picked;
            }
        }
        None
    }

    /// Gives server `i` a new weight (at least 1; out-of-range indices are ignored), as an
    /// operator's "set weight" does; round robin goes on from where it was. Maglev tables
    /// are built once with equal shares, so [`Policy::Hash`] does not follow weights.
    pub fn set_weight(&mut self, i: usize, weight: u32) {
        if let Some(s) = self.servers.get_mut(i) {
            s.weight = weight.max(1);
        }
    }

    /// The weight server `i` has now.
    pub fn weight(&self, i: usize) -> Option<u32> {
        self.servers.get(i).map(|s| s.weight)
    }

    /// A request started on server `i` (out-of-range indices are ignored).
    pub fn started(&mut self, i: usize) {
        if let Some(s) = self.servers.get_mut(i) {
            s.active = s.active.saturating_add(1);
        }
    }

    /// A request finished on server `i` (out-of-range indices are ignored;
    /// the count does not go below zero).
    pub fn finished(&mut self, i: usize) {
        if let Some(s) = self.servers.get_mut(i) {
            s.active = s.active.saturating_sub(1);
        }
    }

    /// In-flight requests on server `i` in this zone (0 when out of range).
    pub fn active(&self, i: usize) -> u32 {
        self.servers.get(i).map_or(0, |s| s.active)
    }
}

/// nginx's smooth weighted round robin over the servers `ok` accepts: each
/// gains its weight, the largest current weight wins (the first on ties) and
/// loses the total.
fn smooth_wrr(servers: &mut [Server], ok: impl Fn(usize, &Server) -> bool) -> Option<usize> {
    let mut total: i64 = 0;
    let mut best: Option<(usize, i64)> = None;
    for (i, s) in servers.iter_mut().enumerate() {
        if !ok(i, s) {
            continue;
        }
        s.current = s.current.saturating_add(i64::from(s.weight));
        total = total.saturating_add(i64::from(s.weight));
        if best.map_or(true, |(_, c)| s.current > c) {
            best = Some((i, s.current));
        }
    }
    let (i, _) = best?;
    servers[i].current = servers[i].current.saturating_sub(total);
    Some(i)
}

/// `a` is less loaded than `b`: `a.active / a.weight < b.active / b.weight`.
fn less_loaded(a: &Server, b: &Server) -> bool {
    u64::from(a.active) * u64::from(b.weight) < u64::from(b.active) * u64::from(a.weight)
}

fn least_conn(servers: &mut [Server], ok: impl Fn(usize, &Server) -> bool) -> Option<usize> {
    let mut best: Option<usize> = None;
    for (i, s) in servers.iter().enumerate() {
        if ok(i, s) && best.map_or(true, |b| less_loaded(s, &servers[b])) {
            best = Some(i);
        }
    }
    let b = servers.get(best?)?.clone();
    // Round robin among the servers as lightly loaded as the best.
    smooth_wrr(servers, |i, s| ok(i, s) && !less_loaded(&b, s))
}

fn random_two(
    servers: &[Server],
    rng: &mut SplitMix64,
    scratch: &mut Vec<(usize, u64)>,
    ok: impl Fn(usize, &Server) -> bool,
) -> Option<usize> {
    scratch.clear();
    let mut total = 0u64;
    for (i, s) in servers.iter().enumerate() {
        if ok(i, s) {
            total += u64::from(s.weight);
            scratch.push((i, total));
        }
    }
    match scratch.len() {
        0 => return None,
        1 => return Some(scratch[0].0),
        _ => {}
    }
    // The candidate whose weight range [end - weight, end) holds r.
    let find = |r: u64| scratch.partition_point(|&(_, end)| end <= r);
    let a = find(rng.below(total));
    let a_start = if a == 0 { 0 } else { scratch[a - 1].1 };
    let a_weight = scratch[a].1 - a_start;
    // A second draw over the others' weights, skipping a's range.
    let mut r = rng.below(total - a_weight);
    if r >= a_start {
        r += a_weight;
    }
    let b = find(r);
    let (a, b) = (scratch[a].0, scratch.get(b)?.0);
    Some(if less_loaded(&servers[b], &servers[a]) {
        b
    } else {
        a
    })
}

/// SplitMix64 (Steele, Lea, Flood 2014): tiny, fast, and good enough to pick
/// candidates.
#[derive(Clone, Debug)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0), by multiply-shift (bias below 2^-32 for
    /// any realistic total weight).
    fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next()) * u128::from(n)) >> 64) as u64
    }
}

#[cfg(test)]
mod tests;
