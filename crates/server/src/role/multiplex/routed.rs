//! A stream's request made from its decoded fields and routed: held to every check the
//! HTTP/1 parser makes (`pipeline::fields`), its client address taken from `real_ip_from`,
//! its log fields noted, and routed by its URI, or to the `error_page` location that
//! re-serves it. HTTP/2 does this for each stream's request; HTTP/3 will do the same.

use ringx_config::ops::LogFormat;
use ringx_h2proto::{Framing, RequestHead};
use ringx_http::Request;

use crate::answer::{ReqCtx, UnsizedBody};
use crate::ctx::base::Base;
use crate::ctx::Cx;
use crate::pipeline::access;
use crate::pipeline::fields::{make_request, HeaderList, MAX_HEADERS};
use crate::pipeline::pending::Rerouted;
use crate::pipeline::routing::{self, Route};
use crate::rewrite::vars::new_request_id;
use crate::role::multiplex::log::RequestLog;

/// How a stream's new request is framed (`end`: the stream ended with its head): no body,
/// a length, or data frames up to the stream's end. Err: the status to answer at once (405
/// for CONNECT, which no location serves; 413 for a length over `max_body`).
pub(crate) fn framing(head: &RequestHead, end: bool, max_body: u64) -> Result<Framing, u16> {
    if head.is_connect() {
        return Err(405);
    }
    let framing = match (end, head.content_length) {
        (true, _) => Framing::None,
        (false, Some(n)) => Framing::Length(n),
        (false, None) => Framing::Chunked,
    };
    match framing {
        Framing::Length(n) if n > max_body => Err(413),
        f => Ok(f),
    }
}

/// A request made and routed, and its context for the stages.
pub struct Routed<'h, 'a> {
    pub req: Request<'h, 'a>,
    pub route: Route<'a>,
    pub rq: ReqCtx,
}

/// Makes the request of fields `head` (framed by `framing`; `length` and `headers`: the
/// storage it borrows, on the caller's stack) and routes it: by its URI, or at
/// `fb`'s location where an `error_page` re-serves it. `log`: the stream's log record, which
/// takes the request's `Referer`, `User-Agent` (`first`: when the request is first looked
/// at) and its `$request_id` (a JSON log's, one however often it is looked at). Err: the
/// status to answer it with (400 and the like for a malformed request, 421 for a name this
/// connection's certificate does not serve, the error of a fallback whose routes a reload
/// replaced).
pub(crate) fn route_fields<'h, 'a>(
    cx: &Cx,
    b: &mut Base,
    (head, framing): (&'a RequestHead, Framing),
    (length, headers): (&'a mut [u8; 20], &'h mut HeaderList<'a>),
    (log, first): (Option<&mut RequestLog>, bool),
    fb: Option<&Rerouted>,
) -> Result<Routed<'h, 'a>, u16> {
    let limits = ringx_http::Limits {
        max_headers: cx.ctx.set.limits.max_headers.min(MAX_HEADERS),
        ..cx.ctx.set.limits
    };
    let req = make_request((head, framing), &limits, length, headers)?;
    let mut log = log;
    if let Some(l) = log.as_deref_mut().filter(|_| first) {
        l.referer
            .extend_from_slice(req.header("referer").unwrap_or_default());
        l.user_agent
            .extend_from_slice(req.header("user-agent").unwrap_or_default());
    }
    // The real client address (`real_ip_from`) is what rules, keys and `$remote_addr` see.
    if cx.ctx.routes.http_guard.real_ip.is_some() {
        access::client_ip(cx, b, &req);
    }
    let mut rq = ReqCtx::new(routing::conn_info(b));
    rq.unsized_body = UnsizedBody::Frames;
    if let Some(l) = log.filter(|_| cx.ctx.log.format() == Some(LogFormat::Json)) {
        // One id for the request however often it is looked at.
        let id = *l.request_id.get_or_insert_with(new_request_id);
        rq.request_id.set(Some(id));
    }
    let Some(f) = fb else {
        let conn = || rq.conn;
        let route = routing::route(
            &cx.ctx.routes,
            b.listener as usize,
            &req,
            (conn, &rq.request_id),
        );
        if routing::misdirected(&cx.ctx.routes, b, &route) {
            // The stream alone: the client retries it on a connection of its own (RFC 9113
            // §9.1.2), the connection's other streams go on.
            return Err(421);
        }
        return Ok(Routed { req, route, rq });
    };
    if !f.is_current(&cx.ctx.routes) {
        // A reload replaced the routes it was re-served by: its error, as over HTTP/1.
        return Err(f.fb.error);
    }
    let req = f.fb.request(&req);
    let route = routing::fallback_route(&f.fb, &req);
    Ok(Routed { req, route, rq })
}
