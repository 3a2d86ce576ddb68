use super::*;
use crate::qpack::encode;
use proptest::prelude::*;

fn fields(
    d: &mut Decoder,
    id: u64,
    block: &[u8],
) -> Result<(Decoded, Vec<(String, String)>), ConnError> {
    let mut v = Vec::new();
    let r = d.decode(id, block, 1 << 20, |n, val| {
        v.push((
            String::from_utf8_lossy(n).into_owned(),
            String::from_utf8_lossy(val).into_owned(),
        ))
    })?;
    Ok((r, v))
}

fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
    p.iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect()
}

/// RFC 9204 Appendix B, every step in order, with the table capacity of its examples.
#[test]
fn rfc9204_appendix_b() {
    let mut d = Decoder::new(220);
    // B.1: a literal with a static name reference; nothing on the decoder stream.
    let (r, f) = fields(&mut d, 0, b"\x00\x00\x51\x0b/index.html").unwrap();
    assert_eq!((r, f), (Decoded::Whole, pairs(&[(":path", "/index.html")])));
    assert!(d.out().is_empty());

    // B.2: stream 4 arrives before the inserts it needs: blocked.
    let s4 = b"\x03\x81\x10\x11";
    assert_eq!(fields(&mut d, 4, s4).unwrap().0, Decoded::Blocked(2));
    d.feed_encoder_stream(b"\x3f\xbd\x01\xc0\x0fwww.example.com")
        .unwrap();
    d.feed_encoder_stream(b"\xc1\x0c/sample/path").unwrap();
    assert_eq!(d.table().size(), 106);
    d.clear_out(); // the Insert Count Increments (the RFC's decoder acks by section)
    let (r, f) = fields(&mut d, 4, s4).unwrap();
    assert_eq!(r, Decoded::Whole);
    assert_eq!(
        f,
        pairs(&[(":authority", "www.example.com"), (":path", "/sample/path")])
    );
    assert_eq!(d.out(), b"\x84", "Section Acknowledgment of stream 4");
    d.clear_out();

    // B.3: a speculative insert, acknowledged by an Insert Count Increment.
    d.feed_encoder_stream(b"\x4acustom-key\x0ccustom-value")
        .unwrap();
    assert_eq!((d.out(), d.table().size()), (&b"\x01"[..], 160));
    d.clear_out();

    // B.4: Duplicate, then stream 8 uses it; then the stream is cancelled.
    d.feed_encoder_stream(b"\x02").unwrap();
    d.clear_out();
    let (r, f) = fields(&mut d, 8, b"\x05\x00\x80\xc1\x81").unwrap();
    assert_eq!(r, Decoded::Whole);
    assert_eq!(
        f,
        pairs(&[
            (":authority", "www.example.com"),
            (":path", "/"),
            ("custom-key", "custom-value")
        ])
    );
    d.clear_out();
    d.cancel_stream(8);
    assert_eq!(d.out(), b"\x48");
    d.clear_out();

    // B.5: an insert that evicts the oldest entry.
    d.feed_encoder_stream(b"\x81\x0dcustom-value2").unwrap();
    assert_eq!(
        (d.out(), d.table().size(), d.table().insert_count()),
        (&b"\x01"[..], 215, 5)
    );
    assert!(d.table().get(0).is_none(), "evicted");
    assert_eq!(
        d.table().get(4),
        Some((&b"custom-key"[..], &b"custom-value2"[..]))
    );
}

