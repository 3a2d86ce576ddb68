//! The proxy cache (`crate::cache`) for HTTP/2 streams, deciding as for an HTTP/1 request
//! (`role/http1/cached.rs`) and sharing its entries: a hit is answered from the entry (its
//! `Age`, the cache status field, a 304 for a matching `If-None-Match`, a body kept on disk
//! sent from the file); a miss is proxied with the capture that fills the entry; a request
//! for an entry another request is filling waits (`wait.rs`) and looks again; a stale
//! entry stands in when the upstream fails, answers a revalidation's 304, and is refreshed
//! in the background after a stale answer (`stale-while-revalidate`), by an exchange the
//! connection owns beside its streams (`H2::bg`).

use std::rc::Rc;
use std::time::Instant;

use ringx_engine::ConnId;
use ringx_http::Request;

use super::proxy::Proxied;
use super::stream::H2Stream;
use super::H2;
use crate::answer::{PageCtx, ReqCtx};
use crate::cache::fill::{Asked, Fill};
use crate::cache::loc::{count, Decision};
use crate::cache::Found;
use crate::guard::Progress;
use crate::response::{ConnHdr, FilePart};
use crate::role::exchange::capture::Capture;
use crate::role::exchange::Outcome;
use crate::role::http1::cached;
use crate::role::http1::local::Route;
use crate::role::proxy_start;
use crate::role::upstream::UpEvent;
use crate::zone::client::Base;
use crate::zone::ctx::Cx;

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

impl H2 {
    /// The cache's decision for stream `s`'s request, routed to a location with a cache.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn cache_step(
        &mut self,
        cx: &mut Cx,
        b: &mut Base,
        s: &mut H2Stream,
        req: &Request,
        (route, rq): (&Route<'_>, &ReqCtx),
        progress: &mut Progress,
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
            Decision::Fetch(fill) => CacheStep::Go(Some(cached::filling(fill, true))),
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
                    proxy_start::upstream_head(cx.ctx, b, req, route, rq, &f)
                        .map(|(u, h)| (f, u, h))
                });
                let asked = cached::asked_now(req, true);
                let (resp, file) = found_response(cx, s, found, status, &line, &asked);
                CacheStep::Hit(resp, file, update)
            }
        }
    }

    /// Sends a background update of a cache entry (`head` to `upstream`): the connection
    /// owns it until it ends, and the entry is stored or refreshed then.
    pub(super) fn background(
        &mut self,
        cx: &mut Cx,
        b: &Base,
        c: ConnId,
        (fill, upstream, head): (Box<Fill>, usize, Vec<u8>),
    ) {
        // When it cannot be sent, the fill is dropped: the stale copy stays, and a later
        // request updates it.
        let cap = cached::filling(fill, false);
        if let Some(p) = Proxied::sub(cx, b, c, upstream, head, cap) {
            if let Some(u) = p.ex.up {
                self.bg.insert(u, p);
            }
        }
    }

    /// An event on the upstream connection `u` of a background update.
    pub(super) fn background_event(&mut self, cx: &mut Cx, c: ConnId, u: ConnId, ev: UpEvent) {
        let Some(mut p) = self.bg.remove(&u) else {
            return;
        };
        let (outcome, _) = p.event(cx, c, u, ev);
        match outcome {
            // A retry may have moved it to another connection.
            Outcome::Pending => {
                let at = p.ex.up.unwrap_or(u);
                self.bg.insert(at, p);
            }
            Outcome::Done => {
                let now = cx.ctx.wall_ms(cx.io.now());
                if let Some(mut cap) = p.ex.capture.take() {
                    if let Some(mut fill) = cap.fill.take() {
                        cached::settle(&mut cap, &mut fill, now);
                    }
                }
            }
            // It failed: the stale copy stays.
            _ => p.detach(cx),
        }
    }

    /// A fill's exchange for stream `s` ended without its response going to the client (a
    /// revalidation's 304, or an upstream status the stale copy stands in for; `failed`:
    /// it could not be had): the stream is answered from the cache, or with the error.
    pub(super) fn fill_answer(
        &mut self,
        cx: &mut Cx,
        b: &mut Base,
        c: ConnId,
        mut s: H2Stream,
        mut cap: Box<Capture>,
        failed: Option<u16>,
    ) {
        s.proxy = None; // the stream's body is the entry's, not the exchange's output
        let Some(mut fill) = cap.fill.take() else {
            return self.give_up(cx, b, c, s, failed.unwrap_or(502), None);
        };
        let now = cx.ctx.wall_ms(cx.io.now());
        let answer = match failed {
            None => cached::settle(&mut cap, &mut fill, now),
            Some(st) => fill
                .stale_for(st, false, now)
                .cloned()
                .map(|o| (o, "STALE")),
        };
        let Some((obj, status)) = answer else {
            return self.give_up(cx, b, c, s, failed.unwrap_or(502), None);
        };
        let line = fill.line(status);
        let (resp, _) = found_response(cx, &mut s, Found::Mem(obj), status, &line, &fill.asked);
        self.answer(cx, b, c, s, resp, None);
    }

    /// A fill's exchange for stream `s` failed (`status`) before any response: the stale
    /// copy if the cache may serve it for that, else the error (`page`: the location's).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn fill_failed(
        &mut self,
        cx: &mut Cx,
        b: &mut Base,
        c: ConnId,
        mut s: H2Stream,
        fill: Box<Fill>,
        status: u16,
        page: Option<&PageCtx>,
    ) {
        let now = cx.ctx.wall_ms(cx.io.now());
        let Some(obj) = fill.stale_for(status, false, now).cloned() else {
            return self.give_up(cx, b, c, s, status, page);
        };
        // The stream's body is the entry's now, not the exchange's output.
        s.proxy = None;
        let line = fill.line("STALE");
        let (resp, _) = found_response(cx, &mut s, Found::Mem(obj), "STALE", &line, &fill.asked);
        self.answer(cx, b, c, s, resp, None);
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
    let nm = asked
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
        asked.head_only,
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
