//! Fuzz the chunked decoder: never panics, consumes at most its input,
//! returns data inside the input, and gives the same result however the
//! input is split.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ringx_http::{BodyDecoder, BodyKind, BodyLimits};

#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    body: Vec<u8>,
    leftover: Vec<u8>,
    done: bool,
    error: Option<&'static str>,
}

/// Feeds `input` in pieces ending at `cuts`, like the server does.
fn feed(kind: BodyKind, limits: BodyLimits, input: &[u8], cuts: &[usize]) -> Outcome {
    let mut decoder = BodyDecoder::new(kind, limits);
    let mut pending = Vec::new();
    let mut body = Vec::new();
    let mut start = 0;
    for &cut in cuts.iter().chain(std::iter::once(&input.len())) {
        let cut = cut.clamp(start, input.len());
        pending.extend_from_slice(&input[start..cut]);
        start = cut;
        while !decoder.is_done() {
            let d = match decoder.decode(&pending) {
                Ok(d) => d,
                Err(e) => {
                    assert!(decoder.decode(&pending).is_err(), "errors must be sticky");
                    // An error does not report how much framing it read, and
                    // the connection is closed anyway: leftover is moot.
                    return Outcome {
                        body,
                        leftover: Vec::new(),
                        done: false,
                        error: Some(e.reason),
                    };
                }
            };
            assert!(d.consumed <= pending.len());
            let (base, at) = (pending.as_ptr() as usize, d.data.as_ptr() as usize);
            assert!(d.data.is_empty() || (at >= base && at + d.data.len() <= base + d.consumed));
            assert_eq!(d.done, decoder.is_done());
            body.extend_from_slice(d.data);
            let (consumed, done) = (d.consumed, d.done);
            pending.drain(..consumed);
            if consumed == 0 || done {
                break;
            }
        }
    }
    assert_eq!(decoder.received(), body.len() as u64);
    assert!(body.len() <= input.len());
    Outcome {
        body,
        leftover: pending,
        done: decoder.is_done(),
        error: None,
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&config, input)) = data.split_first() else {
        return;
    };
    let kind = match config & 3 {
        0 => BodyKind::Length(u64::from(config >> 2)),
        _ => BodyKind::Chunked,
    };
    let limits = if config & 4 == 0 {
        BodyLimits::default()
    } else {
        BodyLimits {
            max_chunk_ext: usize::from(config >> 4),
            max_trailers: usize::from(config >> 3),
        }
    };
    let whole = feed(kind, limits, input, &[]);
    // Cut points derived from the input itself, plus byte-by-byte.
    let cuts: Vec<usize> = input
        .iter()
        .scan(0usize, |acc, &b| {
            *acc += usize::from(b % 7);
            Some(*acc)
        })
        .collect();
    assert_eq!(feed(kind, limits, input, &cuts), whole);
    let every: Vec<usize> = (0..input.len()).collect();
    assert_eq!(feed(kind, limits, input, &every), whole);
});
