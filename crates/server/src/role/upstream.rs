//! The upstream connection role: one outbound connection to a server of an `[[upstream]]`.
//!
//! It carries one exchange at a time for the client role that owns it (an HTTP/1 request being
//! proxied, a tunnel, a stream), or waits in its server's keep-alive pool. Events on it are
//! delivered to its owner; an upstream connection that has no owner — pooled, or cut loose
//! from a client that went away — handles them itself ([`UpConn::on_orphan`]): anything that
//! happens to an idle connection makes it unusable, so it leaves the pool and closes.

use std::time::Instant;

use ringx_engine::{ConnId, Io};
use ringx_http::upstream::ClientFraming;
use ringx_http::BodyDecoder;

use crate::ctx::base::Base;
use crate::transport::{TlsUpTransport, Transport};
use crate::upstream::dial::{Dial, Reached};
use crate::upstream::pools::ZonePools;
use ringx_config::upstream::ProxyProtocol;

/// Timer-wheel keys of upstream connections carry this bit (client connections do not).
pub const UP_KEY: u32 = 1 << 31;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UpState {
    /// Connect in flight.
    Connecting,
    /// Carrying a request and its response.
    Busy,
    /// In the keep-alive pool.
    Idle,
    /// A byte tunnel (WebSocket, stream).
    Tunnel,
    /// Close requested; waiting for `on_closed`.
    Closing,
}

/// What happened on an upstream connection, as delivered to its owner.
pub enum UpEvent<'a> {
    Connected,
    Data(&'a [u8]),
    /// The server closed its write side.
    Eof,
    /// Everything queued towards the server was written.
    Flushed,
    /// The connection is gone (with the error, if any). Its record is still in the table
    /// while the owner handles this, and leaves it afterwards unless the owner opened a new
    /// connection in the same slot.
    Closed(Option<std::io::Error>),
    /// Its deadline passed.
    Timeout,
}

/// One upstream connection.
pub struct UpConn {
    pub gen: u32,
    /// Generation of the upstream state `upstream` indexes (see `ZoneCtx::pools`).
    pub pools_gen: u32,
    pub upstream: usize,
    pub server: usize,
    /// The client connection it serves, with that connection's generation.
    pub client: Option<(ConnId, u32)>,
    pub state: UpState,
    pub tr: Transport,
    /// A response head that arrived in pieces.
    pub inbuf: Vec<u8>,
    pub head_done: bool,
    /// Framing of the response body (None: until close, or no body).
    pub body: Option<BodyDecoder>,
    pub until_close: bool,
    pub framing: ClientFraming,
    /// Came from the keep-alive pool: a close before any byte is the usual keep-alive race,
    /// retried on a fresh connection without blaming the server.
    pub reused: bool,
    pub got_bytes: bool,
    /// May go back to the pool after this response.
    pub keep: bool,
    /// Sent a PROXY header for one client: never reused for another.
    pub tied: bool,
    pub paused: bool,
    pub eof: bool,
    pub deadline: Instant,
    /// When the earliest timer-wheel entry of this connection fires.
    pub wheel_at: Option<Instant>,
    /// A multiplexed HTTP/2 connection (gRPC): it has no single client; its streams' owners
    /// are in it.
    pub mux: Option<Box<crate::role::grpc::mux::Mux>>,
}

impl UpConn {
    pub fn new(gen: u32, upstream: usize, server: usize, now: Instant) -> UpConn {
        UpConn {
            gen,
            pools_gen: 0,
            upstream,
            server,
            client: None,
            state: UpState::Connecting,
            tr: Transport::Plain,
            inbuf: Vec::new(),
            head_done: false,
            body: None,
            until_close: false,
            framing: ClientFraming::Same,
            reused: false,
            got_bytes: false,
            keep: false,
            tied: false,
            paused: false,
            eof: false,
            deadline: now,
            wheel_at: None,
            mux: None,
        }
    }

    /// Ready for the next request on a pooled connection.
    pub fn reset_for_request(&mut self) {
        self.inbuf.clear();
        self.head_done = false;
        self.body = None;
        self.until_close = false;
        self.framing = ClientFraming::Same;
        self.got_bytes = false;
        self.keep = false;
    }

    /// Gives up the connection: it closes, and no event reaches a client any more.
    pub fn abandon(&mut self, io: &mut Io, u: ConnId) {
        if self.state != UpState::Closing {
            self.state = UpState::Closing;
            self.client = None;
            io.close(u);
        }
    }

