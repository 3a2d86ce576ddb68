//! The zone handler: one per zone thread, it keeps a record per connection (a [`Client`] for
//! accepted connections, an [`UpConn`](crate::role::UpConn) for upstream ones) and dispatches
//! each engine event to the role that connection plays. Nothing else happens here: the HTTP/1
//! logic is in [`crate::role::http1`], proxying in [`crate::role::exchange`], relaying in
//! [`crate::role::tunnel`]; timers fire per connection, and control messages (drain, reload)
//! are in `control.rs`.

mod client;
mod control;
pub mod ctl;
mod grpc_up;
mod listeners;
mod tls_in;

use std::net::SocketAddr;
use std::sync::{mpsc, Arc};
use std::time::Duration;

use ringx_engine::{ConnId, Datagram, Handler, Io, ListenerId};

use crate::ctx::base::Base;
use crate::ctx::reqlog::RequestLog;
use crate::ctx::{Cx, ZoneCtx};
use crate::role::h3::Quic;
use crate::role::udp::{UdpProxy, UDP_KEY};
use crate::role::upstream::{UpEvent, UpTable, UP_KEY};
use crate::role::{ClientRole, Http1, Stream};
use crate::route::UdpServes;
use crate::route::{ListenerKind, Routes};
use crate::settings::Settings;
use crate::tls::{TlsSetup, ZoneTls, RETRY};
use crate::transport::Transport;
use crate::upstream::connector::Connector;
use crate::upstream::pools::ZonePools;
use crate::upstream::Upstreams;
pub use client::Client;
use client::{dispatch_data, start_h2};
pub use ctl::{ReloadMsg, ZoneCtl, ZoneEvent, ZoneMsg, CMD_DRAIN};
use listeners::Listeners;
/// The index of a connection's `base.listener` when its address is no longer served.
pub use listeners::NO_ROUTE;

/// A role callback's view of the zone (`Cx`), borrowing only the fields it needs, so the
/// zone's other fields (its UDP sessions) stay usable beside it.
macro_rules! cx {
    ($zone:ident, $io:ident) => {
        Cx {
            io: $io,
            ctx: &mut $zone.ctx,
            ups: &mut $zone.ups,
        }
    };
}

/// What a zone is built from.
pub struct ZoneSetup {
    pub id: usize,
    pub routes: Arc<Routes>,
    pub settings: Arc<Settings>,
    pub upstreams: Option<Arc<Upstreams>>,
    pub ctl: Arc<ZoneCtl>,
    /// Where the zone says it runs, and which reloads it applied.
    pub events: mpsc::Sender<ZoneEvent>,
    pub connector: Connector,
    pub log: RequestLog,
    /// The addresses of the zone's listeners, in the order they are registered, and whether
    /// each is a UDP socket.
    pub listeners: Vec<(SocketAddr, bool)>,
    /// The most client connections the zone holds (its `ZoneConfig::max_conns`).
    pub max_conns: u32,
    /// TLS settings, when a server has `tls`.
    pub tls: Option<Arc<TlsSetup>>,
    /// The zone's end of the auth pool (`guard::verify`); None: every hash on the zone.
    pub verify: Option<crate::guard::verify::ZoneVerify>,
}

/// One zone's connections and everything they share.
pub struct Zone {
    ctx: ZoneCtx,
    clients: Vec<Client>,
    ups: UpTable,
    /// UDP stream sessions (`role/udp/`).
    udp: UdpProxy,
    /// HTTP/3: the zone's QUIC endpoints and connections.
    quic: Quic,
    ctl: Arc<ZoneCtl>,
    listeners: Listeners,
    events: mpsc::Sender<ZoneEvent>,
    /// Until the first timer call: say that the zone runs.
    ready: bool,
    max_conns: u32,
    /// Cache refreshes whose HTTP/2 connection closed before they ended.
    updates: crate::role::multiplex::refresh::Background,
}

