//! The stages in order, for a routed request of any protocol: the guard of its location
//! (nginx's access phase), then, where the location proxies, its cache; then where the
//! request goes: the proxy, a gRPC call, or the local answer. One [`Step`] comes back for
//! the role to carry out in its framing; a request that waits comes back here when it is
//! looked at again, with what was decided for it kept in its `Progress`.

use ringx_engine::ConnId;
use ringx_http::Request;

use super::{access, added, cache, routing::Route, Step};
use crate::answer::ReqCtx;
use crate::ctx::base::Base;
use crate::ctx::Cx;
use crate::guard::Progress;
use crate::role::proxy_start;

/// What the role tells the stages about the request beyond its head.
#[derive(Clone, Copy, Default)]
pub struct Asked {
    /// The client connection stays open after the answer (HTTP/1's keep-alive; always on
    /// HTTP/2).
    pub keep: bool,
    /// The status an `error_page` tells instead of the response's (a request re-served at
    /// a fallback location).
    pub status_as: Option<u16>,
    /// The role carries gRPC calls (HTTP/2, HTTP/3): a `grpc://` location is a
    /// [`Step::Grpc`] and not cached. Elsewhere it is proxied as any location.
    pub grpc: bool,
}

/// Runs the stages for `req`, routed by `route` (`who`: its connection, and its HTTP/2
/// stream or 0), with what was decided for it so far (`progress`). Never [`Step::Go`]: a
/// request that goes on is a [`Step::Proxy`], [`Step::Grpc`] or [`Step::Local`].
pub fn serve(
    cx: &mut Cx,
    b: &mut Base,
    who: (ConnId, u32),
    req: &Request,
    (route, rq): (&Route<'_>, &ReqCtx),
    progress: &mut Progress,
    asked: Asked,
) -> Step {
    let Some(at) = route.at else {
        return Step::Local;
    };
    let l = cx.ctx.routes.location(at);
    let (guarded, cached) = (l.guard.is_some(), l.cache.is_some());
    if guarded {
        let uri = route.path.as_deref().unwrap_or("");
        match access::check(cx, b, who, req, uri, at, progress) {
            // The access stage makes no other step.
            Step::Go(_) | Step::Hit(_) => {}
            Step::Refuse {
                status,
                mut headers,
            } => {
                // The location's `add_header ... always` lines, for the plain refusal.
                let routes = &cx.ctx.routes;
                headers.add(&added::for_status(routes, at, (req, route, rq), status));
                return Step::Refuse { status, headers };
            }
            step => return step,
        }
    }
    if asked.grpc && proxy_start::is_grpc(&cx.ctx.routes, route) {
        return Step::Grpc;
    }
    if !proxy_start::is_proxied(&cx.ctx.routes, route) {
        return Step::Local;
    }
    if !cached {
        return Step::Proxy(None);
    }
    match cache::step(
        cx,
        b,
        req,
        (route, rq),
        progress,
        asked.keep,
        asked.status_as,
    ) {
        Step::Go(capture) => Step::Proxy(capture),
        step => step,
    }
}
