//! A stream's request answered here: the answer of its location (`return`, a static file,
//! one compressed as the window takes it, the page of a file location behind a guard that
//! passed), or a cache hit. Written once for the multiplexed protocols (HTTP/2 now, HTTP/3
//! next), which only send the [`Local`] in their framing.

use ringx_http::Request;

use crate::answer::fallback::Fallback;
use crate::answer::ReqCtx;
use crate::compress::file_encoder::FileEncoder;
use crate::ctx::Cx;
use crate::pipeline::pending::Pending;
use crate::pipeline::routing::{self, Route};
use crate::pipeline::{cache, failure, Hit, Refresh};
use crate::response::{ConnHdr, Fields, FilePart};

/// What a stream sends for a request answered here.
pub enum Local {
    /// This response: its head and body, and the rest of the body from a file.
    Respond(Fields, Option<FilePart>),
    /// This head, and a file compressed as the window takes it (too large to compress whole).
    Compress(Fields, Box<FileEncoder>),
    /// The request, made again for the proxying location its `error_page` names.
    Again(Box<Pending>),
}

/// The answer of the location `route` reached by `req` (`fb`: the fallback whose guarded
/// file location re-serves it, which passed its guard: its page). `head_only`: the
/// request was HEAD.
pub fn answer(
    cx: &Cx,
    (req, route, rq): (&Request, &Route<'_>, &ReqCtx),
    fb: Option<&Fallback>,
    head_only: bool,
) -> Local {
    let mut resp = Fields::new();
    if let Some(fb) = fb {
        let r = failure::guarded_page(cx.ctx, &mut resp, fb, (ConnHdr::Keep11, head_only));
        return Local::Respond(resp, r.file);
    }
    let (routes, r) = (&cx.ctx.routes, cx.ctx.responder());
    let r = routing::respond(routes, r, &mut resp, req, route, ConnHdr::Keep11, rq);
    if let Some(fb) = r.fallback {
        return Local::Again(Pending::rerouted(req, None, &fb, routes));
    }
    match r.encoder {
        Some(z) => Local::Compress(resp, z),
        None => Local::Respond(resp, r.file),
    }
}

/// A cache hit's response (its head and body, the rest from the entry's file), and the
/// refresh of a stale entry, to start once the client has its answer.
pub fn hit(cx: &Cx, hit: Hit) -> (Fields, Option<FilePart>, Option<Refresh>) {
    let mut resp = Fields::new();
    let line = (hit.status, &hit.line[..]);
    let at = (&*cx.ctx, cx.io.now());
    let (_, file) = cache::write_found(at, &mut resp, hit.found, line, &hit.asked);
    (resp, file, hit.refresh)
}
