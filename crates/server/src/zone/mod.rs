//! The HTTP/1.1 origin server as a zone [`Handler`]: parse what arrives (straight from the
//! receive buffers when a request is complete in one segment), route, answer in order,
//! enforce limits and timeouts, drain on shutdown.

use std::fs::File;
use std::rc::Rc;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use ringx_engine::{ConnId, Handler, Io, ListenerId, TimerWheel};
use ringx_http::{BodyDecoder, DateCache};

use super::respond::ConnHdr;
use super::route::{ListenerKind, Routes};
use super::settings::Settings;
use crate::upstream::connector::Connector;
use crate::upstream::pools::ZoneUpstreams;
use crate::upstream::Upstreams;

/// Commands from the control thread, read when the zone is woken (0 = run).
pub const CMD_DRAIN: u8 = 1;

mod ops;
mod proxy;
mod request;
mod tunnel;
mod upconn;

pub use ops::{ReloadMsg, ZoneCtl, ZoneMsg, ZoneOps};
use upconn::{UpConn, UP_KEY};

/// Queued output above which a connection stops reading (pipelined requests wait).
const OUT_HIGH_WATER: u64 = 256 * 1024;
/// Input a proxied request may buffer while its reading is paused.
const PAUSED_BODY_LIMIT: usize = 8 << 20;
/// Header storage on the stack per parse.
const MAX_HEADERS_STACK: usize = 128;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Between requests, nothing buffered.
    Idle,
    /// Part of a request head has arrived.
    Head,
    /// Reading (and discarding) a request body; the response waits in `pending`.
    Body,
    /// The last response is queued; reading and discarding until the client closes.
    Lingering,
    Closed,
    /// Waiting for the PROXY protocol header a load balancer sends first.
    ProxyHeader,
    /// A request is being proxied: its body streams to the upstream, then the response
    /// streams back; further requests wait (reading paused).
    Proxy,
    /// A byte tunnel to an upstream: WebSocket after 101, or a `[[stream]]` connection.
    Tunnel,
}

struct Pending {
    bytes: Vec<u8>,
    file: Option<(Rc<File>, u64, u64)>,
    close: bool,
}

struct HttpConn {
    gen: u32,
    listener: u32,
    phase: Phase,
    inbuf: Vec<u8>,
    deadline: Instant,
    in_wheel: bool,
    requests: u32,
    /// The current request asked to close the connection (`Connection: close`, or HTTP/1.0
    /// without keep-alive): the client sends nothing more after it (RFC 9112 §9.6).
    client_closes: bool,
    paused: bool,
    eof: bool,
    body: Option<BodyDecoder>,
    pending: Option<Pending>,
    last_out: u64,
    /// The client's address (the connection's peer, or what a PROXY header said).
    client: Option<std::net::SocketAddr>,
    /// The request being proxied.
    proxy: Option<Box<proxy::ProxyReq>>,
    /// The upstream connection of a tunnel.
    tunnel: Option<ConnId>,
    /// `[[stream]]` index for stream connections.
    stream: Option<usize>,
}

impl HttpConn {
    fn new(now: Instant) -> Self {
        HttpConn {
            gen: 0,
            listener: 0,
            phase: Phase::Closed,
            inbuf: Vec::new(),
            deadline: now,
            in_wheel: false,
            requests: 0,
            client_closes: false,
            paused: false,
            eof: false,
            body: None,
            pending: None,
            last_out: 0,
            client: None,
            proxy: None,
            tunnel: None,
            stream: None,
        }
    }
}

/// Sent to the control thread once the zone runs, and after each reload it applied.
pub enum ZoneEvent {
    Ready,
    Reloaded { zone: usize, generation: u64 },
}

