//! The HTTP/2 client connection role: a [`Conn`] from `ringx-h2proto` reads frames and keeps
//! the protocol's books; this role turns its events into requests served as over HTTP/1.1.
//!
//! Each request is made from its decoded fields and held to every check `ringx-http`'s
//! strict parser makes (`pipeline::fields`), so routing, `return`, static files (Range,
//! 304), error pages and the proxy take exactly the request they take over HTTP/1.1
//! (`serve.rs`); a proxied stream is an [`Exchange`](crate::role::Exchange) with the
//! upstream pools HTTP/1 uses, whose output is held per stream and framed as the peer's
//! window allows (`role::multiplex::proxied`). Responses go out in turns across streams, a
//! frame at a time, within the windows and while the socket's queue is short (`stream.rs`).
//!
//! A connection becomes HTTP/2 by ALPN `h2` or by the h2c prior-knowledge preface
//! (`Zone`); graceful shutdown and reload send GOAWAY with the last stream and let streams
//! in flight finish.

mod call;
mod link;
mod serve;
mod stream;

use std::collections::HashMap;
use std::time::Instant;

use ringx_engine::ConnId;
use ringx_h2proto::{ErrorCode, Event, Limits, Step};

use crate::ctx::base::Base;
use crate::ctx::Cx;
use crate::guard::AuthAnswer;
use crate::metrics::{bump, H2_STALL};
use crate::pipeline::pending::{Pending, SavedBody};
use crate::role::exchange::capture::Capture;
use crate::role::exchange::Outcome;
use crate::role::grpc::mux::CallEvent;
use crate::role::grpc::status::Code;
use crate::role::multiplex::proxied::{self, Proxied};
use crate::role::multiplex::refresh::Background;
use crate::role::upstream::UpEvent;
use call::CallStep;
use link::Link;
use stream::H2Stream;

/// An HTTP/2 client connection.
pub struct H2 {
    link: Link,
    streams: HashMap<u32, H2Stream>,
    /// Which stream each upstream connection in use serves.
    ups: HashMap<ConnId, u32>,
    /// Background updates of cache entries, by their upstream connection.
    bg: Background,
    /// A connection error ended it: nothing more is read.
    failed: bool,
    /// The peer is going away (GOAWAY or FIN): close once the streams are done.
    peer_away: bool,
    /// Streams whose gRPC call waits to be placed once the current read is handled
    /// (`grpc.rs`).
    unplaced: Vec<u32>,
}

impl H2 {
    /// Starts HTTP/2 on a connection: our SETTINGS go out at once.
    pub fn start(cx: &mut Cx, b: &mut Base, c: ConnId, limits: Limits) -> H2 {
        let mut h = H2 {
            link: Link::new(limits),
            streams: HashMap::new(),
            ups: HashMap::new(),
            bg: Background::default(),
            failed: false,
            peer_away: false,
            unplaced: Vec::new(),
        };
        bump(&cx.ctx.log.counters.h2_connections, 1);
        h.link.flush_ctl(cx, b, c);
        let at = cx.io.now() + cx.ctx.set.keepalive_timeout;
        cx.ctx.set_deadline(cx.io, b, c, at);
        h
    }

    /// No stream open and nothing queued: the connection can be reclaimed.
    pub fn is_idle(&self, b: &Base, io: &ringx_engine::Io, c: ConnId) -> bool {
        self.streams.is_empty() && self.bg.is_empty() && b.tr.pending(io, c) == 0
    }

    pub fn on_data(&mut self, cx: &mut Cx, b: &mut Base, c: ConnId, data: &[u8]) {
        if self.failed {
            return;
        }
        let mut buf = std::mem::take(&mut b.inbuf);
        let owned = !buf.is_empty();
        if owned {
            buf.extend_from_slice(data);
        }
        let input: &[u8] = if owned { &buf } else { data };
        let now = cx.io.now();
        let mut pos = 0;
        loop {
            match self.link.conn.feed(&input[pos..], now) {
                Step::Need => break,
                Step::Skip(n) => pos += n,
                Step::Event(n, ev) => {
                    pos += n;
                    self.event(cx, b, c, ev);
                }
                Step::Fatal(e) => {
                    tracing::debug!(conn = c.0, addr = ?b.addr, "HTTP/2: {} ({:?})", e.msg, e.code);
                    self.fail(cx, b, c);
                    break;
                }
            }
        }
        if !self.failed {
            // A frame not complete yet (at most one frame's worth: Conn checks the size).
            if owned {
                buf.drain(..pos);
                b.inbuf = buf;
            } else {
                b.inbuf.extend_from_slice(&data[pos..]);
            }
        }
        self.link.count(cx);
        self.after(cx, b, c);
    }

