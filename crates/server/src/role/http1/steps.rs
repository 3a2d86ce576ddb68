//! The HTTP/1 role carrying out what the pipeline decided for a request other than its
//! location's own answer: proxying it (the [`Proxying`](super::proxying::Proxying) slot
//! reports, this acts in the connection's framing), a request of the server's own
//! (`auth_request`, a cache fill or refresh) and the cache's answer when a fill ends, a
//! refusal and its `error_page`, a wait, and a proxied request that can have no response.
//!
//! Re-serving a request at the proxying location an `error_page` names (`answer/fallback.rs`)
//! is here too, as nginx's internal redirect does it: the location's own access phase runs
//! first (`limit_req`/`limit_conn` unless the request was already charged by them, as nginx
//! applies each once per request; then `access`, `auth_basic`, `auth_request`), then its
//! proxy cache, then the proxy. A request the guard or the cache makes wait keeps a copy of
//! its head and body in the connection's [`Pending`] ([`Http1::resume`] comes back here, not
//! to the original routing). A refusal of the access phase goes to the `error_page`
//! configured for its status, as in nginx ([`Http1::refused`]); a fallback's own refusal does
//! too only where the error page that sent it there is recursive (`recursive_error_pages`).

use ringx_engine::ConnId;
use ringx_http::{Method, Request, Version};

use super::proxying::{Fed, Finished};
use super::write::{self, FillEnd};
use super::{Http1, Next, Phase};
use crate::answer::fallback::{may_fall_back, parse_saved, save_head, Fallback};
use crate::answer::{PageCtx, ReqCtx};
use crate::cache::fill::Fill;
use crate::ctx::base::Base;
use crate::ctx::Cx;
use crate::pipeline::access::{self, Refusal};
use crate::pipeline::pending::{Kept, Rerouted, Saved};
use crate::pipeline::routing::{self, Route};
use crate::pipeline::serve::{self as stages, Asked};
use crate::pipeline::{failure, Step};
use crate::response::{ConnHdr, ErrorPage};
use crate::role::exchange::capture::Capture;
use crate::role::exchange::Outcome;
use crate::role::tunnel::Tunnel;
use crate::role::upstream::UpEvent;

/// A request re-served at an `error_page` location, as it came (with its body) and where.
type Redirected<'a> = Option<(&'a Request<'a, 'a>, Option<Vec<u8>>, &'a Fallback)>;

