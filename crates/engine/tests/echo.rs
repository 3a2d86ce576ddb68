//! Both drivers, end to end: an echo handler on a real zone thread, real sockets.

mod common;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::Duration;

use ringx_engine::{ConnId, EngineKind, Handler, Io, ListenerId, ZoneConfig};

#[derive(Default)]
struct Echo {
    closed: usize,
    stopping: bool,
}

impl Handler for Echo {
    fn on_accept(&mut self, _: &mut Io, _: ConnId, _: ListenerId) {}
    fn on_data(&mut self, io: &mut Io, c: ConnId, data: &[u8]) {
        io.write(c, data);
    }
    fn on_eof(&mut self, io: &mut Io, c: ConnId) {
        io.close_after_flush(c);
    }
    fn on_closed(&mut self, _: &mut Io, _: ConnId, _: Option<std::io::Error>) {
        self.closed += 1;
    }
    fn on_timer(&mut self, _: &mut Io) -> Option<Duration> {
        None
    }
    fn on_wake(&mut self, io: &mut Io) {
        self.stopping = true;
        io.stop_listening();
        io.exit();
    }
}

fn echo_roundtrip(engine: EngineKind) {
    echo_roundtrip_with(engine, Duration::ZERO);
}

fn echo_roundtrip_with(engine: EngineKind, batch_wait: Duration) {
    echo_roundtrip_pool(engine, batch_wait, 16, 4096);
}

fn echo_roundtrip_pool(engine: EngineKind, batch_wait: Duration, bufs: u16, size: u32) {
    let cfg = ZoneConfig {
        engine,
        batch_wait,
        max_conns: 256,
        recv_buffers: bufs,
        recv_buffer_size: size,
        ..ZoneConfig::default()
    };
    let Some(zone) = common::spawn_zone(cfg, Echo::default(), |h| h.closed) else {
        return;
    };
    let addr = zone.addr;
    // Many connections at once, each sending more than all receive buffers together hold,
    // so ENOBUFS re-arming and short writes are exercised.
    let mut handles = Vec::new();
    for k in 0..8u32 {
        // A different byte sequence per connection, so bytes delivered to the wrong
        // connection or from the wrong place in a shared receive buffer are caught.
        let msg: Vec<u8> = (0..300_000u32)
            .map(|i| ((i + 37 * k) % 251) as u8)
            .collect();
        handles.push(std::thread::spawn(move || {
            let mut s = TcpStream::connect(addr).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let mut w = s.try_clone().unwrap();
            let m2 = msg.clone();
            let writer = std::thread::spawn(move || {
                w.write_all(&m2).unwrap();
                w.shutdown(Shutdown::Write).unwrap();
            });
            let mut got = Vec::new();
            s.read_to_end(&mut got).unwrap();
            writer.join().unwrap();
            assert_eq!(got.len(), msg.len());
            assert!(got == msg, "echoed bytes differ");
        }));
    }
    for h in handles {
        h.join().unwrap();
    }
    zone.waker.wake();
    let closed = zone.thread.join().unwrap();
    assert_eq!(closed, 8, "every connection reported closed exactly once");
}

#[test]
fn echo_uring() {
    echo_roundtrip(EngineKind::Uring);
}

/// Adaptive completion batching changes when the zone wakes, never what it delivers.
#[test]
fn echo_uring_batched() {
    echo_roundtrip_with(EngineKind::Uring, Duration::from_micros(200));
}

/// Many small buffers: each 300 KB stream spans hundreds of them, interleaved with the other
/// connections', and nothing is lost or reordered.
#[test]
fn echo_uring_many_small_buffers() {
    echo_roundtrip_pool(EngineKind::Uring, Duration::ZERO, 1024, 512);
}

#[test]
fn echo_epoll() {
    echo_roundtrip(EngineKind::Epoll);
}

/// Small messages on many connections at once, request after request: with incremental
/// buffer consumption many connections' bytes share one receive buffer, each at its own offset.
fn small_messages(engine: EngineKind) {
    let cfg = ZoneConfig {
        engine,
        max_conns: 256,
        recv_buffers: 8,
        recv_buffer_size: 1024,
        ..ZoneConfig::default()
    };
    let Some(zone) = common::spawn_zone(cfg, Echo::default(), |h| h.closed) else {
        return;
    };
    let addr = zone.addr;
    let mut handles = Vec::new();
    for k in 0..32u32 {
        handles.push(std::thread::spawn(move || {
            let mut s = TcpStream::connect(addr).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            for n in 0..300u32 {
                let len = 1 + ((n * 7 + k) % 97) as usize;
                let msg: Vec<u8> = (0..len as u32).map(|i| (i + n + 31 * k) as u8).collect();
                s.write_all(&msg).unwrap();
                let mut got = vec![0u8; len];
                s.read_exact(&mut got).unwrap();
                assert_eq!(got, msg, "connection {k} message {n}");
            }
            s.shutdown(Shutdown::Write).unwrap();
            let mut rest = Vec::new();
            s.read_to_end(&mut rest).unwrap();
            assert!(rest.is_empty());
        }));
    }
    for h in handles {
        h.join().unwrap();
    }
    zone.waker.wake();
    let closed = zone.thread.join().unwrap();
    assert_eq!(closed, 32);
}

#[test]
fn small_messages_uring() {
    small_messages(EngineKind::Uring);
}

#[test]
fn small_messages_epoll() {
    small_messages(EngineKind::Epoll);
}
