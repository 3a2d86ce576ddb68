//! The HTTP reverse proxy on a zone: a routed request goes to a server picked by the
//! upstream's balancer, over a pooled keep-alive connection or a new one opened by the
//! zone's connector; the request body and then the response stream through with bounded
//! buffers (reading stops on one side while the other side's queue is full), and failures
//! before the first response byte are retried on another server for idempotent requests.

use std::time::Instant;

use ringx_engine::{ConnId, Io};
use ringx_http::upstream::{
    parse_response, upgrade_request, write_request_head, ClientFraming, Forward, ResponseBody,
};
use ringx_http::{BodyDecoder, BodyKind, BodyLimits, Method, Parsed, Request, Version};

use super::upconn::{UpConn, UpState, UP_KEY};
use super::{HttpZone, Next, Phase};
use crate::config::upstream::ProxyProtocol;
use crate::proxy::HashKey;
use crate::server::route::{Action, HostMode};

/// Request body kept to replay on another server; a larger body is not retried.
const MAX_REPLAY: usize = 64 * 1024;
/// Bytes queued towards one side of a proxied exchange before the other side stops reading.
pub(super) const PROXY_HIGH_WATER: u64 = 256 * 1024;
/// Request records kept for reuse per zone.
const PROXY_POOL: usize = 256;
/// Largest upstream response head.
const MAX_RESPONSE_HEAD: usize = 64 * 1024;

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
pub(super) enum Fail {
    Connect,
    Reset,
    Timeout,
    /// An unparsable response.
    Bad,
    /// A 502/503 answer, retried elsewhere.
    Status,
}

/// What a failure handler needs of the upstream connection's record.
struct FailInfo {
    upstream: usize,
    server: usize,
    reused: bool,
    got_bytes: bool,
    was_busy: bool,
    client: Option<(ConnId, u32)>,
}

impl FailInfo {
    /// Reads the record and marks it closing (detached from its client).
    fn take(up: &mut UpConn) -> FailInfo {
        let was_busy = matches!(
            up.state,
            UpState::Busy | UpState::Connecting | UpState::Tunnel
        );
        up.state = UpState::Closing;
        FailInfo {
            upstream: up.upstream,
            server: up.server,
            reused: up.reused,
            got_bytes: up.got_bytes,
            was_busy,
            client: up.client.take(),
        }
    }
}

enum Head {
    Partial,
    Body(usize),
    Gone,
}

