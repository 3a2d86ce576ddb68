//! HTTP/3 over QUIC: a zone's QUIC endpoints ([`Quic`]), one per UDP listener that a server
//! with `quic = true` opened on its TCP listener's address, and their connections.
//!
//! The zone owns the sockets and the I/O: a datagram its UDP listener received is handed
//! to quinn-proto's sans-I/O endpoint (`ringx-quic` configures it: connection IDs that name
//! this zone, the keys all zones share, TLS over ringx's certificates), which routes it to
//! its connection; what the connections then have to send goes out through the zone's
//! datagram queue, and their timers are kept here and fired from the zone's timer turn.
//! Each connection ([`conn::H3Conn`]) speaks HTTP/3 over its streams with `ringx-h3proto`
//! and serves each request through the pipeline, as the HTTP/2 role does (`serve.rs`).
//!
//! **Bounds.** At most `quic_max_connections` connections per zone (a new one past it is
//! refused with CONNECTION_REFUSED), at most `max_incoming` handshakes in progress
//! (quinn-proto's), and Retry (address validation) for every new connection when
//! `quic_retry = "always"`, or once the zone holds half its connections under `"auto"`.

mod conn;
mod deadlines;
mod early;
mod grpc;
mod path_size;
mod reload;
mod serve;
mod slab;
mod stream;

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, OnceLock, Weak};
use std::time::Instant;

use bytes::BytesMut;
use quinn_proto::{ConnectionHandle, DatagramEvent, EcnCodepoint, Endpoint, Incoming, Transmit};
use ringx_engine::{ConnId, Datagram, ListenerId};
use ringx_quic::known_paths::STEPS;
use ringx_quic::{Keys, KnownPaths, Owner};

use crate::ctx::Cx;
use crate::metrics::bump;
use crate::metrics::quic::Closed;
use crate::role::grpc::mux::CallEvent;
use crate::role::multiplex::refresh::Background;
use crate::role::upstream::UpEvent;
use crate::route::Routes;
use crate::settings::RetryWhen;
use conn::{send, H3Conn};
use deadlines::{Deadlines, Front};

/// Where the connection IDs this role issues name their zone, for the reuseport program that
/// brings each packet to that zone (`ringx_steer::quic`).
pub const CID_LAYOUT: ringx_steer::quic::CidLayout = ringx_steer::quic::CidLayout {
    len: ringx_quic::CID_LEN as u8,
    rotation: ringx_quic::ROTATION,
    zone_byte: ringx_quic::ZONE_BYTE as u8,
    epoch_bit: ringx_quic::EPOCH_BIT,
};

/// This process's generation (0 or 1), which its connection IDs carry: a binary upgrade's
/// new process takes the other one (`ringx_steer::quic`). Set once before the zones start.
static EPOCH: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// Sets this process's generation ([`EPOCH`]).
pub fn set_epoch(epoch: u8) {
    EPOCH.store(epoch & 1, Relaxed);
}

/// The bit that marks a QUIC connection where the zone names a client by a `ConnId` (an
/// upstream connection's `client`, a timer): the connection's slot is below it. Apart from
/// the timer wheel's upstream and UDP bits (31 and 30), and above any engine connection.
pub const QUIC_OWNER: u32 = 1 << 29;

/// Whether `c` names a QUIC connection ([`QUIC_OWNER`]).
pub fn is_quic(c: ConnId) -> bool {
    c.0 & QUIC_OWNER != 0
}

/// The keys every zone's endpoints share (stateless resets and Retry tokens must be
/// recognised by whichever zone a packet reaches): made once per process.
/// Sends what the endpoint wrote into `buf` for `t` (a stateless answer: version
/// negotiation, a reset, a Retry, a refusal) from listener `l`, counted in the zone's QUIC
/// counters.
fn answer(cx: &mut Cx, l: ListenerId, t: &Transmit, buf: &mut Vec<u8>) {
    send(cx.io, &cx.ctx.log.counters.quic, l, t, buf);
}

