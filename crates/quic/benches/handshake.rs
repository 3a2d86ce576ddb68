//! The libraries' own share of a new connection per request (bench/h3.py's `64_new`): what
//! one full handshake costs a server in memory, with no I/O, no HTTP and no zone, QUIC
//! against TLS over TCP on the same certificate (ECDSA P-256), provider (aws-lc-rs), suite
//! order (the server's, as ringx-tls sets it) and key exchange (rustls's default,
//! X25519MLKEM768, which Go's clients also send):
//! - QUIC: quinn-proto's endpoint and connection made with this crate's configuration (a
//!   zone's: its connection IDs, keys, limits and packet keys), against quinn-proto's client;
//! - TCP: a rustls server connection against rustls's client.
//!
//! Each handshake runs to both ends established, the server's tickets (and for QUIC its
//! HANDSHAKE_DONE and connection IDs) taken in and acknowledged, then the client closes and
//! the server lets the connection go (QUIC: after its draining period). Only the server's
//! calls are timed. Prints µs per handshake for each, and their ratio.
//!
//! `cargo bench -p ringx-quic --bench handshake [-- ROUNDS]`

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use quinn_proto::crypto::rustls::QuicClientConfig;
use quinn_proto::{
    ClientConfig, Connection, ConnectionHandle, DatagramEvent, Endpoint, EndpointConfig, VarInt,
};
use ringx_quic::{endpoint_config, for_quic, server_config, Keys, Limits, Owner};

#[path = "../tests/common/mod.rs"]
mod common;
#[path = "support/yardstick.rs"]
mod yardstick;

use yardstick::{median, rounds, Clock};

const SERVER: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 4433);
const CLIENT: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 50000);
/// Handshakes per round, and rounds (the median is printed).
const EACH: u32 = 400;

/// The TLS configurations of both sides with `alpn`, the server choosing the suite as
/// ringx-tls's does.
fn tls(alpn: &[u8]) -> (rustls::ServerConfig, Arc<rustls::ClientConfig>) {
    let (mut s, mut c) = common::tls();
    s.ignore_client_order = true;
    s.alpn_protocols = vec![alpn.to_vec()];
    c.alpn_protocols = vec![alpn.to_vec()];
    (s, Arc::new(c))
}

/// `n` handshakes of TLS 1.3 over TCP: the server's time.
fn tcp(n: u32) -> Duration {
    let (s, c) = tls(b"h2");
    let s = Arc::new(s);
    let mut clock = Clock::default();
    let mut wire = Vec::new();
    for _ in 0..n {
        let mut client =
            rustls::ClientConnection::new(c.clone(), "localhost".try_into().unwrap()).unwrap();
        let mut server = clock.time(|| rustls::ServerConnection::new(s.clone()).unwrap());
        let mut closed = false;
        loop {
            wire.clear();
            while client.wants_write() {
                client.write_tls(&mut wire).unwrap();
            }
            let to_server = !wire.is_empty();
            if to_server {
                clock.time(|| {
                    let mut r = &wire[..];
                    while !r.is_empty() {
                        server.read_tls(&mut r).unwrap();
                    }
                    server.process_new_packets().unwrap();
                });
            }
            wire.clear();
            clock.time(|| {
                while server.wants_write() {
                    server.write_tls(&mut wire).unwrap();
                }
            });
            let to_client = !wire.is_empty();
            if to_client {
                let mut r = &wire[..];
                while !r.is_empty() {
                    client.read_tls(&mut r).unwrap();
                }
                client.process_new_packets().unwrap();
            }
            if !to_server && !to_client {
                if closed || client.is_handshaking() {
                    break;
                }
                client.send_close_notify();
                closed = true;
            }
        }
        assert!(!server.is_handshaking());
        clock.time(|| drop(black_box(server)));
    }
    clock.0
}

