//! The output of one HTTP/2 stream's proxied exchange: what the exchange writes for its
//! client (an HTTP/1.x response head, then the body) is held here instead of going to a
//! socket, and the HTTP/2 role frames it out as the stream's window allows.
//!
//! An [`Exchange`](crate::role::Exchange) relays a response with back-pressure by watching
//! its client's pending output and asking to hear when it drains; over HTTP/2 that output
//! drains when the peer opens the stream's window, so the same exchange code streams a body
//! at the pace of the peer's flow control without changing.

use crate::response::Fields;

/// An HTTP/2 stream's exchange output.
#[derive(Default)]
pub struct MemOut {
    pub buf: Vec<u8>,
    /// Bytes of `buf` already taken.
    pub pos: usize,
    /// The exchange asked to hear when the output drains (its upstream is paused).
    pub notify: bool,
    /// Bytes taken so far.
    pub written: u64,
    /// Pending bytes above which the exchange stops reading from its upstream (None: the
    /// exchange's own mark). An HTTP/2 connection shares one budget among its proxied
    /// streams this way, so that what it holds does not grow with its stream count.
    pub high_water: Option<u64>,
    /// The response head the exchange wrote, as fields (the stream sends it as HEADERS);
    /// the body follows in `buf`.
    pub head: Option<Box<Fields>>,
}

impl MemOut {
    /// What waits to be taken.
    pub fn pending(&self) -> &[u8] {
        &self.buf[self.pos..]
    }

    /// `n` bytes were taken; the buffer is compacted once it is more than half consumed.
    pub fn take(&mut self, n: usize) {
        self.pos += n;
        self.written += n as u64;
        if self.pos == self.buf.len() {
            self.buf.clear();
            self.pos = 0;
        } else if self.pos > 64 * 1024 && self.pos * 2 > self.buf.len() {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
    }
}
