//! A response being sent on an HTTP/3 request stream ([`H3Stream`]): its HEADERS and DATA
//! frames as far as they are made, the rest of its body from a file (read piece by piece as
//! the stream's window takes it) or compressed as it goes, a proxied response as its
//! exchange writes it, a gRPC call's as its upstream stream brings it, and what its log line
//! needs.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::time::Instant;

use bytes::Bytes;
use quinn_proto::{SendStream, WriteError};

use super::slab::FrameSlab;
use crate::compress::file_encoder::FileEncoder;
use crate::ctx::base::Base;
use crate::ctx::Cx;
use crate::guard::limit::ConnSlot;
use crate::pipeline::pending::Pending;
use crate::response::{Fields, FilePart};
use crate::role::multiplex::grpc::GrpcCall;
use crate::role::multiplex::log::{self, Ended, RequestLog};
use crate::role::multiplex::proxied::Proxied;

/// Bytes of a file read into one DATA frame.
const FILE_PIECE: usize = 64 * 1024;

/// A connection's responses in progress by stream id, keyed with foldhash (a cheap hash for
/// a lookup a request makes several times). The ids are the client's, and foldhash's
/// per-map random seed resists collisions only minimally; what bounds a collision attack is
/// that an entry lives only while its request stream is open, and QUIC lets the client
/// open at most `quic_max_streams` at once: a lookup probes that many entries at worst.
pub(super) type Streams = std::collections::HashMap<u64, H3Stream, foldhash::fast::RandomState>;

/// A request stream's response.
pub(super) struct H3Stream {
    pub start: Instant,
    pub head_only: bool,
    /// The response's status (0: none yet).
    pub status: u16,
    /// Body bytes handed to QUIC.
    pub body_out: u64,
    /// The proxy cache's status for the log ("" without a cache).
    pub cache: &'static str,
    pub log: Option<Box<RequestLog>>,
    /// `limit_conn`'s count of the request, held for the stream's life.
    pub conn_slot: Option<ConnSlot>,
    /// `limit_req` charged the request already (an `error_page` location re-serving it is
    /// not charged again).
    pub limited: bool,
    /// Frames being made.
    out: Vec<u8>,
    /// Frames made that QUIC has not taken yet: `out` handed over whole (quinn-proto keeps
    /// the bytes until they are acknowledged, so they are not copied again on the way).
    unsent: Bytes,
    /// The rest of the body from a file: (file, next offset, end).
    file: Option<FilePart>,
    /// The rest of the body compressed as it goes.
    encoder: Option<Box<FileEncoder>>,
    /// The request is proxied: the exchange writes the response into its output, which
    /// goes out as HEADERS and DATA as the stream's window opens.
    pub proxy: Option<Box<Proxied>>,
    /// A gRPC call (`grpc://`): its upstream stream and the response bytes received.
    pub grpc: Option<Box<GrpcCall>>,
    /// Request body bytes of the gRPC call that its upstream's window has not taken yet:
    /// the stream is not read while there are any (`conn.rs`).
    pub body_held: usize,
    /// Request body bytes received.
    pub body_in: u64,
    /// The proxied (or gRPC) response is complete: the trailers (if any) end it, after the
    /// body.
    pub end: bool,
    pub trailers: Option<Vec<(Vec<u8>, Vec<u8>)>>,
    /// The request waits for its `auth_request` subrequest (the exchange in `proxy`): what
    /// was decided for it so far.
    pub pending: Option<Box<Pending>>,
    /// Its server's compiled `Alt-Svc` value, left out of the head (`crate::alt_svc`).
    pub alt_svc: Option<std::sync::Arc<str>>,
}

impl H3Stream {
    pub fn new(start: Instant, head_only: bool) -> H3Stream {
        H3Stream {
            start,
            head_only,
            status: 0,
            body_out: 0,
            cache: "",
            log: None,
            conn_slot: None,
            limited: false,
            out: Vec::new(),
            unsent: Bytes::new(),
            file: None,
            encoder: None,
            proxy: None,
            grpc: None,
            body_held: 0,
            body_in: 0,
            end: false,
            trailers: None,
            pending: None,
            alt_svc: None,
        }
    }

