//! The HTTP/1 role re-serving a request at the proxying location an `error_page` names
//! (`answer/fallback.rs`), as nginx's internal redirect does: the location's own access
//! phase runs first (`limit_req`/`limit_conn` unless the request was already charged by
//! them, as nginx applies each once per request; then `access`, `auth_basic`,
//! `auth_request`), then its proxy cache, then the proxy.
//!
//! A request the guard or the cache makes wait keeps a copy of its head and body in the
//! connection's [`Pending`] ([`Http1::resume`] comes back here, not to the original routing).
//!
//! Also the other way in: a refusal of the access phase (`allow`/`deny`, `auth_basic`,
//! `auth_request`, `limit_req`, `limit_conn`) goes to the `error_page` configured for its
//! status, as in nginx ([`Http1::refused`]). A fallback's own refusal does too only where the
//! error page that sent it there is recursive (`recursive_error_pages`; `answer/fallback.rs`).

use ringx_engine::ConnId;
use ringx_http::{Method, Request, Version};

use super::{Http1, Next, Phase};
use crate::answer::fallback::{parse_saved, Fallback, MAX_SAVED_HEADERS};
use crate::answer::ReqCtx;
use crate::ctx::base::Base;
use crate::ctx::Cx;
use crate::pipeline::failure;
use crate::pipeline::pending::{Kept, Rerouted, Saved};
use crate::pipeline::routing;
use crate::pipeline::serve::{self as stages, Asked};
use crate::pipeline::Step;
use crate::response::{ConnHdr, ErrorPage};

/// Re-serves `req` (as it came, with `body`: all of its body, kept when it was proxied),
/// which failed with `fb.error`, at `fb`'s location. None: it cannot be proxied there (no
/// upstream state), and the caller answers. A redirect itself forgets what the failed
/// location's `auth_request` or cache decided first (`Progress::redirected`); a look again
/// after a wait keeps what the fallback's own stages decided.
pub(super) fn serve(
    h: &mut Http1,
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
    let progress = &mut h.pending.progress;
    let capture = match stages::serve(cx, b, (c, 0), &req2, (&route, &rq), progress, asked) {
        Step::Proxy(capture) => capture,
        // A location serving files behind a guard, which passed: its page.
        Step::Local | Step::Grpc | Step::Go(_) => {
            return fb.page.as_ref().map(|_| page(h, cx, b, c, &req2, fb, keep));
        }
        step => {
            let (how, rerouted) = ((keep, more_input), Some((req, body, fb)));
            return Some(h.carry_out(cx, b, c, (&req2, &route, rerouted), step, how));
        }
    };
    h.pending.fallback = Some(Box::new(Rerouted {
        fb: fb.clone(),
        routes: cx.ctx.routes.clone(),
    }));
    let next = h.try_proxy(cx, b, c, (&req2, &route, &rq), keep, capture);
    if next.is_none() {
        h.pending.fallback = None;
    }
    if let (Some(_), Some(body)) = (&next, body) {
        // The body goes to the fallback's upstream as if it arrived now.
        if h.proxy_body(cx, b, c, &body).is_none() {
            return Some(Next::Stop); // the exchange ended, and answered
        }
    }
    next
}

/// The page of a location serving files behind a guard, once the guard passed.
fn page(
    h: &mut Http1,
    cx: &mut Cx,
    b: &mut Base,
    c: ConnId,
    req: &Request,
    fb: &Fallback,
    keep: bool,
) -> Next {
    let more_input = !b.inbuf.is_empty();
    let ch = ConnHdr::new(req.version == Version::Http11, keep);
    let Some(out) = b.tr.out_buf(cx.io, c) else {
        return Next::Stop;
    };
    let r = failure::guarded_page(cx.ctx, out, fb, (ch, req.method == Method::Head));
    if let Some((f, off, len)) = r.file {
        b.tr.send_file(cx.io, c, f, off, len);
    }
    cx.ctx.log.status(cx.io, c, r.written, b);
    h.after_response(cx, b, c, !keep || r.close, more_input)
}

/// A request held on its way to a fallback location is looked at again (its delay passed,
/// its `auth_request` answered, the cache entry it waited for was filled).
pub(super) fn resume(h: &mut Http1, cx: &mut Cx, b: &mut Base, c: ConnId) {
    let (Some(kept), Some(rf)) = (h.pending.kept.take(), h.pending.fallback.take()) else {
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
    let mut storage =
        [const { std::mem::MaybeUninit::<httparse::Header>::uninit() }; MAX_SAVED_HEADERS];
    let req = rf
        .is_current(&cx.ctx.routes)
        .then(|| parse_saved(&head, &mut storage, &cx.ctx.set.limits))
        .flatten();
    let next = match &req {
        Some(req) => serve(h, cx, b, c, (req, body), &rf.fb, keep),
        None => None,
    };
    let next = match next {
        Some(n) => n,
        None => {
            // Cannot be proxied there (a reload replaced the routes meanwhile): the error.
            let (v11, head_only) = req.as_ref().map_or((true, false), |r| {
                (r.version == Version::Http11, r.method == Method::Head)
            });
            let Some(out) = b.tr.out_buf(cx.io, c) else {
                return;
            };
            let ch = ConnHdr::new(v11, keep);
            let w = cx
                .ctx
                .responder()
                .error(out, ErrorPage::new(rf.fb.error, ch, head_only));
            cx.ctx.log.status(cx.io, c, w, b);
            let more = !b.inbuf.is_empty();
            h.after_response(cx, b, c, !keep, more)
        }
    };
    if matches!(next, Next::Continue) && h.phase == Phase::Idle && !b.paused {
        // Answered here (a refusal, a cache hit): pipelined requests go on.
        h.process_buffered(cx, b, c);
    }
}
