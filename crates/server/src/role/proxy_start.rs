//! A request routed to a `proxy_pass` location, made ready for its [`Exchange`]: the head
//! the upstream gets (the target a `proxy_pass` URI part or a rewrite gives, headers set and
//! dropped, `X-Forwarded-*`), the upstream and hash key to dial, the decoration of the
//! response (`add_header`, compression, intercepted errors) and the location's error pages.
//!
//! The HTTP/1 and HTTP/2 roles both start their exchanges here, so a location proxies the
//! same way whichever protocol the client speaks; each role then sets the framing fields
//! that are its own (the request body, the response's version, keep-alive).

use std::sync::Arc;

use ringx_h2proto::response::FieldList;
use ringx_http::upstream::{
    is_client_cert_field, upgrade_request, write_request_head_edit, write_request_head_target,
    Forward, RequestEdit,
};
use ringx_http::{Method, Request};

use crate::answer::fallback::save_head;
use crate::answer::{PageCtx, ReqCtx};
use crate::cache::fill::Fill;
use crate::compress::Accept;
use crate::ctx::base::Base;
use crate::ctx::ZoneCtx;
use crate::pipeline::routing::Route;
use crate::rewrite::vars::{escape_args, escape_path, Vars};
use crate::role::exchange::deco::Deco;
use crate::role::exchange::Exchange;
use crate::route::{Action, HostMode, Loc, ProxyLoc, Routes};
use crate::upstream::dial::Dial;
use crate::upstream::{HashKey, UpstreamDef};

/// The `proxy_pass` location `route` sends the request to, if it does: none when a redirect
/// or an error was decided while routing (those are answered locally).
fn proxy_loc<'r>(routes: &'r Routes, route: &Route<'_>) -> Option<&'r ProxyLoc> {
    let at = route.at?;
    if route.ext.as_ref().is_some_and(|e| e.early.is_some()) {
        return None;
    }
    match &routes.location(at).action {
        Action::Proxy(p) => Some(p),
        _ => None,
    }
}

/// Whether `route` sends the request to a gRPC upstream (`grpc://`, `grpcs://`).
pub fn is_grpc(routes: &Routes, route: &Route<'_>) -> bool {
    proxy_loc(routes, route).is_some_and(|p| p.grpc)
}

/// Whether `route` sends the request to an upstream: a `proxy_pass` location, and no
/// redirect or error decided while routing (those are answered locally).
pub fn is_proxied(routes: &Routes, route: &Route<'_>) -> bool {
    let Some(at) = route.at else {
        return false;
    };
    route.ext.as_ref().is_none_or(|e| e.early.is_none())
        && matches!(routes.location(at).action, Action::Proxy(_))
}

