//! The access stage of the request pipeline: the guards of a location (`crate::guard`) run
//! for a request of any protocol, and their verdict becomes a [`Step`]; with the request's
//! real client address, the error page of a refusal, the `auth_request` subrequest's head and
//! what its answer means, and malformed requests counted for escalation. The roles carry
//! out the steps (holding a request, sending the subrequest, writing the refusal).

use std::net::IpAddr;

use ringx_engine::ConnId;
use ringx_http::upstream::{write_request_head, Forward};
use ringx_http::{BodyKind, Method, Request};

use super::{RefusalLines, Step};
use crate::answer::fallback::{may_fall_back, NewUri};
use crate::answer::Page;
use crate::ctx::base::Base;
use crate::ctx::Cx;
use crate::guard::verify::Tag;
use crate::guard::{AuthAnswer, Input, Progress, Verdict};
use crate::response::{ConnHdr, HeadOut, Reply, Responder};
use crate::role::exchange::capture::Capture;
use crate::route::{ListenerKind, LocId, Routes};

/// The client's address for this request (after `real_ip_from`), and whether it is the
/// connection's own (not a PROXY header's or a forwarded one). Noted in `b` for the log.
pub fn client_ip(cx: &Cx, b: &mut Base, req: &Request) -> (Option<IpAddr>, bool) {
    let peer = b.addr.map(|a| a.ip().to_canonical());
    let client = match (&cx.ctx.routes.http_guard.real_ip, peer) {
        (Some(r), Some(p)) => Some(r.client(p, req)),
        _ => peer,
    };
    b.real_ip = client.filter(|c| Some(*c) != peer);
    (client, client == peer && !behind_proxy_protocol(cx, b))
}

fn behind_proxy_protocol(cx: &Cx, b: &Base) -> bool {
    matches!(
        cx.ctx.routes.listener_kind.get(b.listener as usize),
        Some(ListenerKind::Http {
            proxy_protocol: true
        })
    )
}

/// Runs the guard of location `at` for `req` (`uri`: its path after rewriting), on
/// connection `c` (`stream`: its HTTP/2 stream, 0 on HTTP/1: who waits for a verification
/// handed to the auth pool), with what was decided for it already (`progress`).
/// [`Step::Go`] lets it go on (`limit_conn` counts it while `progress.conn` holds its slot).
pub fn check(
    cx: &mut Cx,
    b: &mut Base,
    who: (ConnId, u32),
    req: &Request,
    uri: &str,
    at: LocId,
    progress: &mut Progress,
) -> Step {
    progress.touched = true;
    match verdict(cx, b, who, req, uri, at, progress) {
        Verdict::Pass => Step::Go(None),
        Verdict::Refuse { status, headers } => Step::Refuse {
            status,
            headers: RefusalLines::own(headers),
        },
        Verdict::Delay(d) => Step::WaitUntil(cx.io.now() + d),
        Verdict::Verify => Step::WaitVerify,
        Verdict::Ask => {
            let routes = &cx.ctx.routes;
            let g = routes.location(at).guard.as_deref();
            match g.and_then(|g| g.auth_request.as_ref()) {
                Some(a) => Step::Ask {
                    upstream: a.upstream,
                    head: auth_head(req, &a.uri, b),
                },
                // Asked for by a location without one (never the case): refused as an error.
                None => Step::Refuse {
                    status: 500,
                    headers: RefusalLines::default(),
                },
            }
        }
    }
}

/// The guard's own verdict.
fn verdict(
    cx: &mut Cx,
    b: &mut Base,
    (c, stream): (ConnId, u32),
    req: &Request,
    uri: &str,
    at: LocId,
    progress: &mut Progress,
) -> Verdict {
    let (client, own_address) = client_ip(cx, b, req);
    let ctx = &mut *cx.ctx;
    let Some(g) = ctx.routes.location(at).guard.as_deref() else {
        return Verdict::Pass;
    };
    let inp = Input {
        req,
        client,
        own_address,
        tls: b.tr.is_tls(),
        uri,
        now: cx.io.now(),
        tag: Tag {
            conn: c,
            gen: b.gen,
            stream,
        },
    };
    g.check(&inp, progress, &mut ctx.guard, &ctx.log.counters)
}

