//! The HTTP/1 client connection role: parse what arrives (straight from the receive buffer
//! when a request is complete in one segment), route it, answer in order (pipelining), apply
//! the limits and timeouts, keep the connection alive or close it cleanly (lingering).
//!
//! Requests routed to `proxy_pass` become an [`Exchange`] (`proxy.rs`); everything else is
//! answered here through the response writer (`local.rs`).

mod fallback;
mod file_body;
mod phase;
mod prepared;
mod proxy;
mod write;

use std::cell::Cell;
use std::mem::MaybeUninit;
use std::time::Instant;

use ringx_config::ops::LogFormat;
use ringx_engine::ConnId;
use ringx_http::{BodyKind, Method, Parsed, Request, Version};

use crate::answer::fallback::{save_head, Fallback};
use crate::answer::ReqCtx;
use crate::compress::file_encoder::FileEncoder;
use crate::ctx::base::Base;
use crate::ctx::Cx;
use crate::pipeline::access::{self, Refusal};
use crate::pipeline::pending::Pending;
use crate::pipeline::serve::{serve, Asked};
use crate::pipeline::{routing, Step};
use crate::response::{ConnHdr, ErrorPage, Written};
use crate::role::exchange::capture::Capture;
use crate::role::exchange::Exchange;
use crate::role::proxy_header;
use phase::Next;
pub use phase::Phase;
use prepared::{BodyRead, Prepared};

/// Queued output above which a connection stops reading (pipelined requests wait).
const OUT_HIGH_WATER: u64 = 256 * 1024;
/// Input a proxied request may buffer while its reading is paused.
const PAUSED_BODY_LIMIT: usize = 8 << 20;
/// Header storage on the stack per parse.
const MAX_HEADERS_STACK: usize = 128;
/// During a drain, idle keep-alive connections get this long for one more request (answered
/// with `Connection: close`) before they are closed: closing them at once would race with a
/// request the client already sent.
pub const DRAIN_IDLE_GRACE: std::time::Duration = std::time::Duration::from_millis(1000);

/// A request re-served at an `error_page` location, as it came (with its body) and where.
type Rerouted<'a> = Option<(&'a Request<'a, 'a>, Option<Vec<u8>>, &'a Fallback)>;

/// An HTTP/1.x client connection.
pub struct Http1 {
    pub(crate) phase: Phase,
    requests: u32,
    /// The current request asked to close the connection (`Connection: close`, or HTTP/1.0
    /// without keep-alive): the client sends nothing more after it (RFC 9112 §9.6).
    client_closes: bool,
    /// The response waiting for its request body to be read (boxed: rare, and it keeps the
    /// connection role small).
    prepared: Option<Box<Prepared>>,
    /// The request being proxied.
    pub(crate) exchange: Option<Box<Exchange>>,
    /// The last exchange of this connection, kept for the next proxied request: its head
    /// and retry vectors keep their capacity, so a keep-alive connection whose requests are
    /// proxied allocates nothing for them after the first.
    spare: Option<Box<Exchange>>,
    /// What the pipeline decided so far for the request in progress: its guard's progress,
    /// that it was held and resumed (counted and logged already), the error pages of the
    /// location proxying it, and where an `error_page` re-serves it (with its head and body
    /// kept, when it waits on its way there).
    pending: Pending,
    /// The body being compressed in [`Phase::Compressing`], and whether the connection closes
    /// after it.
    encoding: Option<(Box<FileEncoder>, bool)>,
}

impl Http1 {
    /// A new connection; `proxy_header`: a PROXY protocol header comes first.
    pub fn new(proxy_header: bool) -> Http1 {
        Http1 {
            phase: if proxy_header {
                Phase::ProxyHeader
            } else {
                Phase::Idle
            },
            requests: 0,
            client_closes: false,
            prepared: None,
            exchange: None,
            spare: None,
            pending: Pending::default(),
            encoding: None,
        }
    }

    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// Nothing read yet: the connection may still turn out to be HTTP/2 (h2c preface).
    pub fn is_fresh(&self) -> bool {
        self.phase == Phase::Idle && self.requests == 0
    }

