//! bench/h3.py's 1 MB download in memory on cloudflare's quiche, in the shape of
//! `crates/quic/benches/transfer.rs` on quinn-proto, so that the two QUIC libraries' own cost
//! per KB to a server can be set side by side (issue 38 allows quiche "if measured better").
//!
//! One connection, its handshake untimed; then downloads of 1 MB, each on a new stream the
//! client opens with a 3-byte request. The server writes the body in 64 KiB pieces of shared
//! bytes without a copy (`stream_send_zc` with a `bytes::Bytes` buffer factory, as ringx hands
//! quinn-proto its pieces), and sends up to 44 datagrams of at most 1,452 bytes a batch (a GSO
//! send's worth). The client takes each batch whole and acknowledges it once. Only the
//! server's calls are timed: `recv` of the client's packets, `send`, `stream_send_zc`,
//! `stream_recv`, `on_timeout`. quiche's pacing hint (`SendInfo::at`) is not waited for: in
//! memory the path has no rate to pace to, and quinn-proto's pacer lets bursts of this size
//! through at this round trip time.
//!
//! Prints ns per KB (median over the rounds) in the form transfer.rs does:
//! `cargo run --release -- [ROUNDS]` (bench/h3.py builds and runs it for `lib-quiche`).

use std::hint::black_box;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use bytes::Bytes;

// The timing of crates/quic/benches/transfer.rs, so the two libraries are timed alike.
#[path = "../../../crates/quic/benches/support/yardstick.rs"]
mod yardstick;
use yardstick::{median, rounds, Clock};

const SERVER: &str = "127.0.0.1:4433";
const CLIENT: &str = "127.0.0.1:50000";
const BODY: usize = 1 << 20;
const EACH: usize = 64;
const MTU: usize = 1452;
const SEGMENTS: usize = 44;
const PIECE: usize = 64 << 10;

/// Stream data as shared bytes, handed to quiche without a copy.
#[derive(Clone, Debug, Default)]
struct Shared;

#[derive(Clone, Debug, Default)]
struct Piece(Bytes);

impl AsRef<[u8]> for Piece {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl quiche::BufSplit for Piece {
    fn split_at(&mut self, at: usize) -> Piece {
        Piece(self.0.split_off(at))
    }
}

impl quiche::BufFactory for Shared {
    type Buf = Piece;
    type DgramBuf = Vec<u8>;

    fn buf_from_slice(buf: &[u8]) -> Piece {
        Piece(Bytes::copy_from_slice(buf))
    }

