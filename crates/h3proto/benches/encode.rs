//! What answering costs in this crate: a response's HEADERS frame (QPACK, the static table and
//! Huffman literals) and a 64-byte DATA frame, into a fresh buffer as a stream's first bytes
//! (`cargo bench -p ringx-h3proto`). The fields are the ones ringx sends with a `return`.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};

const FIELDS: [(&[u8], &[u8]); 4] = [
    (b"server", b"ringx"),
    (b"date", b"Thu, 03 Dec 2026 13:44:17 GMT"),
    (b"content-type", b"text/plain"),
    (b"content-length", b"64"),
];

fn encode(c: &mut Criterion) {
    let body = [b'x'; 64];
    c.bench_function("response/head+64B", |b| {
        b.iter(|| {
            let mut out = Vec::new();
            ringx_h3proto::send_headers(&mut out, 200, black_box(FIELDS));
            ringx_h3proto::send_data(&mut out, black_box(&body));
            out
        })
    });
    c.bench_function("response/head+64B, buffer sized", |b| {
        b.iter(|| {
            let mut out = Vec::with_capacity(256);
            ringx_h3proto::send_headers(&mut out, 200, black_box(FIELDS));
            ringx_h3proto::send_data(&mut out, black_box(&body));
            out
        })
    });
}

criterion_group!(benches, encode);
criterion_main!(benches);
