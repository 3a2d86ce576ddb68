//! Datagrams end to end on both drivers: a UDP listener relays each client datagram over a
//! connected datagram socket to an echo server and sends the answer back from the listener;
//! a datagram larger than the zone's buffers arrives marked truncated; a wildcard listener
//! answers from the address the client wrote to (IP_PKTINFO); a datagram socket whose peer
//! port is closed is closed with ECONNREFUSED; a segmented send (UDP GSO) reaches the
//! client as the datagrams it was cut into.

use std::collections::HashMap;
use std::net::{SocketAddr, UdpSocket};
use std::sync::mpsc;
use std::time::Duration;

use ringx_engine::{
    bind_udp_reuseport, run_zone, ConnId, ConnectTo, Datagram, EngineKind, Handler, Io,
    ListenOptions, ListenerId, Waker, ZoneConfig,
};

/// What the relay reports to the test.
#[derive(Debug, PartialEq)]
enum Seen {
    Truncated(usize),
    Closed(Option<i32>),
}

/// Relays datagrams from its UDP listener to `upstream` over one connected datagram socket per
/// client, and answers from the listener.
struct Relay {
    upstream: SocketAddr,
    by_client: HashMap<SocketAddr, ConnId>,
    by_conn: HashMap<ConnId, (ListenerId, SocketAddr, Option<std::net::IpAddr>)>,
    held: HashMap<ConnId, Vec<Vec<u8>>>,
    tx: mpsc::Sender<Seen>,
}

impl Handler for Relay {
    fn on_accept(&mut self, io: &mut Io, c: ConnId, _: ListenerId) {
        io.close(c)
    }

    fn on_datagram(&mut self, io: &mut Io, l: ListenerId, dg: Datagram<'_>) {
        if dg.truncated {
            let _ = self.tx.send(Seen::Truncated(dg.data.len()));
            return;
        }
        if dg.data == b"gso?" {
            // Three datagrams of 100 bytes and one of 50 (their index in each byte), in one
            // send the kernel cuts up.
            let data: Vec<u8> = (0..350).map(|i| (i / 100) as u8).collect();
            assert!(io.send_segments(l, dg.peer, dg.local, &data, 100));
            return;
        }
        let c = match self.by_client.get(&dg.peer) {
            Some(&c) => c,
            None => {
                let c = io.connect(&ConnectTo::datagram(self.upstream)).unwrap();
                self.by_client.insert(dg.peer, c);
                self.by_conn.insert(c, (l, dg.peer, dg.local));
                self.held.insert(c, Vec::new());
                c
            }
        };
        match self.held.get_mut(&c) {
            Some(h) => h.push(dg.data.to_vec()),
            None => assert!(io.send_datagram(c, dg.data)),
        }
    }

    fn on_connected(&mut self, io: &mut Io, c: ConnId) {
        for d in self.held.remove(&c).unwrap_or_default() {
            assert!(io.send_datagram(c, &d));
        }
    }

    fn on_data(&mut self, io: &mut Io, c: ConnId, data: &[u8]) {
        let (l, peer, from) = self.by_conn[&c];
        assert!(io.send_to(l, peer, from, data));
    }

    fn on_eof(&mut self, _: &mut Io, _: ConnId) {
        panic!("a datagram socket has no end of stream")
    }

    fn on_closed(&mut self, _: &mut Io, c: ConnId, err: Option<std::io::Error>) {
        if let Some((_, peer, _)) = self.by_conn.remove(&c) {
            self.by_client.remove(&peer);
        }
        let _ = self
            .tx
            .send(Seen::Closed(err.and_then(|e| e.raw_os_error())));
    }

    fn on_timer(&mut self, _: &mut Io) -> Option<Duration> {
        None
    }

    fn on_wake(&mut self, io: &mut Io) {
        io.exit()
    }
}

fn cfg(engine: EngineKind) -> ZoneConfig {
    ZoneConfig {
        engine,
        max_conns: 64,
        max_outbound: 64,
        recv_buffers: 64,
        dgram_buffers: 16,
        dgram_buffer_size: 2048 + ringx_engine::uring::DGRAM_OVERHEAD,
        ..ZoneConfig::default()
    }
}

/// A UDP echo server on its own thread.
fn echo_server() -> SocketAddr {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = s.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut buf = [0u8; 65536];
        while let Ok((n, from)) = s.recv_from(&mut buf) {
            let _ = s.send_to(&buf[..n], from);
        }
    });
    addr
}

fn run(
    engine: EngineKind,
    listen: &str,
    upstream: SocketAddr,
) -> Option<(
    SocketAddr,
    Waker,
    mpsc::Receiver<Seen>,
    std::thread::JoinHandle<()>,
)> {
    if engine == EngineKind::Uring {
        if let Err(why) = ringx_engine::uring::probe::check() {
            ringx_kerneltest::skip(format!("io_uring is unavailable here: {why}"));
            return None;
        }
    }
    let sock = bind_udp_reuseport(listen.parse().unwrap(), &ListenOptions::default()).unwrap();
    let addr = sock.local_addr().unwrap();
    let waker = Waker::new().unwrap();
    let w2 = waker.clone();
    let (tx, rx) = mpsc::channel();
    let cfg = cfg(engine);
    let t = std::thread::spawn(move || {
        let mut h = Relay {
            upstream,
            by_client: HashMap::new(),
            by_conn: HashMap::new(),
            held: HashMap::new(),
            tx,
        };
        run_zone(&cfg, vec![sock], w2, &mut h).unwrap();
    });
    Some((addr, waker, rx, t))
}

