//! Property tests for what the request parser leaves to `httparse`: a head it accepts holds
//! no NUL and no CR that is not followed by LF, and every header value is field-vchar / SP /
//! HTAB. Release builds rely on this instead of scanning every head and value a second time
//! (`head::check_raw_bytes` and the value check in `fields::analyze` run in debug builds
//! only), so a change of `httparse` that loosened it must fail here.

use proptest::prelude::*;
use ringx_http::httparse::{Header, EMPTY_HEADER};
use ringx_http::{parse_request, Limits, Parsed};

/// Bytes that are interesting around the rules: controls, CR/LF, DEL, obs-text, separators.
/// Targets and values run past 32 bytes, so httparse's vector paths (16- and 32-byte blocks)
/// see the bad byte at every position of a block, not only its scalar tail.
fn byte() -> impl Strategy<Value = u8> {
    prop_oneof![
        4 => proptest::sample::select(b"\0\r\n\t \x7f\x80\xff:/?a-Z0".to_vec()),
        1 => any::<u8>(),
    ]
}

fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    // Mostly harmless bytes with a few interesting ones, so that long runs stay acceptable up
    // to the byte that matters.
    proptest::collection::vec(
        prop_oneof![8 => proptest::sample::select(b"abcXYZ019-._~/".to_vec()), 1 => byte()],
        0..max,
    )
}

/// A request that is well-formed except where the random parts put something else.
fn head() -> impl Strategy<Value = Vec<u8>> {
    (
        bytes(48),
        proptest::collection::vec((bytes(6), bytes(80)), 0..4),
        prop_oneof![Just(&b"\r\n"[..]), Just(&b"\n"[..]), Just(&b"\r"[..])],
    )
        .prop_map(|(target, fields, end)| {
            let mut h = b"GET /".to_vec();
            h.extend_from_slice(&target);
            h.extend_from_slice(b" HTTP/1.1\r\nHost: h\r\n");
            for (name, value) in fields {
                h.extend_from_slice(b"X");
                h.extend_from_slice(&name);
                h.extend_from_slice(b": ");
                h.extend_from_slice(&value);
                h.extend_from_slice(b"\r\n");
            }
            h.extend_from_slice(end);
            h.extend_from_slice(b"\r\n");
            h
        })
}

fn field_vchar(b: u8) -> bool {
    b == b'\t' || (b' '..=b'~').contains(&b) || b >= 0x80
}

fn check(buf: &[u8]) -> Result<(), TestCaseError> {
    let mut headers = vec![EMPTY_HEADER; 16];
    let headers: &mut [Header<'_>] = &mut headers;
    if let Ok(Parsed::Complete(req)) = parse_request(buf, headers, &Limits::default()) {
        let head = &buf[..req.head_len];
        prop_assert!(!head.contains(&0), "NUL accepted in {head:?}");
        for (i, &b) in head.iter().enumerate() {
            prop_assert!(
                b != b'\r' || head.get(i + 1) == Some(&b'\n'),
                "bare CR accepted in {head:?}"
            );
        }
        for h in req.headers {
            prop_assert!(
                h.value.iter().all(|&b| field_vchar(b)),
                "value {:?}",
                h.value
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]

    #[test]
    fn structured_heads(buf in head()) {
        check(&buf)?;
    }

    #[test]
    fn any_bytes_after_a_request_line(tail in bytes(120)) {
        let mut buf = b"GET / HTTP/1.1\r\n".to_vec();
        buf.extend_from_slice(&tail);
        check(&buf)?;
    }
}

#[test]
fn the_generator_reaches_accepted_heads_with_each_kind_of_byte() {
    // A property that never sees an accepted head would prove nothing: accepted values do
    // carry HTAB and obs-text, and rejected heads carry NUL and bare CR.
    let ok = |b: &[u8]| {
        let mut headers = vec![EMPTY_HEADER; 16];
        matches!(
            parse_request(b, &mut headers, &Limits::default()),
            Ok(Parsed::Complete(_))
        )
    };
    assert!(ok(b"GET / HTTP/1.1\r\nHost: h\r\nXa: \t\x80\xff z\r\n\r\n"));
    assert!(!ok(b"GET / HTTP/1.1\r\nHost: h\r\nXa: \0\r\n\r\n"));
    assert!(!ok(b"GET / HTTP/1.1\r\nHost: h\r\nXa: b\rc\r\n\r\n"));
    assert!(!ok(b"GET /\r HTTP/1.1\r\nHost: h\r\n\r\n"));
    assert!(!ok(b"GET / HTTP/1.1\r\nHost: h\r\nX\x7f: b\r\n\r\n"));
    assert!(!ok(b"GET / HTTP/1.1\r\nHost: h\r\nXa: b\x7f\r\n\r\n"));
}
