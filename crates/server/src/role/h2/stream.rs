//! One HTTP/2 stream's response on its way out, and the turns the connection takes across
//! streams: a DATA frame at a time per stream, within both windows, while the socket's
//! queue stays under its high-water mark; file bodies go by `send_file` behind each frame
//! header, never through memory.

use std::time::Instant;

use ringx_engine::ConnId;
use ringx_h2proto::Conn;

use crate::ctx::base::Base;
use crate::ctx::Cx;
use crate::pipeline::pending::Pending;
use crate::role::multiplex::body::Pieces;
use crate::role::multiplex::grpc::GrpcCall;
use crate::role::multiplex::log::{self, Ended, RequestLog};
use crate::role::multiplex::proxied::Proxied;
use crate::transport::Transport;

/// A stream's request and response.
pub(super) struct H2Stream {
    pub id: u32,
    pub start: Instant,
    /// The request was HEAD.
    pub head_only: bool,
    /// The response head went out.
    pub head_sent: bool,
    pub status: u16,
    /// Request body bytes received.
    pub body_in: u64,
    /// Response body bytes sent.
    pub body_out: u64,
    /// The response body waiting to go (local answers).
    pub out: Pieces,
    /// The body is complete once what waits is sent: END_STREAM then.
    pub end: bool,
    /// END_STREAM went out.
    pub ended: bool,
    /// Trailer fields to end the stream with, after the body (a proxied response's).
    pub trailers: Vec<(Vec<u8>, Vec<u8>)>,
    pub proxy: Option<Box<Proxied>>,
    /// A gRPC call (`grpc://`): its upstream stream and the response bytes received.
    pub grpc: Option<Box<GrpcCall>>,
    pub log: Option<Box<RequestLog>>,
    /// The location's `limit_conn` counts this stream while it lives.
    pub conn_slot: Option<crate::guard::limit::ConnSlot>,
    /// The location's `limit_req` charged the request (an `error_page` location it is
    /// re-served at does not charge it again, as in nginx).
    pub limited: bool,
    /// The request waits (a `limit_req` delay, an `auth_request` answer, another request's
    /// cache fill) and is looked at again then.
    pub pending: Option<Box<Pending>>,
    /// When the waiting request is looked at again (None: when what it waits for arrives).
    pub wake_at: Option<Instant>,
    /// The proxy cache's status for the log ("" where the location has no cache).
    pub cache: &'static str,
}

/// What one turn of a stream did.
#[derive(PartialEq, Eq)]
pub(super) enum Turn {
    /// Sent a frame; more waits.
    More,
    /// Output waits, and the window is closed.
    Blocked,
    /// Nothing to send now (waiting on its upstream).
    Idle,
    /// Sent its last frame.
    Ended,
    /// Its body cannot be completed (a file being compressed could not be read): the stream
    /// must be reset.
    Failed,
}

impl H2Stream {
    pub fn new(id: u32, start: Instant, head_only: bool) -> H2Stream {
        H2Stream {
            id,
            start,
            head_only,
            head_sent: false,
            status: 0,
            body_in: 0,
            body_out: 0,
            out: Pieces::default(),
            end: false,
            ended: false,
            trailers: Vec::new(),
            conn_slot: None,
            limited: false,
            proxy: None,
            grpc: None,
            log: None,
            pending: None,
            wake_at: None,
            cache: "",
        }
    }

    /// Whether response bytes wait to be sent.
    pub fn has_output(&self) -> bool {
        !self.out.is_empty()
            || self.proxy.as_ref().is_some_and(|p| !p.pending().is_empty())
            || self.grpc.as_ref().is_some_and(|g| !g.pending().is_empty())
    }