fn keys() -> Option<&'static Keys> {
    static KEYS: OnceLock<Option<Keys>> = OnceLock::new();
    KEYS.get_or_init(|| match Keys::generate() {
        Ok(k) => Some(k),
        Err(e) => {
            tracing::error!("{e}: HTTP/3 is off");
            None
        }
    })
    .as_ref()
}

/// A QUIC listener's endpoint in this zone.
struct Listener {
    endpoint: Endpoint,
    /// The index in `routes.listen` of the TCP listener on the same address (whose servers,
    /// certificates and routes the QUIC listener serves).
    tcp: u32,
    /// The routes the endpoint's TLS configuration was made from: a reload makes a new one.
    /// Weak, so an old configuration is not kept alive, and its allocation is not reused
    /// for a new one that would compare equal.
    routes: Weak<Routes>,
    /// The endpoint's server configuration for a client whose path is known to carry
    /// datagrams of each of `ringx_quic::known_paths::STEPS`' sizes, in that order (one
    /// per step, indexed by `KnownPaths::start`).
    known_path: Vec<Arc<quinn_proto::ServerConfig>>,
    /// A reload removed its address: it keeps its endpoint and configuration for the
    /// connections that drain on it, refuses new ones, and closes after the last
    /// (`reload.rs`).
    retiring: bool,
}

/// A zone's QUIC endpoints and connections.
#[derive(Default)]
pub struct Quic {
    /// By engine listener id.
    listeners: Vec<Option<Listener>>,
    /// Connections by slot (the slot and its generation name one in timers).
    conns: Vec<Option<H3Conn>>,
    gens: Vec<u32>,
    free: Vec<u32>,
    /// Slot of each connection by its listener and quinn-proto handle (ours, not a
    /// client's: a cheap hash, looked up for every datagram).
    by_handle: HashMap<(u32, ConnectionHandle), u32, foldhash::fast::RandomState>,
    /// When each connection is due next (its quinn-proto timer), by slot.
    deadlines: Deadlines,
    /// The buffer quinn-proto writes packets into.
    buf: Vec<u8>,
    /// Connections that got datagrams in the zone's current batch and run at its end
    /// (each once: `H3Conn::due`).
    due: Vec<u32>,
    /// Refreshes of stale cache entries whose connection has gone: they still end in the
    /// cache (`role::multiplex::refresh`).
    adopted: Background,
    /// The client addresses whose path carried larger datagrams lately: a new connection
    /// from one starts at that size rather than probing for it (`path_size.rs`).
    paths: KnownPaths,
}

impl Quic {
    /// Connections open.
    pub fn live(&self) -> usize {
        self.by_handle.len()
    }

    /// A datagram on QUIC listener `listener` (serving `routes.listen[tcp]`'s address), or
    /// several of one sender the kernel coalesced (GRO). Each packet goes to its connection
    /// at once; an established connection answers at the end of the zone's batch
    /// ([`Quic::batch_end`]), once for every datagram the batch brought it: one round of
    /// acknowledgements and responses instead of one per datagram.
    pub fn datagram(&mut self, cx: &mut Cx, listener: ListenerId, tcp: u32, dg: Datagram<'_>) {
        let q = &cx.ctx.log.counters.quic;
        bump(&q.bytes_in, dg.data.len() as u64);
        if dg.truncated {
            // Larger than the zone's datagram buffers: not a QUIC packet of ours.
            return bump(&q.datagrams_in, 1);
        }
        let stride = match dg.segment {
            0 => dg.data.len(),
            s => usize::from(s),
        }
        .max(1);
        // Counted once for the whole coalesced run, not per datagram split off it.
        bump(&q.receives, 1);
        bump(&q.datagrams_in, dg.data.len().div_ceil(stride) as u64);
        let now = cx.io.now();
        cx.ctx.refresh_date(now);
        let ecn = EcnCodepoint::from_bits(dg.ecn);
        // One allocation for the whole coalesced run: each datagram is split off it.
        let mut data = BytesMut::from(dg.data);
        while !data.is_empty() {
            let one = data.split_to(stride.min(data.len()));
            self.packet(cx, (listener, tcp), (dg.peer, dg.local, ecn), one, now);
        }
    }

