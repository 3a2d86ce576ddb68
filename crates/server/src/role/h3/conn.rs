//! One QUIC connection speaking HTTP/3 ([`H3Conn`]): quinn-proto's connection, the HTTP/3
//! state over its streams (`ringx-h3proto`), and the responses being sent. Driving it means
//! passing quinn-proto's events on (new streams accepted and read into the HTTP/3 state,
//! streams the peer made writable sent more of), serving the requests the HTTP/3 state
//! reports (`serve.rs`), and writing our control and QPACK streams.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use quinn_proto::{
    Connection, ConnectionError, ConnectionHandle, Dir, Endpoint, Event, PathStats, ReadError,
    StreamEvent, StreamId, Transmit, VarInt,
};
use ringx_engine::{ConnId, Io, ListenerId, SendTo};
use ringx_h3proto::{ConnError, Limits, Uni};

use super::path_size::PathWatch;
use super::slab::FrameSlab;
use super::stream::{Parked, Streams};
use crate::ctx::base::Base;
use crate::ctx::Cx;
use crate::metrics::bump;
use crate::metrics::quic::{Closed, QuicCounters};
use crate::role::multiplex::refresh::Background;
use crate::transport::tls::TlsInfo;
use crate::transport::Transport;

/// Datagrams one `poll_transmit` may coalesce into one GSO send: the kernel takes up to 64
/// (`UDP_MAX_SEGMENTS`) and 64 KiB in all (one IP datagram before segmentation), so at
/// quinn-proto's largest MTU (1,452) that is 44 of them. Ten (quinn's own I/O layer) cost a
/// 1 MB download 15% more CPU per byte (bench/README.md).
const MAX_SEGMENTS: usize = 64;
/// The bytes of one GSO send at most, headers left room.
const MAX_GSO_BYTES: usize = 65_000;

/// H3_REQUEST_CANCELLED: a response the client no longer wants (RFC 9114 §8.1).
const REQUEST_CANCELLED: VarInt = VarInt::from_u32(0x10c);

/// A QUIC connection and its HTTP/3 state.
pub(super) struct H3Conn {
    pub quic: Connection,
    pub handle: ConnectionHandle,
    pub listener: ListenerId,
    pub(super) h3: ringx_h3proto::Conn,
    /// Our control, QPACK encoder and decoder streams, once the handshake is done.
    uni: Option<[StreamId; 3]>,
    /// Responses in progress by stream.
    pub(super) streams: Streams,
    /// Streams with output waiting for the peer's window (or the first write).
    pub(super) ready: Vec<u64>,
    /// Where its streams' small frames are made for quinn-proto to keep (`slab.rs`).
    slab: FrameSlab,
    /// What the pipeline sees of the client: its address, the listener (its TCP twin's index
    /// in `routes.listen`), TLS.
    pub(super) base: Base,
    /// The HTTP/3 layer failed: the connection is closed.
    dead: bool,
    /// The peer closed the connection (its CONNECTION_CLOSE came): the connection drains
    /// and sends nothing more ([`transmit`](Self::transmit)).
    peer_closed: bool,
    /// Why it closed, once it has: the first cause seen (`ringx_quic_closed_total`).
    pub(super) closed: Option<Closed>,
    /// Who the connection is to the zone's upstream connections (their `client`): the QUIC
    /// owner bit and the connection's slot (`super::owner`), with `base.gen`.
    pub(super) owner: ConnId,
    /// The stream each upstream connection serves.
    pub(super) ups: HashMap<ConnId, u64>,
    /// Streams not read while their upstream takes no more of their body.
    pub(super) held: Vec<u64>,
    /// The zone drains: GOAWAY was sent, and the connection closes once its requests are
    /// answered.
    pub(super) draining: bool,
    /// Requests waiting out a `limit_req` delay or for the auth pool.
    pub(super) parked: Vec<Parked>,
    /// Datagrams came for it in the zone's current batch: it runs at the batch's end.
    pub(super) due: bool,
    /// gRPC calls decided in this turn, placed on their upstream connections at its end
    /// (`grpc.rs`).
    pub(super) unplaced: Vec<u64>,
    /// Refreshes of stale cache entries its requests were answered from; the zone's QUIC
    /// state adopts them when the connection goes (`Quic::adopted`).
    pub(super) bg: Background,
    /// What its handshake was seen to do (resumed, early data refused), once the client's
    /// hello is read.
    seen: Option<Arc<ringx_quic::HandshakeSeen>>,
    /// Whether refused early data was looked for (`note_early_refusal`).
    refusal_noted: bool,
    /// quinn-proto's path counters as last added to the zone's (`count_path`).
    path_seen: PathSeen,
    /// What its path's size tells the zone's known paths (`path_size.rs`).
    pub(super) path: PathWatch,
}

