//! The HTTP reverse proxy on a zone: a routed request goes to a server picked by the
//! upstream's balancer, over a pooled keep-alive connection or a new one opened by the
//! zone's connector; the request body and then the response stream through with bounded
//! buffers (reading stops on one side while the other side's queue is full), and failures
//! before the first response byte are retried on another server for idempotent requests.

use std::time::Instant;

use ringx_engine::{ConnId, Io};
use ringx_http::upstream::{upgrade_request, write_request_head, Forward};
use ringx_http::{BodyDecoder, BodyKind, BodyLimits, Method, Request, Version};

use super::upconn::{UpConn, UpState, UP_KEY};
use super::{HttpZone, Next, Phase};
use crate::route::{Action, HostMode};
use crate::upstream::HashKey;
use ringx_config::upstream::ProxyProtocol;

/// Request body kept to replay on another server; a larger body is not retried.
pub(super) const MAX_REPLAY: usize = 64 * 1024;
/// Bytes queued towards one side of a proxied exchange before the other side stops reading.
pub(super) const PROXY_HIGH_WATER: u64 = 256 * 1024;
/// Request records kept for reuse per zone.
pub(super) const PROXY_POOL: usize = 256;
/// Largest upstream response head.
pub(super) const MAX_RESPONSE_HEAD: usize = 64 * 1024;

/// A request being proxied (boxed on the client connection).
pub(super) struct ProxyReq {
    pub upstream: usize,
    pub server: usize,
    pub up: Option<ConnId>,
    pub tried: Vec<usize>,
    pub tries_left: u32,
    /// The head sent upstream (again on a retry).
    pub head: Vec<u8>,
    /// `proxy_host = "upstream"`: the Host line follows the chosen server.
    pub host_upstream: bool,
    /// Body bytes forwarded so far, for a retry; `None` once too large.
    pub replay: Option<Vec<u8>>,
    /// The request body still arriving.
    pub req_body: Option<BodyDecoder>,
    pub idempotent: bool,
    pub head_request: bool,
    pub version: Version,
    /// The client connection stays open after the response.
    pub keep: bool,
    pub upgrade: bool,
    /// Response bytes went to the client: no retry, and a failure now truncates.
    pub started: bool,
    /// The balancer's hash key.
    pub key: Option<Vec<u8>>,
    /// Reading from the client stopped because the upstream's queue is full.
    pub body_paused: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::zone) enum Fail {
    Connect,
    Reset,
    Timeout,
    /// An unparsable response.
    Bad,
    /// A 502/503 answer, retried elsewhere.
    Status,
}

impl HttpZone {
    /// Starts proxying if the request routes to a `proxy_pass` location.
    pub(in crate::zone) fn try_proxy(
        &mut self,
        io: &mut Io,
        c: ConnId,
        req: &Request,
        keep: bool,
        at: super::request::At,
    ) -> Option<Next> {
        let conn = &self.conns[c.index()];
        let ups = self.ups.as_ref()?;
        let (si, li) = at?;
        let Action::Proxy(loc) = &self.routes.servers[si].locations[li].action else {
            return None;
        };
        // A recycled request record: its head and retry list keep their capacity, so a
        // steady stream of proxied requests allocates nothing here. (Taken only once the
        // request is known to be proxied: a request served locally used to drop one.)
        let mut spare = self.proxy_pool.pop();
        let def = &ups.defs.list[loc.upstream];
        let host = match &loc.host {
            HostMode::Pass => None,
            HostMode::Upstream => Some(def.servers[0].name.as_str()),
            HostMode::Fixed(h) => Some(h.as_str()),
        };
        let upgrade = upgrade_request(req);
        let (mut head, mut tried) = match spare.as_mut() {
            Some(b) => (std::mem::take(&mut b.head), std::mem::take(&mut b.tried)),
            None => (Vec::with_capacity(256 + req.head_len), Vec::new()),
        };
        head.clear();
        tried.clear();
        write_request_head(
            &mut head,
            req,
            &Forward {
                client: conn.client.map(|a| a.ip()),
                proto: "http",
                host,
                forwarded_headers: loc.forwarded_headers,
                close: false,
                upgrade,
            },
        );
        let key = match &def.hash_key {
            _ if def.maglev.is_none() => None,
            HashKey::Client => conn.client.map(|a| a.ip().to_string().into_bytes()),
            HashKey::Uri => Some(req.target.as_bytes().to_vec()),
            HashKey::Header(h) => req.header(h).map(<[u8]>::to_vec),
        };
        let has_body = !matches!(req.body, BodyKind::None | BodyKind::Length(0));
        let p = ProxyReq {
            upstream: loc.upstream,
            server: 0,
            up: None,
            tried,
            tries_left: def.retries,
            head,
            host_upstream: matches!(loc.host, HostMode::Upstream),
            replay: has_body.then(Vec::new),
            req_body: has_body.then(|| BodyDecoder::new(req.body, BodyLimits::default())),
            idempotent: matches!(
                req.method,
                Method::Get | Method::Head | Method::Options | Method::Put | Method::Delete
            ) || req.method_str == "TRACE",
            head_request: req.method == Method::Head,
            version: req.version,
            keep: keep && upgrade.is_none(),
            upgrade: upgrade.is_some(),
            started: false,
            key,
            body_paused: false,
        };
        if has_body && req.expect_continue {
            io.write(c, b"HTTP/1.1 100 Continue\r\n\r\n");
        }
        let conn = &mut self.conns[c.index()];
        conn.proxy = Some(match spare {
            Some(mut b) => {
                *b = p;
                b
            }
            None => Box::new(p),
        });
        conn.phase = Phase::Proxy;
        let at = io.now()
            + if has_body {
                self.set.body_timeout
            } else {
                self.set.send_timeout
            };
        self.set_deadline(io, c, at);
        if !has_body {
            self.wait_for_upstream(c);
        }
        self.proxy_send(io, c);
        Some(if has_body { Next::Continue } else { Next::Hold })
    }

