//! Request streams (RFC 9114 §4.1): HEADERS, DATA frames, optional trailers, in that order
//! (anything else is H3_FRAME_UNEXPECTED); unknown frames anywhere between. A malformed
//! request, a body that disagrees with its `content-length`, or a stream that ends before
//! its head is a stream error; the stream's later bytes are discarded.
//!
//! A HEADERS frame whose field section waits on QPACK inserts blocks its stream: the
//! section, and what the stream brings after it, are held (within `max_blocked_bytes`)
//! until the encoder stream brings the inserts, so the stream's events keep their order.

use std::borrow::Cow;

use bytes::Bytes;

use crate::conn::Conn;
use crate::error::{ConnError, ErrorCode};
use crate::events::Event;
use crate::frame::{kind, StreamKind};
use crate::qpack::Decoded;
use crate::reader::Read;
use crate::stream::{Phase, RequestStream};
use ringx_http::decoded::{HeadBuilder, RequestHead, TrailerBuilder};

/// What a HEADERS frame did to its stream.
enum Flow {
    Go,
    Blocked,
    Discard,
}

impl Conn {
    pub(crate) fn feed_request(
        &mut self,
        id: u64,
        data: &[u8],
        shared: Option<&Bytes>,
        fin: bool,
    ) -> Result<(), ConnError> {
        // Boxed in the map: taking a stream out and putting it back moves a pointer, not the
        // stream (a body's every chunk does both).
        let mut s = match self.requests.remove(&id) {
            Some(s) => s,
            None => Box::new(self.open_request(id)),
        };
        let done = self.run(&mut s, id, data, shared, fin)?;
        if !done {
            self.requests.insert(id, s);
        }
        Ok(())
    }

    fn open_request(&mut self, id: u64) -> RequestStream {
        self.next_request = self.next_request.max(id.saturating_add(4));
        let mut s = RequestStream::new();
        if self.goaway.is_some_and(|g| id >= g) {
            self.stream_error(
                &mut s,
                id,
                ErrorCode::RequestRejected,
                "a request after our GOAWAY",
            );
        } else if self.requests.len() >= self.limits.max_streams {
            self.stream_error(
                &mut s,
                id,
                ErrorCode::RequestRejected,
                "too many request streams",
            );
        }
        s
    }

    fn stream_error(&mut self, s: &mut RequestStream, id: u64, code: ErrorCode, msg: &'static str) {
        self.events.push_back(Event::StreamError { id, code, msg });
        self.decoder.cancel_stream(id);
        s.discard = true;
    }

    /// Reads `data` on request stream `id` (`shared`: the same bytes, held by the caller,
    /// that body data is sliced from); true once the stream is done with.
    fn run(
        &mut self,
        s: &mut RequestStream,
        id: u64,
        data: &[u8],
        shared: Option<&Bytes>,
        fin: bool,
    ) -> Result<bool, ConnError> {
        if s.discard {
            return Ok(fin);
        }
        if s.blocked.is_some() {
            s.stash.extend_from_slice(data);
            s.stash_fin |= fin;
            if s.stash.len() > self.limits.max_blocked_bytes {
                return Err(ConnError::new(
                    ErrorCode::ExcessiveLoad,
                    "too much behind a blocked section",
                ));
            }
            return Ok(false);
        }
        let (max_headers, max_control) =
            (self.limits.max_header_frame, self.limits.max_control_frame);
        let mut pos = 0;
        while pos < data.len() || s.reader.ready() {
            let (n, read) =
                s.reader
                    .read(&data[pos..], StreamKind::Request, max_headers, max_control)?;
            pos += n;
            match read {
                Read::Nothing => {}
                Read::Start(k) => {
                    crate::frame::check_allowed(k, StreamKind::Request)?;
                    let out_of_order = match k {
                        kind::DATA => s.phase != Phase::Body,
                        kind::HEADERS => s.phase == Phase::Ended,
                        _ => false,
                    };
                    if out_of_order {
                        return Err(ConnError::new(
                            ErrorCode::FrameUnexpected,
                            "a frame out of order on a request",
                        ));
                    }
                }
                Read::Data(d) => {
                    s.body += d.len() as u64;
                    if s.content_length.is_some_and(|n| s.body > n) {
                        self.stream_error(
                            s,
                            id,
                            ErrorCode::Message,
                            "a body longer than its content-length",
                        );
                        return Ok(fin);
                    }
                    // `d` lies within `data`, which `shared` holds when given.
                    let data = shared.map_or_else(|| Bytes::copy_from_slice(d), |b| b.slice_ref(d));
                    self.events.push_back(Event::Data {
                        id,
                        data,
                        end: false,
                    });
                }
                Read::Frame(_) | Read::Whole(..) => {
                    let block = match read {
                        Read::Whole(_, p) => Cow::Borrowed(p),
                        _ => Cow::Owned(s.reader.take_payload()),
                    };
                    match self.headers(s, id, block)? {
                        Flow::Go => {}
                        Flow::Discard => return Ok(fin),
                        Flow::Blocked => {
                            s.stash.extend_from_slice(&data[pos..]);
                            s.stash_fin = fin;
                            return Ok(false);
                        }
                    }
                }
            }
        }
        if fin {
            self.finish(s, id)?;
        }
        Ok(fin)
    }

