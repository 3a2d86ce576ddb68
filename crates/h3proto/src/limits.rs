//! What a connection allows. The SETTINGS we send say the first three; the rest bound what
//! a peer can make us buffer, since a QUIC stream delivers any number of bytes and an HTTP/3
//! frame may claim up to 2^62.

use crate::settings::Settings;

/// A connection's limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// SETTINGS_MAX_FIELD_SECTION_SIZE, enforced while decoding (names + values + 32 per
    /// field): a larger request gets [`Event::HeadTooLarge`](crate::Event::HeadTooLarge)
    /// (answer 431).
    pub max_field_section_size: u64,
    /// SETTINGS_QPACK_MAX_TABLE_CAPACITY: the peer's dynamic table in our memory. 0 turns
    /// the dynamic table off.
    pub qpack_max_table_capacity: u64,
    /// SETTINGS_QPACK_BLOCKED_STREAMS: field sections waiting for inserts; one more is
    /// QPACK_DECOMPRESSION_FAILED.
    pub qpack_blocked_streams: u64,
    /// Bytes of one HEADERS frame (an encoded field section) held until it is whole.
    pub max_header_frame: u64,
    /// Bytes of a control-stream frame (SETTINGS, GOAWAY, MAX_PUSH_ID, CANCEL_PUSH).
    pub max_control_frame: u64,
    /// Bytes a blocked request stream may bring after its blocked HEADERS frame, held until
    /// the section decodes (the events keep the stream's order).
    pub max_blocked_bytes: usize,
    /// Request streams tracked at once; the QUIC layer's MAX_STREAMS should stay below it.
    /// A stream past it is rejected (H3_REQUEST_REJECTED).
    pub max_streams: usize,
    /// Unidirectional streams of unknown types tracked at once (while they are discarded);
    /// one more is H3_EXCESSIVE_LOAD.
    pub max_ignored_uni: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_field_section_size: 32 * 1024,
            qpack_max_table_capacity: 4096,
            qpack_blocked_streams: 16,
            max_header_frame: 64 * 1024,
            max_control_frame: 4096,
            max_blocked_bytes: 64 * 1024,
            max_streams: 256,
            max_ignored_uni: 16,
        }
    }
}

impl Limits {
    /// The SETTINGS we send.
    pub fn settings(&self) -> Settings {
        Settings {
            qpack_max_table_capacity: self.qpack_max_table_capacity,
            max_field_section_size: Some(self.max_field_section_size),
            qpack_blocked_streams: self.qpack_blocked_streams,
        }
    }
}
