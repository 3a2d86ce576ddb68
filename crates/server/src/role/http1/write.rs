//! Answers the pipeline decides, written on an HTTP/1 connection and logged: a guard's
//! refusal, and an answer from the cache.

use ringx_engine::ConnId;
use ringx_http::{BodyKind, Method, Request, Version};

use crate::cache::fill::Asked;
use crate::cache::Found;
use crate::ctx::base::Base;
use crate::ctx::Cx;
use crate::pipeline::cache;
use crate::response::{ConnHdr, ErrorPage, Written};

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
