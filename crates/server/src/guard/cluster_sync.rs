//! The thread that syncs the cluster limit zones (`cluster.rs`) with Redis, off every
//! request path. The limit tables are the process's, shared by its zones (`limit.rs`), so
//! one thread per process syncs them: each `cluster_sync` period it takes the keys the zone
//! threads noted, sends one `EVAL` per cluster zone (`cluster_wire.rs`) through the
//! `[cluster]` client without waiting for it, and applies the reply at a later tick when it
//! is in. A reply that is not in within the budget (5 sync periods, 100 ms at least, never
//! more than `[cluster] timeout`), or an error, puts the zone on its fallback until a sync
//! succeeds again. A zone with nothing to send still syncs once a second: the host's
//! heartbeat, and how a zone on its fallback sees Redis come back.

use std::sync::{Mutex, Once};
use std::time::{Duration, Instant};

use ringx_cluster::{Client, Pending, Value};

use super::cluster::{set_hosts, ClusterZone, Seen};
use super::cluster_wire::{self, Header, Item, Kind, MAX_KEYS};
use super::limit;

/// Keys of a `limit_req` zone waiting to be sent, at most (more are decided locally only).
const BACKLOG_MAX: usize = 65536;
/// A `limit_conn` key with no request in progress here is kept (its other hosts' count
/// refreshed) for this long, then forgotten.
const CONN_IDLE: Duration = Duration::from_secs(1);
/// A zone with nothing to send syncs this often anyway.
const HEARTBEAT: Duration = Duration::from_secs(1);
/// How long a zone back in touch with Redis keeps its share while fewer hosts than shared
/// the limit have synced again: the longest a live host's reconnect can lag (the
/// `[cluster]` client's backoff tops out at 5 s) and its next heartbeat, with room for its
/// connect and the sync's round trip. A host not back by then is taken as gone.
const REJOIN_WAIT: Duration = Duration::from_secs(8);

static CLIENT: Mutex<Option<Client>> = Mutex::new(None);

/// The `[cluster]` client the zones sync through (None without `[cluster]`); the thread
/// starts with the first.
pub fn set_client(c: Option<Client>) {
    let some = c.is_some();
    *CLIENT.lock().unwrap_or_else(|e| e.into_inner()) = c;
    static START: Once = Once::new();
    if some {
        START.call_once(|| {
            if let Err(e) = std::thread::Builder::new()
                .name("ringx-limits".into())
                .spawn(run)
            {
                tracing::error!(
                    "cluster limits: cannot start the sync thread ({e}); \
                     cluster zones will enforce their fallback"
                );
            }
        });
    }
}

/// This host's name in the hosts' set: unique per process.
fn host_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "host".into());
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{host}:{}:{:x}", std::process::id(), t & 0xffff_ffff)
}

fn run() {
    let host = host_id();
    let mut syncs: Vec<ZoneSync> = Vec::new();
    loop {
        let zones = ClusterZone::all();
        let client = CLIENT.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let mut tick = Duration::from_millis(100);
        for z in zones {
            tick = tick.min(z.sync_every());
            if !syncs.iter().any(|s| std::ptr::eq(s.zone, z)) {
                syncs.push(ZoneSync::new(z));
            }
        }
        if let Some(c) = &client {
            for s in &mut syncs {
                s.tick(c, &host, Instant::now());
            }
        }
        // Not a wait for anything: the period of a clock.
        std::thread::sleep(tick);
    }
}

/// The sync thread's side of one zone.
struct ZoneSync {
    zone: &'static ClusterZone,
    /// `limit_req`: counts waiting to be sent; `limit_conn`: the keys active here, each
    /// with the syncs it has had no request in progress.
    keys: Seen,
    /// The sync on its way: the reply, its keys, when it was sent.
    inflight: Option<(Pending, Vec<Item>, Instant)>,
    last_sent: Option<Instant>,
    /// When the keys sent last were taken (the span the next counts were admitted in).
    last_taken: Instant,
    down_since: Option<Instant>,
    /// The hosts whose shares the zone enforced while it fell back.
    share_hosts: u32,
    /// The first reply since the zone fell back: Redis is back, the other hosts maybe not.
    answered_at: Option<Instant>,
    /// `limit_req`: what this host's shares still hold, to charge to Redis now that it is
    /// back (`recovery`).
    recovery: Vec<Item>,
}