    /// One datagram for listener `listener` from `peer` (sent to `local`, with `ecn`).
    fn packet(
        &mut self,
        cx: &mut Cx,
        (listener, tcp): (ListenerId, u32),
        (peer, local, ecn): (SocketAddr, Option<IpAddr>, Option<EcnCodepoint>),
        data: BytesMut,
        now: Instant,
    ) {
        let mut buf = std::mem::take(&mut self.buf);
        buf.clear();
        // quinn-proto answers a short-header packet only with a stateless reset.
        let short = data.first().is_some_and(|b| b & 0x80 == 0);
        let ev = self
            .endpoint(cx, listener, tcp)
            .and_then(|ep| ep.handle(now, peer, local, ecn, data, &mut buf));
        self.buf = buf;
        match ev {
            None => {}
            Some(DatagramEvent::Response(t)) => {
                if short {
                    bump(&cx.ctx.log.counters.quic.resets_sent, 1);
                }
                answer(cx, listener, &t, &mut self.buf);
            }
            Some(DatagramEvent::NewConnection(incoming)) => {
                self.incoming(cx, listener, incoming);
            }
            Some(DatagramEvent::ConnectionEvent(h, e)) => {
                let Some(&slot) = self.by_handle.get(&(listener.0, h)) else {
                    return;
                };
                let Some(c) = self.conns[slot as usize].as_mut() else {
                    return;
                };
                // A connection still in its handshake after this packet runs at once, packet
                // by packet: what it reads before the client's Finished came in 0-RTT
                // (`early.rs`), and a 0-RTT packet must not wait for a Finished behind it in
                // the same batch. The packet that completes the handshake waits for the
                // batch's end with every later one: all before it were run, and the request
                // that follows the Finished is then answered with HANDSHAKE_DONE, in one
                // datagram rather than two.
                c.quic.handle_event(e);
                if c.quic.is_handshaking() {
                    self.drive(cx, slot);
                } else if !c.due {
                    c.due = true;
                    self.due.push(slot);
                }
            }
        }
    }

    /// The end of the zone's batch: every connection that got datagrams in it runs.
    pub fn batch_end(&mut self, cx: &mut Cx) {
        if self.due.is_empty() {
            return;
        }
        let mut due = std::mem::take(&mut self.due);
        for &slot in &due {
            // A slot named twice (its connection ended and a new one took it) runs once.
            if let Some(c) = self.conns.get_mut(slot as usize).and_then(Option::as_mut) {
                if std::mem::take(&mut c.due) {
                    self.drive(cx, slot);
                }
            }
        }
        due.clear();
        if self.due.is_empty() {
            self.due = due;
        }
    }

