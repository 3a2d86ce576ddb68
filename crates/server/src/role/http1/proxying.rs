//! The exchange slot of an HTTP/1 connection ([`Proxying`]): the request being proxied (or a
//! request of the server's own: an `auth_request`, a cache fill or refresh), the record kept
//! for the next one, and what the exchange's progress means for the client's side (its
//! deadlines, its reading paused for back-pressure and resumed). It reports what happened;
//! `steps.rs` acts on it in the connection's framing (answers, fallbacks, keep-alive).

use ringx_engine::ConnId;
use ringx_http::upstream::upgrade_request;
use ringx_http::{Request, Version};

use crate::answer::ReqCtx;
use crate::ctx::base::Base;
use crate::ctx::Cx;
use crate::pipeline::failure;
use crate::pipeline::pending::Pending;
use crate::pipeline::routing::Route;
use crate::role::exchange::capture::Capture;
use crate::role::exchange::{BodyFed, Exchange, Outcome, PROXY_HIGH_WATER};
use crate::role::proxy_start;
use crate::role::upstream::UpEvent;

/// The exchange of an HTTP/1 connection, and the spare record for its next one.
#[derive(Default)]
pub(super) struct Proxying {
    /// The request being proxied.
    exchange: Option<Box<Exchange>>,
    /// The last exchange of this connection, kept for the next proxied request: its head
    /// and retry vectors keep their capacity, so a keep-alive connection whose requests are
    /// proxied allocates nothing for them after the first.
    spare: Option<Box<Exchange>>,
}

/// What the request body arriving from the client came to ([`Proxying::feed`]).
pub(super) enum Fed {
    /// This many bytes of the input were forwarded; the exchange goes on.
    Took(usize),
    /// This many were forwarded and the body is complete, but the upstream failed before
    /// it did (with this status): the request falls back with its body.
    GaveUp(usize, u16),
    /// The body cannot go on (400: bad framing, 413: too large).
    Refused(u16),
    /// There is no exchange (it ended).
    Gone,
}

/// What the connection must know of an exchange that failed, to answer for it
/// ([`Proxying::failed`]); the exchange has ended.
pub(super) struct Failed {
    /// The request's body, if it all arrived and was kept (within `MAX_REPLAY`): a fallback
    /// location gets it again, as nginx re-sends a buffered body.
    pub body: Option<Vec<u8>>,
    /// The location's `add_header ... always` lines, for the error page.
    pub always: String,
    pub head_only: bool,
    /// The client asked to keep the connection.
    pub keep: bool,
    /// The client sends nothing more after this request (or already closed).
    pub client_closes: bool,
    pub v11: bool,
    /// What the request of the server's own captured (no client waits on it), or a fill.
    pub capture: Option<Box<Capture>>,
}

/// How a proxied response ended ([`Proxying::finish`]).
pub(super) enum Finished {
    /// It went to the client, which keeps the connection unless `close`.
    Answered { close: bool },
    /// It was the server's own request's: what it captured.
    Own(Box<Capture>),
}

impl Proxying {
    pub fn is_active(&self) -> bool {
        self.exchange.is_some()
    }

