//! Control of a zone from the control thread: draining (graceful shutdown) and configuration
//! reloads, delivered as a command flag and messages that the zone reads when woken
//! ([`ringx_engine::Waker::wake`]).
//!
//! **Reloads.** The control thread parses and validates the new configuration, compiles it
//! and binds new listen addresses, then sends each zone a [`ReloadMsg`]. The zone applies it
//! at once: the next request on any connection is routed by the new routes. What is in
//! flight keeps what it already resolved: its location, and the upstream state (balancers,
//! pools, the upstream list its indices refer to) when the upstreams changed, kept as a
//! retired generation until the last exchange, tunnel or stream using it ends, or until
//! `drain_timeout` (then those are cut). Connections on an address no longer served finish
//! their request and close (HTTP/2 and HTTP/3 ones are sent GOAWAY; a QUIC socket stays open
//! until its last connection has closed, `role/h3/reload.rs`); idle ones close at once.
//! Nothing waits for the slowest request.

use std::sync::atomic::Ordering;
use std::time::Duration;

use ringx_engine::{ConnId, Io, ListenerId};

use super::ctl::{ReloadMsg, ZoneEvent, ZoneMsg, CMD_DRAIN};
use super::listeners::NO_ROUTE;
use super::Client;
use super::Zone;
use crate::ctx::Cx;
use crate::role::http1::{Phase, DRAIN_IDLE_GRACE};
use crate::role::upstream::{UpEvent, UpState};
use crate::role::ClientRole;
use crate::route::UdpServes;
use crate::upstream::pools::ZonePools;

/// How often a zone looks whether retired upstream state is still in use.
const RETIRE_POLL: Duration = Duration::from_millis(100);

impl Zone {
    /// The zone was woken: drain, answers of the auth pool, or messages in the inbox.
    pub(super) fn control(&mut self, io: &mut Io) {
        if self.ctl.cmd.load(Ordering::Acquire) == CMD_DRAIN {
            self.ctx.log.flush();
            self.start_drain(io);
        }
        if self.ctx.guard.auth.pool.is_some() {
            self.verified(io);
        }
        let msgs = std::mem::take(&mut *self.ctl.inbox.lock().unwrap_or_else(|e| e.into_inner()));
        for m in msgs {
            match m {
                ZoneMsg::Reload(r) => self.reload(io, *r),
            }
        }
    }

    /// The auth pool's answers (`guard::verify`), each to the request that waits for it: a
    /// connection of that generation, on HTTP/2 its stream.
    fn verified(&mut self, io: &mut Io) {
        let Some(done) = self.ctx.guard.auth.pool.as_mut().map(|p| p.take()) else {
            return;
        };
        for d in &done {
            let c = d.tag.conn;
            if crate::role::h3::is_quic(c) {
                let mut cx = Cx {
                    io: &mut *io,
                    ctx: &mut self.ctx,
                    ups: &mut self.ups,
                };
                let who = (c, d.tag.gen, d.tag.stream);
                self.quic.verified(&mut cx, who, d.key, d.ok);
                continue;
            }
            let Some(Client { base, role }) = self.clients.get_mut(c.index()) else {
                continue;
            };
            if base.gen != d.tag.gen {
                continue; // the connection has gone: its request with it
            }
            let mut cx = Cx {
                io: &mut *io,
                ctx: &mut self.ctx,
                ups: &mut self.ups,
            };
            match role {
                ClientRole::Http1(h) => h.verified(&mut cx, base, c, d.key, d.ok),
                ClientRole::H2(h) => h.verified(&mut cx, base, c, d.tag.stream, d.key, d.ok),
                _ => {}
            }
            base.tr.seal(cx.io, c);
        }
        if let Some(p) = self.ctx.guard.auth.pool.as_mut() {
            p.recycle(done);
        }
    }