impl Zone {
    pub fn new(s: ZoneSetup) -> Zone {
        let pools = s.upstreams.map(|u| ZonePools::new(u, s.id));
        let listeners = Listeners::new(s.listeners, &s.routes);
        s.log
            .counters
            .generation
            .store(1, std::sync::atomic::Ordering::Relaxed);
        let mut ctx = ZoneCtx::new(s.id, s.routes, s.settings, pools, s.connector, s.log);
        ctx.tls = s.tls.map(|t| ZoneTls::new(&t, std::time::Instant::now()));
        ctx.guard.auth.pool = s.verify;
        Zone {
            ctx,
            clients: Vec::new(),
            ups: UpTable::default(),
            udp: UdpProxy::default(),
            quic: Quic::default(),
            ctl: s.ctl,
            listeners,
            events: s.events,
            ready: true,
            max_conns: s.max_conns.max(1),
            updates: Default::default(),
        }
    }

    /// Every pooled upstream connection, with whether its record says it is idle (tests).
    #[cfg(test)]
    pub fn pooled(&mut self) -> Vec<(ConnId, bool)> {
        use crate::role::upstream::UpState;
        let Some((pools, _)) = self.ctx.current_pools() else {
            return Vec::new();
        };
        let ids: Vec<ConnId> = pools
            .per
            .iter()
            .flat_map(|p| p.idle.iter().flatten().copied())
            .collect();
        ids.into_iter()
            .map(|u| (u, self.ups.get(u).is_some_and(|x| x.state == UpState::Idle)))
            .collect()
    }

    /// Lets the zone's TLS connections hand their sending side to the kernel for these
    /// ciphers, as a kernel with the `tls` module would (tests).
    #[cfg(test)]
    pub fn force_ktls(&mut self, s: ringx_tls::ktls::Support) {
        if let Some(z) = self.ctx.tls.as_mut() {
            z.ktls = Some(s);
        }
    }

    /// An event on the upstream connection `u`: to the role of the client that owns it, or
    /// to the connection itself when no client does.
    pub(super) fn upstream_event(&mut self, io: &mut Io, u: ConnId, ev: UpEvent) {
        if grpc_up::is_grpc(&self.ups, u) {
            return self.grpc_upstream_event(io, u, ev);
        }
        let owner = self.ups.get(u).and_then(|x| x.client);
        if let Some(q) = owner.filter(|(c, _)| crate::role::h3::is_quic(*c)) {
            if let Err(ev) = self.quic.upstream_event(&mut cx!(self, io), q, u, ev) {
                orphan(cx!(self, io), u, ev);
            }
            return;
        }
        let client = owner.and_then(|(c, gen)| {
            self.clients
                .get_mut(c.index())
                .filter(|x| x.base.gen == gen)
                .map(|x| (c, x))
        });
        let mut cx = Cx {
            io,
            ctx: &mut self.ctx,
            ups: &mut self.ups,
        };
        // A cache refresh whose client has closed (its slot may be free or reused by now).
        if self.updates.has(u) {
            return self.updates.event(&mut cx, u, ev);
        }
        if let Some((c, Client { base, role })) = client {
            let next = match role {
                ClientRole::Http1(h) => h.upstream_event(&mut cx, base, c, u, ev),
                ClientRole::H2(h) => {
                    h.upstream_event(&mut cx, base, c, u, ev);
                    None
                }
                ClientRole::Stream(s) => s.upstream_event(&mut cx, base, c, u, ev),
                ClientRole::Tunnel(t) if t.up == u => {
                    t.upstream_event(&mut cx, base, c, ev);
                    None
                }
                ClientRole::Tunnel(_) | ClientRole::Free => return orphan(cx, u, ev),
            };
            if let Some(t) = next {
                *role = ClientRole::Tunnel(t);
            }
            base.tr.seal(cx.io, c);
            return;
        }
        orphan(cx, u, ev)
    }

