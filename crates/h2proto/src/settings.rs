//! SETTINGS parameters (RFC 9113 §6.5.2): the peer's, as received and checked, and ours, as
//! sent.

use crate::frame::{
    kind, write_header, ErrorCode, DEFAULT_MAX_FRAME, DEFAULT_WINDOW, MAX_MAX_FRAME, MAX_WINDOW,
};

pub const HEADER_TABLE_SIZE: u16 = 0x1;
pub const ENABLE_PUSH: u16 = 0x2;
pub const MAX_CONCURRENT_STREAMS: u16 = 0x3;
pub const INITIAL_WINDOW_SIZE: u16 = 0x4;
pub const MAX_FRAME_SIZE: u16 = 0x5;
pub const MAX_HEADER_LIST_SIZE: u16 = 0x6;
/// RFC 8441: extended CONNECT (not offered: WebSocket over HTTP/2 is refused).
pub const ENABLE_CONNECT_PROTOCOL: u16 = 0x8;

/// What the peer said (defaults until it says otherwise).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerSettings {
    pub header_table_size: u32,
    pub initial_window: u32,
    pub max_frame_size: u32,
    pub max_header_list_size: Option<u32>,
    /// SETTINGS_MAX_CONCURRENT_STREAMS (None: unlimited until said); what a client may open.
    pub max_concurrent_streams: Option<u32>,
}

impl Default for PeerSettings {
    fn default() -> Self {
        PeerSettings {
            header_table_size: 4096,
            initial_window: DEFAULT_WINDOW,
            max_frame_size: DEFAULT_MAX_FRAME,
            max_header_list_size: None,
            max_concurrent_streams: None,
        }
    }
}

impl PeerSettings {
    /// Applies one SETTINGS payload (length already checked to be a multiple of 6);
    /// unknown parameters are ignored, as RFC 9113 §6.5.2 requires. Returns the error a bad
    /// value is.
    pub fn apply(&mut self, payload: &[u8]) -> Result<(), ErrorCode> {
        for p in payload.chunks_exact(6) {
            let id = u16::from_be_bytes([p[0], p[1]]);
            let v = u32::from_be_bytes([p[2], p[3], p[4], p[5]]);
            match id {
                HEADER_TABLE_SIZE => self.header_table_size = v,
                ENABLE_PUSH if v > 1 => return Err(ErrorCode::Protocol),
                INITIAL_WINDOW_SIZE if i64::from(v) > MAX_WINDOW => {
                    return Err(ErrorCode::FlowControl)
                }
                INITIAL_WINDOW_SIZE => self.initial_window = v,
                MAX_FRAME_SIZE if !(DEFAULT_MAX_FRAME..=MAX_MAX_FRAME).contains(&v) => {
                    return Err(ErrorCode::Protocol)
                }
                MAX_FRAME_SIZE => self.max_frame_size = v,
                MAX_HEADER_LIST_SIZE => self.max_header_list_size = Some(v),
                MAX_CONCURRENT_STREAMS => self.max_concurrent_streams = Some(v),
                ENABLE_CONNECT_PROTOCOL if v > 1 => return Err(ErrorCode::Protocol),
                _ => {}
            }
        }
        Ok(())
    }
}

/// Writes our SETTINGS frame: only what differs from the protocol's defaults, plus the
/// concurrency and header list limits (which have none).
pub fn write_ours(
    out: &mut Vec<u8>,
    max_concurrent: u32,
    initial_window: u32,
    max_frame: u32,
    max_header_list: u32,
) {
    let mut params: Vec<(u16, u32)> = vec![
        (MAX_CONCURRENT_STREAMS, max_concurrent),
        (MAX_HEADER_LIST_SIZE, max_header_list),
    ];
    if initial_window != DEFAULT_WINDOW {
        params.push((INITIAL_WINDOW_SIZE, initial_window));
    }
    if max_frame != DEFAULT_MAX_FRAME {
        params.push((MAX_FRAME_SIZE, max_frame));
    }
    write_header(out, params.len() * 6, kind::SETTINGS, 0, 0);
    for (id, v) in params {
        out.extend_from_slice(&id.to_be_bytes());
        out.extend_from_slice(&v.to_be_bytes());
    }
}

/// Writes a client's SETTINGS frame: no server push, and our window, frame and header list
/// limits.
pub fn write_client(out: &mut Vec<u8>, initial_window: u32, max_frame: u32, max_header_list: u32) {
    let mut params: Vec<(u16, u32)> =
        vec![(ENABLE_PUSH, 0), (MAX_HEADER_LIST_SIZE, max_header_list)];
    if initial_window != DEFAULT_WINDOW {
        params.push((INITIAL_WINDOW_SIZE, initial_window));
    }
    if max_frame != DEFAULT_MAX_FRAME {
        params.push((MAX_FRAME_SIZE, max_frame));
    }
    write_header(out, params.len() * 6, kind::SETTINGS, 0, 0);
    for (id, v) in params {
        out.extend_from_slice(&id.to_be_bytes());
        out.extend_from_slice(&v.to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(id: u16, v: u32) -> Vec<u8> {
        let mut b = id.to_be_bytes().to_vec();
        b.extend_from_slice(&v.to_be_bytes());
        b
    }

    #[test]
    fn values_out_of_range_are_the_rfc_errors() {
        let mut s = PeerSettings::default();
        assert_eq!(s.apply(&p(ENABLE_PUSH, 2)), Err(ErrorCode::Protocol));
        assert_eq!(
            s.apply(&p(INITIAL_WINDOW_SIZE, 1 << 31)),
            Err(ErrorCode::FlowControl)
        );
        assert_eq!(
            s.apply(&p(MAX_FRAME_SIZE, 16_383)),
            Err(ErrorCode::Protocol)
        );
        assert_eq!(
            s.apply(&p(MAX_FRAME_SIZE, 1 << 24)),
            Err(ErrorCode::Protocol)
        );
        assert_eq!(s, PeerSettings::default());
        let mut all = p(MAX_FRAME_SIZE, 1 << 20);
        all.extend(p(INITIAL_WINDOW_SIZE, (1 << 31) - 1));
        all.extend(p(0x99, 7)); // unknown: ignored
        all.extend(p(HEADER_TABLE_SIZE, 0));
        s.apply(&all).unwrap();
        assert_eq!(s.max_frame_size, 1 << 20);
        assert_eq!(s.initial_window, (1 << 31) - 1);
        assert_eq!(s.header_table_size, 0);
    }
}