    /// A new connection: accepted, answered with a Retry (its address is not validated and
    /// the zone asks for it), or refused (the zone holds as many as it may).
    fn incoming(&mut self, cx: &mut Cx, listener: ListenerId, incoming: Incoming) {
        let set = &cx.ctx.set.quic;
        let max = set.max_connections as usize;
        let retry = match set.retry {
            RetryWhen::Always => true,
            RetryWhen::Never => false,
            RetryWhen::Auto => self.live() >= max / 2,
        };
        let Some(Some(l)) = self.listeners.get_mut(listener.0 as usize) else {
            return;
        };
        let ep = &mut l.endpoint;
        self.buf.clear();
        if self.by_handle.len() >= max || cx.ctx.draining || l.retiring {
            bump(&cx.ctx.log.counters.quic.refused, 1);
            let t = ep.refuse(incoming, &mut self.buf);
            return answer(cx, listener, &t, &mut self.buf);
        }
        if retry && !incoming.remote_address_validated() && incoming.may_retry() {
            bump(&cx.ctx.log.counters.quic.retried, 1);
            match ep.retry(incoming, &mut self.buf) {
                Ok(t) => {
                    answer(cx, listener, &t, &mut self.buf);
                }
                Err(e) => ep.ignore(e.into_incoming()),
            }
            return;
        }
        let now = cx.io.now();
        let step = self.paths.start(incoming.remote_address().ip(), now);
        let config = step.map(|i| l.known_path[i].clone());
        let (h, quic) = match ep.accept(incoming, now, &mut self.buf, config) {
            Ok(x) => x,
            Err(e) => {
                if let Some(t) = e.response {
                    answer(cx, listener, &t, &mut self.buf);
                }
                return;
            }
        };
        bump(&cx.ctx.log.counters.quic.accepted, 1);
        if step.is_some() {
            bump(&cx.ctx.log.counters.quic.paths_used, 1);
        }
        let tcp = l.tcp;
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                self.conns.push(None);
                self.gens.push(0);
                (self.conns.len() - 1) as u32
            }
        };
        self.gens[slot as usize] = self.gens[slot as usize].wrapping_add(1);
        let gen = self.gens[slot as usize];
        let owner = ConnId(QUIC_OWNER | slot);
        let mut c = H3Conn::new(cx, (listener, h, tcp), (owner, gen), quic, now);
        if let Some(i) = step {
            c.path = path_size::PathWatch::new(c.quic.remote_address().ip(), STEPS[i], true);
        }
        // It runs at the batch's end, not at once: a ClientHello too large for one Initial
        // (a post-quantum key share) comes in two datagrams microseconds apart, and when the
        // second is in the same batch, the first one's ACK goes with the server's flight
        // rather than in a datagram of its own. A 0-RTT request in the first datagram is
        // still read as early: the handshake cannot complete in this batch.
        c.due = true;
        self.conns[slot as usize] = Some(c);
        self.due.push(slot);
        self.by_handle.insert((listener.0, h), slot);
        let live = self.by_handle.len() as u64;
        cx.ctx.log.counters.quic.connections.store(live, Relaxed);
    }

    /// Runs connection `slot`: its events, its requests, what it has to send and its next
    /// timer; a connection that is over is removed.
    fn drive(&mut self, cx: &mut Cx, slot: u32) {
        let Some(c) = self.conns.get_mut(slot as usize).and_then(Option::as_mut) else {
            return;
        };
        let Some(Some(l)) = self.listeners.get_mut(c.listener.0 as usize) else {
            return;
        };
        let served = c.run(cx, &mut l.endpoint) as u64;
        bump(&cx.ctx.log.counters.quic.requests, served);
        c.close_if_done(cx.io.now());
        c.transmit(cx.io, &cx.ctx.log.counters.quic, &mut self.buf);
        let q = &cx.ctx.log.counters.quic;
        let p = c.count_path(q);
        // quinn-proto's closed connection is not "handshaking": one closed before its
        // handshake completed must not count as confirmed (`PathWatch` never un-confirms).
        let handshaking = c.quic.is_handshaking() || c.quic.is_closed();
        let remote = (c.quic.remote_address().ip(), handshaking);
        c.path.note(remote, &p, &mut self.paths, q, cx.io.now());
        if c.quic.is_drained() {
            c.path.ended(&mut self.paths, q);
            c.end_streams(cx);
            let (h, listener, closed) = (c.handle, c.listener, c.closed);
            self.by_handle.remove(&(listener.0, h));
            self.deadlines.clear(slot);
            if let Some(c) = self.conns[slot as usize].take() {
                self.adopted.adopt(c.bg);
            }
            self.free.push(slot);
            let q = &cx.ctx.log.counters.quic;
            bump(&q.closed_by[closed.unwrap_or(Closed::Other).index()], 1);
            q.connections.store(self.by_handle.len() as u64, Relaxed);
            self.gone_from(cx, listener);
            if cx.ctx.drained(cx.io, self.by_handle.len()) {
                cx.io.exit(); // the zone's last connection
            }
            return;
        }
        let at = c.quic.poll_timeout();
        let earlier = self.deadlines.set(slot, self.gens[slot as usize], at);
        if let (true, Some(at)) = (earlier, at) {
            // A deadline no earlier than the zone's next timer turn waits for that turn,
            // which looks where it stands then ([`Quic::timers`]).
            if cx.io.timer_planned().is_none_or(|p| at < p) {
                cx.io.timer_at(at);
            }
        }
    }

    /// An event on upstream connection `u`, whose client is QUIC connection `c` of
    /// generation `gen` (or a refresh of a cache entry it started, which outlives it). Err:
    /// that connection is gone, or the upstream serves none of its streams: the event comes
    /// back for the caller to let go of the upstream.
    pub fn upstream_event<'e>(
        &mut self,
        cx: &mut Cx,
        (c, gen): (ConnId, u32),
        u: ConnId,
        ev: UpEvent<'e>,
    ) -> Result<(), UpEvent<'e>> {
        if self.adopted.has(u) {
            self.adopted.event(cx, u, ev);
            return Ok(());
        }
        let slot = c.0 & !QUIC_OWNER;
        if self.gens.get(slot as usize) != Some(&gen) {
            return Err(ev);
        }
        match self.conns[slot as usize].as_mut() {
            Some(conn) if conn.serves(u) => conn.upstream_event(cx, u, ev),
            _ => return Err(ev),
        }
        self.drive(cx, slot);
        Ok(())
    }

    /// What a gRPC call's upstream stream did (`ev`), for the call of stream tag `sid` on
    /// QUIC connection `c` of generation `gen`; a connection gone since let go of its calls
    /// when it went.
    pub fn grpc_event(&mut self, cx: &mut Cx, (c, gen): (ConnId, u32), sid: u32, ev: CallEvent) {
        let slot = c.0 & !QUIC_OWNER;
        if self.gens.get(slot as usize) != Some(&gen) {
            return;
        }
        if let Some(conn) = self.conns[slot as usize].as_mut() {
            conn.grpc_event(cx, sid, ev);
            self.drive(cx, slot);
        }
    }

    /// The zone's wake-up for QUIC connection `c` of generation `gen`: its requests whose
    /// delay is over are looked at again.
    pub fn resume(&mut self, cx: &mut Cx, c: ConnId, gen: u32) {
        let slot = c.0 & !QUIC_OWNER;
        if self.gens.get(slot as usize) != Some(&gen) {
            return;
        }
        if let Some(conn) = self.conns[slot as usize].as_mut() {
            conn.resume(cx);
            self.drive(cx, slot);
        }
    }

    /// The auth pool's answer for the request on stream `stream` of QUIC connection `c`
    /// (generation `gen`).
    pub fn verified(
        &mut self,
        cx: &mut Cx,
        (c, gen, stream): (ConnId, u32, u32),
        key: u128,
        ok: bool,
    ) {
        let slot = c.0 & !QUIC_OWNER;
        if self.gens.get(slot as usize) != Some(&gen) {
            return;
        }
        if let Some(conn) = self.conns[slot as usize].as_mut() {
            conn.verified(cx, stream, key, ok);
            self.drive(cx, slot);
        }
    }

    /// The zone drains: every connection is sent GOAWAY and closes once its requests are
    /// answered; new ones are refused. Returns the engine ids of the QUIC listeners, which
    /// stay open while connections live (the caller closes the others).
    pub fn drain(&mut self, cx: &mut Cx) -> Vec<ListenerId> {
        let slots: Vec<u32> = self.by_handle.values().copied().collect();
        for slot in slots {
            if let Some(c) = self.conns[slot as usize].as_mut() {
                c.drain();
            }
            self.drive(cx, slot);
        }
        (0..self.listeners.len() as u32)
            .filter(|&i| self.listeners[i as usize].is_some())
            .map(ListenerId)
            .collect()
    }

    /// The zone's timer turn: the connections whose deadlines have come run. Returns the
    /// next deadline, where it stands now, for the zone to wake at ([`Deadlines`]).
    pub fn timers(&mut self, cx: &mut Cx) -> Option<Instant> {
        let now = cx.io.now();
        loop {
            match self.deadlines.next(now) {
                Front::Next(at) => return at,
                Front::Due(slot) => {
                    if let Some(c) = self.conns.get_mut(slot as usize).and_then(Option::as_mut) {
                        c.quic.handle_timeout(now);
                        self.drive(cx, slot);
                    }
                }
            }
        }
    }

    /// The earliest deadline of any connection, as quinn-proto has it now: where the zone's
    /// next timer turn must come by (tests).
    #[cfg(test)]
    pub fn earliest_deadline(&mut self) -> Option<Instant> {
        self.conns
            .iter_mut()
            .flatten()
            .filter_map(|c| c.quic.poll_timeout())
            .min()
    }

    /// The zone's known paths (tests).
    #[cfg(test)]
    pub fn known_paths(&mut self) -> &mut KnownPaths {
        &mut self.paths
    }

    /// The endpoint of QUIC listener `listener`, made on its first datagram (and again after
    /// a reload, for the new certificates; connections in progress keep theirs).
    fn endpoint(&mut self, cx: &Cx, listener: ListenerId, tcp: u32) -> Option<&mut Endpoint> {
        let i = listener.0 as usize;
        if self.listeners.len() <= i {
            self.listeners.resize_with(i + 1, || None);
        }
        let current = Arc::as_ptr(&cx.ctx.routes);
        let stale = self.listeners[i]
            .as_ref()
            .is_none_or(|l| !l.retiring && (l.routes.as_ptr() != current || l.tcp != tcp));
        if stale {
            let routes = Arc::downgrade(&cx.ctx.routes);
            let (endpoint, (config, known_path)) = make_endpoint(cx, tcp)?;
            match self.listeners[i].as_mut() {
                // Connections in progress stay with the endpoint that holds them: only its
                // server configuration is replaced.
                Some(l) => {
                    l.endpoint.set_server_config(Some(config));
                    l.known_path = known_path;
                    l.routes = routes;
                    l.tcp = tcp;
                }
                None => {
                    self.listeners[i] = Some(Listener {
                        endpoint,
                        tcp,
                        routes,
                        known_path,
                        retiring: false,
                    })
                }
            }
        }
        self.listeners[i].as_mut().map(|l| &mut l.endpoint)
    }
}