    /// An event on a connection no client owns: pooled, or cut loose. An idle connection
    /// that receives bytes nobody asked for, or whose server closes it, or whose keep-alive
    /// time runs out, leaves the pool and closes; nothing else is done with orphans.
    pub fn on_orphan(
        &mut self,
        io: &mut Io,
        pools: Option<&mut ZonePools>,
        u: ConnId,
        ev: &UpEvent,
    ) {
        if let UpEvent::Data(_) = ev {
            self.got_bytes = true;
        }
        if let UpEvent::Eof = ev {
            self.eof = true;
        }
        match (self.state, ev) {
            (UpState::Closing, _) | (_, UpEvent::Flushed) => {}
            (UpState::Idle, UpEvent::Closed(..)) => {
                if let Some(p) = pools {
                    p.remove_idle(self.upstream, self.server, u);
                }
            }
            (_, UpEvent::Closed(..)) => {}
            (UpState::Idle, _) => {
                if let Some(p) = pools {
                    p.remove_idle(self.upstream, self.server, u);
                }
                self.abandon(io, u);
            }
            _ => self.abandon(io, u),
        }
    }
}

/// How a new connection to an upstream server starts: a PROXY header first (`pp`, its
/// `proxy_protocol` setting), then a TLS handshake (`tls`).
pub struct Opening {
    pub pp: ProxyProtocol,
    pub tls: Option<UpTlsStart>,
}

/// Opens the record of the connection `r` reached for the client connection `c` (`b`); a new
/// connection starts as `how` says.
pub fn attach<'t>(
    io: &mut Io,
    ups: &'t mut UpTable,
    b: &Base,
    c: ConnId,
    dial: &Dial,
    r: Reached,
    how: Opening,
) -> &'t mut UpConn {
    let Opening { pp, tls } = how;
    let rec = ups.open(r.conn, dial.upstream, dial.server, r.reused, io.now());
    rec.client = Some((c, b.gen));
    rec.pools_gen = dial.gen;
    if !r.reused && pp != ProxyProtocol::Off {
        if let (Some(src), Some(dst)) = (b.addr, b.local) {
            if let Some(out) = rec.tr.out_buf(io, r.conn) {
                match pp {
                    ProxyProtocol::V1 => ringx_http::proxy_protocol::write_v1(out, src, dst),
                    _ => ringx_http::proxy_protocol::write_v2(out, src, dst),
                }
            }
            rec.tied = true;
        }
    }
    if !r.reused {
        if let Some((config, name)) = tls {
            // After any PROXY header: the ClientHello goes out first on the TLS stream.
            let Some(out) = io.out_buf(r.conn) else {
                return rec;
            };
            match ringx_tls::client::TlsUpConn::new(config, name, out) {
                Ok(t) => rec.tr = Transport::TlsUp(Box::new(TlsUpTransport::new(t))),
                Err(e) => {
                    tracing::warn!("upstream TLS could not start: {e}");
                    io.close(r.conn);
                }
            }
        }
    }
    rec
}

/// What a new TLS connection to an upstream server starts from: its configuration and the
/// name it sends and verifies.
pub type UpTlsStart = (
    std::sync::Arc<rustls::ClientConfig>,
    rustls::pki_types::ServerName<'static>,
);

/// The zone's upstream connections, by handle.
#[derive(Default)]
pub struct UpTable {
    conns: Vec<Option<Box<UpConn>>>,
    gen: u32,
    /// Records held.
    live: usize,
}

impl UpTable {
    /// Whether `c` is an upstream connection.
    #[inline]
    pub fn contains(&self, c: ConnId) -> bool {
        self.conns.get(c.index()).is_some_and(Option::is_some)
    }

    #[inline]
    pub fn get(&self, c: ConnId) -> Option<&UpConn> {
        self.conns.get(c.index()).and_then(|x| x.as_deref())
    }

    #[inline]
    pub fn get_mut(&mut self, c: ConnId) -> Option<&mut UpConn> {
        self.conns.get_mut(c.index()).and_then(|x| x.as_deref_mut())
    }

    /// The record of `c` while it is still the connection opened as generation `gen`. A
    /// slot is reused once its connection closed; whoever kept a handle past that (a tunnel
    /// whose client is still writing) gets None here, not the new connection's record.
    #[inline]
    pub fn get_live(&mut self, c: ConnId, gen: u32) -> Option<&mut UpConn> {
        self.get_mut(c).filter(|x| x.gen == gen)
    }

    /// The record of `u`, new (a fresh connection to `server` of `upstream`) or, for a
    /// connection taken from the pool, the pooled one made ready for the next request.
    pub fn open(
        &mut self,
        u: ConnId,
        upstream: usize,
        server: usize,
        reused: bool,
        now: Instant,
    ) -> &mut UpConn {
        if u.index() >= self.conns.len() {
            self.conns.resize_with(u.index() + 1, || None);
        }
        let slot = &mut self.conns[u.index()];
        match slot {
            Some(old) if reused => {
                old.reset_for_request();
                old.state = UpState::Busy;
            }
            _ => {
                self.gen = self.gen.wrapping_add(1);
                self.live += usize::from(slot.is_none());
                *slot = Some(Box::new(UpConn::new(self.gen, upstream, server, now)));
            }
        }
        let rec = slot.as_deref_mut().expect("just filled");
        rec.reused = reused;
        rec
    }