impl ClusterZone {
    fn sync_every(&self) -> Duration {
        Duration::from_nanos(
            self.sync_every_ns
                .load(std::sync::atomic::Ordering::Relaxed),
        )
    }
}

impl ZoneSync {
    fn new(zone: &'static ClusterZone) -> ZoneSync {
        ZoneSync {
            zone,
            keys: Seen::default(),
            inflight: None,
            last_sent: None,
            last_taken: Instant::now(),
            down_since: None,
            share_hosts: 1,
            answered_at: None,
            recovery: Vec::new(),
        }
    }

    fn tick(&mut self, c: &Client, host: &str, now: Instant) {
        if let Some((p, _, _)) = &self.inflight {
            let Some(r) = p.try_get() else { return };
            let (_, items, sent) = self.inflight.take().expect("in flight");
            self.done(r, &items, (sent, now));
        }
        let every = self.zone.sync_every();
        if !self.recovery.is_empty() {
            // Charged as of now (no span): what the shares hold is ahead of now already.
            let items = std::mem::take(&mut self.recovery);
            return self.send(c, host, (now, Duration::ZERO), items);
        }
        if self.last_sent.is_some_and(|t| now < t + every) {
            return;
        }
        let items = self.items(every);
        // Waiting for the hosts to come back (`waits_for_hosts`), every period: each host
        // leaves its share within one period of the last one's return, not a heartbeat.
        let waiting = self.answered_at.is_some();
        if items.is_empty() && !waiting && self.last_sent.is_some_and(|t| now < t + HEARTBEAT) {
            return;
        }
        let span = now.saturating_duration_since(self.last_taken);
        self.last_taken = now;
        self.send(c, host, (now, span), items);
    }

