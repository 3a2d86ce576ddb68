//! A write shutdown belongs to the connection it was asked for, never to the next one in its
//! slot. io_uring runs `IORING_OP_SHUTDOWN` in an io-wq worker, which looks up the direct
//! descriptor only when it runs: a close of the slot submitted before then, and an accept
//! into it, would let the shutdown cut the new connection (a TLS client saw its handshake
//! end in EOF, a proxied connection lost its answer). One slot, so every connection reuses
//! it at once; each odd connection is shut and closed in the same tick, the even one after
//! it must be served whole.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use ringx_engine::{ConnId, EngineKind, Handler, Io, ListenerId, ZoneConfig};

const ROUNDS: usize = 300;

#[derive(Default)]
struct ShutThenServe {
    accepted: usize,
    served: usize,
}

impl Handler for ShutThenServe {
    fn on_accept(&mut self, io: &mut Io, c: ConnId, _: ListenerId) {
        self.accepted += 1;
        if self.accepted % 2 == 1 {
            // FIN, then the close as soon as the shutdown is submitted (`on_flushed`).
            io.shutdown_after_flush(c);
            io.notify_when_flushed(c);
        } else {
            io.write(c, b"hello");
        }
    }
    fn on_flushed(&mut self, io: &mut Io, c: ConnId) {
        io.close(c);
    }
    fn on_data(&mut self, io: &mut Io, c: ConnId, data: &[u8]) {
        self.served += 1;
        io.write(c, data);
    }
    fn on_eof(&mut self, io: &mut Io, c: ConnId) {
        io.close(c);
    }
    fn on_closed(&mut self, _: &mut Io, _: ConnId, _: Option<std::io::Error>) {}
    fn on_timer(&mut self, _: &mut Io) -> Option<Duration> {
        None
    }
    fn on_wake(&mut self, io: &mut Io) {
        io.exit();
    }
}

fn read_exact_or_say(s: &mut TcpStream, n: usize, round: usize, what: &str) -> Vec<u8> {
    let mut got = vec![0u8; n];
    let mut at = 0;
    while at < n {
        match s.read(&mut got[at..]) {
            Ok(0) => panic!("round {round}: the served connection ended before {what} ({at} of {n} bytes): a shutdown meant for the connection before it"),
            Ok(k) => at += k,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => panic!("round {round}: reading {what}: {e}"),
        }
    }
    got
}

fn shutdown_stays_with_its_connection(engine: EngineKind) {
    let cfg = ZoneConfig {
        engine,
        max_conns: 1,
        ..ZoneConfig::default()
    };
    let Some(zone) = common::spawn_zone(cfg, ShutThenServe::default(), |h| (h.accepted, h.served))
    else {
        return;
    };
    for round in 0..ROUNDS {
        // Both at once: the second waits in the accept queue for the one slot, and is
        // accepted into it as soon as the first one's close completes.
        let mut shut = TcpStream::connect(zone.addr).unwrap();
        let mut served = TcpStream::connect(zone.addr).unwrap();
        for s in [&shut, &served] {
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        }
        let mut rest = Vec::new();
        shut.read_to_end(&mut rest).unwrap();
        assert!(rest.is_empty(), "round {round}: the shut one gets EOF only");
        drop(shut);
        assert_eq!(
            &read_exact_or_say(&mut served, 5, round, "its greeting"),
            b"hello"
        );
        served.write_all(b"ping").unwrap();
        assert_eq!(
            &read_exact_or_say(&mut served, 4, round, "its echo"),
            b"ping"
        );
    }
    zone.waker.wake();
    let (accepted, served) = zone.thread.join().unwrap();
    assert_eq!((accepted, served), (2 * ROUNDS, ROUNDS));
}

#[test]
fn uring_shutdown_never_reaches_the_next_connection_in_its_slot() {
    shutdown_stays_with_its_connection(EngineKind::Uring);
}

#[test]
fn epoll_shutdown_never_reaches_the_next_connection_in_its_slot() {
    shutdown_stays_with_its_connection(EngineKind::Epoll);
}
