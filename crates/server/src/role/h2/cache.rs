//! The proxy cache (`crate::cache`) for HTTP/2 streams, deciding as for an HTTP/1 request
//! (`role/http1/cached.rs`) and sharing its entries: a hit is answered from the entry (its
//! `Age`, the cache status field, a 304 for a matching `If-None-Match`, a body kept on disk
//! sent from the file); a miss is proxied with the capture that fills the entry; a request
//! for an entry another request is filling waits (`wait.rs`) and looks again; a stale
//! entry stands in when the upstream fails, answers a revalidation's 304, and is refreshed
//! in the background after a stale answer (`stale-while-revalidate`), by an exchange the
//! connection owns beside its streams ([`Background`]), and the zone once the connection has
//! gone: a client that leaves after its stale answer does not cancel the refresh.

use std::collections::HashMap;
use std::rc::Rc;
use std::time::Instant;

use ringx_engine::ConnId;
use ringx_http::Request;

use super::proxy::Proxied;
use super::stream::H2Stream;
use crate::answer::ReqCtx;
use crate::cache::fill::{Asked, Fill};
use crate::cache::loc::{count, Decision};
use crate::cache::Found;
use crate::ctx::base::Base;
use crate::ctx::Cx;
use crate::guard::Progress;
use crate::response::{ConnHdr, FilePart};
use crate::role::exchange::capture::Capture;
use crate::role::exchange::Outcome;
use crate::role::http1::cached;
use crate::role::http1::local::Route;
use crate::role::proxy_start;
use crate::role::upstream::UpEvent;

/// What the cache of a stream's location does with its request.
pub(super) enum CacheStep {
    /// Proxy it, with this capture (the fill, or the cache status it passes with).
    Go(Option<Capture>),
    /// Answered from the cache: this response (and its body on disk), and the background
    /// update to send after it (a stale answer's refresh: the fill, its upstream and head).
    Hit(
        Vec<u8>,
        Option<FilePart>,
        Option<(Box<Fill>, usize, Vec<u8>)>,
    ),
    /// Another request fills the entry: look again at this time.
    Wait(Instant),
}