    /// Decodes a HEADERS frame's section: the request's head, or its trailers (`block`:
    /// where the reader found it, or its copy; kept only while the section is blocked).
    fn headers(
        &mut self,
        s: &mut RequestStream,
        id: u64,
        block: Cow<'_, [u8]>,
    ) -> Result<Flow, ConnError> {
        let max = self.limits.max_field_section_size;
        if s.phase == Phase::Head {
            let mut b = HeadBuilder::default();
            // The regular fields' lines in one allocation for most heads: decoded, a section
            // is rarely over twice its coded size (Huffman codes are 5 bits or more a byte).
            b.head.lines.reserve((block.len() * 2).min(4096));
            let r = self.decoder.decode(id, &block, max, |n, v| b.field(n, v))?;
            match r {
                Decoded::Blocked(_) => return self.block(s, block),
                Decoded::TooLarge => {
                    self.events.push_back(Event::HeadTooLarge { id });
                    s.discard = true;
                    return Ok(Flow::Discard);
                }
                Decoded::Whole => match request_head(b) {
                    Ok(head) => {
                        s.content_length = head.content_length;
                        s.phase = Phase::Body;
                        let head = Box::new(head);
                        self.events.push_back(Event::Request {
                            id,
                            head,
                            end: false,
                        });
                    }
                    Err(msg) => {
                        self.stream_error(s, id, ErrorCode::Message, msg);
                        return Ok(Flow::Discard);
                    }
                },
            }
        } else {
            let mut t = TrailerBuilder::default();
            let r = self.decoder.decode(id, &block, max, |n, v| t.field(n, v))?;
            let fault = match r {
                Decoded::Blocked(_) => return self.block(s, block),
                Decoded::TooLarge => Some("trailers over the field section limit"),
                Decoded::Whole => t.fault.or_else(|| self.length_fault(s)),
            };
            if let Some(msg) = fault {
                self.stream_error(s, id, ErrorCode::Message, msg);
                return Ok(Flow::Discard);
            }
            s.phase = Phase::Ended;
            self.events
                .push_back(Event::Trailers { id, lines: t.lines });
        }
        Ok(Flow::Go)
    }

    fn block(&mut self, s: &mut RequestStream, block: Cow<'_, [u8]>) -> Result<Flow, ConnError> {
        if self.blocked >= self.limits.qpack_blocked_streams {
            return Err(ConnError::new(
                ErrorCode::QpackDecompressionFailed,
                "more blocked streams than SETTINGS_QPACK_BLOCKED_STREAMS",
            ));
        }
        self.blocked += 1;
        s.blocked = Some(block.into_owned());
        Ok(Flow::Blocked)
    }

