//! The HTTP/1 role re-serving a request at the proxying location an `error_page` names
//! (`answer/fallback.rs`), as nginx's internal redirect does: the location's own access
//! phase runs first (`limit_req`/`limit_conn` unless the request was already charged by
//! them, as nginx applies each once per request; then `access`, `auth_basic`,
//! `auth_request`), then its proxy cache, then the proxy.
//!
//! A request the guard or the cache makes wait keeps a copy of its head in a [`Refall`]
//! ([`Http1::resume`] comes back here, not to the original routing).

use std::sync::Arc;

use ringx_engine::ConnId;
use ringx_http::{Method, Request, Version};

use super::local;
use super::{guard, Http1, Next, Phase};
use crate::answer::fallback::{parse_saved, save_head, Fallback, MAX_SAVED_HEADERS};
use crate::answer::ReqCtx;
use crate::guard::Verdict;
use crate::response::{ConnHdr, ErrorPage};
use crate::role::exchange::capture::Capture;
use crate::route::Routes;
use crate::zone::client::Base;
use crate::zone::ctx::Cx;

/// A request on its way to a fallback location, waiting for that location's guard (a delay,
/// the `auth_request` answer) or cache (another request's fill).
pub(crate) struct Refall {
    /// The request's head as it came (the fallback's form is made again from it).
    head: Vec<u8>,
    /// The routes it was routed by: a reload meanwhile leaves the indices meaningless.
    routes: Arc<Routes>,
    si: usize,
    fb: Fallback,
    keep: bool,
}

/// Re-serves `req` (as it came), which failed with `fb.error`, at `fb`'s location of server
/// `si`. None: it cannot be proxied there (no upstream state), and the caller answers.
/// `first`: this is the redirect itself, not a look again after a wait.
#[allow(clippy::too_many_arguments)]
pub(super) fn serve(
    h: &mut Http1,
    cx: &mut Cx,
    b: &mut Base,
    c: ConnId,
    req: &Request,
    si: usize,
    fb: &Fallback,
    keep: bool,
    first: bool,
) -> Option<Next> {
    if first {
        // What the failed location's `auth_request` or cache decided is not the fallback's;
        // what the limits charged stays (each applies once per request, as in nginx).
        h.progress.auth = None;
        h.progress.waiting = None;
    }
    let req2 = fb.request(req);
    let route = local::fallback_route(fb, si, &req2);
    let at = (si, fb.loc);
    let l = &cx.ctx.routes.servers[si].locations[fb.loc];
    let (guarded, cached) = (l.guard.is_some(), l.cache.is_some());
    let rq = ReqCtx::new(local::conn_info(b));
    let more_input = !b.inbuf.is_empty();
    if guarded {
        h.progress.touched = true;
        let uri = route.path.as_deref().unwrap_or("");
        match guard::check(cx, b, &req2, uri, at, &mut h.progress) {
            Verdict::Pass => {}
            Verdict::Refuse { status, headers } => {
                let Some((_, close)) =
                    guard::write_refusal(cx, b, c, &req2, status, &headers, keep)
                else {
                    return Some(Next::Stop);
                };
                let close = close || !keep;
                return Some(h.after_response(cx, b, c, close, more_input));
            }
            Verdict::Delay(d) => {
                wait(h, cx, req, si, fb, keep);
                let until = cx.io.now() + d;
                h.hold(cx, b, c, until);
                return Some(Next::Hold);
            }
            Verdict::Ask => {
                let g = cx.ctx.routes.servers[si].locations[fb.loc].guard.as_deref();
                let a = g.and_then(|g| g.auth_request.as_ref())?;
                let (upstream, head) = (a.upstream, guard::auth_head(&req2, &a.uri, b));
                wait(h, cx, req, si, fb, keep);
                h.subrequest(cx, b, c, upstream, head, Capture::subrequest());
                return Some(Next::Hold);
            }
        }
    }
    let mut capture = None;
    if cached {
        let asked_as = fb.status;
        match h.cache_step(cx, b, c, &req2, (&route, &rq), keep, more_input, asked_as) {
            Ok(cap) => capture = cap,
            Err(Next::Defer) => {
                // Held (`cache_step` set the wait): its head is kept here, not in the input.
                wait(h, cx, req, si, fb, keep);
                return Some(Next::Hold);
            }
            Err(next) => return Some(next),
        }
    }
    h.redirect = Some(fb.status);
    let next = h.try_proxy(cx, b, c, &req2, keep, &route, &rq, capture);
    if next.is_none() {
        h.redirect = None;
    }
    next
}

/// Keeps what the request needs to be looked at again at the fallback location.
fn wait(h: &mut Http1, cx: &Cx, req: &Request, si: usize, fb: &Fallback, keep: bool) {
    h.refall = Some(Box::new(Refall {
        head: save_head(req),
        routes: cx.ctx.routes.clone(),
        si,
        fb: fb.clone(),
        keep,
    }));
}

/// A request held on its way to a fallback location is looked at again (its delay passed,
/// its `auth_request` answered, the cache entry it waited for was filled).
pub(super) fn resume(h: &mut Http1, cx: &mut Cx, b: &mut Base, c: ConnId, rf: Box<Refall>) {
    let mut storage =
        [const { std::mem::MaybeUninit::<httparse::Header>::uninit() }; MAX_SAVED_HEADERS];
    let req = Arc::ptr_eq(&rf.routes, &cx.ctx.routes)
        .then(|| parse_saved(&rf.head, &mut storage, &cx.ctx.set.limits))
        .flatten();
    let next = match &req {
        Some(req) => serve(h, cx, b, c, req, rf.si, &rf.fb, rf.keep, false),
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
            let ch = ConnHdr::new(v11, rf.keep);
            let w = cx
                .ctx
                .responder()
                .error(out, ErrorPage::new(rf.fb.error, ch, head_only));
            cx.ctx.log.status(cx.io, c, w, b);
            let more = !b.inbuf.is_empty();
            h.after_response(cx, b, c, !rf.keep, more)
        }
    };
    if matches!(next, Next::Continue) && h.phase == Phase::Idle && !b.paused {
        // Answered here (a refusal, a cache hit): pipelined requests go on.
        h.process_buffered(cx, b, c);
    }
}
