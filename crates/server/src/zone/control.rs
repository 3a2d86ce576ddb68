//! Control of a zone from the control thread: draining (graceful shutdown) and configuration
//! reloads, delivered as a command flag and messages that the zone reads when woken
//! ([`ringx_engine::Waker::wake`]).
//!
//! **Reloads.** The control thread parses and validates the new configuration, compiles it
//! and binds new listen addresses, then sends each zone a [`ReloadMsg`]. The zone swaps its
//! routes, settings and upstreams between two callbacks once nothing in flight depends on the
//! old ones: connections on a removed address must be gone (idle ones are closed at once,
//! busy ones finish their request and close), and when the upstreams change, no upstream
//! connection may remain (idle ones are closed; requests being proxied finish first). Until
//! then the old configuration serves, requests in flight included. Past `drain_timeout` the
//! connections that still hold the swap back are closed.

use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ringx_config::ops::LogFormat;
use ringx_engine::{ConnId, Io, ListenerId};

use super::client::Client;
use super::Zone;
use crate::role::http1::{Phase, DRAIN_IDLE_GRACE};
use crate::role::upstream::UpState;
use crate::role::ClientRole;
use crate::route::Routes;
use crate::settings::Settings;
use crate::upstream::pools::ZonePools;
use crate::upstream::Upstreams;

/// Commands from the control thread, read when the zone is woken (0 = run).
pub const CMD_DRAIN: u8 = 1;
/// A driver listener whose address is not (or no longer) served.
const NO_ROUTE: u32 = u32::MAX;
/// How often a zone re-checks a reload that waits for its safe point.
const RELOAD_POLL: Duration = Duration::from_millis(50);

/// Control commands and messages for a zone. `cmd` and the inbox are read when the zone is
/// woken.
#[derive(Default)]
pub struct ZoneCtl {
    pub cmd: AtomicU8,
    pub inbox: Mutex<Vec<ZoneMsg>>,
}

impl ZoneCtl {
    pub fn new() -> ZoneCtl {
        ZoneCtl::default()
    }
}

pub enum ZoneMsg {
    Reload(Box<ReloadMsg>),
}

/// Sent to the control thread once the zone runs, and after each reload it applied.
pub enum ZoneEvent {
    Ready,
    Reloaded { zone: usize, generation: u64 },
}

/// A compiled configuration for one zone.
pub struct ReloadMsg {
    pub generation: u64,
    pub routes: Arc<Routes>,
    pub settings: Arc<Settings>,
    /// `Some`: the upstreams changed (to these); `None`: keep the zone's upstream state.
    pub upstreams: Option<Option<Arc<Upstreams>>>,
    /// This zone's sockets for addresses that were not served before.
    pub listeners: Vec<(SocketAddr, TcpListener)>,
    pub log: Option<LogFormat>,
    /// After this long, connections holding the swap back are closed.
    pub deadline: Duration,
}

/// The zone's listeners: their addresses in registration order, and which address of the
/// routes each serves now.
pub(super) struct Listeners {
    addrs: Vec<SocketAddr>,
    map: Vec<u32>,
    /// Closed by a reload (their address is gone).
    closed: Vec<bool>,
}

impl Listeners {
    pub(super) fn new(addrs: Vec<SocketAddr>, routes: &Routes) -> Listeners {
        let mut l = Listeners {
            closed: vec![false; addrs.len()],
            addrs,
            map: Vec::new(),
        };
        l.remap(routes);
        l
    }

    fn remap(&mut self, routes: &Routes) {
        self.map = self
            .addrs
            .iter()
            .zip(&self.closed)
            .map(|(a, &closed)| match closed {
                true => NO_ROUTE,
                false => routes
                    .listen
                    .iter()
                    .position(|x| x == a)
                    .map_or(NO_ROUTE, |i| i as u32),
            })
            .collect();
    }

    /// The index in `routes.listen` of what `listener` serves (`u32::MAX`: nothing now).
    pub(super) fn route(&self, listener: ListenerId) -> u32 {
        match self.map.get(listener.0 as usize) {
            Some(&i) => i,
            // Without addresses (tests), listeners are registered in routes order.
            None if self.addrs.is_empty() => listener.0,
            None => NO_ROUTE,
        }
    }
}

