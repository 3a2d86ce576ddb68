//! The UDP stream role through the test I/O: sessions, the choice of server, answers, the
//! idle timeout, `responses`, the bounds, drops, and failures from servers.

use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use ringx_engine::testio::SentTo;
use ringx_engine::{ConnId, Datagram};

use crate::testkit::Harness;
use crate::udp_counters::Drop;

fn conf(extra: &str) -> String {
    format!(
        r#"
[[upstream]]
name = "dns"
servers = ["127.0.0.1:5301", "127.0.0.1:5302"]
[[stream]]
listen = ["127.0.0.1:5300"]
protocol = "udp"
proxy_pass = "dns"
idle_timeout = "2s"
{extra}
"#
    )
}

fn dropped(h: &Harness, why: Drop) -> u64 {
    h.counters.udp.dropped[why as usize].load(Relaxed)
}

fn sessions(h: &Harness) -> u64 {
    h.counters.udp.sessions.load(Relaxed)
}

/// The one new session socket, connected; its server's address.
fn open_session(h: &mut Harness) -> (ConnId, SocketAddr) {
    let mut c = h.connects();
    assert_eq!(c.len(), 1, "expected one new session socket, got {c:?}");
    let (u, a) = c.remove(0);
    h.t.connected(&mut h.z, u);
    (u, a)
}

/// DNS-like: each client's query goes to the server its address hashes to, over its own
/// socket; the answer goes back to that client from the listener. One client address keeps
/// one server across its ports; many clients use both servers.
#[test]
fn queries_and_answers_through_two_servers() {
    let mut h = Harness::new(&conf(""));
    let mut seen = std::collections::HashSet::new();
    for i in 1..=40u8 {
        let peer = format!("198.51.100.{i}:5000");
        h.datagram(0, &peer, format!("query {i}").as_bytes());
        let (u, server) = open_session(&mut h);
        seen.insert(server);
        assert_eq!(
            h.datagrams(),
            [(SentTo::Conn(u), format!("query {i}").into_bytes())]
        );
        // The answer comes back through the session's socket ...
        h.t.recv(&mut h.z, u, format!("answer {i}").as_bytes());
        let l = h.udp_listener(0);
        let to_client = SentTo::Listener {
            id: l,
            peer: peer.parse().unwrap(),
            from: None,
        };
        assert_eq!(
            h.datagrams(),
            [(to_client, format!("answer {i}").into_bytes())]
        );
        // ... and another port of the same client goes to the same server, on a new session.
        let other = format!("198.51.100.{i}:6000");
        h.datagram(0, &other, b"again");
        let (_, again) = open_session(&mut h);
        assert_eq!(again, server, "one client address keeps one server");
        h.datagrams();
    }
    assert_eq!(seen.len(), 2, "forty clients are spread over both servers");
    // A second query on an open session takes its socket: no new one.
    h.datagram(0, "198.51.100.1:5000", b"second");
    assert!(h.connects().is_empty());
    assert_eq!(h.datagrams().len(), 1);
    assert_eq!(sessions(&h), 80);
    assert_eq!(h.counters.udp.to_clients.load(Relaxed), 40);
}

/// A session ends after idle_timeout without a datagram either way; activity pushes the end
/// back; the client's next datagram opens a new session.
#[test]
fn idle_sessions_end() {
    let mut h = Harness::new(&conf(""));
    h.datagram(0, "198.51.100.7:5000", b"q");
    let (u, _) = open_session(&mut h);
    h.advance(Duration::from_millis(1500));
    h.t.recv(&mut h.z, u, b"a"); // an answer is activity
    h.advance(Duration::from_millis(1500));
    assert!(h.t.is_open(u), "the answer pushed the end back");
    h.advance(Duration::from_millis(700));
    assert!(h.t.closed(u), "2 s without a datagram: the session ends");
    assert_eq!(sessions(&h), 0);
    h.datagram(0, "198.51.100.7:5000", b"q2");
    let (u2, _) = open_session(&mut h);
    assert_eq!(h.datagrams().last().unwrap().1, b"q2");
    assert!(h.t.is_open(u2));
}

/// `responses = 1`: the session ends once each query has its answer; `responses = 0`: once
/// the datagram is passed on.
#[test]
fn responses_end_sessions() {
    let mut h = Harness::new(&conf("responses = 1"));
    h.datagram(0, "198.51.100.8:5000", b"q1");
    let (u, _) = open_session(&mut h);
    h.datagram(0, "198.51.100.8:5000", b"q2");
    h.t.recv(&mut h.z, u, b"a1");
    assert!(h.t.is_open(u), "one answer of two");
    h.t.recv(&mut h.z, u, b"a2");
    assert!(h.t.closed(u), "both answers came");
    assert_eq!(h.datagrams().len(), 4);

    let mut h = Harness::new(&conf("responses = 0"));
    h.datagram(0, "198.51.100.9:514", b"<13>log line");
    let (u, _) = open_session(&mut h);
    assert_eq!(h.datagrams(), [(SentTo::Conn(u), b"<13>log line".to_vec())]);
    assert!(h.t.closed(u), "nothing comes back: the session is done");
}

