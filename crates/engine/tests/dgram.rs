//! Datagrams end to end on both drivers: a UDP listener relays each client datagram over a
//! connected datagram socket to an echo server and sends the answer back from the listener;
//! a datagram larger than the zone's buffers arrives marked truncated; a wildcard listener
//! answers from the address the client wrote to (IP_PKTINFO); a datagram socket whose peer
//! port is closed is closed with ECONNREFUSED; a segmented send (UDP GSO) reaches the
//! client as the datagrams it was cut into, with the ECN bits asked for; on a listener with
//! GRO and ECN reporting, a client's segmented send arrives whole with its segment size and
//! its ECN bits.

use std::collections::HashMap;
use std::net::{SocketAddr, UdpSocket};
use std::sync::mpsc;
use std::time::Duration;

use ringx_engine::{
    bind_udp_reuseport, run_zone, ConnId, ConnectTo, Datagram, EngineKind, Handler, Io,
    ListenOptions, ListenerId, SendTo, Waker, ZoneConfig,
};

/// What the relay reports to the test.
#[derive(Debug, PartialEq)]
enum Seen {
    Truncated(usize),
    Closed(Option<i32>),
    /// A datagram's length, GRO segment size and ECN bits.
    Got(usize, u16, u8),
}

/// Relays datagrams from its UDP listener to `upstream` over one connected datagram socket per
/// client, and answers from the listener.
struct Relay {
    upstream: SocketAddr,
    by_client: HashMap<SocketAddr, ConnId>,
    by_conn: HashMap<ConnId, (ListenerId, SocketAddr, Option<std::net::IpAddr>)>,
    held: HashMap<ConnId, Vec<Vec<u8>>>,
    tx: mpsc::Sender<Seen>,
}

impl Handler for Relay {
    fn on_accept(&mut self, io: &mut Io, c: ConnId, _: ListenerId) {
        io.close(c)
    }

    fn on_datagram(&mut self, io: &mut Io, l: ListenerId, dg: Datagram<'_>) {
        if dg.truncated {
            let _ = self.tx.send(Seen::Truncated(dg.data.len()));
            return;
        }
        if dg.data == b"gso?" || dg.data == b"gso-owned?" {
            // Three datagrams of 100 bytes and one of 50 (their index in each byte), in one
            // send the kernel cuts up, marked ECT(0): copied, or handed over (`send_buf`).
            let mut data: Vec<u8> = (0..350).map(|i| (i / 100) as u8).collect();
            let s = SendTo {
                segment: 100,
                ecn: 0b10,
                ..SendTo::one(dg.peer, dg.local)
            };
            if dg.data == b"gso?" {
                assert!(io.send_with(l, s, &data));
            } else {
                assert!(io.send_buf(l, s, &mut data));
                assert!(data.is_empty(), "the bytes went with the send");
            }
            return;
        }
        if dg.data.starts_with(b"gro") {
            let _ = self.tx.send(Seen::Got(dg.data.len(), dg.segment, dg.ecn));
            return;
        }
        let c = match self.by_client.get(&dg.peer) {
            Some(&c) => c,
            None => {
                let c = io.connect(&ConnectTo::datagram(self.upstream)).unwrap();
                self.by_client.insert(dg.peer, c);
                self.by_conn.insert(c, (l, dg.peer, dg.local));
                self.held.insert(c, Vec::new());
                c
            }
        };
        match self.held.get_mut(&c) {
            Some(h) => h.push(dg.data.to_vec()),
            None => assert!(io.send_datagram(c, dg.data)),
        }
    }

    fn on_connected(&mut self, io: &mut Io, c: ConnId) {
        for d in self.held.remove(&c).unwrap_or_default() {
            assert!(io.send_datagram(c, &d));
        }
    }

    fn on_data(&mut self, io: &mut Io, c: ConnId, data: &[u8]) {
        let (l, peer, from) = self.by_conn[&c];
        assert!(io.send_to(l, peer, from, data));
    }

    fn on_eof(&mut self, _: &mut Io, _: ConnId) {
        panic!("a datagram socket has no end of stream")
    }

