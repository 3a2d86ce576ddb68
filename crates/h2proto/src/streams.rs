//! The table of open streams, and the memory of those closed lately.

use std::collections::{HashMap, VecDeque};

/// Streams closed lately that are remembered to answer late frames rightly.
const CLOSED_MEMORY: usize = 64;

/// A stream's protocol state (open or half-closed; closed streams are not kept).
#[derive(Debug)]
pub(crate) struct Stream {
    pub(crate) send_window: i64,
    pub(crate) recv_window: i64,
    /// Received and released, not yet given back in a WINDOW_UPDATE.
    pub(crate) recv_unacked: u32,
    pub(crate) content_length: Option<u64>,
    pub(crate) received: u64,
    /// The peer ended its side (END_STREAM received).
    pub(crate) remote_closed: bool,
    /// We ended ours (END_STREAM sent).
    pub(crate) local_closed: bool,
    /// The final response head arrived (a client's streams: later HEADERS are trailers).
    pub(crate) head_seen: bool,
}

/// Open and half-closed streams by id; closed ones leave it.
#[derive(Default)]
pub(crate) struct Streams {
    map: HashMap<u32, Stream>,
    /// Recently closed streams, and whether we reset them (late frames for those are
    /// ignored; for the others they are STREAM_CLOSED).
    closed: VecDeque<(u32, bool)>,
}

impl Streams {
    pub(crate) fn get(&self, id: &u32) -> Option<&Stream> {
        self.map.get(id)
    }

    pub(crate) fn get_mut(&mut self, id: &u32) -> Option<&mut Stream> {
        self.map.get_mut(id)
    }

    pub(crate) fn contains_key(&self, id: &u32) -> bool {
        self.map.contains_key(id)
    }

    pub(crate) fn insert(&mut self, id: u32, s: Stream) {
        self.map.insert(id, s);
    }

    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    pub(crate) fn values_mut(&mut self) -> impl Iterator<Item = &mut Stream> {
        self.map.values_mut()
    }

    /// A stream leaves the table (`by_us`: we reset it).
    pub(crate) fn forget(&mut self, id: u32, by_us: bool) {
        self.map.remove(&id);
        if let Some(e) = self.closed.iter_mut().find(|e| e.0 == id) {
            e.1 |= by_us;
            return;
        }
        if self.closed.len() == CLOSED_MEMORY {
            self.closed.pop_front();
        }
        self.closed.push_back((id, by_us));
    }

    /// The peer reset a stream that had already left the table (we had ended it): frames
    /// it sends after that are its fault, not in flight.
    pub(crate) fn peer_reset(&mut self, id: u32) {
        if let Some(e) = self.closed.iter_mut().find(|e| e.0 == id) {
            e.1 = false;
        }
    }

    /// Whether we reset a stream not in the table (None: not remembered).
    pub(crate) fn reset_by_us(&self, id: u32) -> Option<bool> {
        self.closed.iter().find(|e| e.0 == id).map(|e| e.1)
    }
}
