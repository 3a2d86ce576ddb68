//! The library's own share of the 1 MB download (bench/h3.py's `1m`): what sending 1 MB over
//! one QUIC stream costs a server in quinn-proto, in memory, with no I/O, no HTTP and no
//! zone, beside what sealing the same bytes alone costs.
//!
//! - `quic`: quinn-proto's endpoint and connection made with this crate's configuration (a
//!   zone's: its connection IDs, keys, limits, packet keys), its datagrams at 1,452 bytes (a
//!   known path, as ringx's downloads run once a client's path size is known), sent in
//!   batches of up to 44 (`poll_transmit` as the zone calls it for a GSO send). The body
//!   goes in as the zone hands it over: 64 KiB pieces of shared bytes, no copy. The client,
//!   quinn-proto's, takes each batch whole and acknowledges it once, as quic-go does with
//!   GRO (bench/h3.py's runs: one acknowledgement for 25 datagrams). Each download is a new
//!   stream on one connection; only the server's calls are timed.
//! - `seal-packet`: AES-128-GCM alone on the same bytes, one seal per 1,452-byte packet
//!   (the packet's 1,409 bytes of payload under its 26-byte header), with the provider
//!   ringx runs on.
//! - `seal-record`: the same, one seal per 16 KiB TLS record: the sealing HTTP/2 over TLS
//!   pays for the same download.
//!
//! What `quic` costs beyond `seal-packet` is quinn-proto's work per packet: building,
//! tracking and acknowledging packets, its congestion control and timers, and copying the
//! body into them. Prints ns per KB for each, and the ratios, medians over the rounds.
//!
//! `cargo bench -p ringx-quic --bench transfer [-- ROUNDS]`

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_lc_rs::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_128_GCM};
use bytes::{Bytes, BytesMut};
use quinn_proto::crypto::rustls::QuicClientConfig;
use quinn_proto::{
    ClientConfig, Connection, ConnectionHandle, DatagramEvent, Dir, Endpoint, EndpointConfig,
    StreamId, TransportConfig,
};
use ringx_quic::{
    endpoint_config, for_quic, known_path_config, server_config, Keys, Limits, Owner,
};

#[path = "../tests/common/mod.rs"]
mod common;
#[path = "support/yardstick.rs"]
mod yardstick;

use yardstick::{median, rounds, Clock};

const SERVER: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 4433);
const CLIENT: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 50000);
/// The download's size, and downloads per round.
const BODY: usize = 1 << 20;
const EACH: usize = 64;
/// The datagram size of a known path (`ringx_quic::known_paths::FULL`), and the most
/// datagrams one `poll_transmit` may batch at that size (the zone's `MAX_GSO_BYTES`).
const MTU: u16 = 1452;
const SEGMENTS: usize = 44;
/// The pieces the zone hands a response's body over in.
const PIECE: usize = 64 << 10;

/// A client and a server connection over one in-memory path.
struct Pair {
    server: Endpoint,
    client: Endpoint,
    sh: ConnectionHandle,
    s: Connection,
    ch: ConnectionHandle,
    c: Connection,
    buf: Vec<u8>,
    /// Buffers for the server's batches, kept from one to the next.
    spares: Vec<Vec<u8>>,
}

impl Pair {
    /// Connected, the handshake done (untimed).
    fn new() -> Pair {
        let keys = Keys::generate().unwrap();
        let (mut s, c) = common::tls();
        s.ignore_client_order = true;
        s.alpn_protocols = vec![ringx_quic::ALPN_H3.to_vec()];
        let owner = Owner {
            host: 0,
            zone: 0,
            epoch: 0,
        };
        let limits = Limits::default();
        let base = server_config(Arc::new(for_quic(s, &keys, false)), &limits, &keys).unwrap();
        let sc = known_path_config(&base, &limits, MTU);
        let mut server = Endpoint::new(
            Arc::new(endpoint_config(owner, &keys)),
            Some(Arc::new(sc)),
            true,
            None,
        );
        let mut cc = ClientConfig::new(Arc::new(QuicClientConfig::try_from(c).unwrap()));
        let mut t = TransportConfig::default();
        t.initial_mtu(MTU);
        cc.transport_config(Arc::new(t));
        let mut client = Endpoint::new(Arc::new(EndpointConfig::default()), None, true, None);
        let now = Instant::now();
        let (ch, mut c) = client.connect(now, cc, SERVER, "localhost").unwrap();
        let mut buf = Vec::new();
        let t = c.poll_transmit(now, 1, &mut buf).unwrap();
        let d = BytesMut::from(&buf[..t.size]);
        let mut out = Vec::new();
        let Some(DatagramEvent::NewConnection(incoming)) =
            server.handle(now, CLIENT, None, None, d, &mut out)
        else {
            panic!("the server took no connection");
        };
        let (sh, s) = server
            .accept(incoming, now, &mut out, None)
            .map_err(|e| e.cause)
            .unwrap();
        let mut p = Pair {
            server,
            client,
            sh,
            s,
            ch,
            c,
            buf,
            spares: (0..64).map(|_| Vec::with_capacity(64 << 10)).collect(),
        };
        let mut clock = Clock::default();
        while p.c.is_handshaking() || p.s.is_handshaking() {
            if !p.step(&mut clock) {
                p.timeouts(&mut clock);
            }
        }
        // The handshake's tail (HANDSHAKE_DONE, tickets, connection IDs) acknowledged.
        for _ in 0..8 {
            p.step(&mut clock);
        }
        p
    }

