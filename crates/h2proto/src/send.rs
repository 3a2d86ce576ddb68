//! The server side of an HTTP/2 connection, sending: response heads and trailers (HPACK,
//! split at the peer's frame size), DATA within the send windows, resets and GOAWAY.
//!
//! The caller decides what to send and when; the connection frames it and keeps the books
//! (windows, stream states). DATA frames are written by header only when the caller queues
//! the payload itself (a file range), so a body is never copied to be framed.

use crate::conn::Conn;
use crate::frame::{self, ErrorCode, DEFAULT_WINDOW, HEADER_LEN};
use crate::limits::Why;

impl Conn {
    /// Control frames queued (SETTINGS, acks, WINDOW_UPDATE, RST_STREAM, GOAWAY): write them
    /// out before anything else, then [`clear_out`](Conn::clear_out).
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

    /// Whether stream `id` is open (not ended both ways, not reset).
    pub fn is_open(&self, id: u32) -> bool {
        self.streams.contains_key(&id)
    }

    /// Streams open or half-closed.
    pub fn open_streams(&self) -> usize {
        self.streams.len()
    }

    /// The highest stream the peer opened.
    pub fn last_stream(&self) -> u32 {
        self.last_peer_id
    }

    /// Whether the request side of `id` ended (END_STREAM received).
    pub fn remote_closed(&self, id: u32) -> bool {
        self.streams.get(&id).is_none_or(|s| s.remote_closed)
    }

    /// The largest DATA payload one frame may carry.
    pub fn max_frame(&self) -> usize {
        self.peer.max_frame_size as usize
    }

    /// Bytes of stream `id`'s body that may go now (both windows).
    pub fn capacity(&self, id: u32) -> usize {
        let Some(s) = self.streams.get(&id) else {
            return 0;
        };
        if s.local_closed {
            return 0;
        }
        s.send_window.min(self.conn_send).max(0) as usize
    }

    /// Writes a response head: `:status`, then `fields` (lowercase names; connection-specific
    /// fields are the caller's to leave out).
    pub fn send_headers<'a>(
        &mut self,
        out: &mut Vec<u8>,
        id: u32,
        status: u16,
        fields: impl IntoIterator<Item = (&'a [u8], &'a [u8])>,
        end_stream: bool,
    ) {
        let st = status.to_string();
        let mut block = Vec::with_capacity(128);
        let status_field: (&[u8], &[u8]) = (b":status", st.as_bytes());
        self.encoder.encode(&mut block, [status_field]);
        self.encoder.encode(&mut block, fields);
        let max = self.max_frame();
        frame::write_header_block(out, id, &block, end_stream, max);
        if end_stream {
            self.end_local(id);
        }
    }

    /// Writes trailers, which end the stream.
    pub fn send_trailers<'a>(
        &mut self,
        out: &mut Vec<u8>,
        id: u32,
        fields: impl IntoIterator<Item = (&'a [u8], &'a [u8])>,
    ) {
        let mut block = Vec::with_capacity(64);
        self.encoder.encode(&mut block, fields);
        let max = self.max_frame();
        frame::write_header_block(out, id, &block, true, max);
        self.end_local(id);
    }

    /// The header of one DATA frame of `len` bytes (at most [`max_frame`](Conn::max_frame)
    /// and [`capacity`](Conn::capacity)); the caller queues the payload right after it.
    pub fn data_frame(&mut self, id: u32, len: usize, end_stream: bool) -> [u8; HEADER_LEN] {
        debug_assert!(len <= self.capacity(id) && len <= self.max_frame());
        if let Some(s) = self.streams.get_mut(&id) {
            s.send_window -= len as i64;
        }
        self.conn_send -= len as i64;
        if end_stream {
            self.end_local(id);
        }
        frame::data_header(len, end_stream, id)
    }

    /// Writes `data` (within [`capacity`](Conn::capacity)) as DATA frames.
    pub fn send_data(&mut self, out: &mut Vec<u8>, id: u32, data: &[u8], end_stream: bool) {
        let max = self.max_frame();
        if data.is_empty() {
            out.extend_from_slice(&self.data_frame(id, 0, end_stream));
            return;
        }
        let mut chunks = data.chunks(max).peekable();
        while let Some(c) = chunks.next() {
            let end = end_stream && chunks.peek().is_none();
            out.extend_from_slice(&self.data_frame(id, c.len(), end));
            out.extend_from_slice(c);
        }
    }

    /// Our side of `id` ended.
    fn end_local(&mut self, id: u32) {
        if let Some(s) = self.streams.get_mut(&id) {
            s.local_closed = true;
        }
        self.close_if_done(id);
    }

    /// Resets stream `id` (RST_STREAM with `code`, queued); its late frames are ignored.
    pub fn reset(&mut self, id: u32, code: ErrorCode) {
        if self.streams.contains_key(&id) {
            frame::write_rst(&mut self.out, id, code);
            self.streams.forget(id, true);
        }
    }

    /// GOAWAY with the last stream the peer opened: streams up to it finish, later ones are
    /// not processed. Once only.
    pub fn goaway(&mut self, code: ErrorCode) {
        if self.goaway_sent.is_none() {
            let last = self.last_peer_id;
            frame::write_goaway(&mut self.out, last, code, b"");
            self.goaway_sent = Some(last);
        }
    }

    /// Whether GOAWAY was sent.
    pub fn going_away(&self) -> bool {
        self.goaway_sent.is_some()
    }

    pub(crate) fn release_conn(&mut self, n: u32) {
        self.conn_unacked += n;
        let window = self.limits.conn_window.max(DEFAULT_WINDOW);
        if self.conn_unacked >= window / 2 {
            frame::write_window_update(&mut self.out, 0, self.conn_unacked);
            self.conn_recv += i64::from(self.conn_unacked);
            self.conn_unacked = 0;
        }
    }

    /// `n` bytes of stream `id`'s body were consumed: the peer may send that much more
    /// (WINDOW_UPDATEs go out once half a window is due, so a steady body costs few).
    pub fn release(&mut self, id: u32, n: usize) {
        let n = n as u32;
        if n == 0 {
            return;
        }
        self.release_conn(n);
        let half = self.limits.initial_window / 2;
        let Some(s) = self.streams.get_mut(&id) else {
            return;
        };
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