    /// An event on a multiplexed gRPC connection: its calls' events go to their streams.
    fn grpc_upstream_event(&mut self, io: &mut Io, u: ConnId, ev: UpEvent) {
        let mut cx = Cx {
            io,
            ctx: &mut self.ctx,
            ups: &mut self.ups,
        };
        for (owner, ev) in grpc_up::event(&mut cx, u, ev) {
            if crate::role::h3::is_quic(owner.c) {
                self.quic
                    .grpc_event(&mut cx, (owner.c, owner.gen), owner.sid, ev);
                continue;
            }
            // A client gone since let go of its streams when it went.
            let Some(Client { base, role }) = self.clients.get_mut(owner.c.index()) else {
                continue;
            };
            if let (true, ClientRole::H2(h)) = (base.gen == owner.gen, role) {
                h.grpc_event(&mut cx, base, owner.c, owner.sid, ev);
                base.tr.seal(cx.io, owner.c);
            }
        }
    }

    fn upstream_closed(&mut self, io: &mut Io, u: ConnId, err: Option<std::io::Error>) {
        let Some(gen) = self.ups.get(u).map(|x| x.gen) else {
            return;
        };
        self.ctx.connector.closed(u, io.now());
        self.upstream_event(io, u, UpEvent::Closed(err));
        // A retry may have opened a new connection in this very slot: keep that one.
        if self.ups.get(u).is_some_and(|x| x.gen == gen) {
            self.ups.take(u);
        }
        self.ctx.left(io, self.ctx.active + self.ups.len());
    }

    /// The zone is close to its connection limit: the connections that wait longest for a
    /// request — idle keep-alive ones, and new ones that have sent nothing — are closed,
    /// oldest first, so that new clients are served rather than turned away (nginx drains
    /// its reusable connections the same way). A keep-alive client whose connection is
    /// reclaimed opens a new one for its next request.
    fn reclaim_idle(&mut self, io: &mut Io) {
        let want = reserve(self.max_conns) as usize;
        let mut idle: Vec<(std::time::Instant, ConnId)> = self
            .clients
            .iter()
            .enumerate()
            .filter_map(|(i, cl)| match &cl.role {
                ClientRole::Http1(h) if h.is_idle(&cl.base, io, ConnId(i as u32)) => {
                    Some((cl.base.idle_since, ConnId(i as u32)))
                }
                ClientRole::H2(h) if h.is_idle(&cl.base, io, ConnId(i as u32)) => {
                    Some((cl.base.idle_since, ConnId(i as u32)))
                }
                _ => None,
            })
            .collect();
        if idle.len() > want {
            idle.select_nth_unstable(want);
            idle.truncate(want);
        }
        if !idle.is_empty() {
            tracing::info!(
                zone = self.ctx.id,
                "connection limit near (max_conns {}): closing the {} longest idle connections",
                self.max_conns,
                idle.len()
            );
        }
        for (_, c) in idle {
            io.close(c);
        }
    }

    /// A client connection's deadline passed.
    fn expire(&mut self, io: &mut Io, c: ConnId) {
        let Client { base, role } = &mut self.clients[c.index()];
        let mut cx = Cx {
            io,
            ctx: &mut self.ctx,
            ups: &mut self.ups,
        };
        if base.tr.is_tls() && base.tr.tls_info().is_none() {
            // A handshake that did not finish in time: nothing to answer in (nginx closes
            // too), and a failed handshake for the metrics.
            crate::metrics::bump(&cx.ctx.log.counters.tls_failed, 1);
            tracing::debug!(conn = c.0, addr = ?base.addr, "TLS: handshake timed out");
            cx.io.close(c);
            return;
        }
        let pending = base.tr.pending(cx.io, c);
        if pending > 0 {
            // Still sending: close only if nothing moved for a whole send_timeout.
            if pending != base.last_out {
                base.last_out = pending;
                let at = cx.io.now() + cx.ctx.set.send_timeout;
                cx.ctx.set_deadline(cx.io, base, c, at);
                return;
            }
            cx.io.close(c);
            return;
        }
        match role {
            ClientRole::Http1(h) => h.expire(&mut cx, base, c),
            ClientRole::H2(h) => h.expire(&mut cx, base, c),
            ClientRole::Stream(s) => s.expire(&mut cx, c),
            ClientRole::Tunnel(_) => {} // the upstream side's idle timer ends tunnels
            ClientRole::Free => cx.io.close(c),
        }
        base.tr.seal(cx.io, c);
    }

