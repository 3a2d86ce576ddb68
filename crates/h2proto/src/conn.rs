//! The server side of an HTTP/2 connection, receiving: the preface, frames read one at a
//! time from the caller's buffer ([`Conn::feed`]), stream states, receive flow control, and
//! every error RFC 9113 prescribes — a stream error resets the stream (RST_STREAM queued),
//! a connection error queues GOAWAY and ends the connection. Sending is in `send.rs`.

use std::time::Instant;

use crate::events::unpad;
pub use crate::events::{ConnError, Event, Step};
use crate::frame::{
    self, flag, kind, ErrorCode, FrameHeader, DEFAULT_WINDOW, HEADER_LEN, MAX_WINDOW, PREFACE,
};
use crate::hpack::{Decoded, Decoder, Encoder};
use crate::limits::{Limits, Rate, Why};
use crate::recv::{self, Block};
use crate::settings::{self, PeerSettings};
use crate::streams::{Stream, Streams};
use ringx_http::decoded::{HeadBuilder, TrailerBuilder};

/// The server side of one HTTP/2 connection.
pub struct Conn {
    pub(crate) limits: Limits,
    /// Bytes of the client preface still expected.
    preface_left: usize,
    /// The peer's first frame (which must be SETTINGS) has not arrived.
    pub(crate) first_frame: bool,
    pub(crate) peer: PeerSettings,
    /// The peer acknowledged our SETTINGS (our initial window applies since).
    settings_acked: bool,
    pub(crate) streams: Streams,
    /// The highest stream the peer opened.
    pub(crate) last_peer_id: u32,
    /// GOAWAY sent with this last stream id: later streams are ignored.
    pub(crate) goaway_sent: Option<u32>,
    pub(crate) conn_send: i64,
    pub(crate) conn_recv: i64,
    pub(crate) conn_unacked: u32,
    decoder: Decoder,
    pub(crate) encoder: Encoder,
    block: Option<Block>,
    resets: Rate,
    control: Rate,
    empty: Rate,
    /// Control frames to write before anything else the caller writes next.
    pub(crate) out: Vec<u8>,
    /// Stream and connection errors by reason, since the caller last took them.
    pub(crate) stats: [u32; Why::ALL.len()],
}