impl HttpZone {
    /// Starts proxying if the request routes to a `proxy_pass` location.
    pub(super) fn try_proxy(
        &mut self,
        io: &mut Io,
        c: ConnId,
        req: &Request,
        keep: bool,
    ) -> Option<Next> {
        // A recycled request record: its head and retry list keep their capacity, so a
        // steady stream of proxied requests allocates nothing here.
        let mut spare = self.proxy_pool.pop();
        let conn = &self.conns[c.index()];
        let ups = self.ups.as_ref()?;
        let routes = &*self.routes;
        let path = super::request::clean_path(req.path).ok()?;
        let server = routes.server(conn.listener as usize, req.host_name());
        let Some(Action::Proxy(loc)) = server.location(&path).map(|l| &l.action) else {
            return None;
        };
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
            self.hold_client(io, c);
        }
        self.proxy_send(io, c);
        Some(if has_body { Next::Continue } else { Next::Hold })
    }

    /// Stops reading from the client (pipelined requests wait in its buffer).
    pub(super) fn hold_client(&mut self, io: &mut Io, c: ConnId) {
        self.conns[c.index()].paused = true;
        io.pause_recv(c);
    }

    /// Picks a server and hands it the request: head, and the body so far.
    pub(super) fn proxy_send(&mut self, io: &mut Io, c: ConnId) {
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

    pub(super) fn set_up_deadline(&mut self, io: &mut Io, u: ConnId, at: Instant) {
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

    fn up_timeouts(&self, u: usize) -> (std::time::Duration, std::time::Duration) {
        let def = &self
            .ups
            .as_ref()
            .expect("proxying zones have upstreams")
            .defs
            .list[u];
        (def.read_timeout, def.keepalive_timeout)
    }

    fn up_send_timeout(&self, u: usize) -> std::time::Duration {
        self.ups
            .as_ref()
            .map_or(std::time::Duration::from_secs(60), |z| {
                z.defs.list[u].send_timeout
            })
    }

    /// The request body arriving from the client: forwarded as it comes (chunked framing
    /// passed through unchanged). Returns the bytes consumed, `None` if the exchange ended.
    pub(super) fn proxy_body(&mut self, io: &mut Io, c: ConnId, input: &[u8]) -> Option<usize> {
        let max_body = self.set.max_body;
        let conn = &mut self.conns[c.index()];
        let p = conn.proxy.as_mut()?;
        let Some(dec) = p.req_body.as_mut() else {
            return Some(0);
        };
        let u = p.up;
        let mut pos = 0;
        let mut done = false;
        loop {
            let d = match dec.decode(&input[pos..]) {
                Ok(d) => d,
                Err(_) => {
                    self.abort_request(io, c, 400);
                    return None;
                }
            };
            let raw = &input[pos..pos + d.consumed];
            if let Some(u) = u {
                io.write(u, raw);
            }
            if let Some(r) = p.replay.as_mut() {
                if r.len() + raw.len() <= MAX_REPLAY {
                    r.extend_from_slice(raw);
                } else {
                    p.replay = None;
                }
            }
            pos += d.consumed;
            if dec.received() > max_body {
                self.abort_request(io, c, 413);
                return None;
            }
            if d.done {
                done = true;
                break;
            }
            if d.consumed == 0 || pos == input.len() {
                break;
            }
        }
        let now = io.now();
        if done {
            p.req_body = None;
            self.hold_client(io, c);
            let at = now + self.set.send_timeout;
            self.conns[c.index()].deadline = at;
        } else {
            self.conns[c.index()].deadline = now + self.set.body_timeout;
        }
        if let Some(u) = u {
            let send = self.upc[u.index()]
                .as_ref()
                .map(|x| self.up_send_timeout(x.upstream));
            if let (Some(up), Some(st)) = (self.upc[u.index()].as_mut(), send) {
                up.deadline = now + st; // the upstream is busy receiving, not idle
            }
            if !done && io.pending(u) > PROXY_HIGH_WATER {
                self.hold_client(io, c);
                if let Some(p) = self.conns[c.index()].proxy.as_mut() {
                    p.body_paused = true;
                }
                io.notify_when_flushed(u);
            }
        }
        Some(pos)
    }

    /// The request cannot go on (bad body framing, too large): answer and drop the upstream.
    fn abort_request(&mut self, io: &mut Io, c: ConnId, status: u16) {
        self.detach_upstream(io, c);
        let conn = &mut self.conns[c.index()];
        let started = conn.proxy.as_ref().is_some_and(|p| p.started);
        conn.proxy = None;
        conn.phase = Phase::Idle;
        if started {
            conn.phase = Phase::Lingering;
            io.close(c);
        } else {
            self.fail(io, c, status, false);
        }
    }

    /// Closes the client's upstream connection (not reusable: the exchange was cut).
    fn detach_upstream(&mut self, io: &mut Io, c: ConnId) {
        let Some(p) = self.conns[c.index()].proxy.as_mut() else {
            return;
        };
        let Some(u) = p.up.take() else { return };
        let (ui, s) = (p.upstream, p.server);
        if let Some(up) = self.upc[u.index()].as_mut() {
            if up.state != UpState::Closing {
                up.state = UpState::Closing;
                up.client = None;
                if let Some(z) = self.ups.as_mut() {
                    z.per[ui].bal.finished(s);
                }
                io.close(u);
            }
        }
    }

    /// Every server was tried (or none is usable): 502/504 to the client.
    fn give_up(&mut self, io: &mut Io, c: ConnId, status: u16) {
        let conn = &mut self.conns[c.index()];
        conn.proxy = None;
        if conn.stream.is_some() {
            conn.phase = Phase::Lingering;
            io.close(c);
            return;
        }
        conn.phase = Phase::Idle;
        conn.paused = false;
        self.fail(io, c, status, false);
    }

    pub(super) fn up_connected(&mut self, io: &mut Io, u: ConnId) {
        let now = io.now();
        let Some(up) = self.upc[u.index()].as_mut() else {
            return;
        };
        let read = self
            .ups
            .as_ref()
            .map(|z| z.defs.list[up.upstream].read_timeout);
        match up.state {
            UpState::Connecting if up.client.is_some() => {
                let is_stream = up
                    .client
                    .is_some_and(|(c, _)| self.conns[c.index()].stream.is_some());
                if is_stream {
                    up.state = UpState::Tunnel;
                    let (c, _) = up.client.expect("checked");
                    self.stream_connected(io, c, u);
                } else {
                    up.state = UpState::Busy;
                    if let Some(rt) = read {
                        self.set_up_deadline(io, u, now + rt);
                    }
                }
            }
            UpState::Connecting => {
                up.state = UpState::Closing;
                io.close(u);
            }
            _ => {}
        }
    }

    pub(super) fn up_data(&mut self, io: &mut Io, u: ConnId, data: &[u8]) {
        let now = io.now();
        let Some(up) = self.upc[u.index()].as_mut() else {
            return;
        };
        up.got_bytes = true;
        match up.state {
            UpState::Tunnel => return self.tunnel_up_data(io, u, data),
            UpState::Busy => {}
            UpState::Closing => return,
            // Bytes nobody asked for (an idle connection): it cannot be trusted any more.
            UpState::Idle | UpState::Connecting => {
                up.state = UpState::Closing;
                io.close(u);
                return;
            }
        }
        let Some((c, _)) = up.client else {
            up.state = UpState::Closing;
            io.close(u);
            return;
        };
        let ui = up.upstream;
        let (rt, _) = self.up_timeouts(ui);
        let up = self.upc[u.index()].as_mut().expect("present");
        up.deadline = now + rt;
        if up.head_done {
            return self.response_body(io, u, c, data);
        }
        let mut buf = std::mem::take(&mut up.inbuf);
        let input: &[u8] = if buf.is_empty() {
            data
        } else {
            buf.extend_from_slice(data);
            &buf
        };
        match self.response_head(io, u, c, input) {
            Head::Partial => {
                if let Some(up) = self.upc[u.index()].as_mut() {
                    if buf.is_empty() {
                        up.inbuf.extend_from_slice(data);
                    } else {
                        up.inbuf = buf;
                    }
                }
            }
            Head::Body(off) => {
                if off < input.len() {
                    self.response_body(io, u, c, &input[off..]);
                }
            }
            Head::Gone => {}
        }
    }

    /// Whether a failed attempt may go to another server: nothing reached the client, the
    /// method is idempotent, the body (if any) can be replayed, tries and servers are left.
    fn can_retry(&self, c: ConnId) -> bool {
        let ok = self.conns[c.index()].proxy.as_ref().is_some_and(|p| {
            !p.started
                && p.idempotent
                && p.tries_left > 0
                && (p.req_body.is_none() || p.replay.is_some())
        });
        ok && self.untried(c)
    }

    fn response_head(&mut self, io: &mut Io, u: ConnId, c: ConnId, input: &[u8]) -> Head {
        let mut off = 0;
        loop {
            let Some(p) = self.conns[c.index()].proxy.as_ref() else {
                return Head::Gone;
            };
            let mut headers = [httparse::EMPTY_HEADER; 128];
            let h = match parse_response(
                &input[off..],
                &mut headers,
                MAX_RESPONSE_HEAD,
                p.head_request,
            ) {
                Ok(Parsed::Partial) => {
                    if off > 0 {
                        // Interim responses were consumed: keep only the rest.
                        if let Some(up) = self.upc[u.index()].as_mut() {
                            up.inbuf = input[off..].to_vec();
                        }
                        return Head::Gone;
                    }
                    return Head::Partial;
                }
                Err(e) => {
                    let name = self.upstream_name(u);
                    tracing::warn!("upstream {name}: {e}");
                    self.upstream_failed(io, u, Fail::Bad);
                    return Head::Gone;
                }
                Ok(Parsed::Complete(h)) => h,
            };
            if (100..200).contains(&h.status) && h.status != 101 {
                off += h.head_len; // interim responses are not passed on (100 Continue was sent)
                continue;
            }
            if h.status == 101 && !p.upgrade {
                self.upstream_failed(io, u, Fail::Bad);
                return Head::Gone;
            }
            if matches!(h.status, 502 | 503) && self.can_retry(c) {
                self.upstream_failed(io, u, Fail::Status);
                return Head::Gone;
            }
            let p = self.conns[c.index()].proxy.as_mut().expect("checked above");
            let keep_client = p.keep && !self.draining && h.body != ResponseBody::UntilClose;
            let ch = Self::conn_hdr(p.version == Version::Http11, keep_client);
            let Some(out) = io.out_buf(c) else {
                self.upstream_failed(io, u, Fail::Reset);
                return Head::Gone;
            };
            let before = out.len();
            let framing = ringx_http::upstream::write_response_head(out, &h, p.version, ch.bytes());
            let head_len = (out.len() - before) as u64;
            p.started = true;
            p.keep = keep_client && framing == ClientFraming::Same;
            let (ui, s) = (p.upstream, p.server);
            self.obs_status(io, c, h.status, head_len);
            if let Some(z) = self.ups.as_mut() {
                z.succeeded(ui, s);
            }
            let up = self.upc[u.index()].as_mut().expect("busy upstream");
            up.head_done = true;
            up.framing = framing;
            up.keep = h.keep_alive && !up.tied;
            let end = off + h.head_len;
            if h.status == 101 {
                self.tunnel_begin(io, c, u, &input[end..]);
                return Head::Gone;
            }
            match h.body {
                ResponseBody::None => {
                    let clean = end == input.len();
                    self.response_done(io, u, c, clean);
                    return Head::Gone;
                }
                ResponseBody::Length(n) => {
                    up.body = Some(BodyDecoder::new(BodyKind::Length(n), BodyLimits::default()))
                }
                ResponseBody::Chunked => {
                    up.body = Some(BodyDecoder::new(BodyKind::Chunked, BodyLimits::default()))
                }
                ResponseBody::UntilClose => up.until_close = true,
            }
            return Head::Body(end);
        }
    }

    fn response_body(&mut self, io: &mut Io, u: ConnId, c: ConnId, input: &[u8]) {
        let Some(up) = self.upc[u.index()].as_mut() else {
            return;
        };
        if up.until_close {
            io.write(c, input);
        } else {
            let framing = up.framing;
            let Some(dec) = up.body.as_mut() else { return };
            let mut pos = 0;
            while pos < input.len() {
                let d = match dec.decode(&input[pos..]) {
                    Ok(d) => d,
                    Err(e) => {
                        tracing::warn!("upstream response body: {e:?}");
                        self.upstream_failed(io, u, Fail::Bad);
                        return;
                    }
                };
                match framing {
                    ClientFraming::Same => io.write(c, &input[pos..pos + d.consumed]),
                    ClientFraming::Close => io.write(c, d.data),
                }
                pos += d.consumed;
                if d.done {
                    let clean = pos == input.len();
                    return self.response_done(io, u, c, clean);
                }
                if d.consumed == 0 {
                    break;
                }
            }
        }
        // A slow client: stop reading from the upstream until the client's queue drains.
        if io.pending(c) > PROXY_HIGH_WATER {
            if let Some(up) = self.upc[u.index()].as_mut() {
                if !up.paused {
                    up.paused = true;
                    io.pause_recv(u);
                    io.notify_when_flushed(c);
                }
            }
        }
    }

    /// The response is complete: pool the upstream connection if it can carry another
    /// request, and let the client go on.
    fn response_done(&mut self, io: &mut Io, u: ConnId, c: ConnId, clean: bool) {
        let now = io.now();
        let Some(up) = self.upc[u.index()].as_mut() else {
            return;
        };
        let (ui, s) = (up.upstream, up.server);
        up.client = None;
        let reusable = clean && up.keep && !up.eof && !self.draining;
        let pooled = reusable && self.ups.as_mut().is_some_and(|z| z.put_idle(ui, s, u));
        if let Some(z) = self.ups.as_mut() {
            z.per[ui].bal.finished(s);
        }
        let (_, ka) = self.up_timeouts(ui);
        let up = self.upc[u.index()].as_mut().expect("present");
        if pooled {
            up.state = UpState::Idle;
            up.reset_for_request();
            if up.paused {
                up.paused = false;
                io.resume_recv(u);
            }
            self.set_up_deadline(io, u, now + ka);
        } else {
            up.state = UpState::Closing;
            io.close(u);
        }
        let conn = &mut self.conns[c.index()];
        let Some(p) = conn.proxy.take() else { return };
        conn.phase = Phase::Idle;
        conn.paused = false;
        let close = !p.keep || p.req_body.is_some() || conn.eof;
        if self.proxy_pool.len() < PROXY_POOL && p.head.capacity() <= 64 * 1024 {
            self.proxy_pool.push(p);
        }
        let more = !conn.inbuf.is_empty();
        self.after_response(io, c, close, more);
        if close {
            return;
        }
        let conn = &self.conns[c.index()];
        if !conn.paused {
            if !conn.eof {
                io.resume_recv(c);
            }
            self.process_buffered(io, c);
        }
    }

    /// The upstream connection failed: blame the server (passive health), then retry
    /// elsewhere if nothing reached the client yet, else cut the client off. The record
    /// stays (state `Closing`) until `on_closed`.
    pub(super) fn upstream_failed(&mut self, io: &mut Io, u: ConnId, why: Fail) {
        let Some(up) = self.upc[u.index()].as_mut() else {
            return;
        };
        if up.state == UpState::Closing {
            return;
        }
        let info = FailInfo::take(up);
        io.close(u);
        self.after_failure(io, info, why);
    }

    /// The client side of a failure: retry, 502/504, or cut the response off.
    fn after_failure(&mut self, io: &mut Io, f: FailInfo, why: Fail) {
        let now = io.now();
        let silent = f.reused && !f.got_bytes && matches!(why, Fail::Reset | Fail::Connect);
        if let Some(z) = self.ups.as_mut() {
            if f.was_busy {
                z.per[f.upstream].bal.finished(f.server);
            }
            if !silent && why != Fail::Status {
                z.failed(f.upstream, f.server, now);
            }
        }
        let Some((c, cgen)) = f.client else { return };
        let conn = &mut self.conns[c.index()];
        if conn.gen != cgen || !matches!(conn.phase, Phase::Proxy | Phase::Tunnel) {
            return;
        }
        let Some(p) = conn.proxy.as_mut() else {
            // An established tunnel (WebSocket or stream).
            conn.tunnel = None;
            io.close_after_flush(c);
            return;
        };
        p.up = None;
        if p.started {
            // Part of the response is out: end the connection so the client sees it cut.
            conn.proxy = None;
            conn.phase = Phase::Lingering;
            io.close_after_flush(c);
            return;
        }
        if silent {
            // The keep-alive race: the server closed an idle connection as we reused it.
            p.tried.retain(|&x| x != f.server);
            return self.proxy_send(io, c);
        }
        let stream_retry = conn.stream.is_some() && p.tries_left > 0 && self.untried(c);
        if stream_retry || self.can_retry(c) {
            if let Some(p) = self.conns[c.index()].proxy.as_mut() {
                p.tries_left -= 1;
            }
            return self.proxy_send(io, c);
        }
        let status = if why == Fail::Timeout { 504 } else { 502 };
        self.give_up(io, c, status);
    }

    /// Some server of the request's upstream was not tried yet.
    fn untried(&self, c: ConnId) -> bool {
        let (Some(p), Some(z)) = (self.conns[c.index()].proxy.as_ref(), self.ups.as_ref()) else {
            return false;
        };
        (0..z.defs.list[p.upstream].servers.len()).any(|s| !p.tried.contains(&s))
    }

    fn upstream_name(&self, u: ConnId) -> String {
        match (self.upc[u.index()].as_ref(), self.ups.as_ref()) {
            (Some(up), Some(z)) => {
                let d = &z.defs.list[up.upstream];
                format!("{} ({})", d.name, d.servers[up.server].name)
            }
            _ => "?".into(),
        }
    }

    pub(super) fn up_eof(&mut self, io: &mut Io, u: ConnId) {
        let Some(up) = self.upc[u.index()].as_mut() else {
            return;
        };
        up.eof = true;
        match up.state {
            UpState::Tunnel => self.tunnel_up_eof(io, u),
            UpState::Busy if up.head_done && up.until_close => {
                let c = up.client.map(|x| x.0);
                if let Some(c) = c {
                    self.response_done(io, u, c, false);
                }
            }
            UpState::Busy => self.upstream_failed(io, u, Fail::Reset),
            UpState::Idle | UpState::Connecting => {
                let (ui, s) = (up.upstream, up.server);
                if up.state == UpState::Idle {
                    if let Some(z) = self.ups.as_mut() {
                        z.remove_idle(ui, s, u);
                    }
                }
                up.state = UpState::Closing;
                io.close(u);
            }
            UpState::Closing => {}
        }
    }

    pub(super) fn up_closed(&mut self, io: &mut Io, u: ConnId, err: Option<std::io::Error>) {
        if self.upc[u.index()].is_none() {
            return;
        }
        let name = self.upstream_name(u);
        // Out of the table first: a retry below may be given this very slot again.
        let mut up = self.upc[u.index()].take().expect("checked");
        self.connector.closed(u, io.now());
        if let Some(e) = &err {
            tracing::debug!(zone = self.id, "upstream {name}: {e}");
        }
        let why = match up.state {
            UpState::Connecting => {
                if let Some(e) = &err {
                    tracing::warn!("upstream {name}: {e}");
                }
                Fail::Connect
            }
            UpState::Busy | UpState::Tunnel => Fail::Reset,
            UpState::Idle => {
                if let Some(z) = self.ups.as_mut() {
                    z.remove_idle(up.upstream, up.server, u);
                }
                return;
            }
            UpState::Closing => return,
        };
        if let (UpState::Tunnel, Some((c, _))) = (up.state, up.client) {
            if self.conns[c.index()].proxy.is_none() {
                self.conns[c.index()].tunnel = None;
                io.close_after_flush(c);
                return;
            }
        }
        let info = FailInfo::take(&mut up);
        self.after_failure(io, info, why);
    }

    pub(super) fn up_expire(&mut self, io: &mut Io, u: ConnId) {
        let Some(up) = self.upc[u.index()].as_mut() else {
            return;
        };
        match up.state {
            UpState::Connecting | UpState::Busy => {
                tracing::warn!("upstream {}: timed out", self.upstream_name(u));
                self.upstream_failed(io, u, Fail::Timeout)
            }
            UpState::Idle => {
                let (ui, s) = (up.upstream, up.server);
                up.state = UpState::Closing;
                if let Some(z) = self.ups.as_mut() {
                    z.remove_idle(ui, s, u);
                }
                io.close(u);
            }
            UpState::Tunnel => {
                up.state = UpState::Closing;
                let c = up.client.take();
                io.close(u);
                if let Some((c, _)) = c {
                    self.conns[c.index()].tunnel = None;
                    io.close_after_flush(c);
                }
            }
            UpState::Closing => {}
        }
    }

    /// Everything queued to an upstream was written: a client paused for back-pressure
    /// reads again.
    pub(super) fn up_flushed(&mut self, io: &mut Io, u: ConnId) {
        let Some((c, cgen)) = self.upc[u.index()].as_ref().and_then(|x| x.client) else {
            return;
        };
        let conn = &mut self.conns[c.index()];
        if conn.gen != cgen {
            return;
        }
        let resume = match conn.phase {
            Phase::Proxy => conn.proxy.as_mut().is_some_and(|p| {
                let was = p.body_paused;
                p.body_paused = false;
                was && p.req_body.is_some()
            }),
            Phase::Tunnel => conn.paused,
            _ => false,
        };
        if resume {
            conn.paused = false;
            if !conn.eof {
                io.resume_recv(c);
            }
            if conn.phase == Phase::Tunnel {
                self.tunnel_flush_client_buffer(io, c);
            } else {
                self.process_buffered(io, c);
            }
        }
    }

    /// The client's queue drained: the upstream paused for back-pressure reads again.
    pub(super) fn client_flushed_while_proxying(&mut self, io: &mut Io, c: ConnId) {
        let conn = &self.conns[c.index()];
        let u = match conn.phase {
            Phase::Proxy => conn.proxy.as_ref().and_then(|p| p.up),
            Phase::Tunnel => conn.tunnel,
            _ => None,
        };
        if let Some(u) = u {
            if let Some(up) = self.upc[u.index()].as_mut() {
                if up.paused {
                    up.paused = false;
                    if !up.eof {
                        io.resume_recv(u);
                    }
                }
            }
        }
    }

    /// The client closed its side while its request was being proxied.
    pub(super) fn proxy_client_eof(&mut self, io: &mut Io, c: ConnId) {
        let body_missing = self.conns[c.index()]
            .proxy
            .as_ref()
            .is_some_and(|p| p.req_body.is_some());
        if body_missing {
            self.detach_upstream(io, c);
            self.conns[c.index()].proxy = None;
            io.close(c);
        }
        // Otherwise the response is still delivered, then the connection closes.
    }

    pub(super) fn client_closed_while_proxying(&mut self, io: &mut Io, c: ConnId) {
        if self.conns.get(c.index()).is_none() {
            return;
        }
        self.detach_upstream(io, c);
        self.conns[c.index()].proxy = None;
        if let Some(u) = self.conns[c.index()].tunnel.take() {
            if let Some(up) = self.upc[u.index()].as_mut() {
                if up.state != UpState::Closing {
                    up.state = UpState::Closing;
                    up.client = None;
                    io.close_after_flush(u);
                }
            }
        }
    }

    /// The client's deadline passed while proxying.
    pub(super) fn proxy_client_timeout(&mut self, io: &mut Io, c: ConnId) {
        let in_body = self.conns[c.index()]
            .proxy
            .as_ref()
            .is_some_and(|p| p.req_body.is_some() && !p.body_paused);
        if in_body {
            return self.abort_request(io, c, 408);
        }
        // Waiting for the upstream: its read timeout decides.
        let at = io.now() + self.set.send_timeout;
        self.set_deadline(io, c, at);
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
