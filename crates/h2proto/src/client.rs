//! The client side of an HTTP/2 connection ([`ClientConn`]), for a proxy's connections to
//! HTTP/2 upstreams (gRPC): our preface and SETTINGS, requests on the odd streams we open,
//! their bodies within the server's windows, and the server's frames read one at a time
//! into responses, body bytes and trailers.
//!
//! It keeps its own books beside the server side's [`Conn`](crate::Conn) (the frame codec,
//! HPACK, SETTINGS and the stream table are shared): which side opens streams changes most
//! of what a frame means. A server is trusted less than nothing here either: every stream
//! and connection error of RFC 9113 is detected, responses are checked as requests are
//! (`response.rs`), header lists are bounded while decoding and PING/SETTINGS floods end
//! the connection.
//!
//! ```
//! use std::time::Instant;
//! use ringx_h2proto::client::{ClientConn, ClientEvent, ClientStep};
//! use ringx_h2proto::{frame, Conn, Event, Limits, Step};
//!
//! let mut client = ClientConn::new(Limits::default());
//! let mut server = Conn::new(Limits::default());
//! let mut to_server = client.out().to_vec(); // preface, SETTINGS, WINDOW_UPDATE
//! client.clear_out();
//! let fields: [(&[u8], &[u8]); 4] = [
//!     (b":method", b"GET"), (b":scheme", b"http"), (b":path", b"/"), (b":authority", b"a"),
//! ];
//! let id = client.open(&mut to_server, fields, true);
//! let mut pos = 0;
//! while let Step::Skip(n) | Step::Event(n, _) = server.feed(&to_server[pos..], Instant::now()) {
//!     pos += n;
//! }
//! let mut to_client = server.out().to_vec();
//! server.send_headers(&mut to_client, id, 204, [], true);
//! let mut pos = 0;
//! let mut status = 0;
//! loop {
//!     match client.feed(&to_client[pos..], Instant::now()) {
//!         ClientStep::Event(n, ClientEvent::Response { status: s, .. }) => { status = s; pos += n }
//!         ClientStep::Event(n, _) | ClientStep::Skip(n) => pos += n,
//!         ClientStep::Need => break,
//!         ClientStep::Fatal(e) => panic!("{e:?}"),
//!     }
//! }
//! assert_eq!(status, 204);
//! assert!(!client.is_open(id));
//! ```

use crate::events::ConnError;
use crate::frame::{self, flag, kind, ErrorCode, DEFAULT_WINDOW, PREFACE};
use crate::hpack::{Decoder, Encoder};
use crate::limits::{Limits, Rate, Why};
use crate::recv::Block;
use crate::response::FieldList;
use crate::settings::{self, PeerSettings};
use crate::streams::{Stream, Streams};

/// What reading the server's frames produces.
#[derive(Debug, PartialEq, Eq)]
pub enum ClientEvent<'a> {
    /// The final response head of stream `id` (informational 1xx heads are skipped).
    Response {
        id: u32,
        status: u16,
        fields: FieldList,
        end_stream: bool,
    },
    /// Response body bytes: [`release`](ClientConn::release) them once consumed.
    Data {
        id: u32,
        data: &'a [u8],
        end_stream: bool,
    },
    /// Trailers, which end the stream.
    Trailers { id: u32, fields: FieldList },
    /// The stream is gone: reset by the server (`why` None) or by us for its fault.
    Reset {
        id: u32,
        code: ErrorCode,
        why: Option<Why>,
    },
    /// The server processes no stream above `last`; those are refused (safe to retry).
    GoAway { last: u32, code: ErrorCode },
    /// A send window grew: queued request bodies may go on.
    WindowOpened,
}

/// One step of [`ClientConn::feed`].
#[derive(Debug, PartialEq, Eq)]
pub enum ClientStep<'a> {
    Need,
    Skip(usize),
    Event(usize, ClientEvent<'a>),
    /// The connection failed; GOAWAY is queued. Nothing more is read.
    Fatal(ConnError),
}

