//! A zone that drains while another process keeps serving on the same listening socket (a
//! binary upgrade) loses no connection, and leaves none waiting.
//!
//! * A connection accepted in the batch where the zone decides to drain reaches
//!   `on_accept` only later: with peer addresses wanted, after its `SO_PEERNAME` query
//!   answers. A zone that exited at once closed it unanswered (a binary upgrade with an
//!   access log lost about one request in 17 upgrades); one that waits for
//!   [`Io::accepting`] to turn false serves it.
//! * The kernel wakes one accept per new connection, the first one waiting on the socket.
//!   When the zone's accept was woken and then cancelled before it ran, the connection was
//!   left in the queue and the other process's accept, asleep behind it, was never woken
//!   for it: it waited for the next connection. The zone now takes what its cancellation
//!   left queued.
//!
//! The other process is the test, holding a copy of the socket.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use ringx_engine::{
    bind_reuseport, run_zone, ConnId, EngineKind, Handler, Io, ListenOptions, ListenerId, Waker,
    ZoneConfig,
};

const ROUNDS: usize = 20;

/// When the zone drains, after it connected to itself.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum DrainAt {
    /// In the same callback: the accept woken for the connection has not run yet.
    Wake,
    /// At the end of the next batch, the one the accept completes in.
    NextBatch,
    /// Not at all: the zone exits in the same callback, without a drain.
    Exit,
}

/// Woken, it connects to its own listener and sends a request, then drains: it stops
/// listening and exits once no connection is open and no accept can hand it one. Every
/// connection gets its bytes back, then a close.
struct Drainer {
    addr: SocketAddr,
    at: DrainAt,
    client: Option<TcpStream>,
    /// Batches ended since the connect.
    batches: u32,
    draining: bool,
    open: usize,
    served: usize,
}

impl Drainer {
    fn drain(&mut self, io: &mut Io) {
        io.stop_listening();
        self.draining = true;
        self.exit_if_drained(io);
    }

    fn exit_if_drained(&self, io: &mut Io) {
        if self.draining && self.open == 0 && !io.accepting() {
            io.exit();
        }
    }
}

impl Handler for Drainer {
    fn on_accept(&mut self, _: &mut Io, _: ConnId, _: ListenerId) {
        self.open += 1;
    }
    fn on_data(&mut self, io: &mut Io, c: ConnId, data: &[u8]) {
        self.served += usize::from(data == b"ping");
        io.write(c, data);
        io.close_after_flush(c);
    }
    fn on_eof(&mut self, io: &mut Io, c: ConnId) {
        io.close(c);
    }
    fn on_closed(&mut self, io: &mut Io, _: ConnId, _: Option<std::io::Error>) {
        self.open -= 1;
        self.exit_if_drained(io);
    }
    fn on_timer(&mut self, io: &mut Io) -> Option<Duration> {
        self.exit_if_drained(io);
        None
    }
    fn on_wake(&mut self, io: &mut Io) {
        // Loopback completes the handshake within connect: the connection is in the
        // listener's queue, and the zone's armed accept is woken for it (io_uring runs that
        // accept in the zone's next wait).
        let mut s = TcpStream::connect(self.addr).unwrap();
        s.write_all(b"ping").unwrap();
        self.client = Some(s);
        match self.at {
            DrainAt::Wake => self.drain(io),
            DrainAt::Exit => io.exit(),
            DrainAt::NextBatch => {}
        }
    }
    fn on_batch_end(&mut self, io: &mut Io) {
        if self.client.is_none() || self.draining {
            return;
        }
        self.batches += 1;
        if self.batches == 2 {
            self.drain(io);
        }
    }
}

/// A zone on `l`, woken once it has served a first connection (its accept is armed then),
/// draining `at`. Joined: how many "ping" requests it served, and its client connection.
fn spawn_drainer(
    l: TcpListener,
    engine: EngineKind,
    peer_addrs: bool,
    at: DrainAt,
) -> (Waker, std::thread::JoinHandle<(usize, TcpStream)>) {
    let addr = l.local_addr().unwrap();
    let waker = Waker::new().unwrap();
    let w2 = waker.clone();
    let zone = std::thread::spawn(move || {
        let mut h = Drainer {
            addr,
            at,
            client: None,
            batches: 0,
            draining: false,
            open: 0,
            served: 0,
        };
        let cfg = ZoneConfig {
            engine,
            peer_addrs,
            ..ZoneConfig::default()
        };
        run_zone(&cfg, vec![l], w2, &mut h).unwrap();
        (h.served, h.client.expect("the zone was woken"))
    });
    let mut first = TcpStream::connect(addr).unwrap();
    first.write_all(b"hi").unwrap();
    let mut got = Vec::new();
    first.read_to_end(&mut got).unwrap();
    assert_eq!(got, b"hi", "the zone serves before its drain");
    (waker, zone)
}

