//! Splits a stream's bytes into frames as they arrive in pieces: DATA payloads are handed
//! through as they come, unknown frames are skipped, and the frames that must be read whole
//! are collected, within a size limit checked at their header.

use crate::error::{ConnError, ErrorCode};
use crate::frame::{self, kind, StreamKind};

/// A frame header is two varints: 16 bytes at most.
const MAX_HEADER: usize = 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Header,
    Whole { kind: u64, len: usize },
    Data { left: u64 },
    Skip { left: u64 },
}

/// What one call of [`Reader::read`] produced.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Read<'a> {
    Nothing,
    /// A frame of this type begins (checked by the caller before its payload).
    Start(u64),
    /// A whole frame of this type: its payload is [`Reader::payload`].
    Frame(u64),
    /// A whole frame of this type that lay whole in the input: its payload, where it is
    /// (most HEADERS frames come in one piece, and are then not copied).
    Whole(u64, &'a [u8]),
    /// DATA payload bytes.
    Data(&'a [u8]),
}

/// One stream's frame reader.
#[derive(Debug)]
pub(crate) struct Reader {
    state: State,
    /// A frame header, or a whole frame's payload, being collected.
    buf: Vec<u8>,
    /// `buf` holds a payload already handed over.
    stale: bool,
}

impl Reader {
    pub fn new() -> Reader {
        Reader {
            state: State::Header,
            buf: Vec::new(),
            stale: false,
        }
    }

    /// The payload of the frame [`Read::Frame`] announced.
    pub fn payload(&self) -> &[u8] {
        &self.buf
    }

    /// Takes the payload (to keep it), leaving the reader an empty buffer.
    pub fn take_payload(&mut self) -> Vec<u8> {
        self.stale = false;
        std::mem::take(&mut self.buf)
    }

    /// A whole frame is there without another byte (an empty payload): call
    /// [`read`](Reader::read) again even with no input left.
    pub fn ready(&self) -> bool {
        matches!(self.state, State::Whole { len: 0, .. })
    }

    /// Whether the stream may end here: between frames.
    pub fn at_boundary(&self) -> bool {
        self.state == State::Header && (self.stale || self.buf.is_empty())
    }

    /// Reads from `input`: the bytes used and what they made. Whole frames larger than
    /// `max_headers` (HEADERS) or `max_control` (the others) are H3_EXCESSIVE_LOAD.
    pub fn read<'a>(
        &mut self,
        input: &'a [u8],
        on: StreamKind,
        max_headers: u64,
        max_control: u64,
    ) -> Result<(usize, Read<'a>), ConnError> {
        if self.stale {
            self.buf.clear();
            self.stale = false;
        }
        match self.state {
            State::Header => {
                // A header whole in `input` (most are) is parsed where it is; only one cut
                // between pieces is collected first.
                let old = self.buf.len();
                let parsed = if old == 0 {
                    frame::parse_header(input)
                } else {
                    None
                };
                let (h, n) = match parsed {
                    Some(p) => p,
                    None => {
                        let take = input.len().min(MAX_HEADER - old);
                        self.buf.extend_from_slice(&input[..take]);
                        match frame::parse_header(&self.buf) {
                            Some(p) => p,
                            None => return Ok((take, Read::Nothing)),
                        }
                    }
                };
                self.buf.clear();
                let whole = |max: u64| -> Result<State, ConnError> {
                    if h.len > max {
                        return Err(ConnError::new(
                            ErrorCode::ExcessiveLoad,
                            "a frame over the limit",
                        ));
                    }
                    Ok(State::Whole {
                        kind: h.kind,
                        len: h.len as usize,
                    })
                };
                self.state = match h.kind {
                    kind::DATA if on == StreamKind::Request => State::Data { left: h.len },
                    kind::HEADERS => whole(max_headers)?,
                    kind::DATA
                    | kind::SETTINGS
                    | kind::GOAWAY
                    | kind::CANCEL_PUSH
                    | kind::MAX_PUSH_ID
                    | kind::PUSH_PROMISE => whole(max_control)?,
                    _ => State::Skip { left: h.len },
                };
                if matches!(
                    self.state,
                    State::Data { left: 0 } | State::Skip { left: 0 }
                ) {
                    self.state = State::Header;
                }
                Ok((n - old, Read::Start(h.kind)))
            }
            State::Whole { kind, len } if self.buf.is_empty() && input.len() >= len => {
                self.state = State::Header;
                Ok((len, Read::Whole(kind, &input[..len])))
            }
            State::Whole { kind, len } => {
                let take = input.len().min(len - self.buf.len());
                // Sized once for the whole payload (bounded by the limit checked at its
                // header), not grown piece by piece.
                self.buf.reserve_exact(len - self.buf.len());
                self.buf.extend_from_slice(&input[..take]);
                if self.buf.len() < len {
                    return Ok((take, Read::Nothing));
                }
                self.state = State::Header;
                self.stale = true;
                Ok((take, Read::Frame(kind)))
            }
            State::Data { left } => {
                let take = input.len().min(usize::try_from(left).unwrap_or(usize::MAX));
                self.state = match left - take as u64 {
                    0 => State::Header,
                    left => State::Data { left },
                };
                Ok((take, Read::Data(&input[..take])))
            }
            State::Skip { left } => {
                let take = input.len().min(usize::try_from(left).unwrap_or(usize::MAX));
                self.state = match left - take as u64 {
                    0 => State::Header,
                    left => State::Skip { left },
                };
                Ok((take, Read::Nothing))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Everything read from `input` given in pieces of `step` bytes.
    fn all(input: &[u8], step: usize) -> Result<Vec<String>, ConnError> {
        let mut r = Reader::new();
        let mut out = Vec::new();
        for piece in input.chunks(step) {
            let mut pos = 0;
            while pos < piece.len() || r.ready() {
                let (n, read) = r.read(&piece[pos..], StreamKind::Request, 8, 8)?;
                pos += n;
                match read {
                    Read::Nothing => {}
                    Read::Start(k) => out.push(format!("start {k}")),
                    Read::Frame(k) => out.push(format!("frame {k} {:?}", r.payload())),
                    Read::Whole(k, p) => out.push(format!("frame {k} {p:?}")),
                    Read::Data(d) => out.push(format!("data {d:?}")),
                }
            }
        }
        assert!(r.at_boundary());
        Ok(out)
    }

    #[test]
    fn a_frame_whole_in_the_input_is_handed_over_in_place() {
        let mut b = Vec::new();
        frame::write_header(&mut b, kind::HEADERS, 3);
        b.extend_from_slice(b"abc");
        let mut r = Reader::new();
        let (n, read) = r.read(&b, StreamKind::Request, 8, 8).unwrap();
        assert_eq!(read, Read::Start(kind::HEADERS));
        let (m, read) = r.read(&b[n..], StreamKind::Request, 8, 8).unwrap();
        assert_eq!(m, 3);
        match read {
            Read::Whole(k, p) => {
                assert_eq!((k, p), (kind::HEADERS, &b"abc"[..]));
                assert_eq!(p.as_ptr(), b[n..].as_ptr(), "not copied");
            }
            other => panic!("{other:?}"),
        }
        assert!(r.at_boundary());
        // Cut: collected, then handed over from the reader's buffer.
        let mut r = Reader::new();
        let (n, _) = r.read(&b, StreamKind::Request, 8, 8).unwrap();
        assert_eq!(
            r.read(&b[n..n + 1], StreamKind::Request, 8, 8).unwrap(),
            (1, Read::Nothing)
        );
        let (_, read) = r.read(&b[n + 1..], StreamKind::Request, 8, 8).unwrap();
        assert_eq!(read, Read::Frame(kind::HEADERS));
        assert_eq!(r.payload(), b"abc");
    }

    #[test]
    fn frames_come_out_however_the_bytes_are_split() {
        let mut b = Vec::new();
        frame::write_header(&mut b, kind::HEADERS, 2);
        b.extend_from_slice(b"hh");
        frame::write_header(&mut b, 0x21, 3);
        b.extend_from_slice(b"xxx");
        frame::write_data(&mut b, b"abcd");
        frame::write_data(&mut b, b"");
        let one = all(&b, b.len()).unwrap();
        assert_eq!(
            one,
            [
                "start 1",
                "frame 1 [104, 104]",
                "start 33",
                "start 0",
                "data [97, 98, 99, 100]",
                "start 0"
            ]
        );
        let joined = |v: Vec<String>| {
            v.iter()
                .filter(|s| s.starts_with("frame"))
                .cloned()
                .collect::<Vec<_>>()
        };
        let data = |v: &[String]| {
            v.iter()
                .filter_map(|s| s.strip_prefix("data "))
                .flat_map(|s| {
                    s.trim_matches(['[', ']'])
                        .split(", ")
                        .filter(|x| !x.is_empty())
                        .map(str::to_owned)
                })
                .collect::<Vec<_>>()
        };
        let split = all(&b, 1).unwrap();
        assert_eq!(joined(split.clone()), joined(one.clone()));
        assert_eq!(data(&split), data(&one));
    }

    #[test]
    fn a_large_frame_is_refused_at_its_header() {
        let mut b = Vec::new();
        frame::write_header(&mut b, kind::HEADERS, 1 << 40);
        assert_eq!(all(&b, 3).unwrap_err().code, ErrorCode::ExcessiveLoad);
        let mut r = Reader::new();
        assert_eq!(
            r.read(&[0x01], StreamKind::Request, 8, 8),
            Ok((1, Read::Nothing))
        );
        assert!(!r.at_boundary(), "inside a header");
    }
}