/// The cache's decision for stream `s`'s request, routed to a location with a cache.
pub(super) fn step(
    cx: &mut Cx,
    b: &mut Base,
    s: &mut H2Stream,
    req: &Request,
    (route, rq): (&Route<'_>, &ReqCtx),
    progress: &mut Progress,
    status_as: Option<u16>,
) -> CacheStep {
    let Some(at) = route.at else {
        return CacheStep::Go(None);
    };
    let uri = route.path.as_deref().unwrap_or("");
    progress.touched = true;
    let Some(d) = cached::decide(cx, b, req, uri, at, true, progress.waiting) else {
        return CacheStep::Go(None);
    };
    match d {
        Decision::Bypass => CacheStep::Go(Some(cached::passing(cx, at, "BYPASS"))),
        Decision::Uncached => CacheStep::Go(Some(cached::passing(cx, at, "MISS"))),
        Decision::Fetch(mut fill) => {
            fill.asked.status_as = status_as;
            CacheStep::Go(Some(cached::filling(fill, true)))
        }
        Decision::Wait(after) => {
            let now = cx.io.now();
            let (since, looks) = progress.waiting.unwrap_or((now, 0));
            progress.waiting = Some((since, looks + 1));
            CacheStep::Wait(now + after)
        }
        Decision::Hit {
            found,
            status,
            update,
        } => {
            let cl = cx.ctx.routes.servers[at.0].locations[at.1].cache.as_deref();
            let line = cl.map_or_else(Vec::new, |cl| cl.status_line(status));
            let update = update.and_then(|f| {
                proxy_start::upstream_head(cx.ctx, b, req, route, rq, &f).map(|(u, h)| (f, u, h))
            });
            let mut asked = cached::asked_now(req, true);
            asked.status_as = status_as;
            let (resp, file) = found_response(cx, s, found, status, &line, &asked);
            CacheStep::Hit(resp, file, update)
        }
    }
}

/// A fill's exchange for stream `s` ended without its response going to the client (a
/// revalidation's 304, or an upstream status the stale copy stands in for; `failed`: it
/// could not be had): the response from the cache, or `Err` with the status to answer.
pub(super) fn answer_from_fill(
    cx: &mut Cx,
    s: &mut H2Stream,
    mut cap: Box<Capture>,
    failed: Option<u16>,
) -> Result<Vec<u8>, u16> {
    let status = failed.unwrap_or(502);
    let Some(mut fill) = cap.fill.take() else {
        return Err(status);
    };
    let now = cx.ctx.wall_ms(cx.io.now());
    let answer = match failed {
        None => cached::settle(&mut cap, &mut fill, now),
        Some(st) => fill
            .stale_for(st, false, now)
            .cloned()
            .map(|o| (o, "STALE")),
    };
    let (obj, cache_status) = answer.ok_or(status)?;
    let line = fill.line(cache_status);
    let (resp, _) = found_response(cx, s, Found::Mem(obj), cache_status, &line, &fill.asked);
    Ok(resp)
}

/// A fill's exchange for stream `s` failed with `status` before any response: the stale
/// copy's response, if the cache may serve it for that.
pub(super) fn stale_answer(
    cx: &mut Cx,
    s: &mut H2Stream,
    fill: &Fill,
    status: u16,
) -> Option<Vec<u8>> {
    let now = cx.ctx.wall_ms(cx.io.now());
    let obj = fill.stale_for(status, false, now).cloned()?;
    let line = fill.line("STALE");
    Some(found_response(cx, s, Found::Mem(obj), "STALE", &line, &fill.asked).0)
}

/// Background updates of cache entries (a stale answer's refresh), by their upstream
/// connection, each with the client connection it was sent for. Owned by that connection
/// beside its streams while it lives; when it closes, the zone adopts what is left
/// ([`Background::adopt`]), so the update still ends in the cache (nginx finishes its
/// background update whatever the client does): otherwise the entry would stay stale and
/// its next request would send the refresh again.
#[derive(Default)]
pub struct Background(HashMap<ConnId, (ConnId, Box<Proxied>)>);

impl Background {
    /// Sends the update (`head` to `upstream` for `fill`). When it cannot be sent, the fill
    /// is dropped: the stale copy stays, and a later request updates it.
    pub(super) fn start(
        &mut self,
        cx: &mut Cx,
        b: &Base,
        c: ConnId,
        (fill, upstream, head): (Box<Fill>, usize, Vec<u8>),
    ) {
        let cap = cached::filling(fill, false);
        if let Some(p) = Proxied::sub(cx, b, c, upstream, head, cap) {
            if let Some(u) = p.ex.up {
                self.0.insert(u, (c, p));
            }
        }
    }

    /// Whether upstream connection `u` carries an update.
    pub fn has(&self, u: ConnId) -> bool {
        self.0.contains_key(&u)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Takes over `other`'s updates (a closed connection's).
    pub fn adopt(&mut self, other: Background) {
        self.0.extend(other.0);
    }

    /// An event on the upstream connection `u` of an update: when it ends, the entry is
    /// stored or refreshed (or, failed, the stale copy stays).
    pub fn event(&mut self, cx: &mut Cx, u: ConnId, ev: UpEvent) {
        let Some((c, mut p)) = self.0.remove(&u) else {
            return;
        };
        let (outcome, _) = p.event(cx, c, u, ev);
        match outcome {
            // A retry may have moved it to another connection.
            Outcome::Pending => {
                let at = p.ex.up.unwrap_or(u);
                self.0.insert(at, (c, p));
            }
            Outcome::Done => {
                let now = cx.ctx.wall_ms(cx.io.now());
                if let Some(mut cap) = p.ex.capture.take() {
                    if let Some(mut fill) = cap.fill.take() {
                        cached::settle(&mut cap, &mut fill, now);
                    }
                }
            }
            _ => p.detach(cx),
        }
    }
}

/// The HTTP/1.1 response for what `asked` asked from entry `found`, with cache status
/// `status` (`line`: its header line); the body's file part when it is kept on disk.
/// Counted, and noted for the stream's log line.
fn found_response(
    cx: &mut Cx,
    s: &mut H2Stream,
    found: Found,
    status: &'static str,
    line: &[u8],
    asked: &Asked,
) -> (Vec<u8>, Option<FilePart>) {
    let (obj, file) = match found {
        Found::Mem(o) => (o, None),
        Found::Disk(o, f, off) => (o, Some((f, off))),
    };
    let nm = asked.status_as.is_none()
        && asked
            .if_none_match
            .as_deref()
            .is_some_and(|v| obj.matches_etag(v));
    let now = cx.ctx.wall_ms(cx.io.now());
    let body = if file.is_none() { obj.body.len() } else { 0 };
    let mut out = Vec::with_capacity(obj.head.len() + line.len() + 64 + body);
    cached::write_object(
        &obj,
        &mut out,
        now,
        line,
        ConnHdr::Keep11,
        (asked.head_only, asked.status_as),
        nm,
        file.is_some(),
    );
    s.cache = status;
    count(&cx.ctx.log.counters, status);
    let part = file
        .filter(|_| !asked.head_only && !nm && obj.body_len > 0)
        .map(|(f, off)| (Rc::new(f), off, obj.body_len));
    (out, part)
}
