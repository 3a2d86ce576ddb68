//! A request on an HTTP/3 stream: made from its decoded fields with the checks every
//! protocol's requests get, routed and served by the pipeline as the HTTP/2 role's are
//! (`role/multiplex/`), and its answer sent on the stream as HEADERS and DATA frames.
//!
//! What is carried over HTTP/3 so far: every answer the zone makes itself (`return`, static
//! files with Range and conditional requests, compressed or not, redirects, error pages and
//! the pages of `error_page`, the guard's refusals, cache hits). A request whose location
//! proxies, calls gRPC, or must wait (a `limit_req` delay, `auth_request`, a verification,
//! a cache fill in progress) is answered 502 or 503 with a log line that says so: those
//! steps need the exchange and the parking that the HTTP/2 role has and this one does not
//! have yet.

use quinn_proto::{StreamId, VarInt};
use ringx_engine::ConnId;
use ringx_h3proto::Event;
use ringx_http::decoded::{Framing, RequestHead};

use super::conn::H3Conn;
use super::stream::H3Stream;
use crate::ctx::Cx;
use crate::pipeline::fields::HeaderList;
use crate::pipeline::pending::{Pending, Saved};
use crate::pipeline::serve::{serve, Asked};
use crate::pipeline::Step;
use crate::response::{ConnHdr, ErrorPage, Fields};
use crate::role::multiplex::failed::{self, Instead};
use crate::role::multiplex::local::{self, Local};
use crate::role::multiplex::log::RequestLog;
use crate::role::multiplex::routed::{route_fields, Routed};

/// The connection id the pipeline is given for QUIC requests: they have no engine
/// connection, and nothing they start (a subrequest, a wake-up) may name one.
const NO_CONN: ConnId = ConnId(u32::MAX);

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
            // A body nothing here reads (the answers made here do not need it): read and
            // dropped, so the client's window keeps opening.
            Event::Data { .. } | Event::Trailers { .. } => 0,
            Event::GoAway { .. } => 0,
            Event::StreamError { id, code, msg } => {
                tracing::debug!(client = ?self.base.addr, stream = id, "HTTP/3: {msg}");
                let sid = StreamId::from(VarInt::from_u64(id).unwrap_or_default());
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
    fn request(&mut self, cx: &mut Cx, id: u64, head: RequestHead, end: bool) {
        cx.ctx.log.stream_request();
        let mut s = H3Stream::new(cx.io.now(), head.method == b"HEAD");
        if cx.ctx.log.logging() {
            s.log = Some(Box::new(RequestLog::of(&head, "HTTP/3.0")));
        }
        if head.is_connect() {
            return self.answer_error(cx, id, s, 405);
        }
        let framing = match (end, head.content_length) {
            (true, _) => Framing::None,
            (false, Some(n)) => Framing::Length(n),
            (false, None) => Framing::Chunked,
        };
        if let Framing::Length(n) = framing {
            if n > cx.ctx.set.max_body {
                return self.answer_error(cx, id, s, 413);
            }
        }
        let mut pending = Pending::of_fields(head, framing);
        self.serve(cx, id, s, &mut pending);
    }

    /// Makes, routes and serves stream `id`'s request.
    fn serve(&mut self, cx: &mut Cx, id: u64, mut s: H3Stream, pending: &mut Pending) {
        let Some(Saved::Fields(head, framing)) = pending.kept.as_ref().map(|k| &k.request) else {
            return self.answer_error(cx, id, s, 500);
        };
        let (mut length, mut headers) = ([0u8; 20], HeaderList::new());
        let storage = (&mut length, &mut headers);
        let log = (s.log.as_deref_mut(), true);
        let b = &mut self.base;
        let Routed { req, route, rq } =
            match route_fields(cx, b, (head, *framing), storage, log, None) {
                Ok(r) => r,
                Err(status) => return self.answer_error(cx, id, s, status),
            };
        let asked = Asked {
            keep: true,
            status_as: None,
            grpc: false,
        };
        let who = (NO_CONN, id as u32);
        let step = serve(
            cx,
            b,
            who,
            &req,
            (&route, &rq),
            &mut pending.progress,
            asked,
        );
        s.conn_slot = pending.progress.conn.take();
        match step {
            Step::Refuse { status, headers } => {
                let i = failed::refused(cx, (&req, &route, None), (status, &headers), s.head_only);
                self.instead(cx, id, s, i)
            }
            Step::Hit(hit) => {
                s.cache = hit.status;
                // A stale entry's refresh needs an exchange: the next request after expiry
                // over HTTP/1 or HTTP/2 makes it.
                let (resp, file, _refresh) = local::hit(cx, *hit);
                self.answer(id, s, resp, file)
            }
            Step::Proxy(_) | Step::Grpc => {
                tracing::warn!(
                    client = ?self.base.addr,
                    "HTTP/3: this location proxies, which HTTP/3 does not carry yet: 502"
                );
                self.answer_error(cx, id, s, 502)
            }
            Step::WaitUntil(_) | Step::WaitVerify | Step::Ask { .. } => {
                tracing::warn!(
                    client = ?self.base.addr,
                    "HTTP/3: this request must wait (delay, auth_request, verification), \
                     which HTTP/3 does not carry yet: 503"
                );
                self.answer_error(cx, id, s, 503)
            }
            Step::Local | Step::Go(_) => {
                match local::answer(cx, (&req, &route, &rq), None, s.head_only) {
                    Local::Respond(resp, file) => self.answer(id, s, resp, file),
                    Local::Compress(resp, z) => {
                        s.respond(resp, None, Some(z));
                        self.start(id, s)
                    }
                    Local::Again(_) => self.answer_error(cx, id, s, 502),
                }
            }
        }
    }

    /// Answers with what the pipeline gives instead of the location's answer.
    fn instead(&mut self, cx: &mut Cx, id: u64, s: H3Stream, i: Instead) {
        match i {
            Instead::Respond(resp, file) => self.answer(id, s, resp, file),
            // An `error_page` that sends the request to a proxying location.
            Instead::Again(_) => self.answer_error(cx, id, s, 502),
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
    fn answer(
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
