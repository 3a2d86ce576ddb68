//! The UDP stream role (`[[stream]] protocol = "udp"`, nginx's `listen ... udp` with
//! `proxy_pass`): datagrams from a client address and port form a session with its own
//! connected UDP socket to one server, picked by a hash of the client's address (so one
//! client keeps one server, across its ports and sessions, while the server is up). Datagrams
//! from the server go back to the client from the listener's address (the one the client
//! wrote to, on a wildcard listener). A session ends after `idle_timeout` without a datagram
//! either way, once the `responses` expected per client datagram came back, or when the
//! server's socket fails (an ICMP port unreachable: `ECONNREFUSED`), which also counts
//! against the server as a failed connect does (`max_fails`).
//!
//! **Where a session lives.** The zone that owns a session is the one its datagrams arrive
//! on: every zone has its own `SO_REUSEPORT` UDP socket for the address, and the kernel
//! picks the socket by a hash of the datagram's addresses, so all datagrams of one client
//! address and port reach the same zone. Nothing is shared and nothing is locked.
//!
//! **Bounds.** At most `max_sessions` sessions per stream and zone (a datagram from a new
//! client beyond that is dropped and counted); each session holds at most 16 datagrams
//! (64 KiB) while its socket connects, then nothing: a datagram is passed on within the
//! callback that received it. Datagrams over `max_datagram_size`, empty ones and ones from an
//! address no answer can reach are dropped and counted (`ringx_udp_dropped_total`).

mod session;

use std::net::{IpAddr, SocketAddr};
use std::time::Instant;

use ringx_engine::{ConnId, ConnectTo, Datagram, Io, ListenerId};

use crate::ctx::Cx;
use crate::metrics::bump;
use crate::route::UdpServes;
use crate::udp_counters::{Drop, UdpCounters};
use crate::upstream::connector::transparent_to;
pub use session::{Key, Session, Sessions};

/// Timer-wheel keys of UDP sessions carry this bit (and their slot).
pub const UDP_KEY: u32 = 1 << 30;

/// A zone's UDP sessions.
#[derive(Default)]
pub struct UdpProxy {
    pub sessions: Sessions,
    /// The engine's count of truncated datagrams already added to the counters.
    truncated_seen: u64,
}

/// Whether an answer can go back to `peer`: a unicast address and a port.
fn answerable(peer: &SocketAddr) -> bool {
    if peer.port() == 0 {
        return false;
    }
    match peer.ip() {
        IpAddr::V4(a) => !(a.is_unspecified() || a.is_multicast() || a.is_broadcast()),
        IpAddr::V6(a) => !(a.is_unspecified() || a.is_multicast()),
    }
}

/// The key a client's address is hashed by to pick its server: the IP address alone, so every
/// port (every session) of one client goes to the same server.
fn client_hash(peer: &SocketAddr) -> u64 {
    match peer.ip() {
        IpAddr::V4(a) => ringx_balance::hash_key(&a.octets()),
        IpAddr::V6(a) => ringx_balance::hash_key(&a.octets()),
    }
}

fn drop(c: &UdpCounters, why: Drop) {
    bump(&c.dropped[why as usize], 1);
}

impl UdpProxy {
    /// Copies the engine's datagram counts the role cannot see into its counters.
    pub fn publish_stats(&mut self, io: &Io, uc: &UdpCounters) {
        use std::sync::atomic::Ordering::Relaxed;
        let st = io.dgram_stats();
        uc.send_errors.store(st.send_errors, Relaxed);
        let i = Drop::UpstreamOversized as usize;
        if st.truncated > self.truncated_seen {
            bump(&uc.dropped[i], st.truncated - self.truncated_seen);
            self.truncated_seen = st.truncated;
        }
    }

    /// Whether `u` is a session's socket.
    #[inline]
    pub fn owns(&self, u: ConnId) -> bool {
        self.sessions.by_conn(u).is_some()
    }

