//! The client side's reading: the server's frames one at a time, checked as RFC 9113 says,
//! into [`ClientEvent`]s (the other half of [`ClientConn`]'s methods are in `client.rs`).

use std::time::Instant;

use super::{err, ClientConn, ClientEvent, ClientStep, Res};
use crate::events::{unpad, ConnError};
use crate::frame::{self, flag, kind, ErrorCode, FrameHeader, HEADER_LEN, MAX_WINDOW};
use crate::hpack::Decoded;
use crate::limits::Why;
use crate::recv::{self, Block};
use crate::response::ResponseBuilder;

impl ClientConn {
    /// Reads one frame from the start of `buf`.
    pub fn feed<'a>(&mut self, buf: &'a [u8], now: Instant) -> ClientStep<'a> {
        let Some(h) = FrameHeader::parse(buf) else {
            return ClientStep::Need;
        };
        if h.len > self.limits.max_frame_size {
            return self.fatal(ConnError {
                code: ErrorCode::FrameSize,
                why: Why::FrameSize,
                msg: "a frame over our SETTINGS_MAX_FRAME_SIZE",
            });
        }
        let total = HEADER_LEN + h.len as usize;
        if buf.len() < total {
            return ClientStep::Need;
        }
        match self.frame(h, &buf[HEADER_LEN..total], now) {
            Ok(Some(ev)) => ClientStep::Event(total, ev),
            Ok(None) => ClientStep::Skip(total),
            Err(e) => self.fatal(e),
        }
    }

    fn fatal<'a>(&mut self, e: ConnError) -> ClientStep<'a> {
        frame::write_goaway(&mut self.out, 0, e.code, e.msg.as_bytes());
        self.goaway_sent = true;
        self.stats[e.why.index()] += 1;
        ClientStep::Fatal(e)
    }

    /// A stream error: RST_STREAM queued, the stream forgotten, its owner told.
    fn stream_error<'a>(&mut self, id: u32, code: ErrorCode, why: Why) -> Option<ClientEvent<'a>> {
        self.stats[why.index()] += 1;
        frame::write_rst(&mut self.out, id, code);
        self.streams.forget(id, true);
        Some(ClientEvent::Reset {
            id,
            code,
            why: Some(why),
        })
    }

    /// Stream ids we never opened are idle (RFC 9113 §5.1): frames on them are the
    /// server's fault.
    fn idle(&self, id: u32) -> bool {
        id >= self.next_id || id & 1 == 0
    }

    fn frame<'a>(&mut self, h: FrameHeader, p: &'a [u8], now: Instant) -> Res<'a> {
        let server_first = "the server's first frame is not SETTINGS";
        recv::in_order(h, &mut self.first_frame, self.block.as_ref(), server_first)?;
        match h.kind {
            kind::DATA => self.data(h, p, now),
            kind::HEADERS => self.headers(h, p, now),
            kind::CONTINUATION => self.continuation(h, p, now),
            kind::PRIORITY if h.stream == 0 => {
                err(ErrorCode::Protocol, Why::Protocol, "PRIORITY on stream 0")
            }
            kind::PRIORITY if p.len() != 5 => {
                Ok(self.stream_error(h.stream, ErrorCode::FrameSize, Why::FrameSize))
            }
            kind::PRIORITY => {
                self.control_frame(now, Why::PriorityFlood)?;
                Ok(None)
            }
            kind::RST_STREAM => self.rst(h, p),
            kind::SETTINGS => self.settings(h, p, now),
            kind::PUSH_PROMISE => err(
                ErrorCode::Protocol,
                Why::Protocol,
                "PUSH_PROMISE though push is disabled",
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
                // A later GOAWAY may only lower the last stream.
                let last = self.goaway_recv.map_or(last, |l| l.min(last));
                self.goaway_recv = Some(last);
                Ok(Some(ClientEvent::GoAway { last, code }))
            }
            kind::WINDOW_UPDATE => self.window_update(h, p),
            _ => Ok(None),
        }
    }

    fn control_frame(&mut self, now: Instant, why: Why) -> Result<(), ConnError> {
        recv::control_frame(&mut self.control, &self.limits, now, why)
    }

    fn empty_frame(&mut self, now: Instant) -> Result<(), ConnError> {
        recv::empty_frame(&mut self.empty, &self.limits, now)
    }

    fn data<'a>(&mut self, h: FrameHeader, p: &'a [u8], now: Instant) -> Res<'a> {
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
        let id = h.stream;
        let end_stream = h.has(flag::END_STREAM);
        let Some(s) = self.streams.get_mut(&id) else {
            self.release_conn(flow);
            if self.idle(id) {
                return err(ErrorCode::Protocol, Why::Protocol, "DATA on an idle stream");
            }
            if self.streams.reset_by_us(id) == Some(true) {
                return Ok(None);
            }
            return Ok(self.stream_error(id, ErrorCode::StreamClosed, Why::StreamClosed));
        };
        if s.remote_closed || !s.head_seen {
            let closed = s.remote_closed;
            self.release_conn(flow);
            let (code, why) = if closed {
                (ErrorCode::StreamClosed, Why::StreamClosed)
            } else {
                (ErrorCode::Protocol, Why::Malformed)
            };
            return Ok(self.stream_error(id, code, why));
        }
        s.recv_window -= i64::from(flow);
        if s.recv_window < 0 {
            self.release_conn(flow);
            return Ok(self.stream_error(id, ErrorCode::FlowControl, Why::FlowControl));
        }
        s.received += data.len() as u64;
        let over = s.content_length.is_some_and(|n| s.received > n);
        let short = end_stream && s.content_length.is_some_and(|n| s.received != n);
        if over || short {
            self.release_conn(flow);
            return Ok(self.stream_error(id, ErrorCode::Protocol, Why::Malformed));
        }
        s.remote_closed |= end_stream;
        let padding = flow as usize - data.len();
        if padding > 0 {
            self.release(id, padding);
        }
        if data.is_empty() && !end_stream {
            self.empty_frame(now)?;
        }
        if end_stream {
            self.close_if_done(id);
        }
        Ok(Some(ClientEvent::Data {
            id,
            data,
            end_stream,
        }))
    }

    fn headers<'a>(&mut self, h: FrameHeader, p: &'a [u8], now: Instant) -> Res<'a> {
        if h.stream == 0 {
            return err(ErrorCode::Protocol, Why::Protocol, "HEADERS on stream 0");
        }
        if self.idle(h.stream) {
            return err(
                ErrorCode::Protocol,
                Why::Protocol,
                "HEADERS on a stream we did not open",
            );
        }
        // A server's priorities mean nothing to us, a stream depending on itself included.
        let (frag, _) = recv::headers_fragment(h, p)?;
        if frag.is_empty() && !h.has(flag::END_HEADERS) {
            self.empty_frame(now)?;
        }
        let block = Block::start(h, frag, false, &self.limits)?;
        if !h.has(flag::END_HEADERS) {
            self.block = Some(block);
            return Ok(None);
        }
        self.header_block(block)
    }

    fn continuation<'a>(&mut self, h: FrameHeader, p: &'a [u8], now: Instant) -> Res<'a> {
        let Some(b) = self.block.as_mut() else {
            return err(
                ErrorCode::Protocol,
                Why::Protocol,
                "CONTINUATION without HEADERS",
            );
        };
        b.extend(p, &self.limits)?;
        if p.is_empty() && !h.has(flag::END_HEADERS) {
            self.empty_frame(now)?;
        }
        if !h.has(flag::END_HEADERS) {
            return Ok(None);
        }
        let b = self.block.take().expect("checked");
        self.header_block(b)
    }

    /// A complete header block: a response head (or an informational one, skipped), or
    /// trailers. Decoded whatever becomes of it, so the HPACK table stays in step.
    fn header_block<'a>(&mut self, b: Block) -> Res<'a> {
        let id = b.id;
        let max = self.limits.max_header_list_size as usize;
        let head_seen = self.streams.get(&id).map(|s| s.head_seen);
        let mut r = match head_seen {
            Some(true) => ResponseBuilder::trailers(),
            _ => ResponseBuilder::default(),
        };
        let decoded = self
            .decoder
            .decode(&b.buf, max, |n, v| r.field(n, v))
            .map_err(|_| ConnError {
                code: ErrorCode::Compression,
                why: Why::Compression,
                msg: "an invalid header block",
            })?;
        let Some(head_seen) = head_seen else {
            if self.streams.reset_by_us(id) == Some(true) {
                return Ok(None); // in flight when we reset it
            }
            return Ok(self.stream_error(id, ErrorCode::StreamClosed, Why::StreamClosed));
        };
        if self.streams.get(&id).is_some_and(|s| s.remote_closed) {
            return Ok(self.stream_error(id, ErrorCode::StreamClosed, Why::StreamClosed));
        }
        if decoded == Decoded::TooLarge {
            return Ok(self.stream_error(id, ErrorCode::Protocol, Why::HeaderListTooLarge));
        }
        let status = match r.finish() {
            Ok(s) => s,
            Err(_) => return Ok(self.stream_error(id, ErrorCode::Protocol, Why::Malformed)),
        };
        if head_seen && !b.end_stream {
            return Ok(self.stream_error(id, ErrorCode::Protocol, Why::Malformed));
        }
        let s = self.streams.get_mut(&id).expect("checked");
        if head_seen {
            if s.content_length.is_some_and(|n| n != s.received) {
                return Ok(self.stream_error(id, ErrorCode::Protocol, Why::Malformed));
            }
            s.remote_closed = true;
            self.close_if_done(id);
            return Ok(Some(ClientEvent::Trailers {
                id,
                fields: r.fields,
            }));
        }
        if status < 200 {
            if b.end_stream {
                return Ok(self.stream_error(id, ErrorCode::Protocol, Why::Malformed));
            }
            return Ok(None); // informational: the final head follows
        }
        s.head_seen = true;
        s.content_length = r.content_length;
        if b.end_stream {
            if r.content_length.is_some_and(|n| n > 0) {
                return Ok(self.stream_error(id, ErrorCode::Protocol, Why::Malformed));
            }
            s.remote_closed = true;
            self.close_if_done(id);
        }
        Ok(Some(ClientEvent::Response {
            id,
            status,
            fields: r.fields,
            end_stream: b.end_stream,
        }))
    }

    fn rst<'a>(&mut self, h: FrameHeader, p: &'a [u8]) -> Res<'a> {
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
        if self.idle(h.stream) {
            return err(
                ErrorCode::Protocol,
                Why::Protocol,
                "RST_STREAM on an idle stream",
            );
        }
        if !self.streams.contains_key(&h.stream) {
            return Ok(None);
        }
        let code = ErrorCode::from_u32(u32::from_be_bytes([p[0], p[1], p[2], p[3]]));
        self.streams.forget(h.stream, false);
        Ok(Some(ClientEvent::Reset {
            id: h.stream,
            code,
            why: None,
        }))
    }

    fn settings<'a>(&mut self, h: FrameHeader, p: &'a [u8], now: Instant) -> Res<'a> {
        if recv::settings_ack(h, p)? {
            return Ok(None);
        }
        self.control_frame(now, Why::SettingsFlood)?;
        let before = self.peer;
        let next = recv::settings_applied(before, p)?;
        let delta = i64::from(next.initial_window) - i64::from(before.initial_window);
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
        if next.header_table_size != before.header_table_size {
            self.encoder.peer_table_size(next.header_table_size);
        }
        self.peer = next;
        frame::write_header(&mut self.out, 0, kind::SETTINGS, flag::ACK, 0);
        Ok((delta > 0).then_some(ClientEvent::WindowOpened))
    }

    fn window_update<'a>(&mut self, h: FrameHeader, p: &'a [u8]) -> Res<'a> {
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
            return Ok(Some(ClientEvent::WindowOpened));
        }
        if self.idle(h.stream) {
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
            return Ok(self.stream_error(h.stream, ErrorCode::Protocol, Why::Protocol));
        }
        s.send_window += inc;
        if s.send_window > MAX_WINDOW {
            return Ok(self.stream_error(h.stream, ErrorCode::FlowControl, Why::FlowControl));
        }
        Ok(Some(ClientEvent::WindowOpened))
    }
}
