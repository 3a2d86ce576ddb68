//! The HTTP/1 client connection role: parse what arrives (straight from the receive buffer
//! when a request is complete in one segment), route it, answer in order (pipelining), apply
//! the limits and timeouts, keep the connection alive or close it cleanly (lingering).
//!
//! The pipeline decides what a request gets (`crate::pipeline::serve`); a local answer is
//! written here, a request routed to `proxy_pass` becomes an `Exchange` in the connection's
//! `Proxying` slot, and the other steps (a refusal, a wait, a subrequest, a fallback) are
//! carried out in `steps.rs`. Where the connection is in its request cycle, and how it goes
//! on after a response, is its `Cycle` (`cycle.rs`).

mod cycle;
mod file_body;
mod phase;
mod prepared;
mod proxying;
mod steps;
mod write;

use std::cell::Cell;
use std::mem::MaybeUninit;

use ringx_config::ops::LogFormat;
use ringx_engine::ConnId;
use ringx_http::{BodyKind, Method, Parsed, Request, Version};

use crate::answer::ReqCtx;
use crate::compress::file_encoder::FileEncoder;
use crate::ctx::base::Base;
use crate::ctx::Cx;
use crate::pipeline::access;
use crate::pipeline::pending::Pending;
use crate::pipeline::serve::{serve, Asked};
use crate::pipeline::{cache, routing, Hit, Step};
use crate::response::{ConnHdr, ErrorPage, Written};
use cycle::Cycle;
use phase::Next;
pub use phase::Phase;
use prepared::{BodyRead, Prepared};
use proxying::Proxying;
/// Header storage on the stack per parse.
const MAX_HEADERS_STACK: usize = 128;
/// During a drain, idle keep-alive connections get this long for one more request (answered
/// with `Connection: close`) before they are closed: closing them at once would race with a
/// request the client already sent.
pub const DRAIN_IDLE_GRACE: std::time::Duration = std::time::Duration::from_millis(1000);