    /// A datagram from a client on the listener for `routes.udp_listen[route]` (engine id
    /// `listener`).
    pub fn datagram(&mut self, cx: &mut Cx, route: u32, listener: ListenerId, dg: Datagram<'_>) {
        let why = self.pass_on(cx, route, listener, dg);
        let uc = &cx.ctx.log.counters.udp;
        bump(&uc.from_clients, 1);
        bump(&uc.from_clients_bytes, dg.data.len() as u64);
        match why {
            Ok(sent) => bump(&uc.to_servers, u64::from(sent)),
            Err(d) => drop(uc, d),
        }
    }

    /// [`datagram`](Self::datagram)'s work: Ok(whether it was sent now), or why it was dropped.
    fn pass_on(
        &mut self,
        cx: &mut Cx,
        route: u32,
        listener: ListenerId,
        dg: Datagram<'_>,
    ) -> Result<bool, Drop> {
        let routes = &cx.ctx.routes;
        let Some(&UdpServes::Stream(si)) = routes.udp_serves.get(route as usize) else {
            return Err(Drop::NotServed);
        };
        let def = &routes.streams[si];
        let udp = def.udp.ok_or(Drop::NotServed)?;
        let idle = def.idle_timeout;
        if dg.truncated || dg.data.len() > udp.max_datagram as usize {
            return Err(Drop::Oversized);
        }
        if dg.data.is_empty() || !answerable(&dg.peer) {
            return Err(Drop::Malformed);
        }
        if cx.ctx.draining {
            return Err(Drop::NotServed);
        }
        let key = Key {
            route,
            local: dg.local,
            peer: dg.peer,
        };
        let now = cx.io.now();
        let found = self.sessions.find(&key);
        let i = match found.filter(|&i| self.sessions.get(i).is_some_and(|s| !s.closing)) {
            Some(i) => i,
            None => {
                // A session that is closing (its answers came, or it timed out) takes no
                // more datagrams: its socket's close may still be under way (io_uring), and
                // what it sent now would be lost. The client's datagram opens a new one.
                if let Some(old) = found {
                    self.sessions.detach(old);
                }
                if self.sessions.on_stream(si) >= udp.max_sessions {
                    return Err(Drop::SessionsFull);
                }
                self.open(cx, key, listener, si, now)
                    .ok_or(Drop::NoServer)?
            }
        };
        let s = self.sessions.get_mut(i).ok_or(Drop::NotServed)?;
        if let (Some(e), Some(r)) = (s.expect.as_mut(), udp.responses) {
            *e += u64::from(r);
        }
        Self::touch(cx, s, i, now + idle);
        if !s.connected {
            if s.held.len() >= session::HELD_MAX
                || s.held_bytes + dg.data.len() > session::HELD_BYTES
            {
                return Err(Drop::ConnectBacklog);
            }
            s.held_bytes += dg.data.len();
            s.held.push(dg.data.to_vec());
            return Ok(false);
        }
        if !cx.io.send_datagram(s.up, dg.data) {
            return Err(Drop::SendQueueFull);
        }
        if s.expect == Some(0) && !s.closing {
            // Nothing comes back (responses = 0): the session has done its work.
            s.closing = true;
            cx.io.close(s.up);
        }
        Ok(true)
    }

