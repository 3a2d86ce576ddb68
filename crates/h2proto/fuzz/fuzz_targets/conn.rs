//! Fuzz the HTTP/2 connection: after a valid preface and SETTINGS, any bytes never panic,
//! never consume past the input, and give the same events and output however they are
//! split; every request that comes out is one the HTTP/1.1 head builder can write.
#![no_main]

use std::time::Instant;

use libfuzzer_sys::fuzz_target;
use ringx_h2proto::{frame, Conn, Event, Framing, Limits, Step};

fn run(input: &[u8], cuts: &[usize], now: Instant) -> (Vec<String>, Vec<u8>) {
    let limits = Limits {
        max_header_list_size: 4096,
        max_resets: 20,
        max_control_frames: 20,
        max_empty_frames: 10,
        max_continuations: 4,
        ..Limits::default()
    };
    let mut c = Conn::new(limits);
    let mut events = Vec::new();
    let mut out = Vec::new();
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
                Step::Need => break,
                Step::Skip(n) => {
                    assert!(n > 0 && pos + n <= pending.len());
                    pos += n;
                }
                Step::Event(n, ev) => {
                    assert!(pos + n <= pending.len());
                    pos += n;
                    if let Event::Request { head, .. } = &ev {
                        let mut h = Vec::new();
                        head.write_http1(&mut h, Framing::Chunked);
                        assert!(!h[..h.len() - 2].windows(4).any(|w| w == b"\r\n\r\n"));
                    }
                    if let Event::Data { id, data, .. } = &ev {
                        let (id, n) = (*id, data.len());
                        events.push(format!("{ev:?}"));
                        c.release(id, n);
                        continue;
                    }
                    events.push(format!("{ev:?}"));
                }
                Step::Fatal(e) => {
                    events.push(format!("{e:?}"));
                    break 'all;
                }
            }
        }
        pending.drain(..pos);
        assert!(pending.len() <= c.max_buffered());
    }
    (events, out)
}

fuzz_target!(|data: &[u8]| {
    let mut input = frame::PREFACE.to_vec();
    frame::write_header(&mut input, 0, frame::kind::SETTINGS, 0, 0);
    input.extend_from_slice(data);
    let now = Instant::now();
    let whole = run(&input, &[], now);
    let cuts: Vec<usize> = data
        .iter()
        .scan(24usize, |acc, &b| {
            *acc += usize::from(b % 13);
            Some(*acc)
        })
        .collect();
    assert_eq!(run(&input, &cuts, now), whole);
});