impl Http1 {
    /// Starts proxying if the request routes to a `proxy_pass` location; `capture`: what the
    /// cache keeps of the response (a fill), and the cache status it carries.
    #[inline(never)]
    pub(super) fn try_proxy(
        &mut self,
        cx: &mut Cx,
        b: &mut Base,
        c: ConnId,
        routed: (&Request, &Route<'_>, &ReqCtx),
        keep: bool,
        capture: Option<Capture>,
    ) -> Option<Next> {
        let how = (keep, capture);
        let has_body = self
            .proxying
            .start(cx, b, c, routed, how, &mut self.pending)?;
        self.cycle.phase = Phase::Proxy;
        self.send(cx, b, c);
        if !self.proxying.is_active() {
            // It ended at once (no server could be reached) and was answered: the input
            // after it goes on here, as the connection now is.
            return Some(match self.cycle.phase {
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
        match self.proxying.start_own(cx, b, c, (upstream, head), capture) {
            Ok(()) => {
                self.cycle.phase = Phase::Proxy;
                self.send(cx, b, c);
            }
            // No upstream state (a reload added the first upstream): as if it failed.
            Err(mut capture) => match capture.fill.take() {
                Some(fill) => self.cache_sub_done(cx, b, c, capture, fill, Some(502)),
                None => self.sub_done(cx, b, c, None),
            },
        }
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
        self.cycle.hold(cx, b, c, Some(now));
    }

    /// Hands the request to a server; answers 502 when none can be reached.
    fn send(&mut self, cx: &mut Cx, b: &mut Base, c: ConnId) {
        if !self.proxying.send(cx, b, c) {
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
        match self.proxying.feed(cx, b, c, input) {
            Fed::Took(n) => Some(n),
            Fed::Gone => None,
            Fed::Refused(status) => {
                self.abort_request(cx, b, c, status);
                None
            }
            Fed::GaveUp(n, status) => {
                // The body is all here now: the request falls back with it.
                self.give_up(cx, b, c, status, false);
                Some(n)
            }
        }
    }

    /// The request cannot go on (bad body framing, too large, the client's body timed out):
    /// answer and drop the upstream; a response already begun is cut instead.
    pub(super) fn abort_request(&mut self, cx: &mut Cx, b: &mut Base, c: ConnId, status: u16) {
        let started = self.proxying.started();
        self.proxying.end(cx);
        self.cycle.phase = Phase::Idle;
        if started {
            self.cycle.phase = Phase::Lingering;
            cx.io.close(c);
        } else {
            self.fail(cx, b, c, status, false);
        }
    }

    /// No response can be had: `status` (502, 504, or an upstream error intercepted) to the
    /// client, the location's error page for it if it has one. `event`: called for an
    /// upstream's event, not while the client's input is being processed (`send` and
    /// `proxy_body` run inside `process`, which goes on with the input itself: the
    /// connection closes after their failures, as it did before keep-alive was kept here).
    fn give_up(&mut self, cx: &mut Cx, b: &mut Base, c: ConnId, status: u16, event: bool) {
        if let Some(resume) = self.proxying.reads_rest_first(cx, &self.pending, status) {
            // The rest of the body is read (`proxy_body`), then the request falls back
            // here with it.
            if resume {
                b.paused = false;
                self.read_on(cx, b, c);
            }
            return;
        }
        let f = self.proxying.failed(cx, b);
        // The connection goes on where nothing of the request is left to read, as nginx
        // keeps it after a 502/504 or an intercepted error's page; nginx closes it after a
        // 400, 413, 414, 500 or 501 whatever page replaces them.
        let close = !event || matches!(status, 400 | 413 | 414 | 500 | 501) || f.client_closes;
        let ch = ConnHdr::new(f.v11, !close);
        if let Some(mut cap) = f.capture {
            self.pending.page = None;
            if let Some(fill) = cap.fill.take() {
                return self.cache_sub_done(cx, b, c, *cap, fill, Some(status));
            }
            if !cap.to_client {
                return self.sub_done(cx, b, c, None);
            }
        }
        self.cycle.phase = Phase::Idle;
        b.paused = false;
        if let Some(p) = self.pending.page.take() {
            if let Some(out) = b.tr.out_buf(cx.io, c) {
                if let Some(r) = p.write(cx.ctx.responder(), out, status, ch) {
                    if let Some(fb) = r.fallback {
                        // nginx does not keep the connection after a 500 (and the like) whatever
                        // page replaces it; nor does ringx after a failure met while the
                        // input is being processed (`event`).
                        let keep = f.keep && !close;
                        if self.fall_back_saved(cx, b, c, (&p, &fb), keep, f.body) {
                            return;
                        }
                        return self.fail_with(cx, b, c, status, f.head_only, &f.always);
                    }
                    write::sent(cx, b, c, r.written, r.file);
                    return self.failure_answered(cx, b, c, close || r.close);
                }
            }
        }
        if close {
            return self.fail_with(cx, b, c, status, f.head_only, &f.always);
        }
        let page = ErrorPage::new(status, ch, f.head_only).extra(&f.always);
        write::error(cx, b, c, page);
        self.failure_answered(cx, b, c, false)
    }

    /// A failed proxied request was answered (its page is queued): the connection closes,
    /// or goes on with the requests that came after it.
    fn failure_answered(&mut self, cx: &mut Cx, b: &mut Base, c: ConnId, close: bool) {
        if close {
            return self.close_after(cx, b, c);
        }
        let more = !b.inbuf.is_empty();
        if matches!(self.after_response(cx, b, c, false, more), Next::Continue) && !b.paused {
            self.read_on(cx, b, c);
        }
    }

    /// Re-serves request `req`, which failed with `fb.error` before it was proxied, at the
    /// proxying location an `error_page` names (`answer/fallback.rs`); the plain error page if it
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
        if let Some(next) = self.serve_fallback(cx, b, c, (req, None), fb, keep) {
            return next;
        }
        let ch = ConnHdr::new(req.version == Version::Http11, keep);
        let page = ErrorPage::new(fb.error, ch, req.method == Method::Head);
        if !write::error(cx, b, c, page) {
            return Next::Stop;
        }
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
        write::sent(cx, b, c, r.written, r.file);
        if has_body {
            self.close_after(cx, b, c);
            return Some(Next::Stop);
        }
        Some(self.after_response(cx, b, c, !keep || r.close, more_input))
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
        let Some(next) = self.serve_fallback(cx, b, c, (&req, body), fb, keep) else {
            return false;
        };
        if matches!(next, Next::Continue) && self.cycle.phase == Phase::Idle && !b.paused {
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
        let (outcome, resume) = self.proxying.event(cx, b, c, (u, ev))?;
        if resume {
            // Everything queued to the upstream was written: the client reads on.
            b.paused = false;
            self.read_on(cx, b, c);
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
                self.proxying.cut(cx, b, c);
                self.cycle.phase = Phase::Lingering;
                None
            }
            Outcome::Upgrade(u) => {
                self.proxying.end(cx);
                Some(Tunnel::upgrade(cx, b, c, u))
            }
        }
    }

    /// The response is complete: the connection goes on with the next request, or closes.
    fn response_done(&mut self, cx: &mut Cx, b: &mut Base, c: ConnId) {
        let Some(finished) = self.proxying.finish(cx, b) else {
            return;
        };
        self.pending.page = None;
        let close = match finished {
            Finished::Own(mut cap) => {
                return match cap.fill.take() {
                    Some(fill) => self.cache_sub_done(cx, b, c, *cap, fill, None),
                    None => self.sub_done(cx, b, c, Some(&cap)),
                };
            }
            Finished::Answered { close } => close,
        };
        self.cycle.phase = Phase::Idle;
        b.paused = false;
        let more = !b.inbuf.is_empty();
        self.after_response(cx, b, c, close, more);
        if close {
            return;
        }
        if !b.paused {
            self.read_on(cx, b, c);
        }
    }

    /// A fill's exchange ended without its response going to the client: a background update
    /// (the client had its answer), or a response the cache answers for (a revalidation's
    /// 304, an upstream status or a failure, `failed`, that the stale copy stands in for).
    pub(super) fn cache_sub_done(
        &mut self,
        cx: &mut Cx,
        b: &mut Base,
        c: ConnId,
        cap: Capture,
        fill: Box<Fill>,
        failed: Option<u16>,
    ) {
        self.cycle.phase = Phase::Idle;
        b.paused = false;
        let close = match write::fill_ended(cx, b, c, (cap, fill), failed) {
            FillEnd::Background => return self.read_on(cx, b, c),
            FillEnd::Closing => return,
            FillEnd::Failed(status) => return self.fail(cx, b, c, status, false),
            FillEnd::Answered(close) => close,
        };
        let more = !b.inbuf.is_empty();
        self.after_response(cx, b, c, close, more);
        if !close && !b.paused {
            self.read_on(cx, b, c);
        }
    }

    /// Carries out what the stages decided for a request that does not go on to its
    /// location's answer or proxy: a refusal (its error page, or the plain refusal), a wait,
    /// an `auth_request` subrequest, a cache hit. `(keep, more_input)`: the connection stays
    /// open after the answer; more input follows the request. `rerouted`: the request is
    /// re-served at an `error_page` location (`answer/fallback.rs`): as it came, with its body, and
    /// where; it is no longer in the input, so it is kept to wait.
    #[inline(never)]
    pub(super) fn carry_out(
        &mut self,
        cx: &mut Cx,
        b: &mut Base,
        c: ConnId,
        (req, route, rerouted): (&Request, &Route<'_>, Redirected<'_>),
        step: Step,
        (keep, more_input): (bool, bool),
    ) -> Next {
        let fb = rerouted.as_ref().map(|r| r.2);
        let waits = matches!(
            step,
            Step::WaitUntil(_) | Step::WaitVerify | Step::Ask { .. }
        );
        let waiting = match rerouted {
            Some((req, body, fb)) if waits => {
                self.pending
                    .wait_rerouted(save_head(req), body, (fb, &cx.ctx.routes), keep);
                Next::Hold
            }
            _ => Next::Defer,
        };
        match step {
            Step::Refuse { status, headers } => {
                let f = Refusal::of(route, fb, (status, &headers));
                if let Some(next) = f.and_then(|f| self.refused(cx, b, c, req, &f, keep)) {
                    return next;
                }
                let Some((_, close)) = write::refusal(cx, b, c, req, status, headers.plain(), keep)
                else {
                    return Next::Stop;
                };
                if close && fb.is_none() {
                    self.close_after(cx, b, c);
                    return Next::Stop;
                }
                self.after_response(cx, b, c, close || !keep, more_input)
            }
            Step::WaitUntil(until) => {
                self.cycle.hold(cx, b, c, Some(until));
                waiting
            }
            Step::WaitVerify => {
                self.cycle.hold(cx, b, c, None);
                waiting
            }
            Step::Ask { upstream, head } => {
                self.subrequest(cx, b, c, upstream, head, Capture::subrequest());
                waiting
            }
            Step::Hit(hit) => self.hit(cx, b, c, *hit, (keep, more_input)),
            // Steps that go on are the caller's.
            Step::Go(_) | Step::Proxy(_) | Step::Grpc | Step::Local => Next::Continue,
        }
    }

    /// Re-serves `req` (as it came, with `body`: all of its body, kept when it was proxied),
    /// which failed with `fb.error`, at `fb`'s location. None: it cannot be proxied there (no
    /// upstream state), and the caller answers. A redirect itself forgets what the failed
    /// location's `auth_request` or cache decided first (`Progress::redirected`); a look again
    /// after a wait keeps what the fallback's own stages decided.
    fn serve_fallback(
        &mut self,
        cx: &mut Cx,
        b: &mut Base,
        c: ConnId,
        (req, body): (&Request, Option<Vec<u8>>),
        fb: &Fallback,
        keep: bool,
    ) -> Option<Next> {
        let mut req2 = fb.request(req);
        if body.is_some() {
            req2.expect_continue = false; // the body is here already
        }
        let route = routing::fallback_route(fb, &req2);
        let rq = ReqCtx::new(routing::conn_info(b));
        let more_input = !b.inbuf.is_empty();
        let asked = Asked {
            keep,
            status_as: fb.status,
            grpc: false,
        };
        let progress = &mut self.pending.progress;
        let capture = match stages::serve(cx, b, (c, 0), &req2, (&route, &rq), progress, asked) {
            Step::Proxy(capture) => capture,
            // A location serving files behind a guard, which passed: its page.
            Step::Local | Step::Grpc | Step::Go(_) => {
                fb.page.as_ref()?;
                return Some(match write::guarded_page(cx, b, c, &req2, fb, keep) {
                    Some(close) => self.after_response(cx, b, c, close, more_input),
                    None => Next::Stop,
                });
            }
            step => {
                let (how, rerouted) = ((keep, more_input), Some((req, body, fb)));
                return Some(self.carry_out(cx, b, c, (&req2, &route, rerouted), step, how));
            }
        };
        self.pending.fallback = Some(Box::new(Rerouted {
            fb: fb.clone(),
            routes: cx.ctx.routes.clone(),
        }));
        let next = self.try_proxy(cx, b, c, (&req2, &route, &rq), keep, capture);
        if next.is_none() {
            self.pending.fallback = None;
        }
        if let (Some(_), Some(body)) = (&next, body) {
            // The body goes to the fallback's upstream as if it arrived now.
            if self.proxy_body(cx, b, c, &body).is_none() {
                return Some(Next::Stop); // the exchange ended, and answered
            }
        }
        next
    }

    /// A request held on its way to a fallback location is looked at again (its delay passed,
    /// its `auth_request` answered, the cache entry it waited for was filled).
    #[cold]
    #[inline(never)]
    pub(super) fn resume_fallback(&mut self, cx: &mut Cx, b: &mut Base, c: ConnId) {
        let (Some(kept), Some(rf)) = (self.pending.kept.take(), self.pending.fallback.take())
        else {
            return; // only a request on its way to a fallback keeps its head here
        };
        let Kept {
            request: Saved::Text { head, keep },
            mut body,
        } = *kept
        else {
            return;
        };
        let body = body.take_whole();
        let mut storage = failure::storage();
        let req = rf
            .is_current(&cx.ctx.routes)
            .then(|| parse_saved(&head, &mut storage, &cx.ctx.set.limits))
            .flatten();
        let next = match &req {
            Some(req) => self.serve_fallback(cx, b, c, (req, body), &rf.fb, keep),
            None => None,
        };
        let next = match next {
            Some(n) => n,
            None => {
                // Cannot be proxied there (a reload replaced the routes meanwhile): the error.
                let (v11, head_only) = req.as_ref().map_or((true, false), |r| {
                    (r.version == Version::Http11, r.method == Method::Head)
                });
                let page = ErrorPage::new(rf.fb.error, ConnHdr::new(v11, keep), head_only);
                if !write::error(cx, b, c, page) {
                    return;
                }
                let more = !b.inbuf.is_empty();
                self.after_response(cx, b, c, !keep, more)
            }
        };
        if matches!(next, Next::Continue) && self.cycle.phase == Phase::Idle && !b.paused {
            // Answered here (a refusal, a cache hit): pipelined requests go on.
            self.process_buffered(cx, b, c);
        }
    }
}
