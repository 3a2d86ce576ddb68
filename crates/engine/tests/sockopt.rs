//! `Io::set_sockopt` and `Io::send_tls_record` on both engines, with real sockets: an
//! option takes effect in order with the output (`SO_LINGER` {on, 0} queued after "x":
//! "x" arrives, and the close that follows is a reset, not a FIN), a refused option closes
//! the connection with the kernel's error after what was queued before it (the `tls` ULP
//! where the kernel lacks it; where it has it, the ULP attaches and the output goes on), and a
//! TLS record on a socket without kernel TLS arrives as its bytes, in order. A record too
//! big for the socket buffers waits for room: records queued meanwhile follow it in order,
//! and a close does not wait for a peer that stopped reading.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ringx_engine::{ConnId, EngineKind, Handler, Io, ListenerId, ZoneConfig};

/// What each connection does on accept, by the first byte the client sends.
#[derive(Default)]
struct Scripted {
    errors: Arc<Mutex<Vec<String>>>,
    /// A file of 200 KB (`F`: sent, then a record, then bytes).
    file: Option<std::path::PathBuf>,
    /// Connections closed.
    closed: Arc<AtomicUsize>,
}

/// A record bigger than loopback's socket buffers: its send waits for room.
const BIG: usize = 16 << 20;

const TCP_ULP: i32 = 31;

impl Handler for Scripted {
    fn on_accept(&mut self, _: &mut Io, _: ConnId, _: ListenerId) {}
    fn on_data(&mut self, io: &mut Io, c: ConnId, data: &[u8]) {
        match data[0] {
            b'L' => {
                io.write(c, b"x");
                let linger = libc::linger {
                    l_onoff: 1,
                    l_linger: 0,
                };
                // SAFETY: linger is plain data; its bytes are what setsockopt takes.
                let bytes = unsafe {
                    std::slice::from_raw_parts(
                        (&linger as *const libc::linger).cast::<u8>(),
                        std::mem::size_of::<libc::linger>(),
                    )
                };
                io.set_sockopt(c, libc::SOL_SOCKET, libc::SO_LINGER, bytes.to_vec());
            }
            b'U' => {
                io.write(c, b"before");
                io.set_sockopt(c, libc::SOL_TCP, TCP_ULP, b"tls".to_vec());
                io.write(c, b"after");
            }
            b'R' => {
                io.write(c, b"a");
                io.send_tls_record(c, 21, &[1, 0]);
                io.write(c, b"b");
            }
            b'F' => {
                // A head, a file large enough for sendfile, a record, more bytes: in order.
                let f = std::fs::File::open(self.file.as_ref().unwrap()).unwrap();
                let len = f.metadata().unwrap().len();
                io.write(c, b"head");
                io.send_file(c, std::rc::Rc::new(f), 0, len);
                io.send_tls_record(c, 21, &[1, 0]);
                io.write(c, b"tail");
            }
            b'K' => io.send_tls_record(c, 23, &vec![7; BIG]),
            b'M' => {
                // Behind the big record, still waiting for room: the queue grows.
                for i in 0..8 {
                    io.send_tls_record(c, 23, &[b'0' + i]);
                }
                io.write(c, b"end");
            }
            b'C' => io.close(c),
            _ => {}
        }
    }
    fn on_eof(&mut self, io: &mut Io, c: ConnId) {
        io.close(c);
    }
    fn on_closed(&mut self, _: &mut Io, _: ConnId, err: Option<std::io::Error>) {
        self.closed.fetch_add(1, Ordering::SeqCst);
        if let Some(e) = err {
            self.errors.lock().unwrap().push(e.to_string());
        }
    }
    fn on_timer(&mut self, _: &mut Io) -> Option<Duration> {
        None
    }
    fn on_wake(&mut self, io: &mut Io) {
        io.exit();
    }
}

fn client(addr: std::net::SocketAddr, first: u8) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(&[first]).unwrap();
    s
}

fn read_n(s: &mut TcpStream, n: usize) -> Vec<u8> {
    let mut b = vec![0; n];
    s.read_exact(&mut b).unwrap();
    b
}

/// Bytes waiting in `s`'s receive queue.
fn unread(s: &TcpStream) -> libc::c_int {
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int, to `n`, which lives through the call; the descriptor
    // is `s`'s, open while it is borrowed.
    let r = unsafe { libc::ioctl(std::os::fd::AsRawFd::as_raw_fd(s), libc::FIONREAD, &mut n) };
    assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
    n
}

/// Waits until the big record waits for room: its first bytes arrived, no more come, and the
/// zone is parked (nothing to do but wait).
fn wait_stalled(s: &TcpStream, w: &ringx_engine::Waker) {
    let t = std::time::Instant::now();
    let (mut last, mut still) = (0, 0);
    while still < 5 {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "the record never stalled"
        );
        std::thread::sleep(Duration::from_millis(10));
        let n = unread(s);
        still = if n > 0 && n == last && w.stats().parked {
            still + 1
        } else {
            0
        };
        last = n;
    }
}

fn kernel_has_tls_ulp() -> bool {
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_ulp")
        .is_ok_and(|s| s.split_whitespace().any(|u| u == "tls"))
}