/// Fills `ex` for `req` (from the client `b`, routed by `route`): its head for the upstream,
/// its dial, `host_upstream`, decoration, `idempotent` and `head_request`. `upgrade`: the
/// protocol the request asks to switch to (HTTP/1.1 `Upgrade`); `fill`: the cache fill the
/// response goes to, whose head drops the client's validators and ranges. The other fields are the
/// caller's. Returns the location's error pages for a failure to reach the upstream (None:
/// it has none); None at all: the request is not proxied (see [`is_proxied`]) or the zone
/// has no upstreams.
pub fn prepare(
    ctx: &ZoneCtx,
    b: &Base,
    (req, route, rq): (&Request, &Route<'_>, &ReqCtx),
    ex: &mut Exchange,
    upgrade: Option<&[u8]>,
    fill: Option<&Fill>,
) -> Option<Option<Box<PageCtx>>> {
    if !is_proxied(&ctx.routes, route) || is_grpc(&ctx.routes, route) {
        return None;
    }
    let at = route.at?;
    let si = at.server;
    let (pools, gen) = ctx.current_pools()?;
    let location = ctx.routes.location(at);
    let Action::Proxy(loc) = &location.action else {
        return None;
    };
    let def = &pools.defs.list[loc.upstream];
    // Made only where a header template or `add_header` reads them.
    let vars = || request_vars(&ctx.routes, si, req, route, rq);
    let set_host = forward_head(
        &mut ex.head,
        (req, vars),
        (location, loc, def),
        route,
        b,
        (upgrade, fill),
    );
    ex.deco = decoration(&ctx.routes, location, loc, req, vars);
    let page = location
        .rw
        .as_ref()
        .and_then(|rw| rw.error_pages.as_ref())
        .map(|pages| {
            Box::new(PageCtx {
                routes: ctx.routes.clone(),
                at,
                head_only: req.method == Method::Head,
                // Also where the pages are recursive: a missing page's 404 may lead on to
                // a location that proxies.
                head: (pages.proxies() || crate::rewrite::recursive_pages(location.rw.as_deref()))
                    .then(|| save_head(req)),
                // The URI changes of routing count toward the limit of redirects.
                hops: route.sent().0,
                uri: crate::answer::fallback::owned(route.new_uri()),
            })
        });
    let key = match &def.hash_key {
        _ if def.maglev.is_none() => None,
        HashKey::Client => b.addr.map(|a| a.ip().to_string().into_bytes()),
        HashKey::Uri => Some(req.target.as_bytes().to_vec()),
        HashKey::Header(h) => req.header(h).map(<[u8]>::to_vec),
    };
    let tried = std::mem::take(&mut ex.dial.tried);
    ex.dial = Dial::new(gen, loc.upstream, def.retries, key, tried);
    ex.host_upstream = matches!(loc.host, HostMode::Upstream) && !set_host;
    ex.idempotent = matches!(
        req.method,
        Method::Get | Method::Head | Method::Options | Method::Put | Method::Delete
    ) || req.method_str == "TRACE";
    ex.head_request = req.method == Method::Head;
    Some(page)
}

/// A gRPC call made ready for its upstream: where it goes, its request head as HTTP/2
/// fields, and the decoration of its response.
pub struct GrpcStart {
    /// The upstream state's generation and the upstream's index in it.
    pub gen: u32,
    pub upstream: usize,
    /// The balancer's hash key (`balance = "hash"`).
    pub key: Option<Vec<u8>>,
    /// The pseudo-headers, then the regular fields.
    pub fields: FieldList,
    pub deco: Option<Box<Deco>>,
}

/// Prepares a call for `req` (routed by `route` to a `grpc://` location): the same target,
/// Host, `proxy_set_header`, `X-Forwarded-*` and `add_header` rules as an HTTP request has,
/// written as HTTP/2 fields. None: not a gRPC location, or no upstreams.
pub fn prepare_grpc(
    ctx: &ZoneCtx,
    b: &Base,
    req: &Request,
    route: &Route<'_>,
    rq: &ReqCtx,
) -> Option<GrpcStart> {
    let loc = proxy_loc(&ctx.routes, route).filter(|p| p.grpc)?;
    let at = route.at?;
    let si = at.server;
    let (pools, gen) = ctx.current_pools()?;
    let location = ctx.routes.location(at);
    let def = &pools.defs.list[loc.upstream];
    let vars = request_vars(&ctx.routes, si, req, route, rq);
    let mut added = Vec::new();
    let mut set_host = None;
    if let Some(e) = &loc.edit {
        e.set_lines(&vars, &mut added);
        set_host = e.host.as_ref().map(|t| vars.expand(t));
    }
    let authority: &[u8] = match (&set_host, &loc.host) {
        (Some(h), _) => h.as_bytes(),
        (None, HostMode::Pass) => req.host.unwrap_or_default(),
        (None, HostMode::Upstream) => def.servers[0].name.as_bytes(),
        (None, HostMode::Fixed(h)) => h.as_bytes(),
    };
    let target = proxy_target(loc, location, route, req);
    let path = target.as_deref().unwrap_or(req.target);
    let mut f = FieldList::default();
    f.push(b":method", req.method_str.as_bytes());
    let scheme: &[u8] = if def.tls.is_some() { b"https" } else { b"http" };
    f.push(b":scheme", scheme);
    f.push(b":path", path.as_bytes());
    f.push(b":authority", authority);
    let drop = loc.edit.as_ref().map_or(&[][..], |e| &e.drop[..]);
    let dropped = |n: &str| drop.iter().any(|d| n.eq_ignore_ascii_case(d));
    let mut xff: Option<&[u8]> = None;
    let mut lower = Vec::with_capacity(64);
    for h in req.headers.iter() {
        let n = h.name;
        // Host is :authority; the body is framed by DATA; the proxy's own fields are
        // replaced below (as for HTTP/1.1 upstreams).
        let own = ["host", "transfer-encoding", "content-length", "connection"];
        if own.iter().any(|o| n.eq_ignore_ascii_case(o)) || dropped(n) || is_client_cert_field(n) {
            continue; // client-certificate fields: only the proxy writes them (below)
        }
        if loc.forwarded_headers {
            if n.eq_ignore_ascii_case("x-forwarded-for") {
                xff = Some(h.value);
                continue;
            }
            if n.eq_ignore_ascii_case("x-real-ip") || n.eq_ignore_ascii_case("x-forwarded-proto") {
                continue;
            }
        }
        lower.clear();
        lower.extend(n.bytes().map(|c| c.to_ascii_lowercase()));
        f.push(&lower, h.value);
    }
    if let (true, Some(ip)) = (loc.forwarded_headers, b.addr.map(|a| a.ip())) {
        let proto = if b.tr.is_tls() { "https" } else { "http" };
        if !dropped("x-forwarded-for") {
            let v = match xff.filter(|v| !v.is_empty()) {
                Some(prev) => format!("{}, {ip}", String::from_utf8_lossy(prev)),
                None => ip.to_string(),
            };
            f.push(b"x-forwarded-for", v.as_bytes());
        }
        if !dropped("x-real-ip") {
            f.push(b"x-real-ip", ip.to_string().as_bytes());
        }
        if !dropped("x-forwarded-proto") {
            f.push(b"x-forwarded-proto", proto.as_bytes());
        }
        // As the HTTP/1.1 writer does: what the handshake verified, never what the client
        // says (the subject is printable ASCII, `crate::tls::printable`).
        match b.tr.tls_info().filter(|i| i.client_auth) {
            None => {}
            Some(i) => match i.client_dn.as_deref() {
                None => f.push(b"x-ssl-client-verify", b"NONE"),
                Some(dn) => {
                    f.push(b"x-ssl-client-verify", b"SUCCESS");
                    f.push(b"x-ssl-client-s-dn", dn.as_bytes());
                }
            },
        }
    }
    for line in added.split(|&c| c == b'\n').filter(|l| !l.is_empty()) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if let Some(i) = line.iter().position(|&c| c == b':') {
            lower.clear();
            lower.extend(line[..i].iter().map(u8::to_ascii_lowercase));
            f.push(&lower, line[i + 1..].trim_ascii());
        }
    }
    let key = match &def.hash_key {
        _ if def.maglev.is_none() => None,
        HashKey::Client => b.addr.map(|a| a.ip().to_string().into_bytes()),
        HashKey::Uri => Some(req.target.as_bytes().to_vec()),
        HashKey::Header(h) => req.header(h).map(<[u8]>::to_vec),
    };
    // No compression, no intercepted errors: a gRPC response passes as it is.
    let deco = decoration(&ctx.routes, location, loc, req, || {
        request_vars(&ctx.routes, si, req, route, rq)
    })
    .map(|mut d| {
        d.compress = None;
        d.intercept = None;
        d
    });
    Some(GrpcStart {
        gen,
        upstream: loc.upstream,
        key,
        fields: f,
        deco,
    })
}