    /// Sends at most one DATA frame.
    pub(super) fn turn(
        &mut self,
        conn: &mut Conn,
        tr: &mut Transport,
        cx: &mut Cx,
        c: ConnId,
    ) -> Turn {
        let id = self.id;
        match self.out.prepare(conn.capacity(id) > 0) {
            Ok(true) => {}
            Ok(false) => return Turn::Blocked,
            Err(e) => {
                tracing::warn!("compressing a static file for stream {id}: {e}");
                return Turn::Failed;
            }
        }
        let queued: u64 = match (&self.proxy, &self.grpc) {
            (_, Some(g)) => g.pending().len() as u64,
            (Some(p), _) if p.head_done => p.pending().len() as u64,
            (Some(_), _) => 0,
            (None, None) => self.out.queued(),
        };
        if queued == 0 {
            if !self.end || !self.head_sent {
                return Turn::Idle;
            }
            flush(conn, tr, cx, c);
            if self.trailers.is_empty() {
                tr.write(cx.io, c, &conn.data_frame(id, 0, true));
            } else {
                // HEADERS are not flow controlled: the trailers go now, ending the stream.
                let mut out = Vec::with_capacity(64);
                let fields = std::mem::take(&mut self.trailers);
                conn.send_trailers(
                    &mut out,
                    id,
                    fields.iter().map(|(n, v)| (n.as_slice(), v.as_slice())),
                );
                tr.write(cx.io, c, &out);
            }
            self.ended = true;
            return Turn::Ended;
        }
        let cap = conn.capacity(id).min(conn.max_frame()) as u64;
        if cap == 0 {
            return Turn::Blocked;
        }
        let front = match (&self.proxy, &self.grpc) {
            (_, Some(g)) => g.pending().len() as u64,
            (Some(p), _) => p.pending().len() as u64,
            (None, None) => self.out.front_len(),
        };
        let n = cap.min(front);
        // With trailers to follow, the last DATA frame does not end the stream.
        let last = self.end && n == queued && self.trailers.is_empty() && !self.out.unfinished();
        flush(conn, tr, cx, c);
        let head = conn.data_frame(id, n as usize, last);
        tr.write(cx.io, c, &head);
        self.body_out += n;
        if let Some(g) = &mut self.grpc {
            tr.write(cx.io, c, &g.pending()[..n as usize]);
            g.sent(cx, n as usize);
            return if last {
                self.ended = true;
                Turn::Ended
            } else {
                Turn::More
            };
        }
        match &mut self.proxy {
            Some(p) => p.write(tr, cx, c, n as usize),
            None => self.out.write(tr, cx, c, n),
        }
        if last {
            self.ended = true;
            Turn::Ended
        } else {
            Turn::More
        }
    }

    /// Request body bytes, to the stream's upstream (a proxied request's exchange, a gRPC
    /// call's upstream stream); returns how much of them the peer's window gets back now
    /// (all of them where the request goes nowhere, and they are dropped).
    pub fn forward(&mut self, cx: &mut Cx, data: &[u8], end: bool) -> usize {
        match (&mut self.proxy, &mut self.grpc) {
            (Some(p), _) => p.body(cx, data, end),
            (_, Some(g)) => g.body(cx, data, end),
            _ => data.len(),
        }
    }

    /// The request's trailers: kept with a waiting request's body, the end of a gRPC call's
    /// request, or the end of a proxied chunked body.
    pub fn trailers(&mut self, cx: &mut Cx, lines: &[u8]) {
        if let Some(k) = self.pending.as_mut().and_then(|p| p.kept.as_mut()) {
            k.body.end = true;
            k.body.trailers = Some(lines.to_vec());
        } else if let Some(g) = self.grpc.as_mut() {
            g.end_request(cx);
        } else if let Some(p) = self.proxy.as_mut() {
            p.trailers(cx, lines);
        }
    }

    /// Counts the response and writes its access log line.
    pub fn log_end(&self, cx: &mut Cx, b: &Base) {
        let e = Ended {
            start: self.start,
            status: self.status,
            body_bytes: self.body_out,
            cache: self.cache,
        };
        log::log_end(cx, b, self.log.as_deref(), e);
    }
}

/// Writes the control frames `conn` queued, before a frame of ours.
pub(super) fn flush(conn: &mut Conn, tr: &mut Transport, cx: &mut Cx, c: ConnId) {
    if !conn.out().is_empty() {
        tr.write(cx.io, c, conn.out());
        conn.clear_out();
    }
}
