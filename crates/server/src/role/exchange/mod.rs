//! An exchange: one HTTP request being proxied, from the moment its head is routed to a
//! `proxy_pass` location until its response is complete (nginx's `ngx_http_upstream_t`).
//!
//! The HTTP/1 role owns it; events on the upstream connection it uses are delivered to it
//! through that role. It picks a server ([`Dial`]), sends the head and the body so far,
//! retries idempotent requests elsewhere after failures that left the client untouched, and
//! relays the response head and body (`response.rs`), returning an [`Outcome`] the client
//! role acts on.

pub mod capture;
pub mod deco;
mod response;

use ringx_engine::{ConnId, Io};
use ringx_http::{BodyDecoder, Version};

use crate::ctx::base::Base;
use crate::ctx::Cx;
use crate::error::{Error, Kind, Side};
use crate::role::upstream::{attach, Opening, UpConn, UpState};
use crate::upstream::dial::Dial;
use crate::upstream::pools::ZonePools;

/// Request body kept to replay on another server; a larger body is not retried.
pub const MAX_REPLAY: usize = 64 * 1024;
/// Bytes queued towards one side of a proxied exchange before the other side stops reading.
pub const PROXY_HIGH_WATER: u64 = 256 * 1024;
/// Largest upstream response head.
pub const MAX_RESPONSE_HEAD: usize = 64 * 1024;

/// A request being proxied.
pub struct Exchange {
    pub dial: Dial,
    /// The upstream connection of the current attempt.
    pub up: Option<ConnId>,
    /// The head sent upstream (again on a retry).
    pub head: Vec<u8>,
    /// `proxy_host = "upstream"`: the Host line follows the chosen server.
    pub host_upstream: bool,
    /// The request has a body.
    pub has_body: bool,
    /// Body bytes forwarded so far, for a retry; `None` once too large (or without a body).
    pub replay: Option<Vec<u8>>,
    /// The upstream failed with this status before the request body was all read, and an
    /// `error_page` re-serves the request at a proxying location: the rest of the body is
    /// read (and kept) first, then the request falls back with it (HTTP/1 `give_up`).
    pub gave_up: Option<u16>,
    /// The request body still arriving.
    pub req_body: Option<BodyDecoder>,
    pub idempotent: bool,
    pub head_request: bool,
    pub version: Version,
    /// The client connection stays open after the response.
    pub keep: bool,
    pub upgrade: bool,
    /// Response bytes went to the client: no retry, and a failure now cuts the response.
    pub started: bool,
    /// The client's response is delimited by closing its connection: a cut must then be a
    /// reset, or the client would take what it got for the whole body.
    pub close_framed: bool,
    /// Reading from the client stopped because the upstream's queue is full.
    pub body_paused: bool,
    /// The response status goes to the client connection's request log (HTTP/1); an
    /// HTTP/2 stream logs its own.
    pub log: bool,
    /// Added or hidden headers, compression, intercepted errors (None: the location has
    /// none of them).
    pub deco: Option<Box<deco::Deco>>,
    /// Keep a chunked response's trailer section for the client role (an HTTP/2 stream
    /// sends it as trailers; an HTTP/1.1 client gets the chunked body as it is).
    pub pass_trailers: bool,
    /// The trailer field lines of the finished response (`name: value` CRLF each), when
    /// `pass_trailers`.
    pub trailers: Option<Vec<u8>>,
    /// The response is read by the server too (a subrequest, or a cache fill).
    pub capture: Option<Box<capture::Capture>>,
}

impl Default for Exchange {
    fn default() -> Exchange {
        Exchange {
            dial: Dial::default(),
            up: None,
            head: Vec::new(),
            host_upstream: false,
            has_body: false,
            replay: None,
            gave_up: None,
            req_body: None,
            idempotent: false,
            head_request: false,
            version: Version::Http11,
            keep: false,
            upgrade: false,
            started: false,
            close_framed: false,
            body_paused: false,
            log: true,
            deco: None,
            pass_trailers: false,
            trailers: None,
            capture: None,
        }
    }
}