    /// Between requests with nothing buffered or queued: a keep-alive connection at rest.
    pub fn is_idle(&self, b: &Base, io: &ringx_engine::Io, c: ConnId) -> bool {
        self.phase == Phase::Idle && b.inbuf.is_empty() && b.tr.pending(io, c) == 0
    }

    /// The request in progress is this connection's last (its listener goes away).
    pub fn last_request(&mut self) {
        self.requests = self.requests.max(u32::MAX - 1);
    }

    pub fn on_data(&mut self, cx: &mut Cx, b: &mut Base, c: ConnId, data: &[u8]) {
        match self.phase {
            Phase::Lingering => return,
            Phase::ProxyHeader => {
                if self.proxy_header(cx, b, c, data) {
                    self.process_buffered(cx, b, c);
                }
                return;
            }
            _ => {}
        }
        if b.paused {
            b.inbuf.extend_from_slice(data);
            // Pausing takes effect at the next submission: a proxied body may deliver what
            // the socket had queued meanwhile (bounded by the socket's receive buffer).
            let limit = if matches!(self.phase, Phase::Proxy | Phase::Wait) {
                PAUSED_BODY_LIMIT
            } else {
                cx.ctx.set.max_buffered
            };
            if b.inbuf.len() > limit {
                cx.io.close(c);
            } else if b.inbuf.len() > cx.ctx.set.limits.max_head {
                // Held without stopping the receive (a request waiting for its upstream), and
                // the client keeps sending: now stop it (no-op if already stopped).
                cx.io.pause_recv(c);
            }
            return;
        }
        if b.inbuf.is_empty() {
            // The common case: parse straight from the receive buffer, keep only a tail.
            let used = self.process(cx, b, c, data);
            if used < data.len() && self.phase != Phase::Lingering {
                b.inbuf.extend_from_slice(&data[used..]);
            }
        } else {
            b.inbuf.extend_from_slice(data);
            self.process_buffered(cx, b, c);
        }
        if b.inbuf.len() > cx.ctx.set.max_buffered {
            // Only reachable while paused or with a huge partial head (431 handles that).
            cx.io.close(c);
        }
    }

    pub fn on_eof(&mut self, cx: &mut Cx, b: &mut Base, c: ConnId) {
        b.eof = true;
        match self.phase {
            Phase::Proxy => self.proxy_client_eof(cx, b, c),
            Phase::Lingering if b.tr.pending(cx.io, c) == 0 => cx.io.close(c),
            Phase::Lingering => b.tr.close_after_flush(cx.io, c),
            Phase::Body | Phase::Head => cx.io.close(c),
            Phase::Wait | Phase::Compressing => {} // answered (or finished), then closed
            Phase::Idle if b.paused => {}          // finishes in on_flushed
            _ => b.tr.close_after_flush(cx.io, c),
        }
    }

    pub fn on_flushed(&mut self, cx: &mut Cx, b: &mut Base, c: ConnId) {
        if self.phase == Phase::Proxy {
            return self.proxy_client_flushed(cx);
        }
        if self.phase == Phase::Compressing {
            if self.compress_more(cx, b, c).is_some() && self.phase == Phase::Idle && !b.paused {
                self.process_buffered(cx, b, c);
            }
            return;
        }
        if b.paused {
            b.paused = false;
            self.read_on(cx, b, c);
        }
    }

    pub fn on_closed(&mut self, cx: &mut Cx) {
        self.proxy_client_closed(cx);
        self.prepared = None;
        self.pending.clear();
        self.encoding = None;
    }

