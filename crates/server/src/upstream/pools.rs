//! What one zone keeps about the upstreams: its own balancer per upstream (thread-per-core:
//! no shared counters), passive failure marks per server (nginx's `max_fails`/`fail_timeout`,
//! per worker), and idle keep-alive connections per server.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use ringx_balance::Balancer;
use ringx_engine::ConnId;

use super::Upstreams;

#[derive(Clone, Copy, Default)]
struct Passive {
    fails: u32,
    window_start: Option<Instant>,
    down_until: Option<Instant>,
}

pub struct PerUpstream {
    pub bal: Balancer,
    passive: Vec<Passive>,
    /// Idle connections per server, most recently used last.
    pub idle: Vec<Vec<ConnId>>,
    /// Multiplexed HTTP/2 (gRPC) connections per server, shared by the zone's calls.
    pub h2: Vec<Vec<ConnId>>,
    /// The `Upstreams::admin_epoch` the balancer's weights follow.
    epoch: u64,
}

pub struct ZonePools {
    pub defs: Arc<Upstreams>,
    /// The zone these are (its slot in each server's `stats`).
    zone: usize,
    pub per: Vec<PerUpstream>,
    /// Retired by a reload and past its drain time: no new connection is opened from it.
    pub expired: bool,
}

impl ZonePools {
    pub fn new(defs: Arc<Upstreams>, zone: usize) -> ZonePools {
        let per = defs
            .list
            .iter()
            .enumerate()
            .map(|(i, u)| PerUpstream {
                bal: Balancer::new(
                    u.policy,
                    &u.specs(),
                    u.maglev.clone(),
                    0x9e37_79b9_7f4a_7c15 ^ ((zone as u64) << 32 | i as u64),
                ),
                passive: vec![Passive::default(); u.servers.len()],
                idle: vec![Vec::new(); u.servers.len()],
                h2: vec![Vec::new(); u.servers.len()],
                epoch: 0,
            })
            .collect();
        ZonePools {
            defs,
            zone,
            per,
            expired: false,
        }
    }

    /// Picks a server not in `tried`; `key` is hashed for `balance = "hash"`.
    pub fn pick(
        &mut self,
        u: usize,
        key: Option<&[u8]>,
        tried: &[usize],
        now: Instant,
    ) -> Option<usize> {
        let defs = &self.defs;
        let per = &mut self.per[u];
        let servers = &defs.list[u].servers;
        let epoch = defs.admin_epoch.load(Ordering::Relaxed);
        if per.epoch != epoch {
            per.epoch = epoch;
            for (i, s) in servers.iter().enumerate() {
                let w = s.stats.weight.load(Ordering::Relaxed);
                per.bal.set_weight(i, if w == 0 { s.weight } else { w });
            }
        }
        let passive = &per.passive;
        let usable = |s: usize| {
            servers[s].healthy.load(Ordering::Relaxed)
                && !servers[s].stats.drained.load(Ordering::Relaxed)
                && passive[s].down_until.is_none_or(|t| t <= now)
        };
        // Everything down: like nginx, try the servers anyway rather than refuse outright.
        let any = (0..servers.len()).any(|s| usable(s) && !tried.contains(&s));
        if any {
            per.bal.pick(key, usable, tried)
        } else {
            per.bal.pick(key, |_| true, tried)
        }
    }

    /// Picks a server not in `tried` by `hash` on upstream `u`'s Maglev table (built for every
    /// upstream a UDP stream uses, whatever its policy): a primary that is up, else a backup,
    /// else any server, as `pick` does when everything is down.
    pub fn pick_by_hash(
        &self,
        u: usize,
        hash: u64,
        tried: &[usize],
        now: Instant,
    ) -> Option<usize> {
        let def = &self.defs.list[u];
        let maglev = def.maglev.as_ref()?;
        let passive = &self.per[u].passive;
        let servers = &def.servers;
        let up = |s: usize| {
            servers[s].healthy.load(Ordering::Relaxed)
                && !servers[s].stats.drained.load(Ordering::Relaxed)
                && passive[s].down_until.is_none_or(|t| t <= now)
        };
        let fresh = |s: usize| s < servers.len() && !tried.contains(&s);
        maglev
            .lookup_usable(hash, |s| fresh(s) && !servers[s].backup && up(s))
            .or_else(|| maglev.lookup_usable(hash, |s| fresh(s) && up(s)))
            .or_else(|| maglev.lookup_usable(hash, fresh))
    }

    /// A request goes to server `s` (the balancer's in-flight count, the status page's).
    pub fn started(&mut self, u: usize, s: usize) {
        self.per[u].bal.started(s);
        if let Some(d) = self.defs.list[u].servers.get(s) {
            d.stats.started(self.zone);
        }
    }

    /// The request on server `s` is over.
    pub fn finished(&mut self, u: usize, s: usize) {
        self.per[u].bal.finished(s);
        if let Some(d) = self.defs.list[u].servers.get(s) {
            d.stats.finished(self.zone);
        }
    }

    /// Server `s` answered (a response head) `took` after the request went out.
    pub fn responded(&mut self, u: usize, s: usize, took: std::time::Duration) {
        if let Some(d) = self.defs.list[u].servers.get(s) {
            d.stats.responded(self.zone, took);
        }
        self.succeeded(u, s);
    }

    /// A connect error, reset or timeout on server `s`.
    pub fn failed(&mut self, u: usize, s: usize, now: Instant) {
        let def = &self.defs.list[u].servers[s];
        def.stats.failed(self.zone);
        if def.max_fails == 0 {
            return;
        }
        let p = &mut self.per[u].passive[s];
        if p.window_start
            .is_none_or(|t| now.duration_since(t) > def.fail_timeout)
        {
            p.window_start = Some(now);
            p.fails = 0;
        }
        p.fails += 1;
        if p.fails >= def.max_fails {
            if p.down_until.is_none_or(|t| t <= now) {
                tracing::warn!(
                    "upstream {}: server {} marked down for {:?} after {} failures",
                    self.defs.list[u].name,
                    def.name,
                    def.fail_timeout,
                    p.fails
                );
            }
            p.down_until = Some(now + def.fail_timeout);
            p.fails = 0;
        }
    }

    /// A response came back from server `s`.
    pub fn succeeded(&mut self, u: usize, s: usize) {
        let p = &mut self.per[u].passive[s];
        p.fails = 0;
        p.down_until = None;
    }

    /// An idle connection to server `s`, if one is pooled.
    pub fn take_idle(&mut self, u: usize, s: usize) -> Option<ConnId> {
        self.per[u].idle[s].pop()
    }

    /// Pools an idle connection; false when the pool is full (close it then).
    pub fn put_idle(&mut self, u: usize, s: usize, c: ConnId) -> bool {
        if self.defs.list[u].bind_client {
            return false; // it leaves from one client's address: no other may use it
        }
        let cap = self.defs.list[u].keepalive as usize;
        let pool = &mut self.per[u].idle[s];
        if pool.len() >= cap {
            return false;
        }
        pool.push(c);
        true
    }

    /// Empties every idle pool (their connections are being closed).
    pub fn clear_idle(&mut self) {
        for p in &mut self.per {
            for l in &mut p.idle {
                l.clear();
            }
        }
    }

    pub fn remove_idle(&mut self, u: usize, s: usize, c: ConnId) {
        let pool = &mut self.per[u].idle[s];
        if let Some(i) = pool.iter().position(|&x| x == c) {
            pool.swap_remove(i);
        }
    }
}