    /// Opens a session: picks the server by the client's address and opens its socket.
    /// Servers whose socket cannot be opened are marked failed and the next one is tried.
    fn open(
        &mut self,
        cx: &mut Cx,
        key: Key,
        listener: ListenerId,
        stream: usize,
        now: Instant,
    ) -> Option<u32> {
        let def = &cx.ctx.routes.streams[stream];
        let (upstream, responses) = (def.upstream, def.udp.and_then(|u| u.responses));
        let bind = def.bind_client;
        let (pools, gen) = cx.ctx.current_pools()?;
        let servers = pools.defs.list[upstream].servers.len();
        let hash = client_hash(&key.peer);
        let mut tried = Vec::new();
        let mut failures = 0;
        let pools = cx.ctx.pools(gen);
        let opened = loop {
            if tried.len() >= servers {
                break None;
            }
            let Some(server) = pools.pick_by_hash(upstream, hash, &tried, now) else {
                break None;
            };
            tried.push(server);
            let addr = pools.defs.list[upstream].servers[server].addr;
            // bind = "client": the session's socket leaves from the client's address.
            let to = match bind {
                false => Ok(ConnectTo::datagram(addr)),
                true => transparent_to(addr, key.peer.ip()).map(|t| ConnectTo {
                    datagram: true,
                    ..t
                }),
            };
            match to.and_then(|to| cx.io.connect(&to)) {
                Ok(up) => break Some((server, up)),
                Err(e) => {
                    failures += 1;
                    tracing::warn!(
                        "udp stream to upstream {} ({addr}): cannot open a socket: {e}",
                        pools.defs.list[upstream].name
                    );
                    pools.failed(upstream, server, now);
                }
            }
        };
        let uc = &cx.ctx.log.counters.udp;
        bump(&uc.upstream_errors, failures);
        let (server, up) = opened?;
        bump(&uc.sessions_total, 1);
        let i = self.sessions.insert(Session {
            key,
            gen: 0,
            listener,
            stream,
            upstream,
            server,
            pools_gen: gen,
            up,
            connected: false,
            held: Vec::new(),
            held_bytes: 0,
            expect: responses.map(|_| 0),
            answered: false,
            deadline: now,
            wheel_at: None,
            closing: false,
        });
        self.publish(uc);
        Some(i)
    }

    /// The session's socket is connected: what the client sent meanwhile goes out.
    pub fn connected(&mut self, cx: &mut Cx, u: ConnId) {
        let Some(i) = self.sessions.by_conn(u) else {
            return;
        };
        let Some(s) = self.sessions.get_mut(i) else {
            return;
        };
        s.connected = true;
        let uc = &cx.ctx.log.counters.udp;
        for d in std::mem::take(&mut s.held) {
            if cx.io.send_datagram(u, &d) {
                bump(&uc.to_servers, 1);
            } else {
                drop(uc, Drop::SendQueueFull);
            }
        }
        s.held_bytes = 0;
        if s.expect == Some(0) && !s.closing {
            s.closing = true;
            cx.io.close(u);
        }
    }

    /// A datagram from the server of the session whose socket is `u`: to its client, from
    /// the listener.
    pub fn upstream_data(&mut self, cx: &mut Cx, u: ConnId, data: &[u8]) {
        let Some(i) = self.sessions.by_conn(u) else {
            return;
        };
        let r = self.answer(cx, i, u, data);
        let uc = &cx.ctx.log.counters.udp;
        bump(&uc.from_servers, 1);
        match r {
            Ok(()) => {
                bump(&uc.to_clients, 1);
                bump(&uc.to_clients_bytes, data.len() as u64);
            }
            Err(d) => drop(uc, d),
        }
    }

    /// [`upstream_data`](Self::upstream_data)'s work.
    fn answer(&mut self, cx: &mut Cx, i: u32, u: ConnId, data: &[u8]) -> Result<(), Drop> {
        let s = self.sessions.get_mut(i).ok_or(Drop::NotServed)?;
        let (max, idle) = match cx.ctx.routes.streams.get(s.stream) {
            Some(d) => (
                d.udp.map_or(usize::MAX, |x| x.max_datagram as usize),
                d.idle_timeout,
            ),
            None => return Err(Drop::NotServed),
        };
        if data.len() > max {
            return Err(Drop::UpstreamOversized);
        }
        let sent = cx.io.send_to(s.listener, s.key.peer, s.key.local, data);
        if !s.answered {
            s.answered = true;
            if let Some(p) = cx.ctx.pools_if(s.pools_gen) {
                p.succeeded(s.upstream, s.server);
            }
        }
        match s.expect.as_mut() {
            Some(e) if *e <= 1 => {
                *e = 0;
                if !s.closing {
                    s.closing = true;
                    cx.io.close(u);
                }
            }
            Some(e) => {
                *e -= 1;
                let now = cx.io.now();
                Self::touch(cx, s, i, now + idle);
            }
            None => {
                let now = cx.io.now();
                Self::touch(cx, s, i, now + idle);
            }
        }
        if sent {
            Ok(())
        } else {
            Err(Drop::SendQueueFull)
        }
    }