    /// The connection's deadline passed with nothing left to send.
    pub fn expire(&mut self, cx: &mut Cx, b: &mut Base, c: ConnId) {
        match self.phase {
            Phase::Idle
            | Phase::Lingering
            | Phase::ProxyHeader
            | Phase::Wait
            | Phase::Compressing => cx.io.close(c),
            Phase::Head | Phase::Body => self.fail(cx, b, c, 408, false),
            Phase::Proxy => self.proxy_client_timeout(cx, b, c),
        }
    }

    /// Answers with an error page and closes (lingering) after it.
    #[cold]
    #[inline(never)]
    pub(crate) fn fail(
        &mut self,
        cx: &mut Cx,
        b: &mut Base,
        c: ConnId,
        status: u16,
        head_only: bool,
    ) {
        self.fail_with(cx, b, c, status, head_only, "");
    }

    /// [`fail`](Self::fail) with header lines added to the page (`add_header ... always`).
    pub(crate) fn fail_with(
        &mut self,
        cx: &mut Cx,
        b: &mut Base,
        c: ConnId,
        status: u16,
        head_only: bool,
        extra: &str,
    ) {
        let page = ErrorPage::closing(status).head_only(head_only).extra(extra);
        let w = match b.tr.out_buf(cx.io, c) {
            Some(out) => cx.ctx.responder().error(out, page),
            None => Written {
                status,
                head_len: 0,
            },
        };
        cx.ctx.log.status(cx.io, c, w, b);
        cx.ctx.log.end(cx.io, c, b, cx.ctx.id);
        self.prepared = None;
        self.pending.progress.conn = None;
        self.linger(cx, b, c);
    }

    /// Half-closes after the queued output and discards input until the client closes, so
    /// unread input cannot turn into a reset that destroys the response.
    fn linger(&mut self, cx: &mut Cx, b: &mut Base, c: ConnId) {
        self.phase = Phase::Lingering;
        b.inbuf = Vec::new();
        b.tr.shutdown_after_flush(cx.io, c);
        let at = cx.io.now() + cx.ctx.set.lingering_timeout;
        cx.ctx.set_deadline(cx.io, b, c, at);
        if b.eof {
            b.tr.close_after_flush(cx.io, c);
        }
    }

    /// Consumes what it can of `input`; returns the bytes consumed.
    fn process(&mut self, cx: &mut Cx, b: &mut Base, c: ConnId, input: &[u8]) -> usize {
        let mut pos = 0;
        loop {
            if b.paused {
                break;
            }
            match self.phase {
                Phase::Lingering => return input.len(),
                Phase::Proxy => {
                    // The request body streams to the upstream; anything after it waits.
                    match self.proxy_body(cx, b, c, &input[pos..]) {
                        Some(n) => pos += n,
                        None => return input.len(),
                    }
                    if self.phase == Phase::Proxy {
                        break; // else it ended with its body (a fallback answered it)
                    }
                }
                Phase::ProxyHeader | Phase::Wait | Phase::Compressing => break,
                Phase::Body => {
                    let p = self.prepared.as_mut().expect("a body phase has its answer");
                    match p.read(&input[pos..], cx.ctx.set.max_body) {
                        BodyRead::Refused(status) => {
                            self.fail(cx, b, c, status, false);
                            return input.len();
                        }
                        BodyRead::Done(n) => {
                            pos += n;
                            self.finish_body(cx, b, c);
                        }
                        BodyRead::More(n) => {
                            pos += n;
                            let at = cx.io.now() + cx.ctx.set.body_timeout;
                            cx.ctx.set_deadline(cx.io, b, c, at);
                            break;
                        }
                    }
                }
                Phase::Idle | Phase::Head => {
                    if pos == input.len() {
                        break;
                    }
                    let mut storage =
                        [const { MaybeUninit::<httparse::Header>::uninit() }; MAX_HEADERS_STACK];
                    let n = cx.ctx.set.limits.max_headers.min(MAX_HEADERS_STACK);
                    match ringx_http::parse_request_uninit(
                        &input[pos..],
                        &mut storage[..n],
                        &cx.ctx.set.limits,
                    ) {
                        Ok(Parsed::Partial) => {
                            if self.phase == Phase::Idle {
                                self.phase = Phase::Head;
                                let at = cx.io.now() + cx.ctx.set.header_timeout;
                                cx.ctx.set_deadline(cx.io, b, c, at);
                            }
                            break;
                        }
                        Err(e) => {
                            access::malformed(cx, b, e.status);
                            self.fail(cx, b, c, e.status, false);
                            return input.len();
                        }
                        Ok(Parsed::Complete(req)) => {
                            pos += req.head_len;
                            let more_input = pos < input.len();
                            match self.handle(cx, b, c, &req, more_input) {
                                Next::Continue => continue,
                                Next::Stop => return input.len(),
                                Next::Hold => return pos,
                                Next::Defer => return pos - req.head_len,
                            }
                        }
                    }
                }
            }
        }
        pos
    }