    /// Takes the record out (the connection closed).
    pub fn take(&mut self, c: ConnId) -> Option<Box<UpConn>> {
        let out = self.conns.get_mut(c.index()).and_then(Option::take);
        self.live -= usize::from(out.is_some());
        out
    }

    /// How many upstream connections the zone holds.
    pub fn len(&self) -> usize {
        self.live
    }

    /// Every upstream connection, with its handle.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (ConnId, &mut UpConn)> {
        self.conns
            .iter_mut()
            .enumerate()
            .filter_map(|(i, x)| x.as_deref_mut().map(|u| (ConnId(i as u32), u)))
    }

    pub fn is_empty(&self) -> bool {
        self.live == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ringx_engine::testio::TestDriver;
    use ringx_engine::{ConnectTo, Handler, ListenerId};
    use std::time::Duration;

    /// A handler that owns nothing: every event goes to the orphan path.
    struct Orphans {
        table: UpTable,
        pools: ZonePools,
    }

    impl Handler for Orphans {
        fn on_accept(&mut self, _: &mut Io, _: ConnId, _: ListenerId) {}
        fn on_data(&mut self, io: &mut Io, c: ConnId, data: &[u8]) {
            let ev = UpEvent::Data(data);
            if let Some(up) = self.table.get_mut(c) {
                up.on_orphan(io, Some(&mut self.pools), c, &ev);
            }
        }
        fn on_eof(&mut self, io: &mut Io, c: ConnId) {
            if let Some(up) = self.table.get_mut(c) {
                up.on_orphan(io, Some(&mut self.pools), c, &UpEvent::Eof);
            }
        }
        fn on_closed(&mut self, io: &mut Io, c: ConnId, err: Option<std::io::Error>) {
            if let Some(up) = self.table.get_mut(c) {
                up.on_orphan(io, Some(&mut self.pools), c, &UpEvent::Closed(err));
            }
            self.table.take(c);
        }
        fn on_timer(&mut self, _: &mut Io) -> Option<Duration> {
            None
        }
        fn on_wake(&mut self, _: &mut Io) {}
    }

    fn pooled() -> (TestDriver, Orphans, ConnId) {
        let mut t = TestDriver::new();
        let mut h = Orphans {
            table: UpTable::default(),
            pools: crate::testkit::pools(1, 4),
        };
        let u = t
            .io()
            .connect(&ConnectTo::new("127.0.0.1:9".parse().unwrap()))
            .unwrap();
        t.connected(&mut h, u);
        let now = t.now();
        let rec = h.table.open(u, 0, 0, false, now);
        rec.state = UpState::Idle;
        assert!(h.pools.put_idle(0, 0, u));
        (t, h, u)
    }

    /// Unsolicited bytes on a pooled connection: it closes and leaves the pool, so no later
    /// request is written to a connection that will never answer it.
    #[test]
    fn bytes_on_an_idle_connection_take_it_out_of_the_pool() {
        let (mut t, mut h, u) = pooled();
        t.recv(&mut h, u, b"HTTP/1.1 200 OK\r\n\r\n");
        assert!(t.closed(u), "closed");
        assert_eq!(h.pools.take_idle(0, 0), None, "no longer pooled");
    }

    #[test]
    fn a_server_closing_an_idle_connection_takes_it_out_of_the_pool() {
        let (mut t, mut h, u) = pooled();
        t.eof(&mut h, u);
        assert!(t.closed(u));
        assert_eq!(h.pools.take_idle(0, 0), None);
    }

    #[test]
    fn a_reset_idle_connection_leaves_the_pool() {
        let (mut t, mut h, u) = pooled();
        t.reset(
            &mut h,
            u,
            std::io::Error::from_raw_os_error(libc::ECONNRESET),
        );
        assert_eq!(h.pools.take_idle(0, 0), None);
    }

    /// A connection taken from the pool keeps its record but starts a new exchange.
    #[test]
    fn reopening_a_pooled_record_resets_it() {
        let now = Instant::now();
        let mut tbl = UpTable::default();
        let u = ConnId(3);
        let rec = tbl.open(u, 1, 2, false, now);
        let gen = rec.gen;
        rec.head_done = true;
        rec.keep = true;
        rec.inbuf.extend_from_slice(b"partial");
        rec.state = UpState::Idle;
        let rec = tbl.open(u, 1, 2, true, now);
        assert_eq!(rec.gen, gen, "the same connection");
        assert!(rec.reused && !rec.head_done && !rec.keep && rec.inbuf.is_empty());
        assert_eq!(rec.state, UpState::Busy);
        let rec = tbl.open(u, 1, 2, false, now);
        assert_ne!(rec.gen, gen, "a new connection in the slot");
        assert!(tbl.contains(u) && !tbl.contains(ConnId(2)));
        assert!(tbl.take(u).is_some() && tbl.is_empty());
    }
}