impl Conn {
    /// A connection that expects the client preface; our SETTINGS and the connection
    /// window's update are queued at once (RFC 9113 §3.4).
    pub fn new(limits: Limits) -> Conn {
        let mut out = Vec::with_capacity(64);
        settings::write_ours(
            &mut out,
            limits.max_concurrent_streams,
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
        Conn {
            limits,
            preface_left: PREFACE.len(),
            first_frame: true,
            peer: PeerSettings::default(),
            settings_acked: false,
            streams: Streams::default(),
            last_peer_id: 0,
            goaway_sent: None,
            conn_send: i64::from(DEFAULT_WINDOW),
            conn_recv: conn_window,
            conn_unacked: 0,
            decoder: Decoder::default(),
            encoder: Encoder::default(),
            block: None,
            resets: Rate::new(),
            control: Rate::new(),
            empty: Rate::new(),
            out,
            stats: [0; Why::ALL.len()],
        }
    }

    /// Reads one frame (or the preface) from the start of `buf`.
    pub fn feed<'a>(&mut self, buf: &'a [u8], now: Instant) -> Step<'a> {
        if self.preface_left > 0 {
            let at = PREFACE.len() - self.preface_left;
            let n = self.preface_left.min(buf.len());
            if buf[..n] != PREFACE[at..at + n] {
                return self.fatal(ErrorCode::Protocol, Why::Protocol, "not the HTTP/2 preface");
            }
            self.preface_left -= n;
            return if n == 0 { Step::Need } else { Step::Skip(n) };
        }
        let Some(h) = FrameHeader::parse(buf) else {
            return Step::Need;
        };
        if h.len > self.limits.max_frame_size {
            return self.fatal(
                ErrorCode::FrameSize,
                Why::FrameSize,
                "a frame over SETTINGS_MAX_FRAME_SIZE",
            );
        }
        let total = HEADER_LEN + h.len as usize;
        if buf.len() < total {
            return Step::Need;
        }
        let payload = &buf[HEADER_LEN..total];
        match self.frame(h, payload, now) {
            Ok(Some(ev)) => Step::Event(total, ev),
            Ok(None) => Step::Skip(total),
            Err(e) => {
                let last = self.last_peer_id;
                frame::write_goaway(&mut self.out, last, e.code, e.msg.as_bytes());
                self.goaway_sent = Some(last);
                self.stats[e.why.index()] += 1;
                Step::Fatal(e)
            }
        }
    }

    /// The most a buffered partial frame can hold: the caller's bound on unread input.
    pub fn max_buffered(&self) -> usize {
        HEADER_LEN + self.limits.max_frame_size as usize
    }

    fn fatal<'a>(&mut self, code: ErrorCode, why: Why, msg: &'static str) -> Step<'a> {
        let last = self.last_peer_id;
        frame::write_goaway(&mut self.out, last, code, msg.as_bytes());
        self.goaway_sent = Some(last);
        self.stats[why.index()] += 1;
        Step::Fatal(ConnError { code, why, msg })
    }

    fn frame<'a>(
        &mut self,
        h: FrameHeader,
        p: &'a [u8],
        now: Instant,
    ) -> Result<Option<Event<'a>>, ConnError> {
        let err = |code, why, msg| Err(ConnError { code, why, msg });
        let client_first = "the first frame is not SETTINGS";
        recv::in_order(h, &mut self.first_frame, self.block.as_ref(), client_first)?;
        match h.kind {
            kind::DATA => self.data(h, p, now),
            kind::HEADERS => self.headers(h, p, now),
            kind::CONTINUATION => self.continuation(h, p, now),
            kind::PRIORITY => {
                if h.stream == 0 {
                    return err(ErrorCode::Protocol, Why::Protocol, "PRIORITY on stream 0");
                }
                self.control_frame(now, Why::PriorityFlood)?;
                if p.len() != 5 {
                    return Ok(self.stream_error(
                        h.stream,
                        ErrorCode::FrameSize,
                        Why::FrameSize,
                        now,
                    ));
                }
                let dep = u32::from_be_bytes([p[0], p[1], p[2], p[3]]) & 0x7fff_ffff;
                if dep == h.stream {
                    return Ok(self.stream_error(
                        h.stream,
                        ErrorCode::Protocol,
                        Why::Protocol,
                        now,
                    ));
                }
                Ok(None)
            }
            kind::RST_STREAM => self.rst(h, p, now),
            kind::SETTINGS => self.settings(h, p, now),
            kind::PUSH_PROMISE => err(
                ErrorCode::Protocol,
                Why::Protocol,
                "PUSH_PROMISE from a client",
            ),
            kind::PING => {
                if let Some(payload) = recv::ping(h, p)? {
                    self.control_frame(now, Why::PingFlood)?;
                    frame::write_ping(&mut self.out, true, payload);
                }
                Ok(None)
            }
            kind::GOAWAY => {
                let (last, code) = recv::goaway(h, p)?;
                Ok(Some(Event::GoAway { last, code }))
            }
            kind::WINDOW_UPDATE => self.window_update(h, p, now),
            _ => Ok(None), // unknown frame types are ignored (RFC 9113 §4.1)
        }
    }

    fn control_frame(&mut self, now: Instant, why: Why) -> Result<(), ConnError> {
        recv::control_frame(&mut self.control, &self.limits, now, why)
    }

    fn empty_frame(&mut self, now: Instant) -> Result<(), ConnError> {
        recv::empty_frame(&mut self.empty, &self.limits, now)
    }

    /// Counts a stream reset or refused; past the limit, the connection ends.
    fn count_reset(&mut self, now: Instant) -> Result<(), ConnError> {
        let l = &self.limits;
        if self.resets.allow(now, l.rate_window, l.max_resets) {
            return Ok(());
        }
        Err(ConnError {
            code: ErrorCode::EnhanceYourCalm,
            why: Why::RapidReset,
            msg: "too many streams reset",
        })
    }

    /// Resets a stream for the peer's fault: RST_STREAM queued, the stream forgotten.
    fn stream_error<'a>(
        &mut self,
        id: u32,
        code: ErrorCode,
        why: Why,
        _now: Instant,
    ) -> Option<Event<'a>> {
        self.stats[why.index()] += 1;
        frame::write_rst(&mut self.out, id, code);
        self.streams.forget(id, true);
        Some(Event::Reset {
            id,
            code,
            why: Some(why),
        })
    }

    fn data<'a>(
        &mut self,
        h: FrameHeader,
        p: &'a [u8],
        now: Instant,
    ) -> Result<Option<Event<'a>>, ConnError> {
        let err = |code, why, msg| Err(ConnError { code, why, msg });
        if h.stream == 0 {
            return err(ErrorCode::Protocol, Why::Protocol, "DATA on stream 0");
        }
        let data = unpad(h, p)?;
        let flow = h.len;
        self.conn_recv -= i64::from(flow);
        if self.conn_recv < 0 {
            return err(
                ErrorCode::FlowControl,
                Why::FlowControl,
                "DATA over the connection window",
            );
        }
        let end_stream = h.has(flag::END_STREAM);
        let id = h.stream;
        let padding = flow - data.len() as u32;
        let Some(s) = self.streams.get_mut(&id) else {
            self.release_conn(flow);
            if id > self.last_peer_id {
                return err(ErrorCode::Protocol, Why::Protocol, "DATA on an idle stream");
            }
            if self.streams.reset_by_us(id) == Some(true) {
                return Ok(None); // in flight when we reset it
            }
            return Ok(self.stream_error(id, ErrorCode::StreamClosed, Why::StreamClosed, now));
        };
        if s.remote_closed {
            self.release_conn(flow);
            return Ok(self.stream_error(id, ErrorCode::StreamClosed, Why::StreamClosed, now));
        }
        s.recv_window -= i64::from(flow);
        if s.recv_window < 0 {
            self.release_conn(flow);
            return Ok(self.stream_error(id, ErrorCode::FlowControl, Why::FlowControl, now));
        }
        s.received += data.len() as u64;
        let over = s.content_length.is_some_and(|n| s.received > n);
        let short = end_stream && s.content_length.is_some_and(|n| s.received != n);
        if over || short {
            self.release_conn(flow);
            return Ok(self.stream_error(id, ErrorCode::Protocol, Why::Malformed, now));
        }
        if end_stream {
            s.remote_closed = true;
        }
        if padding > 0 {
            self.release(id, padding as usize);
        }
        if data.is_empty() && !end_stream {
            self.empty_frame(now)?;
        }
        if end_stream {
            self.close_if_done(id);
        }
        Ok(Some(Event::Data {
            id,
            data,
            end_stream,
        }))
    }

    fn headers<'a>(
        &mut self,
        h: FrameHeader,
        p: &'a [u8],
        now: Instant,
    ) -> Result<Option<Event<'a>>, ConnError> {
        let err = |code, why, msg| Err(ConnError { code, why, msg });
        if h.stream == 0 {
            return err(ErrorCode::Protocol, Why::Protocol, "HEADERS on stream 0");
        }
        if h.stream & 1 == 0 {
            return err(
                ErrorCode::Protocol,
                Why::Protocol,
                "HEADERS on a server stream id",
            );
        }
        let (frag, self_dependent) = recv::headers_fragment(h, p)?;
        if frag.is_empty() && !h.has(flag::END_HEADERS) {
            self.empty_frame(now)?;
        }
        let block = Block::start(h, frag, self_dependent, &self.limits)?;
        if !h.has(flag::END_HEADERS) {
            self.block = Some(block);
            return Ok(None);
        }
        self.header_block(block, now)
    }

    fn continuation<'a>(
        &mut self,
        h: FrameHeader,
        p: &'a [u8],
        now: Instant,
    ) -> Result<Option<Event<'a>>, ConnError> {
        let Some(b) = self.block.as_mut() else {
            return Err(ConnError {
                code: ErrorCode::Protocol,
                why: Why::Protocol,
                msg: "CONTINUATION without HEADERS",
            });
        };
        b.extend(p, &self.limits)?;
        if p.is_empty() && !h.has(flag::END_HEADERS) {
            self.empty_frame(now)?;
        }
        if !h.has(flag::END_HEADERS) {
            return Ok(None);
        }
        let b = self.block.take().expect("checked");
        self.header_block(b, now)
    }

    /// A complete header block: a new request, trailers, or something to refuse. It is
    /// decoded whatever becomes of it, so the HPACK table stays in step with the peer's.
    fn header_block<'a>(&mut self, b: Block, now: Instant) -> Result<Option<Event<'a>>, ConnError> {
        let id = b.id;
        let max = self.limits.max_header_list_size as usize;
        let compression = ConnError {
            code: ErrorCode::Compression,
            why: Why::Compression,
            msg: "an invalid header block",
        };
        if let Some(s) = self.streams.get(&id) {
            // Trailers on an open stream.
            let remote_closed = s.remote_closed;
            let mut t = TrailerBuilder::default();
            let r = self
                .decoder
                .decode(&b.buf, max, |n, v| t.field(n, v))
                .map_err(|_| compression)?;
            if remote_closed {
                return Ok(self.stream_error(id, ErrorCode::StreamClosed, Why::StreamClosed, now));
            }
            if !b.end_stream {
                return Err(ConnError {
                    code: ErrorCode::Protocol,
                    why: Why::Protocol,
                    msg: "a second HEADERS without END_STREAM",
                });
            }
            if t.fault.is_some() || r == Decoded::TooLarge || b.self_dependent {
                return Ok(self.stream_error(id, ErrorCode::Protocol, Why::Malformed, now));
            }
            let s = self.streams.get_mut(&id).expect("checked");
            if s.content_length.is_some_and(|n| n != s.received) {
                return Ok(self.stream_error(id, ErrorCode::Protocol, Why::Malformed, now));
            }
            s.remote_closed = true;
            self.close_if_done(id);
            return Ok(Some(Event::Trailers { id, lines: t.lines }));
        }
        if id <= self.last_peer_id {
            self.decoder
                .decode(&b.buf, max, |_, _| {})
                .map_err(|_| compression)?;
            let why = match self.streams.reset_by_us(id) {
                Some(true) => return Ok(None), // in flight when we reset it
                Some(false) => (
                    Why::StreamClosed,
                    ErrorCode::StreamClosed,
                    "HEADERS on a closed stream",
                ),
                None => (
                    Why::Protocol,
                    ErrorCode::Protocol,
                    "a stream id below one already used",
                ),
            };
            return Err(ConnError {
                code: why.1,
                why: why.0,
                msg: why.2,
            });
        }
        self.last_peer_id = id;
        let mut builder = HeadBuilder::default();
        let r = self
            .decoder
            .decode(&b.buf, max, |n, v| builder.field(n, v))
            .map_err(|_| compression)?;
        if self.goaway_sent.is_some_and(|last| id > last) {
            return Ok(None); // after our GOAWAY: not processed (the peer may retry it)
        }
        if self.streams.len() >= self.limits.max_concurrent_streams as usize {
            self.count_reset(now)?;
            return Ok(self.stream_error(id, ErrorCode::RefusedStream, Why::Refused, now));
        }
        if b.self_dependent {
            self.count_reset(now)?;
            return Ok(self.stream_error(id, ErrorCode::Protocol, Why::Protocol, now));
        }
        let window = if self.settings_acked {
            i64::from(self.limits.initial_window)
        } else {
            i64::from(self.limits.initial_window.max(DEFAULT_WINDOW))
        };
        let stream = Stream {
            send_window: i64::from(self.peer.initial_window),
            recv_window: window,
            recv_unacked: 0,
            content_length: None,
            received: 0,
            remote_closed: b.end_stream,
            local_closed: false,
            head_seen: true,
        };
        if r == Decoded::TooLarge {
            self.stats[Why::HeaderListTooLarge.index()] += 1;
            self.streams.insert(id, stream);
            return Ok(Some(Event::HeadTooLarge {
                id,
                end_stream: b.end_stream,
            }));
        }
        let head = match builder.finish() {
            Ok(h) => h,
            Err(_) => {
                self.count_reset(now)?;
                return Ok(self.stream_error(id, ErrorCode::Protocol, Why::Malformed, now));
            }
        };
        if b.end_stream && head.content_length.is_some_and(|n| n > 0) {
            self.count_reset(now)?;
            return Ok(self.stream_error(id, ErrorCode::Protocol, Why::Malformed, now));
        }
        let mut stream = stream;
        stream.content_length = head.content_length;
        self.streams.insert(id, stream);
        Ok(Some(Event::Request {
            id,
            head: Box::new(head),
            end_stream: b.end_stream,
        }))
    }

    fn rst<'a>(
        &mut self,
        h: FrameHeader,
        p: &'a [u8],
        now: Instant,
    ) -> Result<Option<Event<'a>>, ConnError> {
        let err = |code, why, msg| Err(ConnError { code, why, msg });
        if h.stream == 0 {
            return err(ErrorCode::Protocol, Why::Protocol, "RST_STREAM on stream 0");
        }
        if p.len() != 4 {
            return err(
                ErrorCode::FrameSize,
                Why::FrameSize,
                "RST_STREAM not 4 bytes",
            );
        }
        if h.stream > self.last_peer_id {
            return err(
                ErrorCode::Protocol,
                Why::Protocol,
                "RST_STREAM on an idle stream",
            );
        }
        if !self.streams.contains_key(&h.stream) {
            self.streams.peer_reset(h.stream);
            return Ok(None);
        }
        self.count_reset(now)?;
        let code = ErrorCode::from_u32(u32::from_be_bytes([p[0], p[1], p[2], p[3]]));
        // Reset by the peer: late frames from it are a fault, as for any closed stream.
        self.streams.forget(h.stream, false);
        Ok(Some(Event::Reset {
            id: h.stream,
            code,
            why: None,
        }))
    }

    fn settings<'a>(
        &mut self,
        h: FrameHeader,
        p: &'a [u8],
        now: Instant,
    ) -> Result<Option<Event<'a>>, ConnError> {
        let err = |code, why, msg| Err(ConnError { code, why, msg });
        if recv::settings_ack(h, p)? {
            if !self.settings_acked {
                self.settings_acked = true;
                let ours = self.limits.initial_window;
                if ours < DEFAULT_WINDOW {
                    let delta = i64::from(DEFAULT_WINDOW - ours);
                    for s in self.streams.values_mut() {
                        s.recv_window -= delta;
                    }
                }
            }
            return Ok(None);
        }
        self.control_frame(now, Why::SettingsFlood)?;
        let before = self.peer;
        let next = recv::settings_applied(before, p)?;
        let delta = i64::from(next.initial_window) - i64::from(before.initial_window);
        if delta != 0 {
            for s in self.streams.values_mut() {
                s.send_window += delta;
                if s.send_window > MAX_WINDOW {
                    return err(
                        ErrorCode::FlowControl,
                        Why::FlowControl,
                        "a stream window over 2^31-1",
                    );
                }
            }
        }
        if next.header_table_size != before.header_table_size {
            self.encoder.peer_table_size(next.header_table_size);
        }
        self.peer = next;
        frame::write_header(&mut self.out, 0, kind::SETTINGS, flag::ACK, 0);
        Ok((delta > 0).then_some(Event::WindowOpened))
    }

    fn window_update<'a>(
        &mut self,
        h: FrameHeader,
        p: &'a [u8],
        now: Instant,
    ) -> Result<Option<Event<'a>>, ConnError> {
        let err = |code, why, msg| Err(ConnError { code, why, msg });
        if p.len() != 4 {
            return err(
                ErrorCode::FrameSize,
                Why::FrameSize,
                "WINDOW_UPDATE not 4 bytes",
            );
        }
        let inc = i64::from(u32::from_be_bytes([p[0], p[1], p[2], p[3]]) & 0x7fff_ffff);
        if h.stream == 0 {
            if inc == 0 {
                return err(ErrorCode::Protocol, Why::Protocol, "a WINDOW_UPDATE of 0");
            }
            self.conn_send += inc;
            if self.conn_send > MAX_WINDOW {
                return err(
                    ErrorCode::FlowControl,
                    Why::FlowControl,
                    "the connection window over 2^31-1",
                );
            }
            return Ok(Some(Event::WindowOpened));
        }
        if h.stream > self.last_peer_id {
            return err(
                ErrorCode::Protocol,
                Why::Protocol,
                "WINDOW_UPDATE on an idle stream",
            );
        }
        let Some(s) = self.streams.get_mut(&h.stream) else {
            return Ok(None);
        };
        if inc == 0 {
            return Ok(self.stream_error(h.stream, ErrorCode::Protocol, Why::Protocol, now));
        }
        s.send_window += inc;
        if s.send_window > MAX_WINDOW {
            return Ok(self.stream_error(h.stream, ErrorCode::FlowControl, Why::FlowControl, now));
        }
        Ok(Some(Event::WindowOpened))
    }

    /// A stream both of whose sides ended leaves the table.
    pub(crate) fn close_if_done(&mut self, id: u32) {
        if self
            .streams
            .get(&id)
            .is_some_and(|s| s.remote_closed && s.local_closed)
        {
            self.streams.forget(id, false);
        }
    }
}