/// A refusal by the guard of a location, as its error page needs it.
pub struct Refusal<'a> {
    /// The location whose guard refused.
    pub at: LocId,
    pub status: u16,
    /// The refusal's header lines (`WWW-Authenticate`, `Retry-After`), CRLF-terminated.
    pub headers: &'a str,
    /// The request's redirects so far (by routing, and by error pages where it was refused
    /// at a fallback location).
    pub hops: u8,
    /// Its URI where routing changed it (a named location it is sent to gets it).
    pub new_uri: NewUri<'a>,
}

/// The location's (or server's) `error_page` for refusal `f` of `req`, written into `out`
/// with the refusal's header lines, as nginx sends a 401/403/429/503 of its access phase to
/// the error page configured for it. None: there is none for that status, or it cannot be
/// served (the plain refusal goes out). A page that proxies writes nothing: the reply carries
/// the fallback for the role to start.
#[cold]
#[inline(never)]
pub fn refusal_page<O: HeadOut + ?Sized>(
    routes: &Routes,
    r: Responder<'_>,
    out: &mut O,
    req: &Request,
    f: &Refusal<'_>,
    ch: ConnHdr,
) -> Option<Reply> {
    let (at, status) = (f.at, f.status);
    let server = routes.servers.get(at.server)?;
    let rw = server.locations.get(at.loc)?.rw.as_deref();
    let t = crate::rewrite::error_page(rw, status)?;
    let page = Page {
        r,
        server,
        si: at.server,
        ch,
        head_only: req.method == Method::Head,
        may_proxy: may_fall_back(req),
        extra: f.headers,
        guarded: false,
        hops: f.hops,
        recursive: crate::rewrite::recursive_pages(rw),
        new_uri: f.new_uri,
    };
    page.write(out, status, t, None)
}

/// What an `auth_request` subrequest's answer (None: none could be had) means.
pub fn auth_answer(capture: Option<&Capture>) -> AuthAnswer {
    match capture.filter(|x| x.complete) {
        Some(x) if (200..300).contains(&x.status) => AuthAnswer::Allow,
        Some(x) if x.status == 401 || x.status == 403 => {
            let mut headers = String::new();
            if x.status == 401 {
                for v in x.header_lines("www-authenticate") {
                    headers.push_str("WWW-Authenticate: ");
                    headers.push_str(&String::from_utf8_lossy(v));
                    headers.push_str("\r\n");
                }
            }
            AuthAnswer::Deny {
                status: x.status,
                headers,
            }
        }
        _ => AuthAnswer::Error,
    }
}

/// A request that could not be parsed: counted for `escalate_malformed` (400s only; the
/// limits' 413/414/431 are not malformed).
pub fn malformed(cx: &Cx, b: &Base, status: u16) {
    let Some(e) = cx.ctx.routes.http_guard.malformed else {
        return;
    };
    if status == 400 && !behind_proxy_protocol(cx, b) {
        if let Some(a) = b.addr {
            crate::guard::escalate::refused(a.ip(), &e, cx.io.now());
        }
    }
}

/// The head of an `auth_request` subrequest: a GET of `uri` with the client's fields (no
/// body), and where the original request went.
pub fn auth_head(req: &Request, uri: &str, b: &Base) -> Vec<u8> {
    let sub = Request {
        method: Method::Get,
        method_str: "GET",
        target: uri,
        path: uri,
        query: None,
        body: BodyKind::None,
        expect_continue: false,
        ..*req
    };
    let mut head = Vec::with_capacity(256 + req.head_len);
    write_request_head(
        &mut head,
        &sub,
        &Forward {
            client: b.addr.map(|a| a.ip()),
            proto: if b.tr.is_tls() { "https" } else { "http" },
            host: None,
            forwarded_headers: true,
            close: false,
            upgrade: None,
            tls_client: None,
        },
    );
    head.truncate(head.len() - 2);
    head.extend_from_slice(b"X-Original-URI: ");
    head.extend_from_slice(req.target.as_bytes());
    head.extend_from_slice(b"\r\nX-Original-Method: ");
    head.extend_from_slice(req.method_str.as_bytes());
    head.extend_from_slice(b"\r\n\r\n");
    head
}
