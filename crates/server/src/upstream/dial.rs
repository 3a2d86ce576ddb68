//! Reaching a server of an upstream: pick one with the zone's balancer (skipping the ones
//! already tried for this request), take an idle keep-alive connection to it or open a new
//! one through the zone's connector, and keep count of the tries a request has left.

use std::time::Instant;

use ringx_engine::{ConnId, Io};

use super::connector::Connector;
use super::pools::ZonePools;
use crate::error::{Error, Kind, Side};

/// One request's (or stream's) way to a server.
#[derive(Default)]
pub struct Dial {
    /// Generation of the upstream state (`ZoneCtx::pools`) `upstream` indexes.
    pub gen: u32,
    pub upstream: usize,
    /// The server of the current attempt.
    pub server: usize,
    pub tried: Vec<usize>,
    /// Further attempts allowed after a failure.
    pub tries_left: u32,
    /// The balancer's hash key (`balance = "hash"`).
    pub key: Option<Vec<u8>>,
    /// When the current attempt started (the server's response time runs from here).
    pub at: Option<Instant>,
}

/// A connection to a server, ready to carry a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reached {
    pub conn: ConnId,
    /// From the keep-alive pool (already connected).
    pub reused: bool,
}

impl Dial {
    /// A dial for `upstream` with `retries` further attempts, reusing `tried`'s allocation.
    pub fn new(
        gen: u32,
        upstream: usize,
        retries: u32,
        key: Option<Vec<u8>>,
        mut tried: Vec<usize>,
    ) -> Dial {
        tried.clear();
        Dial {
            gen,
            upstream,
            server: 0,
            tried,
            tries_left: retries,
            key,
            at: None,
        }
    }

    /// Picks a server not tried yet and reaches it: an idle pooled connection when `pooled`
    /// allows one, else a new connect, from address `from` when given (`bind = "client"`:
    /// transparent, never pooled). Servers whose connect cannot even start (socket, bind, no
    /// free slot) are marked failed and the next is tried while tries are left.
    pub fn reach(
        &mut self,
        io: &mut Io,
        pools: &mut ZonePools,
        connector: &mut Connector,
        pooled: bool,
        from: Option<std::net::IpAddr>,
        now: Instant,
    ) -> Result<Reached, Error> {
        if pools.expired {
            return Err(Error::new(Kind::Connect, Side::Internal).context(format!(
                "upstream {}: replaced by a reload, no new connection",
                self.name(pools)
            )));
        }
        loop {
            let Some(s) = pools.pick(self.upstream, self.key.as_deref(), &self.tried, now) else {
                return Err(Error::new(Kind::Connect, Side::Upstream).context(format!(
                    "upstream {}: no server left to try",
                    self.name(pools)
                )));
            };
            self.tried.push(s);
            self.server = s;
            let idle = if pooled && from.is_none() {
                pools.take_idle(self.upstream, s)
            } else {
                None
            };
            let reached = match idle {
                Some(conn) => Reached { conn, reused: true },
                None => {
                    let addr = pools.defs.list[self.upstream].servers[s].addr;
                    match connector.connect(io, addr, from) {
                        Ok(conn) => Reached {
                            conn,
                            reused: false,
                        },
                        Err(e) => {
                            let e = Error::new(Kind::Connect, Side::Upstream)
                                .context(format!("upstream {}", self.name(pools)))
                                .cause(e);
                            tracing::warn!("{e}");
                            pools.failed(self.upstream, s, now);
                            if self.tries_left == 0 {
                                return Err(e);
                            }
                            self.tries_left -= 1;
                            continue;
                        }
                    }
                }
            };
            pools.started(self.upstream, s);
            self.at = Some(now);
            return Ok(reached);
        }
    }

    /// How long the current attempt has taken by `now`.
    pub fn took(&self, now: Instant) -> std::time::Duration {
        self.at.map_or(std::time::Duration::ZERO, |t| {
            now.saturating_duration_since(t)
        })
    }

    /// Some server of the upstream was not tried yet.
    pub fn untried(&self, pools: &ZonePools) -> bool {
        (0..pools.defs.list[self.upstream].servers.len()).any(|s| !self.tried.contains(&s))
    }

    /// "name (server)" of the current attempt, for logs.
    pub fn name(&self, pools: &ZonePools) -> String {
        let d = &pools.defs.list[self.upstream];
        match d.servers.get(self.server) {
            Some(s) if !self.tried.is_empty() => format!("{} ({})", d.name, s.name),
            _ => d.name.clone(),
        }
    }
}
