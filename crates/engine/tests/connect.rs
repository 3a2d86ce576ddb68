//! Outbound connections on both drivers: a zone that relays each accepted connection to an
//! upstream it connects to (a miniature TCP proxy), peer addresses, and failed connects.

mod common;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use ringx_engine::{ConnId, ConnectTo, EngineKind, Handler, Io, ListenerId, ZoneConfig};

struct Relay {
    upstream: SocketAddr,
    pair: HashMap<ConnId, ConnId>,
    peers: Vec<Option<SocketAddr>>,
    connected: usize,
    failed: Vec<String>,
}

impl Handler for Relay {
    fn on_accept(&mut self, io: &mut Io, c: ConnId, _: ListenerId) {
        self.peers.push(io.peer_addr(c));
        match io.connect(&ConnectTo::new(self.upstream)) {
            Ok(u) => {
                assert!(
                    io.raw_fd(u).is_some(),
                    "outbound connections have a descriptor"
                );
                self.pair.insert(c, u);
                self.pair.insert(u, c);
            }
            Err(e) => panic!("connect: {e}"),
        }
    }
    fn on_connected(&mut self, io: &mut Io, u: ConnId) {
        self.connected += 1;
        assert_eq!(io.peer_addr(u), Some(self.upstream));
    }
    fn on_data(&mut self, io: &mut Io, c: ConnId, data: &[u8]) {
        if let Some(&o) = self.pair.get(&c) {
            io.write(o, data); // queued even while the upstream is still connecting
        }
    }
    fn on_eof(&mut self, io: &mut Io, c: ConnId) {
        if let Some(&o) = self.pair.get(&c) {
            io.shutdown_after_flush(o);
        }
    }
    fn on_closed(&mut self, io: &mut Io, c: ConnId, err: Option<std::io::Error>) {
        if let Some(e) = &err {
            self.failed.push(e.to_string());
        }
        if let Some(o) = self.pair.remove(&c) {
            self.pair.remove(&o);
            io.close_after_flush(o);
        }
    }
    fn on_timer(&mut self, _: &mut Io) -> Option<Duration> {
        None
    }
    fn on_wake(&mut self, io: &mut Io) {
        io.exit();
    }
}

fn upstream_echo() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            std::thread::spawn(move || {
                let mut buf = [0u8; 65536];
                loop {
                    match s.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => {
                            if s.write_all(&buf[..n]).is_err() {
                                return;
                            }
                        }
                    }
                }
            });
        }
    });
    addr
}

type Outcome = (usize, Vec<Option<SocketAddr>>, Vec<String>);

fn relay(
    engine: EngineKind,
    upstream: SocketAddr,
) -> Option<(common::TestZone<Outcome>, SocketAddr)> {
    let cfg = ZoneConfig {
        engine,
        max_conns: 64,
        recv_buffers: 16,
        recv_buffer_size: 4096,
        peer_addrs: true,
        max_outbound: 64,
        ..ZoneConfig::default()
    };
    let h = Relay {
        upstream,
        pair: HashMap::new(),
        peers: Vec::new(),
        connected: 0,
        failed: Vec::new(),
    };
    let z = common::spawn_zone(cfg, h, |h| (h.connected, h.peers, h.failed))?;
    let a = z.addr;
    Some((z, a))
}

fn relays_through_upstream(engine: EngineKind) {
    let up = upstream_echo();
    let Some((zone, addr)) = relay(engine, up) else {
        return;
    };
    let msg: Vec<u8> = (0..200_000u32).map(|i| (i % 253) as u8).collect();
    let mut locals = Vec::new();
    for _ in 0..4 {
        let mut s = TcpStream::connect(addr).unwrap();
        locals.push(s.local_addr().unwrap());
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut w = s.try_clone().unwrap();
        let m = msg.clone();
        let t = std::thread::spawn(move || w.write_all(&m).unwrap());
        let mut got = vec![0u8; msg.len()];
        s.read_exact(&mut got).unwrap();
        t.join().unwrap();
        assert!(got == msg, "relayed bytes differ");
    }
    zone.waker.wake();
    let (connected, peers, failed) = zone.thread.join().unwrap();
    assert_eq!(connected, 4);
    assert!(failed.is_empty(), "{failed:?}");
    let peers: Vec<SocketAddr> = peers
        .into_iter()
        .map(|p| p.expect("peer address known"))
        .collect();
    assert_eq!(peers, locals, "on_accept sees each client's address");
}

fn refused_connect_is_reported(engine: EngineKind) {
    // A port nobody listens on: bound and kept, never listening. Closed, it could become
    // the listening port of a zone another test starts meanwhile, and the connect succeed.
    let hold = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    hold.bind(&"127.0.0.1:0".parse::<SocketAddr>().unwrap().into())
        .unwrap();
    let dead = hold.local_addr().unwrap().as_socket().unwrap();
    let Some((zone, addr)) = relay(engine, dead) else {
        return;
    };
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = s.write_all(b"hello");
    let mut buf = [0u8; 16];
    // The relay closes the client once the upstream connect fails.
    assert!(matches!(s.read(&mut buf), Ok(0) | Err(_)));
    zone.waker.wake();
    let (connected, _, failed) = zone.thread.join().unwrap();
    assert_eq!(connected, 0);
    assert!(
        failed
            .iter()
            .any(|e| e.contains("connect to") && e.contains(&dead.to_string())),
        "error names the upstream: {failed:?}"
    );
}

#[test]
fn uring_relays_through_upstream() {
    relays_through_upstream(EngineKind::Uring);
}

#[test]
fn epoll_relays_through_upstream() {
    relays_through_upstream(EngineKind::Epoll);
}

#[test]
fn uring_refused_connect_is_reported() {
    refused_connect_is_reported(EngineKind::Uring);
}

#[test]
fn epoll_refused_connect_is_reported() {
    refused_connect_is_reported(EngineKind::Epoll);
}