/// How a stream's read ended (`H3Conn::read`).
#[derive(Clone, Copy, PartialEq)]
enum End {
    /// Nothing more for now.
    Open,
    /// The stream's end came.
    Fin,
    /// The client reset it.
    Reset,
}

/// A connection's packets sent and declared lost, the bytes lost and the congestion
/// events (quinn-proto's `PathStats`, which only grow).
#[derive(Clone, Copy, Default, PartialEq)]
struct PathSeen {
    sent: u64,
    lost: u64,
    lost_bytes: u64,
    congestion: u64,
}

impl H3Conn {
    pub fn new(
        cx: &Cx,
        (listener, handle, tcp): (ListenerId, ConnectionHandle, u32),
        (owner, gen): (ConnId, u32),
        quic: Connection,
        now: Instant,
    ) -> H3Conn {
        let mut base = Base::new(now);
        let local = cx.ctx.routes.listen.get(tcp as usize).copied();
        base.open(
            tcp,
            Some(quic.remote_address()),
            local,
            Transport::Plain,
            now,
        );
        base.gen = gen;
        let limits = Limits {
            max_field_section_size: cx.ctx.set.limits.max_head as u64,
            ..Limits::default()
        };
        let path = PathWatch::new(quic.remote_address().ip(), quic.current_mtu(), false);
        H3Conn {
            quic,
            handle,
            listener,
            h3: ringx_h3proto::Conn::new(limits),
            uni: None,
            streams: Streams::default(),
            ready: Vec::new(),
            slab: FrameSlab::default(),
            base,
            dead: false,
            peer_closed: false,
            closed: None,
            owner,
            ups: HashMap::new(),
            held: Vec::new(),
            draining: false,
            parked: Vec::new(),
            due: false,
            unplaced: Vec::new(),
            bg: Background::default(),
            seen: None,
            refusal_noted: false,
            path,
            path_seen: PathSeen::default(),
        }
    }

    /// Passes on what quinn-proto has for the endpoint and for us, serves the requests that
    /// came complete, and writes what our streams have. Returns the requests served.
    pub fn run(&mut self, cx: &mut Cx, ep: &mut Endpoint) -> usize {
        let mut served = 0;
        for _ in 0..64 {
            while let Some(ev) = self.quic.poll_endpoint_events() {
                if let Some(ce) = ep.handle_event(self.handle, ev) {
                    self.quic.handle_event(ce);
                }
            }
            let mut moved = false;
            while let Some(ev) = self.quic.poll() {
                moved = true;
                match self.event(cx, ev) {
                    Ok(n) => served += n,
                    Err(e) => self.fail(cx, e),
                }
            }
            let n = self.serve_read(cx);
            moved |= n > 0;
            served += n;
            self.place_calls(cx);
            self.write_uni();
            self.flush_ready(cx);
            if !moved {
                break;
            }
        }
        self.note_early_refusal(cx);
        served
    }

    /// Counts the client's early data as refused once the server's first flight says so:
    /// whether or not the handshake is then completed (a replayed first flight never is).
    fn note_early_refusal(&mut self, cx: &Cx) {
        if let Some(seen) = self.seen.as_ref().filter(|s| s.server_flight_seen()) {
            if !self.refusal_noted {
                self.refusal_noted = true;
                if seen.early_refused() {
                    bump(&cx.ctx.log.counters.quic.early_refused, 1);
                }
            }
        }
    }

