//! A QUIC connection through the zone, with quinn-proto's client and the test driver: the
//! zone's timer turns keep up with the connection's deadlines as quinn-proto moves them, so
//! none fires late, a connection left silent is closed at its idle timeout, one the client
//! closes drains without a word back, a ClientHello in two Initials of one batch is
//! acknowledged with the server's flight, not on its own, a client whose path a connection
//! found to carry larger datagrams starts its next connection at that size, and a known
//! size the path no longer carries is forgotten.

use std::net::{IpAddr, SocketAddr};
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

/// quinn-proto's client endpoint and its one connection, from address `from`.
struct Client {
    ep: Endpoint,
    ch: ConnectionHandle,
    conn: Connection,
    connected: bool,
    from: &'static str,
    config: ClientConfig,
}

impl Client {
    /// A client with `config` connecting from `from` at the zone's clock.
    fn new(h: &Harness, config: ClientConfig, from: &'static str) -> Client {
        let mut ep = Endpoint::new(Arc::new(EndpointConfig::default()), None, true, None);
        let (ch, conn) = ep
            .connect(h.t.now(), config.clone(), SERVER.parse().unwrap(), "q.test")
            .unwrap();
        Client {
            ep,
            ch,
            conn,
            connected: false,
            from,
            config,
        }
    }
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
    let cl = Client::new(&h, cc, CLIENT);
    (h, dir, cl)
}

/// Passes datagrams both ways at the zone's clock until neither side has more to send.
fn pump(h: &mut Harness, cl: &mut Client) {
    pump_seen(h, cl, &mut Vec::new());
}

/// [`pump`], adding the size of each datagram the zone sent to `sizes`.
fn pump_seen(h: &mut Harness, cl: &mut Client, sizes: &mut Vec<usize>) {
    pump_path(h, cl, sizes, usize::MAX);
}