    fn on_closed(&mut self, _: &mut Io, c: ConnId, err: Option<std::io::Error>) {
        if let Some((_, peer, _)) = self.by_conn.remove(&c) {
            self.by_client.remove(&peer);
        }
        let _ = self
            .tx
            .send(Seen::Closed(err.and_then(|e| e.raw_os_error())));
    }

    fn on_timer(&mut self, _: &mut Io) -> Option<Duration> {
        None
    }

    fn on_wake(&mut self, io: &mut Io) {
        io.exit()
    }
}

fn cfg(engine: EngineKind) -> ZoneConfig {
    ZoneConfig {
        engine,
        max_conns: 64,
        max_outbound: 64,
        recv_buffers: 64,
        dgram_buffers: 16,
        dgram_buffer_size: 2048 + ringx_engine::uring::DGRAM_OVERHEAD,
        ..ZoneConfig::default()
    }
}

/// A UDP echo server on its own thread.
fn echo_server() -> SocketAddr {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = s.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut buf = [0u8; 65536];
        while let Ok((n, from)) = s.recv_from(&mut buf) {
            let _ = s.send_to(&buf[..n], from);
        }
    });
    addr
}

fn run(
    engine: EngineKind,
    listen: &str,
    upstream: SocketAddr,
) -> Option<(
    SocketAddr,
    Waker,
    mpsc::Receiver<Seen>,
    std::thread::JoinHandle<()>,
)> {
    run_with(
        engine,
        listen,
        upstream,
        &ListenOptions::default(),
        cfg(engine),
    )
}

fn run_with(
    engine: EngineKind,
    listen: &str,
    upstream: SocketAddr,
    opts: &ListenOptions,
    cfg: ZoneConfig,
) -> Option<(
    SocketAddr,
    Waker,
    mpsc::Receiver<Seen>,
    std::thread::JoinHandle<()>,
)> {
    if engine == EngineKind::Uring {
        if let Err(why) = ringx_engine::uring::probe::check() {
            ringx_kerneltest::skip(format!("io_uring is unavailable here: {why}"));
            return None;
        }
    }
    let sock = bind_udp_reuseport(listen.parse().unwrap(), opts).unwrap();
    let addr = sock.local_addr().unwrap();
    let waker = Waker::new().unwrap();
    let w2 = waker.clone();
    let (tx, rx) = mpsc::channel();
    let t = std::thread::spawn(move || {
        let mut h = Relay {
            upstream,
            by_client: HashMap::new(),
            by_conn: HashMap::new(),
            held: HashMap::new(),
            tx,
        };
        run_zone(&cfg, vec![sock], w2, &mut h).unwrap();
    });
    Some((addr, waker, rx, t))
}

fn client() -> UdpSocket {
    let c = UdpSocket::bind("127.0.0.1:0").unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    c
}

/// `c.recv_from`, made again when a signal interrupted it: std does not retry it, and a
/// signal to the test process (another test's) may land on this thread while it blocks.
fn recv_answer(c: &UdpSocket, buf: &mut [u8]) -> (usize, SocketAddr) {
    loop {
        match c.recv_from(buf) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            r => return r.unwrap(),
        }
    }
}

fn relays_and_truncates(engine: EngineKind) {
    let up = echo_server();
    let Some((addr, waker, rx, t)) = run(engine, "127.0.0.1:0", up) else {
        return;
    };
    let clients: Vec<UdpSocket> = (0..3).map(|_| client()).collect();
    for round in 0..3 {
        for (i, c) in clients.iter().enumerate() {
            let msg = format!("client {i} round {round}");
            c.send_to(msg.as_bytes(), addr).unwrap();
            let mut buf = [0u8; 4096];
            let (n, from) = recv_answer(c, &mut buf);
            assert_eq!(&buf[..n], msg.as_bytes());
            assert_eq!(from, addr, "the answer comes from the listener's address");
        }
    }
    // Larger than the zone's 2048-byte datagram buffers: handed over marked truncated.
    clients[0].send_to(&[7u8; 3000], addr).unwrap();
    assert!(matches!(
        rx.recv_timeout(Duration::from_secs(5)).unwrap(),
        Seen::Truncated(n) if n < 3000
    ));
    // 2048 bytes of payload fit whole.
    clients[1].send_to(&[9u8; 2048], addr).unwrap();
    let mut buf = [0u8; 4096];
    let (n, _) = recv_answer(&clients[1], &mut buf);
    assert_eq!(n, 2048);
    waker.wake();
    t.join().unwrap();
}

