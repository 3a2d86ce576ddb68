//! Slots and buffers are never leaked: connections closed by the server in every state
//! (just accepted, with a receive armed, with output queued, paused) free their slot, so a
//! zone with 32 slots serves thousands of connections one after another.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use ringx_engine::{ConnId, EngineKind, Handler, Io, ListenerId, ZoneConfig};

/// Closes connections in a way chosen by the first byte the client sends.
#[derive(Default)]
struct Closer {
    accepted: usize,
    closed: usize,
}

impl Handler for Closer {
    fn on_accept(&mut self, io: &mut Io, c: ConnId, _: ListenerId) {
        self.accepted += 1;
        if self.accepted.is_multiple_of(5) {
            io.close(c); // closed with a receive armed and nothing read
        }
    }
    fn on_data(&mut self, io: &mut Io, c: ConnId, data: &[u8]) {
        match data[0] {
            b'a' => {
                // a big reply queued, then an abrupt close: unsent output is dropped
                io.write(c, &vec![b'x'; 1 << 20]);
                io.close(c);
            }
            b'b' => {
                io.write(c, b"bye");
                io.close_after_flush(c);
            }
            b'p' => {
                io.pause_recv(c);
                io.write(c, b"paused");
                io.notify_when_flushed(c);
            }
            _ => io.close(c),
        }
    }
    fn on_flushed(&mut self, io: &mut Io, c: ConnId) {
        io.resume_recv(c);
        io.close_after_flush(c);
    }
    fn on_eof(&mut self, io: &mut Io, c: ConnId) {
        io.close(c);
    }
    fn on_closed(&mut self, _: &mut Io, _: ConnId, _: Option<std::io::Error>) {
        self.closed += 1;
    }
    fn on_timer(&mut self, _: &mut Io) -> Option<Duration> {
        None
    }
    fn on_wake(&mut self, io: &mut Io) {
        io.exit();
    }
}

const KINDS: &[u8] = b"abpz";
fn churn(engine: EngineKind) {
    let cfg = ZoneConfig {
        engine,
        max_conns: 32,
        recv_buffers: 8,
        recv_buffer_size: 1024,
        ..ZoneConfig::default()
    };
    let Some(zone) = common::spawn_zone(cfg, Closer::default(), |h| (h.accepted, h.closed)) else {
        return;
    };
    let addr = zone.addr;
    let n = 2000;
    for i in 0..n {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let kind = KINDS[i % KINDS.len()];
        let _ = s.write_all(&[kind]);
        let mut buf = Vec::new();
        let _ = s.read_to_end(&mut buf); // ends when the server closes (or resets)
                                         // Every fifth connection is closed by the server as soon as it is accepted.
        let closed_at_accept = i % 5 == 4;
        match kind {
            b'b' if !closed_at_accept => assert_eq!(buf, b"bye", "connection {i}"),
            b'p' if !closed_at_accept => assert_eq!(buf, b"paused", "connection {i}"),
            _ => {}
        }
    }
    // Let the last close complete before stopping the zone.
    std::thread::sleep(Duration::from_millis(100));
    zone.waker.wake();
    let (accepted, closed) = zone.thread.join().unwrap();
    assert_eq!(accepted, n, "every connection was accepted: no slot leaked");
    assert_eq!(closed, n, "every connection reported closed exactly once");
}

#[test]
fn churn_uring() {
    churn(EngineKind::Uring);
}

#[test]
fn churn_epoll() {
    churn(EngineKind::Epoll);
}
