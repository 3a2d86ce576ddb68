//! Request-head parsing cost, without the cache misses of a loaded server: what the parser
//! itself adds per request (`cargo bench -p ringx-http`). The heads are the one `wrk` sends
//! (the benchmark's request) and a browser's.

use std::hint::black_box;
use std::mem::MaybeUninit;

use criterion::{criterion_group, criterion_main, Criterion};
use ringx_http::{parse_request_uninit, Limits, Parsed};

const WRK: &[u8] = b"GET /r64 HTTP/1.1\r\nHost: 127.0.0.1:40123\r\n\r\n";
const BROWSER: &[u8] = b"GET /static/app.js?v=3 HTTP/1.1\r\nHost: www.example.com\r\n\
User-Agent: Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0\r\n\
Accept: */*\r\nAccept-Language: en-US,en;q=0.5\r\nAccept-Encoding: gzip, deflate, br\r\n\
Referer: https://www.example.com/\r\nConnection: keep-alive\r\n\
Cookie: session=0123456789abcdef; theme=dark\r\nSec-Fetch-Dest: script\r\n\r\n";

fn parse(c: &mut Criterion) {
    let limits = Limits::default();
    for (name, head) in [("wrk", WRK), ("browser", BROWSER)] {
        c.bench_function(&format!("parse_request/{name}"), |b| {
            b.iter(|| {
                let mut storage =
                    [const { MaybeUninit::<ringx_http::httparse::Header>::uninit() }; 64];
                match parse_request_uninit(black_box(head), &mut storage, &limits) {
                    Ok(Parsed::Complete(r)) => black_box(r.head_len),
                    _ => unreachable!("the benchmark heads are complete and valid"),
                }
            })
        });
    }
}

criterion_group!(benches, parse);
criterion_main!(benches);