/// The client side of one HTTP/2 connection.
pub struct ClientConn {
    limits: Limits,
    first_frame: bool,
    peer: PeerSettings,
    streams: Streams,
    /// The id the next stream gets.
    next_id: u32,
    /// The server's GOAWAY: the last stream it processes.
    goaway_recv: Option<u32>,
    goaway_sent: bool,
    conn_send: i64,
    conn_recv: i64,
    conn_unacked: u32,
    decoder: Decoder,
    encoder: Encoder,
    block: Option<Block>,
    control: Rate,
    empty: Rate,
    out: Vec<u8>,
    stats: [u32; Why::ALL.len()],
}

type Res<'a> = Result<Option<ClientEvent<'a>>, ConnError>;

fn err<'a>(code: ErrorCode, why: Why, msg: &'static str) -> Res<'a> {
    Err(ConnError { code, why, msg })
}

impl ClientConn {
    /// A connection whose preface, SETTINGS and connection window update are queued.
    pub fn new(limits: Limits) -> ClientConn {
        let mut out = PREFACE.to_vec();
        settings::write_client(
            &mut out,
            limits.initial_window,
            limits.max_frame_size,
            limits.max_header_list_size,
        );
        let conn_window = i64::from(limits.conn_window.max(DEFAULT_WINDOW));
        if conn_window > i64::from(DEFAULT_WINDOW) {
            frame::write_window_update(
                &mut out,
                0,
                (conn_window - i64::from(DEFAULT_WINDOW)) as u32,
            );
        }
        ClientConn {
            limits,
            first_frame: true,
            peer: PeerSettings::default(),
            streams: Streams::default(),
            next_id: 1,
            goaway_recv: None,
            goaway_sent: false,
            conn_send: i64::from(DEFAULT_WINDOW),
            conn_recv: conn_window,
            conn_unacked: 0,
            decoder: Decoder::default(),
            encoder: Encoder::default(),
            block: None,
            control: Rate::new(),
            empty: Rate::new(),
            out,
            stats: [0; Why::ALL.len()],
        }
    }

    /// Frames queued by the connection itself: write them before anything else.
    pub fn out(&self) -> &[u8] {
        &self.out
    }

    pub fn clear_out(&mut self) {
        self.out.clear();
    }

