//! A request on an HTTP/3 stream: made from its decoded fields with the checks every
//! protocol's requests get, routed and served by the pipeline as the HTTP/2 role's are
//! (`role/multiplex/`), and its answer sent on the stream as HEADERS and DATA frames.
//!
//! A request routed to `proxy_pass` is an `Exchange` to an HTTP/1.1 upstream through the
//! zone's pools, shared with HTTP/1 and HTTP/2 clients (`role/multiplex/proxied.rs`, as
//! HTTP/2's streams use it). The exchange writes the response into the stream's memory;
//! the stream sends it as HEADERS and DATA as QUIC's window opens (`stream.rs`), and the
//! exchange's back-pressure follows: an upstream is paused past the stream's share of the
//! connection's budget and resumed as the client takes the bytes. The request body goes
//! the other way as it arrives; a stream whose upstream takes no more is not read
//! (`conn.rs`), so QUIC's flow control holds the client back.
//!
//! A request routed to a `grpc://` location is a gRPC call on the zone's pooled HTTP/2
//! upstream connections, shared with HTTP/2 clients' calls (`grpc.rs`): its response's
//! messages as DATA, its status in a trailing HEADERS frame.
//!
//! A request that waits (a `limit_req` delay, an `auth_request` subrequest, a password on
//! the auth pool) is parked with what the pipeline decided for it and served again when its
//! wait is over, as HTTP/2's are; what arrives of its body meanwhile is kept with it, up to
//! the stream's flow-control window (past that the stream is not read, so QUIC holds the
//! client back), and goes where the request goes. An `error_page` that names a proxying
//! location re-serves the request there (after a refusal, a local error, or a proxied
//! request that can have no response: with its body where the exchange kept it all), as
//! over HTTP/1.1 and HTTP/2 (`role/multiplex/failed.rs`).
//!
//! The proxy cache works as over HTTP/2: a request for an entry another request is filling
//! waits for the fill (the cache lock, a `WaitUntil` like a delay's) and is answered from
//! it; a stale answer (`stale-while-revalidate`) starts the entry's refresh beside it, which
//! the connection owns and the zone's QUIC state adopts if the connection goes first
//! (`role/multiplex/refresh.rs`).

use quinn_proto::{StreamId, VarInt};
use ringx_engine::ConnId;
use ringx_h3proto::Event;
use ringx_http::decoded::{Framing, RequestHead};
use ringx_http::Request;

use super::conn::H3Conn;
use super::early::{early_request, reading_early_data};
use super::grpc::CallStep;
use super::stream::{H3Stream, Parked};
use crate::answer::fallback::Fallback;
use crate::answer::{PageCtx, ReqCtx};
use crate::ctx::Cx;
use crate::guard::AuthAnswer;
use crate::pipeline::fields::HeaderList;
use crate::pipeline::pending::{Pending, Saved, SavedBody};
use crate::pipeline::routing::Route;
use crate::pipeline::serve::{serve, Asked};
use crate::pipeline::Step;
use crate::pipeline::{access, failure};
use crate::response::{ConnHdr, ErrorPage, Fields};
use crate::role::exchange::capture::Capture;
use crate::role::exchange::Outcome;
use crate::role::grpc::mux::{CallEvent, Owner};
use crate::role::grpc::status::Code;
use crate::role::multiplex::failed::{self, Instead};
use crate::role::multiplex::grpc::{self, Started};
use crate::role::multiplex::local::{self, Local};
use crate::role::multiplex::log::RequestLog;
use crate::role::multiplex::proxied::{share_budget, Proxied, ProxyStep};
use crate::role::multiplex::routed::{self, route_fields, Routed};
use crate::role::upstream::UpEvent;