/// The zone's client connection, answered.
fn assert_answered(mut client: TcpStream, round: usize) {
    client
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut got = Vec::new();
    client.read_to_end(&mut got).unwrap_or_else(|e| {
        panic!("round {round}: the connection the zone took was not answered: {e}")
    });
    assert_eq!(got, b"ping", "round {round}: the answer");
}

/// The request on a connection the test's copy of the socket accepted.
fn assert_ping(mut s: TcpStream, round: usize) {
    s.set_nonblocking(false).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut got = [0u8; 4];
    s.read_exact(&mut got).unwrap();
    assert_eq!(
        &got, b"ping",
        "round {round}: the queued connection's request"
    );
}

/// One drain in the batch after the connect. True: the zone took the connection and
/// answered it; false: it was left in the queue, where the test found it.
fn round(engine: EngineKind, peer_addrs: bool, round: usize) -> bool {
    let l = bind_reuseport("127.0.0.1:0".parse().unwrap(), &ListenOptions::default()).unwrap();
    let kept: TcpListener = l.try_clone().unwrap(); // the other process's copy
    let (waker, zone) = spawn_drainer(l, engine, peer_addrs, DrainAt::NextBatch);
    waker.wake();
    let (served, client) = zone.join().unwrap();
    match served {
        1 => {
            assert_answered(client, round);
            true
        }
        0 => {
            assert_queued(&kept, round);
            false
        }
        n => panic!("round {round}: {n} requests served, one was sent"),
    }
}

/// The connection waits in the queue of the test's copy of the socket, its request with it.
fn assert_queued(kept: &TcpListener, round: usize) {
    kept.set_nonblocking(true).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let s = loop {
        match kept.accept() {
            Ok((s, _)) => break s,
            Err(e) if e.kind() == ErrorKind::WouldBlock && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(1))
            }
            Err(e) => panic!("round {round}: the connection is neither answered nor queued: {e}"),
        }
    };
    assert_ping(s, round);
}

/// A zone that exits without draining, a connection queued: it leaves the connection in the
/// queue for the other process rather than take it and close it with itself.
fn round_exit(engine: EngineKind, round: usize) {
    let l = bind_reuseport("127.0.0.1:0".parse().unwrap(), &ListenOptions::default()).unwrap();
    let kept: TcpListener = l.try_clone().unwrap();
    let (waker, zone) = spawn_drainer(l, engine, false, DrainAt::Exit);
    waker.wake();
    let (served, _client) = zone.join().unwrap();
    assert_eq!(served, 0, "round {round}: an exiting zone served");
    assert_queued(&kept, round);
}

/// Whether thread `tid` of this process sleeps in `epoll_wait` (or, where the kernel does
/// not say where a thread waits, sleeps at all).
fn asleep_in_epoll(tid: i32) -> bool {
    let task = format!("/proc/self/task/{tid}");
    match std::fs::read_to_string(format!("{task}/wchan")) {
        Ok(w) if !w.is_empty() && w != "0" => w.contains("epoll"),
        _ => std::fs::read_to_string(format!("{task}/stat")).is_ok_and(|s| {
            s.rsplit_once(')')
                .is_some_and(|(_, r)| r.trim_start().starts_with('S'))
        }),
    }
}

/// The other process: it waits as ringx's zones do, one exclusive waiter on the socket
/// (`EPOLLEXCLUSIVE` here, io_uring's accepts are exclusive too), then accepts.
fn wait_and_accept(l: &TcpListener) -> TcpStream {
    use std::os::fd::AsRawFd;
    // SAFETY: epoll_create1 takes no pointer; the descriptor is closed below.
    let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    assert!(
        ep >= 0,
        "epoll_create1: {}",
        std::io::Error::last_os_error()
    );
    let mut ev = libc::epoll_event {
        events: (libc::EPOLLIN | libc::EPOLLEXCLUSIVE) as u32,
        u64: 0,
    };
    // SAFETY: `ev` is a valid epoll_event for the call's duration; both descriptors are open.
    let r = unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, l.as_raw_fd(), &mut ev) };
    assert_eq!(r, 0, "epoll_ctl: {}", std::io::Error::last_os_error());
    let s = loop {
        // SAFETY: the kernel writes at most one event into `ev`, which outlives the call.
        let n = unsafe { libc::epoll_wait(ep, &mut ev, 1, -1) };
        assert!(n >= 0 || std::io::Error::last_os_error().kind() == ErrorKind::Interrupted);
        match l.accept() {
            Ok((s, _)) => break s,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {} // taken by the zone meanwhile
            Err(e) => panic!("accept: {e}"),
        }
    };
    // SAFETY: `ep` is ours and closed once.
    unsafe { libc::close(ep) };
    s
}