    /// Sends a sync of `items`, admitted over `span` before `now`.
    fn send(&mut self, c: &Client, host: &str, (now, span): (Instant, Duration), items: Vec<Item>) {
        let z = self.zone;
        let every = z.sync_every();
        let prefix = c.settings().prefix;
        let h = Header {
            prefix: &prefix,
            zone: &z.name,
            host,
            interval_ns: z.interval_ns.load(std::sync::atomic::Ordering::Relaxed),
            span,
        };
        let args = cluster_wire::command(z.kind, &h, &items);
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_slice()).collect();
        let budget = c.timeout().min((every * 5).max(Duration::from_millis(100)));
        self.last_sent = Some(now);
        match c.submit(&args, budget) {
            Ok(p) => self.inflight = Some((p, items, now)),
            Err(e) => self.failed(&e.to_string(), now),
        }
    }

    /// The keys of the next sync.
    fn items(&mut self, every: Duration) -> Vec<Item> {
        let z = self.zone;
        match z.kind {
            Kind::Req => {
                z.take_seen(&mut self.keys, BACKLOG_MAX);
                let take: Vec<u64> = self.keys.keys().take(MAX_KEYS).copied().collect();
                take.into_iter()
                    .filter_map(|local| {
                        let (stable, n) = self.keys.remove(&local)?;
                        Some(Item { local, stable, n })
                    })
                    .collect()
            }
            Kind::Conn => {
                let mut fresh = Seen::default();
                z.take_seen(&mut fresh, MAX_KEYS);
                for (local, (stable, _)) in fresh {
                    if self.keys.len() < MAX_KEYS || self.keys.contains_key(&local) {
                        self.keys.insert(local, (stable, 0));
                    } else {
                        z.stats
                            .keys_dropped
                            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                }
                let idle_max = (CONN_IDLE.as_nanos() / every.as_nanos().max(1)).max(2) as u32;
                let mut items = Vec::with_capacity(self.keys.len());
                self.keys.retain(|&local, (stable, idle)| {
                    let n = z.table.local_count(local);
                    *idle = if n == 0 { *idle + 1 } else { 0 };
                    if *idle > idle_max {
                        // Forgotten: nor do the others' requests count against it here.
                        z.table.set_remote(local, 0);
                        return false;
                    }
                    items.push(Item {
                        local,
                        stable: *stable,
                        n,
                    });
                    true
                });
                items
            }
        }
    }

    fn done(
        &mut self,
        r: Result<Value, ringx_cluster::Error>,
        items: &[Item],
        (sent, now): (Instant, Instant),
    ) {
        let reply = match r {
            Ok(v) => cluster_wire::parse(&v, items.len()),
            Err(e) => Err(e.to_string()),
        };
        let z = self.zone;
        let r = match reply {
            Ok(r) => r,
            Err(e) => return self.failed(&e, now),
        };
        let waiting = self.waits_for_hosts(r.hosts, now);
        set_hosts(r.hosts);
        match z.kind {
            Kind::Req => {
                cluster_wire::apply_req(z.table, (limit::nanos(sent), limit::nanos(now)), items, &r)
            }
            Kind::Conn => cluster_wire::apply_conn(z.table, items, &r),
        }
        z.new_view(limit::nanos(now));
        let relaxed = std::sync::atomic::Ordering::Relaxed;
        z.stats.syncs_ok.fetch_add(1, relaxed);
        z.stats.keys_sent.fetch_add(items.len() as u64, relaxed);
        if waiting {
            return;
        }
        self.answered_at = None;
        if z.set_falling_back(false) {
            z.set_share_of(0);
            if z.kind == Kind::Req {
                self.recovery = recovery(z, limit::nanos(now), self.share_hosts);
            }
            let for_ = self
                .down_since
                .take()
                .map_or(Duration::ZERO, |t| now.saturating_duration_since(t));
            tracing::info!(
                "cluster limits: {} zone {:?} synced with Redis again after {for_:?}; \
                 the limit holds across {} hosts",
                z.kind.name(),
                z.name,
                r.hosts
            );
        }
    }

    /// Whether the zone, on its shares and answered by Redis again, keeps them: while
    /// fewer hosts than shared the limit have synced (at most `REJOIN_WAIT`). The first
    /// host back would otherwise take the whole limit while the others still spend their
    /// shares, which nobody charges later: up to (hosts - 1) / hosts of the rate over
    /// the time the last one takes to reconnect.
    fn waits_for_hosts(&mut self, hosts: u32, now: Instant) -> bool {
        let z = self.zone;
        if !z.falling_back() || z.fallback() != ringx_config::guard::Fallback::Local {
            return false;
        }
        let first = *self.answered_at.get_or_insert_with(|| {
            if hosts < self.share_hosts {
                tracing::info!(
                    "cluster limits: {} zone {:?}: Redis answers again; {hosts} of the {} \
                     hosts that shared the limit have synced, so this host keeps its share \
                     until the others have (at most {REJOIN_WAIT:?})",
                    z.kind.name(),
                    z.name,
                    self.share_hosts
                );
            }
            now
        });
        hosts < self.share_hosts && now < first + REJOIN_WAIT
    }

    fn failed(&mut self, why: &str, now: Instant) {
        let z = self.zone;
        // Redis answered and then failed again: the wait for the hosts starts over.
        self.answered_at = None;
        z.stats
            .syncs_failed
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if z.set_falling_back(true) {
            self.share_hosts = super::cluster::hosts();
            z.set_share_of(self.share_hosts);
            z.stats
                .fallbacks
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            self.down_since = Some(now);
            let what = match z.fallback() {
                ringx_config::guard::Fallback::Local => format!(
                    "this host enforces its share, 1/{} of the limit",
                    super::cluster::hosts()
                ),
                ringx_config::guard::Fallback::Open => "no limit until it is back".into(),
                ringx_config::guard::Fallback::Closed => {
                    "every request refused until it is back".into()
                }
            };
            tracing::warn!(
                "cluster limits: {} zone {:?} cannot sync with Redis ({why}); {what}",
                z.kind.name(),
                z.name
            );
        }
    }
}

