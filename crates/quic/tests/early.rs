//! 0-RTT across a process's zones, against quinn-proto's client, datagrams passed in memory:
//! two server endpoints (two zones) over one set of [`Keys`] and one TLS configuration made
//! by [`for_quic`] with early data on. A ticket one zone issued resumes in the other with its
//! early data accepted; the client's first flight, replayed from elsewhere, gets a full
//! handshake with no early data from either zone (or, while the client's connection lives,
//! is dropped by it as duplicates); with early data off, tickets carry none.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use quinn_proto::crypto::rustls::QuicClientConfig;
use quinn_proto::{
    ClientConfig, Connection, ConnectionHandle, DatagramEvent, Dir, Endpoint, EndpointConfig,
    Event, StreamEvent, StreamId,
};
use ringx_quic::{endpoint_config, for_quic, server_config, Keys, Limits, Owner};

const SERVER: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 4433);
const CLIENT: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 50000);
const ATTACKER: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 9)), 40000);

mod common;

/// Two zones' endpoints serving `localhost` with early data as `early` says, and a client
/// configuration that keeps its tickets and sends early data when it can.
fn process(early: bool) -> (Vec<Endpoint>, ClientConfig) {
    let (tls, mut client) = common::tls();
    let keys = Keys::generate().unwrap();
    let sc = Arc::new(
        server_config(
            Arc::new(for_quic(tls, &keys, early)),
            &Limits::default(),
            &keys,
        )
        .unwrap(),
    );
    let zones = (0..2)
        .map(|zone| {
            let owner = Owner {
                host: 0,
                zone,
                epoch: 0,
            };
            let ec = Arc::new(endpoint_config(owner, &keys));
            Endpoint::new(ec, Some(sc.clone()), true, None)
        })
        .collect();
    client.enable_early_data = true;
    let cc = ClientConfig::new(Arc::new(QuicClientConfig::try_from(client).unwrap()));
    (zones, cc)
}

/// One connection from `from` to a zone.
struct Link {
    client: Option<(Endpoint, ConnectionHandle, Connection)>,
    server: Option<(ConnectionHandle, Connection)>,
    zone: usize,
    from: SocketAddr,
    /// What the client sent before the server's first answer.
    first_flight: Vec<Vec<u8>>,
    answered: bool,
    /// The streams the server accepted, the request bytes it read on them, and whether it
    /// read any before its handshake was done.
    streams: Vec<StreamId>,
    read: Vec<u8>,
    read_early: bool,
    now: Instant,
}

impl Link {
    fn new(zone: usize, from: SocketAddr, now: Instant) -> Link {
        Link {
            client: None,
            server: None,
            zone,
            from,
            first_flight: Vec::new(),
            answered: false,
            streams: Vec::new(),
            read: Vec::new(),
            read_early: false,
            now,
        }
    }

    fn connect(zone: usize, cc: &ClientConfig, now: Instant) -> Link {
        let mut ep = Endpoint::new(Arc::new(EndpointConfig::default()), None, true, None);
        let (h, c) = ep.connect(now, cc.clone(), SERVER, "localhost").unwrap();
        Link {
            client: Some((ep, h, c)),
            ..Link::new(zone, CLIENT, now)
        }
    }

    /// A stream carrying `req`, sent as soon as the client can (in 0-RTT with a ticket
    /// that allows it).
    fn request(&mut self, req: &[u8]) {
        let (_, _, c) = self.client.as_mut().unwrap();
        let s = c.streams().open(Dir::Bi).expect("a stream may open");
        c.send_stream(s).write(req).unwrap();
        c.send_stream(s).finish().unwrap();
    }

    /// A datagram to the zone: a new connection is accepted (as the zone's role does when
    /// no Retry is asked for).
    fn zone_gets(&mut self, zones: &mut [Endpoint], d: &[u8]) {
        let mut buf = Vec::new();
        let ep = &mut zones[self.zone];
        match ep.handle(self.now, self.from, None, None, BytesMut::from(d), &mut buf) {
            Some(DatagramEvent::NewConnection(inc)) => {
                let accepted = ep.accept(inc, self.now, &mut buf, None);
                self.server = Some(accepted.map_err(|e| e.cause).unwrap());
            }
            Some(DatagramEvent::ConnectionEvent(_, ev)) => {
                if let Some((_, s)) = self.server.as_mut() {
                    s.handle_event(ev);
                }
            }
            Some(DatagramEvent::Response(_)) | None => {}
        }
    }