impl H3Conn {
    /// What the HTTP/3 state reported; returns the requests it started.
    pub(super) fn request_event(&mut self, cx: &mut Cx, ev: Event) -> usize {
        match ev {
            Event::Request { id, head, end } => {
                self.request(cx, id, *head, end);
                1
            }
            Event::HeadTooLarge { id } => {
                let s = H3Stream::new(cx.io.now(), false);
                self.answer_error(cx, id, s, 431);
                1
            }
            // A body goes to the stream's upstream; one nothing reads (an answer made here)
            // is dropped, so the client's window keeps opening.
            Event::Data { id, data, end } => {
                self.request_body(cx, id, &data, end);
                0
            }
            Event::Trailers { id, lines } => {
                self.request_trailers(cx, id, &lines);
                0
            }
            Event::GoAway { .. } => 0,
            Event::StreamError { id, code, msg } => {
                tracing::debug!(client = ?self.base.addr, stream = id, "HTTP/3: {msg}");
                let sid = stream_id(id);
                let code = VarInt::from_u64(code.code()).unwrap_or_default();
                let _ = self.quic.recv_stream(sid).stop(code);
                let _ = self.quic.send_stream(sid).reset(code);
                if let Some(s) = self.streams.remove(&id) {
                    s.log_end(cx, &self.base);
                }
                0
            }
        }
    }

    /// A new request on stream `id` (`end`: it has no body).
    fn request(&mut self, cx: &mut Cx, id: u64, mut head: RequestHead, end: bool) {
        cx.ctx.log.stream_request();
        let mut s = H3Stream::new(cx.io.now(), head.method == b"HEAD");
        if cx.ctx.log.logging() {
            s.log = Some(Box::new(RequestLog::of(&head, "HTTP/3.0")));
        }
        if reading_early_data(&self.quic) {
            if let Err(status) = early_request(&cx.ctx.log.counters.quic, &mut head) {
                return self.answer_error(cx, id, s, status);
            }
        }
        let framing = match routed::framing(&head, end, cx.ctx.set.max_body) {
            Ok(f) => f,
            Err(status) => return self.answer_error(cx, id, s, status),
        };
        let mut pending = Pending::of_fields(head, framing);
        self.serve(cx, id, s, &mut pending);
    }

    /// Makes, routes and serves stream `id`'s request; what arrived of its body while it
    /// waited then goes where the request went (a request that waits again took it along).
    fn serve(&mut self, cx: &mut Cx, id: u64, s: H3Stream, pending: &mut Pending) {
        self.route_stream(cx, id, s, pending);
        let body = pending.kept.as_mut().map(|k| std::mem::take(&mut k.body));
        self.pass_body(cx, id, body);
    }

    /// [`H3Conn::serve`]: the request made, routed, and what the pipeline decided done.
    fn route_stream(&mut self, cx: &mut Cx, id: u64, mut s: H3Stream, pending: &mut Pending) {
        let Some(Saved::Fields(head, framing)) = pending.kept.as_ref().map(|k| &k.request) else {
            return self.answer_error(cx, id, s, 500);
        };
        // Re-served at an `error_page` location: routed there, with its status.
        let fb = pending.fallback.clone();
        let (mut length, mut headers) = ([0u8; 20], HeaderList::new());
        let storage = (&mut length, &mut headers);
        let log = (s.log.as_deref_mut(), !pending.resumed);
        let b = &mut self.base;
        let routed = route_fields(cx, b, (head, *framing), storage, log, fb.as_deref());
        let Routed { req, route, rq } = match routed {
            Ok(r) => r,
            Err(status) => return self.answer_error(cx, id, s, status),
        };
        s.alt_svc = cx.ctx.routes.servers[route.server].alt_svc.clone();
        let asked = Asked {
            keep: true,
            status_as: fb.as_ref().and_then(|f| f.fb.status),
            grpc: true,
        };
        let who = (self.owner, id as u32);
        let step = serve(
            cx,
            b,
            who,
            &req,
            (&route, &rq),
            &mut pending.progress,
            asked,
        );
        // `limit_conn` counts it while the slot is held (for the stream's life; a fallback
        // keeps the failed location's where its own has none).
        if s.conn_slot.is_none() {
            s.conn_slot = pending.progress.conn.take();
        }
        s.limited |= pending.progress.limited;
        let fb = fb.as_deref().map(|f| &f.fb);
        match step {
            Step::Refuse { status, headers } => {
                let i = failed::refused(cx, (&req, &route, fb), (status, &headers), s.head_only);
                self.instead(cx, id, s, i)
            }
            Step::Hit(hit) => {
                s.cache = hit.status;
                let (resp, file, refresh) = local::hit(cx, *hit);
                self.answer(id, s, resp, file);
                // A stale answer's refresh (`stale-while-revalidate`) goes on beside it.
                if let Some(u) = refresh {
                    self.bg.start(cx, &self.base, self.owner, u);
                }
            }
            Step::Proxy(capture) => {
                let framing = *framing;
                self.start_proxy(cx, (id, s), (&req, &route, &rq), (framing, fb), capture)
            }
            Step::Grpc => {
                let end = *framing == Framing::None;
                self.start_grpc(cx, (id, s), (&req, &route, &rq), end)
            }
            // A `limit_req` delay, or another request's fill of the cache entry: the request
            // is looked at again when it is over.
            Step::WaitUntil(until) => {
                pending.resumed = true;
                cx.ctx.wake_at(cx.io, until, self.owner, self.base.gen);
                let kept = Box::new(std::mem::take(pending));
                self.parked.push(Parked::delay(until, id, s, kept));
            }
            // A password verified on the auth pool: looked at again when its answer comes
            // (`verified`), or answered 503 after `send_timeout` without one.
            Step::WaitVerify => {
                pending.resumed = true;
                let until = cx.io.now() + cx.ctx.set.send_timeout;
                cx.ctx.wake_at(cx.io, until, self.owner, self.base.gen);
                let kept = Box::new(std::mem::take(pending));
                self.parked.push(Parked::verify(until, id, s, kept));
            }
            // `auth_request`: the subrequest's answer decides, then the request is looked
            // at again (`auth_done`).
            Step::Ask { upstream, head } => {
                pending.resumed = true;
                let sub = Proxied::sub(
                    cx,
                    &self.base,
                    self.owner,
                    upstream,
                    head,
                    Capture::subrequest(),
                );
                match sub {
                    Some(p) => {
                        if let Some(u) = p.ex.up {
                            self.ups.insert(u, id);
                        }
                        s.proxy = Some(p);
                        s.pending = Some(Box::new(std::mem::take(pending)));
                        self.streams.insert(id, s);
                    }
                    None => {
                        pending.progress.auth = Some(AuthAnswer::Error);
                        self.serve(cx, id, s, pending);
                    }
                }
            }
            Step::Local | Step::Go(_) => {
                match local::answer(cx, (&req, &route, &rq), fb, s.head_only) {
                    Local::Respond(resp, file) => self.answer(id, s, resp, file),
                    Local::Compress(resp, z) => {
                        s.respond(resp, None, Some(z));
                        self.start(id, s)
                    }
                    Local::Again(again) => self.instead(cx, id, s, Instead::Again(again)),
                }
            }
        }
    }

