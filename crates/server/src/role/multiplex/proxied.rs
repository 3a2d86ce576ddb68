//! Proxied streams of a multiplexed connection (HTTP/2's and HTTP/3's): each is an
//! [`Exchange`] to an HTTP/1.1 upstream, through the zone's keep-alive pools (shared with
//! HTTP/1 clients), with the exchange's retries, timeouts and failures unchanged.
//!
//! The exchange writes its response for the client into the stream's
//! [`MemOut`](crate::transport::MemOut) instead of a socket: the head is turned into
//! HEADERS as soon as it is there, the body leaves as DATA when the window allows, and the
//! exchange's back-pressure (pause the upstream above its high-water mark, resume once the
//! client's output drains) follows the peer's window. The request body goes the other way
//! as it arrives, chunked when the request gave no length; the peer's window reopens only
//! once the upstream has taken the bytes, so an upstream that reads slowly slows the client
//! rather than filling memory.

use ringx_engine::ConnId;
use ringx_h2proto::Framing;
use ringx_http::Request;

use crate::answer::{PageCtx, ReqCtx};
use crate::ctx::base::Base;
use crate::ctx::Cx;
use crate::pipeline::cache;
use crate::pipeline::routing::Route;
use crate::response::Fields;
use crate::role::exchange::capture::Capture;
use crate::role::exchange::{Exchange, Outcome, MAX_REPLAY, PROXY_HIGH_WATER};
use crate::role::proxy_start;
use crate::role::upstream::UpEvent;
use crate::transport::{MemOut, Transport};

/// What the proxied streams of one connection may hold together, response bytes read
/// from their upstreams and not yet sent (their peer's windows closed): each stream stops
/// reading from its upstream past its share, [`CONN_BUDGET`] over the connection's proxied
/// streams, no less than [`STREAM_FLOOR`] and no more than one HTTP/1 exchange's mark. One
/// stream streams as an HTTP/1.1 client's response does; 128 streams whose peer opens no
/// window hold 16 KiB each (plus one read), not 256 KiB each.
pub(crate) const CONN_BUDGET: u64 = 1 << 20;
pub(crate) const STREAM_FLOOR: u64 = 16 * 1024;

/// Shares [`CONN_BUDGET`] among a connection's `proxied` streams (when one starts): each
/// stream's mark, and what its upstream may deliver after a pause ([`Io::limit_recv`]).
///
/// [`Io::limit_recv`]: ringx_engine::Io::limit_recv
pub(crate) fn share_budget(cx: &mut Cx, proxied: Vec<&mut Proxied>) {
    let n = proxied.len().max(1) as u64;
    let mark = (CONN_BUDGET / n).clamp(STREAM_FLOOR, PROXY_HIGH_WATER);
    for p in proxied {
        p.out().high_water = Some(mark);
        if let Some(u) = p.ex.up {
            cx.io.limit_recv(u, mark as u32);
        }
    }
}

/// Why a stream could not be proxied: the status to answer with, the location's error
/// pages, and the capture it was started with (a cache fill may answer from a stale copy).
pub(crate) type Failed = (u16, Option<Box<PageCtx>>, Option<Box<Capture>>);

/// What a proxied stream does after an event of its exchange ([`Proxied::step`]).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum ProxyStep {
    /// More is to come; what the exchange wrote (the head, body bytes) goes out as the
    /// window allows.
    Going,
    /// The response is complete: these trailers end it, after the body.
    Done(Vec<(Vec<u8>, Vec<u8>)>),
    /// The response a fill brought is not the client's, or the fill failed (`Some`: with
    /// that status): the cache answers, from its entry.
    CacheAnswers(Option<u16>),
    /// The server's own request the stream waited for (`auth_request`) ended so.
    Answered(Outcome),
    /// No response can be had: answer this status.
    Failed(u16),
    /// Part of the response went out and the rest cannot come: the stream is cut.
    Cut,
}

