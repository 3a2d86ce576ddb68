//! Chunked and Content-Length body decoding tables.

mod common;

use common::{feed, Fed};
use ringx_http::{BodyDecoder, BodyKind, BodyLimits};

const NEXT: &[u8] = b"GET /next HTTP/1.1\r\nHost: h\r\n\r\n";

fn with_next(body: &[u8]) -> Vec<u8> {
    [body, NEXT].concat()
}

fn valid_cases() -> Vec<(&'static str, Vec<u8>, Vec<u8>)> {
    let long_ext = format!("1;{}\r\nx\r\n0\r\n\r\n", "e".repeat(4095));
    vec![
        (
            "one chunk",
            b"5\r\nhello\r\n0\r\n\r\n".to_vec(),
            b"hello".to_vec(),
        ),
        ("empty body", b"0\r\n\r\n".to_vec(), b"".to_vec()),
        (
            "several chunks",
            b"3\r\nabc\r\na\r\n0123456789\r\n1\r\n!\r\n0\r\n\r\n".to_vec(),
            b"abc0123456789!".to_vec(),
        ),
        (
            "uppercase hex",
            b"A\r\n0123456789\r\n0\r\n\r\n".to_vec(),
            b"0123456789".to_vec(),
        ),
        (
            "leading zeros",
            b"0005\r\nhello\r\n000\r\n\r\n".to_vec(),
            b"hello".to_vec(),
        ),
        (
            "16 significant digits after zeros",
            b"00000000000000000000000000000001\r\nx\r\n0\r\n\r\n".to_vec(),
            b"x".to_vec(),
        ),
        (
            "data containing CRLF",
            b"4\r\n\r\n\r\n\r\n0\r\n\r\n".to_vec(),
            b"\r\n\r\n".to_vec(),
        ),
        (
            "extension name only",
            b"5;a\r\nhello\r\n0;last\r\n\r\n".to_vec(),
            b"hello".to_vec(),
        ),
        (
            "extension token value",
            b"5;a=b;c=d\r\nhello\r\n0\r\n\r\n".to_vec(),
            b"hello".to_vec(),
        ),
        (
            "extensions with BWS and quoted-string",
            b"5 ; a = b ;c\t;\td=\"q \\\" s;\xff\"\r\nhello\r\n0 ;z=\"\"\r\n\r\n".to_vec(),
            b"hello".to_vec(),
        ),
        (
            "extension at max length",
            long_ext.into_bytes(),
            b"x".to_vec(),
        ),
        (
            "trailers",
            b"5\r\nhello\r\n0\r\nX-Sum: abc\r\nEmpty:\r\nY:\t v \xff\r\n\r\n".to_vec(),
            b"hello".to_vec(),
        ),
    ]
}

#[test]
fn valid_chunked_bodies() {
    for (name, raw, want) in valid_cases() {
        let input = with_next(&raw);
        let got = feed(BodyKind::Chunked, BodyLimits::default(), &input, &[])
            .unwrap_or_else(|e| panic!("{name}: {e:?}"));
        let expected = Fed {
            received: want.len() as u64,
            body: want,
            leftover: NEXT.to_vec(),
            done: true,
        };
        assert_eq!(got, expected, "{name}");
    }
}

#[test]
fn valid_chunked_bodies_split_everywhere() {
    for (name, raw, want) in valid_cases() {
        let input = with_next(&raw);
        for k in 0..=input.len() {
            let got = feed(BodyKind::Chunked, BodyLimits::default(), &input, &[k]).unwrap();
            assert_eq!(
                (&got.body, &got.leftover[..], got.done),
                (&want, NEXT, true),
                "{name} split at {k}"
            );
        }
        // And one byte at a time.
        let cuts: Vec<usize> = (0..input.len()).collect();
        let got = feed(BodyKind::Chunked, BodyLimits::default(), &input, &cuts).unwrap();
        assert_eq!(
            (&got.body, &got.leftover[..], got.done),
            (&want, NEXT, true),
            "{name} byte by byte"
        );
    }
}