    /// Bytes on a TLS client connection (`None`: go on with what waited for the budget).
    fn tls_data(&mut self, io: &mut Io, c: ConnId, data: Option<&[u8]>) {
        let (Some(z), Some(cl)) = (self.ctx.tls.as_mut(), self.clients.get_mut(c.index())) else {
            io.close(c);
            return;
        };
        let counters = &self.ctx.log.counters;
        let next = tls_in::receive(io, z, counters, &mut cl.base, c, data);
        self.alpn_h2(io, c);
        let (plain, eof) = match next {
            tls_in::Next::Nothing => return,
            tls_in::Next::Data(p) => (p, false),
            tls_in::Next::Eof(p) => (p, true),
        };
        if !plain.is_empty() {
            self.client_data(io, c, &plain);
        }
        let Some(cl) = self.clients.get_mut(c.index()) else {
            return;
        };
        tls_in::give_back(&mut cl.base, plain);
        if eof {
            self.on_eof(io, c);
        }
    }

    /// A TLS handshake that agreed on ALPN `h2` makes a new connection HTTP/2 (our
    /// SETTINGS go out with the handshake's last flight).
    fn alpn_h2(&mut self, io: &mut Io, c: ConnId) {
        let Some(Client { base, role }) = self.clients.get_mut(c.index()) else {
            return;
        };
        let fresh = matches!(role, ClientRole::Http1(h) if h.is_fresh());
        if !fresh || !base.tr.tls_info().is_some_and(|i| i.h2) {
            return;
        }
        let mut cx = Cx {
            io,
            ctx: &mut self.ctx,
            ups: &mut self.ups,
        };
        *role = ClientRole::H2(Box::new(start_h2(&mut cx, base, c)));
        base.tr.seal(cx.io, c);
    }

    /// Handshakes that waited for the budget go on, oldest first, as many as it allows. The
    /// first refusal ends the pass: a long queue (a flood) costs nothing per tick.
    fn tls_retry(&mut self, io: &mut Io) {
        let now = io.now();
        loop {
            let Some(z) = self.ctx.tls.as_mut() else {
                return;
            };
            let Some((c, gen)) = z.waiting.front() else {
                return;
            };
            if self
                .clients
                .get(c.index())
                .is_none_or(|x| x.base.gen != gen)
            {
                z.waiting.pop_front();
                continue;
            }
            if !z.budget.ready(now) {
                io.timer_at(now + RETRY);
                return;
            }
            z.waiting.pop_front();
            self.tls_data(io, c, None);
        }
    }

    /// A held request's time came: its connection (if still the same one) goes on.
    fn resume(&mut self, io: &mut Io, c: ConnId, gen: u32) {
        if crate::role::h3::is_quic(c) {
            return self.quic.resume(&mut cx!(self, io), c, gen);
        }
        let Some(Client { base, role }) = self.clients.get_mut(c.index()) else {
            return;
        };
        if base.gen != gen {
            return;
        }
        let mut cx = Cx {
            io,
            ctx: &mut self.ctx,
            ups: &mut self.ups,
        };
        match role {
            ClientRole::Http1(h) => h.resume(&mut cx, base, c),
            ClientRole::H2(h) => h.resume(&mut cx, base, c),
            _ => {}
        }
        base.tr.seal(cx.io, c);
    }

    /// Plaintext for a client connection's role.
    fn client_data(&mut self, io: &mut Io, c: ConnId, data: &[u8]) {
        let Some(Client { base, role }) = self.clients.get_mut(c.index()) else {
            return;
        };
        let mut cx = Cx {
            io,
            ctx: &mut self.ctx,
            ups: &mut self.ups,
        };
        dispatch_data(&mut cx, base, role, c, data);
        base.tr.seal(cx.io, c);
    }
}

/// Slots a zone keeps free for new connections: reaching `max_conns - reserve` open client
/// connections makes it close this many of the longest idle ones.
fn reserve(max_conns: u32) -> u32 {
    (max_conns / 32).clamp(1, 256)
}