pub struct HttpZone {
    id: usize,
    routes: Arc<Routes>,
    set: Arc<Settings>,
    ctl: Arc<ZoneCtl>,
    conns: Vec<HttpConn>,
    wheel: TimerWheel,
    date: DateCache,
    /// When the wall clock's next second starts: the Date header changes then.
    date_next: Instant,
    active: usize,
    draining: bool,
    ready: Option<mpsc::Sender<ZoneEvent>>,
    /// Upstream state of this zone (balancers, pools), when anything proxies.
    ups: Option<ZoneUpstreams>,
    connector: Connector,
    /// Upstream connections, by handle.
    upc: Vec<Option<UpConn>>,
    up_gen: u32,
    /// Finished request records, reused (see `try_proxy`). Boxed on purpose: the same
    /// allocations move in and out of `HttpConn::proxy`.
    #[allow(clippy::vec_box)]
    proxy_pool: Vec<Box<proxy::ProxyReq>>,
    /// Counters, access log, listener map, pending reload (ops.rs).
    ops: ZoneOps,
}

/// What processing a request decided about the rest of the input.
enum Next {
    Continue,
    Stop,
    /// Stop here and keep the rest of the input buffered (a proxied request is in progress).
    Hold,
}

impl HttpZone {
    pub fn new(
        id: usize,
        routes: Arc<Routes>,
        set: Arc<Settings>,
        ctl: Arc<ZoneCtl>,
        ready: mpsc::Sender<ZoneEvent>,
        upstreams: Option<Arc<Upstreams>>,
        connector: Connector,
    ) -> Self {
        let now = Instant::now();
        let mut date = DateCache::new();
        date.update(SystemTime::now());
        HttpZone {
            id,
            routes,
            set,
            ctl,
            conns: Vec::new(),
            wheel: TimerWheel::new(now, Duration::from_millis(100), 2048),
            date,
            date_next: now,
            active: 0,
            draining: false,
            ready: Some(ready),
            ups: upstreams.map(|u| ZoneUpstreams::new(u, id)),
            connector,
            upc: Vec::new(),
            up_gen: 0,
            proxy_pool: Vec::new(),
            ops: ZoneOps::default(),
        }
    }

    fn is_up(&self, c: ConnId) -> bool {
        self.upc.get(c.index()).is_some_and(Option::is_some)
    }

    /// Keeps the Date header current with one comparison per call: the wall clock is read
    /// only when a new second has begun.
    fn refresh_date(&mut self, now: Instant) {
        if now >= self.date_next {
            let wall = SystemTime::now();
            self.date.update(wall);
            let sub = wall
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos());
            self.date_next = now + Duration::from_nanos(1_000_000_000 - sub as u64);
        }
    }

    fn conn(&mut self, c: ConnId) -> &mut HttpConn {
        &mut self.conns[c.index()]
    }

    fn set_deadline(&mut self, io: &mut Io, c: ConnId, at: Instant) {
        let conn = &mut self.conns[c.index()];
        conn.deadline = at;
        if !conn.in_wheel {
            conn.in_wheel = true;
            self.wheel.insert(at, c.0, conn.gen);
            io.timer_at(at);
        }
    }

    fn conn_hdr(version11: bool, keep: bool) -> ConnHdr {
        match (keep, version11) {
            (false, _) => ConnHdr::Close,
            (true, true) => ConnHdr::Keep11,
            (true, false) => ConnHdr::Keep10,
        }
    }

    fn expire(&mut self, io: &mut Io, c: ConnId) {
        let pending = io.pending(c);
        if pending > 0 {
            // Still sending: close only if nothing moved for a whole send_timeout.
            let conn = &mut self.conns[c.index()];
            if pending != conn.last_out {
                conn.last_out = pending;
                let at = io.now() + self.set.send_timeout;
                self.set_deadline(io, c, at);
                return;
            }
            io.close(c);
            return;
        }
        match self.conns[c.index()].phase {
            Phase::Idle | Phase::Lingering | Phase::Closed | Phase::ProxyHeader => io.close(c),
            Phase::Head | Phase::Body => self.fail(io, c, 408, false),
            Phase::Proxy => self.proxy_client_timeout(io, c),
            Phase::Tunnel => {} // the upstream side's idle timer ends tunnels
        }
    }

    fn start_drain(&mut self, io: &mut Io) {
        if self.draining {
            return;
        }
        self.draining = true;
        io.stop_listening();
        for i in 0..self.conns.len() {
            let c = ConnId(i as u32);
            let conn = &self.conns[i];
            if conn.phase == Phase::Idle && conn.inbuf.is_empty() && io.pending(c) == 0 {
                self.drain_idle(io, c);
            }
        }
        tracing::debug!(zone = self.id, active = self.active, "draining");
        io.timer_at(io.now() + Duration::from_millis(100));
        if self.active == 0 {
            io.exit();
        }
    }
}

