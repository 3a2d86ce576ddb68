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
    let cfg = ZoneConfig {
        engine,
        batch_wait,
        max_conns: 256,
        recv_buffers: 16,
        recv_buffer_size: 4096,
        ..ZoneConfig::default()
    };
    let Some(zone) = common::spawn_zone(cfg, Echo::default(), |h| h.closed) else {
        return;
    };
    let addr = zone.addr;
    // Many connections at once, each sending more than all receive buffers together hold,
    // so ENOBUFS re-arming and short writes are exercised.
    let msg: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    let mut handles = Vec::new();
    for _ in 0..8 {
        let msg = msg.clone();
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

#[test]
fn echo_epoll() {
    echo_roundtrip(EngineKind::Epoll);
}