/// An HTTP/1.x client connection.
pub struct Http1 {
    /// Where the connection is in its request cycle.
    cycle: Cycle,
    /// The response waiting for its request body to be read (boxed: rare, and it keeps the
    /// connection role small).
    prepared: Option<Box<Prepared>>,
    /// The request being proxied, or a request of the server's own.
    proxying: Proxying,
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
            cycle: Cycle::new(proxy_header),
            prepared: None,
            proxying: Proxying::default(),
            pending: Pending::default(),
            encoding: None,
        }
    }

    pub fn phase(&self) -> Phase {
        self.cycle.phase
    }

    /// Nothing read yet: the connection may still turn out to be HTTP/2 (h2c preface).
    pub fn is_fresh(&self) -> bool {
        self.cycle.is_fresh()
    }

    /// Between requests with nothing buffered or queued: a keep-alive connection at rest.
    pub fn is_idle(&self, b: &Base, io: &ringx_engine::Io, c: ConnId) -> bool {
        self.cycle.phase == Phase::Idle && b.inbuf.is_empty() && b.tr.pending(io, c) == 0
    }

    /// The request in progress is this connection's last (its listener goes away).
    pub fn last_request(&mut self) {
        self.cycle.last_request();
    }

    pub fn on_data(&mut self, cx: &mut Cx, b: &mut Base, c: ConnId, data: &[u8]) {
        match self.cycle.phase {
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
            return self.cycle.buffer_paused(cx, b, c, data);
        }
        if b.inbuf.is_empty() {
            // The common case: parse straight from the receive buffer, keep only a tail.
            let used = self.process(cx, b, c, data);
            if used < data.len() && self.cycle.phase != Phase::Lingering {
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
        match self.cycle.phase {
            Phase::Proxy if self.proxying.body_missing() => {
                self.proxying.end(cx);
                cx.io.close(c);
            }
            // Otherwise the response is still delivered, then the connection closes.
            Phase::Proxy => {}
            Phase::Lingering if b.tr.pending(cx.io, c) == 0 => cx.io.close(c),
            Phase::Lingering => b.tr.close_after_flush(cx.io, c),
            Phase::Body | Phase::Head => cx.io.close(c),
            Phase::Wait | Phase::Compressing => {} // answered (or finished), then closed
            Phase::Idle if b.paused => {}          // finishes in on_flushed
            _ => b.tr.close_after_flush(cx.io, c),
        }
    }

    pub fn on_flushed(&mut self, cx: &mut Cx, b: &mut Base, c: ConnId) {
        if self.cycle.phase == Phase::Proxy {
            return self.proxying.client_flushed(cx);
        }
        if self.cycle.phase == Phase::Compressing {
            if self.compress_more(cx, b, c).is_some()
                && self.cycle.phase == Phase::Idle
                && !b.paused
            {
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
        self.proxying.end(cx);
        self.prepared = None;
        self.pending.clear();
        self.encoding = None;
    }

    /// The connection's deadline passed with nothing left to send.
    pub fn expire(&mut self, cx: &mut Cx, b: &mut Base, c: ConnId) {
        match self.cycle.phase {
            Phase::Idle
            | Phase::Lingering
            | Phase::ProxyHeader
            | Phase::Wait
            | Phase::Compressing => cx.io.close(c),
            Phase::Head | Phase::Body => self.fail(cx, b, c, 408, false),
            Phase::Proxy if self.proxying.in_body() => self.abort_request(cx, b, c, 408),
            Phase::Proxy => {
                // Waiting for the upstream: its read timeout decides.
                let at = cx.io.now() + cx.ctx.set.send_timeout;
                cx.ctx.set_deadline(cx.io, b, c, at);
            }
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
        self.close_after(cx, b, c);
    }

    /// The response that ends the connection is queued: the request is logged and complete
    /// (for `limit_conn`), and the connection lingers.
    fn close_after(&mut self, cx: &mut Cx, b: &mut Base, c: ConnId) {
        cx.ctx.log.end(cx.io, c, b, cx.ctx.id);
        self.prepared = None;
        self.pending.progress.conn = None;
        self.cycle.linger(cx, b, c);
    }

    /// Consumes what it can of `input`; returns the bytes consumed.
    fn process(&mut self, cx: &mut Cx, b: &mut Base, c: ConnId, input: &[u8]) -> usize {
        let mut pos = 0;
        loop {
            if b.paused {
                break;
            }
            match self.cycle.phase {
                Phase::Lingering => return input.len(),
                Phase::Proxy => {
                    // The request body streams to the upstream; anything after it waits.
                    match self.proxy_body(cx, b, c, &input[pos..]) {
                        Some(n) => pos += n,
                        None => return input.len(),
                    }
                    if self.cycle.phase == Phase::Proxy {
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
                            if self.cycle.phase == Phase::Idle {
                                self.cycle.phase = Phase::Head;
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
        let first = !std::mem::take(&mut self.pending.resumed);
        if first {
            cx.ctx.log.request(cx.io, c, req, b);
            // What the last request left is cleared where it was used (the page when its
            // exchange ends, the fallback when the proxy starts, the kept head when it is
            // resumed): here only the guard's progress, one test unless a guard ran.
            self.pending.progress.clear();
        }
        let keep = self.cycle.request(cx, first, req.keep_alive);
        let head_only = req.method == Method::Head;
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
        write::sent(cx, b, c, r.written, r.file);
        if let Some(s) = r.encoder {
            self.encoding = Some((s, !keep || r.close));
            self.cycle.phase = Phase::Compressing;
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
                self.cycle.phase = Phase::Lingering;
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
        let Some(p) = Prepared::start(cx, b, c, (req, route, rq), ch) else {
            self.close_after(cx, b, c);
            return Next::Stop;
        };
        self.prepared = Some(p);
        self.cycle.phase = Phase::Body;
        Next::Continue
    }

    /// Answers a request from the cache; a stale answer's refresh goes out on this
    /// connection once the client has its answer (nginx's background update does the same).
    /// `(keep, more_input)`: the connection stays open after it; more input follows.
    fn hit(
        &mut self,
        cx: &mut Cx,
        b: &mut Base,
        c: ConnId,
        hit: Hit,
        (keep, more_input): (bool, bool),
    ) -> Next {
        let Hit {
            found,
            status,
            line,
            asked,
            refresh,
        } = hit;
        if write::found(cx, b, c, found, (status, &line), &asked).is_none() {
            return Next::Stop;
        }
        let next = self.after_response(cx, b, c, !keep, more_input);
        if let (Some((fill, up, head)), Phase::Idle) = (refresh, self.cycle.phase) {
            let cap = cache::filling(fill, false);
            self.subrequest(cx, b, c, up, head, cap);
            return Next::Hold;
        }
        next
    }

    /// The auth pool's answer `ok` for credentials `key` (`guard::verify`): the request that
    /// waits for it is looked at again; an answer it does not wait for is dropped.
    pub fn verified(&mut self, cx: &mut Cx, b: &mut Base, c: ConnId, key: u128, ok: bool) {
        if self.cycle.phase == Phase::Wait && self.pending.progress.verified(key, ok) {
            self.resume(cx, b, c);
        }
    }

    /// A held request's time came (or what it waited for is there): it is parsed and routed
    /// again, with what was already decided for it kept.
    pub fn resume(&mut self, cx: &mut Cx, b: &mut Base, c: ConnId) {
        if self.cycle.phase != Phase::Wait {
            return;
        }
        self.cycle.phase = Phase::Idle;
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
        self.cycle.phase = Phase::Idle;
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
        self.cycle.next(cx, b, c, close, more_input)
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
        if !b.inbuf.is_empty() || matches!(self.cycle.phase, Phase::Body | Phase::Proxy) {
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
            self.cycle.phase,
            Phase::Body | Phase::Proxy | Phase::Wait | Phase::Compressing
        );
        if b.eof && !b.paused && !busy {
            b.tr.close_after_flush(cx.io, c);
        }
    }

    /// Whether the connection still waits for its PROXY header.
    pub fn awaits_proxy_header(&self) -> bool {
        self.cycle.phase == Phase::ProxyHeader
    }

    /// Bytes before the PROXY header is complete; true once it is, with what followed it in
    /// `b.inbuf`, not processed yet (it may be the h2c preface: the zone decides).
    pub fn proxy_header(&mut self, cx: &mut Cx, b: &mut Base, c: ConnId, data: &[u8]) -> bool {
        self.cycle.proxy_header(cx, b, c, data)
    }
}

#[cfg(test)]
mod cache_tests;
#[cfg(test)]
mod guard_tests;
#[cfg(test)]
mod verify_tests;