    fn length_fault(&self, s: &RequestStream) -> Option<&'static str> {
        s.content_length
            .is_some_and(|n| n != s.body)
            .then_some("a body shorter than its content-length")
    }

    /// The stream ended.
    fn finish(&mut self, s: &mut RequestStream, id: u64) -> Result<(), ConnError> {
        if !s.reader.at_boundary() {
            return Err(ConnError::new(
                ErrorCode::Frame,
                "a frame cut by the end of its stream",
            ));
        }
        match s.phase {
            Phase::Head => self.stream_error(
                s,
                id,
                ErrorCode::RequestIncomplete,
                "a request stream ended without a head",
            ),
            Phase::Ended => {}
            Phase::Body => {
                if let Some(msg) = self.length_fault(s) {
                    self.stream_error(s, id, ErrorCode::Message, msg);
                    return Ok(());
                }
                match self.events.back_mut() {
                    Some(Event::Request { id: i, end, .. } | Event::Data { id: i, end, .. })
                        if *i == id =>
                    {
                        *end = true
                    }
                    _ => self.events.push_back(Event::Data {
                        id,
                        data: Bytes::new(),
                        end: true,
                    }),
                }
            }
        }
        Ok(())
    }

    /// After inserts arrived: decodes the sections they unblocked, and reads on.
    pub(crate) fn unblock(&mut self) -> Result<(), ConnError> {
        let inserts = self.decoder.table().insert_count();
        let ready: Vec<u64> = self
            .requests
            .iter()
            .filter(|(_, s)| {
                s.blocked
                    .as_ref()
                    .is_some_and(|b| qpack_ric(self, b) <= inserts)
            })
            .map(|(&id, _)| id)
            .collect();
        for id in ready {
            let Some(mut s) = self.requests.remove(&id) else {
                continue;
            };
            let block = s.blocked.take().unwrap_or_default();
            self.blocked -= 1;
            let done = match self.headers(&mut s, id, Cow::Owned(block))? {
                Flow::Blocked => false,
                Flow::Discard => s.stash_fin,
                Flow::Go => {
                    let stash = std::mem::take(&mut s.stash);
                    let fin = std::mem::replace(&mut s.stash_fin, false);
                    self.run(&mut s, id, &stash, None, fin)?
                }
            };
            if !done {
                self.requests.insert(id, s);
            }
        }
        Ok(())
    }
}

/// The Required Insert Count of a held section (it decoded once: it is valid).
fn qpack_ric(c: &Conn, block: &[u8]) -> u64 {
    crate::qpack::decode::prefix(c.decoder.table(), block).map_or(0, |(ric, _, _)| ric)
}

/// The request head of a decoded section, checked as RFC 9114 §4.2 asks (the rules of
/// RFC 9113, `ringx_http::decoded`) and by HTTP/3's own rule (§4.3.1): a request for an
/// `http` or `https` target names its host, in `:authority` or `host`.
fn request_head(b: HeadBuilder) -> Result<RequestHead, &'static str> {
    let h = b.finish()?;
    let web = matches!(h.scheme.as_deref(), Some(b"http" | b"https"));
    if web && h.authority.is_none() && h.host.is_none() {
        return Err("an http(s) request without :authority or host");
    }
    Ok(h)
}

#[cfg(test)]
mod head_tests {
    use super::*;

    fn head(fields: &[(&str, &str)]) -> Result<RequestHead, &'static str> {
        let mut b = HeadBuilder::default();
        for (n, v) in fields {
            b.field(n.as_bytes(), v.as_bytes());
        }
        request_head(b)
    }

    #[test]
    fn an_http_request_names_its_host_in_authority_or_host() {
        let bare = [(":method", "GET"), (":scheme", "https"), (":path", "/")];
        assert_eq!(
            head(&bare),
            Err("an http(s) request without :authority or host")
        );
        let mut with_host = bare.to_vec();
        with_host.push(("host", "example.com"));
        assert!(head(&with_host).is_ok());
        let mut with_authority = bare.to_vec();
        with_authority.push((":authority", "example.com"));
        assert!(head(&with_authority).is_ok());
        // Another scheme has no authority to name.
        let other = [(":method", "GET"), (":scheme", "foo"), (":path", "/")];
        assert!(head(&other).is_ok());
    }
}