    /// Stream and connection errors by reason since the last call.
    pub fn take_stats(&mut self) -> impl Iterator<Item = (Why, u32)> + '_ {
        let s = std::mem::take(&mut self.stats);
        Why::ALL.into_iter().zip(s).filter(|&(_, n)| n > 0)
    }

    /// Whether another stream may be opened now: the server's concurrency limit, its GOAWAY
    /// and ours, and the stream ids left.
    pub fn can_open(&self) -> bool {
        let max = self.peer.max_concurrent_streams.unwrap_or(u32::MAX) as usize;
        self.goaway_recv.is_none()
            && !self.goaway_sent
            && self.streams.len() < max
            && self.next_id < (1 << 31) - 2
    }

    /// Whether the server or we said GOAWAY: no stream will be opened any more.
    pub fn going_away(&self) -> bool {
        self.goaway_recv.is_some() || self.goaway_sent
    }

    pub fn open_streams(&self) -> usize {
        self.streams.len()
    }

    pub fn is_open(&self, id: u32) -> bool {
        self.streams.contains_key(&id)
    }

    /// The largest DATA payload one frame may carry.
    pub fn max_frame(&self) -> usize {
        self.peer.max_frame_size as usize
    }

    /// Bytes of stream `id`'s request body that may go now (both windows).
    pub fn capacity(&self, id: u32) -> usize {
        match self.streams.get(&id) {
            Some(s) if !s.local_closed => s.send_window.min(self.conn_send).max(0) as usize,
            _ => 0,
        }
    }

    /// Opens a stream with a request head (`fields`: the pseudo-headers first, lowercase
    /// names, nothing connection-specific) and returns its id. Check
    /// [`can_open`](ClientConn::can_open) first.
    pub fn open<'a>(
        &mut self,
        out: &mut Vec<u8>,
        fields: impl IntoIterator<Item = (&'a [u8], &'a [u8])>,
        end_stream: bool,
    ) -> u32 {
        let id = self.next_id;
        self.next_id += 2;
        self.streams.insert(
            id,
            Stream {
                send_window: i64::from(self.peer.initial_window),
                recv_window: i64::from(self.limits.initial_window),
                recv_unacked: 0,
                content_length: None,
                received: 0,
                remote_closed: false,
                local_closed: false,
                head_seen: false,
            },
        );
        let mut block = Vec::with_capacity(128);
        self.encoder.encode(&mut block, fields);
        frame::write_header_block(out, id, &block, end_stream, self.max_frame());
        if end_stream {
            self.end_local(id);
        }
        id
    }

    /// Writes `data` (within [`capacity`](ClientConn::capacity)) as DATA frames.
    pub fn send_data(&mut self, out: &mut Vec<u8>, id: u32, data: &[u8], end_stream: bool) {
        debug_assert!(data.len() <= self.capacity(id) || data.is_empty());
        let max = self.max_frame();
        let mut chunks = data.chunks(max.max(1)).peekable();
        if data.is_empty() {
            frame::write_header(out, 0, kind::DATA, end_flag(end_stream), id);
        }
        while let Some(c) = chunks.next() {
            let end = end_stream && chunks.peek().is_none();
            frame::write_header(out, c.len(), kind::DATA, end_flag(end), id);
            out.extend_from_slice(c);
        }
        if let Some(s) = self.streams.get_mut(&id) {
            s.send_window -= data.len() as i64;
        }
        self.conn_send -= data.len() as i64;
        if end_stream {
            self.end_local(id);
        }
    }

    /// Writes request trailers, which end our side of the stream.
    pub fn send_trailers<'a>(
        &mut self,
        out: &mut Vec<u8>,
        id: u32,
        fields: impl IntoIterator<Item = (&'a [u8], &'a [u8])>,
    ) {
        let mut block = Vec::with_capacity(64);
        self.encoder.encode(&mut block, fields);
        frame::write_header_block(out, id, &block, true, self.max_frame());
        self.end_local(id);
    }

    /// `n` bytes of stream `id`'s response body were consumed: the server may send more.
    pub fn release(&mut self, id: u32, n: usize) {
        let n = n as u32;
        if n == 0 {
            return;
        }
        self.release_conn(n);
        let half = self.limits.initial_window / 2;
        if let Some(s) = self.streams.get_mut(&id) {
            if s.remote_closed {
                return;
            }
            s.recv_unacked += n;
            if s.recv_unacked >= half.max(1) {
                frame::write_window_update(&mut self.out, id, s.recv_unacked);
                s.recv_window += i64::from(s.recv_unacked);
                s.recv_unacked = 0;
            }
        }
    }

    fn release_conn(&mut self, n: u32) {
        self.conn_unacked += n;
        let window = self.limits.conn_window.max(DEFAULT_WINDOW);
        if self.conn_unacked >= window / 2 {
            frame::write_window_update(&mut self.out, 0, self.conn_unacked);
            self.conn_recv += i64::from(self.conn_unacked);
            self.conn_unacked = 0;
        }
    }

    /// Resets stream `id` (RST_STREAM queued); its late frames are ignored.
    pub fn reset(&mut self, id: u32, code: ErrorCode) {
        if self.streams.contains_key(&id) {
            frame::write_rst(&mut self.out, id, code);
            self.streams.forget(id, true);
        }
    }

    /// GOAWAY (no stream of the server's to name: the last is 0). Once only.
    pub fn goaway(&mut self, code: ErrorCode) {
        if !self.goaway_sent {
            frame::write_goaway(&mut self.out, 0, code, b"");
            self.goaway_sent = true;
        }
    }

    fn end_local(&mut self, id: u32) {
        if let Some(s) = self.streams.get_mut(&id) {
            s.local_closed = true;
        }
        self.close_if_done(id);
    }

    fn close_if_done(&mut self, id: u32) {
        if self
            .streams
            .get(&id)
            .is_some_and(|s| s.remote_closed && s.local_closed)
        {
            self.streams.forget(id, false);
        }
    }
}

fn end_flag(end: bool) -> u8 {
    if end {
        flag::END_STREAM
    } else {
        0
    }
}

#[path = "client_recv.rs"]
mod recv;

#[cfg(test)]
#[path = "client_tests.rs"]
mod tests;