/// An event on an upstream connection no client owns.
fn orphan(cx: Cx, u: ConnId, ev: UpEvent) {
    if let Some(up) = cx.ups.get_mut(u) {
        let pools = cx.ctx.pools(up.pools_gen);
        up.on_orphan(cx.io, Some(pools), u, &ev);
    }
}

impl Handler for Zone {
    fn on_accept(&mut self, io: &mut Io, c: ConnId, listener: ListenerId) {
        let now = io.now();
        if self.ctx.active as u32 + reserve(self.max_conns) >= self.max_conns {
            self.reclaim_idle(io);
        }
        if self.clients.len() <= c.index() {
            self.clients.resize_with(c.index() + 1, || Client {
                base: Base::new(now),
                role: ClientRole::Free,
            });
        }
        self.ctx.active += 1;
        self.ctx.log.active(self.ctx.active);
        let li = self.listeners.route(listener);
        let kind = self.ctx.routes.listener_kind.get(li as usize).copied();
        let local = self.ctx.routes.listen.get(li as usize).copied();
        let tr = crate::tls::transport_for(self.ctx.tls.as_ref(), li as usize, io);
        let Client { base, role } = &mut self.clients[c.index()];
        base.open(li, io.peer_addr(c), local, tr, now);
        // A stream listener's role replaces this one below; until then, and for a connection
        // closed now, it is an HTTP/1 connection, closed the usual way.
        let proxy_header = matches!(
            kind,
            Some(ListenerKind::Http {
                proxy_protocol: true
            })
        );
        *role = ClientRole::Http1(Http1::new(proxy_header));
        let mut cx = Cx {
            io,
            ctx: &mut self.ctx,
            ups: &mut self.ups,
        };
        let at = now + cx.ctx.set.header_timeout;
        cx.ctx.set_deadline(cx.io, base, c, at);
        let Some(kind) = kind else {
            cx.io.close(c); // accepted on a listener a reload just closed
            return;
        };
        if cx.ctx.draining {
            // Accepted while the listener was being closed: served (with Connection: close).
            if matches!(kind, ListenerKind::Stream(_)) {
                cx.io.close(c);
                return;
            }
            let at = now + crate::role::http1::DRAIN_IDLE_GRACE;
            cx.ctx.set_deadline(cx.io, base, c, at);
        }
        if let ListenerKind::Stream(i) = kind {
            *role = ClientRole::Stream(Stream::accept(&mut cx, base, c, i));
        }
    }

    fn on_data(&mut self, io: &mut Io, c: ConnId, data: &[u8]) {
        self.ctx.refresh_date(io.now());
        if let Some(up) = self.ups.get_mut(c) {
            self.ctx.connector.observe(io, c);
            return match tls_in::upstream_receive(io, &mut up.tr, c, data) {
                None => self.upstream_event(io, c, UpEvent::Data(data)),
                Some(tls_in::UpNext::Nothing) => {}
                Some(tls_in::UpNext::Data(plain, closed)) => {
                    if !plain.is_empty() {
                        self.upstream_event(io, c, UpEvent::Data(&plain));
                    }
                    if closed && self.ups.contains(c) {
                        self.upstream_event(io, c, UpEvent::Eof);
                    }
                    if let Some(crate::transport::Transport::TlsUp(t)) =
                        self.ups.get_mut(c).map(|x| &mut x.tr)
                    {
                        if t.conn.plain.is_empty() {
                            t.conn.plain = plain;
                            t.conn.plain.clear();
                        }
                    }
                }
                Some(tls_in::UpNext::Failed(why)) => {
                    let up = self.ups.get(c).map(|x| x.upstream);
                    tls_in::upstream_failed(io, &self.ctx, up, c, &why);
                    io.close(c);
                }
            };
        }
        if self.udp.owns(c) {
            return self.udp.upstream_data(&mut cx!(self, io), c, data);
        }
        let Some(Client { base, role }) = self.clients.get_mut(c.index()) else {
            return;
        };
        if base.tr.is_tls() {
            return self.tls_data(io, c, Some(data));
        }
        let mut cx = Cx {
            io,
            ctx: &mut self.ctx,
            ups: &mut self.ups,
        };
        dispatch_data(&mut cx, base, role, c, data);
    }

