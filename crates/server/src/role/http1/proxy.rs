//! The HTTP/1 role's side of proxying: starting an [`Exchange`] for a request routed to
//! `proxy_pass`, streaming the request body to it with back-pressure, acting on what the
//! exchange reports from the upstream, and the client going away or stalling meanwhile.

use ringx_engine::ConnId;
use ringx_http::upstream::upgrade_request;
use ringx_http::{Method, Request, Version};

use super::{fallback, write, Http1, Next, Phase};
use crate::answer::fallback::{may_fall_back, Fallback};
use crate::answer::{PageCtx, ReqCtx};
use crate::cache::fill::{Fill, Mode};
use crate::ctx::base::Base;
use crate::ctx::Cx;
use crate::pipeline::access::{self, Refusal};
use crate::pipeline::failure;
use crate::pipeline::routing::Route;
use crate::pipeline::{cache, Hit};
use crate::response::{ConnHdr, ErrorPage};
use crate::role::exchange::capture::Capture;
use crate::role::exchange::{BodyFed, Exchange, Outcome, PROXY_HIGH_WATER};
use crate::role::proxy_start;
use crate::role::tunnel::Tunnel;
use crate::role::upstream::UpEvent;

impl Http1 {
    /// Starts proxying if the request routes to a `proxy_pass` location; `capture`: what the
    /// cache keeps of the response (a fill), and the cache status it carries.
    #[inline(never)]
    pub(super) fn try_proxy(
        &mut self,
        cx: &mut Cx,
        b: &mut Base,
        c: ConnId,
        (req, route, rq): (&Request, &Route<'_>, &ReqCtx),
        keep: bool,
        capture: Option<Capture>,
    ) -> Option<Next> {
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
        self.pending.page = page;
        if let Some(rr) = self.pending.fallback.take() {
            // Done before it is sent: a failure at once goes on.
            failure::re_served(&rr.fb, &mut self.pending.page, &mut ex);
        }
        let has_body = ex.begin(req.body, req.version, keep && upgrade.is_none());
        ex.upgrade = upgrade.is_some();
        ex.capture = capture.map(Box::new);
        if has_body && req.expect_continue {
            b.tr.write(cx.io, c, b"HTTP/1.1 100 Continue\r\n\r\n");
        }
        self.exchange = Some(ex);
        self.phase = Phase::Proxy;
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
        self.send(cx, b, c);
        if self.exchange.is_none() {
            // It ended at once (no server could be reached) and was answered: the input
            // after it goes on here, as the connection now is.
            return Some(match self.phase {
                Phase::Lingering => Next::Stop,
                Phase::Idle if !b.paused => Next::Continue,
                _ => Next::Hold,
            });
        }
        Some(if has_body { Next::Continue } else { Next::Hold })
    }

    /// Sends a request of the server's own (`head`) to `upstream`; the request being handled
    /// waits (deferred) until the answer, which `capture` receives, is applied.
    pub(super) fn subrequest(
        &mut self,
        cx: &mut Cx,
        b: &mut Base,
        c: ConnId,
        upstream: usize,
        head: Vec<u8>,
        capture: Capture,
    ) {
        let Some((pools, gen)) = cx.ctx.current_pools() else {
            // No upstream state (a reload added the first upstream): as if it failed.
            let mut capture = capture;
            return match capture.fill.take() {
                Some(fill) => self.cache_sub_done(cx, b, c, capture, fill, Some(502)),
                None => self.sub_done(cx, b, c, None),
            };
        };
        let retries = pools.defs.list[upstream].retries;
        let mut ex = self.spare.take().unwrap_or_default();
        let tried = std::mem::take(&mut ex.dial.tried);
        *ex = Exchange::own((gen, upstream, retries), head, capture, tried);
        self.exchange = Some(ex);
        self.phase = Phase::Proxy;
        b.paused = true;
        let at = cx.io.now() + cx.ctx.set.send_timeout;
        cx.ctx.set_deadline(cx.io, b, c, at);
        self.send(cx, b, c);
    }

    /// The answer of a subrequest (`capture`, or None when none could be had): applied to the
    /// request that waits for it, which is resumed on the zone's next turn (never from inside
    /// the parse that sent the subrequest).
    pub(super) fn sub_done(
        &mut self,
        cx: &mut Cx,
        b: &mut Base,
        c: ConnId,
        capture: Option<&Capture>,
    ) {
        self.pending.progress.auth = Some(access::auth_answer(capture));
        let now = cx.io.now();
        self.hold(cx, b, c, Some(now));
    }

    /// Hands the request to a server; answers 502 when none can be reached.
    fn send(&mut self, cx: &mut Cx, b: &mut Base, c: ConnId) {
        let Some(ex) = self.exchange.as_mut() else {
            return;
        };
        if ex.send(cx, b, c).is_err() {
            self.give_up(cx, b, c, 502, false);
        }
    }

    /// The request body arriving from the client: forwarded as it comes (chunked framing
    /// passed through unchanged). Returns the bytes consumed, `None` if the exchange ended.
    pub(super) fn proxy_body(
        &mut self,
        cx: &mut Cx,
        b: &mut Base,
        c: ConnId,
        input: &[u8],
    ) -> Option<usize> {
        let max_body = cx.ctx.set.max_body;
        let ex = self.exchange.as_mut()?;
        if ex.req_body.is_none() {
            return Some(0);
        }
        let u = ex.up;
        let (pos, done) = match ex.forward_body(cx, input, max_body) {
            BodyFed::More(n) => (n, false),
            BodyFed::Done(n) => (n, true),
            BodyFed::Refused(status) => {
                self.abort_request(cx, b, c, status);
                return None;
            }
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
        if let Some(status) = gave_up {
            // The body is all here now: the request falls back with it.
            self.give_up(cx, b, c, status, false);
        }
        Some(pos)
    }

    /// The request cannot go on (bad body framing, too large): answer and drop the upstream.
    fn abort_request(&mut self, cx: &mut Cx, b: &mut Base, c: ConnId, status: u16) {
        let started = self.exchange.as_ref().is_some_and(|x| x.started);
        self.end_exchange(cx);
        self.phase = Phase::Idle;
        if started {
            self.phase = Phase::Lingering;
            cx.io.close(c);
        } else {
            self.fail(cx, b, c, status, false);
        }
    }

    /// Drops the exchange, closing its upstream connection if it still has one.
    fn end_exchange(&mut self, cx: &mut Cx) {
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

    /// No response can be had: `status` (502, 504, or an upstream error intercepted) to the
    /// client, the location's error page for it if it has one. `event`: called for an
    /// upstream's event, not while the client's input is being processed (`send` and
    /// `proxy_body` run inside `process`, which goes on with the input itself: the
    /// connection closes after their failures, as it did before keep-alive was kept here).
    fn give_up(&mut self, cx: &mut Cx, b: &mut Base, c: ConnId, status: u16, event: bool) {
        if let Some(ex) = self.exchange.as_mut() {
            let reading = ex.has_body && ex.req_body.is_some();
            if ex.reads_rest_first(cx, (reading, self.pending.page.as_deref()), status) {
                // The rest of the body is read (`proxy_body`), then the request falls back
                // here with it.
                if std::mem::take(&mut ex.body_paused) {
                    b.paused = false;
                    self.read_on(cx, b, c);
                }
                return;
            }
        }
        // The request's body, if it all arrived and was kept (within `MAX_REPLAY`): a
        // fallback location gets it again, as nginx re-sends a buffered body.
        let body = self
            .exchange
            .as_mut()
            .filter(|x| x.has_body && x.req_body.is_none())
            .and_then(|x| x.replay.take());
        let always = self
            .exchange
            .as_mut()
            .and_then(|x| x.deco.as_mut())
            .map(|d| std::mem::take(&mut d.add_always))
            .unwrap_or_default();
        let head_only = self.exchange.as_ref().is_some_and(|x| x.head_request);
        let keep = self.exchange.as_ref().is_some_and(|x| x.keep);
        // The connection goes on where nothing of the request is left to read, as nginx
        // keeps it after a 502/504 or an intercepted error's page; nginx closes it after a
        // 400, 413, 414, 500 or 501 whatever page replaces them.
        let close = !event
            || matches!(status, 400 | 413 | 414 | 500 | 501)
            || self.exchange.as_ref().is_none_or(|x| x.client_closes(b));
        let v11 = self
            .exchange
            .as_ref()
            .is_some_and(|x| x.version == Version::Http11);
        let ch = ConnHdr::new(v11, !close);
        if let Some(mut cap) = self.exchange.as_mut().and_then(|x| x.capture.take()) {
            self.end_exchange(cx);
            self.pending.page = None;
            if let Some(fill) = cap.fill.take() {
                return self.cache_sub_done(cx, b, c, *cap, fill, Some(status));
            }
            if !cap.to_client {
                return self.sub_done(cx, b, c, None);
            }
            self.exchange = None;
        }
        self.end_exchange(cx);
        self.phase = Phase::Idle;
        b.paused = false;
        if let Some(p) = self.pending.page.take() {
            if let Some(out) = b.tr.out_buf(cx.io, c) {
                if let Some(r) = p.write(cx.ctx.responder(), out, status, ch) {
                    if let Some(fb) = r.fallback {
                        // nginx does not keep the connection after a 500 (and the like) whatever
                        // page replaces it; nor does ringx after a failure met while the
                        // input is being processed (`event`).
                        if self.fall_back_saved(cx, b, c, (&p, &fb), keep && !close, body) {
                            return;
                        }
                        return self.fail_with(cx, b, c, status, head_only, &always);
                    }
                    if let Some((f, off, len)) = r.file {
                        b.tr.send_file(cx.io, c, f, off, len);
                    }
                    cx.ctx.log.status(cx.io, c, r.written, b);
                    return self.failure_answered(cx, b, c, close || r.close);
                }
            }
        }
        if close {
            return self.fail_with(cx, b, c, status, head_only, &always);
        }
        let page = ErrorPage::new(status, ch, head_only).extra(&always);
        if let Some(out) = b.tr.out_buf(cx.io, c) {
            let w = cx.ctx.responder().error(out, page);
            cx.ctx.log.status(cx.io, c, w, b);
        }
        self.failure_answered(cx, b, c, false)
    }

    /// A failed proxied request was answered (its page is queued): the connection closes,
    /// or goes on with the requests that came after it.
    fn failure_answered(&mut self, cx: &mut Cx, b: &mut Base, c: ConnId, close: bool) {
        if close {
            cx.ctx.log.end(cx.io, c, b, cx.ctx.id);
            self.prepared = None;
            self.pending.progress.conn = None;
            return self.linger(cx, b, c);
        }
        let more = !b.inbuf.is_empty();
        if matches!(self.after_response(cx, b, c, false, more), Next::Continue) && !b.paused {
            self.read_on(cx, b, c);
        }
    }

    /// Re-serves request `req`, which failed with `fb.error` before it was proxied, at the
    /// proxying location an `error_page` names (`fallback.rs`); the plain error page if it
    /// cannot be proxied there (the zone has no upstream state). `(keep, more_input)`: the
    /// connection stays open after the answer; more input follows the request.
    #[cold]
    #[inline(never)]
    pub(super) fn fall_back(
        &mut self,
        cx: &mut Cx,
        b: &mut Base,
        c: ConnId,
        req: &Request,
        fb: &Fallback,
        (keep, more_input): (bool, bool),
    ) -> Next {
        self.pending.progress.redirected();
        if let Some(next) = fallback::serve(self, cx, b, c, (req, None), fb, keep) {
            return next;
        }
        let ch = ConnHdr::new(req.version == Version::Http11, keep);
        let Some(out) = b.tr.out_buf(cx.io, c) else {
            return Next::Stop;
        };
        let page = ErrorPage::new(fb.error, ch, req.method == Method::Head);
        let w = cx.ctx.responder().error(out, page);
        cx.ctx.log.status(cx.io, c, w, b);
        self.after_response(cx, b, c, !keep, more_input)
    }

    /// Refusal `f` (with its header lines) answered with the `error_page` configured for its
    /// status: a page served here (the refusal's status, or the one the entry says, with the
    /// refusal's `WWW-Authenticate`/`Retry-After`), or a fallback to a proxying location. None: no
    /// page for it, the plain refusal goes out.
    pub(super) fn refused(
        &mut self,
        cx: &mut Cx,
        b: &mut Base,
        c: ConnId,
        req: &Request,
        f: &Refusal<'_>,
        keep: bool,
    ) -> Option<Next> {
        let loc = &cx.ctx.routes.location(f.at);
        loc.rw.as_ref()?.error_pages.as_ref()?.get(f.status)?;
        let has_body = !may_fall_back(req);
        let ch = if has_body {
            ConnHdr::Close // the body is not read: the connection closes after the page
        } else {
            ConnHdr::new(req.version == Version::Http11, keep)
        };
        let out = b.tr.out_buf(cx.io, c)?;
        let routes = &cx.ctx.routes;
        let r = access::refusal_page(routes, cx.ctx.responder(), out, req, f, ch)?;
        let more_input = !b.inbuf.is_empty();
        if let Some(fb) = r.fallback {
            return Some(self.fall_back(cx, b, c, req, &fb, (keep, more_input)));
        }
        if let Some((f, off, len)) = r.file {
            b.tr.send_file(cx.io, c, f, off, len);
        }
        cx.ctx.log.status(cx.io, c, r.written, b);
        if has_body {
            cx.ctx.log.end(cx.io, c, b, cx.ctx.id);
            self.pending.progress.conn = None;
            self.linger(cx, b, c);
            return Some(Next::Stop);
        }
        Some(self.after_response(cx, b, c, !keep || r.close, more_input))
    }

    /// A request held on its way to a fallback location is looked at again.
    #[cold]
    #[inline(never)]
    pub(super) fn resume_fallback(&mut self, cx: &mut Cx, b: &mut Base, c: ConnId) {
        fallback::resume(self, cx, b, c)
    }

    /// A proxied request whose upstream failed, re-served at the proxying location `fb` its
    /// error page `p` names, from the head `p` kept and its body (`body`: all of it, kept);
    /// false: it cannot be (no head was kept, a reload replaced the routes it was routed by,
    /// its body was not all read or too large to keep), and the caller answers.
    #[cold]
    #[inline(never)]
    fn fall_back_saved(
        &mut self,
        cx: &mut Cx,
        b: &mut Base,
        c: ConnId,
        (p, fb): (&PageCtx, &Fallback),
        keep: bool,
        body: Option<Vec<u8>>,
    ) -> bool {
        let mut storage = failure::storage();
        let Some(req) = failure::saved_request(cx, p, &mut storage) else {
            return false;
        };
        let Some(body) = failure::body_again(&req, body) else {
            return false; // streamed and not kept: it cannot be sent again
        };
        self.pending.progress.redirected();
        let Some(next) = fallback::serve(self, cx, b, c, (&req, body), fb, keep) else {
            return false;
        };
        if matches!(next, Next::Continue) && self.phase == Phase::Idle && !b.paused {
            // Answered at once (refused by the fallback's guard, a cache hit).
            self.process_buffered(cx, b, c);
        }
        true
    }

    /// An event on the exchange's upstream connection `u`. Returns the tunnel this
    /// connection becomes when the upstream switched protocols.
    pub fn upstream_event(
        &mut self,
        cx: &mut Cx,
        b: &mut Base,
        c: ConnId,
        u: ConnId,
        ev: UpEvent,
    ) -> Option<Tunnel> {
        let Some(ex) = self.exchange.as_mut() else {
            // An upstream this connection no longer uses.
            if let Some(up) = cx.ups.get_mut(u) {
                up.abandon(cx.io, u);
            }
            return None;
        };
        let flushed = matches!(ev, UpEvent::Flushed);
        let outcome = ex.event(cx, b, c, u, ev);
        if flushed {
            self.upstream_flushed(cx, b, c);
        }
        match outcome {
            Outcome::Pending => None,
            Outcome::Done => {
                self.response_done(cx, b, c);
                None
            }
            Outcome::GiveUp(status) => {
                self.give_up(cx, b, c, status, true);
                None
            }
            Outcome::Cut => {
                // Part of the response is out: end the connection so the client sees it cut.
                // A body delimited by the close needs a reset (and over TLS no close_notify):
                // a plain close would pass for its end.
                let reset = self.exchange.as_ref().is_some_and(|e| e.close_framed);
                self.end_exchange(cx);
                self.phase = Phase::Lingering;
                if reset {
                    b.tr.abort_after_flush(cx.io, c);
                } else {
                    b.tr.close_after_flush(cx.io, c);
                }
                None
            }
            Outcome::Upgrade(u) => {
                self.end_exchange(cx);
                Some(Tunnel::upgrade(cx, b, c, u))
            }
        }
    }

    /// The response is complete: the connection goes on with the next request, or closes.
    fn response_done(&mut self, cx: &mut Cx, b: &mut Base, c: ConnId) {
        let Some(mut ex) = self.exchange.take() else {
            return;
        };
        self.pending.page = None;
        if let Some(mut cap) = ex.capture.take() {
            if !cap.to_client {
                self.recycle(ex);
                return match cap.fill.take() {
                    Some(fill) => self.cache_sub_done(cx, b, c, *cap, fill, None),
                    None => self.sub_done(cx, b, c, Some(&cap)),
                };
            }
            cache::finish(&mut cap, cx.ctx.wall_ms(cx.io.now()));
        }
        self.phase = Phase::Idle;
        b.paused = false;
        let close = ex.client_closes(b);
        self.recycle(ex);
        let more = !b.inbuf.is_empty();
        self.after_response(cx, b, c, close, more);
        if close {
            return;
        }
        if !b.paused {
            self.read_on(cx, b, c);
        }
    }

    /// Answers a request from the cache; a stale answer's refresh goes out on this
    /// connection once the client has its answer (nginx's background update does the same).
    /// `(keep, more_input)`: the connection stays open after it; more input follows.
    pub(super) fn hit(
        &mut self,
        cx: &mut Cx,
        b: &mut Base,
        c: ConnId,
        hit: Hit,
        (keep, more_input): (bool, bool),
    ) -> Next {
        let Hit {
            found,
            status,
            line,
            asked,
            refresh,
        } = hit;
        if write::found(cx, b, c, found, (status, &line), &asked).is_none() {
            return Next::Stop;
        }
        let next = self.after_response(cx, b, c, !keep, more_input);
        if let (Some((fill, up, head)), Phase::Idle) = (refresh, self.phase) {
            let cap = cache::filling(fill, false);
            self.subrequest(cx, b, c, up, head, cap);
            return Next::Hold;
        }
        next
    }

    /// A fill's exchange ended without its response going to the client: a background update
    /// (the client had its answer), or a response the cache answers for (a revalidation's
    /// 304, an upstream status or a failure, `failed`, that the stale copy stands in for).
    pub(super) fn cache_sub_done(
        &mut self,
        cx: &mut Cx,
        b: &mut Base,
        c: ConnId,
        mut cap: Capture,
        mut fill: Box<Fill>,
        failed: Option<u16>,
    ) {
        self.phase = Phase::Idle;
        b.paused = false;
        let now = cx.ctx.wall_ms(cx.io.now());
        if fill.mode == Mode::Background {
            if failed.is_none() {
                cache::settle(&mut cap, &mut fill, now);
            }
            drop(fill);
            return self.read_on(cx, b, c);
        }
        let close = !fill.asked.keep || b.eof;
        let at = (&*cx.ctx, cx.io.now());
        let Some(out) = b.tr.out_buf(cx.io, c) else {
            return;
        };
        let Some((status, w)) = cache::write_fill_answer(at, out, (&mut cap, &mut fill), failed)
        else {
            return self.fail(cx, b, c, failed.unwrap_or(502), false);
        };
        drop(fill);
        cx.ctx.log.status(cx.io, c, w, b);
        cx.ctx.log.cache_status(c, status);
        let more = !b.inbuf.is_empty();
        self.after_response(cx, b, c, close, more);
        if !close && !b.paused {
            self.read_on(cx, b, c);
        }
    }

    /// Everything queued to the upstream was written: a client paused for back-pressure
    /// reads again.
    fn upstream_flushed(&mut self, cx: &mut Cx, b: &mut Base, c: ConnId) {
        let resume = self.exchange.as_mut().is_some_and(|ex| {
            let was = ex.body_paused;
            ex.body_paused = false;
            was && ex.req_body.is_some()
        });
        if resume {
            b.paused = false;
            self.read_on(cx, b, c);
        }
    }

    /// The client's queue drained: an upstream paused for back-pressure reads again.
    pub(super) fn proxy_client_flushed(&mut self, cx: &mut Cx) {
        if let Some(ex) = &self.exchange {
            ex.resume_upstream(cx);
        }
    }

    /// The client closed its side while its request was being proxied.
    pub(super) fn proxy_client_eof(&mut self, cx: &mut Cx, _b: &mut Base, c: ConnId) {
        let body_missing = self.exchange.as_ref().is_some_and(|x| x.req_body.is_some());
        if body_missing {
            self.end_exchange(cx);
            cx.io.close(c);
        }
        // Otherwise the response is still delivered, then the connection closes.
    }

    pub(super) fn proxy_client_closed(&mut self, cx: &mut Cx) {
        self.end_exchange(cx);
    }

    /// The client's deadline passed while proxying.
    pub(super) fn proxy_client_timeout(&mut self, cx: &mut Cx, b: &mut Base, c: ConnId) {
        let in_body = self
            .exchange
            .as_ref()
            .is_some_and(|x| x.req_body.is_some() && !x.body_paused);
        if in_body {
            return self.abort_request(cx, b, c, 408);
        }
        // Waiting for the upstream: its read timeout decides.
        let at = cx.io.now() + cx.ctx.set.send_timeout;
        cx.ctx.set_deadline(cx.io, b, c, at);
    }
}