#[test]
fn bad_references_fail() {
    let mut d = Decoder::new(220);
    d.feed_encoder_stream(b"\x3f\xbd\x01\xc0\x0fwww.example.com")
        .unwrap();
    let code = |d: &mut Decoder, b: &[u8]| fields(d, 0, b).unwrap_err().code;
    let failed = ErrorCode::QpackDecompressionFailed;
    assert_eq!(
        code(&mut d, b"\x00\x00\xff\x64"),
        failed,
        "no static entry 99+"
    );
    assert_eq!(
        code(&mut d, b"\x00\x00\x80"),
        failed,
        "a dynamic reference with RIC 0"
    );
    assert_eq!(
        code(&mut d, b"\x02\x00\xc1"),
        failed,
        "RIC 1 with no dynamic reference"
    );
    assert_eq!(
        code(&mut d, b"\x02\x00\x10"),
        failed,
        "post-base 0 is past RIC 1"
    );
    assert_eq!(
        code(&mut d, b"\x02\x00\x81"),
        failed,
        "relative 1 is before the table"
    );
    assert_eq!(code(&mut d, b"\x00\x80"), failed, "Base below zero");
    assert_eq!(
        code(&mut d, b"\x0f\x00"),
        failed,
        "encoded RIC over 2 * MaxEntries"
    );
    assert_eq!(code(&mut d, b"\x00\x00\x51\x0b/ind"), failed, "cut short");
    assert_eq!(code(&mut d, b"\x00"), failed);
    let mut d0 = Decoder::new(0);
    assert_eq!(code(&mut d0, b"\x01\x00"), failed, "no table, yet a RIC");
    // Encoder-stream errors.
    let enc = |b: &[u8]| Decoder::new(100).feed_encoder_stream(b).unwrap_err().code;
    assert_eq!(
        enc(b"\x3f\x46"),
        ErrorCode::QpackEncoderStream,
        "capacity 101 > 100"
    );
    assert_eq!(
        enc(b"\x3f\x45\x80\x00"),
        ErrorCode::QpackEncoderStream,
        "no dynamic entry"
    );
    assert_eq!(
        enc(b"\x3f\x45\xff\x64\x00"),
        ErrorCode::QpackEncoderStream,
        "no static entry"
    );
    assert_eq!(
        enc(b"\x3f\x45\x00"),
        ErrorCode::QpackEncoderStream,
        "duplicate of nothing"
    );
    assert_eq!(
        enc(b"\x5f\x7f"),
        ErrorCode::QpackEncoderStream,
        "a name longer than the table"
    );
}

#[test]
fn a_section_within_its_references_decodes() {
    let mut d = Decoder::new(220);
    d.feed_encoder_stream(b"\x3f\xbd\x01\xc0\x0fwww.example.com")
        .unwrap();
    let (r, f) = fields(&mut d, 0, b"\x02\x00\x80").unwrap();
    assert_eq!(
        (r, f),
        (Decoded::Whole, pairs(&[(":authority", "www.example.com")]))
    );
    // A literal with a post-base name reference: Base 0, post-base index 0.
    let (_, f) = fields(&mut d, 0, b"\x02\x80\x00\x03abc").unwrap();
    assert_eq!(f, pairs(&[(":authority", "abc")]));
}

#[test]
fn a_large_section_stops_at_the_limit() {
    let mut d = Decoder::new(0);
    let mut block = Vec::new();
    let list: Vec<(&[u8], &[u8])> = vec![(b"a", b"1"); 10];
    encode::encode_section(&mut block, list.iter().copied());
    let mut n = 0;
    assert_eq!(
        d.decode(0, &block, 34 * 3, |_, _| n += 1),
        Ok(Decoded::TooLarge)
    );
    assert_eq!(n, 3);
    assert_eq!(d.decode(0, &block, 34 * 10, |_, _| ()), Ok(Decoded::Whole));
}

#[test]
fn wrapped_required_insert_counts_resolve() {
    // MaxEntries 4 (capacity 128), FullRange 8.
    assert_eq!(required_insert_count(0, 0, 4), Ok(0));
    assert_eq!(required_insert_count(3, 2, 4), Ok(2));
    assert_eq!(required_insert_count(5, 12, 4), Ok(12));
    assert_eq!(required_insert_count(1, 8, 4), Ok(8));
    assert!(required_insert_count(9, 0, 4).is_err());
    assert!(
        required_insert_count(8, 0, 4).is_err(),
        "7 > MaxValue 4 and 7 <= FullRange"
    );
    assert!(required_insert_count(1, 0, 0).is_err());
}

proptest! {
    #[test]
    fn our_sections_decode_back(list in proptest::collection::vec(
        (proptest::sample::select(vec![":status", "content-type", "x-custom", "server", "set-cookie", "vary"]),
         "[ -~]{0,30}"), 0..12)) {
        let mut block = Vec::new();
        encode::encode_section(&mut block, list.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())));
        let mut d = Decoder::new(4096);
        let (r, got) = fields(&mut d, 0, &block).unwrap();
        prop_assert_eq!(r, Decoded::Whole);
        let want: Vec<(String, String)> = list.iter().map(|(n, v)| (n.to_string(), v.clone())).collect();
        prop_assert_eq!(got, want);
        prop_assert!(d.out().is_empty());
    }

    #[test]
    fn any_bytes_never_panic(table in proptest::collection::vec(any::<u8>(), 0..64),
                             block in proptest::collection::vec(any::<u8>(), 0..64)) {
        let mut d = Decoder::new(256);
        let _ = d.feed_encoder_stream(&table);
        let _ = d.decode(0, &block, 4096, |_, _| ());
    }
}