/// [`pump_seen`] over a path that carries no datagram over `path_mtu` bytes: the zone's
/// larger ones are lost on the way (and not added to `sizes`).
fn pump_path(h: &mut Harness, cl: &mut Client, sizes: &mut Vec<usize>, path_mtu: usize) {
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
            h.datagram(0, cl.from, &buf[..t.size]);
            buf.clear();
        }
        for (_, d) in h.datagrams() {
            moved = true;
            if d.len() > path_mtu {
                continue;
            }
            sizes.push(d.len());
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
    while quic.closed_total() == 0 {
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
    while quic.closed_total() == 0 {
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

/// Walks the zone's clock from one timer turn to the next, passing datagrams (their sizes
/// added to `sizes`), until `done` holds; at most `limit` of the zone's time.
fn walk_until(
    h: &mut Harness,
    cl: &mut Client,
    sizes: &mut Vec<usize>,
    limit: Duration,
    done: impl Fn(&Harness) -> bool,
) {
    walk_path(h, cl, (sizes, usize::MAX), limit, done);
}

/// [`walk_until`] over a path that carries no datagram over `path_mtu` bytes; it stops
/// early when neither side has a timer left.
fn walk_path(
    h: &mut Harness,
    cl: &mut Client,
    (sizes, path_mtu): (&mut Vec<usize>, usize),
    limit: Duration,
    done: impl Fn(&Harness) -> bool,
) {
    let start = h.t.now();
    while !done(h) && h.t.now() - start < limit {
        let Some(next) = [h.t.next_timer(), cl.conn.poll_timeout()]
            .into_iter()
            .flatten()
            .min()
        else {
            return;
        };
        h.advance(next.saturating_duration_since(h.t.now()));
        pump_path(h, cl, sizes, path_mtu);
    }
}

#[test]
fn a_client_back_from_a_known_path_starts_at_its_size() {
    use ringx_quic::known_paths::{FULL, STEPS};
    let (mut h, _dir, mut first) = site();
    let counters = h.counters.clone();
    let quic = &counters.quic;
    let learned = || quic.paths_learned.load(Relaxed);
    // The first connection starts at 1,200 bytes and, once its handshake is done, searches
    // for the path's size with padded PINGs, each size acknowledged recorded for its
    // client's address: 1,326, 1,389, 1,420, then FULL bytes.
    let mut sizes = Vec::new();
    pump_seen(&mut h, &mut first, &mut sizes);
    assert!(first.connected, "the handshake completes");
    walk_until(
        &mut h,
        &mut first,
        &mut sizes,
        Duration::from_secs(3),
        |h| h.counters.quic.paths_learned.load(Relaxed) >= STEPS.len() as u64,
    );
    assert_eq!(learned(), STEPS.len() as u64, "the search reached {FULL}");
    assert_eq!(sizes.iter().copied().find(|&n| n >= 1200), Some(1200));
    let probed: Vec<usize> = sizes.iter().copied().filter(|&n| n > 1200).collect();
    assert_eq!(
        probed,
        STEPS.map(usize::from),
        "the first connection's probes"
    );
    assert!(first.conn.stats().frame_rx.ping >= STEPS.len() as u64);
    // A second connection from the same address, another port: it starts at FULL bytes and
    // has nothing to probe for; the known path is counted as used, and not learned again.
    let mut second = Client::new(&h, first.config.clone(), "192.0.2.10:40001");
    let mut sizes = Vec::new();
    pump_seen(&mut h, &mut second, &mut sizes);
    assert!(second.connected, "the second handshake completes");
    let first_large = sizes.iter().copied().find(|&n| n >= 1200);
    assert_eq!(
        first_large,
        Some(usize::from(FULL)),
        "the flight, at FULL: {sizes:?}"
    );
    assert_eq!(quic.paths_used.load(Relaxed), 1);
    walk_until(
        &mut h,
        &mut second,
        &mut sizes,
        Duration::from_secs(3),
        |_| false,
    );
    assert_eq!(
        second.conn.stats().frame_rx.ping,
        0,
        "the second connection was probed: {sizes:?}"
    );
    assert_eq!(learned(), STEPS.len() as u64);
    assert_eq!(quic.paths_forgotten.load(Relaxed), 0);
    // Another address, whose last connection ended halfway through its search (1,389 bytes
    // acknowledged): the next one from it starts at 1,389 and probes only what is above.
    let half: SocketAddr = "192.0.2.11:40000".parse().unwrap();
    let now = h.t.now();
    h.z.quic.known_paths().learned(half.ip(), 1389, now);
    let mut next = Client::new(&h, first.config.clone(), "192.0.2.11:40000");
    let mut sizes = Vec::new();
    pump_seen(&mut h, &mut next, &mut sizes);
    assert!(next.connected);
    walk_until(
        &mut h,
        &mut next,
        &mut sizes,
        Duration::from_secs(3),
        |_| false,
    );
    assert_eq!(quic.paths_used.load(Relaxed), 2);
    let flight = |sizes: &[usize]| sizes.iter().copied().find(|&n| n >= 1200);
    assert_eq!(
        flight(&sizes),
        Some(1389),
        "the flight, at 1,389 bytes: {sizes:?}"
    );
    let probed: Vec<usize> = sizes.iter().copied().filter(|&n| n > 1389).collect();
    assert_eq!(
        probed,
        [1420, 1452],
        "the next connection's probes: {sizes:?}"
    );
    assert_eq!(learned(), STEPS.len() as u64 + 2);
}

/// A zone that knows [`CLIENT`]'s address at FULL bytes, and its client's first exchange
/// with it over a path that carries no datagram over `path_mtu` bytes (the sizes of the
/// zone's datagrams that got through in the vector); the address it knows.
fn known_at_full_over(path_mtu: usize) -> (Harness, TempDir, Client, Vec<usize>, IpAddr) {
    let (mut h, dir, mut cl) = site();
    let ip = CLIENT.parse::<SocketAddr>().unwrap().ip();
    let now = h.t.now();
    h.z.quic
        .known_paths()
        .learned(ip, ringx_quic::known_paths::FULL, now);
    let mut sizes = Vec::new();
    pump_path(&mut h, &mut cl, &mut sizes, path_mtu);
    assert_eq!(h.counters.quic.paths_used.load(Relaxed), 1);
    (h, dir, cl, sizes, ip)
}

#[test]
fn a_known_path_that_carries_less_is_forgotten() {
    // The client's address is known at FULL bytes, but its path now carries no more than
    // 1,200 (another host behind the same NAT address, a route that changed): the flight
    // the zone sends at FULL is lost on the way, the smaller datagram behind it arrives and
    // is acknowledged, and the handshake goes on through quinn-proto's loss probes, which are
    // no larger than 1,200. Black-hole detection never fires; the loss, declared before the
    // handshake completed, forgets the address.
    let (mut h, _dir, mut cl, mut sizes, ip) = known_at_full_over(1200);
    let counters = h.counters.clone();
    let quic = &counters.quic;
    walk_path(&mut h, &mut cl, (&mut sizes, 1200), IDLE, |h| {
        h.counters.quic.completed.load(Relaxed) > 0
    });
    assert!(
        cl.connected,
        "the handshake completed through the small probes"
    );
    assert_eq!(quic.paths_forgotten.load(Relaxed), 1);
    assert_eq!(h.z.quic.known_paths().start(ip, h.t.now()), None);
}

#[test]
fn a_known_path_whose_handshake_times_out_is_forgotten() {
    // Known at FULL, and nothing the zone sends arrives: no acknowledgement comes, so no
    // packet is ever declared lost, and the connection ends at its idle timeout without its
    // handshake. That forgets the address too.
    let (mut h, _dir, mut cl, mut sizes, ip) = known_at_full_over(0);
    let counters = h.counters.clone();
    let quic = &counters.quic;
    walk_path(&mut h, &mut cl, (&mut sizes, 0), IDLE * 3, |h| {
        h.counters.quic.closed_total() > 0
    });
    assert!(!cl.connected);
    assert_eq!(quic.closed_total(), 1, "the connection timed out");
    assert_eq!(quic.paths_forgotten.load(Relaxed), 1);
    assert_eq!(h.z.quic.known_paths().start(ip, h.t.now()), None);
}