/// `n` handshakes of QUIC through one server endpoint: the server's time.
fn quic(n: u32) -> Duration {
    let keys = Keys::generate().unwrap();
    let (s, c) = tls(ringx_quic::ALPN_H3);
    let owner = Owner {
        host: 0,
        zone: 0,
        epoch: 0,
    };
    let sc = server_config(
        Arc::new(for_quic(s, &keys, false)),
        &Limits::default(),
        &keys,
    )
    .unwrap();
    let mut server = Endpoint::new(
        Arc::new(endpoint_config(owner, &keys)),
        Some(Arc::new(sc)),
        true,
        None,
    );
    let cc = ClientConfig::new(Arc::new(QuicClientConfig::try_from((*c).clone()).unwrap()));
    let mut clock = Clock::default();
    let mut now = Instant::now();
    let mut buf = Vec::new();
    for _ in 0..n {
        let mut client = Endpoint::new(Arc::new(EndpointConfig::default()), None, true, None);
        let (ch, mut cconn) = client
            .connect(now, cc.clone(), SERVER, "localhost")
            .unwrap();
        let mut sconn: Option<(ConnectionHandle, Connection)> = None;
        let mut closed = false;
        loop {
            let mut moved = false;
            while let Some(t) = cconn.poll_transmit(now, 1, &mut buf) {
                moved = true;
                let d = BytesMut::from(&buf[..t.size]);
                buf.clear();
                clock.time(|| {
                    let mut out = Vec::new();
                    match server.handle(now, CLIENT, None, None, d, &mut out) {
                        Some(DatagramEvent::NewConnection(incoming)) => {
                            let c = server.accept(incoming, now, &mut out, None);
                            sconn = Some(c.map_err(|e| e.cause).unwrap());
                        }
                        Some(DatagramEvent::ConnectionEvent(_, ev)) => {
                            if let Some((_, s)) = sconn.as_mut() {
                                s.handle_event(ev);
                            }
                        }
                        _ => {}
                    }
                });
            }
            let mut out = Vec::new();
            if let Some((h, s)) = sconn.as_mut() {
                clock.time(|| {
                    while let Some(ev) = s.poll_endpoint_events() {
                        if let Some(back) = server.handle_event(*h, ev) {
                            s.handle_event(back);
                        }
                    }
                    while let Some(t) = s.poll_transmit(now, 1, &mut buf) {
                        out.push(BytesMut::from(&buf[..t.size]));
                        buf.clear();
                    }
                    while s.poll().is_some() {}
                });
            }
            moved |= !out.is_empty();
            for d in out {
                if let Some(DatagramEvent::ConnectionEvent(_, ev)) =
                    client.handle(now, SERVER, None, None, d, &mut buf)
                {
                    cconn.handle_event(ev);
                }
                buf.clear();
            }
            while let Some(ev) = cconn.poll_endpoint_events() {
                if let Some(back) = client.handle_event(ch, ev) {
                    cconn.handle_event(back);
                }
            }
            while cconn.poll().is_some() {}
            if moved {
                continue;
            }
            if !closed && !cconn.is_handshaking() {
                cconn.close(now, VarInt::from_u32(0), bytes::Bytes::new());
                closed = true;
                continue;
            }
            // Nothing moves: the timers (delayed acknowledgements; after the close, the
            // server's draining period, whose end lets the connection go).
            let (h, s) = sconn.as_mut().expect("the server accepted");
            let Some(t) = [cconn.poll_timeout(), s.poll_timeout()]
                .into_iter()
                .flatten()
                .min()
            else {
                break;
            };
            now = now.max(t);
            cconn.handle_timeout(now);
            clock.time(|| {
                s.handle_timeout(now);
                while let Some(ev) = s.poll_endpoint_events() {
                    if let Some(back) = server.handle_event(*h, ev) {
                        s.handle_event(back);
                    }
                }
            });
            if s.is_drained() {
                break;
            }
        }
        let (_, s) = sconn.expect("the server accepted");
        assert!(s.is_drained(), "the server let the connection go");
        clock.time(|| drop(black_box(s)));
        now += Duration::from_millis(1);
    }
    assert_eq!(server.open_connections(), 0);
    clock.0
}

fn main() {
    let rounds = rounds();
    let (mut t, mut q) = (Vec::new(), Vec::new());
    tcp(EACH / 4);
    quic(EACH / 4);
    for _ in 0..rounds {
        // Alternated, so that a change in the machine's speed falls on both.
        t.push(tcp(EACH).as_secs_f64() * 1e6 / f64::from(EACH));
        q.push(quic(EACH).as_secs_f64() * 1e6 / f64::from(EACH));
    }
    let mut ratios: Vec<f64> = q.iter().zip(&t).map(|(q, t)| q / t).collect();
    let (tm, qm, rm) = (median(&mut t), median(&mut q), median(&mut ratios));
    println!(
        "handshake, server side, in memory: tls-tcp {tm:.1} us, quic {qm:.1} us, quic/tcp {rm:.2}x \
         (min-max {:.2}-{:.2}x over {rounds} rounds of {EACH})",
        ratios[0],
        ratios[ratios.len() - 1]
    );
}
