//! A shared gRPC connection against scripted server bytes: calls whose clients do not read
//! cannot spend the connection's window, and a call that ends gives back what it held.

use std::time::Instant;

use ringx_engine::ConnId;
use ringx_h2proto::frame::{kind, write_header, write_header_block};
use ringx_h2proto::hpack::Encoder;
use ringx_h2proto::Limits;

use super::mux::{CallEvent, Mux, Owner};
use super::pool::upstream_limits;

fn owner(sid: u32) -> Owner {
    Owner {
        c: ConnId(0),
        gen: 0,
        sid,
    }
}

fn open(m: &mut Mux, sid: u32) -> u32 {
    let f: [(&[u8], &[u8]); 4] = [
        (b":method", b"POST"),
        (b":scheme", b"http"),
        (b":path", b"/t.T/ServerStream"),
        (b":authority", b"up"),
    ];
    m.open(owner(sid), f, true)
}

/// The server's SETTINGS (none changed), then for each stream a 200 head and `n` bytes.
fn server_sends(enc: &mut Encoder, first: bool, streams: &[u32], n: usize) -> Vec<u8> {
    let mut out = Vec::new();
    if first {
        write_header(&mut out, 0, kind::SETTINGS, 0, 0);
    }
    for &id in streams {
        let mut block = Vec::new();
        let f: [(&[u8], &[u8]); 2] = [(b":status", b"200"), (b"content-type", b"application/grpc")];
        enc.encode(&mut block, f);
        write_header_block(&mut out, id, &block, false, 16_384);
        for chunk in vec![7u8; n].chunks(16_384) {
            write_header(&mut out, chunk.len(), kind::DATA, 0, id);
            out.extend_from_slice(chunk);
        }
    }
    out
}

/// The WINDOW_UPDATE increments the connection queued for `stream`, all added up.
fn window_updates(out: &[u8], stream: u32) -> u64 {
    let (mut at, mut sum) = (0, 0);
    while at + 9 <= out.len() {
        let len = u32::from_be_bytes([0, out[at], out[at + 1], out[at + 2]]) as usize;
        let sid =
            u32::from_be_bytes([out[at + 5], out[at + 6], out[at + 7], out[at + 8]]) & !(1 << 31);
        if out[at + 3] == kind::WINDOW_UPDATE && sid == stream {
            let p = &out[at + 9..at + 13];
            sum += u64::from(u32::from_be_bytes([p[0], p[1], p[2], p[3]]));
        }
        at += 9 + len;
    }
    sum
}

/// Two calls of 40 000-byte stream windows on a connection whose window is 80 000 (HTTP/2's
/// smallest is 65 535): each may fill its own window, and a third call must wait for a
/// connection with room.
const W: usize = 40_000;

fn small() -> Mux {
    Mux::new(Limits {
        initial_window: W as u32,
        conn_window: 2 * W as u32,
        ..Limits::default()
    })
}

#[test]
fn a_connection_carries_no_more_calls_than_its_window_covers() {
    let mut m = small();
    m.connected = true;
    m.feed(
        &server_sends(&mut Encoder::default(), true, &[], 0),
        Instant::now(),
        &mut Vec::new(),
    );
    let a = open(&mut m, 1);
    assert!(m.can_open());
    let _b = open(&mut m, 3);
    assert!(
        !m.can_open(),
        "a third call would share windows it cannot cover"
    );
    m.end(a);
    assert!(m.can_open(), "an ended call makes room");
}

#[test]
fn an_ended_call_gives_back_the_bytes_its_client_never_read() {
    let mut m = small();
    let mut enc = Encoder::default();
    let (a, b) = (open(&mut m, 1), open(&mut m, 3));
    let mut evs = Vec::new();
    // Both calls' windows fill, and with them the connection's: the server may send nothing
    // more until something is released.
    m.feed(
        &server_sends(&mut enc, true, &[a, b], W),
        Instant::now(),
        &mut evs,
    );
    let got: usize = evs
        .iter()
        .map(|(_, e)| match e {
            CallEvent::Data(d, _) => d.len(),
            _ => 0,
        })
        .sum();
    assert_eq!(got, 2 * W);
    m.conn.clear_out();
    // A's client left without reading: its bytes go back to the connection's window.
    m.end(a);
    assert_eq!(window_updates(m.conn.out(), 0), W as u64);
    assert_eq!(m.held_bytes(), W, "B still holds its own");
    // B's client read its bytes, then B ended: released once, not again at the end.
    m.conn.clear_out();
    m.release(b, W);
    m.end(b);
    m.release(b, W); // a late release of a call already ended
    assert_eq!(window_updates(m.conn.out(), 0), W as u64);
    assert_eq!(m.held_bytes(), 0);
}

#[test]
fn upstream_connections_cover_a_client_connections_streams() {
    let h2 = Limits::default();
    let up = upstream_limits(&h2);
    assert_eq!(u64::from(up.conn_window), 65_535 * 128);
    assert_eq!(up.initial_window, h2.initial_window);
    let m = Mux::new(up);
    assert!(m.can_open());
    // A window too large to cover stays within HTTP/2's largest.
    let big = upstream_limits(&Limits {
        initial_window: (1 << 31) - 1,
        conn_window: u32::MAX,
        ..Limits::default()
    });
    assert_eq!(big.conn_window, (1 << 31) - 1);
}