    /// Serves the requests whose heads came complete and sends what their streams have.
    /// Called after each stream is read, so that a request is done with before the next is
    /// read: its memory is freed where it was taken, not held across a batch of streams.
    fn serve_read(&mut self, cx: &mut Cx) -> usize {
        let mut served = 0;
        while let Some(ev) = self.h3.poll_event() {
            served += self.request_event(cx, ev);
        }
        if served > 0 {
            self.flush_ready(cx);
        }
        served
    }

    /// One of quinn-proto's events; returns the requests it served.
    fn event(&mut self, cx: &mut Cx, ev: Event) -> Result<usize, ConnError> {
        let mut served = 0;
        match ev {
            Event::HandshakeDataReady => self.hello(cx),
            Event::Connected => self.connected(cx),
            Event::Stream(StreamEvent::Opened { dir }) => {
                while let Some(id) = self.quic.streams().accept(dir) {
                    self.read(cx, id)?;
                    served += self.serve_read(cx);
                }
            }
            Event::Stream(StreamEvent::Readable { id }) => {
                self.read(cx, id)?;
                served += self.serve_read(cx);
            }
            Event::Stream(StreamEvent::Writable { id }) => self.ready.push(u64::from(id)),
            Event::Stream(StreamEvent::Stopped { id, .. }) => {
                // The client wants no more of the response: it ends here.
                if let Some(s) = self.streams.remove(&u64::from(id)) {
                    let _ = self.quic.send_stream(id).reset(REQUEST_CANCELLED);
                    s.log_end(cx, &self.base);
                }
            }
            Event::Stream(StreamEvent::Finished { .. }) => {}
            Event::Stream(StreamEvent::Available { .. }) => {}
            Event::ConnectionLost { reason } => {
                self.closed.get_or_insert(match reason {
                    ConnectionError::ApplicationClosed(_)
                    | ConnectionError::ConnectionClosed(_) => Closed::Client,
                    ConnectionError::TimedOut => Closed::IdleTimeout,
                    ConnectionError::Reset => Closed::Reset,
                    ConnectionError::TransportError(_) => Closed::ProtocolError,
                    _ => Closed::Other,
                });
                self.path.timed_out = matches!(reason, ConnectionError::TimedOut);
                self.peer_closed = matches!(
                    reason,
                    ConnectionError::ApplicationClosed(_) | ConnectionError::ConnectionClosed(_)
                );
                self.end_streams(cx);
            }
            Event::DatagramReceived | Event::DatagramsUnblocked => {}
        }
        Ok(served)
    }

    /// The handshake is done: our unidirectional streams open.
    fn connected(&mut self, cx: &Cx) {
        let mut open = || self.quic.streams().open(Dir::Uni);
        if let (Some(a), Some(b), Some(c)) = (open(), open(), open()) {
            self.uni = Some([a, b, c]);
        }
        if !matches!(self.base.tr, Transport::Quic(_)) {
            self.hello(cx);
        }
        let q = &cx.ctx.log.counters.quic;
        bump(&q.completed, 1);
        if let Some(seen) = &self.seen {
            if seen.resumed() {
                bump(&q.resumed, 1);
            }
            if let Transport::Quic(t) = &mut self.base.tr {
                t.resumed = seen.resumed();
            }
        }
    }

