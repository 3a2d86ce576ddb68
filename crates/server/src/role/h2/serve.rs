//! A request on an HTTP/2 stream: made from its fields with the checks of the HTTP/1.1
//! parser (`pipeline::fields`), routed, and answered by the same response writers as
//! HTTP/1, which build its head as fields (`response::Fields`, sent as HEADERS) and its body
//! beside it, which waits for the window in the stream. A proxied stream's head is fields
//! too: the exchange writes them into the stream's output (`Transport::head_fields`).

use ringx_config::ops::LogFormat;
use ringx_engine::ConnId;
use ringx_h2proto::{ErrorCode, Framing, RequestHead};
use ringx_http::{BodyKind, Request};

use super::stream::H2Stream;
use super::H2;
use crate::answer::fallback::Fallback;
use crate::answer::{PageCtx, ReqCtx, UnsizedBody};
use crate::compress::file_encoder::FileEncoder;
use crate::ctx::base::Base;
use crate::ctx::Cx;
use crate::pipeline::access::{self, Refusal};
use crate::pipeline::failure;
use crate::pipeline::fields::{head_of, make_request, HeaderList, MAX_HEADERS};
use crate::pipeline::pending::{Pending, Rerouted, Saved, SavedBody};
use crate::pipeline::routing::{self, Route};
use crate::pipeline::serve::{serve, Asked};
use crate::pipeline::{cache, RefusalLines, Step};
use crate::response::{ConnHdr, ErrorPage, Fields, FilePart};
use crate::rewrite::vars::new_request_id;
use crate::role::exchange::capture::Capture;
use crate::role::multiplex::body::{Piece, Squeeze};
use crate::role::multiplex::log::RequestLog;
use crate::role::multiplex::proxied::{Proxied, ProxyStep};
use crate::role::upstream::UpEvent;
use ringx_h2proto::response::FieldList;

impl H2 {
    /// A new request on stream `id`.
    pub(super) fn request(
        &mut self,
        cx: &mut Cx,
        b: &mut Base,
        c: ConnId,
        id: u32,
        head: RequestHead,
        end_stream: bool,
    ) {
        cx.ctx.log.stream_request();
        let now = cx.io.now();
        let mut s = H2Stream::new(id, now, head.method == b"HEAD");
        if cx.ctx.log.logging() {
            s.log = Some(Box::new(RequestLog::of(&head, "HTTP/2.0")));
        }
        if head.is_connect() {
            return self.answer_error(cx, b, c, s, 405);
        }
        let framing = match (end_stream, head.content_length) {
            (true, _) => Framing::None,
            (false, Some(n)) => Framing::Length(n),
            (false, None) => Framing::Chunked,
        };
        if let Framing::Length(n) = framing {
            if n > cx.ctx.set.max_body {
                return self.answer_error(cx, b, c, s, 413);
            }
        }
        self.serve(cx, b, c, s, &mut Pending::of_fields(head, framing));
    }

    /// Makes, routes and serves stream `s`'s request (`pending`: its fields and what was
    /// decided for it so far); a request that must wait is parked (`wait.rs`) and comes back
    /// here when it is looked at again.
    pub(super) fn serve(
        &mut self,
        cx: &mut Cx,
        b: &mut Base,
        c: ConnId,
        s: H2Stream,
        pending: &mut Pending,
    ) {
        let id = s.id;
        if let Some(body) = self.route_stream(cx, b, c, s, pending) {
            self.pass_body(cx, id, body);
        }
    }