/// One drain in the very callback that connected, with the other process asleep on the
/// socket behind the zone's accept. True: the zone took the connection; false: the other
/// process was woken for it.
fn round_with_waiter(engine: EngineKind, round: usize) -> bool {
    let l = bind_reuseport("127.0.0.1:0".parse().unwrap(), &ListenOptions::default()).unwrap();
    let addr = l.local_addr().unwrap();
    let kept: TcpListener = l.try_clone().unwrap();
    let (waker, zone) = spawn_drainer(l, engine, false, DrainAt::Wake);
    let (tid_tx, tid_rx) = mpsc::channel();
    let (conn_tx, conn_rx) = mpsc::channel();
    let waiter = std::thread::spawn(move || {
        // SAFETY: gettid takes nothing and cannot fail.
        tid_tx.send(unsafe { libc::gettid() }).unwrap();
        conn_tx.send(wait_and_accept(&kept)).unwrap();
    });
    let tid = tid_rx.recv().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !asleep_in_epoll(tid) {
        assert!(Instant::now() < deadline, "the other process never waited");
        std::thread::sleep(Duration::from_millis(1));
    }
    waker.wake();
    let (served, client) = zone.join().unwrap();
    let taken = match served {
        1 => {
            assert_answered(client, round);
            // The other process's accept is still asleep: a connection of no interest ends it.
            let _ = TcpStream::connect(addr).unwrap();
            true
        }
        0 => {
            let s = conn_rx.recv_timeout(Duration::from_secs(10)).unwrap_or_else(|_| {
                panic!("round {round}: the connection was left queued and the other process's accept was never woken for it")
            });
            assert_ping(s, round);
            false
        }
        n => panic!("round {round}: {n} requests served, one was sent"),
    };
    waiter.join().unwrap();
    taken
}

/// Whether `engine` runs here; where io_uring is refused, says so (`ringx_kerneltest`: a
/// failure under CI).
fn available(engine: EngineKind) -> bool {
    if engine != EngineKind::Uring {
        return true;
    }
    match ringx_engine::uring::probe::check() {
        Ok(()) => true,
        Err(why) => {
            ringx_kerneltest::skip(format!("io_uring is unavailable here: {why}"));
            false
        }
    }
}

fn drain_loses_nothing(engine: EngineKind, peer_addrs: bool) {
    if !available(engine) {
        return;
    }
    let taken = (0..ROUNDS)
        .filter(|&r| round(engine, peer_addrs, r))
        .count();
    println!(
        "{engine:?}, peer addresses {peer_addrs}: the draining zone took {taken} of {ROUNDS} late connections"
    );
}

#[test]
fn drain_loses_nothing_uring() {
    drain_loses_nothing(EngineKind::Uring, false);
}

#[test]
fn drain_loses_nothing_uring_peer_addrs() {
    drain_loses_nothing(EngineKind::Uring, true);
}

#[test]
fn drain_loses_nothing_epoll() {
    drain_loses_nothing(EngineKind::Epoll, false);
}

#[test]
fn drain_loses_nothing_epoll_peer_addrs() {
    drain_loses_nothing(EngineKind::Epoll, true);
}

fn drain_wakes_nobody_in_vain(engine: EngineKind) {
    if !available(engine) {
        return;
    }
    let taken = (0..ROUNDS)
        .filter(|&r| round_with_waiter(engine, r))
        .count();
    println!(
        "{engine:?}: the draining zone took {taken} of {ROUNDS} connections its cancellation left"
    );
}

#[test]
fn a_connection_left_by_the_cancelled_accept_is_served_uring() {
    drain_wakes_nobody_in_vain(EngineKind::Uring);
}

#[test]
fn a_connection_left_by_the_cancelled_accept_is_served_epoll() {
    drain_wakes_nobody_in_vain(EngineKind::Epoll);
}

#[test]
fn an_exiting_zone_leaves_queued_connections_queued() {
    for engine in [EngineKind::Uring, EngineKind::Epoll] {
        if !available(engine) {
            continue;
        }
        for r in 0..ROUNDS {
            round_exit(engine, r);
        }
    }
}