    /// The client's hello is read: the connection's TLS is what the pipeline sees (`$https`,
    /// `$ssl_server_name`, the server the SNI chose), from here on, for the requests that
    /// come in 0-RTT too; and whether 0-RTT was accepted is counted.
    fn hello(&mut self, cx: &Cx) {
        if self.quic.has_0rtt() {
            bump(&cx.ctx.log.counters.quic.early_accepted, 1);
        }
        let hs = self
            .quic
            .crypto_session()
            .handshake_data()
            .and_then(|d| d.downcast::<ringx_quic::Handshake>().ok());
        let (sni, seen) = hs.map_or((None, None), |h| (h.server_name, Some(h.seen)));
        self.seen = seen;
        let server = cx
            .ctx
            .tls
            .as_ref()
            .and_then(|t| t.sites.server(self.base.listener as usize, sni.as_deref()))
            .unwrap_or(0);
        self.base.tr = Transport::Quic(Box::new(TlsInfo {
            protocol: "TLSv1.3",
            cipher: "",
            sni,
            client_dn: None,
            client_auth: false,
            server,
            // Known at the handshake's end (`connected`); 0-RTT comes only with a resumption.
            resumed: self.quic.has_0rtt(),
            h2: false,
        }));
    }

    /// Reads what stream `id` delivered into the HTTP/3 state; a stream whose upstream takes
    /// no more of its body now (a proxied request's exchange, a gRPC call's upstream window)
    /// is left unread (QUIC's flow control then holds the client back) until the upstream
    /// has written what it has, as is a waiting request's once it keeps as much body as it
    /// may (`serve.rs`). A stream the client reset ends here, held or not.
    pub(super) fn read(&mut self, cx: &mut Cx, id: StreamId) -> Result<(), ConnError> {
        let n = u64::from(id);
        let s = self.streams.get(&n);
        let proxy_held = s.and_then(|s| s.proxy.as_ref()).is_some_and(|p| p.held > 0);
        let call_held = s.is_some_and(|s| s.body_held > 0);
        if proxy_held || call_held || self.keeps_enough(n) {
            // Not read, but a reset is seen now: the upstream that holds the stream back may
            // never take more, and its exchange must not outlive the request.
            if let Ok(Some(_)) = self.quic.recv_stream(id).received_reset() {
                return self.stream_reset(cx, id);
            }
            if !self.held.contains(&n) {
                self.held.push(n);
            }
            return Ok(());
        }
        let mut rs = self.quic.recv_stream(id);
        let Ok(mut chunks) = rs.read(true) else {
            return Ok(()); // closed already
        };
        // Each chunk is passed on once the next is known, so that the last goes with the
        // stream's end: a request that came whole (a GET in one packet) is then read, and
        // done with, in one step, not left open in the HTTP/3 state for an empty end.
        let mut last: Option<Bytes> = None;
        let mut result = Ok(());
        let end = loop {
            match chunks.next(usize::MAX) {
                Ok(Some(ch)) => {
                    if let Some(b) = last.replace(ch.bytes) {
                        result = self.h3.feed_bytes(n, &b, false);
                        if result.is_err() {
                            break None;
                        }
                    }
                }
                Ok(None) => break Some(End::Fin),
                Err(ReadError::Blocked) => break Some(End::Open),
                Err(ReadError::Reset(_)) => break Some(End::Reset),
            }
        };
        let _ = chunks.finalize();
        result?;
        let Some(end) = end else {
            return Ok(());
        };
        let fin = end == End::Fin;
        match last {
            Some(b) => self.h3.feed_bytes(n, &b, fin)?,
            None if fin => self.h3.feed(n, &[], true)?,
            None => {}
        }
        if end == End::Reset {
            self.stream_reset(cx, id)?;
        }
        Ok(())
    }

    /// The client reset stream `n`: its request is over, whatever it was doing or waiting
    /// for (its upstream exchange let go, its access-log line written), and a response not
    /// all written is cancelled (H3_REQUEST_CANCELLED), which also closes the stream so the
    /// client gets its stream credit back.
    fn stream_reset(&mut self, cx: &mut Cx, id: StreamId) -> Result<(), ConnError> {
        let n = u64::from(id);
        self.held.retain(|&h| h != n);
        self.h3.reset(n)?;
        let parked = self.parked.iter().position(|p| p.id == n);
        let Some(s) = self
            .streams
            .remove(&n)
            .or_else(|| parked.map(|i| self.parked.swap_remove(i).s))
        else {
            return Ok(());
        };
        let _ = self.quic.send_stream(id).reset(REQUEST_CANCELLED);
        s.log_end(cx, &self.base);
        Ok(())
    }

