//! The routing stage of the request pipeline, and requests answered by the zone itself:
//! routing a request to its server and location (through `rewrite::flow` where the server
//! rewrites), what is refused before that (a bad path, a body over the limit, a misdirected
//! request), and writing the response of `return`, static-file and missing locations through
//! [`Answer`] and the response writer.

use std::borrow::Cow;
use std::cell::Cell;

use ringx_http::{Method, Request};

use crate::answer::fallback::Fallback;
use crate::answer::{Answer, ReqCtx};
use crate::response::{ConnHdr, ErrorPage, HeadOut, Reply, Responder};
use crate::rewrite::flow::{self, Early, RouteExt};
use crate::rewrite::vars::ConnInfo;
use crate::route::{Action, Canned, LocId, Routes};

/// A request routed: its cleaned path (None: it cannot be normalised), its server and
/// location, and what rewriting found (None where the server does not rewrite).
pub struct Route<'r> {
    pub path: Option<Cow<'r, str>>,
    pub server: usize,
    /// Its location (None: no location matches, or the path could not be normalised).
    pub at: Option<LocId>,
    pub ext: Option<Box<RouteExt>>,
}

impl Route<'_> {
    /// The URI routing changed the request's to (a rewrite, a `try_files` fallback, an error
    /// page's URI): its decoded path and query (`RouteExt::now`). None: the request's own.
    pub fn new_uri(&self) -> crate::answer::fallback::NewUri<'_> {
        self.ext.as_ref()?.new_uri(self.path.as_deref()?)
    }

    /// What an error page sending the request on needs of its routing: the URI changes so far
    /// (they count toward the limit of redirects, as in nginx) and [`Route::now`].
    pub fn sent(&self) -> (u8, crate::answer::fallback::NewUri<'_>) {
        (self.ext.as_ref().map_or(0, |e| e.changes), self.new_uri())
    }
}

/// Routes a request: its server by Host, then its location, through the server's rewriting
/// when it has any (which reads the connection, `conn`, and the `$request_id`).
pub fn route<'r>(
    routes: &Routes,
    listener: usize,
    req: &Request<'_, 'r>,
    (conn, request_id): (impl FnOnce() -> ConnInfo, &Cell<Option<[u8; 32]>>),
) -> Route<'r> {
    let si = routes.server_index(listener, || req.host_name());
    if routes.acme_http01 {
        if let Some(token) = req.path.strip_prefix(ringx_acme::HTTP01_PREFIX) {
            return acme_route(si, req.path, token);
        }
    }
    let Some(path) = clean_path(req.path) else {
        return Route {
            path: None,
            server: si,
            at: None,
            ext: None,
        };
    };
    let server = &routes.servers[si];
    if server.full_route() {
        let conn = conn();
        let cx = flow::Ctx {
            req,
            conn: &conn,
            server_name: &server.name,
            request_id,
        };
        let r = flow::route(routes, si, path, &cx);
        return Route {
            path: r.path,
            server: si,
            at: r.at,
            ext: r.ext,
        };
    }
    if server.slash_redirect(&path).is_some() {
        let ext = slash_redirect(server, req, &path, conn, request_id);
        return Route {
            path: Some(path),
            server: si,
            at: None,
            ext: Some(Box::new(ext)),
        };
    }
    let at = server
        .location_index(&path)
        .map(|loc| LocId { server: si, loc });
    Route {
        path: Some(path),
        server: si,
        at,
        ext: None,
    }
}

/// An ACME http-01 request: no location (so no guard, cache or upstream), and its answer
/// decided now, from the tokens the ACME thread issued.
#[cold]
fn acme_route<'r>(si: usize, path: &'r str, token: &str) -> Route<'r> {
    Route {
        path: Some(Cow::Borrowed(path)),
        server: si,
        at: None,
        ext: Some(Box::new(RouteExt {
            early: Some(Early::Acme(ringx_acme::global().http01(token))),
            ..RouteExt::default()
        })),
    }
}

/// The answer to an http-01 request: the key authorization (`text/plain`, RFC 8555 §8.3), or
/// a plain 404 that no `error_page` re-serves.
#[cold]
fn acme_answer<O: HeadOut + ?Sized>(
    r: Responder<'_>,
    out: &mut O,
    answer: Option<&str>,
    ch: ConnHdr,
    head_only: bool,
) -> Reply {
    let Some(body) = answer else {
        return Reply::bytes(r.error(out, ErrorPage::new(404, ch, head_only)));
    };
    let w = r.head(
        out,
        200,
        "Content-Type: text/plain\r\n",
        body.len() as u64,
        ch,
    );
    if !head_only {
        out.body().extend_from_slice(body.as_bytes());
    }
    Reply::bytes(w)
}