    /// The `auth_request` subrequest of stream `id` ended (`outcome`): its answer is applied
    /// and the request looked at again.
    fn auth_done(&mut self, cx: &mut Cx, id: u64, outcome: Outcome) {
        let Some(mut s) = self.streams.remove(&id) else {
            return;
        };
        let cap = s.proxy.take().and_then(|mut p| {
            p.detach(cx);
            p.ex.capture.take()
        });
        let Some(mut pending) = s.pending.take() else {
            return self.answer_error(cx, id, s, 500); // not a waiting stream (never the case)
        };
        pending.progress.auth = Some(match outcome {
            Outcome::Done => access::auth_answer(cap.as_deref()),
            _ => AuthAnswer::Error,
        });
        self.serve(cx, id, s, &mut pending);
    }

    /// The zone's timer: requests whose delay is over are looked at again; those still
    /// waiting for the auth pool get 503; gRPC calls past their deadline end.
    pub(super) fn resume(&mut self, cx: &mut Cx) {
        let now = cx.io.now();
        let (due, wait): (Vec<_>, Vec<_>) = std::mem::take(&mut self.parked)
            .into_iter()
            .partition(|p| p.until <= now);
        self.parked = wait;
        for p in due {
            let Parked {
                id,
                s,
                mut pending,
                verify,
                ..
            } = p;
            if verify {
                tracing::warn!(client = ?self.base.addr, "HTTP/3: no answer from the auth pool in time: 503");
                self.answer_error(cx, id, s, 503);
                self.unhold(cx, id); // what the client still sends is read and dropped
            } else {
                self.serve(cx, id, s, &mut pending);
            }
        }
        self.grpc_deadlines(cx);
    }

    /// The auth pool's answer `ok` for credentials `key`, for the request on stream `tag`
    /// (the low 32 bits of its id, as the pipeline was given it): looked at again.
    pub(super) fn verified(&mut self, cx: &mut Cx, tag: u32, key: u128, ok: bool) {
        let Some(i) = self
            .parked
            .iter()
            .position(|p| p.verify && p.id as u32 == tag)
        else {
            return;
        };
        if !self.parked[i].pending.progress.verified(key, ok) {
            return;
        }
        let Parked {
            id, s, mut pending, ..
        } = self.parked.swap_remove(i);
        self.serve(cx, id, s, &mut pending);
    }

