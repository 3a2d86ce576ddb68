//! The test driver itself, driven by a small echo server with a few commands.

use std::fs::File;
use std::io::Write;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use super::TestDriver;
use crate::{ConnId, ConnectTo, Handler, Io, ListenerId};

/// Echoes bytes back; some messages are commands.
#[derive(Default)]
struct Echo {
    accepted: Vec<(ConnId, ListenerId, Option<SocketAddr>)>,
    closed: Vec<(ConnId, Option<String>)>,
    flushed: Vec<ConnId>,
    connected: Vec<ConnId>,
    eofs: Vec<ConnId>,
    /// `io.now()` at each `on_timer` call.
    timers: Vec<Instant>,
    /// What `on_timer` returns.
    interval: Option<Duration>,
    /// Where "connect" connects, and the file "file" sends.
    upstream: Option<SocketAddr>,
    file: Option<Rc<File>>,
    /// Outbound connections opened by "connect", and whether the last one failed to open.
    outbound: Vec<ConnId>,
    connect_err: Option<String>,
    wakes: u32,
    /// `io.timer_planned()` at each `on_timer` call and each "planned" message.
    planned: Vec<Option<Instant>>,
}

impl Handler for Echo {
    fn on_accept(&mut self, io: &mut Io, c: ConnId, l: ListenerId) {
        self.accepted.push((c, l, io.peer_addr(c)));
    }
    fn on_connected(&mut self, _: &mut Io, c: ConnId) {
        self.connected.push(c);
    }
    fn on_data(&mut self, io: &mut Io, c: ConnId, data: &[u8]) {
        match data {
            b"close" => {
                io.write(c, b"never sent");
                io.close(c);
            }
            b"bye" => {
                io.write(c, b"bye");
                io.close_after_flush(c);
            }
            b"shut" => {
                io.write(c, b"shut");
                io.shutdown_after_flush(c);
            }
            b"pause" => {
                io.pause_recv(c);
                io.write(c, b"paused");
                io.notify_when_flushed(c);
            }
            b"file" => {
                io.write(c, b"head:");
                let f = self.file.clone().expect("a file to send");
                let len = f.metadata().unwrap().len();
                io.send_file(c, f, 0, len);
            }
            b"planned" => self.planned.push(io.timer_planned()),
            b"later" => {
                let at = io.now() + Duration::from_millis(30);
                io.timer_at(at);
            }
            b"connect" => match io.connect(&ConnectTo::new(self.upstream.unwrap())) {
                Ok(u) => {
                    assert_eq!(io.raw_fd(u), None, "no descriptor without a kernel");
                    io.write(u, b"queued while connecting");
                    self.outbound.push(u);
                }
                Err(e) => self.connect_err = Some(e.to_string()),
            },
            _ => io.write(c, data),
        }
    }
    fn on_eof(&mut self, io: &mut Io, c: ConnId) {
        self.eofs.push(c);
        io.close_after_flush(c);
    }
    fn on_flushed(&mut self, io: &mut Io, c: ConnId) {
        self.flushed.push(c);
        io.resume_recv(c);
    }
    fn on_closed(&mut self, _: &mut Io, c: ConnId, err: Option<std::io::Error>) {
        self.closed.push((c, err.map(|e| e.to_string())));
    }
    fn on_timer(&mut self, io: &mut Io) -> Option<Duration> {
        self.timers.push(io.now());
        self.planned.push(io.timer_planned());
        self.interval
    }
    fn on_wake(&mut self, io: &mut Io) {
        self.wakes += 1;
        match self.wakes {
            1 => {
                let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
                let id = io.add_listener(l);
                assert_eq!(id, ListenerId(1));
                io.close_listener(ListenerId(0));
            }
            2 => io.stop_listening(),
            _ => io.exit(),
        }
    }
}

const L0: ListenerId = ListenerId(0);

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

/// A file with `bytes`, named for this process; removed when dropped.
struct TempFile(std::path::PathBuf);

