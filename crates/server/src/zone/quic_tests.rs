//! A QUIC connection through the zone, with quinn-proto's client and the test driver: the
//! zone's timer turns keep up with the connection's deadlines as quinn-proto moves them, so
//! none fires late, a connection left silent is closed at its idle timeout, one the client
//! closes drains without a word back, and a ClientHello in two Initials of one batch is
//! acknowledged with the server's flight, not on its own.

use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use quinn_proto::crypto::rustls::QuicClientConfig;
use quinn_proto::{
    ClientConfig, Connection, ConnectionHandle, DatagramEvent, Endpoint, EndpointConfig, Event,
};
use rustls::pki_types::CertificateDer;

use crate::testkit::{self_signed, Harness, TempDir};

const CLIENT: &str = "192.0.2.10:40000";
const SERVER: &str = "127.0.0.1:8443";
const IDLE: Duration = Duration::from_secs(5);

/// quinn-proto's client endpoint and its one connection.
struct Client {
    ep: Endpoint,
    ch: ConnectionHandle,
    conn: Connection,
    connected: bool,
}

/// A zone with one TLS server on QUIC (`quic_idle_timeout` = [`IDLE`]), its directory, and a
/// client connecting to it that trusts its certificate.
fn site() -> (Harness, TempDir, Client) {
    let (cert, key, der) = self_signed("q.test");
    let dir = TempDir::new(&[("cert.pem", cert.as_bytes()), ("key.pem", key.as_bytes())]);
    let d = dir.path();
    let h = Harness::new(&format!(
        r#"
[http]
quic_idle_timeout = "{}s"
[[server]]
listen = ["{SERVER}"]
tls = {{ cert = "{d}/cert.pem", key = "{d}/key.pem" }}
quic = true
  [[server.location]]
  path = "/"
  return = {{ status = 200, body = "hi" }}
"#,
        IDLE.as_secs()
    ));
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from(der)).unwrap();
    // The key shares browsers, Go and quic-go offer: the post-quantum hybrid first, whose
    // ClientHello takes two Initials.
    let mut provider = rustls::crypto::aws_lc_rs::default_provider();
    provider.kx_groups = vec![
        rustls::crypto::aws_lc_rs::kx_group::X25519MLKEM768,
        rustls::crypto::aws_lc_rs::kx_group::X25519,
    ];
    let mut tls = rustls::ClientConfig::builder_with_provider(Arc::new(provider))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    tls.alpn_protocols = vec![b"h3".to_vec()];
    let cc = ClientConfig::new(Arc::new(QuicClientConfig::try_from(tls).unwrap()));
    let mut ep = Endpoint::new(Arc::new(EndpointConfig::default()), None, true, None);
    let (ch, conn) = ep
        .connect(h.t.now(), cc, SERVER.parse().unwrap(), "q.test")
        .unwrap();
    let cl = Client {
        ep,
        ch,
        conn,
        connected: false,
    };
    (h, dir, cl)
}

/// Passes datagrams both ways at the zone's clock until neither side has more to send.
fn pump(h: &mut Harness, cl: &mut Client) {
    let server: SocketAddr = SERVER.parse().unwrap();
    for _ in 0..100 {
        let now = h.t.now();
        if cl.conn.poll_timeout().is_some_and(|t| t <= now) {
            cl.conn.handle_timeout(now);
        }
        let mut moved = false;
        let mut buf = Vec::new();
        while let Some(t) = cl.conn.poll_transmit(now, 1, &mut buf) {
            moved = true;
            h.datagram(0, CLIENT, &buf[..t.size]);
            buf.clear();
        }
        for (_, d) in h.datagrams() {
            moved = true;
            let ev = cl
                .ep
                .handle(now, server, None, None, BytesMut::from(&d[..]), &mut buf);
            if let Some(DatagramEvent::ConnectionEvent(_, e)) = ev {
                cl.conn.handle_event(e);
            }
        }
        while let Some(e) = cl.conn.poll_endpoint_events() {
            if let Some(back) = cl.ep.handle_event(cl.ch, e) {
                cl.conn.handle_event(back);
            }
        }
        while let Some(e) = cl.conn.poll() {
            if matches!(e, Event::Connected) {
                cl.connected = true;
            }
        }
        if !moved {
            return;
        }
    }
    panic!("the client and the zone never stopped sending");
}