/// What the client role does after an exchange event.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Nothing: more is to come from one side or the other.
    Pending,
    /// The response is complete; the client connection goes on (or closes) as the exchange
    /// says ([`Exchange::client_closes`]).
    Done,
    /// No response was sent and none can be had: answer with this status.
    GiveUp(u16),
    /// Part of the response went out and the exchange broke: the client must see it cut.
    Cut,
    /// The upstream answered 101: from now on the two connections are a byte tunnel.
    Upgrade(ConnId),
}

/// What request body bytes given to [`Exchange::forward_body`] came to.
#[derive(Debug, PartialEq, Eq)]
pub enum BodyFed {
    /// Bytes consumed; the body goes on.
    More(usize),
    /// Bytes consumed, and the body is complete.
    Done(usize),
    /// The body cannot go on: answer this status (400: bad framing, 413: too large).
    Refused(u16),
}

impl Exchange {
    /// Readies a recycled exchange for a request (its head to go is prepared already): the
    /// body's framing `body`; `keep`: the client connection may stay open. Returns whether
    /// the request has a body.
    pub fn begin(&mut self, body: ringx_http::BodyKind, version: Version, keep: bool) -> bool {
        let has_body = !matches!(
            body,
            ringx_http::BodyKind::None | ringx_http::BodyKind::Length(0)
        );
        self.up = None;
        self.has_body = has_body;
        self.replay = has_body.then(Vec::new);
        self.gave_up = None;
        self.req_body = has_body.then(|| {
            let mut d = BodyDecoder::new(body, ringx_http::BodyLimits::default());
            // A chunked body's trailer section goes on without the fields that may not be
            // trailers (`forward_body`).
            d.keep_trailers();
            d
        });
        self.version = version;
        self.keep = keep;
        self.started = false;
        self.close_framed = false;
        self.body_paused = false;
        self.log = true;
        has_body
    }

    /// A request of the server's own (`head` to `upstream` of generation `gen`: an
    /// `auth_request` subrequest, a cache update), whose response `capture` receives and no
    /// client sees; `tried` is a recycled list for the servers it tries.
    pub fn own(
        (gen, upstream, retries): (u32, usize, u32),
        head: Vec<u8>,
        capture: capture::Capture,
        tried: Vec<usize>,
    ) -> Exchange {
        Exchange {
            dial: Dial::new(gen, upstream, retries, None, tried),
            head,
            idempotent: true,
            keep: true,
            capture: Some(Box::new(capture)),
            ..Exchange::default()
        }
    }

    /// Forwards the request body bytes in `input` to the upstream as they came (chunked
    /// framing passed through, up to the trailer section: that goes on without the fields
    /// that may not be trailers, RFC 9110 §6.5.1), keeping them for a retry within
    /// [`MAX_REPLAY`].
    pub fn forward_body(&mut self, cx: &mut Cx, input: &[u8], max_body: u64) -> BodyFed {
        let Some(dec) = self.req_body.as_mut() else {
            return BodyFed::More(0);
        };
        let mut pos = 0;
        loop {
            let Ok(d) = dec.decode(&input[pos..]) else {
                return BodyFed::Refused(400);
            };
            let raw = &input[pos..pos + d.consumed - d.trailer];
            let kept = if d.done { dec.take_trailers() } else { None };
            let end;
            let raw = match kept {
                Some(t) => {
                    let mut b = raw.to_vec();
                    b.extend_from_slice(&ringx_http::trailer::allowed_lines(&t));
                    b.extend_from_slice(b"\r\n");
                    end = b;
                    &end[..]
                }
                None => raw,
            };
            if let Some(u) = self.up {
                if let Some(up) = cx.ups.get_mut(u) {
                    up.tr.write(cx.io, u, raw);
                }
            }
            if let Some(r) = self.replay.as_mut() {
                if r.len() + raw.len() <= MAX_REPLAY {
                    r.extend_from_slice(raw);
                } else {
                    self.replay = None;
                }
            }
            pos += d.consumed;
            if dec.received() > max_body {
                return BodyFed::Refused(413);
            }
            if d.done {
                self.req_body = None;
                return BodyFed::Done(pos);
            }
            if d.consumed == 0 || pos == input.len() {
                return BodyFed::More(pos);
            }
        }
    }