/// A stream being proxied.
pub(crate) struct Proxied {
    pub ex: Box<Exchange>,
    /// The stream as the exchange's client: the connection's identity, and the output
    /// the exchange writes.
    pub base: Base,
    /// The response head was sent as HEADERS.
    pub head_done: bool,
    /// The request body goes chunked (it has no content-length).
    pub chunked: bool,
    /// Request body bytes written to the upstream and not yet released to the peer's
    /// window (the upstream's queue was over its high-water mark).
    pub held: usize,
    /// The location's error pages, for a failure to reach the upstream.
    pub page: Option<Box<PageCtx>>,
    /// The request body ended (END_STREAM, or trailers).
    pub body_done: bool,
}

impl Proxied {
    pub fn out(&mut self) -> &mut MemOut {
        match &mut self.base.tr {
            Transport::Mem(m) => m,
            _ => unreachable!("a proxied stream's output is a MemOut"),
        }
    }

    /// What the exchange wrote and the stream has not sent.
    pub fn pending(&self) -> &[u8] {
        match &self.base.tr {
            Transport::Mem(m) => m.pending(),
            _ => &[],
        }
    }

    /// Writes the next `n` bytes of what the exchange wrote to `tr` (a frame of the stream
    /// carries them); an upstream paused for back-pressure reads again once what is left is
    /// under half the stream's mark.
    pub fn write(&mut self, tr: &mut Transport, cx: &mut Cx, c: ConnId, n: usize) {
        self.pass(cx, n, |io, bytes| tr.write(io, c, bytes));
    }

    /// Hands the next `n` bytes of what the exchange wrote to `put` (HTTP/3 frames them
    /// into its stream); an upstream paused for back-pressure reads again once what is left
    /// is under half the stream's mark.
    pub fn pass(&mut self, cx: &mut Cx, n: usize, put: impl FnOnce(&mut ringx_engine::Io, &[u8])) {
        let out = self.out();
        put(cx.io, &out.pending()[..n]);
        out.take(n);
        let mark = out.high_water.unwrap_or(PROXY_HIGH_WATER);
        if out.notify && (out.pending().len() as u64) < mark / 2 {
            out.notify = false;
            self.ex.resume_upstream(cx);
        }
    }