/// nginx's 301 for a proxied directory requested without its slash, in a server that does
/// not rewrite (`flow::route` decides it for those that do): no location is chosen, so none
/// of the protected location's steps run before the client comes back with the slash.
#[cold]
fn slash_redirect(
    server: &crate::route::VServer,
    req: &Request<'_, '_>,
    path: &str,
    conn: impl FnOnce() -> ConnInfo,
    request_id: &Cell<Option<[u8; 32]>>,
) -> RouteExt {
    let conn = conn();
    let cx = flow::Ctx {
        req,
        conn: &conn,
        server_name: &server.name,
        request_id,
    };
    RouteExt {
        args: req.query.map(str::to_string),
        early: Some(flow::slash_answer(path, req.query, &cx)),
        ..RouteExt::default()
    }
}

/// The status an HTTP/1 request is refused with before any of its location's steps, and the
/// connection closed after it: a declared body over `client_max_body_size` (413), `CONNECT`
/// (405: ringx is no forward proxy), a misdirected request (421, [`misdirected`]).
pub fn refused(
    routes: &Routes,
    max_body: u64,
    b: &crate::ctx::base::Base,
    req: &Request,
    route: &Route<'_>,
) -> Option<u16> {
    if matches!(req.body, ringx_http::BodyKind::Length(n) if n > max_body) {
        return Some(413);
    }
    if req.method == Method::Connect {
        return Some(405);
    }
    misdirected(routes, b, route).then_some(421)
}

/// Whether the request routed by `route` came on a TLS connection whose handshake used
/// another server's settings in a way that matters (`Routes::misdirected`): it gets 421.
/// Logged at info, with nginx's words, so an operator can tell a probe from a client bug.
pub fn misdirected(routes: &Routes, b: &crate::ctx::base::Base, route: &Route<'_>) -> bool {
    let Some(t) = b.tr.tls_info() else {
        return false;
    };
    let refuse = routes.misdirected(t.server, route.server, t.h2);
    if refuse {
        tracing::info!(
            client = ?b.addr,
            sni = t.sni.as_deref().unwrap_or("-"),
            server = routes.servers[route.server].name.as_str(),
            "421: the client requested a server name different from the one negotiated \
             (that server verifies client certificates, or does not offer HTTP/2)"
        );
    }
    refuse
}

/// A request routed to the location an `error_page` re-serves it at
/// (`answer/fallback.rs`): a named location keeps its path and target; a URI target is the
/// path and query the request now has, sent upstream as such.
pub fn fallback_route<'r>(fb: &Fallback, req: &Request<'_, 'r>) -> Route<'r> {
    match &fb.uri {
        None => Route {
            path: clean_path(req.path),
            server: fb.at.server,
            at: Some(fb.at),
            ext: None,
        },
        Some((path, args)) => Route {
            path: Some(Cow::Owned(path.clone())),
            server: fb.at.server,
            at: Some(fb.at),
            ext: Some(Box::new(RouteExt {
                args: args.clone(),
                changed: true,
                moved: true,
                ..RouteExt::default()
            })),
        },
    }
}

/// The fixed `return` of a request routed to a location with nothing else to do: no
/// rewriting, added headers or error pages (`rw`), no guard or cache, no compressed variant to
/// choose. Such a request is answered without gathering anything more about it.
#[inline]
pub fn plain_return<'a>(routes: &'a Routes, route: &Route<'_>) -> Option<&'a Canned> {
    let l = routes.location(route.at?);
    match &l.action {
        Action::Return(c)
            if route.ext.is_none()
                && l.rw.is_none()
                && l.guard.is_none()
                && l.cache.is_none()
                && c.variants.is_empty() =>
        {
            Some(c)
        }
        _ => None,
    }
}

