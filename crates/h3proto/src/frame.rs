//! HTTP/3 frames (RFC 9114 §7): a varint type, a varint length, the payload. Whole frames
//! are parsed here; the connection streams DATA payloads through and skips unknown frames
//! without holding them, so only the frames it must read whole are bounded by a limit.
//!
//! Which frames may come on which stream (§7.2, from a client): DATA and HEADERS on request
//! streams; SETTINGS, GOAWAY, CANCEL_PUSH and MAX_PUSH_ID on the control stream;
//! PUSH_PROMISE never (push is a server's, and we never enable it); the types HTTP/2 had
//! and HTTP/3 dropped (PRIORITY, PING, WINDOW_UPDATE, CONTINUATION) nowhere. Any of these
//! out of place is H3_FRAME_UNEXPECTED. Unknown types, reserved ones (grease) among them,
//! are skipped wherever they come (§9).

use crate::error::{ConnError, ErrorCode};
use crate::settings::Settings;
use crate::varint;

/// Frame types.
pub mod kind {
    pub const DATA: u64 = 0x00;
    pub const HEADERS: u64 = 0x01;
    pub const CANCEL_PUSH: u64 = 0x03;
    pub const SETTINGS: u64 = 0x04;
    pub const PUSH_PROMISE: u64 = 0x05;
    pub const GOAWAY: u64 = 0x07;
    pub const MAX_PUSH_ID: u64 = 0x0d;
}

/// Types that were HTTP/2 frames and are reserved in HTTP/3 (RFC 9114 §11.2.1).
pub fn is_h2_only(kind: u64) -> bool {
    matches!(kind, 0x02 | 0x06 | 0x08 | 0x09)
}

/// A reserved type, `0x1f * N + 0x21` (RFC 9114 §7.2.8), sent to keep peers tolerant.
pub fn is_grease(kind: u64) -> bool {
    kind >= 0x21 && (kind - 0x21).is_multiple_of(0x1f)
}

/// A frame's type and payload length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    pub kind: u64,
    pub len: u64,
}

/// The header at the start of `b` and its length, or `None` while it is not all there.
pub fn parse_header(b: &[u8]) -> Option<(FrameHeader, usize)> {
    let (kind, n) = varint::decode(b)?;
    let (len, m) = varint::decode(&b[n..])?;
    Some((FrameHeader { kind, len }, n + m))
}

/// The streams a client's frames come on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamKind {
    Control,
    Request,
}

/// Whether a client may send a frame of `kind` on a stream of kind `on`.
pub fn check_allowed(kind: u64, on: StreamKind) -> Result<(), ConnError> {
    let ok = match kind {
        kind::DATA | kind::HEADERS => on == StreamKind::Request,
        kind::SETTINGS | kind::GOAWAY | kind::CANCEL_PUSH | kind::MAX_PUSH_ID => {
            on == StreamKind::Control
        }
        kind::PUSH_PROMISE => false,
        k => !is_h2_only(k),
    };
    if ok {
        Ok(())
    } else {
        Err(ConnError::new(
            ErrorCode::FrameUnexpected,
            "a frame not allowed on this stream",
        ))
    }
}

/// A whole frame.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame<'a> {
    Data(&'a [u8]),
    /// An encoded field section (QPACK).
    Headers(&'a [u8]),
    CancelPush(u64),
    Settings(Settings),
    /// The push ID (from a client) or stream ID (from a server) past which nothing is
    /// processed.
    GoAway(u64),
    MaxPushId(u64),
    PushPromise,
    /// An unknown or reserved type, to be ignored.
    Unknown(u64),
}

/// A payload that is exactly one varint (CANCEL_PUSH, GOAWAY, MAX_PUSH_ID): anything else is
/// H3_FRAME_ERROR (§7.1: a frame's payload must be what its type says, to the byte).
fn one_varint(p: &[u8]) -> Result<u64, ConnError> {
    match varint::decode(p) {
        Some((v, n)) if n == p.len() => Ok(v),
        _ => Err(ConnError::new(
            ErrorCode::Frame,
            "a frame payload that is not one integer",
        )),
    }
}

/// Reads the whole payload of a frame of type `kind`.
pub fn parse_payload(kind: u64, p: &[u8]) -> Result<Frame<'_>, ConnError> {
    Ok(match kind {
        kind::DATA => Frame::Data(p),
        kind::HEADERS => Frame::Headers(p),
        kind::CANCEL_PUSH => Frame::CancelPush(one_varint(p)?),
        kind::SETTINGS => Frame::Settings(Settings::parse(p)?),
        kind::GOAWAY => Frame::GoAway(one_varint(p)?),
        kind::MAX_PUSH_ID => Frame::MaxPushId(one_varint(p)?),
        kind::PUSH_PROMISE => Frame::PushPromise,
        k => Frame::Unknown(k),
    })
}

/// Reads the frame at the start of `b`: the frame and the bytes it took, `None` while it is
/// not all there. A payload over `max_payload` is H3_EXCESSIVE_LOAD before it is waited for.
pub fn parse(b: &[u8], max_payload: u64) -> Result<Option<(Frame<'_>, usize)>, ConnError> {
    let Some((h, n)) = parse_header(b) else {
        return Ok(None);
    };
    if h.len > max_payload {
        return Err(ConnError::new(
            ErrorCode::ExcessiveLoad,
            "a frame over the limit",
        ));
    }
    let end = n + h.len as usize;
    let Some(p) = b.get(n..end) else {
        return Ok(None);
    };
    Ok(Some((parse_payload(h.kind, p)?, end)))
}

/// Appends a frame header.
pub fn write_header(out: &mut Vec<u8>, kind: u64, len: u64) {
    varint::encode(out, kind);
    varint::encode(out, len);
}