/// The request-target sent upstream when it is not the client's: with a `proxy_pass` URI part,
/// the location's prefix replaced by it (nginx's rule); after a rewrite, the rewritten path.
/// Both escaped again, the query (rewritten or not) after them.
#[inline]
fn proxy_target(p: &ProxyLoc, loc: &Loc, route: &Route<'_>, req: &Request) -> Option<String> {
    if p.uri.is_none() && route.ext.is_none() {
        return None; // the client's target as it is: one test in the common case
    }
    proxy_target_edited(p, loc, route, req)
}

fn proxy_target_edited(
    p: &ProxyLoc,
    loc: &Loc,
    route: &Route<'_>,
    req: &Request,
) -> Option<String> {
    let ext = route.ext.as_deref();
    let changed = ext.is_some_and(|e| e.changed);
    let broke = ext.is_some_and(|e| e.broke);
    let path = route.path.as_deref()?;
    if p.uri.is_none() && !changed {
        return None;
    }
    let mut t = String::with_capacity(path.len() + 32);
    match &p.uri {
        Some(u) if !broke => {
            t.push_str(u);
            let rest = path.strip_prefix(loc.path.as_str()).unwrap_or(path);
            escape_path(rest, &mut t);
        }
        _ => escape_path(path, &mut t),
    }
    let args = match ext {
        Some(e) => e.args.as_deref(),
        None => req.query,
    };
    if let Some(a) = args {
        t.push('?');
        escape_args(a, &mut t);
    }
    Some(t)
}

/// The decoration of a proxied response: `add_header` lines expanded now (the request is gone
/// when the response comes), what the client accepts when the response may be compressed, and
/// the error pages that replace upstream errors.
fn decoration<'v>(
    routes: &Arc<Routes>,
    location: &Loc,
    p: &ProxyLoc,
    req: &Request,
    vars: impl Fn() -> Vars<'v>,
) -> Option<Box<Deco>> {
    let rw = location.rw.as_deref();
    let add = rw.and_then(|rw| rw.add_header.as_ref());
    let compress = routes
        .compress
        .as_ref()
        .filter(|pol| location.compress && !pol.codecs.is_empty())
        .map(|pol| (pol.clone(), Accept::of(req)));
    let intercept = p
        .edit
        .as_ref()
        .filter(|e| e.intercept)
        .and(rw.and_then(|rw| rw.error_pages.clone()));
    if add.is_none() && compress.is_none() && intercept.is_none() && p.edit.is_none() {
        return None;
    }
    let (add_ok, add_always) = add.map_or((String::new(), String::new()), |a| {
        let vars = a.has_vars().then(vars);
        a.expand_split(vars.as_ref())
    });
    Some(Box::new(Deco {
        add_ok,
        add_always,
        edit: p.edit.clone(),
        compress,
        intercept,
        relay: None,
        status_as: None,
    }))
}