    fn event(&mut self, cx: &mut Cx, b: &mut Base, c: ConnId, ev: Event) {
        match ev {
            Event::Request {
                id,
                head,
                end_stream,
            } => self.request(cx, b, c, id, *head, end_stream),
            Event::HeadTooLarge { id, .. } => {
                let s = H2Stream::new(id, cx.io.now(), false);
                self.answer_error(cx, b, c, s, 431);
            }
            Event::Data {
                id,
                data,
                end_stream,
            } => self.data(cx, b, c, id, data, end_stream),
            Event::Trailers { id, lines } => {
                if let Some(s) = self.streams.get_mut(&id) {
                    s.trailers(cx, &lines);
                    // Trailers end the body as its last frame would: a request whose
                    // upstream failed while the body arrived falls back now.
                    if let Some(status) = s.proxy.as_mut().and_then(|p| p.ex.gave_up.take()) {
                        self.stream_failed(cx, b, c, id, status);
                    }
                }
            }
            Event::Reset { id, .. } => self.drop_stream(cx, b, id, false),
            Event::GoAway { .. } => self.peer_away = true,
            Event::WindowOpened => {}
        }
    }

    /// Request body bytes: forwarded to the stream's upstream, or read and dropped.
    fn data(&mut self, cx: &mut Cx, b: &mut Base, c: ConnId, id: u32, data: &[u8], end: bool) {
        let Some(s) = self.streams.get_mut(&id) else {
            self.link.conn.release(id, data.len());
            return;
        };
        s.body_in += data.len() as u64;
        if s.body_in > cx.ctx.set.max_body && s.grpc.is_some() {
            // A gRPC client reads a status, not an error page.
            self.link.conn.release(id, data.len());
            let msg = "request larger than client_max_body_size";
            return self.grpc_fail(cx, b, c, id, Code::ResourceExhausted, msg);
        }
        if s.body_in > cx.ctx.set.max_body {
            if s.head_sent {
                self.link.conn.reset(id, ErrorCode::Cancel);
                return self.drop_stream(cx, b, id, true);
            }
            let mut s = self.streams.remove(&id).expect("checked");
            self.detach(cx, &mut s);
            // Our own answer now: the exchange is gone, and its (empty) output with it.
            s.proxy = None;
            return self.answer_error(cx, b, c, s, 413);
        }
        if let Some(k) = s.pending.as_mut().and_then(|p| p.kept.as_mut()) {
            // Its window reopens once the request goes on.
            k.body.data.extend_from_slice(data);
            k.body.end |= end;
            return;
        }
        self.forward(cx, id, data, end);
        let proxied = self.streams.get_mut(&id).and_then(|s| s.proxy.as_mut());
        if let Some(status) = proxied.filter(|_| end).and_then(|p| p.ex.gave_up.take()) {
            // Its upstream failed while the body arrived: it falls back with it now.
            self.stream_failed(cx, b, c, id, status);
        }
    }

    /// A stream ends before its response did (reset by either side): its exchange lets go
    /// of the upstream, and the request is logged as it stands (499 with nothing sent).
    fn drop_stream(&mut self, cx: &mut Cx, b: &mut Base, id: u32, by_us: bool) {
        let Some(mut s) = self.streams.remove(&id) else {
            return;
        };
        self.detach(cx, &mut s);
        if by_us {
            self.link.conn.reset(id, ErrorCode::Cancel);
        }
        s.log_end(cx, b);
    }

    /// A connection error: GOAWAY is queued; it goes out and the connection closes.
    fn fail(&mut self, cx: &mut Cx, b: &mut Base, c: ConnId) {
        self.failed = true;
        self.link.flush_ctl(cx, b, c);
        self.drop_all(cx, b);
        b.inbuf = Vec::new();
        b.tr.close_after_flush(cx.io, c);
    }

    /// After any event: control frames out, responses on, and the connection closed when
    /// nothing more will come.
    fn after(&mut self, cx: &mut Cx, b: &mut Base, c: ConnId) {
        if self.failed {
            return;
        }
        self.place_calls(cx, b, c);
        if b.eof {
            self.drop_stalled(cx, b);
        }
        let (_, grpc_next) = self.grpc_deadlines(cx, b, c);
        self.pump(cx, b, c);
        self.link.flush_ctl(cx, b, c);
        let now = cx.io.now();
        if self.streams.is_empty() {
            if self.peer_away || b.eof || (self.link.conn.going_away() && cx.ctx.draining) {
                self.link.conn.goaway(ErrorCode::NoError);
                self.link.flush_ctl(cx, b, c);
                self.failed = true;
                b.tr.close_after_flush(cx.io, c);
                return;
            }
            b.idle_since = now;
            let at = now + cx.ctx.set.keepalive_timeout;
            cx.ctx.set_deadline(cx.io, b, c, at);
        } else {
            // `send_timeout`, or a gRPC call's deadline if that is sooner.
            let mut at = now + cx.ctx.set.send_timeout;
            if let Some(d) = grpc_next {
                at = at.min(d);
            }
            cx.ctx.set_deadline(cx.io, b, c, at);
        }
    }

