//! A request on an HTTP/2 stream: made from its fields with the checks of the HTTP/1.1
//! parser (`pipeline::fields`), routed, and answered by the same response writers as
//! HTTP/1, which build its head as fields (`response::Fields`, sent as HEADERS) and its body
//! beside it, which waits for the window in the stream. A proxied stream's head is fields
//! too: the exchange writes them into the stream's output (`Transport::head_fields`).

use ringx_engine::ConnId;
use ringx_h2proto::{ErrorCode, Framing, RequestHead};
use ringx_http::Request;

use super::stream::H2Stream;
use super::H2;
use crate::answer::fallback::Fallback;
use crate::answer::{PageCtx, ReqCtx};
use crate::compress::file_encoder::FileEncoder;
use crate::ctx::base::Base;
use crate::ctx::Cx;
use crate::pipeline::failure;
use crate::pipeline::fields::HeaderList;
use crate::pipeline::pending::{Pending, Saved, SavedBody};
use crate::pipeline::routing::Route;
use crate::pipeline::serve::{serve, Asked};
use crate::pipeline::Step;
use crate::response::{ConnHdr, ErrorPage, Fields, FilePart};
use crate::role::exchange::capture::Capture;
use crate::role::grpc::mux::Owner;
use crate::role::grpc::status::Code;
use crate::role::multiplex::body::{Piece, Squeeze};
use crate::role::multiplex::failed::{self, Instead};
use crate::role::multiplex::grpc::{self, Started};
use crate::role::multiplex::local::{self, Local};
use crate::role::multiplex::log::RequestLog;
use crate::role::multiplex::proxied::{Proxied, ProxyStep};
use crate::role::multiplex::routed::{self, route_fields, Routed};
use crate::role::upstream::UpEvent;

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
        let framing = match routed::framing(&head, end_stream, cx.ctx.set.max_body) {
            Ok(f) => f,
            Err(status) => return self.answer_error(cx, b, c, s, status),
        };
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
        let fb = pending.fallback.clone();
        let (mut length, mut headers) = ([0u8; 20], HeaderList::new());
        let storage = (&mut length, &mut headers);
        let log = (s.log.as_deref_mut(), first);
        let routed = route_fields(cx, b, (head, framing), storage, log, fb.as_deref());
        let Routed { req, route, rq } = match routed {
            Ok(r) => r,
            Err(status) => {
                self.answer_error(cx, b, c, s, status);
                return Some(body);
            }
        };
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
                let i = failed::refused(cx, (&req, &route, fb), (status, &headers), s.head_only);
                self.instead(cx, b, c, s, i);
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
                s.cache = hit.status;
                let (resp, file, refresh) = local::hit(cx, *hit);
                self.answer(cx, b, c, s, resp, file);
                if let Some(u) = refresh {
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
        match local::answer(cx, (&req, &route, &rq), fb, s.head_only) {
            Local::Respond(resp, file) => self.answer(cx, b, c, s, resp, file),
            Local::Compress(resp, z) => self.answer_compressing(cx, b, c, s, resp, z),
            Local::Again(again) => self.instead(cx, b, c, s, Instead::Again(again)),
        }
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
        if !self.link.conn.is_open(id) {
            return s.log_end(cx, b);
        }
        let head = (resp.status, &resp.fields);
        let Some(no_body) = self.link.send_head(cx, b, c, &mut s, head, (false, false)) else {
            self.link.conn.reset(id, ErrorCode::Internal);
            return s.log_end(cx, b);
        };
        s.end = true;
        if !no_body && !resp.body.is_empty() {
            s.out.push(Piece::Bytes(resp.body, 0));
        }
        s.out.push(Piece::Compress(Box::new(Squeeze::new(z))));
        self.streams.insert(id, s);
        self.link.wake(id);
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
        if !self.link.conn.is_open(id) {
            return s.log_end(cx, b);
        }
        let head = (resp.status, &resp.fields);
        let framing = (resp.body.is_empty(), file.is_none());
        let Some(no_body) = self.link.send_head(cx, b, c, &mut s, head, framing) else {
            self.link.conn.reset(id, ErrorCode::Internal);
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
        self.link.wake(id);
    }
}