fn invalid_cases() -> Vec<(&'static str, Vec<u8>)> {
    let s = |name, raw: &[u8]| (name, raw.to_vec());
    vec![
        s("bare LF after size", b"5\nhello\r\n0\r\n\r\n"),
        s("bare CR after size", b"5\rhello\r\n0\r\n\r\n"),
        s("bare LF after data", b"5\r\nhello\n0\r\n\r\n"),
        s("bare CR after data", b"5\r\nhello\r0\r\n\r\n"),
        s("missing CRLF after data", b"5\r\nhello0\r\n\r\n"),
        s("data longer than size", b"5\r\nhello world\r\n0\r\n\r\n"),
        s("bare LF after last chunk", b"0\n\r\n"),
        s("bare LF ending body", b"0\r\n\n"),
        s("bare CR ending body", b"0\r\n\rX"),
        s("size overflow", b"10000000000000000\r\nx\r\n0\r\n\r\n"),
        s("size overflow after zeros", b"0010000000000000000\r\n"),
        s(
            "too many leading zeros",
            &[vec![b'0'; 65], b"1\r\nx\r\n0\r\n\r\n".to_vec()].concat(),
        ),
        s("0x prefix", b"0x10\r\n0123456789abcdef\r\n0\r\n\r\n"),
        s("leading space", b" 5\r\nhello\r\n0\r\n\r\n"),
        s("leading tab", b"\t5\r\nhello\r\n0\r\n\r\n"),
        s("negative", b"-5\r\nhello\r\n0\r\n\r\n"),
        s("plus sign", b"+5\r\nhello\r\n0\r\n\r\n"),
        s("empty size", b"\r\nhello\r\n0\r\n\r\n"),
        s("extension without size", b";a\r\nhello\r\n0\r\n\r\n"),
        s("non-hex size", b"g\r\n"),
        s(
            "trailing whitespace after size",
            b"5 \r\nhello\r\n0\r\n\r\n",
        ),
        s(
            "trailing whitespace after extension",
            b"5;a=b \r\nhello\r\n0\r\n\r\n",
        ),
        s(
            "whitespace after extension name",
            b"5;a \r\nhello\r\n0\r\n\r\n",
        ),
        s("empty extension name", b"5;\r\nhello\r\n0\r\n\r\n"),
        s("empty extension value", b"5;a=\r\nhello\r\n0\r\n\r\n"),
        s("space inside extension", b"5;a b\r\nhello\r\n0\r\n\r\n"),
        s(
            "unterminated quoted extension",
            b"5;a=\"x\r\nhello\r\n0\r\n\r\n",
        ),
        s(
            "junk after quoted extension",
            b"5;a=\"x\"y\r\nhello\r\n0\r\n\r\n",
        ),
        s(
            "control byte in quoted extension",
            b"5;a=\"\x01\"\r\nhello\r\n0\r\n\r\n",
        ),
        s("bare LF in extension", b"5;a\nhello\r\n0\r\n\r\n"),
        s(
            "too-long extension",
            format!("1;{}\r\nx\r\n0\r\n\r\n", "e".repeat(4096)).as_bytes(),
        ),
        s("trailer obs-fold", b"0\r\nX: a\r\n b\r\n\r\n"),
        s("trailer leading whitespace", b"0\r\n X: a\r\n\r\n"),
        s("trailer space before colon", b"0\r\nX : a\r\n\r\n"),
        s("trailer without colon", b"0\r\nX\r\n\r\n"),
        s("trailer bare LF", b"0\r\nX: a\n\r\n"),
        s("trailer bare CR", b"0\r\nX: a\rb\r\n\r\n"),
        s("trailer NUL", b"0\r\nX: \0\r\n\r\n"),
        s("trailer DEL", b"0\r\nX: \x7f\r\n\r\n"),
        s(
            "too-large trailers",
            format!("0\r\nX: {}\r\n\r\n", "v".repeat(16384)).as_bytes(),
        ),
    ]
}

