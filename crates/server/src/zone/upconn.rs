//! The zone's record of one upstream connection.

use std::time::Instant;

use ringx_engine::ConnId;
use ringx_http::upstream::ClientFraming;
use ringx_http::BodyDecoder;

/// Timer-wheel keys of upstream connections carry this bit (client connections do not).
pub const UP_KEY: u32 = 1 << 31;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UpState {
    /// Connect in flight.
    Connecting,
    /// Carrying a request and its response.
    Busy,
    /// In the keep-alive pool.
    Idle,
    /// A byte tunnel (WebSocket, stream).
    Tunnel,
    /// Close requested; waiting for `on_closed`.
    Closing,
}

pub struct UpConn {
    pub gen: u32,
    pub upstream: usize,
    pub server: usize,
    /// The client connection it serves, with that connection's generation.
    pub client: Option<(ConnId, u32)>,
    pub state: UpState,
    /// A response head that arrived in pieces.
    pub inbuf: Vec<u8>,
    pub head_done: bool,
    /// Framing of the response body (None: until close, or no body).
    pub body: Option<BodyDecoder>,
    pub until_close: bool,
    pub framing: ClientFraming,
    /// Came from the keep-alive pool: a close before any byte is the usual keep-alive race,
    /// retried on a fresh connection without blaming the server.
    pub reused: bool,
    pub got_bytes: bool,
    /// May go back to the pool after this response.
    pub keep: bool,
    /// Sent a PROXY header for one client: never reused for another.
    pub tied: bool,
    pub paused: bool,
    pub eof: bool,
    pub deadline: Instant,
    /// When the earliest timer-wheel entry of this connection fires.
    pub wheel_at: Option<Instant>,
}

impl UpConn {
    pub fn new(gen: u32, upstream: usize, server: usize, now: Instant) -> UpConn {
        UpConn {
            gen,
            upstream,
            server,
            client: None,
            state: UpState::Connecting,
            inbuf: Vec::new(),
            head_done: false,
            body: None,
            until_close: false,
            framing: ClientFraming::Same,
            reused: false,
            got_bytes: false,
            keep: false,
            tied: false,
            paused: false,
            eof: false,
            deadline: now,
            wheel_at: None,
        }
    }

    /// Ready for the next request on a pooled connection.
    pub fn reset_for_request(&mut self) {
        self.inbuf.clear();
        self.head_done = false;
        self.body = None;
        self.until_close = false;
        self.framing = ClientFraming::Same;
        self.got_bytes = false;
        self.keep = false;
    }
}
