//! Answers the pipeline decides, written on an HTTP/1 connection and logged: a guard's
//! refusal, an error page, the page of a guarded location a fallback reached, an answer from
//! the cache, and what a cache fill's end comes to.

use ringx_engine::ConnId;
use ringx_http::{BodyKind, Method, Request, Version};

use crate::answer::fallback::Fallback;
use crate::cache::fill::{Asked, Fill, Mode};
use crate::cache::Found;
use crate::ctx::base::Base;
use crate::ctx::Cx;
use crate::pipeline::{cache, failure};
use crate::response::{ConnHdr, ErrorPage, FilePart, Written};
use crate::role::exchange::capture::Capture;

/// Writes the refusal `status` with `headers` for `req`. Returns what was written and whether
/// the connection must close after it (the request has a body, which is not read).
pub(super) fn refusal(
    cx: &mut Cx,
    b: &mut Base,
    c: ConnId,
    req: &Request,
    status: u16,
    headers: &str,
    keep: bool,
) -> Option<(Written, bool)> {
    let head_only = req.method == Method::Head;
    let has_body = !matches!(req.body, BodyKind::None | BodyKind::Length(0));
    let page = if has_body {
        ErrorPage::closing(status)
    } else {
        ErrorPage::new(
            status,
            ConnHdr::new(req.version == Version::Http11, keep),
            head_only,
        )
    };
    let out = b.tr.out_buf(cx.io, c)?;
    let w = cx
        .ctx
        .responder()
        .error(out, page.head_only(head_only).extra(headers));
    cx.ctx.log.status(cx.io, c, w, b);
    Some((w, has_body))
}

/// Writes the answer from the cache's `found` on the connection (its body from the file
/// after it, for an entry kept on disk) and logs it; None: the connection is closing.
pub(super) fn found(
    cx: &mut Cx,
    b: &mut Base,
    c: ConnId,
    found: Found,
    (status, line): (&'static str, &[u8]),
    asked: &Asked,
) -> Option<Written> {
    let now = cx.io.now();
    let out = b.tr.out_buf(cx.io, c)?;
    let (w, file) = cache::write_found((cx.ctx, now), out, found, (status, line), asked);
    cx.ctx.log.status(cx.io, c, w, b);
    cx.ctx.log.cache_status(c, status);
    if let Some((f, off, len)) = file {
        b.tr.send_file(cx.io, c, f, off, len);
    }
    Some(w)
}

/// Writes the error page `page` on the connection and logs it; false: the connection is
/// closing (nothing was written).
pub(super) fn error(cx: &mut Cx, b: &mut Base, c: ConnId, page: ErrorPage) -> bool {
    let Some(out) = b.tr.out_buf(cx.io, c) else {
        return false;
    };
    let w = cx.ctx.responder().error(out, page);
    cx.ctx.log.status(cx.io, c, w, b);
    true
}

/// Logs an answer written in the connection's output (`written`), the part of its body
/// from a file (`file`) queued after it.
pub(super) fn sent(cx: &mut Cx, b: &mut Base, c: ConnId, written: Written, file: Option<FilePart>) {
    if let Some((f, off, len)) = file {
        b.tr.send_file(cx.io, c, f, off, len);
    }
    cx.ctx.log.status(cx.io, c, written, b);
}

/// What the end of a cache fill's exchange came to ([`fill_ended`]).
pub(super) enum FillEnd {
    /// A background update: the client had its answer; its reading goes on.
    Background,
    /// The cache's answer went out; the connection closes after it if true.
    Answered(bool),
    /// The cache has no answer: the client gets this error, and the connection closes.
    Failed(u16),
    /// The connection is closing.
    Closing,
}

/// A fill's exchange ended without its response going to the client (`failed`: the status
/// it failed with): a background update settled (the client had its answer), or the answer
/// the cache gives for it written (a revalidation's 304, an upstream status or a failure
/// the stale copy stands in for) and logged.
pub(super) fn fill_ended(
    cx: &mut Cx,
    b: &mut Base,
    c: ConnId,
    (mut cap, mut fill): (Capture, Box<Fill>),
    failed: Option<u16>,
) -> FillEnd {
    if fill.mode == Mode::Background {
        if failed.is_none() {
            cache::settle(&mut cap, &mut fill, cx.ctx.wall_ms(cx.io.now()));
        }
        return FillEnd::Background;
    }
    let close = !fill.asked.keep || b.eof;
    let at = (&*cx.ctx, cx.io.now());
    let Some(out) = b.tr.out_buf(cx.io, c) else {
        return FillEnd::Closing;
    };
    let Some((status, w)) = cache::write_fill_answer(at, out, (&mut cap, &mut fill), failed) else {
        return FillEnd::Failed(failed.unwrap_or(502));
    };
    drop(fill);
    cx.ctx.log.status(cx.io, c, w, b);
    cx.ctx.log.cache_status(c, status);
    FillEnd::Answered(close)
}

/// The page of a location serving files behind a guard that fallback `fb` re-served `req`
/// at, once the guard passed, written and logged. Returns whether the connection closes
/// after it; None: the connection is closing.
pub(super) fn guarded_page(
    cx: &mut Cx,
    b: &mut Base,
    c: ConnId,
    req: &Request,
    fb: &Fallback,
    keep: bool,
) -> Option<bool> {
    let ch = ConnHdr::new(req.version == Version::Http11, keep);
    let out = b.tr.out_buf(cx.io, c)?;
    let r = failure::guarded_page(cx.ctx, out, fb, (ch, req.method == Method::Head));
    sent(cx, b, c, r.written, r.file);
    Some(!keep || r.close)
}