/// Ten thousand clients against max_sessions = 100: a hundred sessions (and sockets), every
/// other client's datagram dropped and counted.
#[test]
fn sessions_are_bounded() {
    let mut h = Harness::new(&conf("max_sessions = 100"));
    for i in 0..10_000u32 {
        let peer = format!(
            "10.{}.{}.{}:{}",
            i >> 16,
            (i >> 8) & 255,
            i & 255,
            1024 + i % 50000
        );
        h.datagram(0, &peer, b"hello");
    }
    assert_eq!(h.connects().len(), 100);
    assert_eq!(sessions(&h), 100);
    assert_eq!(dropped(&h, Drop::SessionsFull), 9_900);
    assert_eq!(h.counters.udp.from_clients.load(Relaxed), 10_000);
}

/// Oversized, truncated, empty and unanswerable datagrams are dropped and counted, and open
/// no session.
#[test]
fn bad_datagrams_are_dropped_and_counted() {
    let mut h = Harness::new(&conf("max_datagram_size = 512"));
    h.datagram(0, "198.51.100.1:5000", &[1u8; 513]);
    let l = h.udp_listener(0);
    let truncated = Datagram {
        peer: "198.51.100.2:5000".parse().unwrap(),
        local: None,
        data: &[2u8; 100],
        truncated: true,
        segment: 0,
        ecn: 0,
    };
    h.t.datagram(&mut h.z, l, truncated);
    assert_eq!(dropped(&h, Drop::Oversized), 2);
    h.datagram(0, "198.51.100.3:5000", b"");
    h.datagram(0, "198.51.100.3:0", b"port zero");
    h.datagram(0, "224.0.0.1:5000", b"multicast source");
    h.datagram(0, "255.255.255.255:5000", b"broadcast source");
    h.datagram(0, "[ff02::1]:5000", b"v6 multicast source");
    assert_eq!(dropped(&h, Drop::Malformed), 5);
    assert!(h.connects().is_empty(), "no session for any of them");
    // 512 bytes pass.
    h.datagram(0, "198.51.100.4:5000", &[4u8; 512]);
    let (u, _) = open_session(&mut h);
    assert_eq!(h.datagrams()[0].1.len(), 512);
    // So do answers up to the limit; a larger one is dropped.
    h.t.recv(&mut h.z, u, &[5u8; 513]);
    assert!(h.datagrams().is_empty());
    assert_eq!(dropped(&h, Drop::UpstreamOversized), 1);
}

/// The server's port is closed (ICMP port unreachable: ECONNREFUSED on its socket): the
/// session ends, the error is counted, and with max_fails = 1 the server is down, so the
/// next session of a client that hashed to it goes to the other server.
#[test]
fn refused_server_is_counted_and_avoided() {
    let mut h = Harness::new(&conf(""));
    h.datagram(0, "198.51.100.20:5000", b"q");
    let (u, first) = open_session(&mut h);
    h.t.refused(&mut h.z, u);
    assert!(h.t.closed(u));
    assert_eq!(h.counters.udp.upstream_errors.load(Relaxed), 1);
    assert_eq!(sessions(&h), 0);
    h.datagram(0, "198.51.100.20:5000", b"q again");
    let (_, second) = open_session(&mut h);
    assert_ne!(first, second, "the refusing server is marked down");
}

/// Datagrams that arrive while the session's socket connects are held (at most 16) and go
/// out once it is connected; the rest are dropped and counted.
#[test]
fn datagrams_wait_for_the_connect_bounded() {
    let mut h = Harness::new(&conf(""));
    for i in 0..20u8 {
        h.datagram(0, "198.51.100.30:5000", &[i; 10]);
    }
    let mut c = h.connects();
    let (u, _) = c.remove(0);
    assert!(h.datagrams().is_empty(), "nothing goes before the connect");
    assert_eq!(dropped(&h, Drop::ConnectBacklog), 4);
    h.t.connected(&mut h.z, u);
    let sent = h.datagrams();
    assert_eq!(sent.len(), 16);
    assert_eq!(sent[15].1, vec![15u8; 10], "in order");
}

/// Draining ends every session; a reload that drops the UDP address ends its sessions too.
#[test]
fn drain_and_reload_end_sessions() {
    let mut h = Harness::new(&conf(""));
    h.datagram(0, "198.51.100.40:5000", b"q");
    let (u, _) = open_session(&mut h);
    let other = r#"
[[server]]
listen = ["127.0.0.1:18080"]
[[server.location]]
path = "/"
return = { status = 200, body = "ok" }
"#;
    h.reload(other, 2, true, Duration::from_secs(5));
    assert!(h.t.closed(u), "its address is gone");
    assert_eq!(sessions(&h), 0);

    let mut h = Harness::new(&conf(""));
    h.datagram(0, "198.51.100.41:5000", b"q");
    let (u, _) = open_session(&mut h);
    h.drain();
    assert!(h.t.closed(u));
}