#[test]
fn invalid_chunked_bodies() {
    for (name, raw) in invalid_cases() {
        let input = with_next(&raw);
        let whole = feed(BodyKind::Chunked, BodyLimits::default(), &input, &[]);
        let (err, body_before) = whole.expect_err(name);
        assert!(!err.reason.is_empty());
        // Long inputs are sampled to keep debug-build test time down.
        let splits =
            (0..=input.len()).filter(|k| input.len() < 1024 || k % 5 == 0 || k + 64 >= input.len());
        for k in splits {
            let split = feed(BodyKind::Chunked, BodyLimits::default(), &input, &[k]);
            let (split_err, split_body) = split.expect_err(name);
            assert_eq!(
                (split_err, &split_body),
                (err, &body_before),
                "{name} split at {k}"
            );
        }
    }
}

#[test]
fn data_before_an_error_is_still_delivered() {
    let mut d = BodyDecoder::new(BodyKind::Chunked, BodyLimits::default());
    let out = d.decode(b"5\r\nhelloX").unwrap();
    assert_eq!(
        (out.consumed, out.data, out.done),
        (8, &b"hello"[..], false)
    );
    assert!(d.decode(b"X").is_err());
    assert_eq!(d.received(), 5);
}

#[test]
fn largest_chunk_size_is_accepted() {
    let mut d = BodyDecoder::new(BodyKind::Chunked, BodyLimits::default());
    let out = d.decode(b"ffffffffffffffff\r\nab").unwrap();
    assert_eq!((out.consumed, out.data, out.done), (20, &b"ab"[..], false));
}

#[test]
fn custom_limits() {
    let limits = BodyLimits {
        max_chunk_ext: 3,
        max_trailers: 8,
    };
    assert!(feed(BodyKind::Chunked, limits, b"1;ab\r\nx\r\n0\r\n\r\n", &[]).is_ok());
    assert!(feed(BodyKind::Chunked, limits, b"1;abc\r\nx\r\n0\r\n\r\n", &[]).is_err());
    // Trailer section "X: 1\r\n" + final "\r\n" = 8 bytes.
    assert!(feed(BodyKind::Chunked, limits, b"0\r\nX: 1\r\n\r\n", &[]).is_ok());
    assert!(feed(BodyKind::Chunked, limits, b"0\r\nX: 12\r\n\r\n", &[]).is_err());
}

#[test]
fn one_run_of_data_per_call() {
    let mut d = BodyDecoder::new(BodyKind::Chunked, BodyLimits::default());
    let input = b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\nNEXT";
    let a = d.decode(input).unwrap();
    // Framing around the data is consumed eagerly, up to the next data.
    assert_eq!((a.consumed, a.data, a.done), (11, &b"abc"[..], false));
    let b = d.decode(&input[11..]).unwrap();
    assert_eq!((b.consumed, b.data, b.done), (9, &b"de"[..], true));
    assert_eq!(&input[20..], b"NEXT");
    let c = d.decode(&input[20..]).unwrap();
    assert_eq!((c.consumed, c.data, c.done), (0, &b""[..], true));
}