    pub fn on_eof(&mut self, cx: &mut Cx, b: &mut Base, c: ConnId) {
        b.eof = true;
        self.peer_away = true;
        // Requests whose bodies will not arrive end now; responses in progress go on.
        let waiting: Vec<u32> = self
            .streams
            .keys()
            .copied()
            .filter(|&id| !self.link.conn.remote_closed(id))
            .collect();
        for id in waiting {
            self.drop_stream(cx, b, id, true);
        }
        self.after(cx, b, c);
    }

    /// A proxied stream started: the connection's budget is shared again.
    fn share_budget(&mut self, cx: &mut Cx) {
        let proxied = self.streams.values_mut();
        proxied::share_budget(cx, proxied.filter_map(|s| s.proxy.as_deref_mut()).collect());
    }

    /// After the peer's FIN no WINDOW_UPDATE can come: a stream whose output waits for a
    /// closed window will never finish, so it ends now, its exchange and upstream connection
    /// with it, instead of holding them until `send_timeout` (nginx ends every stream when
    /// its client closes).
    fn drop_stalled(&mut self, cx: &mut Cx, b: &mut Base) {
        let stalled: Vec<u32> = self
            .streams
            .values()
            .filter(|s| self.link.stalled(s))
            .map(|s| s.id)
            .collect();
        for id in stalled {
            self.drop_stream(cx, b, id, true);
        }
    }

    pub fn on_flushed(&mut self, cx: &mut Cx, b: &mut Base, c: ConnId) {
        self.after(cx, b, c);
    }

    /// The connection is gone: its streams end; its background updates are returned for
    /// the zone to finish.
    pub fn on_closed(&mut self, cx: &mut Cx, b: &mut Base, _c: ConnId) -> Background {
        self.drop_all(cx, b);
        self.ups.clear();
        std::mem::take(&mut self.bg)
    }

    /// Every stream ends (and is logged) as it stands.
    fn drop_all(&mut self, cx: &mut Cx, b: &mut Base) {
        let ids: Vec<u32> = self.streams.keys().copied().collect();
        for id in ids {
            self.drop_stream(cx, b, id, false);
        }
    }

    /// Graceful shutdown or a reload that removed this connection's address: GOAWAY with
    /// the last stream; streams in flight finish, then the connection closes.
    pub fn drain(&mut self, cx: &mut Cx, b: &mut Base, c: ConnId) {
        if self.failed {
            return;
        }
        self.link.conn.goaway(ErrorCode::NoError);
        self.peer_away |= self.streams.is_empty();
        self.after(cx, b, c);
    }

    /// The connection's deadline passed: idle, it goes away; with a response held by a
    /// window the peer never opens (a zero-window stall), it is ended; waiting on
    /// upstreams (which have their own timeouts), it waits on.
    pub fn expire(&mut self, cx: &mut Cx, b: &mut Base, c: ConnId) {
        if self.failed {
            return cx.io.close(c);
        }
        if self.streams.is_empty() {
            self.link.conn.goaway(ErrorCode::NoError);
            self.peer_away = true;
            return self.after(cx, b, c);
        }
        if self.grpc_deadlines(cx, b, c).0 {
            // A call's deadline, not `send_timeout`, woke the connection.
            return self.after(cx, b, c);
        }
        let stalled = self.streams.values().any(|s| self.link.stalled(s));
        if stalled {
            bump(&cx.ctx.log.counters.h2_errors[H2_STALL], 1);
            tracing::debug!(conn = c.0, addr = ?b.addr, "HTTP/2: zero-window stall, closing");
            self.link.conn.goaway(ErrorCode::EnhanceYourCalm);
            return self.fail(cx, b, c);
        }
        self.after(cx, b, c);
    }

    /// An event on an upstream connection one of the streams uses.
    pub fn upstream_event(&mut self, cx: &mut Cx, b: &mut Base, c: ConnId, u: ConnId, ev: UpEvent) {
        self.proxy_event(cx, b, c, u, ev);
        self.after(cx, b, c);
    }

