//! A request stream's reading state (read by `request.rs`).

use crate::reader::Reader;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// No HEADERS yet.
    Head,
    Body,
    /// Trailers received: only unknown frames may follow.
    Ended,
}

/// One request stream's reading state.
#[derive(Debug)]
pub(crate) struct RequestStream {
    pub(crate) reader: Reader,
    pub(crate) phase: Phase,
    pub(crate) body: u64,
    pub(crate) content_length: Option<u64>,
    /// A field section waiting for inserts.
    pub(crate) blocked: Option<Vec<u8>>,
    /// What the stream brought while blocked, and whether it ended.
    pub(crate) stash: Vec<u8>,
    pub(crate) stash_fin: bool,
    /// Failed or answered early: the rest is read and dropped.
    pub(crate) discard: bool,
}

impl RequestStream {
    pub fn new() -> RequestStream {
        RequestStream {
            reader: Reader::new(),
            phase: Phase::Head,
            body: 0,
            content_length: None,
            blocked: None,
            stash: Vec::new(),
            stash_fin: false,
            discard: false,
        }
    }

    pub fn is_blocked(&self) -> bool {
        self.blocked.is_some()
    }

    pub fn discarding(&self) -> bool {
        self.discard
    }
}
