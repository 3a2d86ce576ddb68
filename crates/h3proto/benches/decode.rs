//! What a request costs in this crate: a GET's HEADERS frame, as quic-go's client sends one
//! (QPACK literals with static names, Huffman-coded, no dynamic table), read from its stream
//! and decoded into a request head (`cargo bench -p ringx-h3proto`).

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use ringx_h3proto::frame::{self, kind};
use ringx_h3proto::qpack::encode::encode_section;
use ringx_h3proto::settings::Settings;
use ringx_h3proto::{Conn, Limits};

const FIELDS: [(&[u8], &[u8]); 6] = [
    (b":authority", b"127.0.0.1:40123"),
    (b":method", b"GET"),
    (b":path", b"/r64"),
    (b":scheme", b"https"),
    (b"accept-encoding", b"gzip"),
    (b"user-agent", b"quic-go HTTP/3"),
];

fn decode(c: &mut Criterion) {
    let mut block = Vec::new();
    encode_section(&mut block, FIELDS);
    let mut request = Vec::new();
    frame::write_header(&mut request, kind::HEADERS, block.len() as u64);
    request.extend_from_slice(&block);
    let mut conn = Conn::new(Limits::default());
    let mut control = vec![0x00];
    Settings::default().write(&mut control);
    conn.feed(2, &control, false)
        .expect("the control stream opens");
    let mut id = 0u64;
    c.bench_function("request/GET, quic-go's fields", |b| {
        b.iter(|| {
            conn.feed(id, black_box(&request), true)
                .expect("a valid request");
            id += 4;
            while let Some(e) = conn.poll_event() {
                black_box(e);
            }
        })
    });
}

criterion_group!(benches, decode);
criterion_main!(benches);
