//! What the roles of one zone share: the compiled configuration (routes, settings), the
//! clock and its `Date` header, the timer wheel, the upstream pools and the connector, the
//! request log and counters, and whether the zone is draining.
//!
//! Every role callback gets a [`Cx`]: the engine's [`Io`], this context and the zone's upstream
//! connections.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use ringx_engine::{ConnId, Io, TimerWheel};
use ringx_http::DateCache;

use super::client::Base;
use super::reqlog::RequestLog;
use crate::response::Responder;
use crate::role::exchange::Exchange;
use crate::role::upstream::{UpConn, UpTable, UP_KEY};
use crate::route::Routes;
use crate::settings::Settings;
use crate::upstream::connector::Connector;
use crate::upstream::pools::ZonePools;

/// Exchange records kept for reuse per zone.
const EXCHANGE_POOL: usize = 256;

pub struct ZoneCtx {
    pub id: usize,
    pub routes: Arc<Routes>,
    pub set: Arc<Settings>,
    pub date: DateCache,
    /// When the wall clock's next second starts: the Date header changes then.
    date_next: Instant,
    pub wheel: TimerWheel,
    pub draining: bool,
    /// Per-zone upstream state (balancers, passive health, idle pools), when anything proxies.
    pub pools: Option<ZonePools>,
    pub connector: Connector,
    pub log: RequestLog,
    /// Client connections open.
    pub active: usize,
    /// Finished exchanges, reused: their head and retry vectors keep their capacity, so a
    /// steady stream of proxied requests allocates nothing for them. Boxed on purpose: the
    /// same allocations move in and out of the HTTP/1 role.
    #[allow(clippy::vec_box)]
    exchanges: Vec<Box<Exchange>>,
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
            wheel: TimerWheel::new(now, Duration::from_millis(100), 2048),
            draining: false,
            pools,
            connector,
            log,
            active: 0,
            exchanges: Vec::new(),
        }
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

    /// The response writer for this zone's routes and clock.
    #[inline]
    pub fn responder(&self) -> Responder<'_> {
        self.routes.responder(&self.date)
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

    /// A recycled exchange record, if one is kept.
    pub fn take_exchange(&mut self) -> Option<Box<Exchange>> {
        self.exchanges.pop()
    }

    /// Keeps a finished exchange's allocations for the next one.
    pub fn recycle_exchange(&mut self, ex: Box<Exchange>) {
        if self.exchanges.len() < EXCHANGE_POOL && ex.head.capacity() <= 64 * 1024 {
            self.exchanges.push(ex);
        }
    }

    /// The upstream pools (only zones that proxy have them, and only they have upstream
    /// connections).
    pub fn pools(&mut self) -> &mut ZonePools {
        self.pools
            .as_mut()
            .expect("upstream connections exist only in zones that proxy")
    }
}