/// Writes the response of a request the zone answers itself into `out`.
pub fn respond<O: HeadOut + ?Sized>(
    routes: &Routes,
    r: Responder<'_>,
    out: &mut O,
    req: &Request,
    route: &Route<'_>,
    ch: ConnHdr,
    rq: &ReqCtx,
) -> Reply {
    let head_only = req.method == Method::Head;
    if req.path == "*" {
        // OPTIONS * (asterisk-form): what the server supports.
        let allow = "Allow: GET, HEAD, POST, OPTIONS\r\n";
        return Reply::bytes(r.head(out, 200, allow, 0, ch));
    }
    let Some(path) = &route.path else {
        let w = r.error(out, ErrorPage::closing(400).head_only(head_only));
        return Reply {
            close: true,
            ..Reply::bytes(w)
        };
    };
    if let Some(Early::Acme(answer)) = route.ext.as_ref().and_then(|e| e.early.as_ref()) {
        return acme_answer(r, out, answer.as_deref(), ch, head_only);
    }
    let server = &routes.servers[route.server];
    let loc = route.at.map(|at| routes.location(at));
    if let (Some(l), None) = (loc, &route.ext) {
        if let Action::Return(c) = &l.action {
            // The common fixed `return`: no rewriting, added headers or error pages here
            // (`rw`), no compressed variant to choose. Written without gathering the rest.
            if l.rw.is_none() && c.variants.is_empty() {
                return Reply::bytes(r.canned(out, c, ch, head_only));
            }
        }
    }
    let a = Answer {
        r,
        routes,
        server,
        si: route.server,
        loc,
        req,
        path,
        ext: route.ext.as_deref(),
        rq,
        ch,
        head_only,
    };
    match route.ext.as_ref().and_then(|e| e.early.as_ref()) {
        Some(Early::Redirect { status, location }) => return a.redirect(out, *status, location),
        Some(Early::Status(s)) => return a.error(out, *s, ""),
        Some(Early::Acme(_)) | None => {}
    }
    match loc.map(|l| &l.action) {
        Some(Action::Return(canned)) => a.canned(out, canned),
        Some(Action::ReturnT(t)) => a.return_t(out, t),
        Some(Action::Files(root)) => a.files(out, root, path),
        // gRPC exists only over HTTP/2 and HTTP/3: an HTTP/1.x request to a `grpc://`
        // location is answered here (`proxy_start::prepare` takes it for no exchange).
        Some(Action::Proxy(p)) if p.grpc => a.error(out, 505, ""),
        Some(Action::Proxy(_)) => unreachable!("proxied requests do not reach the local responder"),
        Some(Action::None) | None => a.error(out, 404, ""),
    }
}

/// The JSON access log carries every request's id: made before the request is routed, so
/// that the one its headers send (`proxy_set_header`, `add_header`) is the one logged.
#[inline(never)]
pub fn json_request_id(
    cx: &mut crate::ctx::Cx,
    c: ringx_engine::ConnId,
    request_id: &Cell<Option<[u8; 32]>>,
) {
    let id = crate::rewrite::vars::new_request_id();
    request_id.set(Some(id));
    cx.ctx.log.request_id(c, id);
}

/// What a request's variables read of its connection: the client's address after
/// `real_ip_from`, the local one, whether it is TLS.
pub fn conn_info(b: &crate::ctx::base::Base) -> ConnInfo {
    ConnInfo {
        client: match b.real_ip {
            None => b.addr,
            Some(ip) => Some(std::net::SocketAddr::new(
                ip,
                b.addr.map_or(0, |a| a.port()),
            )),
        },
        local: b.local,
        tls: b.tr.is_tls(),
    }
}

/// Percent-decodes and normalises a request path; borrows it when it is already clean. None:
/// it cannot be normalised (it climbs above the root, or decodes to something invalid).
pub fn clean_path(raw: &str) -> Option<Cow<'_, str>> {
    if is_clean(raw.as_bytes()) {
        return Some(Cow::Borrowed(raw));
    }
    ringx_http::normalize_path(raw).ok().map(Cow::Owned)
}

/// Whether a path needs no normalisation: it starts with '/' and holds no '%', NUL, "//" or
/// "/." (one pass; this runs for every request).
fn is_clean(raw: &[u8]) -> bool {
    if raw.first() != Some(&b'/') {
        return false;
    }
    let mut prev = 0u8;
    for &b in raw {
        match b {
            b'%' | 0 => return false,
            b'/' | b'.' if prev == b'/' => return false,
            _ => {}
        }
        prev = b;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::{clean_path, is_clean};
    use std::borrow::Cow;

    #[test]
    fn clean_paths_are_borrowed() {
        for p in ["/", "/r64", "/a/b.c/d", "/a.b/c..d", "/x-y_z~"] {
            assert!(is_clean(p.as_bytes()), "{p}");
            assert!(matches!(clean_path(p), Some(Cow::Borrowed(_))), "{p}");
        }
    }

    #[test]
    fn paths_needing_work_are_not_clean() {
        for p in [
            "", "r64", "//a", "/a//b", "/./a", "/a/../b", "/a/.", "/%41", "/a\0b",
        ] {
            assert!(!is_clean(p.as_bytes()), "{p:?}");
        }
        assert_eq!(clean_path("/a/../b").unwrap(), "/b");
        assert_eq!(clean_path("/%61").unwrap(), "/a");
    }
}
