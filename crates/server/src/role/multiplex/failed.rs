//! What a stream's request gets in place of its location's answer or its upstream's
//! response: the page for a refusal of the location's guard, the page for a proxied request
//! that can have no response, the cache's answer for a fill that ended without reaching the
//! client; or, where an `error_page` names a proxying location, the request made again to be
//! re-served there. Written once for the multiplexed protocols (HTTP/2 and HTTP/3), which
//! only carry out the [`Instead`].

use ringx_http::{BodyKind, Request};

use crate::answer::fallback::Fallback;
use crate::answer::PageCtx;
use crate::ctx::Cx;
use crate::pipeline::access::{self, Refusal};
use crate::pipeline::pending::Pending;
use crate::pipeline::routing::Route;
use crate::pipeline::{cache, failure, RefusalLines};
use crate::response::{ConnHdr, ErrorPage, Fields, FilePart};
use crate::role::exchange::capture::Capture;
use crate::role::multiplex::proxied::Proxied;

/// What a stream answers with instead.
pub enum Instead {
    /// This response: its head and body, and the rest of the body from a file.
    Respond(Fields, Option<FilePart>),
    /// The request, made again for the proxying location an `error_page` re-serves it at,
    /// to be served as a request that was looked at before (`Pending::rerouted`).
    Again(Box<Pending>),
}

/// A refusal `(status, headers)` of the guard of the location `route` reached by `req` (`fb`:
/// the fallback that re-serves the request there): the error page for it (for a
/// fallback's own refusal only where the page that sent it there is recursive), which may
/// send the request on to a proxying location, else the plain refusal. `head_only`: the
/// request was HEAD.
pub fn refused(
    cx: &Cx,
    (req, route, fb): (&Request, &Route<'_>, Option<&Fallback>),
    (status, headers): (u16, &RefusalLines),
    head_only: bool,
) -> Instead {
    let mut resp = Fields::new();
    let r = Refusal::of(route, fb, (status, headers)).and_then(|f| {
        let r = cx.ctx.responder();
        access::refusal_page(&cx.ctx.routes, r, &mut resp, req, &f, ConnHdr::Keep11)
    });
    match r {
        Some(r) => match r.fallback {
            Some(f) => Instead::Again(Pending::rerouted(req, None, &f, &cx.ctx.routes)),
            None => Instead::Respond(resp, r.file),
        },
        None => {
            let page = ErrorPage::new(status, ConnHdr::Keep11, head_only);
            cx.ctx
                .responder()
                .error(&mut resp, page.extra(headers.plain()));
            Instead::Respond(resp, None)
        }
    }
}

/// A proxied request that can have no response (`proxy`: its exchange, if it started):
/// `status` (502, 504, or an upstream error intercepted), as the location's `error_page`
/// (`page`) says if it has one for it, else the error page with the location's
/// `add_header ... always` lines. An error page that re-serves the request at a proxying
/// location takes it again as it came, with its body where it all arrived with a length and
/// was kept.
pub(crate) fn gave_up(
    cx: &Cx,
    proxy: Option<&Proxied>,
    (status, page): (u16, Option<&PageCtx>),
    head_only: bool,
) -> Instead {
    let mut resp = Fields::new();
    if let Some(r) =
        page.and_then(|p| p.write(cx.ctx.responder(), &mut resp, status, ConnHdr::Keep11))
    {
        let (Some(fb), Some(p)) = (r.fallback, page) else {
            return Instead::Respond(resp, r.file);
        };
        let mut storage = failure::storage();
        let saved = failure::saved_request(cx, p, &mut storage);
        let kept = |req: &Request| {
            let replay = proxy.and_then(|x| x.ex.replay.as_ref());
            match req.body {
                BodyKind::Length(n) => replay.filter(|r| r.len() as u64 == n).cloned(),
                _ => None,
            }
        };
        let again = saved.as_ref().and_then(|r| failure::body_again(r, kept(r)));
        if let (Some(req), Some(body)) = (saved, again) {
            return Instead::Again(Pending::rerouted(&req, body, &fb, &cx.ctx.routes));
        }
    }
    let always = proxy
        .and_then(|p| p.ex.deco.as_ref())
        .map_or("", |d| d.add_always.as_str());
    let page = ErrorPage::new(status, ConnHdr::Keep11, head_only).extra(always);
    cx.ctx.responder().error(&mut resp, page);
    Instead::Respond(resp, None)
}

/// The cache's answer where a fill's exchange (`cap`) ended without its response going to
/// the client (`failed`: the status it failed with): a revalidation's 304, or a status or
/// failure the stale copy stands in for; with the cache status for the log. None: the cache
/// has no answer.
pub fn fill_answer(
    cx: &Cx,
    cap: Option<Box<Capture>>,
    failed: Option<u16>,
) -> Option<(Fields, &'static str)> {
    let mut resp = Fields::new();
    let mut cap = cap?;
    let mut fill = cap.fill.take()?;
    let at = (&*cx.ctx, cx.io.now());
    let (status, _) = cache::write_fill_answer(at, &mut resp, (&mut cap, &mut fill), failed)?;
    Some((resp, status))
}