    fn on_connected(&mut self, io: &mut Io, c: ConnId) {
        if self.ups.contains(c) {
            self.upstream_event(io, c, UpEvent::Connected);
        } else if self.udp.owns(c) {
            self.udp.connected(&mut cx!(self, io), c);
        }
    }

    fn on_datagram(&mut self, io: &mut Io, listener: ListenerId, dg: Datagram<'_>) {
        let Some(route) = self.listeners.udp_route(listener) else {
            // A QUIC listener a reload removed, whose connections drain (`role/h3/reload.rs`).
            if let Some(tcp) = self.quic.retiring(listener) {
                return self.quic.datagram(&mut cx!(self, io), listener, tcp, dg);
            }
            return self
                .udp
                .datagram(&mut cx!(self, io), u32::MAX, listener, dg);
        };
        if let Some(&UdpServes::Quic { listen }) = self.ctx.routes.udp_serves.get(route as usize) {
            return self.quic.datagram(&mut cx!(self, io), listener, listen, dg);
        }
        self.udp.datagram(&mut cx!(self, io), route, listener, dg);
    }

    fn on_eof(&mut self, io: &mut Io, c: ConnId) {
        if self.ups.contains(c) {
            self.ctx.connector.eof(io, c);
            return self.upstream_event(io, c, UpEvent::Eof);
        }
        let Some(Client { base, role }) = self.clients.get_mut(c.index()) else {
            return;
        };
        let mut cx = Cx {
            io,
            ctx: &mut self.ctx,
            ups: &mut self.ups,
        };
        base.eof = true;
        match role {
            ClientRole::Http1(h) => h.on_eof(&mut cx, base, c),
            ClientRole::H2(h) => h.on_eof(&mut cx, base, c),
            ClientRole::Tunnel(t) => t.client_eof(&mut cx, base, c),
            ClientRole::Stream(s) => s.client_eof(&mut cx, base, c),
            ClientRole::Free => {}
        }
        base.tr.seal(cx.io, c);
    }

    fn on_flushed(&mut self, io: &mut Io, c: ConnId) {
        if self.ups.contains(c) {
            return self.upstream_event(io, c, UpEvent::Flushed);
        }
        let Some(Client { base, role }) = self.clients.get_mut(c.index()) else {
            return;
        };
        if let Transport::Tls(t) = &mut base.tr {
            // More of a file to encrypt, or the role did not ask: not the role's event.
            if t.has_queue() {
                return t.seal(io, c);
            }
            if !std::mem::take(&mut t.notify) {
                return;
            }
        }
        let mut cx = Cx {
            io,
            ctx: &mut self.ctx,
            ups: &mut self.ups,
        };
        match role {
            ClientRole::Http1(h) => h.on_flushed(&mut cx, base, c),
            ClientRole::H2(h) => h.on_flushed(&mut cx, base, c),
            ClientRole::Tunnel(t) => t.client_flushed(&mut cx),
            ClientRole::Stream(_) | ClientRole::Free => {}
        }
        base.tr.seal(cx.io, c);
    }

    fn on_closed(&mut self, io: &mut Io, c: ConnId, err: Option<std::io::Error>) {
        if self.ups.contains(c) {
            return self.upstream_closed(io, c, err);
        }
        if self.udp.owns(c) {
            return self.udp.closed(&mut cx!(self, io), c, err);
        }
        let Some(Client { base, role }) = self.clients.get_mut(c.index()) else {
            return;
        };
        if matches!(role, ClientRole::Free) {
            return;
        }
        if let Some(e) = err {
            tracing::debug!(zone = self.ctx.id, conn = c.0, "connection error: {e}");
        }
        let mut cx = Cx {
            io,
            ctx: &mut self.ctx,
            ups: &mut self.ups,
        };
        match role {
            ClientRole::Http1(h) => h.on_closed(&mut cx),
            ClientRole::H2(h) => self.updates.adopt(h.on_closed(&mut cx, base, c)),
            ClientRole::Tunnel(t) => t.client_closed(&mut cx),
            ClientRole::Stream(s) => s.client_closed(&mut cx),
            ClientRole::Free => {}
        }
        *role = ClientRole::Free;
        base.release();
        let ctx = &mut self.ctx;
        ctx.active -= 1;
        ctx.left(io, ctx.active + self.ups.len());
        ctx.log.end(io, c, base, ctx.id);
        ctx.log.active(ctx.active);
        if ctx.drained(io, self.quic.live()) {
            io.exit();
        }
    }