impl TempFile {
    fn new(name: &str, bytes: &[u8]) -> TempFile {
        let path = std::env::temp_dir().join(format!("ringx-testio-{}-{name}", std::process::id()));
        File::create(&path).unwrap().write_all(bytes).unwrap();
        TempFile(path)
    }
    fn open(&self) -> Rc<File> {
        Rc::new(File::open(&self.0).unwrap())
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn echoes_and_hands_out_the_lowest_free_handle() {
    let (mut d, mut h) = (TestDriver::new(), Echo::default());
    let a = d.accept(&mut h, L0, Some(addr("10.0.0.1:5000")));
    let b = d.accept(&mut h, L0, None);
    assert_eq!((a, b), (ConnId(0), ConnId(1)));
    assert_eq!(h.accepted[0], (a, L0, Some(addr("10.0.0.1:5000"))));
    d.recv(&mut h, a, b"ping");
    d.recv(&mut h, a, b"pong");
    assert_eq!(d.take_output(a), b"pingpong");
    assert_eq!(d.take_output(a), b"", "taken once");
    assert_eq!(d.io().bytes_out(a), 8);
    assert_eq!(d.io().raw_fd(a), None);
    d.recv(&mut h, a, b"close");
    assert!(d.closed(a) && !d.is_open(a));
    let c = d.accept(&mut h, L0, None);
    assert_eq!(c, a, "a closed handle is reused, lowest first");
    assert!(!d.closed(c), "reopened");
}

#[test]
fn close_drops_unsent_output_and_reports_once() {
    let (mut d, mut h) = (TestDriver::new(), Echo::default());
    let c = d.accept(&mut h, L0, None);
    d.recv(&mut h, c, b"close");
    assert_eq!(
        d.take_output(c),
        b"",
        "output queued before close is dropped"
    );
    assert_eq!(h.closed, vec![(c, None)]);
    d.recv(&mut h, c, b"late");
    d.eof(&mut h, c);
    assert_eq!(h.closed.len(), 1, "nothing reaches a closed connection");
    assert!(h.eofs.is_empty());
}

#[test]
fn window_holds_output_back_until_raised() {
    let (mut d, mut h) = (TestDriver::new(), Echo::default());
    let c = d.accept(&mut h, L0, None);
    d.set_window(c, Some(3));
    d.recv(&mut h, c, b"hello");
    assert_eq!(d.take_output(c), b"hel");
    assert_eq!(d.io().pending(c), 2);
    assert_eq!(d.io().bytes_out(c), 5, "written plus queued");
    d.recv(&mut h, c, b"pause");
    assert!(d.recv_paused(c));
    assert!(
        h.flushed.is_empty(),
        "not flushed while the peer does not read"
    );
    d.recv(&mut h, c, b"!");
    assert_eq!(d.io().pending(c), 9, "data still arrives while paused");
    d.set_window(c, Some(4));
    d.flush(&mut h);
    assert_eq!(d.take_output(c), b"lopa");
    assert!(h.flushed.is_empty());
    d.set_window(c, None);
    d.flush(&mut h);
    assert_eq!(d.take_output(c), b"used!");
    assert_eq!(h.flushed, vec![c]);
    assert!(!d.recv_paused(c), "on_flushed resumed it");
}

#[test]
fn close_after_flush_waits_for_the_window() {
    let (mut d, mut h) = (TestDriver::new(), Echo::default());
    let c = d.accept(&mut h, L0, None);
    d.set_window(c, Some(2));
    d.recv(&mut h, c, b"bye");
    assert_eq!(d.take_output(c), b"by");
    assert!(
        d.is_open(c) && !d.closed(c),
        "open until everything is written"
    );
    let other = d.accept(&mut h, L0, None);
    assert_ne!(other, c, "a handle is not reused before on_closed");
    d.set_window(c, Some(10));
    d.flush(&mut h);
    assert_eq!(d.take_output(c), b"e");
    assert!(d.closed(c));
    assert_eq!(h.closed, vec![(c, None)]);
}

#[test]
fn abort_while_close_after_flush_waits() {
    let (mut d, mut h) = (TestDriver::new(), Echo::default());
    let c = d.accept(&mut h, L0, None);
    d.set_window(c, Some(0));
    d.recv(&mut h, c, b"bye");
    d.io().close(c);
    d.flush(&mut h);
    assert_eq!(d.take_output(c), b"");
    assert_eq!(h.closed, vec![(c, None)]);
}

#[test]
fn shutdown_after_flush_and_eof() {
    let (mut d, mut h) = (TestDriver::new(), Echo::default());
    let c = d.accept(&mut h, L0, None);
    d.set_window(c, Some(1));
    d.recv(&mut h, c, b"shut");
    assert!(!d.write_shut(c), "not before the queue drains");
    d.set_window(c, None);
    d.flush(&mut h);
    assert_eq!(d.take_output(c), b"shut");
    assert!(d.write_shut(c) && d.is_open(c), "FIN sent, still reading");
    d.recv(&mut h, c, b"more");
    d.eof(&mut h, c);
    assert_eq!(h.eofs, vec![c]);
    assert_eq!(d.take_output(c), b"more");
    assert!(d.closed(c), "on_eof closed it after the flush");
    d.eof(&mut h, c);
    assert_eq!(h.eofs.len(), 1, "one FIN");
}

#[test]
fn reset_reports_the_error_and_frees_the_handle() {
    let (mut d, mut h) = (TestDriver::new(), Echo::default());
    let c = d.accept(&mut h, L0, None);
    d.set_window(c, Some(0));
    d.recv(&mut h, c, b"queued");
    let err = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
    d.reset(&mut h, c, err);
    assert_eq!(h.closed.len(), 1);
    assert!(h.closed[0].1.is_some());
    assert_eq!(d.io().pending(c), 0);
    assert_eq!(d.accept(&mut h, L0, None), c);
}

#[test]
fn outbound_connects() {
    let mut d = TestDriver::with_limits(8, 2);
    let mut h = Echo {
        upstream: Some(addr("192.0.2.7:80")),
        ..Echo::default()
    };
    let c = d.accept(&mut h, L0, None);
    d.recv(&mut h, c, b"connect");
    let connects = d.take_connects();
    assert_eq!(connects.len(), 1);
    let (u, to) = connects[0];
    assert_eq!(u, ConnId(8), "outbound handles lie above max_conns");
    assert_eq!(to.addr, addr("192.0.2.7:80"));
    assert!(d.take_connects().is_empty());
    assert!(d.is_open(u));
    assert_eq!(d.io().peer_addr(u), Some(addr("192.0.2.7:80")));
    assert_eq!(d.take_output(u), b"", "nothing is sent while connecting");
    d.connected(&mut h, u);
    assert_eq!(h.connected, vec![u]);
    assert_eq!(d.take_output(u), b"queued while connecting");
    // A second connect fails; its slot comes back, and the third takes it.
    d.recv(&mut h, c, b"connect");
    let (u2, _) = d.take_connects()[0];
    assert_eq!(u2, ConnId(9));
    let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
    d.connect_failed(&mut h, u2, refused);
    let (closed, err) = h.closed.last().unwrap();
    assert_eq!(*closed, u2);
    assert!(err
        .as_deref()
        .unwrap()
        .starts_with("connect to 192.0.2.7:80: "));
    assert!(d.closed(u2));
    d.recv(&mut h, c, b"connect");
    assert_eq!(d.take_connects()[0].0, u2);
    assert!(
        !d.closed(u2) && d.is_open(u2),
        "the reused handle is a new connection"
    );
    // Both outbound slots are taken: the next connect fails at once.
    d.recv(&mut h, c, b"connect");
    assert!(d.take_connects().is_empty());
    assert!(h.connect_err.as_deref().unwrap().contains("max_outbound"));
    d.connected(&mut h, u2);
    assert_eq!(h.connected, vec![u, u2]);
}

#[test]
fn timers_fire_at_their_due_times() {
    let (mut d, mut h) = (TestDriver::new(), Echo::default());
    let t0 = d.now();
    h.interval = Some(Duration::from_millis(100));
    d.start(&mut h);
    assert_eq!(h.timers, vec![t0], "once at start");
    d.advance(&mut h, Duration::from_millis(250));
    let ms = |t: &Instant| t.duration_since(t0).as_millis();
    assert_eq!(h.timers.iter().map(ms).collect::<Vec<_>>(), [0, 100, 200]);
    assert_eq!(d.now(), t0 + Duration::from_millis(250));
    // A timer_at request earlier than the interval: on_timer runs then, and its returned
    // interval counts from there.
    let c = d.accept(&mut h, L0, None);
    d.recv(&mut h, c, b"later");
    assert_eq!(d.next_timer(), Some(t0 + Duration::from_millis(280)));
    d.advance(&mut h, Duration::from_millis(100));
    assert_eq!(
        h.timers.iter().map(ms).collect::<Vec<_>>(),
        [0, 100, 200, 280]
    );
    h.interval = None;
    d.advance(&mut h, Duration::from_millis(100));
    assert_eq!(h.timers.len(), 5, "the call at 380 asked for no more");
    d.advance(&mut h, Duration::from_secs(10));
    assert_eq!(h.timers.len(), 5);
}

#[test]
fn the_planned_timer_turn_is_known() {
    let (mut d, mut h) = (TestDriver::new(), Echo::default());
    let t0 = d.now();
    let ms = |n| Some(t0 + Duration::from_millis(n));
    h.interval = Some(Duration::from_millis(100));
    d.start(&mut h);
    let c = d.accept(&mut h, L0, None);
    d.recv(&mut h, c, b"planned");
    // A request made later is in it as soon as it is made.
    d.recv(&mut h, c, b"later");
    d.recv(&mut h, c, b"planned");
    d.advance(&mut h, Duration::from_millis(30));
    d.recv(&mut h, c, b"planned");
    // While on_timer runs nothing is planned: every request it makes counts.
    assert_eq!(h.planned, [None, ms(100), ms(30), None, ms(130)]);
    h.interval = None;
    d.advance(&mut h, Duration::from_millis(100));
    d.recv(&mut h, c, b"planned");
    assert_eq!(h.planned[5..], [None, None], "on_timer asked for no more");
}

#[test]
fn no_timer_before_start() {
    let (mut d, mut h) = (TestDriver::new(), Echo::default());
    d.advance(&mut h, Duration::from_secs(1));
    assert!(h.timers.is_empty());
    let c = d.accept(&mut h, L0, None);
    d.recv(&mut h, c, b"later");
    d.advance(&mut h, Duration::from_millis(29));
    assert!(h.timers.is_empty());
    d.advance(&mut h, Duration::from_millis(1));
    assert_eq!(h.timers.len(), 1);
}

#[test]
fn files_are_read_back() {
    let body: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    let f = TempFile::new("body", &body);
    let (mut d, mut h) = (TestDriver::new(), Echo::default());
    h.file = Some(f.open());
    let c = d.accept(&mut h, L0, None);
    d.set_window(c, Some(100_000));
    d.recv(&mut h, c, b"file");
    let mut got = d.take_output(c);
    assert_eq!(got.len(), 100_000);
    assert_eq!(d.io().pending(c), 200_005 - 100_000);
    d.set_window(c, None);
    d.flush(&mut h);
    got.extend(d.take_output(c));
    assert_eq!(&got[..5], b"head:");
    assert!(got[5..] == body[..], "the file's bytes, in order");
}

#[test]
fn a_file_that_shrank_fails_the_connection() {
    let f = TempFile::new("short", b"0123456789");
    let (mut d, mut h) = (TestDriver::new(), Echo::default());
    h.file = Some(f.open());
    let c = d.accept(&mut h, L0, None);
    d.io().send_file(c, f.open(), 5, 10);
    d.flush(&mut h);
    assert_eq!(d.take_output(c), b"56789");
    let (closed, err) = &h.closed[0];
    assert_eq!(*closed, c);
    assert!(err.as_deref().unwrap().contains("file shrank"));
}

#[test]
fn wake_listeners_and_exit() {
    let (mut d, mut h) = (TestDriver::new(), Echo::default());
    assert_eq!(d.start_listener(), L0);
    d.wake(&mut h);
    assert_eq!(d.added_listeners(), vec![ListenerId(1)]);
    assert_eq!(d.closed_listeners(), vec![L0]);
    assert!(d.added_listeners().is_empty());
    d.accept(&mut h, ListenerId(1), None);
    assert!(d.listening());
    d.wake(&mut h);
    assert!(!d.listening());
    assert!(!d.exited());
    d.wake(&mut h);
    assert!(d.exited());
}

#[test]
#[should_panic(expected = "no longer listens")]
fn accept_on_a_closed_listener_is_a_test_bug() {
    let (mut d, mut h) = (TestDriver::new(), Echo::default());
    d.start_listener();
    d.wake(&mut h); // closes listener 0
    d.accept(&mut h, L0, None);
}

#[test]
#[should_panic(expected = "every handle below max_conns")]
fn accept_beyond_max_conns_is_a_test_bug() {
    let (mut d, mut h) = (TestDriver::with_limits(2, 0), Echo::default());
    for _ in 0..3 {
        d.accept(&mut h, L0, None);
    }
}
