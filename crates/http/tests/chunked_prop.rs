//! Property tests: decoding is independent of how the input is split, and
//! never consumes the pipelined request that follows the body.

mod common;

use common::feed;
use proptest::prelude::*;
use ringx_http::{BodyKind, BodyLimits};

const NEXT: &[u8] = b"POST /next HTTP/1.1\r\nHost: h\r\n\r\n";

#[derive(Debug, Clone)]
struct Chunk {
    data: Vec<u8>,
    zeros: usize,
    upper: bool,
    ext: String,
}

fn ext() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        "[a-z]{1,5}".prop_map(|n| format!(";{n}")),
        ("[a-z]{1,5}", "[a-z0-9]{1,5}").prop_map(|(n, v)| format!(";{n}={v}")),
        ("[a-z]{1,5}", "[ -!#-\\[\\]-~]{0,8}").prop_map(|(n, v)| format!(" ;\t{n} = \"{v}\\\"\"")),
    ]
}

fn chunk() -> impl Strategy<Value = Chunk> {
    (
        proptest::collection::vec(any::<u8>(), 1..40),
        0usize..3,
        any::<bool>(),
        ext(),
    )
        .prop_map(|(data, zeros, upper, ext)| Chunk {
            data,
            zeros,
            upper,
            ext,
        })
}

fn trailer() -> impl Strategy<Value = String> {
    ("[A-Za-z-]{1,10}", "[ -~]{0,10}").prop_map(|(n, v)| format!("{n}:{v}\r\n"))
}

fn encode(chunks: &[Chunk], last_ext: &str, trailers: &[String]) -> (Vec<u8>, Vec<u8>) {
    let mut out = Vec::new();
    let mut body = Vec::new();
    for c in chunks {
        let size = if c.upper {
            format!("{:X}", c.data.len())
        } else {
            format!("{:x}", c.data.len())
        };
        out.extend_from_slice(format!("{}{size}{}\r\n", "0".repeat(c.zeros), c.ext).as_bytes());
        out.extend_from_slice(&c.data);
        out.extend_from_slice(b"\r\n");
        body.extend_from_slice(&c.data);
    }
    out.extend_from_slice(format!("0{last_ext}\r\n").as_bytes());
    for t in trailers {
        out.extend_from_slice(t.as_bytes());
    }
    out.extend_from_slice(b"\r\n");
    (out, body)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn split_invariance_of_valid_bodies(
        chunks in proptest::collection::vec(chunk(), 0..8),
        last_ext in ext(),
        trailers in proptest::collection::vec(trailer(), 0..4),
        cuts in proptest::collection::vec(any::<proptest::sample::Index>(), 0..12),
    ) {
        let (encoded, body) = encode(&chunks, &last_ext, &trailers);
        let input = [&encoded[..], NEXT].concat();
        let cuts: Vec<usize> = cuts.iter().map(|i| i.index(input.len() + 1)).collect();
        let got = feed(BodyKind::Chunked, BodyLimits::default(), &input, &cuts).unwrap();
        prop_assert_eq!(&got.body, &body);
        prop_assert_eq!(&got.leftover[..], NEXT);
        prop_assert!(got.done);
        prop_assert_eq!(got.received, body.len() as u64);
    }

    #[test]
    fn every_split_of_a_valid_body(
        chunks in proptest::collection::vec(chunk(), 0..4),
        trailers in proptest::collection::vec(trailer(), 0..2),
    ) {
        let (encoded, body) = encode(&chunks, "", &trailers);
        let input = [&encoded[..], NEXT].concat();
        for k in 0..=input.len() {
            let got = feed(BodyKind::Chunked, BodyLimits::default(), &input, &[k]).unwrap();
            prop_assert_eq!(&got.body, &body);
            prop_assert_eq!(&got.leftover[..], NEXT);
        }
    }

    /// Arbitrary (mostly invalid) input: same outcome however it is split.
    #[test]
    fn split_invariance_of_arbitrary_input(
        input in proptest::collection::vec(
            prop_oneof![Just(b'\r'), Just(b'\n'), Just(b'0'), Just(b'1'), Just(b';'), Just(b' '), Just(b'a'), Just(b':'), any::<u8>()],
            0..64,
        ),
        cuts in proptest::collection::vec(any::<proptest::sample::Index>(), 0..8),
    ) {
        let cuts: Vec<usize> = cuts.iter().map(|i| i.index(input.len() + 1)).collect();
        let whole = feed(BodyKind::Chunked, BodyLimits::default(), &input, &[]);
        let split = feed(BodyKind::Chunked, BodyLimits::default(), &input, &cuts);
        prop_assert_eq!(whole, split);
    }
}
