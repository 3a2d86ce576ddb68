//! One HTTP/2 stream's response on its way out, and the turns the connection takes across
//! streams: a DATA frame at a time per stream, within both windows, while the socket's
//! queue stays under its high-water mark; file bodies go by `send_file` behind each frame
//! header, never through memory.

use std::collections::VecDeque;
use std::fs::File;
use std::rc::Rc;
use std::time::Instant;

use ringx_engine::ConnId;
use ringx_h2proto::Conn;

use super::grpc::GrpcCall;
use super::proxy::Proxied;
use crate::accesslog::Entry;
use crate::compress::file_encoder::FileEncoder;
use crate::ctx::base::Base;
use crate::ctx::Cx;
use crate::pipeline::pending::Pending;
use crate::role::exchange::PROXY_HIGH_WATER;
use crate::transport::Transport;

/// Part of a response body waiting for the window.
pub(super) enum Piece {
    /// Bytes, from an offset.
    Bytes(Vec<u8>, usize),
    File(Rc<File>, u64, u64),
    /// A static file compressed as it goes.
    Compress(Box<Squeeze>),
}

impl Piece {
    /// Bytes ready to go (for `Compress`, what the last piece of the file made).
    fn len(&self) -> u64 {
        match self {
            Piece::Bytes(b, at) => (b.len() - at) as u64,
            Piece::File(_, off, end) => end - off,
            Piece::Compress(z) => (z.buf.len() - z.at) as u64,
        }
    }

    /// More of it is still to be made.
    fn unfinished(&self) -> bool {
        matches!(self, Piece::Compress(z) if !z.done)
    }
}

/// A static file too large to compress whole, compressed as the peer's window takes it
/// ([`FileEncoder`]): the next piece of the file is read and compressed only once what the last
/// one made has gone out and the stream's window is open, so a stream holds the encoder and
/// one piece's output, and a peer that grants no window gets nothing more read.
pub(super) struct Squeeze {
    file: Box<FileEncoder>,
    buf: Vec<u8>,
    at: usize,
    /// The encoder's end is in `buf`.
    done: bool,
}

impl Squeeze {
    pub fn new(file: Box<FileEncoder>) -> Squeeze {
        Squeeze {
            file,
            buf: Vec::new(),
            at: 0,
            done: false,
        }
    }

    /// Compresses pieces of the file until some output is ready or the body is complete.
    fn refill(&mut self) -> std::io::Result<()> {
        self.buf.clear();
        self.at = 0;
        let buf = &mut self.buf;
        while buf.is_empty() && !self.done {
            self.done = self.file.step(&mut |d| buf.extend_from_slice(d))?;
        }
        Ok(())
    }
}

/// What the access log keeps of a request.
pub(super) struct StreamLog {
    pub request: Vec<u8>,
    pub referer: Vec<u8>,
    pub user_agent: Vec<u8>,
    /// The request's `$request_id`, made at its start when the log is JSON (the one its
    /// headers send is the one logged).
    pub request_id: Option<[u8; 32]>,
}

impl StreamLog {
    /// The log's view of a new request: its line ("METHOD path HTTP/2.0").
    pub fn of(head: &ringx_h2proto::RequestHead) -> StreamLog {
        let mut request = head.method.clone();
        request.push(b' ');
        request.extend_from_slice(head.path.as_deref().unwrap_or(b"-"));
        request.extend_from_slice(b" HTTP/2.0");
        StreamLog {
            request,
            referer: Vec::new(),
            user_agent: Vec::new(),
            request_id: None,
        }
    }
}

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
    pub out: VecDeque<Piece>,
    /// The body is complete once what waits is sent: END_STREAM then.
    pub end: bool,
    /// END_STREAM went out.
    pub ended: bool,
    /// Trailer fields to end the stream with, after the body (a proxied response's).
    pub trailers: Vec<(Vec<u8>, Vec<u8>)>,
    pub proxy: Option<Box<Proxied>>,
    /// A gRPC call (`grpc://`): its upstream stream and the response bytes received.
    pub grpc: Option<Box<GrpcCall>>,
    pub log: Option<Box<StreamLog>>,
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
            out: VecDeque::new(),
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
        if let Some(Piece::Compress(z)) = self.out.front_mut() {
            if z.at == z.buf.len() && !z.done {
                if conn.capacity(id) == 0 {
                    return Turn::Blocked; // nothing is read before the peer can take it
                }
                if let Err(e) = z.refill() {
                    tracing::warn!("compressing a static file for stream {id}: {e}");
                    return Turn::Failed;
                }
            }
            if z.done && z.at == z.buf.len() {
                self.out.pop_front();
            }
        }
        let queued: u64 = match (&self.proxy, &self.grpc) {
            (_, Some(g)) => g.pending().len() as u64,
            (Some(p), _) if p.head_done => p.pending().len() as u64,
            (Some(_), _) => 0,
            (None, None) => self.out.iter().map(Piece::len).sum(),
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
            (None, None) => self.out.front().map_or(0, Piece::len),
        };
        let n = cap.min(front);
        // With trailers to follow, the last DATA frame does not end the stream.
        let last = self.end
            && n == queued
            && self.trailers.is_empty()
            && !self.out.iter().any(Piece::unfinished);
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
            Some(p) => {
                let out = p.out();
                tr.write(cx.io, c, &out.pending()[..n as usize]);
                out.take(n as usize);
                let mark = out.high_water.unwrap_or(PROXY_HIGH_WATER);
                if out.notify && (out.pending().len() as u64) < mark / 2 {
                    out.notify = false;
                    p.resume_upstream(cx);
                }
            }
            None => {
                let piece = self.out.front_mut().expect("queued");
                match piece {
                    Piece::Bytes(b, at) => {
                        tr.write(cx.io, c, &b[*at..*at + n as usize]);
                        *at += n as usize;
                    }
                    Piece::File(f, off, _) => {
                        tr.send_file(cx.io, c, f.clone(), *off, n);
                        *off += n;
                    }
                    Piece::Compress(z) => {
                        tr.write(cx.io, c, &z.buf[z.at..z.at + n as usize]);
                        z.at += n as usize;
                    }
                }
                if piece.len() == 0 && !piece.unfinished() {
                    self.out.pop_front();
                }
            }
        }
        if last {
            self.ended = true;
            Turn::Ended
        } else {
            Turn::More
        }
    }

    /// Counts the response and writes its access log line (`cut`: it did not complete).
    pub fn log_end(&self, cx: &mut Cx, b: &Base, _c: ConnId, cut: bool) {
        let status = match self.status {
            0 => 499,
            s => s,
        };
        let _ = cut;
        let Some(l) = &self.log else {
            return cx.ctx.log.stream_end(cx.io, None, status);
        };
        let e = Entry {
            client: b.addr,
            tls: b.tr.tls_info(),
            request: &l.request,
            status,
            body_bytes: self.body_out,
            referer: &l.referer,
            user_agent: &l.user_agent,
            request_time: cx.io.now().saturating_duration_since(self.start),
            zone: cx.ctx.id,
            cache: self.cache,
            request_id: l.request_id,
        };
        cx.ctx.log.stream_end(cx.io, Some(e), status);
    }
}

/// Writes the control frames the connection queued, before a frame of ours.
fn flush(conn: &mut Conn, tr: &mut Transport, cx: &mut Cx, c: ConnId) {
    if !conn.out().is_empty() {
        tr.write(cx.io, c, conn.out());
        conn.clear_out();
    }
}