    /// The server's events: the streams it accepts are read.
    fn server_events(&mut self, zones: &mut [Endpoint]) {
        let Some((h, s)) = self.server.as_mut() else {
            return;
        };
        while let Some(ev) = s.poll_endpoint_events() {
            if let Some(back) = zones[self.zone].handle_event(*h, ev) {
                s.handle_event(back);
            }
        }
        while let Some(ev) = s.poll() {
            match ev {
                Event::Stream(StreamEvent::Opened { dir: Dir::Bi }) => {
                    while let Some(id) = s.streams().accept(Dir::Bi) {
                        self.streams.push(id);
                    }
                }
                Event::Stream(StreamEvent::Readable { .. }) => {}
                _ => continue,
            }
            let early = s.is_handshaking();
            for &id in &self.streams {
                let mut rs = s.recv_stream(id);
                let Ok(mut chunks) = rs.read(true) else {
                    continue;
                };
                while let Ok(Some(ch)) = chunks.next(usize::MAX) {
                    self.read.extend_from_slice(&ch.bytes);
                    self.read_early |= early;
                }
                let _ = chunks.finalize();
            }
        }
    }

    /// Passes datagrams both ways until neither side has more (timers due soon fired).
    fn run(&mut self, zones: &mut [Endpoint]) {
        let mut buf = Vec::new();
        for _ in 0..200 {
            let mut moved = false;
            let mut out = Vec::new();
            if let Some((_, _, c)) = self.client.as_mut() {
                while let Some(t) = c.poll_transmit(self.now, 1, &mut buf) {
                    out.push(buf[..t.size].to_vec());
                    buf.clear();
                }
            }
            for d in out {
                moved = true;
                if !self.answered {
                    self.first_flight.push(d.clone());
                }
                self.zone_gets(zones, &d);
            }
            self.server_events(zones);
            let mut back = Vec::new();
            if let Some((_, s)) = self.server.as_mut() {
                while let Some(t) = s.poll_transmit(self.now, 1, &mut buf) {
                    back.push(buf[..t.size].to_vec());
                    buf.clear();
                }
            }
            for d in back {
                moved = true;
                self.answered = true;
                self.client_gets(&d);
            }
            if !moved && !self.tick() {
                return;
            }
        }
    }

    fn client_gets(&mut self, d: &[u8]) {
        let Some((ep, h, c)) = self.client.as_mut() else {
            return;
        };
        let mut buf = Vec::new();
        let ev = ep.handle(self.now, SERVER, None, None, BytesMut::from(d), &mut buf);
        if let Some(DatagramEvent::ConnectionEvent(_, ev)) = ev {
            c.handle_event(ev);
        }
        while let Some(ev) = c.poll_endpoint_events() {
            if let Some(back) = ep.handle_event(*h, ev) {
                c.handle_event(back);
            }
        }
        while c.poll().is_some() {}
    }

    /// Fires the next timer if it is due within 50 ms; false: none is.
    fn tick(&mut self) -> bool {
        let c = self.client.as_mut().and_then(|(_, _, c)| c.poll_timeout());
        let s = self.server.as_mut().and_then(|(_, s)| s.poll_timeout());
        match c.into_iter().chain(s).min() {
            Some(t) if t <= self.now + Duration::from_millis(50) => {
                self.now = self.now.max(t);
                if let Some((_, _, c)) = self.client.as_mut() {
                    c.handle_timeout(self.now);
                }
                if let Some((_, s)) = self.server.as_mut() {
                    s.handle_timeout(self.now);
                }
                true
            }
            _ => false,
        }
    }

