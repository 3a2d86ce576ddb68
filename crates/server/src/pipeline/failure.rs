//! What a request that failed, or was refused, is answered with, whatever protocol carries
//! it: the page a fallback location serves behind its guard, the refusal as its location's
//! error pages take it, and the request a proxied failure's error page re-serves elsewhere
//! (`answer/fallback.rs`: nginx's internal redirect), with the body it carries again. The
//! roles write what is decided here into their framing and carry on their connection.

use std::mem::MaybeUninit;
use std::sync::Arc;

use ringx_http::Request;

use super::access::Refusal;
use super::routing::Route;
use super::RefusalLines;
use crate::answer::fallback::{may_fall_back, parse_saved, Fallback};
use crate::answer::{Page, PageCtx};
use crate::ctx::{Cx, ZoneCtx};
use crate::response::{ConnHdr, ErrorPage, HeadOut, Reply};
use crate::role::exchange::Exchange;

/// The page of a location serving files behind a guard that fallback `fb` re-served the
/// request at, once its guard passed: written as [`Page`] writes it (the error's status
/// unless the entry says otherwise), or the plain page for the error, with the error's
/// header lines, if the file cannot be served.
pub fn guarded_page<O: HeadOut + ?Sized>(
    ctx: &ZoneCtx,
    out: &mut O,
    fb: &Fallback,
    (ch, head_only): (ConnHdr, bool),
) -> Reply {
    let si = fb.at.server;
    let page = Page {
        r: ctx.responder(),
        server: &ctx.routes.servers[si],
        si,
        ch,
        head_only,
        may_proxy: false,
        extra: &fb.extra,
        guarded: true,
        // The redirect to this page is counted in `fb.hops` already; its missing file is a
        // 404 at this location, answered by its error pages if the sender is recursive.
        hops: fb.hops - 1,
        recursive: fb.open,
        new_uri: None,
    };
    let written = fb
        .page
        .as_deref()
        .and_then(|t| page.write(out, fb.error, t, None));
    written.unwrap_or_else(|| {
        let page = ErrorPage::new(fb.error, ch, head_only).extra(&fb.extra);
        Reply::bytes(ctx.responder().error(out, page))
    })
}

/// A proxied request re-served at `fb`'s location by an `error_page`, as it starts: told
/// the status the entry says, carrying the error's header lines (a refusal's challenge rides
/// on the fallback's response, as in nginx), and with no error page of its own (`page`)
/// unless the page that sent it here is recursive.
pub fn re_served(fb: &Fallback, page: &mut Option<Box<PageCtx>>, ex: &mut Exchange) {
    match page.as_mut() {
        Some(p) if fb.open => p.reached_by(fb),
        _ => *page = None,
    }
    let deco = ex.deco.get_or_insert_with(Box::default);
    deco.status_as = fb.status;
    deco.add_always.push_str(&fb.extra);
}

impl<'a> Refusal<'a> {
    /// The refusal `(status, headers)` by the guard of the location `route` reached, as its
    /// error pages take it (the refusal's own lines, not the location's `add_header`); `fb`:
    /// the fallback that re-served the request there. None: no error page applies (a
    /// fallback's own refusal is answered by its location's error pages only where the page
    /// that sent it there is recursive), the plain refusal goes out.
    pub fn of(
        route: &'a Route<'_>,
        fb: Option<&Fallback>,
        (status, headers): (u16, &'a RefusalLines),
    ) -> Option<Refusal<'a>> {
        let (sent, new_uri) = route.sent();
        let hops = match fb {
            None => sent,
            Some(f) => f.open.then_some(f.hops)?,
        };
        Some(Refusal {
            at: route.at.expect("only a location's guard refuses"),
            status,
            headers: headers.for_page(),
            hops,
            new_uri,
        })
    }
}

/// The header storage a kept request head is parsed again with.
pub type SavedStorage<'b> =
    [MaybeUninit<httparse::Header<'b>>; crate::answer::fallback::MAX_SAVED_HEADERS];

/// Empty storage for [`saved_request`].
pub fn storage<'b>() -> SavedStorage<'b> {
    [const { MaybeUninit::uninit() }; crate::answer::fallback::MAX_SAVED_HEADERS]
}

/// A proxied request whose error page `p` re-serves it at a proxying location: parsed again
/// from the head `p` kept. None: no head was kept, or a reload replaced the routes it was
/// routed by (the location named may not be the same one any more).
pub fn saved_request<'h, 'b>(
    cx: &Cx,
    p: &'b PageCtx,
    storage: &'h mut SavedStorage<'b>,
) -> Option<Request<'h, 'b>> {
    if !Arc::ptr_eq(&p.routes, &cx.ctx.routes) {
        return None;
    }
    parse_saved(p.head.as_deref()?, storage, &cx.ctx.set.limits)
}

/// The body a re-served request carries again, from `kept` (all of its body, where it all
/// arrived and was kept): `Some(None)` when it has none, None when it has one that was
/// streamed and not kept (it cannot be sent again: the caller answers the error).
pub fn body_again(req: &Request, kept: Option<Vec<u8>>) -> Option<Option<Vec<u8>>> {
    if may_fall_back(req) {
        return Some(None);
    }
    kept.map(Some)
}