    fn on_timer(&mut self, io: &mut Io) -> Option<Duration> {
        if std::mem::take(&mut self.ready) {
            let _ = self.events.send(ZoneEvent::Ready);
        }
        let now = io.now();
        self.ctx.refresh_date(now);
        if self.ctx.tls.as_ref().is_some_and(|z| !z.waiting.is_empty()) {
            self.tls_retry(io);
        }
        let mut due = Vec::new();
        let mut up_due = Vec::new();
        let mut udp_due = Vec::new();
        let (clients, ups) = (&mut self.clients, &mut self.ups);
        self.ctx.wheel.advance(now, |wheel, key, gen| {
            if key & UDP_KEY != 0 && key & UP_KEY == 0 {
                udp_due.push((key & !UDP_KEY, gen));
                return;
            }
            if key & UP_KEY != 0 {
                let u = ConnId(key & !UP_KEY);
                let Some(up) = ups.get_mut(u) else { return };
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
                    up_due.push(u);
                }
                return;
            }
            let Some(cl) = clients.get_mut(key as usize) else {
                return;
            };
            if cl.base.gen != gen || matches!(cl.role, ClientRole::Free) {
                return;
            }
            let b = &mut cl.base;
            if b.deadline > now {
                // Filed again unless an entry for an earlier deadline is still pending.
                if b.wheel_at.is_none_or(|w| w <= now) {
                    b.wheel_at = Some(b.deadline);
                    wheel.insert(b.deadline, key, gen);
                }
            } else {
                b.wheel_at = None;
                due.push(ConnId(key));
            }
        });
        for c in due {
            self.expire(io, c);
        }
        for u in up_due {
            self.upstream_event(io, u, UpEvent::Timeout);
        }
        for (i, gen) in udp_due {
            self.udp.timer(&mut cx!(self, io), i, gen, now);
        }
        let quic = self.quic.timers(&mut cx!(self, io));
        self.udp.publish_stats(io, &self.ctx.log.counters.udp);
        if !self.ctx.soon.is_empty() {
            for (c, gen) in self.ctx.due(now) {
                self.resume(io, c, gen);
            }
        }
        let log = self.ctx.log.tick(now);
        self.ctx.trim(io, self.ctx.active + self.ups.len());
        if self.ctx.retired().next().is_some() {
            self.check_retired(io);
        }
        let next = self
            .ctx
            .wheel
            .next_due(now)
            .map(|d| d.max(Duration::from_millis(10)));
        let soon = self
            .ctx
            .soon
            .peek()
            .map(|r| r.0 .0.saturating_duration_since(now));
        let trim = self.ctx.trim.at().map(|t| t.saturating_duration_since(now));
        let quic = quic.map(|t| t.saturating_duration_since(now));
        let log = log.map(|t| t.saturating_duration_since(now));
        let next = next
            .into_iter()
            .chain(soon)
            .chain(trim)
            .chain(quic)
            .chain(log)
            .min();
        if self.ctx.drained(io, self.quic.live()) {
            io.exit();
        }
        if self.ctx.draining {
            return Some(next.map_or(Duration::from_millis(100), |d| {
                d.min(Duration::from_millis(100))
            }));
        }
        next
    }

    fn on_wake(&mut self, io: &mut Io) {
        self.control(io);
    }

    fn on_batch_end(&mut self, io: &mut Io) {
        self.quic.batch_end(&mut cx!(self, io));
    }

    fn prefetch(&self, c: ConnId) {
        if let Some(cl) = self.clients.get(c.index()) {
            ringx_engine::prefetch(cl);
        }
    }
}

#[cfg(test)]
mod quic_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tls_tests;
