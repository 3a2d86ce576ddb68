//! The checks of a received frame that both ends of a connection make alike (RFC 9113): the
//! order of frames, the rates of control and empty frames, SETTINGS, a PING to answer, a
//! GOAWAY's fields, a HEADERS frame's fragment and a header block growing by CONTINUATION
//! ([`Block`]). The server's state machine (`conn.rs`) and the client's (`client_recv.rs`)
//! call these, and keep what differs between the two ends (which stream ids are the peer's,
//! what an event carries).

use std::time::Instant;

use crate::events::{unpad, ConnError};
use crate::frame::{flag, kind, ErrorCode, FrameHeader};
use crate::limits::{Limits, Rate, Why};
use crate::settings::PeerSettings;

/// Whether frame `h` may come now: the peer's first frame is its SETTINGS (`first_frame`
/// until it came; `not_settings` says what came instead), and a header block being received
/// (`block`) takes nothing but its CONTINUATION frames (RFC 9113 §3.4, §6.10).
pub(crate) fn in_order(
    h: FrameHeader,
    first_frame: &mut bool,
    block: Option<&Block>,
    not_settings: &'static str,
) -> Result<(), ConnError> {
    if *first_frame {
        if h.kind != kind::SETTINGS || h.has(flag::ACK) {
            return Err(protocol(not_settings));
        }
        *first_frame = false;
    }
    match block {
        Some(b) if h.kind != kind::CONTINUATION || h.stream != b.id => {
            Err(protocol("a frame inside a header block"))
        }
        _ => Ok(()),
    }
}

/// One more frame the peer makes us answer or handle (SETTINGS, PING, PRIORITY, ...), counted
/// in `rate`: past [`Limits::max_control_frames`] within the rate window, the connection ends
/// with ENHANCE_YOUR_CALM and `why`.
pub(crate) fn control_frame(
    rate: &mut Rate,
    limits: &Limits,
    now: Instant,
    why: Why,
) -> Result<(), ConnError> {
    if rate.allow(now, limits.rate_window, limits.max_control_frames) {
        return Ok(());
    }
    Err(ConnError {
        code: ErrorCode::EnhanceYourCalm,
        why,
        msg: "too many control frames",
    })
}

/// One more frame that carries nothing and ends nothing (an empty DATA, HEADERS or
/// CONTINUATION), counted in `rate`: past [`Limits::max_empty_frames`] within the rate window,
/// the connection ends.
pub(crate) fn empty_frame(rate: &mut Rate, limits: &Limits, now: Instant) -> Result<(), ConnError> {
    if rate.allow(now, limits.rate_window, limits.max_empty_frames) {
        return Ok(());
    }
    Err(ConnError {
        code: ErrorCode::EnhanceYourCalm,
        why: Why::EmptyFrameFlood,
        msg: "too many empty frames",
    })
}

/// A PING's payload to send back, or None for an acknowledgement; an error if it is on a
/// stream or not 8 bytes long (RFC 9113 §6.7).
pub(crate) fn ping(h: FrameHeader, p: &[u8]) -> Result<Option<&[u8; 8]>, ConnError> {
    if h.stream != 0 {
        return Err(protocol("PING on a stream"));
    }
    let Ok(payload) = p.try_into() else {
        return Err(frame_size("PING not 8 bytes"));
    };
    Ok((!h.has(flag::ACK)).then_some(payload))
}

/// A GOAWAY's last stream id and error code (its debug data is not kept); an error if it is
/// on a stream or shorter than 8 bytes (RFC 9113 §6.8).
pub(crate) fn goaway(h: FrameHeader, p: &[u8]) -> Result<(u32, ErrorCode), ConnError> {
    if h.stream != 0 {
        return Err(protocol("GOAWAY on a stream"));
    }
    if p.len() < 8 {
        return Err(frame_size("GOAWAY under 8 bytes"));
    }
    let last = u32::from_be_bytes([p[0], p[1], p[2], p[3]]) & 0x7fff_ffff;
    let code = ErrorCode::from_u32(u32::from_be_bytes([p[4], p[5], p[6], p[7]]));
    Ok((last, code))
}

