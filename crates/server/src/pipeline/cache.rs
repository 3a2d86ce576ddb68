//! The cache stage of the request pipeline: the location's proxy cache (`crate::cache`)
//! looks the request up and its decision becomes a [`Step`] ([`step`]); with an answer from
//! the cache written, the capture a fill's exchange carries, and storing what it brought.
//! The roles carry out the steps (answering, proxying with the capture, holding the
//! request) and complete the fills (`role/http1/steps.rs`, `role/h2/serve.rs`, and the
//! background refreshes of `role/multiplex/refresh.rs`).

use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use ringx_http::Request;

use super::{added, Hit, Step};
use crate::answer::ReqCtx;
use crate::cache::fill::Asked;
use crate::cache::fill::Fill;
use crate::cache::loc::{count, Ctx, Decision};
use crate::cache::object::Object;
use crate::cache::Found;
use crate::ctx::base::Base;
use crate::ctx::{Cx, ZoneCtx};
use crate::guard::Progress;
use crate::pipeline::routing::Route;
use crate::response::{ConnHdr, FilePart, HeadOut, Written};
use crate::rewrite::Added;
use crate::role::exchange::capture::Capture;
use crate::role::proxy_start;
use crate::route::LocId;

/// What the cache of the location `route` reached does with `req` (`keep`: the client
/// connection stays open after the answer; `status_as`: the status an `error_page` tells
/// instead of the response's). [`Step::Go`]: proxy it with the capture; [`Step::Hit`];
/// [`Step::WaitUntil`] another request's fill (counted in `progress.waiting`).
pub fn step(
    cx: &mut Cx,
    b: &Base,
    req: &Request,
    (route, rq): (&Route<'_>, &ReqCtx),
    progress: &mut Progress,
    keep: bool,
    status_as: Option<u16>,
) -> Step {
    let Some(at) = route.at else {
        return Step::Go(None);
    };
    let uri = route.path.as_deref().unwrap_or("");
    progress.touched = true;
    let Some(d) = decide(cx, b, req, uri, at, keep, progress.waiting) else {
        return Step::Go(None);
    };
    match d {
        Decision::Bypass => Step::Go(Some(passing(cx, at, "BYPASS"))),
        Decision::Uncached => Step::Go(Some(passing(cx, at, "MISS"))),
        Decision::Fetch(mut fill) => {
            fill.asked.status_as = status_as;
            // For an answer from the cache after the fill (a revalidation, a stale copy).
            fill.asked.added = added::for_cache(&cx.ctx.routes, at, (req, route, rq));
            Step::Go(Some(filling(fill, true)))
        }
        Decision::Wait(after) => {
            let now = cx.io.now();
            let (since, looks) = progress.waiting.unwrap_or((now, 0));
            progress.waiting = Some((since, looks + 1));
            Step::WaitUntil(now + after)
        }
        Decision::Hit {
            found,
            status,
            update,
        } => {
            let cl = cx.ctx.routes.location(at).cache.as_deref();
            let line = cl.map_or_else(Vec::new, |cl| cl.status_line(status));
            let refresh = update.and_then(|f| {
                proxy_start::upstream_head(cx.ctx, b, req, route, rq, &f).map(|(u, h)| (f, u, h))
            });
            let mut asked = asked_now(req, keep);
            asked.status_as = status_as;
            asked.added = added::for_cache(&cx.ctx.routes, at, (req, route, rq));
            Step::Hit(Box::new(Hit {
                found,
                status,
                line,
                asked,
                refresh,
            }))
        }
    }
}

/// What the cache of location `at` does with `req`; None: the location has no cache.
pub fn decide(
    cx: &Cx,
    b: &Base,
    req: &Request,
    uri: &str,
    at: LocId,
    keep: bool,
    waiting: Option<(Instant, u32)>,
) -> Option<Decision> {
    let cl = cx.ctx.routes.location(at).cache.as_deref()?;
    let ctx = Ctx {
        client: b.real_ip.or(b.addr.map(|a| a.ip())),
        tls: b.tr.is_tls(),
        uri,
        keep,
        now: cx.io.now(),
        now_ms: cx.ctx.wall_ms(cx.io.now()),
        waiting,
    };
    Some(cl.decide(req, &ctx))
}

/// The capture of a request the cache passes by (counted, and its status on the response).
pub fn passing(cx: &Cx, at: LocId, status: &'static str) -> Capture {
    let cl = cx.ctx.routes.location(at).cache.as_deref();
    Capture {
        to_client: true,
        client: true,
        client_line: cl.map_or_else(Vec::new, |cl| cl.status_line(status)),
        client_status: status,
        ..Capture::default()
    }
}

/// The capture of a fill: the response goes to the client and is kept, up to the cache's
/// largest object.
pub fn filling(fill: Box<Fill>, to_client: bool) -> Capture {
    Capture {
        to_client,
        client: to_client,
        client_line: fill.status_line.clone(),
        client_status: fill.status,
        body_limit: fill.zone.max_object as usize,
        fill: Some(fill),
        ..Capture::default()
    }
}

/// Writes the answer from `found` for what `asked` asked into `out`, with cache status
/// `status` (`line`: its header line) and the location's `add_header` lines the status it is
/// sent with gets (`asked.added`); counted. Returns what was written and the file part
/// of the body (an entry kept on disk), which the caller sends after it.
pub fn write_found<O: HeadOut + ?Sized>(
    (ctx, now): (&ZoneCtx, Instant),
    out: &mut O,
    found: Found,
    (status, line): (&'static str, &[u8]),
    asked: &Asked,
) -> (Written, Option<FilePart>) {
    let (obj, file) = match found {
        Found::Mem(o) => (o, None),
        Found::Disk(o, f, off) => (o, Some((f, off))),
    };
    // A status told instead of the stored one leaves no 304 to make.
    let nm = asked.status_as.is_none()
        && asked
            .if_none_match
            .as_deref()
            .is_some_and(|v| obj.matches_etag(v));
    let ch = ConnHdr::new(asked.version11, asked.keep);
    let now = ctx.wall_ms(now);
    let body = if file.is_none() { obj.body.len() } else { 0 };
    // The location's `add_header` lines follow the cache status line.
    let sent = if nm {
        304
    } else {
        asked.status_as.unwrap_or(obj.status)
    };
    let added = asked.added.for_status(sent);
    let line: std::borrow::Cow<'_, [u8]> = if added.is_empty() {
        line.into()
    } else {
        [line, added.as_bytes()].concat().into()
    };
    out.body().reserve(obj.head.len() + line.len() + 64 + body);
    let w = write_object(
        &obj,
        out,
        now,
        &line,
        ch,
        (asked.head_only, asked.status_as),
        nm,
        file.is_some(),
    );
    count(&ctx.log.counters, status);
    let part = file
        .filter(|_| !asked.head_only && !nm && obj.body_len > 0)
        .map(|(f, off)| (Rc::new(f), off, obj.body_len));
    (w, part)
}

/// Writes the response for a hit into `out`: status line, the stored fields, `Age`, the
/// cache status line (`status_line`, may be empty), framing and connection; the body
/// unless `head_only` or `not_modified` (a 304 for the client's validator), and unless
/// the body is on disk (`body_follows`: the caller sends it). `status_as`: the status the
/// client is told instead of the stored one (an `error_page` without `=`).
#[allow(clippy::too_many_arguments)]
pub fn write_object<O: HeadOut + ?Sized>(
    obj: &Object,
    out: &mut O,
    now: u64,
    status_line: &[u8],
    ch: ConnHdr,
    (head_only, status_as): (bool, Option<u16>),
    not_modified: bool,
    body_follows: bool,
) -> Written {
    let before = out.mark();
    let status = if not_modified {
        304
    } else {
        status_as.unwrap_or(obj.status)
    };
    out.status(status, "");
    out.lines(&obj.head);
    let age = now.saturating_sub(obj.stored) / 1000;
    out.put(b"Age", ringx_http::decimal(age, &mut [0; 20]));
    out.lines(status_line);
    if status != 304 && status != 204 {
        out.length(obj.body_len);
    }
    out.end(ch);
    let head_len = (out.mark() - before) as u32;
    if !head_only && !not_modified && !body_follows {
        out.body().extend_from_slice(&obj.body);
    }
    Written { status, head_len }
}

/// What a request asked, for an answer written now.
pub fn asked_now(req: &Request, keep: bool) -> Asked {
    Asked {
        head_only: req.method == ringx_http::Method::Head,
        version11: req.version == ringx_http::Version::Http11,
        keep,
        fields: Vec::new(),
        if_none_match: req.header("if-none-match").map(<[u8]>::to_vec),
        status_as: None,
        added: Added::default(),
    }
}

/// A fill's response reached the client whole: stored if it may be.
pub fn finish(cap: &mut Capture, now: u64) {
    if let Some(mut fill) = cap.fill.take() {
        let whole = cap.complete && !cap.overflow;
        if let Some(built) = fill.object(&cap.head, &cap.body, now).filter(|_| whole) {
            fill.store(built);
        }
    }
}

/// A background update (or a fill turned into one) ended: the entry stored or refreshed
/// (a 304). Returns the object the client can be answered from, and its status: the new or
/// refreshed entry, else the stale copy.
pub fn settle(cap: &mut Capture, fill: &mut Fill, now: u64) -> Option<(Arc<Object>, &'static str)> {
    if cap.complete && cap.status == 304 {
        if let Some(built) = fill.refreshed(&cap.head, now) {
            return Some((fill.store(built), "REVALIDATED"));
        }
    } else if cap.complete && !cap.overflow && !fill.stale_for_status {
        if let Some(built) = fill.object(&cap.head, &cap.body, now) {
            return Some((fill.store(built), "MISS"));
        }
    }
    fill.stale.clone().map(|s| (s, "STALE"))
}

/// A fill's exchange ended without its response going to the client: a revalidation's 304
/// or an upstream status the stale copy stands in for ([`settle`]), or a failure (`failed`)
/// it stands in for. The object the client is answered from and its cache status; None:
/// the error.
pub fn answer_of_fill(
    cap: &mut Capture,
    fill: &mut Fill,
    failed: Option<u16>,
    now: u64,
) -> Option<(Arc<Object>, &'static str)> {
    match failed {
        None => settle(cap, fill, now),
        Some(st) => fill
            .stale_for(st, false, now)
            .cloned()
            .map(|o| (o, "STALE")),
    }
}

/// Writes into `out` the answer from the cache for a fill whose exchange ended without its
/// response going to the client ([`answer_of_fill`]: a revalidation's 304, a status or a
/// failure, `failed`, the stale copy stands in for). Returns its cache status and what was
/// written; None: there is none, the error goes out.
pub fn write_fill_answer<O: HeadOut + ?Sized>(
    (ctx, now): (&ZoneCtx, Instant),
    out: &mut O,
    (cap, fill): (&mut Capture, &mut Fill),
    failed: Option<u16>,
) -> Option<(&'static str, Written)> {
    let (obj, status) = answer_of_fill(cap, fill, failed, ctx.wall_ms(now))?;
    let line = fill.line(status);
    let found = Found::Mem(obj);
    let (w, _) = write_found((ctx, now), out, found, (status, &line), &fill.asked);
    Some((status, w))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj() -> Object {
        Object {
            key: b"k".to_vec().into(),
            status: 200,
            head: b"Content-Type: text/plain\r\nETag: W/\"v1\"\r\n"
                .to_vec()
                .into(),
            body: b"hello".to_vec().into(),
            body_len: 5,
            stored: 1_000_000,
            fresh_until: 1_060_000,
            swr_until: 1_060_000,
            sie_until: 1_060_000,
            vary: Vec::new(),
            marker: false,
            etag: Some("W/\"v1\"".into()),
            last_modified: None,
        }
    }

    #[test]
    fn a_hit_is_written_with_age_status_and_length() {
        let mut out = Vec::new();
        let w = write_object(
            &obj(),
            &mut out,
            1_003_000,
            b"X-Cache-Status: HIT\r\n",
            ConnHdr::Keep11,
            (false, None),
            false,
            false,
        );
        let text = String::from_utf8(out).unwrap();
        assert_eq!(
            text,
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nETag: W/\"v1\"\r\nAge: 3\r\n\
             X-Cache-Status: HIT\r\nContent-Length: 5\r\n\r\nhello"
        );
        assert_eq!(w.head_len as usize, text.len() - 5);
        let mut out = Vec::new();
        let w = write_object(
            &obj(),
            &mut out,
            1_003_000,
            b"",
            ConnHdr::Close,
            (false, None),
            true,
            false,
        );
        assert_eq!(w.status, 304);
        assert!(out.ends_with(b"Connection: close\r\n\r\n"));
    }
}
