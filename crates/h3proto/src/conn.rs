//! The server side of an HTTP/3 connection above QUIC streams (RFC 9114 §6): the caller
//! hands [`Conn::feed`] what each stream delivered, takes events from
//! [`Conn::poll_event`], writes responses with the `send_` functions, and writes to our
//! three unidirectional streams what [`Conn::out`] holds.
//!
//! Streams by the low bits of their id (RFC 9000 §2.1): the client's bidirectional ones
//! carry requests (`request.rs`); its unidirectional ones start with a type: the control
//! stream (SETTINGS first, then GOAWAY and the push frames), the QPACK encoder stream
//! (inserts into the table we decode with) and decoder stream (acknowledgments for our
//! encoder, which has nothing to acknowledge). One of each at most; none may end (H3_
//! CLOSED_CRITICAL_STREAM). Push streams are a server's (H3_STREAM_CREATION_ERROR); other
//! types are discarded (and reported, to be stopped). Our side: the control stream with
//! SETTINGS, an encoder stream that never carries an instruction, and the decoder stream.
//!
//! A connection error ends everything: `feed` returns it (again on every later call), and
//! the caller closes the QUIC connection with its code.

use std::collections::{BTreeMap, HashMap, VecDeque};

use bytes::Bytes;

use crate::error::{ConnError, ErrorCode};
use crate::events::Event;
use crate::frame::{self, kind, Frame, StreamKind};
use crate::limits::Limits;
use crate::qpack::{self, Decoder};
use crate::reader::{Read, Reader};
use crate::settings::Settings;
use crate::stream::RequestStream;
use crate::varint;

/// Unidirectional stream types (RFC 9114 §6.2, RFC 9204 §4.2).
pub mod stream_type {
    pub const CONTROL: u64 = 0x00;
    pub const PUSH: u64 = 0x01;
    pub const QPACK_ENCODER: u64 = 0x02;
    pub const QPACK_DECODER: u64 = 0x03;
}

/// Our unidirectional streams: the caller opens one of each and writes [`Conn::out`] to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Uni {
    Control,
    Encoder,
    Decoder,
}

/// A peer's unidirectional stream.
#[derive(Debug)]
enum UniStream {
    /// Its type is not all here yet.
    Type(Vec<u8>),
    Control(Reader),
    Encoder,
    /// The decoder stream, with an instruction cut short.
    Decoder(Vec<u8>),
    Ignored,
}

/// An HTTP/3 connection, the server side.
#[derive(Debug)]
pub struct Conn {
    pub(crate) limits: Limits,
    pub(crate) decoder: Decoder,
    pub(crate) events: VecDeque<Event>,
    pub(crate) requests: BTreeMap<u64, Box<RequestStream>>,
    /// Request streams blocked on QPACK inserts.
    pub(crate) blocked: u64,
    /// Our GOAWAY's stream id: requests at or past it are rejected.
    pub(crate) goaway: Option<u64>,
    /// One past the highest request stream id seen (what a GOAWAY names).
    pub(crate) next_request: u64,
    uni: HashMap<u64, UniStream>,
    control: Option<u64>,
    encoder: Option<u64>,
    decoder_stream: Option<u64>,
    peer_settings: Option<Settings>,
    max_push_id: Option<u64>,
    peer_goaway: Option<u64>,
    out: [Vec<u8>; 3],
    dead: Option<ConnError>,
}

impl Conn {
    /// A connection; our streams' first bytes (types, SETTINGS) are already in `out`.
    pub fn new(limits: Limits) -> Conn {
        let mut control = Vec::new();
        varint::encode(&mut control, stream_type::CONTROL);
        limits.settings().write(&mut control);
        let capacity = usize::try_from(limits.qpack_max_table_capacity).unwrap_or(usize::MAX);
        Conn {
            decoder: Decoder::new(capacity),
            limits,
            events: VecDeque::new(),
            requests: BTreeMap::new(),
            blocked: 0,
            goaway: None,
            next_request: 0,
            uni: HashMap::new(),
            control: None,
            encoder: None,
            decoder_stream: None,
            peer_settings: None,
            max_push_id: None,
            peer_goaway: None,
            out: [
                control,
                vec![stream_type::QPACK_ENCODER as u8],
                vec![stream_type::QPACK_DECODER as u8],
            ],
            dead: None,
        }
    }

    /// What to write next to our stream `s`.
    pub fn out(&self, s: Uni) -> &[u8] {
        &self.out[s as usize]
    }

    pub fn clear_out(&mut self, s: Uni) {
        self.out[s as usize].clear();
    }