    /// Carries out what stream `id` answers with instead of its location's or upstream's
    /// answer: the response, or its request re-served at the proxying location an
    /// `error_page` names (through that location's guard and cache, as nginx's internal
    /// redirect runs its access phase). What the limits charged stays with the request, and
    /// its `limit_conn` slot with the stream.
    fn instead(&mut self, cx: &mut Cx, id: u64, mut s: H3Stream, i: Instead) {
        match i {
            Instead::Respond(resp, file) => self.answer(id, s, resp, file),
            Instead::Again(mut pending) => {
                pending.progress.limited = s.limited;
                pending.progress.conn = s.conn_slot.take();
                self.serve(cx, id, s, &mut pending);
            }
        }
    }

    /// Answers with an error page.
    pub(super) fn answer_error(&mut self, cx: &mut Cx, id: u64, s: H3Stream, status: u16) {
        let mut resp = Fields::new();
        let page = ErrorPage::new(status, ConnHdr::Keep11, s.head_only);
        cx.ctx.responder().error(&mut resp, page);
        self.answer(id, s, resp, None);
    }

    /// Sends response `resp` (the rest of its body from `file`) on stream `id`.
    pub(super) fn answer(
        &mut self,
        id: u64,
        mut s: H3Stream,
        resp: Fields,
        file: Option<crate::response::FilePart>,
    ) {
        s.respond(resp, file, None);
        self.start(id, s);
    }

    /// The stream's response starts going out.
    fn start(&mut self, id: u64, s: H3Stream) {
        self.streams.insert(id, s);
        self.ready.push(id);
    }
}

/// H3_INTERNAL_ERROR: a stream whose response was cut.
const INTERNAL_ERROR: u32 = 0x102;

