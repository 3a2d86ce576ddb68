//! The unified blocking wait: an idle zone parks (blocks in the kernel), publishes it, and a
//! control wake-up reaches it through MSG_RING (io_uring) or the eventfd (epoll), only
//! while it is parked.

mod common;

use std::time::{Duration, Instant};

use ringx_engine::{ConnId, EngineKind, Handler, Io, ListenerId, ZoneConfig};

/// Exits on the second wake; counts wakes.
#[derive(Default)]
struct Idle {
    wakes: u32,
}

impl Handler for Idle {
    fn on_accept(&mut self, _: &mut Io, _: ConnId, _: ListenerId) {}
    fn on_data(&mut self, _: &mut Io, _: ConnId, _: &[u8]) {}
    fn on_eof(&mut self, io: &mut Io, c: ConnId) {
        io.close(c)
    }
    fn on_closed(&mut self, _: &mut Io, _: ConnId, _: Option<std::io::Error>) {}
    fn on_timer(&mut self, _: &mut Io) -> Option<Duration> {
        None
    }
    fn on_wake(&mut self, io: &mut Io) {
        self.wakes += 1;
        if self.wakes == 2 {
            io.exit();
        }
    }
}

/// Waits until the zone took `wakes` wake-ups and parked again.
fn wait_parked(w: &ringx_engine::Waker, wakes: u64) {
    let t = Instant::now();
    while !(w.stats().parked && w.stats().wakes == wakes) {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "the idle zone never parked"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn park_and_wake(engine: EngineKind, busy_poll: Duration) {
    let cfg = ZoneConfig {
        engine,
        max_conns: 16,
        recv_buffers: 8,
        recv_buffer_size: 1024,
        busy_poll,
        ..ZoneConfig::default()
    };
    let Some(zone) = common::spawn_zone(cfg, Idle::default(), |h| h.wakes) else {
        return;
    };
    let w = zone.waker.clone();
    // A connection to a parked zone is accepted at once (the accept completes in the
    // kernel and ends the wait).
    wait_parked(&w, 0);
    let t = Instant::now();
    let _client = std::net::TcpStream::connect(zone.addr).unwrap();
    while w.stats().accepts == 0 {
        assert!(t.elapsed() < Duration::from_secs(5), "never accepted");
        std::hint::spin_loop();
    }
    assert!(
        t.elapsed() < Duration::from_millis(100),
        "{:?}",
        t.elapsed()
    );
    for i in 0..2 {
        wait_parked(&w, i);
        let before = w.stats();
        std::thread::sleep(Duration::from_millis(50));
        let idle = w.stats();
        // Parked means blocked: no wait returned in the meantime.
        assert_eq!(
            idle.waits, before.waits,
            "a parked zone kept polling: {before:?} {idle:?}"
        );
        w.wake();
    }
    let t = Instant::now();
    let wakes = zone.thread.join().unwrap();
    assert_eq!(wakes, 2);
    assert!(t.elapsed() < Duration::from_secs(1));
    let s = w.stats();
    assert_eq!(s.wakes, 2);
    match engine {
        EngineKind::Uring => assert_eq!((s.sent_msg_ring, s.sent_eventfd), (2, 0), "{s:?}"),
        EngineKind::Epoll => assert_eq!(s.sent_eventfd, 2, "{s:?}"),
    }
    assert!(s.parked_ns > 90_000_000, "{s:?}");
}

#[test]
fn uring_park_wake() {
    park_and_wake(EngineKind::Uring, Duration::ZERO);
}

#[test]
fn uring_busy_poll_then_park() {
    park_and_wake(EngineKind::Uring, Duration::from_micros(200));
}

#[test]
fn epoll_park_wake() {
    park_and_wake(EngineKind::Epoll, Duration::ZERO);
}

#[test]
fn epoll_busy_poll_then_park() {
    park_and_wake(EngineKind::Epoll, Duration::from_micros(200));
}

/// A wake while the zone runs sets the flag and sends nothing.
#[test]
fn wake_before_start_needs_no_syscall() {
    let w = ringx_engine::Waker::new().unwrap();
    w.wake();
    w.wake();
    let s = w.stats();
    assert_eq!((s.sent_none, s.sent_msg_ring, s.sent_eventfd), (2, 0, 0));
}
