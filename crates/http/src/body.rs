//! Message body framing: [`BodyKind`], what the head says about it, and [`BodyDecoder`] for
//! `Content-Length` and chunked request bodies.

use crate::chunked::Chunked;
use crate::error::BodyError;
use crate::limits::BodyLimits;

/// How the message body is framed (RFC 9112 §6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyKind {
    /// No `Content-Length` or `Transfer-Encoding`: the body is empty.
    None,
    /// `Content-Length: n` (possibly 0).
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
}

/// Output of one [`BodyDecoder::decode`] call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decoded<'b> {
    /// Bytes of the input consumed (framing and data). Never more than the
    /// body: bytes after its end (a pipelined request) are left alone.
    pub consumed: usize,
    /// One contiguous run of body data, a sub-slice of the input (possibly
    /// empty).
    pub data: &'b [u8],
    /// The whole body has been decoded.
    pub done: bool,
    /// Bytes at the end of `consumed` that are a chunked body's trailer section and its
    /// final CRLF. A relay passing the body on as it came writes the first
    /// `consumed - trailer` bytes, and at the end the section it kept
    /// ([`BodyDecoder::keep_trailers`]) less the fields that may not be trailers
    /// ([`crate::trailer::allowed_lines`]), then CRLF.
    pub trailer: usize,
}

#[derive(Debug, Clone)]
enum State {
    Length(u64),
    Chunked(Chunked),
    Done,
    Failed(&'static str),
}

/// Incremental, zero-copy decoder for a request body.
///
/// Feed it the bytes after the head; it consumes a prefix and returns at
/// most one run of body data per call. Loop while `consumed > 0 && !done`,
/// then drop the consumed bytes and wait for more input. Input may be split
/// at any byte boundary. After an error every further call fails too.
///
/// ```
/// use ringx_http::{BodyDecoder, BodyKind, BodyLimits};
///
/// let mut input: &[u8] = b"5\r\nhello\r\n0\r\n\r\nGET / HTTP/1.1\r\n";
/// let mut decoder = BodyDecoder::new(BodyKind::Chunked, BodyLimits::default());
/// let mut body = Vec::new();
/// loop {
///     let d = decoder.decode(input).unwrap();
///     body.extend_from_slice(d.data);
///     input = &input[d.consumed..];
///     if d.done || d.consumed == 0 {
///         break;
///     }
/// }
/// assert!(decoder.is_done());
/// assert_eq!(body, b"hello");
/// assert_eq!(input, b"GET / HTTP/1.1\r\n"); // the next request is untouched
/// ```
#[derive(Debug, Clone)]
pub struct BodyDecoder {
    state: State,
    limits: BodyLimits,
    received: u64,
    /// A chunked body's trailer field lines, once it is done (when kept).
    trailers: Option<Vec<u8>>,
}

impl BodyDecoder {
    /// A decoder for a body framed as `kind`.
    pub fn new(kind: BodyKind, limits: BodyLimits) -> Self {
        let state = match kind {
            BodyKind::None | BodyKind::Length(0) => State::Done,
            BodyKind::Length(n) => State::Length(n),
            BodyKind::Chunked => State::Chunked(Chunked::new()),
        };
        BodyDecoder {
            state,
            limits,
            received: 0,
            trailers: None,
        }
    }

    /// Keeps a chunked body's trailer section for [`BodyDecoder::take_trailers`] (a proxy
    /// passing it on to an HTTP/2 client); other bodies have none.
    pub fn keep_trailers(&mut self) {
        if let State::Chunked(c) = &mut self.state {
            c.keep_trailers();
        }
    }

    /// The trailer field lines of a finished chunked body, as received (`name: value`, each
    /// ending in CRLF; validated, at most `max_trailers` bytes): None unless
    /// [`keep_trailers`](BodyDecoder::keep_trailers) was called, empty when there were none.
    pub fn take_trailers(&mut self) -> Option<Vec<u8>> {
        self.trailers.take()
    }

    /// Decodes a prefix of `input`. See the type documentation.
    pub fn decode<'b>(&mut self, input: &'b [u8]) -> Result<Decoded<'b>, BodyError> {
        let (consumed, data, trailer) = match &mut self.state {
            State::Done => (0, &input[..0], 0),
            State::Failed(reason) => return Err(BodyError { reason }),
            State::Length(remaining) => {
                let n = (*remaining).min(input.len() as u64) as usize;
                *remaining -= n as u64;
                if *remaining == 0 {
                    self.state = State::Done;
                }
                (n, &input[..n], 0)
            }
            State::Chunked(chunked) => {
                let progress = chunked.decode(input, &self.limits);
                let data = &input[progress.data.0..progress.data.1];
                let done = chunked.is_done();
                if let Some(reason) = progress.error {
                    self.state = State::Failed(reason);
                    if data.is_empty() {
                        return Err(BodyError { reason });
                    }
                } else if done {
                    self.trailers = chunked.take_trailers();
                    self.state = State::Done;
                }
                (progress.consumed, data, progress.trailer)
            }
        };
        self.received += data.len() as u64;
        Ok(Decoded {
            consumed,
            data,
            done: self.is_done(),
            trailer,
        })
    }

    /// Whether the whole body has been decoded.
    pub fn is_done(&self) -> bool {
        matches!(self.state, State::Done)
    }

    /// Body bytes decoded so far.
    pub fn received(&self) -> u64 {
        self.received
    }
}