/// Fills in a frame's length after its payload was appended: `at` is where `room` bytes
/// were left for it (the payload follows them). The length is written in its shortest form,
/// the payload moved to close or open the gap when that is not `room` bytes.
pub fn close_length(out: &mut Vec<u8>, at: usize, room: usize) {
    let end = out.len();
    let (bytes, n) = varint::encoded((end - at - room) as u64);
    match n.cmp(&room) {
        std::cmp::Ordering::Equal => {}
        std::cmp::Ordering::Less => {
            out.copy_within(at + room..end, at + n);
            out.truncate(end - (room - n));
        }
        std::cmp::Ordering::Greater => {
            out.resize(end + (n - room), 0);
            out.copy_within(at + room..end, at + n);
        }
    }
    out[at..at + n].copy_from_slice(&bytes[..n]);
}

/// Appends a frame whose payload is one varint (GOAWAY, MAX_PUSH_ID, CANCEL_PUSH).
pub fn write_varint_frame(out: &mut Vec<u8>, kind: u64, v: u64) {
    write_header(out, kind, varint::len(v) as u64);
    varint::encode(out, v);
}

/// Appends a DATA frame.
pub fn write_data(out: &mut Vec<u8>, data: &[u8]) {
    write_header(out, kind::DATA, data.len() as u64);
    out.extend_from_slice(data);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn frames_read_back() {
        let mut b = Vec::new();
        write_varint_frame(&mut b, kind::GOAWAY, 4000);
        write_data(&mut b, b"hello");
        write_header(&mut b, 0x21, 2);
        b.extend_from_slice(b"xy");
        let (f, n) = parse(&b, 100).unwrap().unwrap();
        assert_eq!(f, Frame::GoAway(4000));
        let (f, m) = parse(&b[n..], 100).unwrap().unwrap();
        assert_eq!(f, Frame::Data(b"hello"));
        let (f, k) = parse(&b[n + m..], 100).unwrap().unwrap();
        assert_eq!((f, n + m + k), (Frame::Unknown(0x21), b.len()));
        for cut in 0..n {
            assert_eq!(parse(&b[..cut], 100), Ok(None));
        }
    }

    #[test]
    fn a_length_closed_after_its_payload_is_in_shortest_form() {
        for size in [0usize, 1, 63, 64, 200, 16_383, 16_384, 70_000] {
            for room in [1usize, 2, 4] {
                let mut b = vec![0xaa];
                write_header(&mut b, kind::HEADERS, 0);
                b.pop();
                let at = b.len();
                b.resize(at + room, 0);
                let payload: Vec<u8> = (0..size).map(|i| i as u8).collect();
                b.extend_from_slice(&payload);
                close_length(&mut b, at, room);
                let mut want = vec![0xaa];
                write_header(&mut want, kind::HEADERS, size as u64);
                want.extend_from_slice(&payload);
                assert_eq!(b, want, "payload {size}, room {room}");
            }
        }
    }

    #[test]
    fn bad_frames_are_errors() {
        let code = |b: &[u8]| parse(b, 16).unwrap_err().code;
        assert_eq!(code(&[0x07, 0x02, 0x01, 0x02]), ErrorCode::Frame);
        assert_eq!(code(&[0x07, 0x00]), ErrorCode::Frame);
        assert_eq!(code(&[0x0d, 0x01, 0x40]), ErrorCode::Frame);
        assert_eq!(code(&[0x00, 0x11]), ErrorCode::ExcessiveLoad);
    }

    #[test]
    fn frames_go_on_their_streams() {
        use StreamKind::*;
        let ok = |k, on| check_allowed(k, on).is_ok();
        assert!(ok(kind::HEADERS, Request) && ok(kind::DATA, Request));
        assert!(!ok(kind::HEADERS, Control) && !ok(kind::DATA, Control));
        for k in [
            kind::SETTINGS,
            kind::GOAWAY,
            kind::CANCEL_PUSH,
            kind::MAX_PUSH_ID,
        ] {
            assert!(ok(k, Control) && !ok(k, Request));
        }
        for k in [kind::PUSH_PROMISE, 0x02, 0x06, 0x08, 0x09] {
            assert!(!ok(k, Control) && !ok(k, Request));
        }
        assert!(ok(0x21, Control) && ok(0x21 + 0x1f * 3, Request) && ok(0x0e, Request));
        assert!(is_grease(0x21) && is_grease(0x40) && !is_grease(0x22));
    }

    proptest! {
        #[test]
        fn any_frame_round_trips(kind in 0..=varint::MAX, v in 0..=varint::MAX,
                                 data in proptest::collection::vec(any::<u8>(), 0..64)) {
            let mut b = Vec::new();
            match kind % 4 {
                0 => write_data(&mut b, &data),
                1 => write_varint_frame(&mut b, kind::GOAWAY, v),
                2 => write_varint_frame(&mut b, kind::MAX_PUSH_ID, v),
                _ => { write_header(&mut b, kind, data.len() as u64); b.extend_from_slice(&data) }
            }
            let (f, n) = parse(&b, 64).unwrap().unwrap();
            prop_assert_eq!(n, b.len());
            match kind % 4 {
                0 => prop_assert_eq!(f, Frame::Data(&data)),
                1 => prop_assert_eq!(f, Frame::GoAway(v)),
                2 => prop_assert_eq!(f, Frame::MaxPushId(v)),
                _ => prop_assert!(parse_payload(kind, &data).is_ok() == parse(&b, 64).is_ok()),
            }
        }

        #[test]
        fn any_bytes_parse_without_panic(b in proptest::collection::vec(any::<u8>(), 0..64)) {
            if let Ok(Some((_, n))) = parse(&b, 32) {
                prop_assert!(n <= b.len());
            }
        }
    }
}