    /// Graceful shutdown: stop accepting; idle keep-alive connections get a short grace for
    /// one more request instead of being closed under a request the client may already have
    /// sent; the zone exits when its last connection closes.
    fn start_drain(&mut self, io: &mut Io) {
        if self.ctx.draining {
            return;
        }
        self.ctx.draining = true;
        // HTTP/3 connections are sent GOAWAY and keep their UDP sockets until they have
        // answered what they were asked; every other listener stops.
        let keep = match self.quic.live() {
            0 => Vec::new(),
            _ => self.quic.drain(&mut Cx {
                io,
                ctx: &mut self.ctx,
                ups: &mut self.ups,
            }),
        };
        if keep.is_empty() {
            io.stop_listening();
        } else {
            let ids = (0..self.listeners.addrs.len() as u32).map(ListenerId);
            for id in ids.filter(|id| !keep.contains(id)) {
                io.close_listener(id);
            }
        }
        // The UDP stream listeners close with the others: no answer could reach a client.
        self.udp.close_all(io, None);
        let at = io.now() + DRAIN_IDLE_GRACE;
        for (i, Client { base, role }) in self.clients.iter_mut().enumerate() {
            let c = ConnId(i as u32);
            match role {
                // Idle, or still sending a response made before the drain reached this zone
                // (the request's last bytes and the wake-up came in one batch, and the data
                // went first): kept alive otherwise, it would wait for its keep-alive timeout.
                ClientRole::Http1(h)
                    if h.phase() == Phase::Idle && base.inbuf.is_empty() && base.deadline > at =>
                {
                    self.ctx.set_deadline(io, base, c, at);
                }
                ClientRole::H2(h) => {
                    let mut cx = Cx {
                        io,
                        ctx: &mut self.ctx,
                        ups: &mut self.ups,
                    };
                    h.drain(&mut cx, base, c);
                    base.tr.seal(cx.io, c);
                }
                _ => {}
            }
        }
        tracing::debug!(zone = self.ctx.id, active = self.ctx.active, "draining");
        io.timer_at(io.now() + Duration::from_millis(100));
        if self.ctx.drained(io, self.quic.live()) {
            io.exit();
        }
    }