    /// Routes one request and writes (or prepares) its response.
    fn handle(
        &mut self,
        cx: &mut Cx,
        b: &mut Base,
        c: ConnId,
        req: &Request,
        more_input: bool,
    ) -> Next {
        if !std::mem::take(&mut self.pending.resumed) {
            cx.ctx.log.request(cx.io, c, req, b);
            self.requests += 1;
            // What the last request left is cleared where it was used (the page when its
            // exchange ends, the fallback when the proxy starts, the kept head when it is
            // resumed): here only the guard's progress, one test unless a guard ran.
            self.pending.progress.clear();
        }
        self.client_closes = !req.keep_alive;
        let set = &cx.ctx.set;
        let head_only = req.method == Method::Head;
        let keep = req.keep_alive && !cx.ctx.draining && self.requests < set.keepalive_requests;
        // `Content-Length: 0` is no body to wait for (an error page may re-serve it elsewhere).
        let has_body = !matches!(req.body, BodyKind::None | BodyKind::Length(0));
        // The real client address (`real_ip_from`) is what rules, keys and `$remote_addr` see.
        if cx.ctx.routes.http_guard.real_ip.is_some() {
            access::client_ip(cx, b, req);
        }
        let request_id = Cell::new(None);
        if cx.ctx.log.format() == Some(LogFormat::Json) {
            routing::json_request_id(cx, c, &request_id);
        }
        // Routed once: the proxy and the local responder both take this.
        let info = (|| routing::conn_info(b), &request_id);
        let route = routing::route(&cx.ctx.routes, b.listener as usize, req, info);
        let max_body = cx.ctx.set.max_body;
        if let Some(status) = routing::refused(&cx.ctx.routes, max_body, b, req, &route) {
            self.fail(cx, b, c, status, head_only);
            return Next::Stop;
        }
        if !has_body {
            if let Some(canned) = routing::plain_return(&cx.ctx.routes, &route) {
                let Some(out) = b.tr.out_buf(cx.io, c) else {
                    return Next::Stop;
                };
                let ch = ConnHdr::new(req.version == Version::Http11, keep);
                let written = cx.ctx.responder().canned(out, canned, ch, head_only);
                cx.ctx.log.status(cx.io, c, written, b);
                return self.after_response(cx, b, c, !keep, more_input);
            }
        }
        let rq = ReqCtx {
            conn: routing::conn_info(b),
            request_id,
            unsized_body: crate::answer::UnsizedBody::Http1,
        };
        let asked = Asked {
            keep,
            status_as: None,
            grpc: false,
        };
        let progress = &mut self.pending.progress;
        match serve(cx, b, (c, 0), req, (&route, &rq), progress, asked) {
            Step::Proxy(capture) => {
                if let Some(next) = self.try_proxy(cx, b, c, (req, &route, &rq), keep, capture) {
                    return next;
                }
            }
            Step::Local | Step::Grpc | Step::Go(_) => {}
            step => {
                let how = (keep, more_input);
                return self.carry_out(cx, b, c, (req, &route, None), step, how);
            }
        }
        if has_body {
            return self.respond_after_body(cx, b, c, req, (&route, &rq), keep);
        }
        let ch = ConnHdr::new(req.version == Version::Http11, keep);
        let Some(out) = b.tr.out_buf(cx.io, c) else {
            return Next::Stop;
        };
        let r = routing::respond(
            &cx.ctx.routes,
            cx.ctx.responder(),
            out,
            req,
            &route,
            ch,
            &rq,
        );
        if let Some(fb) = r.fallback {
            return self.fall_back(cx, b, c, req, &fb, (keep, more_input));
        }
        if let Some((f, off, len)) = r.file {
            b.tr.send_file(cx.io, c, f, off, len);
        }
        cx.ctx.log.status(cx.io, c, r.written, b);
        if let Some(s) = r.encoder {
            self.encoding = Some((s, !keep || r.close));
            self.phase = Phase::Compressing;
            b.paused = true; // pipelined requests wait in the buffer
            return self.compress_more(cx, b, c).unwrap_or(Next::Hold);
        }
        self.after_response(cx, b, c, !keep || r.close, more_input)
    }