    /// Whether a failed attempt may go to another server: nothing reached the client, the
    /// method is idempotent, the body (if any) can be replayed, tries and servers are left.
    pub fn can_retry(&self, pools: &ZonePools) -> bool {
        !self.started
            && self.idempotent
            && self.dial.tries_left > 0
            && (!self.has_body || self.replay.is_some())
            && self.dial.untried(pools)
    }

    /// A subrequest: the response goes to the server, not to the client.
    pub fn is_sub(&self) -> bool {
        self.capture.as_ref().is_some_and(|c| !c.to_client)
    }

    /// Whether the client connection must close once the response is complete.
    pub fn client_closes(&self, base: &Base) -> bool {
        !self.keep || self.req_body.is_some() || base.eof
    }

    /// Reaches a server and hands it the request: the PROXY header (a new connection to a
    /// server that wants one), the head, and the body so far.
    pub fn send(&mut self, cx: &mut Cx, base: &Base, c: ConnId) -> Result<(), Error> {
        let now = cx.io.now();
        let (pools, connector) = cx.ctx.dial_parts(self.dial.gen);
        // bind = "client": the connection leaves from the client's address.
        let from = match (pools.defs.list[self.dial.upstream].bind_client, base.addr) {
            (false, _) => None,
            (true, Some(a)) => Some(a.ip()),
            (true, None) => {
                return Err(Error::new(Kind::Connect, Side::Internal)
                    .context("bind = \"client\": the client's address is not known"))
            }
        };
        let reached = self.dial.reach(cx.io, pools, connector, true, from, now)?;
        let (u, reused) = (reached.conn, reached.reused);
        let def = &pools.defs.list[self.dial.upstream];
        let timeout = if reused {
            def.read_timeout
        } else {
            def.connect_timeout
        };
        if self.host_upstream {
            rehost(&mut self.head, &def.servers[self.dial.server].name);
        }
        let pp = def.proxy_protocol;
        let tls = def
            .tls
            .as_ref()
            .map(|t| (t.config.clone(), t.name(self.dial.server)));
        let rec = attach(
            cx.io,
            cx.ups,
            base,
            c,
            &self.dial,
            reached,
            Opening { pp, tls },
        );
        rec.tr.write(cx.io, u, &self.head);
        if let Some(cap) = self.capture.as_mut() {
            cap.restart();
        }
        if let Some(r) = &self.replay {
            rec.tr.write(cx.io, u, r);
        }
        self.up = Some(u);
        cx.ctx.set_up_deadline(cx.io, rec, u, now + timeout);
        Ok(())
    }

    /// Sends the request again after a failure, or says why it cannot go on.
    fn resend(&mut self, cx: &mut Cx, base: &Base, c: ConnId) -> Outcome {
        match self.send(cx, base, c) {
            Ok(()) => Outcome::Pending,
            Err(_) => Outcome::GiveUp(502),
        }
    }

    /// The upstream failed with `status` while the request body still arrives (`reading`,
    /// and kept so far), and the location's error page `page` re-serves the request at a
    /// proxying location for it: the upstream is let go and the rest of the body is read and
    /// kept first, then the request falls back with it. Returns whether that is so.
    pub fn reads_rest_first(
        &mut self,
        cx: &mut Cx,
        (reading, page): (bool, Option<&crate::answer::PageCtx>),
        status: u16,
    ) -> bool {
        let falls_back = page.is_some_and(|p| p.falls_back(status));
        if !(reading && self.replay.is_some() && self.capture.is_none() && falls_back) {
            return false;
        }
        self.detach(cx);
        self.gave_up = Some(status);
        true
    }