    /// Applies a new configuration at once: the next request on any connection is routed by
    /// it. What is in flight keeps what it resolved under the old one — its location, and,
    /// when the upstreams changed, the old upstream state (`ZoneCtx::replace_pools`) until it
    /// finishes or `drain_timeout` passes. Connections on an address that is no longer served
    /// finish their request and close; idle ones close now.
    fn reload(&mut self, io: &mut Io, msg: ReloadMsg) {
        let ReloadMsg {
            generation,
            routes,
            settings,
            upstreams,
            listeners,
            log,
            deadline,
            tls,
        } = msg;
        let now = io.now();
        match (&mut self.ctx.tls, tls) {
            (Some(z), Some(t)) => z.replace(&t, now),
            (z, t) => *z = t.map(|t| crate::tls::ZoneTls::new(&t, now)),
        }
        // Stop accepting on addresses that are gone.
        let l = &mut self.listeners;
        for (id, addr) in l.addrs.iter().enumerate() {
            let list = if l.udp[id] {
                &routes.udp_listen
            } else {
                &routes.listen
            };
            if !l.closed[id] && !list.contains(addr) {
                l.closed[id] = true;
                // A QUIC listener stays open while its connections drain (`role/h3/reload.rs`).
                if !(l.udp[id] && self.quic.retire(ListenerId(id as u32))) {
                    io.close_listener(ListenerId(id as u32));
                }
            }
        }
        // HTTP/3 given back to an address whose QUIC listener still drains: (old, new).
        let mut taken = Vec::new();
        for (id, (addr, sock)) in listeners.into_iter().enumerate() {
            let udp = sock.is_udp();
            let got = io.add_listener(sock);
            debug_assert_eq!(got.0 as usize, l.addrs.len(), "listener {id}");
            if udp {
                let old = (0..l.addrs.len()).map(|o| ListenerId(o as u32)).find(|&o| {
                    let i = o.0 as usize;
                    l.udp[i] && l.addrs[i] == addr && self.quic.retiring(o).is_some()
                });
                taken.extend(old.map(|old| (old, got)));
            }
            l.push(addr, udp);
        }
        l.remap(&routes);
        // UDP sessions follow their address to its index in the new routes; those on an
        // address no longer served end (their listener, which answers, is closed).
        let old = &self.ctx.routes.udp_listen;
        let map: Vec<Option<u32>> = old
            .iter()
            .map(|a| {
                routes
                    .udp_listen
                    .iter()
                    .position(|b| b == a)
                    .map(|i| i as u32)
            })
            .collect();
        self.udp.remap_routes(io, &map, &routes.udp_serves);
        // Client connections keep their address, under its index in the new routes.
        for (i, Client { base, role }) in self.clients.iter_mut().enumerate() {
            if matches!(role, ClientRole::Free) {
                continue;
            }
            let c = ConnId(i as u32);
            match base
                .local
                .and_then(|a| routes.listen.iter().position(|x| *x == a))
            {
                Some(li) => base.listener = li as u32,
                None => {
                    base.listener = NO_ROUTE;
                    match role {
                        ClientRole::Http1(h) => {
                            if h.is_idle(base, io, c) {
                                io.close(c);
                            } else if h.phase() == Phase::Idle && base.inbuf.is_empty() {
                                base.tr.close_after_flush(io, c); // its last response is still being sent
                            } else {
                                h.last_request();
                            }
                        }
                        ClientRole::H2(h) => {
                            let mut cx = Cx {
                                io,
                                ctx: &mut self.ctx,
                                ups: &mut self.ups,
                            };
                            h.drain(&mut cx, base, c);
                            base.tr.seal(cx.io, c);
                        }
                        _ => {}
                    }
                    // A tunnel or a stream on a removed address runs until it ends.
                }
            }
        }
        if let Some(u) = upstreams {
            let next = u.map(|u| ZonePools::new(u, self.ctx.id));
            if let Some(old) = self.ctx.replace_pools(next, now + deadline) {
                // Idle pooled connections of the old state carry nothing: close them.
                for (u, up) in self.ups.iter_mut() {
                    if up.pools_gen == old && up.state == UpState::Idle {
                        up.abandon(io, u);
                    }
                }
                io.timer_at(now + RETIRE_POLL);
            }
        }
        let replaced = std::mem::replace(&mut self.ctx.routes, routes);
        self.ctx.set = settings;
        self.ctx.log.set_format(log);
        self.ctx
            .log
            .counters
            .generation
            .store(generation, Ordering::Relaxed);
        // HTTP/3 connections under the new routes, with its settings and log format.
        self.quic.relisten(
            &mut Cx {
                io,
                ctx: &mut self.ctx,
                ups: &mut self.ups,
            },
            &replaced.listen,
        );
        for (old, new) in taken {
            let serves = self
                .listeners
                .udp_route(new)
                .and_then(|r| self.ctx.routes.udp_serves.get(r as usize));
            if let Some(&UdpServes::Quic { listen }) = serves {
                self.quic.take_over(old, new, listen);
                io.close_listener(old);
            }
        }
        tracing::debug!(zone = self.ctx.id, generation, "configuration reloaded");
        let _ = self.events.send(ZoneEvent::Reloaded {
            zone: self.ctx.id,
            generation,
        });
    }

    /// Upstream states of replaced configurations still in use (tests).
    #[cfg(test)]
    pub fn retired_generations(&self) -> usize {
        self.ctx.retired().count()
    }

    /// Timer work while old upstream states are retired: forget those nothing uses; past
    /// their drain time, end what still uses them (its clients get 502 or see the response
    /// cut, tunnels close).
    pub(super) fn check_retired(&mut self, io: &mut Io) {
        let now = io.now();
        let retired: Vec<(u32, std::time::Instant)> = self.ctx.retired().collect();
        for (gen, until) in retired {
            let users: Vec<(ConnId, bool)> = self
                .ups
                .iter_mut()
                .filter(|(_, up)| up.pools_gen == gen)
                .map(|(u, up)| (u, up.state != UpState::Closing))
                .collect();
            if users.is_empty() {
                self.ctx.drop_retired(gen);
                continue;
            }
            if now >= until {
                self.ctx.pools(gen).expired = true;
                for (u, live) in users {
                    if live {
                        self.upstream_event(io, u, UpEvent::Timeout);
                        if let Some(up) = self.ups.get_mut(u).filter(|x| x.pools_gen == gen) {
                            up.abandon(io, u);
                        }
                    }
                }
            }
        }
        if self.ctx.retired().next().is_some() {
            io.timer_at(now + RETIRE_POLL);
        }
    }
}