    fn dgram_buf_from_slice(buf: &[u8]) -> Vec<u8> {
        buf.to_vec()
    }
}

type Conn = quiche::Connection<Shared>;

/// A self-signed certificate for `localhost` in a directory of its own: (cert, key) paths.
fn certificate() -> (PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("quiche-transfer-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["localhost".into()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let (c, k) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&c, cert.pem()).unwrap();
    std::fs::write(&k, key.serialize_pem()).unwrap();
    (c, k)
}

/// Both sides' configurations: the server's limits as ringx-quic's defaults (128 streams,
/// 1 MiB per stream, 8 MiB per connection, 60 s idle), Cubic; the client's windows large
/// enough never to hold the download back.
fn config(server: Option<(&PathBuf, &PathBuf)>) -> quiche::Config {
    let mut c = quiche::Config::new(quiche::PROTOCOL_VERSION).unwrap();
    match server {
        Some((cert, key)) => {
            c.load_cert_chain_from_pem_file(cert.to_str().unwrap())
                .unwrap();
            c.load_priv_key_from_pem_file(key.to_str().unwrap())
                .unwrap();
            c.set_initial_max_stream_data_bidi_remote(1 << 20);
            c.set_initial_max_data(8 << 20);
        }
        None => {
            c.verify_peer(false);
            c.set_initial_max_stream_data_bidi_local(16 << 20);
            c.set_initial_max_data(64 << 20);
        }
    }
    c.set_application_protos(&[b"h3"]).unwrap();
    c.set_max_idle_timeout(60_000);
    c.set_max_recv_udp_payload_size(MTU);
    c.set_max_send_udp_payload_size(MTU);
    c.set_initial_max_streams_bidi(128);
    c.set_initial_max_streams_uni(16);
    c.set_cc_algorithm(quiche::CongestionControlAlgorithm::CUBIC);
    c
}

struct Pair {
    s: Conn,
    c: Conn,
    server: SocketAddr,
    client: SocketAddr,
    buf: Vec<u8>,
    out: Vec<u8>,
}

impl Pair {
    fn new() -> Pair {
        let (cert, key) = certificate();
        let (server, client): (SocketAddr, SocketAddr) =
            (SERVER.parse().unwrap(), CLIENT.parse().unwrap());
        let (mut sc, mut cc) = (config(Some((&cert, &key))), config(None));
        let _ = std::fs::remove_dir_all(cert.parent().unwrap());
        let scid = quiche::ConnectionId::from_ref(&[0xc1; 16]);
        let c =
            quiche::connect_with_buffer_factory(Some("localhost"), &scid, client, server, &mut cc)
                .unwrap();
        let sid = quiche::ConnectionId::from_ref(&[0x5e; 16]);
        let s = quiche::accept_with_buf_factory(&sid, None, server, client, &mut sc).unwrap();
        let mut p = Pair {
            s,
            c,
            server,
            client,
            buf: vec![0; 65536],
            out: vec![0; SEGMENTS * MTU],
        };
        let mut clock = Clock::default();
        while !(p.c.is_established() && p.s.is_established()) {
            if !p.step(&mut clock) {
                p.timeouts(&mut clock);
            }
        }
        for _ in 0..8 {
            p.step(&mut clock);
        }
        p
    }

    /// What the client has to send reaches the server; then what the server has to send, in
    /// batches of up to `SEGMENTS` datagrams, each taken whole by the client, which answers
    /// it. False: nothing moved.
    fn step(&mut self, clock: &mut Clock) -> bool {
        let mut moved = self.client_to_server(clock);
        loop {
            let (s, out) = (&mut self.s, &mut self.out);
            let sizes = clock.time(|| {
                let mut sizes = [0usize; SEGMENTS];
                let mut k = 0;
                while k < SEGMENTS {
                    let at = k * MTU;
                    match s.send(&mut out[at..at + MTU]) {
                        Ok((n, _)) => {
                            sizes[k] = n;
                            k += 1;
                        }
                        Err(quiche::Error::Done) => break,
                        Err(e) => panic!("the server's send failed: {e:?}"),
                    }
                }
                (sizes, k)
            });
            let (sizes, k) = sizes;
            if k == 0 {
                break;
            }
            moved = true;
            let info = quiche::RecvInfo {
                from: self.server,
                to: self.client,
            };
            for (i, &n) in sizes[..k].iter().enumerate() {
                let d = &mut self.out[i * MTU..i * MTU + n];
                let _ = self.c.recv(d, info);
            }
            self.client_to_server(clock);
        }
        moved
    }

    /// The client's packets, each handed to the server at once.
    fn client_to_server(&mut self, clock: &mut Clock) -> bool {
        let mut moved = false;
        let info = quiche::RecvInfo {
            from: self.client,
            to: self.server,
        };
        loop {
            match self.c.send(&mut self.buf) {
                Ok((n, _)) => {
                    moved = true;
                    let (s, d) = (&mut self.s, &mut self.buf[..n]);
                    clock.time(|| {
                        let _ = s.recv(d, info);
                    });
                }
                Err(quiche::Error::Done) => return moved,
                Err(e) => panic!("the client's send failed: {e:?}"),
            }
        }
    }

    /// Nothing moves: both sides' timers up to the earliest one due.
    fn timeouts(&mut self, clock: &mut Clock) {
        let Some(wait) = [self.c.timeout(), self.s.timeout()]
            .into_iter()
            .flatten()
            .min()
        else {
            return;
        };
        let at = Instant::now() + wait;
        while Instant::now() < at {
            std::hint::spin_loop();
        }
        self.c.on_timeout();
        clock.time(|| self.s.on_timeout());
    }
}

/// `n` downloads of `BODY` bytes, each a new stream on `p`'s connection: the server's time.
fn download(p: &mut Pair, body: &Bytes, n: usize, first: &mut u64) -> Duration {
    let mut clock = Clock::default();
    let mut rbuf = vec![0u8; 65536];
    for _ in 0..n {
        let id = *first;
        *first += 4;
        p.c.stream_send(id, b"GET", true).unwrap();
        let mut asked = false;
        let mut pieces = (0..BODY).step_by(PIECE).map(|o| body.slice(o..o + PIECE));
        let mut unsent: Option<Bytes> = None;
        let (mut got, mut fin) = (0usize, false);
        while !fin {
            let moved = p.step(&mut clock);
            let s = &mut p.s;
            clock.time(|| {
                if !asked {
                    while let Some(r) = s.stream_readable_next() {
                        while let Ok((_, done)) = s.stream_recv(r, &mut rbuf) {
                            asked |= done && r == id;
                        }
                    }
                }
                if !asked {
                    return;
                }
                loop {
                    let Some(piece) = unsent.take().or_else(|| pieces.next()) else {
                        break;
                    };
                    let last = pieces.len() == 0;
                    match s.stream_send_zc(id, Piece(piece.clone()), last) {
                        Ok((sent, _)) if sent == piece.len() => {}
                        Ok((sent, _)) => {
                            unsent = Some(piece.slice(sent..));
                            break;
                        }
                        Err(quiche::Error::Done) => {
                            unsent = Some(piece);
                            break;
                        }
                        Err(e) => panic!("the server's stream failed: {e:?}"),
                    }
                }
            });
            while let Some(r) = p.c.stream_readable_next() {
                while let Ok((k, done)) = p.c.stream_recv(r, &mut rbuf) {
                    got += black_box(k);
                    fin |= done && r == id;
                }
            }
            if !moved && !fin {
                p.timeouts(&mut clock);
            }
        }
        assert_eq!(got, BODY, "the client got the whole body");
        for _ in 0..4 {
            p.step(&mut clock);
        }
    }
    clock.0
}

fn main() {
    let rounds = rounds();
    let body = Bytes::from((0..BODY).map(|i| (i * 7) as u8).collect::<Vec<u8>>());
    let mut p = Pair::new();
    let mut next = 0u64;
    download(&mut p, &body, EACH / 4, &mut next);
    let per_kb = |d: Duration| d.as_secs_f64() * 1e9 / (EACH * BODY / 1024) as f64;
    let mut q: Vec<f64> = (0..rounds)
        .map(|_| per_kb(download(&mut p, &body, EACH, &mut next)))
        .collect();
    println!(
        "1 MB download, server side, in memory, ns per KB: quiche {:.0} (median of {rounds} \
         rounds of {EACH} downloads)",
        median(&mut q)
    );
    let st = p.s.stats();
    println!(
        "quiche: {} packets sent, {} lost, {} received",
        st.sent, st.lost, st.recv
    );
}