    /// Starts proxying `req` if it routes to a `proxy_pass` location: the exchange is made
    /// ready, `pending` keeps the location's error pages, and a `100 Continue` goes out if
    /// asked. Returns whether the request has a body to forward; None: not proxied.
    /// `capture`: what the cache keeps of the response (a fill), and the status it carries.
    pub fn start(
        &mut self,
        cx: &mut Cx,
        b: &mut Base,
        c: ConnId,
        (req, route, rq): (&Request, &Route<'_>, &ReqCtx),
        (keep, capture): (bool, Option<Capture>),
        pending: &mut Pending,
    ) -> Option<bool> {
        if !proxy_start::is_proxied(&cx.ctx.routes, route) {
            return None;
        }
        // A recycled record (taken only once the request is known to be proxied): its head
        // and retry list keep their capacity.
        let mut ex = self.spare.take().unwrap_or_default();
        let upgrade = upgrade_request(req);
        let fill = capture.as_ref().and_then(|x| x.fill.as_deref());
        let Some(page) = proxy_start::prepare(cx.ctx, b, (req, route, rq), &mut ex, upgrade, fill)
        else {
            self.spare = Some(ex);
            return None;
        };
        pending.page = page;
        if let Some(rr) = pending.fallback.take() {
            // Done before it is sent: a failure at once goes on.
            failure::re_served(&rr.fb, &mut pending.page, &mut ex);
        }
        let has_body = ex.begin(req.body, req.version, keep && upgrade.is_none());
        ex.upgrade = upgrade.is_some();
        ex.capture = capture.map(Box::new);
        if has_body && req.expect_continue {
            b.tr.write(cx.io, c, b"HTTP/1.1 100 Continue\r\n\r\n");
        }
        self.exchange = Some(ex);
        let wait = if has_body {
            cx.ctx.set.body_timeout
        } else {
            cx.ctx.set.send_timeout
        };
        let at = cx.io.now() + wait;
        cx.ctx.set_deadline(cx.io, b, c, at);
        if !has_body {
            // Input that arrives while the request is with the upstream (pipelined requests)
            // waits in the buffer, but the receive stays armed: stopping and re-arming it on
            // every proxied request costs a cancel, a new receive and two more completions.
            // Input beyond a request head's worth stops the receive for real (`on_data`).
            b.paused = true;
        }
        Some(has_body)
    }

    /// Makes ready a request of the server's own (`head` to `upstream`), whose answer
    /// `capture` receives; the client's reading waits meanwhile. Err: the zone has no
    /// upstream state (a reload added the first upstream), and nothing was started.
    pub fn start_own(
        &mut self,
        cx: &mut Cx,
        b: &mut Base,
        c: ConnId,
        (upstream, head): (usize, Vec<u8>),
        capture: Capture,
    ) -> Result<(), Capture> {
        let Some((pools, gen)) = cx.ctx.current_pools() else {
            return Err(capture);
        };
        let retries = pools.defs.list[upstream].retries;
        let mut ex = self.spare.take().unwrap_or_default();
        let tried = std::mem::take(&mut ex.dial.tried);
        *ex = Exchange::own((gen, upstream, retries), head, capture, tried);
        self.exchange = Some(ex);
        b.paused = true;
        let at = cx.io.now() + cx.ctx.set.send_timeout;
        cx.ctx.set_deadline(cx.io, b, c, at);
        Ok(())
    }

    /// Hands the request to a server. False: none can be reached.
    pub fn send(&mut self, cx: &mut Cx, b: &Base, c: ConnId) -> bool {
        self.exchange
            .as_mut()
            .is_none_or(|ex| ex.send(cx, b, c).is_ok())
    }

    /// Forwards the request body bytes in `input` as they came (chunked framing passed
    /// through), with the client's deadline moved on, and its reading paused while the
    /// upstream has more than [`PROXY_HIGH_WATER`] queued.
    pub fn feed(&mut self, cx: &mut Cx, b: &mut Base, c: ConnId, input: &[u8]) -> Fed {
        let max_body = cx.ctx.set.max_body;
        let Some(ex) = self.exchange.as_mut() else {
            return Fed::Gone;
        };
        if ex.req_body.is_none() {
            return Fed::Took(0);
        }
        let u = ex.up;
        let (pos, done) = match ex.forward_body(cx, input, max_body) {
            BodyFed::More(n) => (n, false),
            BodyFed::Done(n) => (n, true),
            BodyFed::Refused(status) => return Fed::Refused(status),
        };
        let now = cx.io.now();
        let gave_up = if done { ex.gave_up.take() } else { None };
        if done {
            b.paused = true;
            cx.io.pause_recv(c);
            let at = now + cx.ctx.set.send_timeout;
            cx.ctx.set_deadline(cx.io, b, c, at);
        } else {
            let at = now + cx.ctx.set.body_timeout;
            cx.ctx.set_deadline(cx.io, b, c, at);
        }
        if let Some(u) = u {
            let send = Some(cx.ctx.pools(ex.dial.gen).defs.list[ex.dial.upstream].send_timeout);
            if let (Some(up), Some(st)) = (cx.ups.get_mut(u), send) {
                up.deadline = now + st; // the upstream is busy receiving, not idle
            }
            if !done && cx.io.pending(u) > PROXY_HIGH_WATER {
                b.paused = true;
                cx.io.pause_recv(c);
                ex.body_paused = true;
                cx.io.notify_when_flushed(u);
            }
        }
        match gave_up {
            Some(status) => Fed::GaveUp(pos, status),
            None => Fed::Took(pos),
        }
    }

    /// An event on upstream connection `u`: what the exchange makes of it, and whether the
    /// client's reading, paused for back-pressure, goes on (everything queued to the
    /// upstream was written). None: an upstream this connection no longer uses (dropped).
    pub fn event(
        &mut self,
        cx: &mut Cx,
        b: &mut Base,
        c: ConnId,
        (u, ev): (ConnId, UpEvent),
    ) -> Option<(Outcome, bool)> {
        let Some(ex) = self.exchange.as_mut() else {
            if let Some(up) = cx.ups.get_mut(u) {
                up.abandon(cx.io, u);
            }
            return None;
        };
        let flushed = matches!(ev, UpEvent::Flushed);
        let outcome = ex.event(cx, b, c, u, ev);
        let resume = flushed && std::mem::take(&mut ex.body_paused) && ex.req_body.is_some();
        Some((outcome, resume))
    }

    /// Whether the upstream failed (`status`) while the request's body is still arriving and
    /// the location has a page for it: the rest of the body is read first (`feed`), then the
    /// request falls back with it. `Some(resume)`: so it is, and the client's reading, if
    /// paused for back-pressure, must go on.
    pub fn reads_rest_first(
        &mut self,
        cx: &mut Cx,
        pending: &Pending,
        status: u16,
    ) -> Option<bool> {
        let ex = self.exchange.as_mut()?;
        let reading = ex.has_body && ex.req_body.is_some();
        if !ex.reads_rest_first(cx, (reading, pending.page.as_deref()), status) {
            return None;
        }
        Some(std::mem::take(&mut ex.body_paused))
    }

    /// Ends a failed exchange, and says what answering for it needs.
    pub fn failed(&mut self, cx: &mut Cx, b: &Base) -> Failed {
        let ex = self.exchange.as_mut();
        let f = match ex {
            Some(x) => Failed {
                body: if x.has_body && x.req_body.is_none() {
                    x.replay.take()
                } else {
                    None
                },
                always: x
                    .deco
                    .as_mut()
                    .map(|d| std::mem::take(&mut d.add_always))
                    .unwrap_or_default(),
                head_only: x.head_request,
                keep: x.keep,
                client_closes: x.client_closes(b),
                v11: x.version == Version::Http11,
                capture: x.capture.take(),
            },
            None => Failed {
                body: None,
                always: String::new(),
                head_only: false,
                keep: false,
                client_closes: true,
                v11: false,
                capture: None,
            },
        };
        self.end(cx);
        f
    }

    /// The response is complete: how it ended. A fill that reached the client is stored.
    pub fn finish(&mut self, cx: &mut Cx, b: &Base) -> Option<Finished> {
        let mut ex = self.exchange.take()?;
        if let Some(mut cap) = ex.capture.take() {
            if !cap.to_client {
                self.recycle(ex);
                return Some(Finished::Own(cap));
            }
            crate::pipeline::cache::finish(&mut cap, cx.ctx.wall_ms(cx.io.now()));
        }
        let close = ex.client_closes(b);
        self.recycle(ex);
        Some(Finished::Answered { close })
    }

    /// Part of the response went out and the exchange broke: it ends, and so does the
    /// client's connection once what is queued is out, so that the client sees the response
    /// cut. A body delimited by the close needs a reset (and over TLS no close_notify): a
    /// plain close would pass for its end.
    pub fn cut(&mut self, cx: &mut Cx, b: &mut Base, c: ConnId) {
        let reset = self.exchange.as_ref().is_some_and(|e| e.close_framed);
        self.end(cx);
        if reset {
            b.tr.abort_after_flush(cx.io, c);
        } else {
            b.tr.close_after_flush(cx.io, c);
        }
    }

    /// Whether part of the response went to the client already.
    pub fn started(&self) -> bool {
        self.exchange.as_ref().is_some_and(|x| x.started)
    }

    /// Whether the request's body is still arriving from the client.
    pub fn body_missing(&self) -> bool {
        self.exchange.as_ref().is_some_and(|x| x.req_body.is_some())
    }

    /// Whether the client's deadline is the body's (it is sending it, not held back by the
    /// upstream's back-pressure); otherwise the upstream's read timeout decides.
    pub fn in_body(&self) -> bool {
        self.exchange
            .as_ref()
            .is_some_and(|x| x.req_body.is_some() && !x.body_paused)
    }

    /// The client's queue drained: an upstream paused for back-pressure reads again.
    pub fn client_flushed(&self, cx: &mut Cx) {
        if let Some(ex) = &self.exchange {
            ex.resume_upstream(cx);
        }
    }

    /// Drops the exchange, closing its upstream connection if it still has one.
    pub fn end(&mut self, cx: &mut Cx) {
        if let Some(mut ex) = self.exchange.take() {
            ex.detach(cx);
            self.recycle(ex);
        }
    }

    /// Keeps a finished exchange's allocations for the connection's next proxied request.
    fn recycle(&mut self, ex: Box<Exchange>) {
        if ex.head.capacity() <= 64 * 1024 {
            self.spare = Some(ex);
        }
    }
}