#[test]
fn the_zone_wakes_by_each_quic_deadline_and_a_silent_connection_closes_at_its_idle_timeout() {
    let (mut h, _dir, mut cl) = site();
    pump(&mut h, &mut cl);
    assert!(cl.connected, "the handshake completes");
    let counters = h.counters.clone();
    let quic = &counters.quic;
    assert_eq!(quic.connections.load(Relaxed), 1);
    let silent_since = h.t.now();
    // From here the client says nothing more (its own timers aside, which the pump runs):
    // every deadline the zone's connection has, its handshake's retransmission timer that
    // the client's acknowledgement clears, key discard, the idle timeout, must find the zone
    // awake by then. Walk the zone's clock from one timer turn to the next.
    let mut turns = 0;
    while quic.closed.load(Relaxed) == 0 {
        let due: Option<Instant> = h.z.quic.earliest_deadline();
        let planned = h.t.next_timer();
        if let Some(d) = due {
            assert!(
                planned.is_some_and(|p| p <= d),
                "the zone would sleep past a QUIC deadline: its next turn {:?}, the deadline {:?} \
                 (after the silence began)",
                planned.map(|p| p - silent_since),
                d - silent_since
            );
        }
        let Some(p) = planned else {
            panic!("no timer turn is planned and the connection is still open");
        };
        h.advance(p.saturating_duration_since(h.t.now()));
        pump(&mut h, &mut cl);
        turns += 1;
        assert!(turns < 10_000, "the connection never closed");
    }
    // Closed at its idle timeout (and drained), not long after it.
    let waited = h.t.now() - silent_since;
    assert!(
        waited >= IDLE && waited < IDLE + Duration::from_secs(2),
        "closed {waited:?} after the last packet, for an idle timeout of {IDLE:?}"
    );
    assert_eq!(quic.connections.load(Relaxed), 0);
}

#[test]
fn a_new_connection_asks_the_zone_to_wake_by_its_first_deadline() {
    let (mut h, _dir, mut cl) = site();
    // Nothing else has a timer in this zone: only the new connection's deadlines plan a turn.
    let now = h.t.now();
    let mut buf = Vec::new();
    let t = cl
        .conn
        .poll_transmit(now, 1, &mut buf)
        .expect("the client's Initial");
    h.datagram(0, CLIENT, &buf[..t.size]);
    let due =
        h.z.quic
            .earliest_deadline()
            .expect("the new connection has deadlines");
    let planned = h.t.next_timer();
    assert!(
        planned.is_some_and(|p| p <= due),
        "the zone's next turn {planned:?} comes after the connection's deadline {due:?}"
    );
}

#[test]
fn a_connection_the_client_closes_drains_without_an_answer() {
    let (mut h, _dir, mut cl) = site();
    pump(&mut h, &mut cl);
    assert!(cl.connected, "the handshake completes");
    let counters = h.counters.clone();
    let quic = &counters.quic;
    let now = h.t.now();
    cl.conn.close(now, 0u32.into(), bytes::Bytes::new());
    let mut buf = Vec::new();
    let t = cl
        .conn
        .poll_transmit(now, 1, &mut buf)
        .expect("the client's CONNECTION_CLOSE");
    h.datagram(0, CLIENT, &buf[..t.size]);
    // RFC 9000 §10.2.2: the zone may answer a close with one of its own; it does not.
    let answered = h.datagrams();
    assert!(
        answered.is_empty(),
        "the zone answered the client's close with {} datagram(s)",
        answered.len()
    );
    // The connection drains (three PTOs) and goes, still silent.
    let mut turns = 0;
    while quic.closed.load(Relaxed) == 0 {
        let Some(p) = h.t.next_timer() else {
            panic!("no timer turn is planned and the closed connection is still there");
        };
        h.advance(p.saturating_duration_since(h.t.now()));
        assert!(h.datagrams().is_empty(), "the draining connection sent");
        turns += 1;
        assert!(turns < 1_000, "the connection never drained");
    }
    assert_eq!(quic.connections.load(Relaxed), 0);
}

#[test]
fn a_client_hello_in_two_initials_of_one_batch_gets_no_ack_of_its_own() {
    let (mut h, _dir, mut cl) = site();
    // The client offers X25519MLKEM768 first (`site`): its ClientHello takes two Initials,
    // each in a datagram of its own (one per poll).
    let now = h.t.now();
    let mut flight = Vec::new();
    let mut buf = Vec::new();
    while let Some(t) = cl.conn.poll_transmit(now, 1, &mut buf) {
        flight.push(buf[..t.size].to_vec());
        buf.clear();
    }
    assert_eq!(
        flight.len(),
        2,
        "the client's first flight is two datagrams"
    );
    let parts: Vec<&[u8]> = flight.iter().map(Vec::as_slice).collect();
    h.datagram_batch(0, CLIENT, &parts);
    let sent = h.datagrams();
    assert!(!sent.is_empty(), "the zone answered the ClientHello");
    // An ACK alone is an Initial that is not ack-eliciting, under 1,200 bytes; every
    // datagram carrying the server's flight is padded to 1,200 or more (RFC 9000 §14.1).
    let short: Vec<usize> = sent
        .iter()
        .map(|(_, d)| d.len())
        .filter(|&n| n < 1200)
        .collect();
    assert!(
        short.is_empty(),
        "the zone sent {short:?}-byte datagram(s) before its flight: an ACK of its own"
    );
    let server: SocketAddr = SERVER.parse().unwrap();
    for (_, d) in sent {
        if let Some(DatagramEvent::ConnectionEvent(_, e)) =
            cl.ep
                .handle(now, server, None, None, BytesMut::from(&d[..]), &mut buf)
        {
            cl.conn.handle_event(e);
        }
    }
    pump(&mut h, &mut cl);
    assert!(cl.connected, "the handshake completes");
}
