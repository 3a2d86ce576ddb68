//! `add_header` on the answers the pipeline's stages make themselves, whatever protocol
//! carries them: the refusal of a location's guard (its `always` lines: nginx's headers
//! filter runs on every response of the location, its own 401/403/429/503 included) and an
//! answer from its proxy cache (the filter runs on a cached response as on any other). A
//! proxied response gets the location's lines from its `Deco` (`role/exchange/deco.rs`), a
//! local answer from `answer::Answer`; an `error_page` serving a refusal gets its own
//! location's, as nginx's internal redirect does.

use ringx_http::Request;

use super::routing::Route;
use crate::answer::ReqCtx;
use crate::rewrite::{AddHeaders, Added};
use crate::role::proxy_start::request_vars;
use crate::route::{LocId, Routes};

/// The `add_header` in force at location `at`: its own, or the server's it inherits.
fn of(routes: &Routes, at: LocId) -> Option<&AddHeaders> {
    routes.location(at).rw.as_deref()?.add_header.as_deref()
}

/// The lines location `at` adds to its response with `status` to `req` (routed by `route`):
/// for a refusal, `always` ones only. Empty where it adds none.
pub fn for_status(
    routes: &Routes,
    at: LocId,
    (req, route, rq): (&Request, &Route<'_>, &ReqCtx),
    status: u16,
) -> String {
    let mut out = String::new();
    if let Some(a) = of(routes, at) {
        let v = a
            .has_vars()
            .then(|| request_vars(routes, route.server, req, route, rq));
        a.write(status, v.as_ref(), &mut out);
    }
    out
}

/// The lines location `at` adds to `req`'s answer from the cache, expanded now (the status
/// is known when the entry is written, which may be after a fill, the request gone).
pub fn for_cache(
    routes: &Routes,
    at: LocId,
    (req, route, rq): (&Request, &Route<'_>, &ReqCtx),
) -> Added {
    match of(routes, at) {
        Some(a) => {
            let v = a
                .has_vars()
                .then(|| request_vars(routes, route.server, req, route, rq));
            a.added(v.as_ref())
        }
        None => Added::default(),
    }
}