    /// Makes the response `resp` (the rest of its body from `file`, or compressed by
    /// `encoder`) this stream's to send.
    pub fn respond(
        &mut self,
        resp: Fields,
        file: Option<FilePart>,
        encoder: Option<Box<FileEncoder>>,
    ) {
        // One allocation for the head and the body in hand (an upper bound: names and values
        // are never longer coded than raw, each line's prefixes are under 8 bytes).
        let head: usize = resp.fields.iter().map(|(n, v)| n.len() + v.len() + 8).sum();
        let body = if self.head_only {
            0
        } else {
            resp.body.len() + 9
        };
        self.out.reserve(16 + head + body);
        self.head(resp.status, resp.fields.iter());
        if self.head_only {
            return;
        }
        if !resp.body.is_empty() {
            ringx_h3proto::send_data(&mut self.out, &resp.body);
            self.body_out += resp.body.len() as u64;
        }
        self.file = file.map(|(f, off, len)| (f, off, off + len));
        self.encoder = encoder;
    }

    /// The response's HEADERS frame: `status` and `fields`, less the server's own `Alt-Svc`
    /// (`crate::alt_svc`: a client on HTTP/3 is where it points already).
    pub(super) fn head<'a>(
        &mut self,
        status: u16,
        fields: impl Iterator<Item = (&'a [u8], &'a [u8])>,
    ) {
        self.status = status;
        let ours = self.alt_svc.as_deref().map(str::as_bytes);
        let kept = fields.filter(|(n, v)| {
            !(ours.is_some_and(|o| o == *v) && n.eq_ignore_ascii_case(b"alt-svc"))
        });
        ringx_h3proto::send_headers(&mut self.out, status, kept);
    }

    /// Writes as much as the stream's window takes, making more of the body as it goes.
    /// Ok(true): the response is all written and the stream finished; Err: it cannot go on
    /// (the file failed, the peer stopped the stream).
    pub fn send(
        &mut self,
        cx: &mut Cx,
        ss: &mut SendStream<'_>,
        slab: &mut FrameSlab,
    ) -> Result<bool, ()> {
        loop {
            if self.unsent.is_empty() && !self.out.is_empty() {
                self.unsent = slab.take(&mut self.out);
            }
            if !self.unsent.is_empty() {
                // Until refused: quinn-proto reports the stream writable again only after
                // a write it refused (a partial write alone is not remembered).
                match ss.write_chunks(std::slice::from_mut(&mut self.unsent)) {
                    Ok(_) => continue,
                    Err(WriteError::Blocked) => return Ok(false),
                    Err(_) => return Err(()),
                }
            }
            if !self.more(cx)? {
                if (self.proxy.is_some() || self.grpc.is_some()) && !self.end {
                    return Ok(false); // the upstream has not sent more yet
                }
                return ss.finish().map(|_| true).map_err(|_| ());
            }
        }
    }

    /// Makes the response's next frame; false: nothing more now (the body is complete, or
    /// a proxied one waits for its upstream).
    fn more(&mut self, cx: &mut Cx) -> Result<bool, ()> {
        if self.proxy.is_some() {
            return Ok(self.more_proxied(cx));
        }
        if self.grpc.is_some() {
            return Ok(self.more_grpc(cx));
        }
        if let Some((f, off, end)) = self.file.as_mut() {
            let n = (end.saturating_sub(*off) as usize).min(FILE_PIECE);
            if n > 0 {
                // The piece is read straight behind its DATA frame's header.
                let kind = ringx_h3proto::frame::kind::DATA;
                ringx_h3proto::frame::write_header(&mut self.out, kind, n as u64);
                if let Err(e) = read_at(f, *off, n, &mut self.out) {
                    // The file shrank under us: the body cannot be what the head said.
                    tracing::warn!("reading a static file for HTTP/3: {e}");
                    return Err(());
                }
                *off += n as u64;
                self.body_out += n as u64;
            }
            if *off >= *end {
                self.file = None;
            }
            return Ok(true);
        }
        if let Some(z) = self.encoder.as_mut() {
            let out = &mut self.out;
            let mut bytes = 0u64;
            let done = z
                .step(&mut |d: &[u8]| {
                    if !d.is_empty() {
                        ringx_h3proto::send_data(out, d);
                        bytes += d.len() as u64;
                    }
                })
                .map_err(|e| tracing::warn!("compressing a static file over HTTP/3: {e}"))?;
            self.body_out += bytes;
            if done {
                self.encoder = None;
            }
            return Ok(true);
        }
        Ok(false)
    }

    /// The next frame of a proxied response: its head once the exchange has it, what the
    /// upstream sent of the body, then its trailers.
    fn more_proxied(&mut self, cx: &mut Cx) -> bool {
        let Some(p) = self.proxy.as_mut() else {
            return false;
        };
        if let Some(head) = p.take_head() {
            p.head_done = true;
            self.head(head.status, head.fields.iter());
            return true;
        }
        if !p.head_done {
            return false;
        }
        let n = p.pending().len().min(FILE_PIECE);
        if n > 0 {
            let out = &mut self.out;
            p.pass(cx, n, |_, bytes| ringx_h3proto::send_data(out, bytes));
            if !self.head_only {
                self.body_out += n as u64;
            }
            return true;
        }
        self.more_trailers()
    }

    /// The next frame of a gRPC call's response (its head was written when it came): what
    /// the upstream sent of the body, then the trailers. Bytes framed are released to the
    /// upstream's window, so the call holds no more than that window here.
    fn more_grpc(&mut self, cx: &mut Cx) -> bool {
        let Some(g) = self.grpc.as_mut() else {
            return false;
        };
        let n = g.pending().len().min(FILE_PIECE);
        if n > 0 {
            ringx_h3proto::send_data(&mut self.out, &g.pending()[..n]);
            g.sent(cx, n);
            self.body_out += n as u64;
            return true;
        }
        self.more_trailers()
    }

    /// The trailers of a proxied or gRPC response, once it is complete.
    fn more_trailers(&mut self) -> bool {
        match self.trailers.take() {
            Some(t) if self.end && !t.is_empty() => {
                let fields = t.iter().map(|(n, v)| (&n[..], &v[..]));
                ringx_h3proto::send_trailers(&mut self.out, fields);
                true
            }
            _ => false,
        }
    }

    /// The stream is over: its exchange, if it has one still attached to an upstream, lets
    /// go of it, as does its gRPC call (cancelled upstream if still open); the response is
    /// counted and its access log line written.
    pub fn log_end(mut self, cx: &mut Cx, b: &Base) {
        if let Some(p) = &mut self.proxy {
            p.detach(cx);
        }
        if let Some(g) = &self.grpc {
            g.end(cx);
        }
        let e = Ended {
            start: self.start,
            status: self.status,
            body_bytes: self.body_out,
            cache: self.cache,
        };
        log::log_end(cx, b, self.log.as_deref(), e);
    }
}