    /// Writes what the HTTP/3 state has for our control and QPACK streams.
    fn write_uni(&mut self) {
        let Some(ids) = self.uni else {
            return;
        };
        for (s, id) in [Uni::Control, Uni::Encoder, Uni::Decoder]
            .into_iter()
            .zip(ids)
        {
            let out = self.h3.out(s);
            if out.is_empty() {
                continue;
            }
            // These streams carry a few bytes each and are never blocked for long: what the
            // window does not take now is kept in the HTTP/3 state's buffer.
            let n = self.quic.send_stream(id).write(out).unwrap_or(0);
            self.h3.consumed(s, n);
        }
    }

    /// Sends more of each stream that has output and room for it.
    fn flush_ready(&mut self, cx: &mut Cx) {
        let mut ready = std::mem::take(&mut self.ready);
        for n in ready.drain(..) {
            let Some(s) = self.streams.get_mut(&n) else {
                continue;
            };
            let id = StreamId::from(VarInt::from_u64(n).unwrap_or_default());
            match s.send(cx, &mut self.quic.send_stream(id), &mut self.slab) {
                Ok(false) => {}
                Ok(true) => {
                    if let Some(s) = self.streams.remove(&n) {
                        s.log_end(cx, &self.base);
                    }
                }
                Err(()) => {
                    let _ = self.quic.send_stream(id).reset(VarInt::from_u32(0x102));
                    if let Some(s) = self.streams.remove(&n) {
                        s.log_end(cx, &self.base);
                    }
                }
            }
        }
        // The list's memory is kept for the next turn: this runs after every stream read
        // (`serve_read`), and a fresh list each time would be an allocation per request.
        if self.ready.is_empty() {
            self.ready = ready;
        }
    }

    /// The zone drains (shutdown, binary upgrade): GOAWAY tells the client to send no new
    /// requests here; those it sent are answered, then the connection closes
    /// ([`close_if_done`](Self::close_if_done)).
    pub fn drain(&mut self) {
        if !std::mem::replace(&mut self.draining, true) {
            self.h3.send_goaway();
            self.write_uni();
        }
    }

    /// A draining connection with no request left, and every response acknowledged, is
    /// closed (H3_NO_ERROR): a close discards what the peer has not acknowledged.
    pub fn close_if_done(&mut self, now: Instant) {
        // Our three unidirectional streams stay open for the connection's life.
        let ours = self.uni.map_or(0, |u| u.len());
        let acked = self.quic.streams().send_streams() <= ours;
        let idle = self.streams.is_empty() && self.parked.is_empty();
        if self.draining && idle && acked && !self.dead {
            self.dead = true;
            self.closed.get_or_insert(Closed::Drained);
            self.quic.close(
                now,
                VarInt::from_u32(0x100),
                Bytes::from_static(b"shutting down"),
            );
        }
    }

    /// The HTTP/3 layer failed: the connection closes with its error.
    pub(super) fn fail(&mut self, cx: &mut Cx, e: ConnError) {
        if std::mem::replace(&mut self.dead, true) {
            return;
        }
        self.closed.get_or_insert(Closed::Http3Error);
        bump(&cx.ctx.log.counters.quic.h3_errors[e.code.index()], 1);
        let code = VarInt::from_u64(e.code.code()).unwrap_or_default();
        self.quic
            .close(cx.io.now(), code, Bytes::from_static(e.msg.as_bytes()));
        // quinn-proto reports no ConnectionLost for a close of our own: the streams end here.
        self.end_streams(cx);
    }

    /// The connection is over (lost, closed by us, or drained away): every stream still
    /// in progress or waiting ends — its upstream exchange let go, its gRPC call reset, its
    /// access-log line written.
    pub fn end_streams(&mut self, cx: &mut Cx) {
        for (_, s) in self.streams.drain() {
            s.log_end(cx, &self.base);
        }
        for p in std::mem::take(&mut self.parked) {
            p.s.log_end(cx, &self.base);
        }
        self.ups.clear();
        self.held.clear();
    }