    /// The server closes the connection and the zone forgets it once drained.
    fn drain(&mut self, zones: &mut [Endpoint]) {
        let (_, s) = self.server.as_mut().expect("the zone accepted");
        s.close(
            self.now,
            quinn_proto::VarInt::from_u32(0),
            bytes::Bytes::new(),
        );
        for _ in 0..100 {
            let (_, s) = self.server.as_mut().unwrap();
            if s.is_drained() {
                break;
            }
            let mut buf = Vec::new();
            while s.poll_transmit(self.now, 1, &mut buf).is_some() {
                buf.clear();
            }
            if let Some(t) = s.poll_timeout() {
                self.now = self.now.max(t);
                s.handle_timeout(self.now);
            }
            self.server_events(zones);
        }
        assert!(self.server_conn().is_drained());
    }

    fn server_conn(&self) -> &Connection {
        &self.server.as_ref().expect("the zone accepted").1
    }
}

/// `flight` sent to `zone` from another address, with no client to answer it.
fn replay(zones: &mut [Endpoint], zone: usize, flight: &[Vec<u8>], now: Instant) -> Link {
    let mut l = Link::new(zone, ATTACKER, now);
    for d in flight {
        l.zone_gets(zones, d);
        l.server_events(zones);
    }
    l
}

#[test]
fn a_ticket_from_one_zone_sends_early_data_to_the_other_once() {
    let (mut zones, cc) = process(true);
    let now = Instant::now();
    let mut first = Link::connect(0, &cc, now);
    first.run(&mut zones);
    assert!(!first.server_conn().is_handshaking());
    assert!(!first.server_conn().has_0rtt(), "no ticket yet");

    let mut second = Link::connect(1, &cc, first.now);
    let (_, _, c) = second.client.as_ref().unwrap();
    assert!(c.has_0rtt(), "the ticket from zone 0 allows early data");
    second.request(b"GET / in 0-RTT");
    second.run(&mut zones);
    let (_, _, c) = second.client.as_ref().unwrap();
    assert!(c.accepted_0rtt(), "zone 1 accepted the early data");
    assert!(second.server_conn().has_0rtt());
    assert_eq!(second.read, b"GET / in 0-RTT");
    assert!(second.read_early, "read before the handshake was done");
    // quinn-proto's client coalesces its 0-RTT packet with the Initial.
    assert!(!second.first_flight.is_empty());

    // The same flight again, from elsewhere. To the other zone: a new connection, and the
    // ticket is spent.
    let flight = second.first_flight.clone();
    let r = replay(&mut zones, 0, &flight, second.now);
    assert!(!r.server_conn().has_0rtt(), "replayed early data accepted");
    assert!(
        r.server_conn().is_handshaking(),
        "the replayer cannot finish"
    );
    assert!(r.read.is_empty(), "a replayed request read");
    // To the zone of the client's connection, while it lives: that connection's packets
    // again, which it drops as duplicates.
    second.from = ATTACKER;
    for d in &flight {
        second.zone_gets(&mut zones, d);
        second.server_events(&mut zones);
    }
    assert_eq!(second.read, b"GET / in 0-RTT", "read once");
    // Once it is gone: a new connection there too, with no early data.
    second.drain(&mut zones);
    let r = replay(&mut zones, 1, &flight, second.now);
    assert!(!r.server_conn().has_0rtt(), "replayed early data accepted");
    assert!(r.read.is_empty(), "a replayed request read");
}

#[test]
fn without_early_data_tickets_resume_but_carry_none() {
    let (mut zones, cc) = process(false);
    let now = Instant::now();
    let mut first = Link::connect(0, &cc, now);
    first.run(&mut zones);
    let mut second = Link::connect(1, &cc, first.now);
    let (_, _, c) = second.client.as_ref().unwrap();
    assert!(!c.has_0rtt(), "a stateless ticket offers no early data");
    second.run(&mut zones);
    second.request(b"GET / in 1-RTT");
    second.run(&mut zones);
    assert!(!second.server_conn().is_handshaking());
    assert_eq!(second.read, b"GET / in 1-RTT");
    assert!(!second.read_early);
}