    /// The session's socket is closed (by its end, or by an error from the server).
    pub fn closed(&mut self, cx: &mut Cx, u: ConnId, err: Option<std::io::Error>) {
        let Some(i) = self.sessions.by_conn(u) else {
            return;
        };
        let Some(s) = self.sessions.remove(i) else {
            return;
        };
        let uc = &cx.ctx.log.counters.udp;
        if !s.held.is_empty() {
            bump(
                &uc.dropped[Drop::ConnectBacklog as usize],
                s.held.len() as u64,
            );
        }
        if err.is_some() {
            bump(&uc.upstream_errors, 1);
        }
        self.publish(uc);
        if let Some(e) = err {
            let now = cx.io.now();
            if let Some(p) = cx.ctx.pools_if(s.pools_gen) {
                let d = &p.defs.list[s.upstream];
                tracing::debug!(
                    "udp stream upstream {} ({}): {e}; session of {} ends",
                    d.name,
                    d.servers[s.server].name,
                    s.key.peer
                );
                p.failed(s.upstream, s.server, now);
            }
        }
    }

    /// The timer of session slot `i` (generation `gen`) fired at `now`: refiled if the
    /// session was active since, else it ends.
    pub fn timer(&mut self, cx: &mut Cx, i: u32, gen: u32, now: Instant) {
        let Some(s) = self.sessions.get_mut(i).filter(|s| s.gen == gen) else {
            return;
        };
        if s.deadline > now {
            if s.wheel_at.is_none_or(|w| w <= now) {
                s.wheel_at = Some(s.deadline);
                cx.ctx.wheel.insert(s.deadline, UDP_KEY | i, gen);
            }
            return;
        }
        s.wheel_at = None;
        if !s.closing {
            s.closing = true;
            cx.io.close(s.up);
        }
    }

    /// Ends every session (the zone drains, or a reload removed their listener when
    /// `only_route` names it).
    pub fn close_all(&mut self, io: &mut Io, only_route: Option<u32>) {
        let slots: Vec<u32> = self.sessions.slots().collect();
        for i in slots {
            if let Some(s) = self.sessions.get_mut(i) {
                if !s.closing && only_route.is_none_or(|r| r == s.key.route) {
                    s.closing = true;
                    io.close(s.up);
                }
            }
        }
    }

    /// A reload renumbered the UDP listen addresses: `map[old] = new` (`None`: gone), and
    /// `udp_serves` is what each serves in the new routes.
    pub fn remap_routes(&mut self, io: &mut Io, map: &[Option<u32>], udp_serves: &[UdpServes]) {
        let slots: Vec<u32> = self.sessions.slots().collect();
        for i in slots {
            let Some(s) = self.sessions.get_mut(i) else {
                continue;
            };
            let to = map.get(s.key.route as usize).copied().flatten();
            let stream = |r: u32| match udp_serves.get(r as usize) {
                Some(&UdpServes::Stream(s)) => Some(s),
                _ => None,
            };
            match to.and_then(|r| Some((r, stream(r)?))) {
                Some((r, stream)) => {
                    let old = s.key;
                    s.key.route = r;
                    let new = s.key;
                    let was = std::mem::replace(&mut s.stream, stream);
                    self.sessions.rekey(&old, new, i);
                    self.sessions.moved(was, stream);
                }
                None => {
                    if !s.closing {
                        s.closing = true;
                        io.close(s.up);
                    }
                }
            }
        }
    }

    /// Publishes the number of open sessions.
    fn publish(&self, uc: &UdpCounters) {
        uc.sessions.store(
            self.sessions.open as u64,
            std::sync::atomic::Ordering::Relaxed,
        );
    }

    /// Pushes the session's deadline to `at`; the wheel needs a new entry only when `at` is
    /// earlier than the pending one.
    fn touch(cx: &mut Cx, s: &mut Session, i: u32, at: Instant) {
        s.deadline = at;
        if s.wheel_at.is_none_or(|w| at < w) {
            s.wheel_at = Some(at);
            cx.ctx.wheel.insert(at, UDP_KEY | i, s.gen);
            cx.io.timer_at(at);
        }
    }
}

#[cfg(test)]
mod tests;