impl Handler for HttpZone {
    fn on_accept(&mut self, io: &mut Io, c: ConnId, listener: ListenerId) {
        let now = io.now();
        if self.conns.len() <= c.index() {
            self.conns.resize_with(c.index() + 1, || HttpConn::new(now));
        }
        self.active += 1;
        self.obs_conns();
        let li = self.route_listener(listener);
        let kind = self.routes.listener_kind.get(li as usize).copied();
        let conn = &mut self.conns[c.index()];
        conn.client = io.peer_addr(c);
        conn.proxy = None;
        conn.tunnel = None;
        conn.stream = None;
        conn.gen = conn.gen.wrapping_add(1);
        conn.listener = li;
        conn.phase = Phase::Idle;
        conn.inbuf.clear();
        conn.requests = 0;
        conn.client_closes = false;
        conn.paused = false;
        conn.eof = false;
        conn.body = None;
        conn.pending = None;
        conn.last_out = 0;
        conn.in_wheel = false;
        let at = now + self.set.header_timeout;
        self.set_deadline(io, c, at);
        let Some(kind) = kind else {
            io.close(c); // accepted on a listener a reload just closed
            return;
        };
        if self.draining {
            // Accepted while the listener was being closed: served (with Connection: close).
            if matches!(kind, ListenerKind::Stream(_)) {
                io.close(c);
                return;
            }
            self.drain_idle(io, c);
        }
        match kind {
            ListenerKind::Http {
                proxy_protocol: true,
            } => self.conns[c.index()].phase = Phase::ProxyHeader,
            ListenerKind::Http { .. } => {}
            ListenerKind::Stream(i) => self.stream_accept(io, c, i),
        }
    }

    fn on_data(&mut self, io: &mut Io, c: ConnId, data: &[u8]) {
        self.refresh_date(io.now());
        if self.is_up(c) {
            self.connector.observe(io, c);
            return self.up_data(io, c, data);
        }
        let conn = &mut self.conns[c.index()];
        match conn.phase {
            Phase::Lingering | Phase::Closed => return,
            Phase::Tunnel => return self.tunnel_client_data(io, c, data),
            Phase::ProxyHeader => return self.proxy_header_data(io, c, data),
            _ => {}
        }
        if conn.paused {
            conn.inbuf.extend_from_slice(data);
            // Pausing takes effect at the next submission: a proxied body may deliver what
            // the socket had queued meanwhile (bounded by the socket's receive buffer).
            let limit = if conn.phase == Phase::Proxy {
                PAUSED_BODY_LIMIT
            } else {
                self.set.max_buffered
            };
            if conn.inbuf.len() > limit {
                io.close(c);
            } else if conn.inbuf.len() > self.set.limits.max_head {
                // Held without stopping the receive (`wait_for_upstream`), and the client
                // keeps sending: now stop it (no-op if already stopped).
                io.pause_recv(c);
            }
            return;
        }
        if conn.inbuf.is_empty() {
            // The common case: parse straight from the receive buffer, keep only a tail.
            let used = self.process(io, c, data);
            let conn = &mut self.conns[c.index()];
            if used < data.len() && conn.phase != Phase::Closed && conn.phase != Phase::Lingering {
                conn.inbuf.extend_from_slice(&data[used..]);
            }
        } else {
            conn.inbuf.extend_from_slice(data);
            self.process_buffered(io, c);
        }
        let conn = &self.conns[c.index()];
        if conn.inbuf.len() > self.set.max_buffered {
            // Only reachable while paused or with a huge partial head (431 handles that).
            io.close(c);
        }
    }

    fn on_connected(&mut self, io: &mut Io, c: ConnId) {
        if self.is_up(c) {
            self.up_connected(io, c);
        }
    }