#[test]
fn content_length_bodies() {
    /// (framing, input, expected body, expected leftover)
    type Row = (BodyKind, &'static [u8], &'static [u8], &'static [u8]);
    let table: &[Row] = &[
        (BodyKind::Length(5), b"hello world", b"hello", b" world"),
        (BodyKind::Length(0), b"GET", b"", b"GET"),
        (BodyKind::None, b"GET", b"", b"GET"),
        (BodyKind::Length(3), b"abc", b"abc", b""),
        (
            BodyKind::Length(11),
            b"0\r\n\r\nhello\n",
            b"0\r\n\r\nhello\n",
            b"",
        ),
    ];
    for &(kind, input, body, leftover) in table {
        for k in 0..=input.len() {
            let got = feed(kind, BodyLimits::default(), input, &[k]).unwrap();
            let want = Fed {
                body: body.to_vec(),
                leftover: leftover.to_vec(),
                done: true,
                received: body.len() as u64,
            };
            assert_eq!(got, want, "{kind:?} split at {k}");
        }
    }
    let mut d = BodyDecoder::new(BodyKind::Length(10), BodyLimits::default());
    let out = d.decode(b"abcd").unwrap();
    assert_eq!(
        (out.consumed, out.data, out.done, d.received()),
        (4, &b"abcd"[..], false, 4)
    );
    assert!(!d.is_done());
}

/// Decodes `input` fed in two pieces split at `k`, keeping trailers; the trailer lines.
fn trailers_split_at(input: &[u8], k: usize, keep: bool) -> Option<Vec<u8>> {
    let mut d = BodyDecoder::new(BodyKind::Chunked, BodyLimits::default());
    if keep {
        d.keep_trailers();
    }
    let mut pending = Vec::new();
    for piece in [&input[..k], &input[k..]] {
        pending.extend_from_slice(piece);
        while !d.is_done() {
            let n = d.decode(&pending).expect("a valid body").consumed;
            pending.drain(..n);
            if n == 0 {
                break;
            }
        }
    }
    assert!(d.is_done());
    assert_eq!(pending, NEXT, "the next message is untouched");
    d.take_trailers()
}

#[test]
fn trailers_are_kept_when_asked_however_the_input_is_split() {
    let input = with_next(b"5\r\nhello\r\n0;x=1\r\nGrpc-Status: 0\r\nX-T:a b\t\r\n\r\n");
    for k in 0..=input.len() {
        assert_eq!(
            trailers_split_at(&input, k, true).as_deref(),
            Some(&b"Grpc-Status: 0\r\nX-T:a b\t\r\n"[..]),
            "split at {k}"
        );
        assert_eq!(trailers_split_at(&input, k, false), None, "not asked");
    }
    let none = with_next(b"3\r\nabc\r\n0\r\n\r\n");
    assert_eq!(
        trailers_split_at(&none, 7, true).as_deref(),
        Some(&b""[..]),
        "asked, there were none"
    );
}

/// A relay that passes a chunked body on as it came, however it is split, writes everything
/// up to the trailer section (`consumed - trailer` of each call), then the section it kept
/// less the fields that may not be trailers (RFC 9110 §6.5.1), then the final CRLF.
#[test]
fn a_relay_passes_the_trailer_section_without_forbidden_fields() {
    let input = with_next(
        b"5\r\nhello\r\n0;x=1\r\nX-Checksum: c1\r\nHost: evil\r\nAuthorization: x\r\n\
          grpc-status: 0\r\nContent-Length: 9\r\nX-Forwarded-For: 6.6.6.6\r\n\r\n",
    );
    let want = b"5\r\nhello\r\n0;x=1\r\nX-Checksum: c1\r\ngrpc-status: 0\r\n\r\n";
    for k in 0..=input.len() {
        let mut d = BodyDecoder::new(BodyKind::Chunked, BodyLimits::default());
        d.keep_trailers();
        let (mut out, mut pending) = (Vec::new(), Vec::new());
        for piece in [&input[..k], &input[k..]] {
            pending.extend_from_slice(piece);
            while !d.is_done() {
                let r = d.decode(&pending).expect("a valid body");
                let (consumed, trailer, done) = (r.consumed, r.trailer, r.done);
                out.extend_from_slice(&pending[..consumed - trailer]);
                if done {
                    let kept = d.take_trailers().expect("kept");
                    out.extend_from_slice(&ringx_http::trailer::allowed_lines(&kept));
                    out.extend_from_slice(b"\r\n");
                }
                pending.drain(..consumed);
                if consumed == 0 {
                    break;
                }
            }
        }
        assert_eq!(pending, NEXT, "split at {k}");
        assert_eq!(
            String::from_utf8_lossy(&out),
            String::from_utf8_lossy(want),
            "split at {k}"
        );
    }
}
