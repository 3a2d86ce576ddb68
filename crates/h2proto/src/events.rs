//! What reading a connection produces: events for the caller, the steps of
//! [`Conn::feed`](crate::Conn::feed), connection errors.

use crate::frame::{flag, ErrorCode, FrameHeader};
use crate::limits::Why;
use ringx_http::decoded::RequestHead;

/// What the caller does with an event's stream.
#[derive(Debug, PartialEq, Eq)]
pub enum Event<'a> {
    /// A new request. `end_stream`: it has no body.
    Request {
        id: u32,
        head: Box<RequestHead>,
        end_stream: bool,
    },
    /// A new request whose header list is over `max_header_list_size`: answer 431.
    HeadTooLarge { id: u32, end_stream: bool },
    /// Request body bytes. Release them ([`Conn::release`](crate::Conn::release)) once consumed: that is what
    /// opens the peer's window again.
    Data {
        id: u32,
        data: &'a [u8],
        end_stream: bool,
    },
    /// Trailers (HTTP/1.1 lines); the request ends with them.
    Trailers { id: u32, lines: Vec<u8> },
    /// The stream is gone: reset by the peer (`why` None), or by us for the reason given
    /// (RST_STREAM already queued).
    Reset {
        id: u32,
        code: ErrorCode,
        why: Option<Why>,
    },
    /// The peer will open no more streams (it is going away).
    GoAway { last: u32, code: ErrorCode },
    /// A send window grew: queued response data may go on.
    WindowOpened,
}

/// A connection error: GOAWAY with `code` is queued; write it out and close.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnError {
    pub code: ErrorCode,
    pub why: Why,
    pub msg: &'static str,
}

/// One step of [`Conn::feed`](crate::Conn::feed).
#[derive(Debug, PartialEq, Eq)]
pub enum Step<'a> {
    /// A frame is incomplete: call again with more bytes appended.
    Need,
    /// This many bytes were consumed with nothing for the caller.
    Skip(usize),
    /// This many bytes were consumed and produced the event.
    Event(usize, Event<'a>),
    /// The connection failed; GOAWAY is queued. Nothing more is read.
    Fatal(ConnError),
}

/// A DATA or HEADERS payload without its padding.
pub(crate) fn unpad(h: FrameHeader, p: &[u8]) -> Result<&[u8], ConnError> {
    if !h.has(flag::PADDED) {
        return Ok(p);
    }
    let bad = ConnError {
        code: ErrorCode::Protocol,
        why: Why::Protocol,
        msg: "padding longer than the frame",
    };
    let (&pad, rest) = p.split_first().ok_or(bad)?;
    rest.len()
        .checked_sub(pad as usize)
        .map(|n| &rest[..n])
        .ok_or(bad)
}