#[test]
fn relays_and_truncates_uring() {
    relays_and_truncates(EngineKind::Uring);
}

#[test]
fn relays_and_truncates_epoll() {
    relays_and_truncates(EngineKind::Epoll);
}

/// A wildcard listener answers from the address the datagram was sent to: a client connected
/// to 127.0.0.2 accepts only answers from 127.0.0.2, which without IP_PKTINFO would leave from
/// 127.0.0.1.
fn wildcard_answers_from_destination(engine: EngineKind) {
    let up = echo_server();
    let Some((addr, waker, _rx, t)) = run(engine, "0.0.0.0:0", up) else {
        return;
    };
    let c = UdpSocket::bind("127.0.0.1:0").unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let to = SocketAddr::from(([127, 0, 0, 2], addr.port()));
    c.connect(to).unwrap();
    c.send(b"where from").unwrap();
    let mut buf = [0u8; 64];
    let n = c.recv(&mut buf).expect("an answer from 127.0.0.2");
    assert_eq!(&buf[..n], b"where from");
    waker.wake();
    t.join().unwrap();
}

#[test]
fn wildcard_answers_from_destination_uring() {
    wildcard_answers_from_destination(EngineKind::Uring);
}

#[test]
fn wildcard_answers_from_destination_epoll() {
    wildcard_answers_from_destination(EngineKind::Epoll);
}

/// The upstream's port is closed: the ICMP port unreachable closes the datagram socket with
/// ECONNREFUSED.
fn refused_upstream_closes(engine: EngineKind) {
    let closed = UdpSocket::bind("127.0.0.1:0").unwrap();
    let up = closed.local_addr().unwrap();
    drop(closed);
    let Some((addr, waker, rx, t)) = run(engine, "127.0.0.1:0", up) else {
        return;
    };
    let c = client();
    // The first send draws the ICMP error; the next one (or the pending receive) reports it.
    for _ in 0..3 {
        c.send_to(b"anyone?", addr).unwrap();
        std::thread::sleep(Duration::from_millis(50));
    }
    let seen = rx.recv_timeout(Duration::from_secs(5)).unwrap();
    assert_eq!(seen, Seen::Closed(Some(libc::ECONNREFUSED)));
    waker.wake();
    t.join().unwrap();
}

#[test]
fn refused_upstream_closes_uring() {
    refused_upstream_closes(EngineKind::Uring);
}

#[test]
fn refused_upstream_closes_epoll() {
    refused_upstream_closes(EngineKind::Epoll);
}

fn segmented_send_arrives_as_datagrams(engine: EngineKind, probe: &[u8]) {
    let Some((addr, waker, _rx, t)) = run(engine, "127.0.0.1:0", echo_server()) else {
        return;
    };
    let c = client();
    setsockopt(&c, libc::IPPROTO_IP, libc::IP_RECVTOS, 1);
    c.send_to(probe, addr).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 2048];
    for _ in 0..4 {
        let (n, tos) = recv_tos(&c, &mut buf);
        assert_eq!(tos & 0b11, 0b10, "the datagrams are marked ECT(0) as sent");
        got.push(buf[..n].to_vec());
    }
    got.sort_by_key(|d| d[0]);
    let want: Vec<Vec<u8>> = (0..4)
        .map(|i| vec![i as u8; if i < 3 { 100 } else { 50 }])
        .collect();
    assert_eq!(got, want);
    waker.wake();
    t.join().unwrap();
}

#[test]
fn segmented_send_arrives_as_datagrams_uring() {
    segmented_send_arrives_as_datagrams(EngineKind::Uring, b"gso?")
}

#[test]
fn segmented_send_arrives_as_datagrams_epoll() {
    segmented_send_arrives_as_datagrams(EngineKind::Epoll, b"gso?")
}