/// Whether SETTINGS frame `h` (payload `p`) acknowledges ours; an error if it is on a
/// stream, an acknowledgement with a payload, or not a whole number of 6-byte settings
/// (RFC 9113 §6.5).
pub(crate) fn settings_ack(h: FrameHeader, p: &[u8]) -> Result<bool, ConnError> {
    if h.stream != 0 {
        return Err(protocol("SETTINGS on a stream"));
    }
    if h.has(flag::ACK) {
        if !p.is_empty() {
            return Err(frame_size("SETTINGS ACK with a payload"));
        }
        return Ok(true);
    }
    if !p.len().is_multiple_of(6) {
        return Err(frame_size("SETTINGS not a multiple of 6 bytes"));
    }
    Ok(false)
}

/// The peer's settings `before` with SETTINGS payload `p` applied; an error for a value out
/// of range (FLOW_CONTROL_ERROR for the initial window, PROTOCOL_ERROR otherwise).
pub(crate) fn settings_applied(before: PeerSettings, p: &[u8]) -> Result<PeerSettings, ConnError> {
    let mut next = before;
    if let Err(code) = next.apply(p) {
        let why = if code == ErrorCode::FlowControl {
            Why::FlowControl
        } else {
            Why::Protocol
        };
        return Err(ConnError {
            code,
            why,
            msg: "an invalid SETTINGS value",
        });
    }
    Ok(next)
}

/// A HEADERS frame's header block fragment, its padding and priority fields taken off, and
/// whether its priority names the stream itself as its dependency (RFC 9113 §5.3.1).
pub(crate) fn headers_fragment(h: FrameHeader, p: &[u8]) -> Result<(&[u8], bool), ConnError> {
    let frag = unpad(h, p)?;
    if !h.has(flag::PRIORITY) {
        return Ok((frag, false));
    }
    if frag.len() < 5 {
        return Err(frame_size("HEADERS priority cut short"));
    }
    let dep = u32::from_be_bytes([frag[0], frag[1], frag[2], frag[3]]) & 0x7fff_ffff;
    Ok((&frag[5..], dep == h.stream))
}

/// A header block being received (HEADERS, then CONTINUATION until END_HEADERS).
pub(crate) struct Block {
    pub(crate) id: u32,
    pub(crate) buf: Vec<u8>,
    pub(crate) end_stream: bool,
    pub(crate) frames: u32,
    pub(crate) self_dependent: bool,
}

impl Block {
    /// The header block a HEADERS frame `h` starts with fragment `frag`; an error if that
    /// alone is over [`Limits::max_header_block`].
    pub(crate) fn start(
        h: FrameHeader,
        frag: &[u8],
        self_dependent: bool,
        limits: &Limits,
    ) -> Result<Block, ConnError> {
        if frag.len() > limits.max_header_block as usize {
            return Err(ConnError {
                code: ErrorCode::EnhanceYourCalm,
                why: Why::ContinuationFlood,
                msg: "a header block too large",
            });
        }
        Ok(Block {
            id: h.stream,
            buf: frag.to_vec(),
            end_stream: h.has(flag::END_STREAM),
            frames: 0,
            self_dependent,
        })
    }

    /// Adds a CONTINUATION's fragment `p`; an error past [`Limits::max_continuations`] frames
    /// or [`Limits::max_header_block`] bytes.
    pub(crate) fn extend(&mut self, p: &[u8], limits: &Limits) -> Result<(), ConnError> {
        self.frames += 1;
        self.buf.extend_from_slice(p);
        if self.frames > limits.max_continuations
            || self.buf.len() > limits.max_header_block as usize
        {
            return Err(ConnError {
                code: ErrorCode::EnhanceYourCalm,
                why: Why::ContinuationFlood,
                msg: "a header block too large or in too many frames",
            });
        }
        Ok(())
    }
}

fn protocol(msg: &'static str) -> ConnError {
    ConnError {
        code: ErrorCode::Protocol,
        why: Why::Protocol,
        msg,
    }
}

fn frame_size(msg: &'static str) -> ConnError {
    ConnError {
        code: ErrorCode::FrameSize,
        why: Why::FrameSize,
        msg,
    }
}