    /// One round trip: what the client has to send reaches the server, then what the server
    /// has to send (up to `SEGMENTS` datagrams a batch) reaches the client, each batch
    /// taken in whole before the client answers. False: nothing moved.
    fn step(&mut self, clock: &mut Clock) -> bool {
        let now = Instant::now();
        let mut moved = self.client_to_server(now, clock);
        let mut batches: Vec<(Vec<u8>, usize)> = Vec::new();
        let (server, s, sh, spares) = (&mut self.server, &mut self.s, self.sh, &mut self.spares);
        clock.time(|| {
            while let Some(ev) = s.poll_endpoint_events() {
                if let Some(back) = server.handle_event(sh, ev) {
                    s.handle_event(back);
                }
            }
            loop {
                // The zone sends from buffers it keeps: none is allocated here.
                let mut out = spares.pop().unwrap_or_default();
                let Some(t) = s.poll_transmit(now, SEGMENTS, &mut out) else {
                    spares.push(out);
                    break;
                };
                out.truncate(t.size);
                batches.push((out, t.segment_size.unwrap_or(t.size)));
            }
        });
        moved |= !batches.is_empty();
        for (mut batch, seg) in batches {
            for d in batch.chunks(seg.max(1)) {
                if let Some(DatagramEvent::ConnectionEvent(_, ev)) =
                    self.client
                        .handle(now, SERVER, None, None, BytesMut::from(d), &mut self.buf)
                {
                    self.c.handle_event(ev);
                }
                self.buf.clear();
            }
            batch.clear();
            self.spares.push(batch);
            while let Some(ev) = self.c.poll_endpoint_events() {
                if let Some(back) = self.client.handle_event(self.ch, ev) {
                    self.c.handle_event(back);
                }
            }
            // The client's acknowledgement of the batch goes out before the next one comes.
            self.client_to_server(now, clock);
        }
        while self.c.poll().is_some() {}
        moved
    }

    /// The client's datagrams, each handed to the server at once. False: there were none.
    fn client_to_server(&mut self, now: Instant, clock: &mut Clock) -> bool {
        let mut moved = false;
        while let Some(t) = self.c.poll_transmit(now, 1, &mut self.buf) {
            moved = true;
            let d = BytesMut::from(&self.buf[..t.size]);
            self.buf.clear();
            let (server, s, buf) = (&mut self.server, &mut self.s, &mut self.buf);
            clock.time(|| {
                if let Some(DatagramEvent::ConnectionEvent(_, ev)) =
                    server.handle(now, CLIENT, None, None, d, buf)
                {
                    s.handle_event(ev);
                }
                buf.clear();
            });
        }
        moved
    }

    /// Nothing moves: both sides' timers up to the earliest one due (pacing, delayed
    /// acknowledgements).
    fn timeouts(&mut self, clock: &mut Clock) {
        let Some(at) = [self.c.poll_timeout(), self.s.poll_timeout()]
            .into_iter()
            .flatten()
            .min()
        else {
            return;
        };
        while Instant::now() < at {
            std::hint::spin_loop();
        }
        let now = Instant::now();
        self.c.handle_timeout(now);
        clock.time(|| self.s.handle_timeout(now));
    }
}