fn client() -> UdpSocket {
    let c = UdpSocket::bind("127.0.0.1:0").unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    c
}

fn relays_and_truncates(engine: EngineKind) {
    let up = echo_server();
    let Some((addr, waker, rx, t)) = run(engine, "127.0.0.1:0", up) else {
        return;
    };
    let clients: Vec<UdpSocket> = (0..3).map(|_| client()).collect();
    for round in 0..3 {
        for (i, c) in clients.iter().enumerate() {
            let msg = format!("client {i} round {round}");
            c.send_to(msg.as_bytes(), addr).unwrap();
            let mut buf = [0u8; 4096];
            let (n, from) = c.recv_from(&mut buf).unwrap();
            assert_eq!(&buf[..n], msg.as_bytes());
            assert_eq!(from, addr, "the answer comes from the listener's address");
        }
    }
    // Larger than the zone's 2048-byte datagram buffers: handed over marked truncated.
    clients[0].send_to(&[7u8; 3000], addr).unwrap();
    assert!(matches!(
        rx.recv_timeout(Duration::from_secs(5)).unwrap(),
        Seen::Truncated(n) if n < 3000
    ));
    // 2048 bytes of payload fit whole.
    clients[1].send_to(&[9u8; 2048], addr).unwrap();
    let mut buf = [0u8; 4096];
    let (n, _) = clients[1].recv_from(&mut buf).unwrap();
    assert_eq!(n, 2048);
    waker.wake();
    t.join().unwrap();
}

#[test]
fn relays_and_truncates_uring() {
    relays_and_truncates(EngineKind::Uring);
}

#[test]
fn relays_and_truncates_epoll() {
    relays_and_truncates(EngineKind::Epoll);
}

/// A wildcard listener answers from the address the datagram was sent to: a client connected
/// to 127.0.0.2 accepts only answers from 127.0.0.2, which without IP_PKTINFO would leave from
/// 127.0.0.1.
fn wildcard_answers_from_destination(engine: EngineKind) {
    let up = echo_server();
    let Some((addr, waker, _rx, t)) = run(engine, "0.0.0.0:0", up) else {
        return;
    };
    let c = UdpSocket::bind("127.0.0.1:0").unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let to = SocketAddr::from(([127, 0, 0, 2], addr.port()));
    c.connect(to).unwrap();
    c.send(b"where from").unwrap();
    let mut buf = [0u8; 64];
    let n = c.recv(&mut buf).expect("an answer from 127.0.0.2");
    assert_eq!(&buf[..n], b"where from");
    waker.wake();
    t.join().unwrap();
}

#[test]
fn wildcard_answers_from_destination_uring() {
    wildcard_answers_from_destination(EngineKind::Uring);
}

#[test]
fn wildcard_answers_from_destination_epoll() {
    wildcard_answers_from_destination(EngineKind::Epoll);
}

/// The upstream's port is closed: the ICMP port unreachable closes the datagram socket with
/// ECONNREFUSED.
fn refused_upstream_closes(engine: EngineKind) {
    let closed = UdpSocket::bind("127.0.0.1:0").unwrap();
    let up = closed.local_addr().unwrap();
    drop(closed);
    let Some((addr, waker, rx, t)) = run(engine, "127.0.0.1:0", up) else {
        return;
    };
    let c = client();
    // The first send draws the ICMP error; the next one (or the pending receive) reports it.
    for _ in 0..3 {
        c.send_to(b"anyone?", addr).unwrap();
        std::thread::sleep(Duration::from_millis(50));
    }
    let seen = rx.recv_timeout(Duration::from_secs(5)).unwrap();
    assert_eq!(seen, Seen::Closed(Some(libc::ECONNREFUSED)));
    waker.wake();
    t.join().unwrap();
}

#[test]
fn refused_upstream_closes_uring() {
    refused_upstream_closes(EngineKind::Uring);
}

#[test]
fn refused_upstream_closes_epoll() {
    refused_upstream_closes(EngineKind::Epoll);
}

fn segmented_send_arrives_as_datagrams(engine: EngineKind) {
    let Some((addr, waker, _rx, t)) = run(engine, "127.0.0.1:0", echo_server()) else {
        return;
    };
    let c = client();
    c.send_to(b"gso?", addr).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 2048];
    for _ in 0..4 {
        let (n, _) = c.recv_from(&mut buf).unwrap();
        got.push(buf[..n].to_vec());
    }
    got.sort_by_key(|d| d[0]);
    let want: Vec<Vec<u8>> = (0..4)
        .map(|i| vec![i as u8; if i < 3 { 100 } else { 50 }])
        .collect();
    assert_eq!(got, want);
    waker.wake();
    t.join().unwrap();
}

#[test]
fn segmented_send_arrives_as_datagrams_uring() {
    segmented_send_arrives_as_datagrams(EngineKind::Uring)
}

#[test]
fn segmented_send_arrives_as_datagrams_epoll() {
    segmented_send_arrives_as_datagrams(EngineKind::Epoll)
}