    /// Starts an exchange for `req` (routed by `route` to a `proxy_pass` location, through
    /// the same preparation as HTTP/1 requests) on behalf of the connection `b`; `Err`: the
    /// status to answer with, and the location's error pages.
    pub fn start(
        cx: &mut Cx,
        b: &Base,
        c: ConnId,
        (req, route, rq): (&Request, &Route<'_>, &ReqCtx),
        framing: Framing,
        capture: Option<Capture>,
    ) -> Result<Box<Proxied>, Failed> {
        let mut ex = Box::<Exchange>::default();
        let fill = capture.as_ref().and_then(|x| x.fill.as_deref());
        let Some(page) = proxy_start::prepare(cx.ctx, b, (req, route, rq), &mut ex, None, fill)
        else {
            return Err((502, None, capture.map(Box::new)));
        };
        ex.capture = capture.map(Box::new);
        let has_body = framing != Framing::None;
        ex.has_body = has_body;
        ex.replay = has_body.then(Vec::new);
        // HTTP/1.0 framing towards the stream: the exchange hands over the body itself (a
        // chunked response decoded, a compressed one as the encoder makes it), which DATA
        // frames carry.
        ex.version = ringx_http::Version::Http10;
        ex.keep = false;
        ex.log = false;
        ex.pass_trailers = true;
        let mut p = Box::new(Proxied {
            ex,
            base: Proxied::stream_base(cx, b),
            head_done: false,
            chunked: framing == Framing::Chunked,
            held: 0,
            body_done: false,
            page,
        });
        if p.ex.send(cx, &p.base, c).is_err() {
            return Err((502, p.page.take(), p.ex.capture.take()));
        }
        Ok(p)
    }

    /// A request of the server's own (`head` to `upstream`: an `auth_request` subrequest,
    /// a background cache update) whose response `capture` receives and no client sees.
    /// None: it could not be sent (no upstream state, or no server to try).
    pub fn sub(
        cx: &mut Cx,
        b: &Base,
        c: ConnId,
        upstream: usize,
        head: Vec<u8>,
        capture: Capture,
    ) -> Option<Box<Proxied>> {
        let (pools, gen) = cx.ctx.current_pools()?;
        let retries = pools.defs.list[upstream].retries;
        let ex = Box::new(Exchange {
            log: false,
            ..Exchange::own((gen, upstream, retries), head, capture, Vec::new())
        });
        let mut p = Box::new(Proxied {
            ex,
            base: Proxied::stream_base(cx, b),
            head_done: false,
            chunked: false,
            held: 0,
            body_done: false,
            page: None,
        });
        p.ex.send(cx, &p.base, c).ok()?;
        Some(p)
    }

    /// The stream as an exchange's client: the connection's identity, output to memory.
    fn stream_base(cx: &Cx, b: &Base) -> Base {
        let mut base = Base::new(cx.io.now());
        base.gen = b.gen;
        base.listener = b.listener;
        base.addr = b.addr;
        base.local = b.local;
        base.tr = Transport::Mem(Box::default());
        base
    }

    /// Request body bytes (`end`: the last), framed for the upstream. Returns the bytes of
    /// the peer's window to give back now.
    pub fn body(&mut self, cx: &mut Cx, data: &[u8], end: bool) -> usize {
        self.body_done |= end;
        if !self.chunked {
            return self.forward(cx, data, data.len());
        }
        let mut framed = Vec::with_capacity(data.len() + 16);
        if !data.is_empty() {
            framed.extend_from_slice(format!("{:x}\r\n", data.len()).as_bytes());
            framed.extend_from_slice(data);
            framed.extend_from_slice(b"\r\n");
        }
        if end {
            framed.extend_from_slice(b"0\r\n\r\n");
        }
        self.forward(cx, &framed, data.len())
    }

    /// Trailers: the end of a chunked request body (with no length, there is nowhere to
    /// put them: dropped, as nginx does).
    pub fn trailers(&mut self, cx: &mut Cx, lines: &[u8]) {
        self.body_done = true;
        if !self.chunked {
            return;
        }
        let mut end = b"0\r\n".to_vec();
        end.extend_from_slice(&ringx_http::trailer::allowed_lines(lines));
        end.extend_from_slice(b"\r\n");
        self.forward(cx, &end, 0);
    }

    /// The response's trailer fields, once the exchange is done: an HTTP/1.1 upstream's
    /// chunked trailer section as HTTP/2 fields (names lowercased, values trimmed), without
    /// the fields that may not be trailers (`ringx_http::trailer`; those that belong to a
    /// connection or to framing an HTTP/2 peer also treats as malformed, RFC 9113 §8.2.2).
    pub fn response_trailers(&mut self) -> Vec<(Vec<u8>, Vec<u8>)> {
        let Some(lines) = self.ex.trailers.take() else {
            return Vec::new();
        };
        // The chunked decoder validated the lines: a token, `:`, a value without CR, LF
        // or NUL.
        lines
            .split(|&b| b == b'\n')
            .filter_map(|l| {
                let l = l.strip_suffix(b"\r").unwrap_or(l);
                let i = l.iter().position(|&b| b == b':')?;
                let name = l[..i].to_ascii_lowercase();
                let value = l[i + 1..].trim_ascii().to_vec();
                (!name.is_empty() && !ringx_http::trailer::is_forbidden_trailer(&name))
                    .then_some((name, value))
            })
            .collect()
    }

    /// Writes request body bytes to the exchange's upstream (and its replay copy); returns
    /// the `flow` bytes of the peer's window to give back now, or 0 when they wait for the
    /// upstream's queue to drain (`UpEvent::Flushed`).
    fn forward(&mut self, cx: &mut Cx, bytes: &[u8], flow: usize) -> usize {
        let ex = &mut self.ex;
        if let Some(r) = ex.replay.as_mut() {
            if r.len() + bytes.len() <= MAX_REPLAY {
                r.extend_from_slice(bytes);
            } else {
                ex.replay = None;
            }
        }
        let Some(u) = ex.up else {
            return flow;
        };
        if let Some(up) = cx.ups.get_mut(u) {
            up.tr.write(cx.io, u, bytes);
            let send = cx.ctx.pools(ex.dial.gen).defs.list[ex.dial.upstream].send_timeout;
            up.deadline = cx.io.now() + send; // busy receiving, not idle
        }
        if cx.io.pending(u) > PROXY_HIGH_WATER {
            self.held += flow;
            cx.io.notify_when_flushed(u);
            return 0;
        }
        flow
    }

    /// The upstream failed with `status` while the request body (with a length) still
    /// arrives, and the location's error page re-serves the request at a proxying location
    /// for it: the upstream is let go, and the rest of the body is read and kept first (the
    /// role fails the stream again once the body ended, from the exchange's `gave_up`).
    /// Returns the upstream connection let go (its events are no longer the stream's) and
    /// the request body held back for its queue (nothing waits there now: the peer may send
    /// on). None: the stream fails now.
    pub fn reads_rest_first(
        &mut self,
        cx: &mut Cx,
        status: u16,
    ) -> Option<(Option<ConnId>, usize)> {
        let reading = self.ex.has_body && !self.body_done && !self.chunked;
        let up = self.ex.up;
        let page = self.page.as_deref();
        if !self.ex.reads_rest_first(cx, (reading, page), status) {
            return None;
        }
        Some((up, std::mem::take(&mut self.held)))
    }

    /// Lets go of the upstream connection (closed: the exchange was cut).
    pub fn detach(&mut self, cx: &mut Cx) {
        // The handle goes with it: once closed, the slot may carry another client's upstream.
        let Some(u) = self.ex.up.take() else { return };
        if let Some(up) = cx.ups.get_mut(u) {
            if up.client.is_some() {
                up.abandon(cx.io, u);
                let pools = cx.ctx.pools(self.ex.dial.gen);
                pools.finished(self.ex.dial.upstream, self.ex.dial.server);
            }
        }
    }

    /// An event on upstream connection `u`: what the exchange made of it, and the bytes of
    /// the peer's window to give back (request body the upstream has now taken).
    pub fn event(&mut self, cx: &mut Cx, c: ConnId, u: ConnId, ev: UpEvent) -> (Outcome, usize) {
        let released = match ev {
            UpEvent::Flushed => std::mem::take(&mut self.held),
            _ => 0,
        };
        (self.ex.event(cx, &mut self.base, c, u, ev), released)
    }

    /// Hands an event of upstream connection `u` to the exchange: what the stream does next,
    /// and the bytes of the peer's window to give back. `waiting`: the stream's request waits
    /// for this exchange (an `auth_request` subrequest).
    pub fn step(
        &mut self,
        cx: &mut Cx,
        (c, u): (ConnId, ConnId),
        ev: UpEvent,
        waiting: bool,
    ) -> (ProxyStep, usize) {
        let (outcome, released) = self.event(cx, c, u, ev);
        // A fill's response the client is not sent (a revalidation's 304, a status the stale
        // copy stands in for): the cache answers when it ends.
        let cache_answers =
            (self.ex.capture.as_ref()).is_some_and(|x| !x.to_client && x.fill.is_some());
        let step = match outcome {
            Outcome::Pending => ProxyStep::Going,
            o if waiting => ProxyStep::Answered(o),
            Outcome::Done if cache_answers => ProxyStep::CacheAnswers(None),
            Outcome::GiveUp(st) if cache_answers => ProxyStep::CacheAnswers(Some(st)),
            _ if cache_answers => ProxyStep::CacheAnswers(Some(502)),
            Outcome::Done => {
                if let Some(mut cap) = self.ex.capture.take() {
                    cache::finish(&mut cap, cx.ctx.wall_ms(cx.io.now()));
                }
                ProxyStep::Done(self.response_trailers())
            }
            Outcome::GiveUp(st) => ProxyStep::Failed(st),
            Outcome::Cut | Outcome::Upgrade(_) => ProxyStep::Cut,
        };
        (step, released)
    }

    /// The response head, once the exchange wrote it (whole, as fields) and it was not sent
    /// yet; taken.
    pub fn take_head(&mut self) -> Option<Box<Fields>> {
        if self.head_done {
            return None;
        }
        match &mut self.base.tr {
            Transport::Mem(m) => m.head.take(),
            _ => None,
        }
    }

    /// A head [`Proxied::take_head`] took and could not send yet: kept for the next try.
    pub fn keep_head(&mut self, head: Box<Fields>) {
        if let Transport::Mem(m) = &mut self.base.tr {
            m.head = Some(head);
        }
    }
}