    /// Compresses more of the file being streamed; `Some`: the response is complete (or cut,
    /// and the connection closed), and what follows it.
    fn compress_more(&mut self, cx: &mut Cx, b: &mut Base, c: ConnId) -> Option<Next> {
        let (s, close) = self.encoding.as_mut()?;
        let close = *close;
        match file_body::pump(s, cx, b, c) {
            file_body::Pumped::Waiting => None,
            file_body::Pumped::Failed => {
                self.encoding = None;
                cx.ctx.log.end(cx.io, c, b, cx.ctx.id);
                self.phase = Phase::Lingering;
                cx.io.close(c);
                Some(Next::Stop)
            }
            file_body::Pumped::Done => {
                self.encoding = None;
                b.paused = false;
                let more = !b.inbuf.is_empty();
                Some(self.after_response(cx, b, c, close, more))
            }
        }
    }

    /// A request with a body answered locally: the response is prepared now and waits until
    /// the body has been read (and 100 Continue, if asked for, goes first); a refusal goes
    /// out at once.
    #[inline(never)]
    fn respond_after_body(
        &mut self,
        cx: &mut Cx,
        b: &mut Base,
        c: ConnId,
        req: &Request,
        (route, rq): (&routing::Route<'_>, &ReqCtx),
        keep: bool,
    ) -> Next {
        let ch = ConnHdr::new(req.version == Version::Http11, keep);
        let p = match Prepared::make(cx, req, (route, rq), ch) {
            Ok(p) => p,
            Err(refusal) => {
                refusal.send(cx, b, c);
                cx.ctx.log.end(cx.io, c, b, cx.ctx.id);
                self.pending.progress.conn = None;
                self.linger(cx, b, c);
                return Next::Stop;
            }
        };
        self.prepared = Some(p);
        self.phase = Phase::Body;
        if req.expect_continue {
            b.tr.write(cx.io, c, b"HTTP/1.1 100 Continue\r\n\r\n");
        }
        let at = cx.io.now() + cx.ctx.set.body_timeout;
        cx.ctx.set_deadline(cx.io, b, c, at);
        Next::Continue
    }

    /// Carries out what the stages decided for a request that does not go on to its
    /// location's answer or proxy: a refusal (its error page, or the plain refusal), a wait,
    /// an `auth_request` subrequest, a cache hit. `(keep, more_input)`: the connection stays
    /// open after the answer; more input follows the request. `rerouted`: the request is
    /// re-served at an `error_page` location (`fallback.rs`): as it came, with its body, and
    /// where; it is no longer in the input, so it is kept to wait.
    #[inline(never)]
    fn carry_out(
        &mut self,
        cx: &mut Cx,
        b: &mut Base,
        c: ConnId,
        (req, route, rerouted): (&Request, &routing::Route<'_>, Rerouted<'_>),
        step: Step,
        (keep, more_input): (bool, bool),
    ) -> Next {
        let fb = rerouted.as_ref().map(|r| r.2);
        let waits = matches!(
            step,
            Step::WaitUntil(_) | Step::WaitVerify | Step::Ask { .. }
        );
        let waiting = match rerouted {
            Some((req, body, fb)) if waits => {
                self.pending
                    .wait_rerouted(save_head(req), body, (fb, &cx.ctx.routes), keep);
                Next::Hold
            }
            _ => Next::Defer,
        };
        match step {
            Step::Refuse { status, headers } => {
                let f = Refusal::of(route, fb, (status, &headers));
                if let Some(next) = f.and_then(|f| self.refused(cx, b, c, req, &f, keep)) {
                    return next;
                }
                let Some((_, close)) = write::refusal(cx, b, c, req, status, headers.plain(), keep)
                else {
                    return Next::Stop;
                };
                if close && fb.is_none() {
                    cx.ctx.log.end(cx.io, c, b, cx.ctx.id);
                    self.pending.progress.conn = None;
                    self.linger(cx, b, c);
                    return Next::Stop;
                }
                self.after_response(cx, b, c, close || !keep, more_input)
            }
            Step::WaitUntil(until) => {
                self.hold(cx, b, c, Some(until));
                waiting
            }
            Step::WaitVerify => {
                self.hold(cx, b, c, None);
                waiting
            }
            Step::Ask { upstream, head } => {
                self.subrequest(cx, b, c, upstream, head, Capture::subrequest());
                waiting
            }
            Step::Hit(hit) => self.hit(cx, b, c, *hit, (keep, more_input)),
            // Steps that go on are the caller's.
            Step::Go(_) | Step::Proxy(_) | Step::Grpc | Step::Local => Next::Continue,
        }
    }

    /// Holds the request (its head stays buffered) until `until`, then looks at it again
    /// (None: until what it waits for resumes it, within a `send_timeout`).
    pub(super) fn hold(&mut self, cx: &mut Cx, b: &mut Base, c: ConnId, until: Option<Instant>) {
        self.phase = Phase::Wait;
        b.paused = true;
        if let Some(t) = until {
            cx.ctx.wake_at(cx.io, t, c, b.gen);
        }
        let at = until.unwrap_or(cx.io.now()) + cx.ctx.set.send_timeout;
        cx.ctx.set_deadline(cx.io, b, c, at);
    }

    /// The auth pool's answer `ok` for credentials `key` (`guard::verify`): the request that
    /// waits for it is looked at again; an answer it does not wait for is dropped.
    pub fn verified(&mut self, cx: &mut Cx, b: &mut Base, c: ConnId, key: u128, ok: bool) {
        if self.phase == Phase::Wait && self.pending.progress.verified(key, ok) {
            self.resume(cx, b, c);
        }
    }

    /// A held request's time came (or what it waited for is there): it is parsed and routed
    /// again, with what was already decided for it kept.
    pub fn resume(&mut self, cx: &mut Cx, b: &mut Base, c: ConnId) {
        if self.phase != Phase::Wait {
            return;
        }
        self.phase = Phase::Idle;
        b.paused = false;
        if !b.eof {
            cx.io.resume_recv(c);
        }
        if self.pending.kept.is_some() {
            return self.resume_fallback(cx, b, c);
        }
        self.pending.resumed = true;
        self.process_buffered(cx, b, c);
    }

    /// The body was read completely: send the response that waited for it.
    fn finish_body(&mut self, cx: &mut Cx, b: &mut Base, c: ConnId) {
        self.phase = Phase::Idle;
        let Some(mut p) = self.prepared.take() else {
            return;
        };
        if cx.ctx.draining && !p.close {
            // The response was prepared before the drain began: it must now say close.
            p.say_close();
        }
        let close = p.close;
        p.send(cx, b, c);
        self.after_response(cx, b, c, close, true);
    }

    /// A response is queued: count and log it, then close (lingering if the client may
    /// still send) or wait for the next request.
    fn after_response(
        &mut self,
        cx: &mut Cx,
        b: &mut Base,
        c: ConnId,
        close: bool,
        more_input: bool,
    ) -> Next {
        cx.ctx.log.end(cx.io, c, b, cx.ctx.id);
        // The request is complete for limit_conn.
        self.pending.progress.conn = None;
        let now = cx.io.now();
        if close || cx.ctx.draining {
            if more_input || self.requests == 0 {
                self.linger(cx, b, c);
            } else {
                // Everything the client sent was read: nothing can turn the close into a reset.
                self.phase = Phase::Lingering;
                if self.client_closes {
                    // It said it sends nothing more: the FIN may ride on the last segment.
                    cx.io.peer_done(c);
                }
                b.tr.close_after_flush(cx.io, c);
                let at = now + cx.ctx.set.send_timeout;
                cx.ctx.set_deadline(cx.io, b, c, at);
            }
            return Next::Stop;
        }
        self.phase = Phase::Idle;
        b.idle_since = now;
        let at = now + cx.ctx.set.keepalive_timeout;
        cx.ctx.set_deadline(cx.io, b, c, at);
        if b.tr.pending(cx.io, c) > OUT_HIGH_WATER {
            b.paused = true;
            cx.io.pause_recv(c);
            b.tr.notify_when_flushed(cx.io, c);
        }
        // `process` sees `paused` and keeps the rest buffered.
        Next::Continue
    }

    /// Reads on: the receive re-armed (unless the client sent its FIN) and the input that
    /// waits in the buffer processed.
    fn read_on(&mut self, cx: &mut Cx, b: &mut Base, c: ConnId) {
        if !b.eof {
            cx.io.resume_recv(c);
        }
        self.process_buffered(cx, b, c);
    }

    /// Runs `process` over the connection's buffered input.
    fn process_buffered(&mut self, cx: &mut Cx, b: &mut Base, c: ConnId) {
        // Nothing buffered (after most responses): only a body being read or proxied looks
        // at empty input (its deadlines); every other phase would do nothing with it.
        if !b.inbuf.is_empty() || matches!(self.phase, Phase::Body | Phase::Proxy) {
            let buf = std::mem::take(&mut b.inbuf);
            let used = self.process(cx, b, c, &buf);
            let mut buf = buf;
            buf.drain(..used);
            if !b.inbuf.is_empty() {
                buf.extend_from_slice(&b.inbuf);
            }
            b.inbuf = buf;
        }
        let busy = matches!(
            self.phase,
            Phase::Body | Phase::Proxy | Phase::Wait | Phase::Compressing
        );
        if b.eof && !b.paused && !busy {
            b.tr.close_after_flush(cx.io, c);
        }
    }

    /// Whether the connection still waits for its PROXY header.
    pub fn awaits_proxy_header(&self) -> bool {
        self.phase == Phase::ProxyHeader
    }

    /// Bytes before the PROXY header is complete; true once it is, with what followed it in
    /// `b.inbuf`, not processed yet (it may be the h2c preface: the zone decides).
    pub fn proxy_header(&mut self, cx: &mut Cx, b: &mut Base, c: ConnId, data: &[u8]) -> bool {
        match proxy_header::feed(b, data) {
            proxy_header::Step::Partial => false,
            proxy_header::Step::Refused => {
                self.phase = Phase::Lingering;
                cx.io.close(c);
                false
            }
            proxy_header::Step::Done => {
                self.phase = Phase::Idle;
                true
            }
        }
    }
}

#[cfg(test)]
mod cache_tests;
#[cfg(test)]
mod guard_tests;
#[cfg(test)]
mod verify_tests;