impl Zone {
    /// The zone was woken: drain, or messages in the inbox.
    pub(super) fn control(&mut self, io: &mut Io) {
        if self.ctl.cmd.load(Ordering::Acquire) == CMD_DRAIN {
            self.ctx.log.flush();
            self.start_drain(io);
        }
        let msgs = std::mem::take(&mut *self.ctl.inbox.lock().unwrap_or_else(|e| e.into_inner()));
        for m in msgs {
            match m {
                ZoneMsg::Reload(r) => {
                    let deadline = io.now() + r.deadline;
                    if let Some((old, _)) = self.reload.take() {
                        // A newer reload replaces one still waiting; its new sockets go.
                        tracing::debug!(zone = self.ctx.id, "reload {} superseded", old.generation);
                    }
                    self.reload = Some((r, deadline));
                    self.try_reload(io);
                }
            }
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
        io.stop_listening();
        let at = io.now() + DRAIN_IDLE_GRACE;
        for (i, Client { base, role }) in self.clients.iter_mut().enumerate() {
            let c = ConnId(i as u32);
            if let ClientRole::Http1(h) = role {
                if h.is_idle(base, io, c) && base.deadline > at {
                    self.ctx.set_deadline(io, base, c, at);
                }
            }
        }
        tracing::debug!(zone = self.ctx.id, active = self.ctx.active, "draining");
        io.timer_at(io.now() + Duration::from_millis(100));
        if self.ctx.active == 0 {
            io.exit();
        }
    }

    /// Applies the pending reload if nothing in flight depends on what it changes; else
    /// prepares (closes what can go) and checks again shortly.
    pub(super) fn try_reload(&mut self, io: &mut Io) {
        let Some((msg, deadline)) = self.reload.as_ref() else {
            return;
        };
        let now = io.now();
        let forced = now >= *deadline;
        let ups_change = msg.upstreams.is_some();
        let new_listen = msg.routes.listen.clone();
        // Stop accepting on addresses that are gone.
        let l = &mut self.listeners;
        for (id, addr) in l.addrs.iter().enumerate() {
            if !l.closed[id] && !new_listen.contains(addr) {
                l.closed[id] = true;
                io.close_listener(ListenerId(id as u32));
            }
        }
        let mut blocked = 0usize;
        for (i, Client { base, role }) in self.clients.iter_mut().enumerate() {
            let c = ConnId(i as u32);
            let proxied = match role {
                ClientRole::Free => continue,
                ClientRole::Http1(h) => h.phase() == Phase::Proxy,
                ClientRole::Tunnel(_) | ClientRole::Stream(_) => true,
            };
            let addr = self.ctx.routes.listen.get(base.listener as usize);
            let removed = addr.is_none_or(|a| !new_listen.contains(a));
            if !(removed || ups_change && proxied) {
                continue;
            }
            blocked += 1;
            let (idle, at_rest) = match role {
                ClientRole::Http1(h) => (
                    h.is_idle(base, io, c),
                    h.phase() == Phase::Idle && base.inbuf.is_empty(),
                ),
                _ => (false, false),
            };
            if idle || forced {
                io.close(c);
            } else if removed && at_rest {
                io.close_after_flush(c); // its last response is still being sent
            } else if let (true, ClientRole::Http1(h)) = (removed, role) {
                h.last_request();
            }
        }
        if ups_change {
            for (u, up) in self.ups.iter_mut() {
                blocked += 1;
                if up.state == UpState::Idle || (forced && up.state != UpState::Closing) {
                    io.close(u);
                }
            }
            // The pooled ones just closed must leave the pools too.
            if let Some(p) = self.ctx.pools.as_mut() {
                p.clear_idle();
            }
        }
        if blocked > 0 {
            io.timer_at(now + RELOAD_POLL);
            return;
        }
        let Some((msg, _)) = self.reload.take() else {
            return;
        };
        self.apply_reload(io, *msg);
    }

    fn apply_reload(&mut self, io: &mut Io, msg: ReloadMsg) {
        let ReloadMsg {
            generation,
            routes,
            settings,
            upstreams,
            listeners,
            log,
            deadline: _,
        } = msg;
        // Client connections keep their address, under its new index.
        for cl in self.clients.iter_mut() {
            if matches!(cl.role, ClientRole::Free) {
                continue;
            }
            if let Some(a) = self.ctx.routes.listen.get(cl.base.listener as usize) {
                if let Some(i) = routes.listen.iter().position(|x| x == a) {
                    cl.base.listener = i as u32;
                }
            }
        }
        let l = &mut self.listeners;
        for (addr, sock) in listeners {
            let id = io.add_listener(sock);
            debug_assert_eq!(id.0 as usize, l.addrs.len());
            l.addrs.push(addr);
            l.closed.push(false);
        }
        l.remap(&routes);
        if let Some(u) = upstreams {
            self.ctx.pools = u.map(|u| ZonePools::new(u, self.ctx.id));
        }
        self.ctx.routes = routes;
        self.ctx.set = settings;
        self.ctx.log.set_format(log);
        self.ctx
            .log
            .counters
            .generation
            .store(generation, Ordering::Relaxed);
        tracing::debug!(zone = self.ctx.id, generation, "configuration reloaded");
        let _ = self.events.send(ZoneEvent::Reloaded {
            zone: self.ctx.id,
            generation,
        });
    }
}