    /// Sends what the connection has to send.
    ///
    /// Once the peer closed the connection, nothing: quinn-proto would answer its
    /// CONNECTION_CLOSE with one of ours, which RFC 9000 §10.2.2 allows but does not ask
    /// for. The peer has stopped reading (it sent its close and went into its closing
    /// period), so the answer would cost the zone a datagram, and the peer a wake-up, for
    /// every connection a client ends; nginx does not send it either.
    pub fn transmit(&mut self, io: &mut Io, q: &QuicCounters, buf: &mut Vec<u8>) {
        if self.peer_closed {
            return;
        }
        let now = io.now();
        loop {
            buf.clear();
            let mtu = usize::from(self.quic.current_mtu()).max(1);
            let segments = match io.gso_works() {
                true => (MAX_GSO_BYTES / mtu).clamp(1, MAX_SEGMENTS),
                false => 1,
            };
            let Some(t) = self.quic.poll_transmit(now, segments, buf) else {
                return;
            };
            send(io, q, self.listener, &t, buf);
        }
    }

    /// Adds to the zone's counters `q` what the connection sent and lost since it was last
    /// counted: a loss is a packet quinn-proto declared lost (acknowledgements for three
    /// later ones, or too long without one), whose frames that must be resent it queued
    /// again.
    /// Returns quinn-proto's path statistics it read.
    pub fn count_path(&mut self, q: &QuicCounters) -> PathStats {
        let p = self.quic.stats().path;
        let now = PathSeen {
            sent: p.sent_packets,
            lost: p.lost_packets,
            lost_bytes: p.lost_bytes,
            congestion: p.congestion_events,
        };
        let was = std::mem::replace(&mut self.path_seen, now);
        if now == was {
            return p;
        }
        bump(&q.packets_sent, now.sent.saturating_sub(was.sent));
        bump(&q.packets_lost, now.lost.saturating_sub(was.lost));
        bump(&q.lost_bytes, now.lost_bytes.saturating_sub(was.lost_bytes));
        bump(
            &q.congestion_events,
            now.congestion.saturating_sub(was.congestion),
        );
        p
    }
}

/// Sends what quinn-proto wrote for `t` into `buf` from listener `l`, with the ECN bits it
/// asks for: one datagram, or several of `segment_size` bytes each in one GSO send (one at
/// a time where the kernel or device cannot segment, or the zone sends without GSO); counts
/// the datagrams and sends queued in `q`. A segmented send's bytes go without a copy
/// (`buf` is then left empty, with a spare's capacity); a single datagram is copied, so the
/// scratch buffer (quinn-proto sizes it for a whole GSO batch, ~64 KiB) stays here rather
/// than held by a send of a few dozen bytes.
pub(super) fn send(io: &mut Io, q: &QuicCounters, l: ListenerId, t: &Transmit, buf: &mut Vec<u8>) {
    buf.truncate(t.size);
    let seg = t.segment_size.unwrap_or(buf.len()).max(1);
    let count = buf.len().div_ceil(seg) as u64;
    let one = SendTo {
        ecn: t.ecn.map_or(0, |e| e as u8),
        ..SendTo::one(t.destination, t.src_ip)
    };
    if let (Ok(segment), true) = (u16::try_from(seg), count > 1 && io.gso_works()) {
        let bytes = buf.len() as u64;
        if io.send_buf(l, SendTo { segment, ..one }, buf) {
            bump(&q.datagrams_out, count);
            bump(&q.bytes_out, bytes);
            bump(&q.sends, 1);
        }
        return;
    }
    for d in buf.chunks(seg) {
        if io.send_with(l, one, d) {
            bump(&q.datagrams_out, 1);
            bump(&q.bytes_out, d.len() as u64);
            bump(&q.sends, 1);
        }
    }
}