    fn on_eof(&mut self, io: &mut Io, c: ConnId) {
        if self.is_up(c) {
            self.connector.eof(io, c);
            return self.up_eof(io, c);
        }
        let conn = &mut self.conns[c.index()];
        conn.eof = true;
        match conn.phase {
            Phase::Tunnel => self.tunnel_client_eof(io, c),
            Phase::Proxy => self.proxy_client_eof(io, c),
            Phase::Lingering => {
                if io.pending(c) == 0 {
                    io.close(c)
                } else {
                    io.close_after_flush(c)
                }
            }
            Phase::Body | Phase::Head => io.close(c),
            Phase::Idle if conn.paused => {} // finishes in on_flushed
            _ => io.close_after_flush(c),
        }
    }

    fn on_flushed(&mut self, io: &mut Io, c: ConnId) {
        if self.is_up(c) {
            return self.up_flushed(io, c);
        }
        let conn = &mut self.conns[c.index()];
        if matches!(conn.phase, Phase::Proxy | Phase::Tunnel) {
            return self.client_flushed_while_proxying(io, c);
        }
        if conn.paused {
            conn.paused = false;
            if !conn.eof {
                io.resume_recv(c);
            }
            self.process_buffered(io, c);
        }
    }

    fn on_closed(&mut self, io: &mut Io, c: ConnId, err: Option<std::io::Error>) {
        if self.is_up(c) {
            return self.up_closed(io, c, err);
        }
        if let Some(e) = err {
            tracing::debug!(zone = self.id, conn = c.0, "connection error: {e}");
        }
        self.client_closed_while_proxying(io, c);
        let conn = &mut self.conns[c.index()];
        conn.phase = Phase::Closed;
        conn.body = None;
        conn.pending = None;
        if conn.inbuf.capacity() > 64 * 1024 {
            conn.inbuf = Vec::new();
        } else {
            conn.inbuf.clear();
        }
        self.active -= 1;
        self.obs_closed(io, c);
        if self.draining && self.active == 0 {
            io.exit();
        }
    }

    fn on_timer(&mut self, io: &mut Io) -> Option<Duration> {
        if let Some(tx) = self.ready.take() {
            let _ = tx.send(ZoneEvent::Ready);
        }
        let now = io.now();
        self.refresh_date(now);
        let mut due = Vec::new();
        let mut up_due = Vec::new();
        let conns = &mut self.conns;
        let upc = &mut self.upc;
        self.wheel.advance(now, |wheel, key, gen| {
            if key & UP_KEY != 0 {
                let k = key & !UP_KEY;
                let Some(Some(up)) = upc.get_mut(k as usize) else {
                    return;
                };
                if up.gen != gen {
                    return;
                }
                if up.deadline > now {
                    if up.wheel_at.is_none_or(|w| w <= now) {
                        up.wheel_at = Some(up.deadline);
                        wheel.insert(up.deadline, key, gen);
                    }
                } else {
                    up.wheel_at = None;
                    up_due.push(ConnId(k));
                }
                return;
            }
            let Some(conn) = conns.get_mut(key as usize) else {
                return;
            };
            if conn.gen != gen || conn.phase == Phase::Closed {
                return;
            }
            if conn.deadline > now {
                wheel.insert(conn.deadline, key, gen);
            } else {
                conn.in_wheel = false;
                due.push(ConnId(key));
            }
        });
        for c in due {
            self.expire(io, c);
        }
        for u in up_due {
            self.up_expire(io, u);
        }
        self.ops_tick(io);
        let next = self
            .wheel
            .next_due(now)
            .map(|d| d.max(Duration::from_millis(10)));
        if self.draining {
            return Some(next.map_or(Duration::from_millis(100), |d| {
                d.min(Duration::from_millis(100))
            }));
        }
        next
    }

    fn on_wake(&mut self, io: &mut Io) {
        self.ops_wake(io);
    }

    fn prefetch(&self, c: ConnId) {
        if let Some(conn) = self.conns.get(c.index()) {
            ringx_engine::prefetch(conn);
        }
    }
}
