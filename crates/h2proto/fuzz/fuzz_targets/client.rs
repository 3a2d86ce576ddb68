//! Fuzz the client side of HTTP/2 (the gRPC upstream connection, `client_recv.rs`): with
//! three streams open (one request complete, two still sending), after the server's
//! SETTINGS, any bytes from the server never panic, never consume past the input, and give
//! the same events and output however they are split.
#![no_main]

use std::time::Instant;

use libfuzzer_sys::fuzz_target;
use ringx_h2proto::client::{ClientConn, ClientEvent, ClientStep};
use ringx_h2proto::{frame, Limits};

fn run(input: &[u8], cuts: &[usize], now: Instant) -> (Vec<String>, Vec<u8>) {
    let limits = Limits {
        max_header_list_size: 4096,
        max_resets: 20,
        max_control_frames: 20,
        max_empty_frames: 10,
        max_continuations: 4,
        ..Limits::default()
    };
    let mut c = ClientConn::new(limits);
    let mut out = Vec::new();
    for end in [true, false, false] {
        let fields: [(&[u8], &[u8]); 5] = [
            (b":method", b"POST"),
            (b":scheme", b"http"),
            (b":path", b"/pkg.Svc/Call"),
            (b":authority", b"up"),
            (b"content-type", b"application/grpc"),
        ];
        c.open(&mut out, fields, end);
    }
    c.send_data(&mut out, 3, b"\0\0\0\0\x01x", false);
    out.extend_from_slice(c.out());
    c.clear_out();
    let mut events = Vec::new();
    let mut pending = Vec::new();
    let mut start = 0;
    'all: for &cut in cuts.iter().chain(std::iter::once(&input.len())) {
        let cut = cut.clamp(start, input.len());
        pending.extend_from_slice(&input[start..cut]);
        start = cut;
        let mut pos = 0;
        loop {
            let step = c.feed(&pending[pos..], now);
            out.extend_from_slice(c.out());
            c.clear_out();
            match step {
                ClientStep::Need => break,
                ClientStep::Skip(n) => {
                    assert!(n > 0 && pos + n <= pending.len());
                    pos += n;
                }
                ClientStep::Event(n, ev) => {
                    assert!(pos + n <= pending.len());
                    pos += n;
                    events.push(format!("{ev:?}"));
                    if let ClientEvent::Data { id, data, .. } = ev {
                        let n = data.len();
                        c.release(id, n);
                    }
                }
                ClientStep::Fatal(e) => {
                    events.push(format!("{e:?}"));
                    break 'all;
                }
            }
        }
        pending.drain(..pos);
    }
    out.extend_from_slice(c.out());
    c.clear_out();
    (events, out)
}

fuzz_target!(|data: &[u8]| {
    let mut input = Vec::new();
    frame::write_header(&mut input, 0, frame::kind::SETTINGS, 0, 0);
    input.extend_from_slice(data);
    let now = Instant::now();
    let whole = run(&input, &[], now);
    let cuts: Vec<usize> = data
        .iter()
        .scan(9usize, |acc, &b| {
            *acc += usize::from(b % 13);
            Some(*acc)
        })
        .collect();
    assert_eq!(run(&input, &cuts, now), whole);
});
