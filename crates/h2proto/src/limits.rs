//! What a connection allows, the reasons it ends a stream or itself, and the per-window
//! counters behind the flood limits.

use std::time::{Duration, Instant};

/// A connection's limits. Each flood limit counts events in a fixed window of
/// [`rate_window`](Limits::rate_window); going over ends the connection with GOAWAY
/// ENHANCE_YOUR_CALM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// SETTINGS_MAX_CONCURRENT_STREAMS: streams past it are refused (REFUSED_STREAM).
    pub max_concurrent_streams: u32,
    /// SETTINGS_INITIAL_WINDOW_SIZE: what each stream may send before we read it.
    pub initial_window: u32,
    /// The connection's receive window (raised by a WINDOW_UPDATE right after SETTINGS).
    pub conn_window: u32,
    /// SETTINGS_MAX_FRAME_SIZE we accept.
    pub max_frame_size: u32,
    /// SETTINGS_MAX_HEADER_LIST_SIZE, enforced while decoding: a larger request gets 431.
    pub max_header_list_size: u32,
    /// Bytes of one header block (HEADERS and its CONTINUATIONs) before decoding.
    pub max_header_block: u32,
    /// CONTINUATION frames in one header block (the CONTINUATION flood).
    pub max_continuations: u32,
    pub rate_window: Duration,
    /// Streams reset (by the peer before their response ended, or by us for its faults) or
    /// refused per window: rapid reset.
    pub max_resets: u32,
    /// SETTINGS, PING and PRIORITY frames per window.
    pub max_control_frames: u32,
    /// DATA frames without payload or END_STREAM, header fragments without content, per
    /// window.
    pub max_empty_frames: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_concurrent_streams: 128,
            initial_window: 65_535,
            conn_window: 1 << 20,
            max_frame_size: 16_384,
            max_header_list_size: 32 * 1024,
            max_header_block: 64 * 1024,
            max_continuations: 32,
            rate_window: Duration::from_secs(10),
            max_resets: 400,
            max_control_frames: 1000,
            max_empty_frames: 100,
        }
    }
}

/// Why a stream or the connection was ended; each has a counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// Too many streams reset or refused in a window.
    RapidReset,
    /// Too many CONTINUATION frames, or too large a header block.
    ContinuationFlood,
    /// A header list over `max_header_list_size` (answered with 431).
    HeaderListTooLarge,
    SettingsFlood,
    PingFlood,
    PriorityFlood,
    EmptyFrameFlood,
    /// A stream past `max_concurrent_streams` (REFUSED_STREAM).
    Refused,
    /// A malformed request (bad fields, content-length against DATA).
    Malformed,
    /// Any other protocol violation.
    Protocol,
    FlowControl,
    FrameSize,
    Compression,
    StreamClosed,
}

impl Why {
    pub const ALL: [Why; 14] = [
        Why::RapidReset,
        Why::ContinuationFlood,
        Why::HeaderListTooLarge,
        Why::SettingsFlood,
        Why::PingFlood,
        Why::PriorityFlood,
        Why::EmptyFrameFlood,
        Why::Refused,
        Why::Malformed,
        Why::Protocol,
        Why::FlowControl,
        Why::FrameSize,
        Why::Compression,
        Why::StreamClosed,
    ];

    /// The metrics label.
    pub fn label(self) -> &'static str {
        match self {
            Why::RapidReset => "rapid_reset",
            Why::ContinuationFlood => "continuation_flood",
            Why::HeaderListTooLarge => "header_list_too_large",
            Why::SettingsFlood => "settings_flood",
            Why::PingFlood => "ping_flood",
            Why::PriorityFlood => "priority_flood",
            Why::EmptyFrameFlood => "empty_frame_flood",
            Why::Refused => "refused_stream",
            Why::Malformed => "malformed_request",
            Why::Protocol => "protocol_error",
            Why::FlowControl => "flow_control_error",
            Why::FrameSize => "frame_size_error",
            Why::Compression => "compression_error",
            Why::StreamClosed => "stream_closed",
        }
    }

    pub fn index(self) -> usize {
        Why::ALL.iter().position(|&w| w == self).unwrap_or(0)
    }
}

/// Events counted in a fixed window.
#[derive(Debug, Clone, Copy)]
pub struct Rate {
    count: u32,
    since: Option<Instant>,
}

impl Rate {
    pub const fn new() -> Rate {
        Rate {
            count: 0,
            since: None,
        }
    }

    /// Counts one event at `now`; false once more than `max` fell in the current window.
    pub fn allow(&mut self, now: Instant, window: Duration, max: u32) -> bool {
        match self.since {
            Some(t) if now.saturating_duration_since(t) < window => {}
            _ => {
                self.since = Some(now);
                self.count = 0;
            }
        }
        self.count = self.count.saturating_add(1);
        self.count <= max
    }
}

impl Default for Rate {
    fn default() -> Self {
        Rate::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rate_resets_with_its_window() {
        let t0 = Instant::now();
        let w = Duration::from_secs(1);
        let mut r = Rate::new();
        assert!((0..3).all(|_| r.allow(t0, w, 3)));
        assert!(!r.allow(t0 + Duration::from_millis(999), w, 3));
        assert!(r.allow(t0 + w, w, 3), "a new window");
    }

    #[test]
    fn labels_are_distinct() {
        let mut l: Vec<_> = Why::ALL.iter().map(|w| w.label()).collect();
        l.sort();
        l.dedup();
        assert_eq!(l.len(), Why::ALL.len());
        assert!(Why::ALL.iter().enumerate().all(|(i, w)| w.index() == i));
    }
}