impl H3Conn {
    /// Starts proxying stream `id`'s request (routed to a `proxy_pass` location);
    /// `capture`: what the cache keeps of the response, and the cache status it carries.
    pub(super) fn start_proxy(
        &mut self,
        cx: &mut Cx,
        (id, mut s): (u64, H3Stream),
        (req, route, rq): (&Request, &Route<'_>, &ReqCtx),
        (framing, fb): (Framing, Option<&Fallback>),
        capture: Option<Capture>,
    ) {
        s.cache = capture.as_ref().map_or("", |x| x.client_status);
        let routed = (req, route, rq);
        match Proxied::start(cx, &self.base, self.owner, routed, framing, capture) {
            // A fallback gets no error page of its own unless the page that sent it there is
            // recursive.
            Err((status, _, _)) if fb.is_some_and(|f| !f.open) => {
                self.answer_error(cx, id, s, status)
            }
            Err((status, mut page, cap)) => {
                if let (Some(p), Some(fb)) = (page.as_mut(), fb) {
                    p.reached_by(fb);
                }
                self.proxy_failed(cx, (id, s), status, (page, cap))
            }
            Ok(mut p) => {
                if let Some(fb) = fb {
                    failure::re_served(fb, &mut p.page, &mut p.ex);
                }
                if let Some(u) = p.ex.up {
                    self.ups.insert(u, id);
                }
                s.proxy = Some(p);
                self.streams.insert(id, s);
                let proxied = self
                    .streams
                    .values_mut()
                    .filter_map(|s| s.proxy.as_deref_mut());
                share_budget(cx, proxied.collect());
            }
        }
    }

    /// A proxied stream can have no response (`status`): the cache's stale copy where a fill
    /// failed and one stands in, else the location's error page for it (`page`), which may
    /// re-serve the request at a proxying location (with its body, where the exchange kept
    /// it all), else the error page.
    fn proxy_failed(
        &mut self,
        cx: &mut Cx,
        (id, mut s): (u64, H3Stream),
        status: u16,
        (page, cap): (Option<Box<PageCtx>>, Option<Box<Capture>>),
    ) {
        // The stream's body is the answer's now, not the exchange's output.
        let proxy = s.proxy.take();
        if let Some((resp, cache)) = failed::fill_answer(cx, cap, Some(status)) {
            s.cache = cache;
            return self.answer(id, s, resp, None);
        }
        let i = failed::gave_up(cx, proxy.as_deref(), (status, page.as_deref()), s.head_only);
        self.instead(cx, id, s, i)
    }

    /// Whether upstream connection `u` serves one of this connection's streams, or a
    /// refresh one of them started.
    pub(super) fn serves(&self, u: ConnId) -> bool {
        let s = self.ups.get(&u).and_then(|id| self.streams.get(id));
        s.is_some_and(|s| s.proxy.is_some()) || self.bg.has(u)
    }

    /// An event on upstream connection `u`, which serves one of this connection's streams
    /// ([`serves`](Self::serves)).
    pub(super) fn upstream_event(&mut self, cx: &mut Cx, u: ConnId, ev: UpEvent) {
        if self.bg.has(u) {
            return self.bg.event(cx, u, ev);
        }
        let Some(&id) = self.ups.get(&u) else {
            return;
        };
        let Some(s) = self.streams.get_mut(&id) else {
            return;
        };
        let waiting = s.pending.is_some();
        let Some(p) = s.proxy.as_mut() else {
            return;
        };
        let (step, released) = p.step(cx, (self.owner, u), ev, waiting);
        // A retry may have moved the exchange to another connection.
        if p.ex.up != Some(u) {
            self.ups.remove(&u);
            if let Some(n) = p.ex.up {
                self.ups.insert(n, id);
            }
        }
        if released > 0 {
            // The upstream took the body it held back: the stream is read again.
            self.held.retain(|&h| h != id);
            if let Err(e) = self.read(cx, stream_id(id)) {
                self.fail(cx, e);
            }
        }
        match step {
            ProxyStep::Going => {}
            ProxyStep::Done(trailers) => {
                if let Some(s) = self.streams.get_mut(&id) {
                    s.end = true;
                    s.trailers = Some(trailers);
                }
            }
            ProxyStep::CacheAnswers(failed) => {
                let Some(mut s) = self.streams.remove(&id) else {
                    return;
                };
                let cap = s.proxy.take().and_then(|mut p| {
                    p.detach(cx);
                    p.ex.capture.take()
                });
                return self.proxy_failed(cx, (id, s), failed.unwrap_or(502), (None, cap));
            }
            ProxyStep::Failed(status) => return self.stream_failed(cx, id, status),
            ProxyStep::Answered(outcome) => return self.auth_done(cx, id, outcome),
            ProxyStep::Cut => {
                // Part of the response went out and the rest cannot come: the stream is
                // reset so the client sees it cut (the connection carries on).
                let code = VarInt::from_u32(INTERNAL_ERROR);
                let _ = self.quic.send_stream(stream_id(id)).reset(code);
                if let Some(s) = self.streams.remove(&id) {
                    s.log_end(cx, &self.base);
                }
                return;
            }
        }
        self.ready.push(id);
    }

    /// Proxied stream `id` can have no response from its upstream (`status`): a stale cache
    /// entry, its error page, or the error. Where the error page re-serves the request at a
    /// proxying location and its body (with a length) is still arriving, the rest is read
    /// and kept first (`stream_failed` again once it ended, from `request_body`).
    fn stream_failed(&mut self, cx: &mut Cx, id: u64, status: u16) {
        let proxied = self.streams.get_mut(&id).and_then(|s| s.proxy.as_mut());
        if let Some((up, _)) = proxied.and_then(|p| p.reads_rest_first(cx, status)) {
            if let Some(u) = up {
                self.ups.remove(&u);
            }
            // Nothing waits in the upstream's queue now: the stream is read on.
            return self.unhold(cx, id);
        }
        let Some(mut s) = self.streams.remove(&id) else {
            return;
        };
        let page = s.proxy.as_mut().and_then(|p| p.page.take());
        let cap = s.proxy.as_mut().and_then(|p| p.ex.capture.take());
        if let Some(p) = s.proxy.as_mut() {
            p.detach(cx);
        }
        self.proxy_failed(cx, (id, s), status, (page, cap));
    }

    /// Request body bytes of stream `id` (`end`: the last) for its upstream, or its gRPC
    /// call's, or kept while its request waits.
    pub(super) fn request_body(&mut self, cx: &mut Cx, id: u64, data: &[u8], end: bool) {
        if let Some(kept) = self.waiting_body(id) {
            kept.data.extend_from_slice(data);
            kept.end |= end;
            return;
        }
        let Some(s) = self.streams.get_mut(&id) else {
            return;
        };
        if s.grpc.is_some() {
            if let Some(step) = s.call_body(cx, data, end) {
                self.call_step(cx, id, step);
            }
            return;
        }
        if let Some(p) = s.proxy.as_mut() {
            p.body(cx, data, end);
            if let Some(status) = Some(p).filter(|_| end).and_then(|p| p.ex.gave_up.take()) {
                // Its upstream failed while the body arrived: it falls back with it now.
                self.stream_failed(cx, id, status);
            }
        }
    }

    /// Request trailers of stream `id`, which end its body.
    pub(super) fn request_trailers(&mut self, cx: &mut Cx, id: u64, lines: &[u8]) {
        if let Some(kept) = self.waiting_body(id) {
            kept.end = true;
            kept.trailers = Some(lines.to_vec());
            return;
        }
        let Some(s) = self.streams.get_mut(&id) else {
            return;
        };
        if let Some(g) = s.grpc.as_mut() {
            g.end_request(cx);
        } else if let Some(p) = s.proxy.as_mut() {
            p.trailers(cx, lines);
            // Trailers end the body as its last frame would: a request whose upstream
            // failed while the body arrived falls back now.
            if let Some(status) = p.ex.gave_up.take() {
                self.stream_failed(cx, id, status);
            }
        }
    }
}

impl H3Conn {
    /// Starts the gRPC call of stream `id` (routed to a `grpc://` location; `end`: it has
    /// no request body); it is placed at the end of this turn ([`H3Conn::place_calls`]).
    fn start_grpc(
        &mut self,
        cx: &mut Cx,
        (id, mut s): (u64, H3Stream),
        (req, route, rq): (&Request, &Route<'_>, &ReqCtx),
        end: bool,
    ) {
        match grpc::start(cx, &self.base, req, route, rq, end) {
            Started::Call(call) => {
                if let Some(d) = call.deadline {
                    cx.ctx.wake_at(cx.io, d, self.owner, self.base.gen);
                }
                s.grpc = Some(call);
                self.streams.insert(id, s);
                self.unplaced.push(id);
            }
            Started::Failed(code, msg) => {
                self.streams.insert(id, s);
                self.call_step(cx, id, CallStep::Fail(code, msg));
            }
        }
    }

    /// Places the calls decided in this turn on their upstream connections; those their
    /// clients reset meanwhile are gone already.
    pub(super) fn place_calls(&mut self, cx: &mut Cx) {
        for id in std::mem::take(&mut self.unplaced) {
            let owner = Owner {
                c: self.owner,
                gen: self.base.gen,
                sid: id as u32,
            };
            let Some(g) = self.streams.get_mut(&id).and_then(|s| s.grpc.as_mut()) else {
                continue;
            };
            let step = match g.place(cx, owner) {
                Ok(took) => CallStep::Took(took),
                Err(()) => CallStep::Fail(Code::Unavailable, "upstream unavailable"),
            };
            self.call_step(cx, id, step);
        }
    }

    /// What the upstream stream of the call with owner tag `sid` did.
    pub(super) fn grpc_event(&mut self, cx: &mut Cx, sid: u32, ev: CallEvent) {
        let Some(id) = super::grpc::stream_of(&self.streams, sid) else {
            return;
        };
        let step = self.streams.get_mut(&id).and_then(|s| s.call_event(cx, ev));
        if let Some(step) = step {
            self.call_step(cx, id, step);
        }
    }

    /// Carries out what stream `id`'s call needs: a turn to send, its held body read again
    /// once the upstream took it all, its end with a status of ringx's own.
    fn call_step(&mut self, cx: &mut Cx, id: u64, step: CallStep) {
        let Some(s) = self.streams.get_mut(&id) else {
            return;
        };
        match step {
            CallStep::Wake => {}
            CallStep::Took(n) => s.body_held = s.body_held.saturating_sub(n),
            CallStep::Fail(code, msg) => {
                if !s.fail_call(cx, code, msg) {
                    return;
                }
            }
        }
        self.ready.push(id);
        self.unhold(cx, id); // read again if it no longer holds body back
    }

    /// Calls whose `grpc-timeout` passed end with DEADLINE_EXCEEDED (from the zone's
    /// wake-up, asked for each deadline when its call started).
    fn grpc_deadlines(&mut self, cx: &mut Cx) {
        let now = cx.io.now();
        let late = self.streams.iter().filter(|(_, s)| s.call_late(now));
        let late: Vec<u64> = late.map(|(&id, _)| id).collect();
        for id in late {
            let step = CallStep::Fail(Code::DeadlineExceeded, "deadline exceeded");
            self.call_step(cx, id, step);
        }
    }
}

/// Request body a waiting request keeps, past which its stream is not read until the request
/// goes on (so QUIC's flow control holds the client back): the stream's flow-control window,
/// as an HTTP/2 stream keeps at most its window.
fn kept_max() -> usize {
    ringx_quic::Limits::default().stream_window as usize
}

/// Request body all the waiting requests of one connection keep at most: past it none of
/// them is read until one goes on. (The read that crosses a bound takes what quinn-proto
/// holds for that stream, at most its window: a connection keeps at most this and one
/// window more, however many of its streams wait.)
const KEPT_CONN_MAX: usize = 4 << 20;

/// Requests that wait with a body: what arrives of it meanwhile is kept with the request
/// (its `Pending`), up to [`kept_max`], and goes where the request goes when it goes on.
impl H3Conn {
    /// The body kept for stream `id`'s request, if it waits (for its `auth_request`
    /// subrequest, a delay, the auth pool).
    fn waiting_body(&mut self, id: u64) -> Option<&mut SavedBody> {
        if self.streams.contains_key(&id) {
            let s = self.streams.get_mut(&id)?;
            return s.pending.as_mut()?.kept.as_mut().map(|k| &mut k.body);
        }
        let p = self.parked.iter_mut().find(|p| p.id == id)?;
        p.pending.kept.as_mut().map(|k| &mut k.body)
    }