/// The variables of a request routed to server `si` (for `proxy_set_header`, `add_header` and
/// the like).
pub fn request_vars<'a>(
    routes: &'a Routes,
    si: usize,
    req: &'a Request<'a, 'a>,
    route: &'a Route<'_>,
    rq: &'a ReqCtx,
) -> Vars<'a> {
    Vars {
        req,
        uri: route.path.as_deref().unwrap_or(req.path),
        args: match &route.ext {
            Some(e) => e.args.as_deref(),
            None => req.query,
        },
        caps: route.ext.as_ref().and_then(|e| e.caps.as_ref()),
        conn: &rq.conn,
        server_name: &routes.servers[si].name,
        request_id: &rq.request_id,
    }
}

/// The head of the request as forwarded to location `loc`'s upstream `def`
/// (`proxy_set_header`, the `proxy_pass` URI, the Host); a cache fill's without the client's
/// validators and ranges, with the cache's validators when it revalidates; `upgrade`: the
/// protocol the request asks to switch to; `vars`: the request's variables, made only where a
/// template reads them. Returns whether `proxy_set_header` set the Host.
fn forward_head<'v>(
    head: &mut Vec<u8>,
    (req, vars): (&Request, impl Fn() -> Vars<'v>),
    (location, loc, def): (&Loc, &ProxyLoc, &UpstreamDef),
    route: &Route<'_>,
    b: &Base,
    (upgrade, fill): (Option<&[u8]>, Option<&Fill>),
) -> bool {
    let target = proxy_target(loc, location, route, req);
    let mut forward = Forward {
        client: b.addr.map(|a| a.ip()),
        proto: if b.tr.is_tls() { "https" } else { "http" },
        host: None,
        forwarded_headers: loc.forwarded_headers,
        close: false,
        upgrade,
        tls_client: b
            .tr
            .tls_info()
            .filter(|i| i.client_auth)
            .map(|i| i.client_dn.as_deref()),
    };
    head.clear();
    head.reserve(256 + req.head_len);
    if loc.edit.is_none() && fill.is_none() {
        // No `proxy_set_header`, hidden field or cache fill: nothing to gather, and the
        // writer compiled without the edits' per-field tests.
        forward.host = upstream_host(None, loc, def);
        write_request_head_target(head, req, &forward, target.as_deref());
        return false;
    }
    let mut added = Vec::new();
    let mut set_host = None;
    if let Some(e) = &loc.edit {
        let vars = vars();
        e.set_lines(&vars, &mut added);
        set_host = e.host.as_ref().map(|t| vars.expand(t));
    }
    let configured = loc.edit.as_ref().map_or(&[][..], |e| &e.drop[..]);
    let mut drop = std::borrow::Cow::Borrowed(configured);
    if let Some(f) = fill {
        drop.to_mut()
            .extend(crate::cache::fill::FILL_DROP.iter().map(|n| n.to_string()));
        f.validators(&mut added);
    }
    forward.host = upstream_host(set_host.as_deref(), loc, def);
    write_request_head_edit(
        head,
        req,
        &forward,
        &RequestEdit {
            target: target.as_deref(),
            drop: &drop,
            add: &added,
        },
    );
    set_host.is_some()
}

/// The Host sent upstream: `proxy_set_header`'s (`set`), else as `proxy_host` says (None: the
/// client's).
fn upstream_host<'a>(
    set: Option<&'a str>,
    loc: &'a ProxyLoc,
    def: &'a UpstreamDef,
) -> Option<&'a str> {
    match (set, &loc.host) {
        (Some(h), _) => Some(h),
        (None, HostMode::Pass) => None,
        (None, HostMode::Upstream) => Some(def.servers[0].name.as_str()),
        (None, HostMode::Fixed(h)) => Some(h.as_str()),
    }
}

/// The upstream of the request's location and its head for a background cache update.
pub fn upstream_head(
    ctx: &ZoneCtx,
    b: &Base,
    req: &Request,
    route: &Route<'_>,
    rq: &ReqCtx,
    fill: &Fill,
) -> Option<(usize, Vec<u8>)> {
    let at = route.at?;
    let si = at.server;
    let location = ctx.routes.location(at);
    let Action::Proxy(loc) = &location.action else {
        return None;
    };
    let (pools, _) = ctx.current_pools()?;
    let def = &pools.defs.list[loc.upstream];
    let vars = || request_vars(&ctx.routes, si, req, route, rq);
    let mut head = Vec::new();
    let upgrade = upgrade_request(req);
    forward_head(
        &mut head,
        (req, vars),
        (location, loc, def),
        route,
        b,
        (upgrade, Some(fill)),
    );
    Some((loc.upstream, head))
}
