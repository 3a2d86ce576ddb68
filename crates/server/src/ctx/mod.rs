//! What the roles of one zone share: the compiled configuration (routes, settings), the
//! clock and its `Date` header, the timer wheel, the upstream pools and the connector, the
//! request log and counters, and whether the zone is draining.
//!
//! Every role callback gets a [`Cx`]: the engine's [`Io`], this context and the zone's upstream
//! connections; and each client connection's [`Base`] (what it is whatever its role).
//!
//! The zone (`crate::zone`) owns these and dispatches to the roles; the roles use them and
//! never the zone, so the arrows point one way: zone → role → ctx.

pub mod base;
pub mod reqlog;
pub mod trim;

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use ringx_engine::{ConnId, Io, TimerWheel};
use ringx_http::DateCache;

use crate::response::Responder;
use crate::role::upstream::{UpConn, UpTable, UP_KEY};
use crate::route::Routes;
use crate::settings::Settings;
use crate::upstream::connector::Connector;
use crate::upstream::pools::ZonePools;
use base::Base;
use reqlog::RequestLog;

pub struct ZoneCtx {
    pub id: usize,
    pub routes: Arc<Routes>,
    pub set: Arc<Settings>,
    pub date: DateCache,
    /// When the wall clock's next second starts: the Date header changes then.
    date_next: Instant,
    /// The wall clock (Unix ms) at an instant of the zone's clock: the cache's times follow
    /// the zone's clock from there, with no clock read per request.
    wall_base: (Instant, u64),
    pub wheel: TimerWheel,
    pub draining: bool,
    /// Per-zone upstream state (balancers, passive health, idle pools) of the configuration
    /// served now, when anything proxies, and its generation.
    pools: Option<ZonePools>,
    pools_gen: u32,
    /// Upstream states of earlier configurations that exchanges, tunnels and streams in
    /// flight still use (a reload applies to new requests at once), and until when.
    retired: Vec<(u32, ZonePools, Instant)>,
    pub connector: Connector,
    pub log: RequestLog,
    /// Client connections open.
    pub active: usize,
    /// TLS: this zone's configurations, handshake budget and waiting handshakes.
    pub tls: Option<crate::tls::ZoneTls>,
    /// The guards' state of this zone (remembered credentials).
    pub guard: crate::guard::ZoneGuard,
    /// Held requests to look at again, by time: (when, connection, generation). Precise,
    /// unlike the timer wheel: a `limit_req` delay is milliseconds.
    pub soon: BinaryHeap<Reverse<(Instant, u32, u32)>>,
    /// When to give freed memory back to the kernel.
    pub trim: trim::Trim,
}

/// A role callback's view of its zone.
pub struct Cx<'a> {
    pub io: &'a mut Io,
    pub ctx: &'a mut ZoneCtx,
    pub ups: &'a mut UpTable,
}

impl ZoneCtx {
    pub fn new(
        id: usize,
        routes: Arc<Routes>,
        set: Arc<Settings>,
        pools: Option<ZonePools>,
        connector: Connector,
        log: RequestLog,
    ) -> ZoneCtx {
        let now = Instant::now();
        let mut date = DateCache::new();
        date.update(SystemTime::now());
        ZoneCtx {
            id,
            routes,
            set,
            date,
            date_next: now,
            wall_base: (now, crate::cache::object::unix_ms(SystemTime::now())),
            wheel: TimerWheel::new(now, Duration::from_millis(100), 2048),
            draining: false,
            pools,
            pools_gen: 1,
            retired: Vec::new(),
            connector,
            log,
            active: 0,
            tls: None,
            guard: crate::guard::ZoneGuard::default(),
            soon: BinaryHeap::new(),
            trim: trim::Trim::default(),
        }
    }

    /// A draining zone is done, and exits: no client connection is left (`quic_conns`: the
    /// HTTP/3 ones), and no accept can hand it another. A connection the kernel accepted
    /// before the cancellation of the accepts took effect still comes; leaving before would
    /// close it unanswered.
    pub fn drained(&self, io: &Io, quic_conns: usize) -> bool {
        self.draining && self.active == 0 && quic_conns == 0 && !io.accepting()
    }

    /// A client or upstream connection closed, `live` remain: arms the look at freed memory
    /// when a crowd has left ([`trim`]).
    pub fn left(&mut self, io: &mut Io, live: usize) {
        if let Some(at) = self.trim.closed(live, io.now()) {
            io.timer_at(at);
        }
    }

    /// From the zone's timer: gives freed memory back when the look is due.
    pub fn trim(&mut self, io: &mut Io, live: usize) {
        let Some(look) = self.trim.timer(live, io.now()) else {
            return;
        };
        if let Some(at) = look.again {
            io.timer_at(at);
        }
        if let Some((free, used)) = look.trimmed {
            tracing::debug!(
                zone = self.id,
                live,
                "a crowd left: gave up to {} MiB back to the kernel, {} MiB in use",
                free >> 20,
                used >> 20
            );
        }
    }