    /// Whether stream `id`'s request waits with as much body kept as it may.
    pub(super) fn keeps_enough(&self, id: u64) -> bool {
        self.waiting_body_ref(id)
            .is_some_and(|b| b.data.len() >= kept_max() || self.kept_total() >= KEPT_CONN_MAX)
    }

    /// The request body the connection's waiting requests keep, all together.
    fn kept_total(&self) -> usize {
        let in_streams = self.streams.values().filter_map(|s| s.pending.as_deref());
        let parked = self.parked.iter().map(|p| &*p.pending);
        in_streams
            .chain(parked)
            .filter_map(|p| p.kept.as_ref())
            .map(|k| k.body.data.len())
            .sum()
    }

    /// What arrived of stream `id`'s body while its request waited (`body`) goes where the
    /// request went: to its upstream or call, or dropped; the stream is read again.
    fn pass_body(&mut self, cx: &mut Cx, id: u64, body: Option<SavedBody>) {
        if let Some(b) = body.filter(|b| !b.data.is_empty() || b.end) {
            let end = b.end && b.trailers.is_none();
            self.request_body(cx, id, &b.data, end);
            if let Some(t) = b.trailers {
                self.request_trailers(cx, id, &t);
            }
        }
        self.unhold(cx, id);
        // Room in the connection's budget: the other waiting streams it held are read again
        // (each is held again if it still must be).
        let waiting: Vec<u64> = self
            .held
            .iter()
            .copied()
            .filter(|&h| h != id && self.waiting_body_ref(h).is_some())
            .collect();
        for h in waiting {
            self.unhold(cx, h);
        }
    }

    /// Whether stream `id`'s request waits keeping its body.
    fn waiting_body_ref(&self, id: u64) -> Option<&SavedBody> {
        let pending = match self.streams.get(&id) {
            Some(s) => s.pending.as_deref(),
            None => self.parked.iter().find(|p| p.id == id).map(|p| &*p.pending),
        };
        pending.and_then(|p| p.kept.as_ref()).map(|k| &k.body)
    }

    /// Reads stream `id` again if it was left unread (`read` leaves it again while it must).
    fn unhold(&mut self, cx: &mut Cx, id: u64) {
        if self.held.contains(&id) {
            self.held.retain(|&h| h != id);
            if let Err(e) = self.read(cx, stream_id(id)) {
                self.fail(cx, e);
            }
        }
    }
}

/// quinn-proto's id of stream `id`.
pub(super) fn stream_id(id: u64) -> StreamId {
    StreamId::from(VarInt::from_u64(id).unwrap_or_default())
}
