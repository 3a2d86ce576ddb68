//! What reading a connection produces for the caller.

use bytes::Bytes;

use crate::error::ErrorCode;
use ringx_http::decoded::RequestHead;

/// An event of [`Conn::poll_event`](crate::Conn::poll_event).
#[derive(Debug, PartialEq, Eq)]
pub enum Event {
    /// A new request on a bidirectional stream. `end`: the stream ended with its head (no
    /// body).
    Request {
        id: u64,
        head: Box<RequestHead>,
        end: bool,
    },
    /// A new request whose field section is over `max_field_section_size`: answer 431. The
    /// rest of the stream is discarded (stop it with H3_NO_ERROR once answered).
    HeadTooLarge { id: u64 },
    /// Request body bytes. `end`: the request ends here (`data` may then be empty). A slice of
    /// what [`Conn::feed_bytes`](crate::Conn::feed_bytes) was given, where it can be.
    Data { id: u64, data: Bytes, end: bool },
    /// Trailers (HTTP/1.1 lines); the request ends with them.
    Trailers { id: u64, lines: Vec<u8> },
    /// The peer is going away: it will accept no push past `id` (we never push) and is
    /// sending no new requests. Answer those open.
    GoAway { id: u64 },
    /// The stream failed (a malformed request, one past a limit or after our GOAWAY, a
    /// request cut short, an unidirectional stream of a type we do not read): reset it and
    /// stop reading it with `code`. Its further bytes are discarded.
    StreamError {
        id: u64,
        code: ErrorCode,
        msg: &'static str,
    },
}