/// The server configuration of an endpoint, and its forms for a client whose path is known
/// to carry datagrams of each of `STEPS`' sizes.
type ServerConfigs = (
    Arc<quinn_proto::ServerConfig>,
    Vec<Arc<quinn_proto::ServerConfig>>,
);

/// A new endpoint for the zone, serving TCP listener `tcp`'s servers, and its server
/// configurations. None: the listener has no TLS, or QUIC cannot use its configuration
/// (logged).
fn make_endpoint(cx: &Cx, tcp: u32) -> Option<(Endpoint, ServerConfigs)> {
    let keys = keys()?;
    let tls = cx.ctx.tls.as_ref()?.sites.quic_config(tcp as usize)?;
    let set = &cx.ctx.set.quic;
    let limits = ringx_quic::Limits {
        max_streams: set.max_streams,
        idle_timeout: set.idle_timeout,
        ..ringx_quic::Limits::default()
    };
    let sc = match ringx_quic::server_config(
        Arc::new(ringx_quic::for_quic(tls, keys, set.early_data)),
        &limits,
        keys,
    ) {
        Ok(sc) => Arc::new(sc),
        Err(e) => {
            let addr = cx.ctx.routes.listen.get(tcp as usize);
            tracing::error!("QUIC on {addr:?}: {e}");
            return None;
        }
    };
    // `[http] quic_host`: this host's id behind `ringx lb`, which routes a packet whose ID
    // names it here whatever the client's address (0: a host alone). Fixed for the
    // endpoint's life: a reload keeps endpoints, so a new id takes a restart or an upgrade.
    let owner = Owner {
        host: set.host,
        zone: cx.ctx.id as u8,
        epoch: EPOCH.load(Relaxed),
    };
    let ec = Arc::new(ringx_quic::endpoint_config(owner, keys));
    let known = STEPS
        .iter()
        .map(|&mtu| Arc::new(ringx_quic::known_path_config(&sc, &limits, mtu)))
        .collect();
    let ep = Endpoint::new(ec, Some(sc.clone()), true, None);
    Some((ep, (sc, known)))
}