    /// Holds the client's input while its request (which has no body) is with the upstream:
    /// what it sends meanwhile (pipelined requests) waits in its buffer, but the receive
    /// stays armed. Stopping the receive and arming it again cost an `ASYNC_CANCEL`, a fresh
    /// `RECV` with its poll arming and two more completions on every proxied request. Input
    /// beyond a request head's worth stops the receive for real (`on_data`).
    pub(in crate::zone) fn wait_for_upstream(&mut self, c: ConnId) {
        self.conns[c.index()].paused = true;
    }

    /// Stops reading from the client (pipelined requests wait in its buffer).
    pub(in crate::zone) fn hold_client(&mut self, io: &mut Io, c: ConnId) {
        self.conns[c.index()].paused = true;
        io.pause_recv(c);
    }

    /// Picks a server and hands it the request: head, and the body so far.
    pub(in crate::zone) fn proxy_send(&mut self, io: &mut Io, c: ConnId) {
        loop {
            let now = io.now();
            let ci = c.index();
            let cgen = self.conns[ci].gen;
            let client_addr = self.conns[ci].client;
            let listener = self.conns[ci].listener as usize;
            let is_stream = self.conns[ci].stream.is_some();
            let Some(ups) = self.ups.as_mut() else { return };
            let Some(p) = self.conns[ci].proxy.as_mut() else {
                return;
            };
            let Some(s) = ups.pick(p.upstream, p.key.as_deref(), &p.tried, now) else {
                return self.give_up(io, c, 502);
            };
            p.tried.push(s);
            p.server = s;
            let defs = ups.defs.clone();
            let def = &defs.list[p.upstream];
            let sdef = &def.servers[s];
            let (u, reused) = match ups.take_idle(p.upstream, s) {
                Some(u) => (u, true),
                None => match self.connector.connect(io, sdef.addr) {
                    Ok(u) => (u, false),
                    Err(e) => {
                        tracing::warn!("upstream {}: {e}", def.name);
                        ups.failed(p.upstream, s, now);
                        if p.tries_left == 0 {
                            return self.give_up(io, c, 502);
                        }
                        p.tries_left -= 1;
                        continue;
                    }
                },
            };
            ups.per[p.upstream].bal.started(s);
            if p.host_upstream {
                rehost(&mut p.head, &sdef.name);
            }
            if u.index() >= self.upc.len() {
                self.upc.resize_with(u.index() + 1, || None);
            }
            let mut rec = match self.upc[u.index()].take() {
                Some(mut old) if reused => {
                    old.reset_for_request();
                    old.state = UpState::Busy;
                    old
                }
                _ => {
                    self.up_gen = self.up_gen.wrapping_add(1);
                    UpConn::new(self.up_gen, p.upstream, s, now)
                }
            };
            rec.reused = reused;
            rec.client = Some((c, cgen));
            if !reused && def.proxy_protocol != ProxyProtocol::Off {
                if let Some(src) = client_addr {
                    let dst = self.routes.listen[listener];
                    if let Some(out) = io.out_buf(u) {
                        match def.proxy_protocol {
                            ProxyProtocol::V1 => {
                                ringx_http::proxy_protocol::write_v1(out, src, dst)
                            }
                            _ => ringx_http::proxy_protocol::write_v2(out, src, dst),
                        }
                    }
                    rec.tied = true;
                }
            }
            io.write(u, &p.head);
            if let Some(r) = &p.replay {
                io.write(u, r);
            }
            p.up = Some(u);
            let timeout = if reused {
                def.read_timeout
            } else {
                def.connect_timeout
            };
            if is_stream {
                rec.state = if reused {
                    UpState::Tunnel
                } else {
                    UpState::Connecting
                };
            }
            self.upc[u.index()] = Some(rec);
            self.set_up_deadline(io, u, now + timeout);
            return;
        }
    }

    pub(in crate::zone) fn set_up_deadline(&mut self, io: &mut Io, u: ConnId, at: Instant) {
        let Some(up) = self.upc[u.index()].as_mut() else {
            return;
        };
        up.deadline = at;
        // A deadline earlier than the pending wheel entry needs its own entry (the wheel
        // only ever re-files entries later).
        if up.wheel_at.is_none_or(|w| at < w) {
            up.wheel_at = Some(at);
            self.wheel.insert(at, u.0 | UP_KEY, up.gen);
            io.timer_at(at);
        }
    }

    pub(in crate::zone) fn up_timeouts(
        &self,
        u: usize,
    ) -> (std::time::Duration, std::time::Duration) {
        let def = &self
            .ups
            .as_ref()
            .expect("proxying zones have upstreams")
            .defs
            .list[u];
        (def.read_timeout, def.keepalive_timeout)
    }

    pub(in crate::zone) fn up_send_timeout(&self, u: usize) -> std::time::Duration {
        self.ups
            .as_ref()
            .map_or(std::time::Duration::from_secs(60), |z| {
                z.defs.list[u].send_timeout
            })
    }
}

/// Replaces the `Host` line (the first header line) of a forwarded head.
fn rehost(head: &mut Vec<u8>, host: &str) {
    let Some(eol) = head.windows(2).position(|w| w == b"\r\n") else {
        return;
    };
    let start = eol + 2;
    if !head[start..].starts_with(b"Host: ") {
        return;
    }
    let Some(len) = head[start..].windows(2).position(|w| w == b"\r\n") else {
        return;
    };
    let line = format!("Host: {host}");
    head.splice(start..start + len, line.into_bytes());
}

mod failure;
mod flow;
mod request_body;
mod response;