    /// The client's side drained: the upstream, paused for back-pressure, reads again.
    pub fn resume_upstream(&self, cx: &mut Cx) {
        let Some(u) = self.up else { return };
        if let Some(up) = cx.ups.get_mut(u) {
            if up.paused {
                up.paused = false;
                if !up.eof {
                    cx.io.resume_recv(u);
                }
            }
        }
    }

    /// Closes the exchange's upstream connection (not reusable: the exchange was cut).
    pub fn detach(&mut self, cx: &mut Cx) {
        let Some(u) = self.up.take() else { return };
        let Some(up) = cx.ups.get_mut(u) else { return };
        if up.state != UpState::Closing {
            up.abandon(cx.io, u);
            let p = cx.ctx.pools(self.dial.gen);
            p.finished(self.dial.upstream, self.dial.server);
        }
    }

    /// The attempt on `u` failed (`why`): the server is blamed (passive health) unless it
    /// was the keep-alive race, then the request goes to another server if nothing reached
    /// the client, or the client gets 502/504, or sees its response cut.
    pub fn upstream_failed(
        &mut self,
        cx: &mut Cx,
        base: &Base,
        c: ConnId,
        u: ConnId,
        why: Error,
    ) -> Outcome {
        let Some(up) = cx.ups.get_mut(u) else {
            return Outcome::Pending;
        };
        if up.state == UpState::Closing {
            return Outcome::Pending;
        }
        let f = Failed::take(up);
        cx.io.close(u);
        self.after_failure(cx, base, c, f, why)
    }

    /// The upstream connection `u` closed under the exchange (its record is still in the
    /// table, and leaves it after this).
    pub fn upstream_closed(
        &mut self,
        cx: &mut Cx,
        base: &Base,
        c: ConnId,
        u: ConnId,
        err: Option<std::io::Error>,
    ) -> Outcome {
        let Some(up) = cx.ups.get_mut(u) else {
            return Outcome::Pending;
        };
        let name = self.dial.name(cx.ctx.pools(self.dial.gen));
        let kind = match up.state {
            UpState::Connecting => Kind::Connect,
            UpState::Busy | UpState::Tunnel => Kind::Reset,
            UpState::Idle | UpState::Closing => return Outcome::Pending,
        };
        let mut why = Error::new(kind, Side::Upstream).context(format!("upstream {name}"));
        if let Some(e) = err {
            why = why.cause(e);
        }
        if kind == Kind::Connect {
            tracing::warn!("{why}");
        } else {
            tracing::debug!(zone = cx.ctx.id, "{why}");
        }
        let f = Failed::take(up);
        self.after_failure(cx, base, c, f, why)
    }

    /// The upstream connection's deadline passed (connect or read timeout).
    pub fn upstream_timeout(&mut self, cx: &mut Cx, base: &Base, c: ConnId, u: ConnId) -> Outcome {
        let busy = cx
            .ups
            .get(u)
            .is_some_and(|x| matches!(x.state, UpState::Connecting | UpState::Busy));
        if !busy {
            return Outcome::Pending;
        }
        let why = Error::new(Kind::Timeout, Side::Upstream).context(format!(
            "upstream {}",
            self.dial.name(cx.ctx.pools(self.dial.gen))
        ));
        tracing::warn!("{why}");
        self.upstream_failed(cx, base, c, u, why)
    }

