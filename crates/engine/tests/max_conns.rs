//! `max_conns` holds on both engines: a zone with four connection slots and ten clients
//! accepts at most four at once; the others wait in the kernel's accept queue (none is
//! refused) and are served as soon as earlier ones close. On io_uring, accepts near the limit
//! are single-shot so that the kernel never accepts a connection it has no slot for.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use ringx_engine::{ConnId, EngineKind, Handler, Io, ListenerId, ZoneConfig};

const MAX: u32 = 4;
const CLIENTS: usize = 10;

/// Echoes; counts connections open at once.
#[derive(Default)]
struct Counting {
    open: u32,
    most_open: u32,
    accepted: u32,
}

impl Handler for Counting {
    fn on_accept(&mut self, _: &mut Io, _: ConnId, _: ListenerId) {
        self.accepted += 1;
        self.open += 1;
        self.most_open = self.most_open.max(self.open);
    }
    fn on_data(&mut self, io: &mut Io, c: ConnId, data: &[u8]) {
        io.write(c, data);
    }
    fn on_eof(&mut self, io: &mut Io, c: ConnId) {
        io.close(c);
    }
    fn on_closed(&mut self, _: &mut Io, _: ConnId, _: Option<std::io::Error>) {
        self.open -= 1;
    }
    fn on_timer(&mut self, _: &mut Io) -> Option<Duration> {
        None
    }
    fn on_wake(&mut self, io: &mut Io) {
        io.exit();
    }
}

/// Whether the echo of `i` arrived on `s` (without waiting).
fn echoed(s: &mut TcpStream, i: usize) -> bool {
    let mut b = [0u8; 1];
    match s.read(&mut b) {
        Ok(1) => {
            assert_eq!(b[0], i as u8, "client {i}");
            true
        }
        Ok(_) => panic!("client {i}: closed before its echo"),
        Err(e) if e.kind() == ErrorKind::WouldBlock => false,
        Err(e) => panic!("client {i}: {e}"),
    }
}

fn holds_max_conns(engine: EngineKind) {
    let cfg = ZoneConfig {
        engine,
        max_conns: MAX,
        recv_buffers: 8,
        recv_buffer_size: 1024,
        ..ZoneConfig::default()
    };
    let Some(zone) = common::spawn_zone(cfg, Counting::default(), |h| (h.most_open, h.accepted))
    else {
        return;
    };
    // The kernel completes every handshake and queues what the zone does not accept.
    let mut clients: Vec<(usize, TcpStream)> = (0..CLIENTS)
        .map(|i| {
            let mut s = TcpStream::connect(zone.addr).unwrap();
            s.write_all(&[i as u8]).unwrap();
            s.set_nonblocking(true).unwrap();
            (i, s)
        })
        .collect();
    // Four are served; the others get nothing while those four stay open.
    let t = Instant::now();
    let mut served = Vec::new();
    while served.len() < MAX as usize {
        assert!(t.elapsed() < Duration::from_secs(5), "served {served:?}");
        for (i, s) in &mut clients {
            if !served.contains(i) && echoed(s, *i) {
                served.push(*i);
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(200));
    for (i, s) in &mut clients {
        if !served.contains(i) {
            assert!(!echoed(s, *i), "client {i} served beyond max_conns");
        }
    }
    assert_eq!(zone.waker.stats().accepts, u64::from(MAX));
    // Closing the served ones lets the rest in, four at a time at most.
    clients.retain(|(i, _)| !served.contains(i));
    while !clients.is_empty() {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "left {}",
            clients.len()
        );
        clients.retain_mut(|(i, s)| !echoed(s, *i));
        std::thread::sleep(Duration::from_millis(5));
    }
    // Let the last closes reach the zone.
    let t = Instant::now();
    while zone.waker.stats().accepts < CLIENTS as u64 && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(5));
    }
    zone.waker.wake();
    let (most_open, accepted) = zone.thread.join().unwrap();
    assert_eq!(accepted, CLIENTS as u32);
    assert!(most_open <= MAX, "{most_open} connections open at once");
}

#[test]
fn epoll_holds_max_conns() {
    holds_max_conns(EngineKind::Epoll);
}

#[test]
fn uring_holds_max_conns_and_refuses_none() {
    if let Err(why) = ringx_engine::uring::probe::check() {
        ringx_kerneltest::skip(format!("io_uring is unavailable here: {why}"));
        return;
    }
    holds_max_conns(EngineKind::Uring);
}