    /// Streams take their turns at sending (`Link::pump`); those whose response ended are
    /// finished, those that failed reset.
    pub(super) fn pump(&mut self, cx: &mut Cx, b: &mut Base, c: ConnId) {
        let done = self.link.pump(cx, b, c, &mut self.streams);
        for &(id, failed) in &done {
            if failed {
                self.link.conn.reset(id, ErrorCode::Internal);
                self.drop_stream(cx, b, id, false);
            } else {
                self.finish(cx, b, id);
            }
        }
        self.link.give_back(done);
    }

    /// The response ended (END_STREAM sent), and the stream is logged and forgotten. A
    /// proxied request still sending its body is told to stop (RST_STREAM NO_ERROR, RFC 9113
    /// §8.1); a locally answered one's body is read and dropped until it ends, as nginx
    /// discards it, so the stream closes as the client expects (within `client_max_body_size`).
    pub(super) fn finish(&mut self, cx: &mut Cx, b: &mut Base, id: u32) {
        let Some(mut s) = self.streams.remove(&id) else {
            return;
        };
        let proxied = s.proxy.is_some() || s.grpc.is_some();
        if proxied && self.link.conn.is_open(id) && !self.link.conn.remote_closed(id) {
            self.link.conn.reset(id, ErrorCode::NoError);
        }
        self.detach(cx, &mut s);
        s.log_end(cx, b);
    }
}

impl H2 {
    /// What the upstream stream of stream `id`'s call did.
    pub fn grpc_event(&mut self, cx: &mut Cx, b: &mut Base, c: ConnId, id: u32, ev: CallEvent) {
        let step = self.streams.get_mut(&id).and_then(|s| s.call_event(cx, ev));
        self.call_step(cx, b, c, id, step);
        self.after(cx, b, c);
    }

    /// Ends stream `id`'s call with a status of ringx's own (a Trailers-Only response when
    /// nothing was sent yet, else trailers after the response bytes already received).
    pub(super) fn grpc_fail(
        &mut self,
        cx: &mut Cx,
        b: &mut Base,
        c: ConnId,
        id: u32,
        code: Code,
        msg: &'static str,
    ) {
        let step = self
            .streams
            .get_mut(&id)
            .and_then(|s| s.fail_call(cx, code, msg));
        self.call_step(cx, b, c, id, step);
    }

    /// Carries out what a call's event on stream `id` needs.
    fn call_step(&mut self, cx: &mut Cx, b: &mut Base, c: ConnId, id: u32, step: Option<CallStep>) {
        match step {
            None => {}
            Some(CallStep::Head(status, fields, end)) => {
                let Some(mut s) = self.streams.remove(&id) else {
                    return;
                };
                self.link
                    .send_head(cx, b, c, &mut s, (status, &fields), (end, end));
                self.streams.insert(id, s);
                if end {
                    self.finish(cx, b, id);
                }
            }
            Some(CallStep::Wake) => self.link.wake(id),
            Some(CallStep::Release(n)) => self.link.conn.release(id, n),
            Some(CallStep::Fail(code, msg)) => self.grpc_fail(cx, b, c, id, code, msg),
        }
    }

    /// Calls whose `grpc-timeout` passed end with DEADLINE_EXCEEDED; returns whether any
    /// did, and the earliest deadline still ahead.
    pub(super) fn grpc_deadlines(
        &mut self,
        cx: &mut Cx,
        b: &mut Base,
        c: ConnId,
    ) -> (bool, Option<Instant>) {
        let (late, next) = call::late_calls(self.streams.values(), cx.io.now());
        for &id in &late {
            self.grpc_fail(cx, b, c, id, Code::DeadlineExceeded, "deadline exceeded");
        }
        (!late.is_empty(), next)
    }
}

/// Streams whose request waits, as an HTTP/1 request is held (`Next::Defer`): for a
/// `limit_req` delay, for the `auth_request` subrequest's answer, or for another request's
/// fill of the cache entry it wants. The stream keeps its request as a [`Pending`] (its
/// fields and what was already decided for it), made and routed again when its time comes
/// (from the zone's millisecond timer) or its answer arrives. Only that stream waits: the
/// connection's other streams go on. Request body that arrives meanwhile is kept, and the
/// peer's window for it is not given back until the request goes on, so what a waiting
/// stream holds is bounded by the stream's window (`[http2] initial_window`).
impl H2 {
    /// Parks stream `s` until `until` (None: until its subrequest or the auth pool answers).
    fn park(
        &mut self,
        cx: &mut Cx,
        b: &Base,
        c: ConnId,
        mut s: H2Stream,
        mut pending: Pending,
        until: Option<Instant>,
    ) {
        pending.resumed = true;
        if let Some(at) = until {
            cx.ctx.wake_at(cx.io, at, c, b.gen);
        }
        s.pending = Some(Box::new(pending));
        s.wake_at = until;
        self.streams.insert(s.id, s);
    }