#[test]
fn handed_over_send_arrives_as_datagrams_uring() {
    segmented_send_arrives_as_datagrams(EngineKind::Uring, b"gso-owned?")
}

#[test]
fn handed_over_send_arrives_as_datagrams_epoll() {
    segmented_send_arrives_as_datagrams(EngineKind::Epoll, b"gso-owned?")
}

fn setsockopt(s: &UdpSocket, level: i32, name: i32, v: i32) {
    use std::os::fd::AsRawFd;
    // SAFETY: the option value is a live int of the size given.
    let r = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            level,
            name,
            (&v as *const i32).cast(),
            std::mem::size_of::<i32>() as libc::socklen_t,
        )
    };
    assert_eq!(
        r,
        0,
        "setsockopt {level}/{name}: {}",
        std::io::Error::last_os_error()
    );
}

/// One datagram into `buf` and the TOS byte it came with (`IP_RECVTOS` must be on).
fn recv_tos(s: &UdpSocket, buf: &mut [u8]) -> (usize, u8) {
    use std::os::fd::AsRawFd;
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let mut control = [0u64; 8];
    // SAFETY: msghdr is plain data; all-zero is valid.
    let mut hdr: libc::msghdr = unsafe { std::mem::zeroed() };
    hdr.msg_iov = &mut iov;
    hdr.msg_iovlen = 1;
    hdr.msg_control = control.as_mut_ptr().cast();
    hdr.msg_controllen = std::mem::size_of_val(&control) as _;
    // SAFETY: recvmsg writes at most the lengths given into the live buffers above (the
    // socket has a read timeout, so this returns).
    let n = unsafe { libc::recvmsg(s.as_raw_fd(), &mut hdr, 0) };
    assert!(n >= 0, "recvmsg: {}", std::io::Error::last_os_error());
    let mut tos = None;
    // SAFETY: the CMSG_* walk stays within msg_control/msg_controllen, which the kernel set.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&hdr);
        while !c.is_null() {
            if (*c).cmsg_level == libc::IPPROTO_IP && (*c).cmsg_type == libc::IP_TOS {
                tos = Some(*libc::CMSG_DATA(c));
            }
            c = libc::CMSG_NXTHDR(&hdr, c);
        }
    }
    (n as usize, tos.expect("an IP_TOS control message"))
}

/// A client sends 350 bytes as one segmented send (UDP GSO, 100-byte datagrams) marked
/// ECT(1): the listener with GRO takes them as one receive of 350 bytes with segment 100,
/// and reports the ECN bits. (Loopback keeps a GSO send whole up to a GRO socket.)
fn coalesced_receive_with_ecn(engine: EngineKind) {
    let opts = ListenOptions {
        gro: true,
        ecn: true,
        ..ListenOptions::default()
    };
    let cfg = ZoneConfig {
        dgram_buffer_size: 65536 + ringx_engine::uring::DGRAM_OVERHEAD,
        ..cfg(engine)
    };
    let Some((addr, waker, rx, t)) = run_with(engine, "127.0.0.1:0", echo_server(), &opts, cfg)
    else {
        return;
    };
    let c = client();
    setsockopt(&c, libc::IPPROTO_IP, libc::IP_TOS, 0b01);
    setsockopt(&c, libc::SOL_UDP, 103, 100); // UDP_SEGMENT: every send is cut at 100 bytes
    let mut data = b"gro".to_vec();
    data.resize(350, 7);
    c.send_to(&data, addr).unwrap();
    let got = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(got, Seen::Got(350, 100, 0b01));
    // One datagram alone is one, not a segment of one.
    setsockopt(&c, libc::SOL_UDP, 103, 0);
    c.send_to(b"gro alone", addr).unwrap();
    let got = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(got, Seen::Got(9, 0, 0b01));
    waker.wake();
    t.join().unwrap();
}

#[test]
fn coalesced_receive_with_ecn_uring() {
    coalesced_receive_with_ecn(EngineKind::Uring)
}

#[test]
fn coalesced_receive_with_ecn_epoll() {
    coalesced_receive_with_ecn(EngineKind::Epoll)
}