fn options_and_records(engine: EngineKind) {
    let cfg = ZoneConfig {
        engine,
        max_conns: 16,
        recv_buffers: 8,
        recv_buffer_size: 1024,
        ..ZoneConfig::default()
    };
    let errors = Arc::new(Mutex::new(Vec::new()));
    let path = std::env::temp_dir().join(format!(
        "ringx-sockopt-{}-{engine:?}.bin",
        std::process::id()
    ));
    let body: Vec<u8> = (0..200_000u32).map(|i| (i % 253) as u8).collect();
    std::fs::write(&path, &body).unwrap();
    // Removed however the test ends (a skip, a failed assertion).
    struct Removed(std::path::PathBuf);
    impl Drop for Removed {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
    let _removed = Removed(path.clone());
    let h = Scripted {
        errors: errors.clone(),
        file: Some(path.clone()),
        closed: Arc::default(),
    };
    let Some(zone) = common::spawn_zone(cfg, h, |_| ()) else {
        return;
    };
    // SO_LINGER {1, 0} after "x": then the close is a reset.
    let mut s = client(zone.addr, b'L');
    assert_eq!(read_n(&mut s, 1), b"x");
    s.write_all(b"C").unwrap();
    let mut b = [0u8; 8];
    match s.read(&mut b) {
        Err(e) if e.kind() == ErrorKind::ConnectionReset => {}
        other => panic!("{engine:?}: a FIN, not the reset SO_LINGER 0 makes: {other:?}"),
    }
    // The tls ULP: attached where the kernel has it, else the connection closes with why.
    let ulp = kernel_has_tls_ulp();
    let mut s = client(zone.addr, b'U');
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    if ulp {
        assert_eq!(got, b"beforeafter", "{engine:?}");
    } else {
        assert_eq!(
            got, b"before",
            "{engine:?}: what was queued before the option"
        );
    }
    // A record on a plain socket: its bytes, in order.
    let mut s = client(zone.addr, b'R');
    assert_eq!(read_n(&mut s, 4), [b'a', 1, 0, b'b'], "{engine:?}");
    drop(s);
    // Behind a file (sendfile, or read behind the head): still in order.
    let mut s = client(zone.addr, b'F');
    let got = read_n(&mut s, 4 + body.len() + 2 + 4);
    assert_eq!(&got[..4], b"head");
    assert!(got[4..4 + body.len()] == body[..], "{engine:?}: the file");
    assert_eq!(
        &got[4 + body.len()..],
        [1, 0, b't', b'a', b'i', b'l'],
        "{engine:?}"
    );
    drop(s);
    std::thread::sleep(Duration::from_millis(100));
    zone.waker.wake();
    zone.thread.join().unwrap();
    let errors = errors.lock().unwrap();
    if !ulp {
        assert!(
            errors
                .iter()
                .any(|e| e.contains("setsockopt(level 6, option 31)")),
            "{engine:?}: the refusal is the close's error: {errors:?}"
        );
    }
}

/// A record that waits for room (the peer reads nothing yet): records queued meanwhile
/// arrive after it, in order; and a close while one waits ends the connection without the
/// peer reading.
fn records_waiting_for_room(engine: EngineKind) {
    let cfg = ZoneConfig {
        engine,
        max_conns: 16,
        recv_buffers: 8,
        recv_buffer_size: 1024,
        ..ZoneConfig::default()
    };
    let closed = Arc::new(AtomicUsize::new(0));
    let h = Scripted {
        closed: closed.clone(),
        ..Scripted::default()
    };
    let Some(zone) = common::spawn_zone(cfg, h, |_| ()) else {
        return;
    };
    let mut s = client(zone.addr, b'K');
    wait_stalled(&s, &zone.waker);
    s.write_all(b"M").unwrap();
    std::thread::sleep(Duration::from_millis(50)); // queued behind it
    let got = read_n(&mut s, BIG + 8 + 3);
    assert!(
        got[..BIG].iter().all(|&b| b == 7),
        "{engine:?}: the big record"
    );
    assert_eq!(&got[BIG..], b"01234567end", "{engine:?}");
    drop(s);
    let t = std::time::Instant::now();
    while closed.load(Ordering::SeqCst) < 1 {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "{engine:?}: never closed"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    // Closed while the record waits for a peer that reads nothing: closed all the same.
    let mut s = client(zone.addr, b'K');
    wait_stalled(&s, &zone.waker);
    s.write_all(b"C").unwrap();
    let t = std::time::Instant::now();
    while closed.load(Ordering::SeqCst) < 2 {
        assert!(
            t.elapsed() < Duration::from_secs(2),
            "{engine:?}: the close waits for the record"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    drop(s);
    zone.waker.wake();
    zone.thread.join().unwrap();
}

#[test]
fn epoll_records_waiting_for_room() {
    records_waiting_for_room(EngineKind::Epoll);
}

#[test]
fn uring_records_waiting_for_room() {
    records_waiting_for_room(EngineKind::Uring);
}

#[test]
fn epoll_sets_options_and_sends_records_in_order() {
    options_and_records(EngineKind::Epoll);
}

#[test]
fn uring_sets_options_and_sends_records_in_order() {
    if !ringx_engine::sys::kernel_at_least(6, 7) {
        ringx_kerneltest::skip("io_uring socket commands need Linux 6.7");
        return;
    }
    options_and_records(EngineKind::Uring);
}