/// `n` downloads of `BODY` bytes, each a new stream on `p`'s connection: the server's time.
fn quic(p: &mut Pair, body: &Bytes, n: usize) -> Duration {
    let mut clock = Clock::default();
    for _ in 0..n {
        let id =
            p.c.streams()
                .open(Dir::Bi)
                .expect("a stream the server allows");
        p.c.send_stream(id).write(b"GET").unwrap();
        p.c.send_stream(id).finish().unwrap();
        let mut sid: Option<StreamId> = None;
        let mut pieces = (0..BODY).step_by(PIECE).map(|o| body.slice(o..o + PIECE));
        let mut unsent: Option<Bytes> = None;
        let mut got = 0usize;
        let mut fin = false;
        while !fin {
            let moved = p.step(&mut clock);
            // The server: the request read, the body written until the stream takes no more.
            let s = &mut p.s;
            clock.time(|| {
                if sid.is_none() {
                    sid = s.streams().accept(Dir::Bi);
                    if let Some(id) = sid {
                        if let Ok(mut chunks) = s.recv_stream(id).read(true) {
                            while let Ok(Some(_)) = chunks.next(usize::MAX) {}
                            let _ = chunks.finalize();
                        }
                    }
                }
                let Some(id) = sid else {
                    return;
                };
                loop {
                    let Some(mut piece) = unsent.take().or_else(|| pieces.next()) else {
                        let _ = s.send_stream(id).finish();
                        break;
                    };
                    match s
                        .send_stream(id)
                        .write_chunks(std::slice::from_mut(&mut piece))
                    {
                        Ok(_) if piece.is_empty() => {}
                        Ok(_) | Err(quinn_proto::WriteError::Blocked) => {
                            unsent = Some(piece);
                            break;
                        }
                        Err(e) => panic!("the server's stream failed: {e:?}"),
                    }
                }
                while s.poll().is_some() {}
            });
            // The client reads what came.
            if let Ok(mut chunks) = p.c.recv_stream(id).read(true) {
                loop {
                    match chunks.next(usize::MAX) {
                        Ok(Some(c)) => got += black_box(c.bytes).len(),
                        Ok(None) => {
                            fin = true;
                            break;
                        }
                        Err(_) => break,
                    }
                }
                let _ = chunks.finalize();
            }
            if !moved && !fin {
                p.timeouts(&mut clock);
            }
        }
        assert_eq!(got, BODY, "the client got the whole body");
        // The last acknowledgements, so the next download starts with nothing in flight.
        for _ in 0..4 {
            p.step(&mut clock);
        }
    }
    clock.0
}

/// AES-128-GCM over `n` downloads' bytes, sealed `payload` bytes at a time under a
/// `header`-byte associated header: the time.
fn seal(n: usize, payload: usize, header: usize) -> Duration {
    let key = LessSafeKey::new(UnboundKey::new(&AES_128_GCM, &[7u8; 16]).unwrap());
    let aad = vec![0x40u8; header];
    let mut data = vec![0x5au8; payload];
    let t0 = Instant::now();
    let mut pn = 0u64;
    for _ in 0..n {
        for _ in 0..BODY.div_ceil(payload) {
            pn += 1;
            let mut iv = [0u8; 12];
            iv[4..].copy_from_slice(&pn.to_be_bytes());
            let tag = key.seal_in_place_separate_tag(
                Nonce::assume_unique_for_key(iv),
                Aad::from(&aad[..]),
                &mut data,
            );
            black_box(tag.unwrap().as_ref()[0]);
        }
    }
    t0.elapsed()
}

fn main() {
    let rounds = rounds();
    let body = Bytes::from((0..BODY).map(|i| (i * 7) as u8).collect::<Vec<u8>>());
    let mut p = Pair::new();
    quic(&mut p, &body, EACH / 4);
    let per_kb = |d: Duration| d.as_secs_f64() * 1e9 / (EACH * BODY / 1024) as f64;
    let (mut q, mut sp, mut sr) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        // Alternated, so that a change in the machine's speed falls on all three.
        q.push(per_kb(quic(&mut p, &body, EACH)));
        // A 1,452-byte packet: a 1-byte type, an 8-byte ID and a 4-byte number, a STREAM
        // frame's header (type, stream ID, offset, length: 1 + 1 + 4 + 2), the tag; payload
        // 1,452 - 21 - 16 - 6 = 1,409 bytes, under a 13-byte header.
        sp.push(per_kb(seal(EACH, 1409, 13)));
        sr.push(per_kb(seal(EACH, 16384, 5)));
    }
    let mut over: Vec<f64> = q.iter().zip(&sr).map(|(q, r)| q / r).collect();
    let (qm, pm, rm, om) = (
        median(&mut q),
        median(&mut sp),
        median(&mut sr),
        median(&mut over),
    );
    println!(
        "1 MB download, server side, in memory, ns per KB: quic {qm:.0}, seal-packet {pm:.0}, \
         seal-record {rm:.0}; quic beyond seal-packet {:.0}; quic/seal-record {om:.2}x \
         (medians of {rounds} rounds of {EACH} downloads)",
        qm - pm
    );
    let s = p.s.stats();
    println!(
        "quinn-proto: {} packets sent, {} lost, {} datagrams received, cwnd {} bytes",
        s.path.sent_packets, s.path.lost_packets, s.udp_rx.datagrams, s.path.cwnd
    );
}