    /// The first `n` bytes of what [`out`](Self::out) gave for stream `s` were written (the
    /// stream's window took no more): the rest waits for the next write.
    pub fn consumed(&mut self, s: Uni, n: usize) {
        let out = &mut self.out[s as usize];
        out.drain(..n.min(out.len()));
    }

    /// The peer's SETTINGS, once received.
    pub fn peer_settings(&self) -> Option<&Settings> {
        self.peer_settings.as_ref()
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Bytes stream `id` delivered, in order; `fin`: the stream ended after them. A stream
    /// is not fed after its `fin` (QUIC never reuses an id): a request stream fed again
    /// would be a new request.
    pub fn feed(&mut self, id: u64, data: &[u8], fin: bool) -> Result<(), ConnError> {
        self.feed_from(id, data, None, fin)
    }

    /// [`Conn::feed`] with bytes the caller holds in a [`Bytes`]: the request body's
    /// [`Event::Data`] are slices of it, not copies.
    pub fn feed_bytes(&mut self, id: u64, data: &Bytes, fin: bool) -> Result<(), ConnError> {
        self.feed_from(id, data, Some(data), fin)
    }

    fn feed_from(
        &mut self,
        id: u64,
        data: &[u8],
        shared: Option<&Bytes>,
        fin: bool,
    ) -> Result<(), ConnError> {
        if let Some(e) = self.dead {
            return Err(e);
        }
        let r = match id & 3 {
            0 => self.feed_request(id, data, shared, fin),
            2 => self.feed_uni(id, data, fin),
            _ => Err(ConnError::new(
                ErrorCode::StreamCreation,
                "data on a stream of ours",
            )),
        };
        self.flush_decoder();
        r.inspect_err(|&e| self.dead = Some(e))
    }

    /// The peer reset stream `id` (QUIC RESET_STREAM): its request is gone, or, for a
    /// critical stream, the connection.
    pub fn reset(&mut self, id: u64) -> Result<(), ConnError> {
        if let Some(e) = self.dead {
            return Err(e);
        }
        if [self.control, self.encoder, self.decoder_stream].contains(&Some(id)) {
            let e = ConnError::new(ErrorCode::ClosedCriticalStream, "a critical stream reset");
            self.dead = Some(e);
            return Err(e);
        }
        self.uni.remove(&id);
        if let Some(s) = self.requests.remove(&id) {
            if s.is_blocked() {
                self.blocked -= 1;
            }
            if !s.discarding() {
                self.decoder.cancel_stream(id);
            }
        }
        self.flush_decoder();
        Ok(())
    }

    /// Queues GOAWAY on our control stream: requests from here on are rejected, those
    /// already seen are answered. Calling it again lowers nothing (GOAWAY ids may not grow).
    pub fn send_goaway(&mut self) {
        let id = self
            .goaway
            .map_or(self.next_request, |g| g.min(self.next_request));
        self.goaway = Some(id);
        frame::write_varint_frame(&mut self.out[Uni::Control as usize], kind::GOAWAY, id);
    }

    fn flush_decoder(&mut self) {
        self.out[Uni::Decoder as usize].extend_from_slice(self.decoder.out());
        self.decoder.clear_out();
    }

    fn feed_uni(&mut self, id: u64, data: &[u8], fin: bool) -> Result<(), ConnError> {
        let mut s = match self.uni.remove(&id) {
            Some(s) => s,
            None => UniStream::Type(Vec::new()),
        };
        let mut data = data;
        if let UniStream::Type(buf) = &mut s {
            let old = buf.len();
            buf.extend_from_slice(&data[..data.len().min(8)]);
            match varint::decode(buf) {
                None if fin => return Ok(()), // it ended before saying what it was
                None => {
                    self.uni.insert(id, s);
                    return Ok(());
                }
                Some((t, n)) => {
                    data = &data[n - old..];
                    s = self.open_uni(id, t)?;
                }
            }
        }
        let critical = !matches!(s, UniStream::Ignored);
        match &mut s {
            UniStream::Control(r) => self.feed_control(r, data)?,
            UniStream::Encoder => {
                self.decoder.feed_encoder_stream(data)?;
                self.unblock()?;
            }
            UniStream::Decoder(pending) => qpack::encode::feed_decoder_stream(pending, data)?,
            UniStream::Type(_) | UniStream::Ignored => {}
        }
        if fin && critical {
            return Err(ConnError::new(
                ErrorCode::ClosedCriticalStream,
                "a critical stream ended",
            ));
        }
        if !fin {
            self.uni.insert(id, s);
        }
        Ok(())
    }

    fn open_uni(&mut self, id: u64, t: u64) -> Result<UniStream, ConnError> {
        let slot = match t {
            stream_type::CONTROL => &mut self.control,
            stream_type::QPACK_ENCODER => &mut self.encoder,
            stream_type::QPACK_DECODER => &mut self.decoder_stream,
            stream_type::PUSH => {
                return Err(ConnError::new(
                    ErrorCode::StreamCreation,
                    "a push stream from a client",
                ));
            }
            _ => {
                let ignored = self
                    .uni
                    .values()
                    .filter(|s| matches!(s, UniStream::Ignored))
                    .count();
                if ignored >= self.limits.max_ignored_uni {
                    return Err(ConnError::new(
                        ErrorCode::ExcessiveLoad,
                        "too many unknown streams",
                    ));
                }
                self.events.push_back(Event::StreamError {
                    id,
                    code: ErrorCode::StreamCreation,
                    msg: "a stream type we do not read",
                });
                return Ok(UniStream::Ignored);
            }
        };
        if slot.replace(id).is_some() {
            return Err(ConnError::new(
                ErrorCode::StreamCreation,
                "a second critical stream",
            ));
        }
        Ok(match t {
            stream_type::CONTROL => UniStream::Control(Reader::new()),
            stream_type::QPACK_ENCODER => UniStream::Encoder,
            _ => UniStream::Decoder(Vec::new()),
        })
    }

    fn feed_control(&mut self, r: &mut Reader, data: &[u8]) -> Result<(), ConnError> {
        let mut pos = 0;
        while pos < data.len() || r.ready() {
            let (n, read) = r.read(
                &data[pos..],
                StreamKind::Control,
                0,
                self.limits.max_control_frame,
            )?;
            pos += n;
            match read {
                Read::Nothing | Read::Data(_) => {}
                Read::Start(k) => {
                    if self.peer_settings.is_none() && k != kind::SETTINGS {
                        return Err(ConnError::new(
                            ErrorCode::MissingSettings,
                            "a control stream not opened by SETTINGS",
                        ));
                    }
                    if self.peer_settings.is_some() && k == kind::SETTINGS {
                        return Err(ConnError::new(
                            ErrorCode::FrameUnexpected,
                            "a second SETTINGS",
                        ));
                    }
                    frame::check_allowed(k, StreamKind::Control)?;
                }
                Read::Frame(k) => self.control_frame(frame::parse_payload(k, r.payload())?)?,
                Read::Whole(k, p) => self.control_frame(frame::parse_payload(k, p)?)?,
            }
        }
        Ok(())
    }

    fn control_frame(&mut self, f: Frame<'_>) -> Result<(), ConnError> {
        let id_error = |msg| Err(ConnError::new(ErrorCode::Id, msg));
        match f {
            Frame::Settings(s) => self.peer_settings = Some(s),
            Frame::GoAway(id) => {
                if self.peer_goaway.is_some_and(|g| id > g) {
                    return id_error("a GOAWAY above the last");
                }
                self.peer_goaway = Some(id);
                self.events.push_back(Event::GoAway { id });
            }
            Frame::MaxPushId(id) => {
                if self.max_push_id.is_some_and(|m| id < m) {
                    return id_error("MAX_PUSH_ID lowered");
                }
                self.max_push_id = Some(id);
            }
            Frame::CancelPush(id) if self.max_push_id.is_none_or(|m| id > m) => {
                return id_error("CANCEL_PUSH of a push never allowed");
            }
            _ => {}
        }
        Ok(())
    }
}

/// Appends a response's HEADERS frame (`:status`, then `fields`), encoded with the static
/// table and literals.
pub fn send_headers<'a>(
    out: &mut Vec<u8>,
    status: u16,
    fields: impl IntoIterator<Item = (&'a [u8], &'a [u8])>,
) {
    headers_frame(out, |out| {
        qpack::encode::encode_response(out, status, fields)
    });
}

/// Appends a DATA frame of `data`.
pub fn send_data(out: &mut Vec<u8>, data: &[u8]) {
    frame::write_data(out, data);
}

/// Appends a trailers HEADERS frame (no pseudo-headers); the stream ends after it.
pub fn send_trailers<'a>(
    out: &mut Vec<u8>,
    fields: impl IntoIterator<Item = (&'a [u8], &'a [u8])>,
) {
    headers_frame(out, |out| qpack::encode::encode_section(out, fields));
}

/// Appends a HEADERS frame whose field section `encode` appends. Encoded in place, behind
/// room for a two-byte length (enough for a section under 16 KiB, as heads are), then the
/// length written into it: no buffer of its own, which cost an allocation and its growth
/// per response.
fn headers_frame(out: &mut Vec<u8>, encode: impl FnOnce(&mut Vec<u8>)) {
    varint::encode(out, kind::HEADERS);
    let at = out.len();
    out.extend_from_slice(&[0, 0]);
    encode(out);
    frame::close_length(out, at, 2);
}