    /// The zone's timer: streams whose wait is over are looked at again.
    pub fn resume(&mut self, cx: &mut Cx, b: &mut Base, c: ConnId) {
        if self.failed {
            return;
        }
        let now = cx.io.now();
        let mut due: Vec<u32> = self
            .streams
            .values()
            .filter(|s| s.pending.is_some() && s.wake_at.is_some_and(|t| t <= now))
            .map(|s| s.id)
            .collect();
        due.sort_unstable(); // in the order they were opened
        for id in due {
            self.unpark(cx, b, c, id);
        }
        self.after(cx, b, c);
    }

    /// The auth pool's answer `ok` for credentials `key` (`guard::verify`): waiting stream `id`,
    /// if it waits for it, is looked at again; an answer no stream waits for is dropped.
    pub fn verified(&mut self, cx: &mut Cx, b: &mut Base, c: ConnId, id: u32, key: u128, ok: bool) {
        let pending = self.streams.get_mut(&id).and_then(|s| s.pending.as_mut());
        if self.failed || !pending.is_some_and(|h| h.progress.verified(key, ok)) {
            return;
        }
        self.unpark(cx, b, c, id);
        self.after(cx, b, c);
    }

    /// Looks at waiting stream `id` again.
    fn unpark(&mut self, cx: &mut Cx, b: &mut Base, c: ConnId, id: u32) {
        let Some(mut s) = self.streams.remove(&id) else {
            return;
        };
        let Some(mut pending) = s.pending.take() else {
            self.streams.insert(id, s);
            return;
        };
        self.serve(cx, b, c, s, &mut pending);
    }

    /// What arrived of the body while stream `id` waited goes where the request went now:
    /// to its upstream, or read and dropped (its window given back either way).
    fn pass_body(&mut self, cx: &mut Cx, id: u32, body: SavedBody) {
        if body.data.is_empty() && !body.end {
            return;
        }
        if body.replayed {
            // Its window was given back when it first arrived.
            if let Some(p) = self.streams.get_mut(&id).and_then(|s| s.proxy.as_mut()) {
                p.body(cx, &body.data, body.end);
            }
            return;
        }
        self.forward(cx, id, &body.data, body.end && body.trailers.is_none());
        let s = self.streams.get_mut(&id);
        if let (Some(s), Some(t)) = (s, body.trailers) {
            s.trailers(cx, &t);
        }
    }

    /// Sends the `auth_request` subrequest (`head` to `upstream`) for waiting stream `s`; the
    /// stream waits for its answer (`auth_done`). When it cannot be sent, the answer is an
    /// error at once (500, as over HTTP/1).
    fn ask(
        &mut self,
        cx: &mut Cx,
        b: &mut Base,
        c: ConnId,
        mut s: H2Stream,
        mut pending: Pending,
        (upstream, head): (usize, Vec<u8>),
    ) {
        match Proxied::sub(cx, b, c, upstream, head, Capture::subrequest()) {
            Some(p) => {
                if let Some(u) = p.ex.up {
                    self.ups.insert(u, s.id);
                }
                s.proxy = Some(p);
                self.park(cx, b, c, s, pending, None);
            }
            None => {
                pending.progress.auth = Some(AuthAnswer::Error);
                self.serve(cx, b, c, s, &mut pending);
            }
        }
    }

    /// The `auth_request` subrequest of waiting stream `id` ended (`outcome`): its answer is
    /// applied and the request looked at again.
    fn auth_done(&mut self, cx: &mut Cx, b: &mut Base, c: ConnId, id: u32, outcome: Outcome) {
        let Some(mut s) = self.streams.remove(&id) else {
            return;
        };
        self.detach(cx, &mut s);
        let cap = s.proxy.take().and_then(|mut p| p.ex.capture.take());
        let Some(mut pending) = s.pending.take() else {
            return; // not a pending stream's subrequest (never the case)
        };
        let answer = match outcome {
            Outcome::Done => crate::pipeline::access::auth_answer(cap.as_deref()),
            _ => AuthAnswer::Error,
        };
        pending.progress.auth = Some(answer);
        self.serve(cx, b, c, s, &mut pending);
    }
}

#[cfg(test)]
mod grpc_tests;
#[cfg(test)]
mod tests;