    /// The client side of a failure: retry, 502/504, or cut the response off.
    fn after_failure(
        &mut self,
        cx: &mut Cx,
        base: &Base,
        c: ConnId,
        f: Failed,
        why: Error,
    ) -> Outcome {
        let now = cx.io.now();
        let silent = f.reused && !f.got_bytes && matches!(why.kind, Kind::Reset | Kind::Connect);
        let pools = cx.ctx.pools(self.dial.gen);
        if f.was_busy {
            pools.finished(f.upstream, f.server);
        }
        // A 502/503 answer is the server's word, not a fault of the connection; and a client
        // that went away is not the server's fault.
        if !silent && !matches!(why.kind, Kind::Status(_)) && why.side == Side::Upstream {
            pools.failed(f.upstream, f.server, now);
        }
        if f.client.is_none_or(|(x, g)| x != c || g != base.gen) {
            return Outcome::Pending; // it no longer served this exchange
        }
        self.up = None;
        // A connection the server closed under a request is worth the operator's eye when
        // the client pays for it (nginx: "upstream prematurely closed connection"); a
        // keep-alive race that is sent again is not. Other kinds were logged where they arose.
        let reset = why.kind == Kind::Reset && why.side == Side::Upstream && !silent;
        if self.started {
            if reset {
                tracing::warn!("{why}: closed with the response under way; the client's is cut");
            }
            return Outcome::Cut;
        }
        if silent {
            // The keep-alive race: the server closed an idle connection as we reused it.
            self.dial.tried.retain(|&x| x != f.server);
            return self.resend(cx, base, c);
        }
        if why.retryable() && self.can_retry(cx.ctx.pools(self.dial.gen)) {
            self.dial.tries_left -= 1;
            return self.resend(cx, base, c);
        }
        if reset {
            tracing::warn!(
                "{why}: closed before its response; the client gets {}",
                why.status()
            );
        }
        Outcome::GiveUp(why.status())
    }
}

/// What a failure handler needs of the upstream connection's record.
struct Failed {
    upstream: usize,
    server: usize,
    reused: bool,
    got_bytes: bool,
    was_busy: bool,
    client: Option<(ConnId, u32)>,
}

impl Failed {
    /// Reads the record and marks it closing (detached from its client).
    fn take(up: &mut UpConn) -> Failed {
        let was_busy = matches!(
            up.state,
            UpState::Busy | UpState::Connecting | UpState::Tunnel
        );
        up.state = UpState::Closing;
        Failed {
            upstream: up.upstream,
            server: up.server,
            reused: up.reused,
            got_bytes: up.got_bytes,
            was_busy,
            client: up.client.take(),
        }
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

/// The read and keep-alive timeouts of an upstream.
pub(crate) fn up_timeouts(
    pools: &ZonePools,
    upstream: usize,
) -> (std::time::Duration, std::time::Duration) {
    let d = &pools.defs.list[upstream];
    (d.read_timeout, d.keepalive_timeout)
}

/// Pauses reading from the upstream `u` until the client's queue drains.
pub(crate) fn pause_upstream(io: &mut Io, up: &mut UpConn, u: ConnId) {
    if !up.paused {
        up.paused = true;
        io.pause_recv(u);
    }
}

#[cfg(test)]
mod deco_tests;
#[cfg(test)]
mod pool_prop;
#[cfg(test)]
mod tests;

#[cfg(test)]
mod rehost_tests {
    use super::rehost;

    #[test]
    fn rehost_replaces_only_the_host_line() {
        let mut h = b"GET / HTTP/1.1\r\nHost: client.test\r\nX: y\r\n\r\n".to_vec();
        rehost(&mut h, "10.0.0.5:8080");
        assert_eq!(h, b"GET / HTTP/1.1\r\nHost: 10.0.0.5:8080\r\nX: y\r\n\r\n");
        let mut h = b"GET / HTTP/1.1\r\nX: y\r\n\r\n".to_vec();
        rehost(&mut h, "a");
        assert_eq!(
            h, b"GET / HTTP/1.1\r\nX: y\r\n\r\n",
            "no Host line first: unchanged"
        );
    }
}