/// A request that waits: until when, its stream, what the pipeline decided so far, and
/// whether it waits for the auth pool (else for a `limit_req` delay).
pub(super) struct Parked {
    pub until: Instant,
    pub id: u64,
    pub s: H3Stream,
    pub pending: Box<Pending>,
    pub verify: bool,
}

impl Parked {
    pub fn delay(until: Instant, id: u64, s: H3Stream, pending: Box<Pending>) -> Parked {
        Parked {
            until,
            id,
            s,
            pending,
            verify: false,
        }
    }

    pub fn verify(until: Instant, id: u64, s: H3Stream, pending: Box<Pending>) -> Parked {
        Parked {
            until,
            id,
            s,
            pending,
            verify: true,
        }
    }
}

/// Reads `n` bytes of `f` from `off` onto the end of `out`, into its spare capacity: each
/// piece goes to QUIC in a buffer of its own (`H3Stream::unsent`), freshly allocated, and
/// zeroing 64 KiB of cold memory first cost a 1 MB download 2% of its CPU.
fn read_at(f: &File, off: u64, n: usize, out: &mut Vec<u8>) -> io::Result<()> {
    let mut got = 0;
    while got < n {
        match ringx_engine::sys::pread_append(f.as_raw_fd(), out, n - got, off + got as u64, 0) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(r) => got += r,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