    /// Resumes the held request of connection `c` (generation `gen`) at `at`.
    pub fn wake_at(&mut self, io: &mut Io, at: Instant, c: ConnId, gen: u32) {
        self.soon.push(Reverse((at, c.0, gen)));
        io.timer_at(at);
    }

    /// The held requests due at `now`.
    pub fn due(&mut self, now: Instant) -> Vec<(ConnId, u32)> {
        let mut out = Vec::new();
        while let Some(Reverse((at, c, gen))) = self.soon.peek().copied() {
            if at > now {
                break;
            }
            self.soon.pop();
            out.push((ConnId(c), gen));
        }
        out
    }

    /// Keeps the Date header current with one comparison per call: the wall clock is read
    /// only when a new second has begun.
    #[inline]
    pub fn refresh_date(&mut self, now: Instant) {
        if now >= self.date_next {
            let wall = SystemTime::now();
            self.date.update(wall);
            let sub = wall
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos());
            self.date_next = now + Duration::from_nanos(1_000_000_000 - sub as u64);
        }
    }

    /// Unix milliseconds at `now` (an instant of the zone's clock).
    #[inline]
    pub fn wall_ms(&self, now: Instant) -> u64 {
        let (i, ms) = self.wall_base;
        ms + now.saturating_duration_since(i).as_millis() as u64
    }

    /// The response writer for this zone's routes and clock.
    #[inline]
    pub fn responder(&self) -> Responder<'_> {
        Responder {
            server_header: &self.routes.server_header,
            token: &self.routes.server_token,
            date: &self.date,
        }
    }

    /// Sets a client connection's deadline. The wheel holds an entry per connection, filed
    /// again when it fires before the deadline (`Zone::on_timer`); only a deadline earlier
    /// than that entry needs a new one, so pushing a deadline later costs nothing.
    #[inline]
    pub fn set_deadline(&mut self, io: &mut Io, base: &mut Base, c: ConnId, at: Instant) {
        base.deadline = at;
        if base.wheel_at.is_none_or(|w| at < w) {
            base.wheel_at = Some(at);
            self.wheel.insert(at, c.0, base.gen);
            io.timer_at(at);
        }
    }

    /// Sets an upstream connection's deadline.
    pub fn set_up_deadline(&mut self, io: &mut Io, up: &mut UpConn, u: ConnId, at: Instant) {
        up.deadline = at;
        if up.wheel_at.is_none_or(|w| at < w) {
            up.wheel_at = Some(at);
            self.wheel.insert(at, u.0 | UP_KEY, up.gen);
            io.timer_at(at);
        }
    }

    /// The upstream state new requests use, and its generation (None: nothing proxies).
    pub fn current_pools(&self) -> Option<(&ZonePools, u32)> {
        self.pools.as_ref().map(|p| (p, self.pools_gen))
    }

    /// The upstream state of generation `gen`: the current one, or a retired one still in use
    /// by the exchange, tunnel or stream that names it.
    pub fn pools(&mut self, gen: u32) -> &mut ZonePools {
        self.dial_parts(gen).0
    }

    /// The upstream state of generation `gen` if it is still kept (a UDP session outlives
    /// the retired state it was opened with, which is kept only for TCP users).
    pub fn pools_if(&mut self, gen: u32) -> Option<&mut ZonePools> {
        if gen == self.pools_gen {
            return self.pools.as_mut();
        }
        self.retired
            .iter_mut()
            .find(|r| r.0 == gen)
            .map(|r| &mut r.1)
    }

    /// The upstream state of generation `gen` and the connector: what reaching a server takes.
    pub fn dial_parts(&mut self, gen: u32) -> (&mut ZonePools, &mut Connector) {
        let retired = match (gen == self.pools_gen, self.pools.is_some()) {
            (true, true) => None,
            _ => Some(
                self.retired
                    .iter()
                    .position(|r| r.0 == gen)
                    .expect("upstream state is retired only once nothing uses it"),
            ),
        };
        let pools = match retired {
            None => self.pools.as_mut().expect("checked"),
            Some(i) => &mut self.retired[i].1,
        };
        (pools, &mut self.connector)
    }

    /// A reload changed the upstreams: new requests use `next` (None: nothing proxies any
    /// more), requests in flight keep the current state until they finish or `until`.
    /// Returns the generation retired, if any.
    pub fn replace_pools(&mut self, next: Option<ZonePools>, until: Instant) -> Option<u32> {
        let old = std::mem::replace(&mut self.pools, next).map(|mut p| {
            p.clear_idle();
            self.retired.push((self.pools_gen, p, until));
            self.pools_gen
        });
        self.pools_gen += 1;
        old
    }

    /// Whether `gen` is the upstream state new requests use (connections of a retired one
    /// are not pooled).
    pub fn is_current(&self, gen: u32) -> bool {
        gen == self.pools_gen && self.pools.is_some()
    }

    /// Retired generations: (generation, until).
    pub fn retired(&self) -> impl Iterator<Item = (u32, Instant)> + '_ {
        self.retired.iter().map(|r| (r.0, r.2))
    }

    /// Forgets a retired generation nothing uses any more.
    pub fn drop_retired(&mut self, gen: u32) {
        self.retired.retain(|r| r.0 != gen);
    }
}