impl H2 {
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

    /// Starts the gRPC call of stream `s` (routed to a `grpc://` location; `end`: it has
    /// no request body).
    fn start_grpc(
        &mut self,
        cx: &mut Cx,
        b: &mut Base,
        c: ConnId,
        mut s: H2Stream,
        (req, route, rq): (&Request, &Route<'_>, &ReqCtx),
        end: bool,
    ) {
        let id = s.id;
        match grpc::start(cx, b, req, route, rq, end) {
            Started::Call(call) => {
                s.grpc = Some(call);
                self.streams.insert(id, s);
                self.unplaced.push(id);
            }
            Started::Failed(code, msg) => {
                self.streams.insert(id, s);
                self.grpc_fail(cx, b, c, id, code, msg);
            }
        }
    }

    /// Places the calls decided during the read just handled (or a wait just ended) on
    /// their upstream connections; those their clients reset meanwhile are gone already.
    pub(super) fn place_calls(&mut self, cx: &mut Cx, b: &mut Base, c: ConnId) {
        for id in std::mem::take(&mut self.unplaced) {
            let owner = Owner {
                c,
                gen: b.gen,
                sid: id,
            };
            let Some(g) = self.streams.get_mut(&id).and_then(|s| s.grpc.as_mut()) else {
                continue;
            };
            match g.place(cx, owner) {
                Ok(took) => self.link.conn.release(id, took),
                Err(()) => {
                    let msg = "upstream unavailable";
                    self.grpc_fail(cx, b, c, id, Code::Unavailable, msg);
                }
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
        let i = failed::gave_up(cx, proxy.as_deref(), (status, page), s.head_only);
        self.instead(cx, b, c, s, i);
    }

    /// Carries out what stream `s` answers with instead of its location's or upstream's
    /// answer: the response, or its request re-served at the proxying location an
    /// `error_page` names (through that location's guard and cache, as nginx's internal
    /// redirect runs its access phase). What the limits charged stays with the request, and
    /// its `limit_conn` slot with the stream.
    pub(super) fn instead(
        &mut self,
        cx: &mut Cx,
        b: &mut Base,
        c: ConnId,
        mut s: H2Stream,
        i: Instead,
    ) {
        match i {
            Instead::Respond(resp, file) => self.answer(cx, b, c, s, resp, file),
            Instead::Again(mut pending) => {
                pending.progress.limited = s.limited;
                pending.progress.conn = s.conn_slot.take();
                self.serve(cx, b, c, s, &mut pending);
            }
        }
    }

    /// Request body bytes of stream `id`, to its upstream, or dropped; the peer's window
    /// reopens by what was taken.
    pub(super) fn forward(&mut self, cx: &mut Cx, id: u32, data: &[u8], end: bool) {
        let s = self.streams.get_mut(&id);
        let n = s.map_or(data.len(), |s| s.forward(cx, data, end));
        self.link.conn.release(id, n);
    }

    /// Lets go of a stream's upstream connection.
    pub(super) fn detach(&mut self, cx: &mut Cx, s: &mut H2Stream) {
        if let Some(g) = &s.grpc {
            g.end(cx);
        }
        if let Some(p) = &mut s.proxy {
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
        self.link.conn.release(id, released);
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
                self.detach(cx, &mut s);
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
                self.link.conn.reset(id, ErrorCode::Internal);
                return self.drop_stream(cx, b, id, false);
            }
            _ => {}
        }
        self.link.wake(id);
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
        let proxied = self.streams.get_mut(&id).and_then(|s| s.proxy.as_mut());
        if let Some((up, held)) = proxied.and_then(|p| p.reads_rest_first(cx, status)) {
            if let Some(u) = up {
                self.ups.remove(&u);
            }
            // Window held back for the upstream's queue: given back.
            self.link.conn.release(id, held);
            return;
        }
        let Some(mut s) = self.streams.remove(&id) else {
            return;
        };
        self.detach(cx, &mut s);
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
        let Some((resp, status)) = failed::fill_answer(cx, cap, failed) else {
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
        let sent = self.link.send_head(
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