/// What the keys admitted on this host's share while zone `z` fell back still hold at `now`
/// (ns, as `limit::nanos`), as requests to charge to Redis: a share's bucket is the cluster's
/// divided by `hosts`, so each host charging its own adds up to what the cluster's bucket
/// holds, whatever order the hosts come back in (Redis, which lost or never had those
/// requests, would otherwise grant the burst again).
pub(crate) fn recovery(z: &ClusterZone, now: u64, hosts: u32) -> Vec<Item> {
    let iv = z
        .interval_ns
        .load(std::sync::atomic::Ordering::Relaxed)
        .saturating_mul(u64::from(hosts.max(1)))
        .max(1);
    let mut items: Vec<Item> = z
        .take_outage()
        .into_iter()
        .filter_map(|(local, stable)| {
            let ahead = z.table.tat(local).saturating_sub(now);
            let n = ahead.div_ceil(iv).min(u64::from(u32::MAX)) as u32;
            (n > 0).then_some(Item { local, stable, n })
        })
        .collect();
    items.truncate(MAX_KEYS);
    items
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guard::cluster::{hosts, Enforce, TEST_HOSTS};
    use crate::guard::limit::Table;
    use ringx_config::guard::{ClusterLimit, Fallback};

    fn reply(hosts: i64) -> Result<Value, ringx_cluster::Error> {
        Ok(Value::Array(vec![Value::Int(hosts)]))
    }

    /// A zone of three hosts that fell back to its share, answered again by Redis while only
    /// it has synced: it keeps its share (a third) until the others are back or
    /// `REJOIN_WAIT` has passed; a zone whose fallback is `open` leaves it at once.
    #[test]
    fn a_zone_back_first_keeps_its_share_until_the_hosts_are_back() {
        let _hosts = TEST_HOSTS.lock().unwrap_or_else(|e| e.into_inner());
        let t0 = Instant::now();
        for (last, after) in [(3, Duration::from_secs(1)), (1, REJOIN_WAIT)] {
            set_hosts(3);
            let z: &'static ClusterZone =
                Box::leak(Box::new(ClusterZone::new(Kind::Req, Table::standalone(64))));
            let mut s = ZoneSync::new(z);
            s.failed("down", t0);
            assert_eq!(z.enforce(), Enforce::Share(3));
            s.done(reply(1), &[], (t0, t0 + Duration::from_secs(2)));
            assert_eq!(z.enforce(), Enforce::Share(3), "one host of three back");
            assert_eq!(hosts(), 1, "what Redis says, for the other zones");
            set_hosts(1); // another zone's sync: this zone's share stays a third
            assert_eq!(z.enforce(), Enforce::Share(3));
            // Redis fails again and comes back: the wait starts over.
            s.failed("down again", t0 + Duration::from_secs(2));
            s.done(
                reply(1),
                &[],
                (t0, t0 + Duration::from_secs(2) + REJOIN_WAIT),
            );
            assert_eq!(z.enforce(), Enforce::Share(3), "a new wait");
            let t1 = t0 + Duration::from_secs(2) + REJOIN_WAIT;
            s.done(reply(2), &[], (t1, t1 + after / 2));
            assert_eq!(z.enforce(), Enforce::Share(3), "two of three back");
            let end = t1 + after;
            s.done(reply(last), &[], (end, end));
            assert_eq!(
                z.enforce(),
                Enforce::Cluster,
                "{last} hosts after {after:?}"
            );
            assert_eq!(hosts(), last as u32);
        }
        set_hosts(3);
        let open = ClusterLimit {
            fallback: Fallback::Open,
            sync_every: Duration::from_millis(20),
        };
        let t = Table::standalone(64);
        let z = ClusterZone::get(Kind::Req, t, Duration::from_millis(100), open);
        let mut s = ZoneSync::new(z);
        s.failed("down", t0);
        assert_eq!(z.enforce(), Enforce::Open);
        s.done(reply(1), &[], (t0, t0));
        assert_eq!(z.enforce(), Enforce::Cluster);
        set_hosts(0);
    }
}