    /// [`H2::serve`]: the request's body that arrived while it waited, to go where the
    /// request went (None: it waits again).
    fn route_stream(
        &mut self,
        cx: &mut Cx,
        b: &mut Base,
        c: ConnId,
        mut s: H2Stream,
        pending: &mut Pending,
    ) -> Option<SavedBody> {
        let first = !pending.resumed;
        let Some(kept) = pending.kept.as_mut() else {
            // A stream's request is kept as its fields (`Pending::of_fields`): never the case.
            self.answer_error(cx, b, c, s, 500);
            return None;
        };
        let body = std::mem::take(&mut kept.body);
        let Saved::Fields(head, framing) = &kept.request else {
            self.answer_error(cx, b, c, s, 500);
            return Some(body);
        };
        let framing = *framing;
        let limits = ringx_http::Limits {
            max_headers: cx.ctx.set.limits.max_headers.min(MAX_HEADERS),
            ..cx.ctx.set.limits
        };
        let (mut length, mut headers) = ([0u8; 20], HeaderList::new());
        let req = match make_request((head, framing), &limits, &mut length, &mut headers) {
            Ok(r) => r,
            Err(status) => {
                self.answer_error(cx, b, c, s, status);
                return Some(body);
            }
        };
        if let Some(l) = s.log.as_mut().filter(|_| first) {
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
        if let Some(l) = s.log.as_mut() {
            if cx.ctx.log.format() == Some(LogFormat::Json) {
                // One id for the request however often it is looked at.
                let id = *l.request_id.get_or_insert_with(new_request_id);
                rq.request_id.set(Some(id));
            }
        }
        // Re-served at an `error_page` location: routed there, as the fallback sees it.
        let fb = pending.fallback.clone();
        if let Some(f) = fb.as_ref().filter(|f| !f.is_current(&cx.ctx.routes)) {
            // A reload replaced the routes it was re-served by: its error, as over HTTP/1.
            self.answer_error(cx, b, c, s, f.fb.error);
            return Some(body);
        }
        let req = match &fb {
            Some(f) => f.fb.request(&req),
            None => req,
        };
        let route = match &fb {
            Some(f) => routing::fallback_route(&f.fb, &req),
            None => {
                let conn = || rq.conn;
                routing::route(
                    &cx.ctx.routes,
                    b.listener as usize,
                    &req,
                    (conn, &rq.request_id),
                )
            }
        };
        if fb.is_none() && routing::misdirected(&cx.ctx.routes, b, &route) {
            // The stream alone: the client retries it on a connection of its own (RFC 9113
            // §9.1.2), the connection's other streams go on.
            self.answer_error(cx, b, c, s, 421);
            return Some(body);
        }
        let asked = Asked {
            keep: true,
            status_as: fb.as_ref().and_then(|f| f.fb.status),
            grpc: true,
        };
        let who = (c, s.id);
        let step = serve(
            cx,
            b,
            who,
            &req,
            (&route, &rq),
            &mut pending.progress,
            asked,
        );
        match step {
            Step::Refuse { status, headers } => {
                let fb = fb.as_deref().map(|f| &f.fb);
                self.refused(cx, b, c, s, (&req, &route, fb), (status, &headers));
                return Some(body);
            }
            Step::WaitUntil(until) => {
                pending.keep_body(body);
                self.park(cx, b, c, s, std::mem::take(pending), Some(until));
                return None;
            }
            Step::WaitVerify => {
                pending.keep_body(body);
                self.park(cx, b, c, s, std::mem::take(pending), None);
                return None;
            }
            Step::Ask { upstream, head } => {
                pending.keep_body(body);
                self.ask(cx, b, c, s, std::mem::take(pending), (upstream, head));
                return None;
            }
            _ => {}
        }
        // Going on: `limit_conn` counts it while the slot is held (for the stream's life;
        // a fallback keeps the failed location's where its own has none).
        if s.conn_slot.is_none() {
            s.conn_slot = pending.progress.conn.take();
        }
        s.limited |= pending.progress.limited;
        let fb = fb.as_deref().map(|f| &f.fb);
        match step {
            Step::Hit(hit) => {
                let mut resp = Fields::new();
                let line = (hit.status, &hit.line[..]);
                let at = (&*cx.ctx, cx.io.now());
                let (_, file) = cache::write_found(at, &mut resp, hit.found, line, &hit.asked);
                s.cache = hit.status;
                self.answer(cx, b, c, s, resp, file);
                if let Some(u) = hit.refresh {
                    self.bg.start(cx, b, c, u);
                }
                return Some(body);
            }
            Step::Grpc => {
                let end = framing == Framing::None;
                self.start_grpc(cx, b, c, s, (&req, &route, &rq), end);
                return Some(body);
            }
            Step::Proxy(capture) => {
                self.start_proxy(cx, b, c, s, (&req, &route, &rq), framing, capture, fb);
                return Some(body);
            }
            _ => {}
        }
        if let Some(fb) = fb {
            // A location serving files behind a guard, which passed: its page.
            let mut resp = Fields::new();
            let r = failure::guarded_page(cx.ctx, &mut resp, fb, (ConnHdr::Keep11, s.head_only));
            self.answer(cx, b, c, s, resp, r.file);
            return Some(body);
        }
        let mut resp = Fields::new();
        let r = routing::respond(
            &cx.ctx.routes,
            cx.ctx.responder(),
            &mut resp,
            &req,
            &route,
            ConnHdr::Keep11,
            &rq,
        );
        if let Some(fb) = r.fallback {
            self.fall_back(cx, b, c, s, (&req, None), &fb);
            return Some(body);
        }
        if let Some(z) = r.encoder {
            self.answer_compressing(cx, b, c, s, resp, z);
            return Some(body);
        }
        self.answer(cx, b, c, s, resp, r.file);
        Some(body)
    }

    /// Sends a static file compressed as the peer's window takes it (too large to compress
    /// whole): `resp` is its head; the body is made piece by piece in the stream's turns.
    fn answer_compressing(
        &mut self,
        cx: &mut Cx,
        b: &mut Base,
        c: ConnId,
        mut s: H2Stream,
        resp: Fields,
        z: Box<FileEncoder>,
    ) {
        let id = s.id;
        if !self.conn.is_open(id) {
            return s.log_end(cx, b);
        }
        let head = (resp.status, &resp.fields);
        let Some(no_body) = self.send_head(cx, b, c, &mut s, head, (false, false)) else {
            self.conn.reset(id, ErrorCode::Internal);
            return s.log_end(cx, b);
        };
        s.end = true;
        if !no_body && !resp.body.is_empty() {
            s.out.push(Piece::Bytes(resp.body, 0));
        }
        s.out.push(Piece::Compress(Box::new(Squeeze::new(z))));
        self.streams.insert(id, s);
        self.wake(id);
    }

    /// Answers with an error page.
    pub(super) fn answer_error(
        &mut self,
        cx: &mut Cx,
        b: &mut Base,
        c: ConnId,
        s: H2Stream,
        status: u16,
    ) {
        let mut resp = Fields::new();
        let page = ErrorPage::new(status, ConnHdr::Keep11, s.head_only);
        cx.ctx.responder().error(&mut resp, page);
        self.answer(cx, b, c, s, resp, None);
    }

    /// Sends a response (`resp`: its head and body; `file`: the rest of the body) on
    /// stream `s`.
    pub(super) fn answer(
        &mut self,
        cx: &mut Cx,
        b: &mut Base,
        c: ConnId,
        mut s: H2Stream,
        resp: Fields,
        file: Option<FilePart>,
    ) {
        let id = s.id;
        if !self.conn.is_open(id) {
            return s.log_end(cx, b);
        }
        let head = (resp.status, &resp.fields);
        let framing = (resp.body.is_empty(), file.is_none());
        let Some(no_body) = self.send_head(cx, b, c, &mut s, head, framing) else {
            self.conn.reset(id, ErrorCode::Internal);
            return s.log_end(cx, b);
        };
        if s.ended {
            self.streams.insert(id, s);
            return self.finish(cx, b, id);
        }
        s.end = true;
        if !no_body && !resp.body.is_empty() {
            s.out.push(Piece::Bytes(resp.body, 0));
        }
        if let Some((f, off, len)) = file {
            s.out.push(Piece::File(f, off, off + len));
        }
        self.streams.insert(id, s);
        self.wake(id);
    }

    /// Sends a response head, `status` and `fields`, as HEADERS, with END_STREAM when the
    /// response has no body and nothing follows the head (`last`; `empty`: no body bytes
    /// came with the head). Returns whether the response has no body (a HEAD request's, a
    /// 204 or 304, or an empty one); None: no room for it.
    pub(super) fn send_head(
        &mut self,
        cx: &mut Cx,
        b: &mut Base,
        c: ConnId,
        s: &mut H2Stream,
        (status, fields): (u16, &FieldList),
        (empty, last): (bool, bool),
    ) -> Option<bool> {
        let no_body = s.head_only || status == 204 || status == 304 || empty && last;
        let end = no_body && last;
        if !self.conn.out().is_empty() {
            b.tr.write(cx.io, c, self.conn.out());
            self.conn.clear_out();
        }
        let out = b.tr.out_buf(cx.io, c)?;
        self.conn
            .send_headers(out, s.id, status, fields.iter(), end);
        s.head_sent = true;
        s.status = status;
        s.ended = end;
        Some(no_body)
    }
}

impl H2 {
    /// A refusal `(status, headers)` of the guard of the location `route` reached (`fb`: the
    /// fallback that re-serves the request there): the error page for it (for a fallback's
    /// own refusal only where the page that sent it there is recursive), which may send the
    /// request on to a proxying location, else the plain refusal.
    fn refused(
        &mut self,
        cx: &mut Cx,
        b: &mut Base,
        c: ConnId,
        s: H2Stream,
        (req, route, fb): (&Request, &Route<'_>, Option<&Fallback>),
        (status, headers): (u16, &RefusalLines),
    ) {
        let mut resp = Fields::new();
        let r = Refusal::of(route, fb, (status, headers)).and_then(|f| {
            let r = cx.ctx.responder();
            access::refusal_page(&cx.ctx.routes, r, &mut resp, req, &f, ConnHdr::Keep11)
        });
        match r {
            Some(r) => match r.fallback {
                Some(f) => self.fall_back(cx, b, c, s, (req, None), &f),
                None => self.answer(cx, b, c, s, resp, r.file),
            },
            None => {
                let page = ErrorPage::new(status, ConnHdr::Keep11, s.head_only);
                cx.ctx
                    .responder()
                    .error(&mut resp, page.extra(headers.plain()));
                self.answer(cx, b, c, s, resp, None);
            }
        }
    }

    /// Starts proxying stream `s`'s request (routed to a `proxy_pass` location); `capture`:
    /// what the cache keeps of the response, and the cache status it carries.
    #[allow(clippy::too_many_arguments)]
    fn start_proxy(
        &mut self,
        cx: &mut Cx,
        b: &mut Base,
        c: ConnId,
        mut s: H2Stream,
        (req, route, rq): (&Request, &Route<'_>, &ReqCtx),
        framing: Framing,
        capture: Option<Capture>,
        fb: Option<&Fallback>,
    ) {
        s.cache = capture.as_ref().map_or("", |x| x.client_status);
        match Proxied::start(cx, b, c, (req, route, rq), framing, capture) {
            Err((status, page, cap)) => {
                let Some(s) = self.cache_answer(cx, b, c, s, cap, Some(status)) else {
                    return;
                };
                match fb {
                    // A fallback gets no error page of its own unless the page that sent it
                    // there is recursive.
                    Some(fb) if !fb.open => self.answer_error(cx, b, c, s, status),
                    _ => {
                        let mut page = page;
                        if let (Some(p), Some(fb)) = (page.as_mut(), fb) {
                            p.reached_by(fb);
                        }
                        self.give_up(cx, b, c, s, status, page.as_deref())
                    }
                }
            }
            Ok(mut p) => {
                if let Some(fb) = fb {
                    failure::re_served(fb, &mut p.page, &mut p.ex);
                }
                if let Some(u) = p.ex.up {
                    self.ups.insert(u, s.id);
                }
                s.proxy = Some(p);
                self.streams.insert(s.id, s);
                self.share_budget(cx);
            }
        }
    }

    /// A proxied request that can have no response: `status` (502, 504, or an upstream error
    /// intercepted), as the location's `error_page` says if it has one for it, else the
    /// error page with the location's `add_header ... always` lines.
    pub(super) fn give_up(
        &mut self,
        cx: &mut Cx,
        b: &mut Base,
        c: ConnId,
        mut s: H2Stream,
        status: u16,
        page: Option<&PageCtx>,
    ) {
        // The stream's body is the page now, not the exchange's output.
        let proxy = s.proxy.take();
        let mut resp = Fields::new();
        if let Some(r) =
            page.and_then(|p| p.write(cx.ctx.responder(), &mut resp, status, ConnHdr::Keep11))
        {
            if let (Some(fb), Some(p)) = (r.fallback, page) {
                let mut storage = failure::storage();
                let saved = failure::saved_request(cx, p, &mut storage);
                // The body goes again when it all arrived with a length and was kept.
                let kept = |req: &Request| {
                    let replay = proxy.as_ref().and_then(|x| x.ex.replay.as_ref());
                    match req.body {
                        BodyKind::Length(n) => replay.filter(|r| r.len() as u64 == n).cloned(),
                        _ => None,
                    }
                };
                let again = saved.as_ref().and_then(|r| failure::body_again(r, kept(r)));
                if let (Some(req), Some(body)) = (saved, again) {
                    return self.fall_back(cx, b, c, s, (&req, body), &fb);
                }
            } else {
                return self.answer(cx, b, c, s, resp, r.file);
            }
        }
        let always = proxy
            .as_ref()
            .and_then(|p| p.ex.deco.as_ref())
            .map_or("", |d| d.add_always.as_str());
        let page = ErrorPage::new(status, ConnHdr::Keep11, s.head_only).extra(always);
        cx.ctx.responder().error(&mut resp, page);
        self.answer(cx, b, c, s, resp, None);
    }

    /// Re-serves stream `s`'s request `req` (as it came), which failed with `fb.error`, at
    /// the proxying location an `error_page` names (`answer/fallback.rs`): routed there by
    /// `route_stream`, through that location's guard and cache, as nginx's internal redirect
    /// runs its access phase. It gets no error page of its own unless `fb.open`
    /// (`recursive_error_pages`). `body`: the request's body (its length and bytes) to send
    /// again, kept when it was proxied.
    #[cold]
    #[inline(never)]
    fn fall_back(
        &mut self,
        cx: &mut Cx,
        b: &mut Base,
        c: ConnId,
        mut s: H2Stream,
        (req, body): (&Request, Option<Vec<u8>>),
        fb: &Fallback,
    ) {
        let framing = body
            .as_ref()
            .map_or(Framing::None, |b| Framing::Length(b.len() as u64));
        let mut pending = Pending::of_fields(head_of(req), framing);
        if let Some(data) = body {
            // Its window was given back when it first arrived: not again.
            pending.keep_body(SavedBody {
                data,
                end: true,
                trailers: None,
                replayed: true,
            });
        }
        // Logged as it came. What the limits charged stays (each applies once per request, as
        // in nginx); what the failed location's `auth_request` or cache decided is not the
        // fallback's.
        pending.resumed = true;
        pending.progress.touched = true;
        pending.progress.limited = s.limited;
        pending.progress.conn = s.conn_slot.take();
        pending.fallback = Some(Box::new(Rerouted {
            fb: fb.clone(),
            routes: cx.ctx.routes.clone(),
        }));
        self.serve(cx, b, c, s, &mut pending);
    }

    /// Request body bytes of a proxied stream, to its upstream.
    pub(super) fn proxy_data(&mut self, cx: &mut Cx, id: u32, data: &[u8], end: bool) {
        let Some(p) = self.streams.get_mut(&id).and_then(|s| s.proxy.as_mut()) else {
            return self.conn.release(id, data.len());
        };
        let n = p.body(cx, data, end);
        self.conn.release(id, n);
    }

    /// Trailers of a request: the end of a proxied chunked body.
    pub(super) fn trailers(&mut self, cx: &mut Cx, id: u32, lines: &[u8]) {
        let waiting = self.streams.get_mut(&id).and_then(|s| s.pending.as_mut());
        if let Some(k) = waiting.and_then(|p| p.kept.as_mut()) {
            k.body.end = true;
            k.body.trailers = Some(lines.to_vec());
            return;
        }
        if let Some(g) = self.streams.get_mut(&id).and_then(|s| s.grpc.as_mut()) {
            return g.end_request(cx);
        }
        if let Some(p) = self.streams.get_mut(&id).and_then(|s| s.proxy.as_mut()) {
            p.trailers(cx, lines);
        }
    }

    /// Lets go of a stream's upstream connection.
    pub(super) fn detach(&mut self, cx: &mut Cx, s: &H2Stream) {
        if let Some(g) = &s.grpc {
            g.end(cx);
        }
        if let Some(p) = &s.proxy {
            if let Some(u) = p.ex.up {
                self.ups.remove(&u);
            }
            p.detach(cx);
        }
    }

    /// An event on upstream connection `u`, for the stream whose exchange uses it.
    pub(super) fn proxy_event(
        &mut self,
        cx: &mut Cx,
        b: &mut Base,
        c: ConnId,
        u: ConnId,
        ev: UpEvent,
    ) {
        if self.bg.has(u) {
            return self.bg.event(cx, u, ev);
        }
        let Some(&id) = self.ups.get(&u) else {
            if let Some(up) = cx.ups.get_mut(u) {
                up.abandon(cx.io, u);
            }
            return;
        };
        let Some(s) = self.streams.get_mut(&id) else {
            self.ups.remove(&u);
            return;
        };
        let waiting = s.pending.is_some();
        let Some(p) = s.proxy.as_mut() else {
            self.ups.remove(&u);
            return;
        };
        let (step, released) = p.step(cx, (c, u), ev, waiting);
        self.conn.release(id, released);
        // A retry may have moved the exchange to another connection.
        if p.ex.up != Some(u) {
            self.ups.remove(&u);
            if let Some(n) = p.ex.up {
                self.ups.insert(n, id);
            }
        }
        match step {
            ProxyStep::Answered(outcome) => return self.auth_done(cx, b, c, id, outcome),
            ProxyStep::CacheAnswers(failed) => {
                let Some(mut s) = self.streams.remove(&id) else {
                    return;
                };
                self.detach(cx, &s);
                let cap = s.proxy.take().and_then(|mut p| p.ex.capture.take());
                if let Some(s) = self.cache_answer(cx, b, c, s, cap, failed) {
                    self.give_up(cx, b, c, s, failed.unwrap_or(502), None);
                }
                return;
            }
            _ => {}
        }
        self.response_head(cx, b, c, id);
        match step {
            ProxyStep::Done(trailers) => {
                if let Some(s) = self.streams.get_mut(&id) {
                    s.end = true;
                    s.trailers = trailers;
                }
            }
            ProxyStep::Failed(status) => return self.stream_failed(cx, b, c, id, status),
            ProxyStep::Cut => {
                // Part of the response went out and the rest cannot come: the stream is
                // reset so the client sees it cut (the connection carries on).
                self.conn.reset(id, ErrorCode::Internal);
                return self.drop_stream(cx, b, id, false);
            }
            _ => {}
        }
        self.wake(id);
    }

    /// Proxied stream `id` can have no response from its upstream (`status`): a stale cache
    /// entry, its error page, or the error. Where the error page re-serves the request at
    /// a proxying location and its body (with a length) is still arriving, the rest is read
    /// and kept first (`stream_failed` again once it ended, from `H2::data`).
    pub(super) fn stream_failed(
        &mut self,
        cx: &mut Cx,
        b: &mut Base,
        c: ConnId,
        id: u32,
        status: u16,
    ) {
        if let Some(p) = self.streams.get_mut(&id).and_then(|s| s.proxy.as_mut()) {
            let reading = p.ex.has_body && !p.body_done && !p.chunked;
            let up = p.ex.up;
            if p.ex
                .reads_rest_first(cx, (reading, p.page.as_deref()), status)
            {
                if let Some(u) = up {
                    self.ups.remove(&u);
                }
                // Window held back for the upstream's queue: given back, nothing waits there.
                let held = std::mem::take(&mut p.held);
                self.conn.release(id, held);
                return;
            }
        }
        let Some(mut s) = self.streams.remove(&id) else {
            return;
        };
        self.detach(cx, &s);
        let page = s.proxy.as_mut().and_then(|p| p.page.take());
        let cap = s.proxy.as_mut().and_then(|p| p.ex.capture.take());
        if let Some(s) = self.cache_answer(cx, b, c, s, cap, Some(status)) {
            self.give_up(cx, b, c, s, status, page.as_deref());
        }
    }

    /// Answers stream `s` from the cache, where its fill's exchange (`cap`) ended without
    /// its response going to the client (`failed`: the status it failed with): a
    /// revalidation's 304, or a status or failure the stale copy stands in for. Gives the
    /// stream back where the cache has no answer.
    fn cache_answer(
        &mut self,
        cx: &mut Cx,
        b: &mut Base,
        c: ConnId,
        mut s: H2Stream,
        cap: Option<Box<Capture>>,
        failed: Option<u16>,
    ) -> Option<H2Stream> {
        let mut resp = Fields::new();
        let answered = cap.and_then(|mut x| {
            let mut fill = x.fill.take()?;
            let at = (&*cx.ctx, cx.io.now());
            cache::write_fill_answer(at, &mut resp, (&mut x, &mut fill), failed)
        });
        let Some((status, _)) = answered else {
            return Some(s);
        };
        s.cache = status;
        s.proxy = None; // the stream's body is the entry's, not the exchange's output
        self.answer(cx, b, c, s, resp, None);
        None
    }

    /// Sends the response head as HEADERS once the exchange wrote it.
    fn response_head(&mut self, cx: &mut Cx, b: &mut Base, c: ConnId, id: u32) {
        let Some(mut s) = self.streams.remove(&id) else {
            return;
        };
        let Some(head) = s.proxy.as_mut().and_then(|p| p.take_head()) else {
            self.streams.insert(id, s);
            return;
        };
        let sent = self.send_head(
            cx,
            b,
            c,
            &mut s,
            (head.status, &head.fields),
            (false, false),
        );
        if let Some(p) = s.proxy.as_mut() {
            match sent {
                Some(_) => p.head_done = true,
                None => p.keep_head(head), // no room: sent once there is
            }
        }
        self.streams.insert(id, s);
    }
}
