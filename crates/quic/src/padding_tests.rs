use super::*;
use proptest::prelude::*;

/// `v` as a variable-length integer of `1 << size` bytes (RFC 9000 §16; any length that
/// holds the value is valid), or its shortest when `size` is too small.
fn varint(out: &mut Vec<u8>, v: u64, size: u8) {
    let shortest = match v {
        0..=0x3f => 0,
        0x40..=0x3fff => 1,
        0x4000..=0x3fff_ffff => 2,
        _ => 3,
    };
    let size = size.clamp(shortest, 3);
    let len = 1usize << size;
    let bytes = v.to_be_bytes();
    let mut enc = bytes[8 - len..].to_vec();
    enc[0] |= size << 6;
    out.extend(enc);
}

/// One frame of those the walk reads.
#[derive(Clone, Debug)]
enum Frame {
    Ping,
    /// PADDING between frames: bytes the walk passes over.
    Pad(usize),
    Ack {
        ranges: Vec<(u64, u64)>,
        ecn: bool,
    },
    Crypto(u64, Vec<u8>),
    Stream(u64, Option<u64>, Vec<u8>),
    Close(u64, Vec<u8>),
    /// One of the other frames the walk reads, encoded.
    Other(Vec<u8>),
}

fn encode(frames: &[Frame], size: u8) -> Vec<u8> {
    let mut p = Vec::new();
    for f in frames {
        match f {
            Frame::Ping => p.push(PING),
            Frame::Pad(n) => p.extend(std::iter::repeat_n(0, *n)),
            Frame::Ack { ranges, ecn } => {
                p.push(if *ecn { ACK_ECN } else { ACK });
                varint(&mut p, 1000, size);
                varint(&mut p, 25, size);
                varint(&mut p, ranges.len() as u64, size);
                varint(&mut p, 3, size);
                for &(gap, len) in ranges {
                    varint(&mut p, gap, size);
                    varint(&mut p, len, size);
                }
                if *ecn {
                    for v in [0, 7, 1 << 20] {
                        varint(&mut p, v, size);
                    }
                }
            }
            Frame::Crypto(offset, data) => {
                p.push(CRYPTO);
                varint(&mut p, *offset, size);
                varint(&mut p, data.len() as u64, size);
                p.extend(data);
            }
            Frame::Stream(id, offset, data) => {
                p.push(STREAM | STREAM_LEN | if offset.is_some() { STREAM_OFF } else { 0 });
                varint(&mut p, *id, size);
                if let Some(o) = offset {
                    varint(&mut p, *o, size);
                }
                varint(&mut p, data.len() as u64, size);
                p.extend(data);
            }
            Frame::Other(bytes) => p.extend(bytes),
            Frame::Close(code, reason) => {
                p.push(CLOSE);
                varint(&mut p, *code, size);
                varint(&mut p, 0x06, size);
                varint(&mut p, reason.len() as u64, size);
                p.extend(reason);
            }
        }
    }
    p
}

/// RFC 9000's other frames (and RFC 9221's DATAGRAM with a length), encoded: `v` their
/// integers, `b` their bytes, `n` a connection ID's length.
fn other() -> impl Strategy<Value = Frame> {
    let bytes = prop::collection::vec(prop_oneof![Just(0u8), any::<u8>()], 0..40);
    (0u8..17, 0u64..1 << 40, bytes, 1usize..=20).prop_map(|(kind, v, b, n)| {
        let mut p = Vec::new();
        let ints = |p: &mut Vec<u8>, k: usize| (0..k).for_each(|i| varint(p, v >> i, 0));
        match kind {
            0 => p.push(if v % 2 == 0 {
                HANDSHAKE_DONE
            } else {
                IMMEDIATE_ACK
            }),
            k @ 1..=7 => {
                p.push(
                    [
                        0,
                        MAX_DATA,
                        MAX_STREAMS_BIDI,
                        MAX_STREAMS_UNI,
                        DATA_BLOCKED,
                        STREAMS_BLOCKED_BIDI,
                        STREAMS_BLOCKED_UNI,
                        RETIRE_CONNECTION_ID,
                    ][k as usize],
                );
                ints(&mut p, 1);
            }
            k @ 8..=10 => {
                p.push([MAX_STREAM_DATA, STREAM_DATA_BLOCKED, STOP_SENDING][k as usize - 8]);
                ints(&mut p, 2);
            }
            11 => {
                p.push(RESET_STREAM);
                ints(&mut p, 3);
            }
            k @ (12 | 13) => {
                p.push(if k == 12 { NEW_TOKEN } else { DATAGRAM_LEN });
                varint(&mut p, b.len() as u64, 0);
                p.extend(&b);
            }
            14 => {
                p.push(PATH_CHALLENGE);
                p.extend(v.to_be_bytes());
            }
            15 => {
                p.push(NEW_CONNECTION_ID);
                ints(&mut p, 2);
                p.push(n as u8);
                p.extend(std::iter::repeat_n(0, n + RESET_TOKEN));
            }
            _ => {
                p.push(APPLICATION_CLOSE);
                ints(&mut p, 1);
                varint(&mut p, b.len() as u64, 0);
                p.extend(&b);
            }
        }
        Frame::Other(p)
    })
}

fn frame() -> impl Strategy<Value = Frame> {
    // Data that ends in zeros too: they are the frame's, not PADDING.
    let data = prop::collection::vec(prop_oneof![Just(0u8), any::<u8>()], 0..40);
    prop_oneof![
        Just(Frame::Ping),
        (1usize..20).prop_map(Frame::Pad),
        (
            prop::collection::vec((0u64..1 << 20, 0u64..1 << 20), 0..4),
            any::<bool>()
        )
            .prop_map(|(ranges, ecn)| Frame::Ack { ranges, ecn }),
        (0u64..1 << 30, data.clone()).prop_map(|(o, d)| Frame::Crypto(o, d)),
        (0u64..1 << 40, prop::option::of(0u64..1 << 40), data.clone())
            .prop_map(|(id, o, d)| Frame::Stream(id, o, d)),
        (0u64..1 << 16, data).prop_map(|(c, r)| Frame::Close(c, r)),
        other(),
    ]
}

/// `p` with its PADDING runs cut.
fn collapsed(p: &[u8]) -> Vec<u8> {
    let mut p = p.to_vec();
    let n = collapse(&mut p);
    p.truncate(n);
    p
}

/// `frames` with each run of PADDING frames one byte long, as `collapse` leaves them.
fn merged(frames: &[Frame]) -> Vec<Frame> {
    let mut out: Vec<Frame> = Vec::new();
    for f in frames {
        match (f, out.last()) {
            (Frame::Pad(_), Some(Frame::Pad(_))) => {}
            (Frame::Pad(_), _) => out.push(Frame::Pad(1)),
            _ => out.push(f.clone()),
        }
    }
    out
}

#[test]
fn an_initial_of_crypto_and_padding_keeps_one_byte_of_padding() {
    let crypto = encode(&[Frame::Crypto(0, vec![1; 300])], 0);
    let mut p = crypto.clone();
    p.resize(1200, 0);
    assert_eq!(collapsed(&p), [&crypto[..], &[0]].concat());
}

#[test]
fn padding_between_the_ack_and_the_crypto_frame_is_cut_as_quic_go_sends_it() {
    let ack = Frame::Ack {
        ranges: vec![],
        ecn: false,
    };
    let crypto = Frame::Crypto(0, vec![0; 8]);
    let p = encode(&[ack.clone(), Frame::Pad(900), crypto.clone()], 1);
    assert_eq!(collapsed(&p), encode(&[ack, Frame::Pad(1), crypto], 1));
}

#[test]
fn padding_after_new_connection_ids_is_cut_as_quinn_proto_sends_it() {
    let ack = Frame::Ack {
        ranges: vec![],
        ecn: false,
    };
    let mut frames = vec![ack];
    for seq in 1..4u8 {
        let mut f = vec![NEW_CONNECTION_ID, seq, 0, 8];
        f.extend([seq; 8 + RESET_TOKEN]);
        frames.push(Frame::Other(f));
    }
    let p = encode(&[&frames[..], &[Frame::Pad(1000)]].concat(), 0);
    assert_eq!(
        collapsed(&p),
        encode(&[&frames[..], &[Frame::Pad(1)]].concat(), 0)
    );
}

#[test]
fn a_payload_of_padding_alone_keeps_a_frame() {
    assert_eq!(collapsed(&[0; 1200]), [0]);
    assert_eq!(collapsed(&[0]), [0]);
    assert_eq!(collapsed(&[]), [0u8; 0]);
}

#[test]
fn a_frame_the_walk_does_not_read_ends_it_there() {
    // 0x21 is no frame the walk reads: the PADDING before it is cut, not after.
    let p = [&[0; 10][..], &[0x21, 0x41, 0x00], &[0; 50]].concat();
    assert_eq!(
        collapsed(&p),
        [&[0][..], &[0x21, 0x41, 0x00], &[0; 50]].concat()
    );
    // A connection ID longer than 20 bytes does not parse.
    let p = [&[NEW_CONNECTION_ID, 1, 0, 21][..], &[0; 60]].concat();
    assert_eq!(collapsed(&p), p);
    // A type in a longer encoding than it needs is not read either.
    let p = [&[0x40, 0x01][..], &[0; 50]].concat();
    assert_eq!(collapsed(&p), p);
    // CRYPTO claiming more bytes than follow: the zeros may be its data.
    let p = [&[CRYPTO, 0, 0x40, 0xff][..], &[0; 50]].concat();
    assert_eq!(collapsed(&p), p);
    // STREAM without a length runs to the end: its data, zeros or not.
    let p = [&[PING, 0, 0, 0, STREAM, 4, 1, 2][..], &[0; 50]].concat();
    assert_eq!(
        collapsed(&p),
        [&[PING, 0, STREAM, 4, 1, 2][..], &[0; 50]].concat()
    );
}

proptest! {
    /// Frames the walk reads, in any order and any varint lengths, PADDING among them and
    /// `pad` bytes of it after them: each run of PADDING is left one byte long.
    #[test]
    fn each_run_of_padding_is_cut_to_a_byte_among_any_frames(
        frames in prop::collection::vec(frame(), 0..8),
        size in 0u8..4,
        pad in 0usize..1500,
    ) {
        let mut all = frames.clone();
        if pad > 0 {
            all.push(Frame::Pad(pad));
        }
        prop_assert_eq!(collapsed(&encode(&all, size)), encode(&merged(&all), size));
    }
}

proptest! {
    // A peer's bytes, which quinn-proto has only decrypted: more cases than the default,
    // as a fuzzer's stand-in (a cargo-fuzz target would build quinn-proto and aws-lc under
    // the sanitizer for a function that needs neither).
    #![proptest_config(ProptestConfig::with_cases(4096))]

    /// Whatever the bytes, only zeros are taken out, a payload keeps a byte, and a second
    /// pass changes nothing.
    #[test]
    fn only_padding_is_ever_taken_out(p in prop::collection::vec(prop_oneof![Just(0u8), any::<u8>()], 0..300)) {
        let c = collapsed(&p);
        prop_assert!(c.len() <= p.len());
        prop_assert!(!c.is_empty() || p.is_empty());
        let nonzero = |v: &[u8]| v.iter().copied().filter(|&b| b != 0).collect::<Vec<_>>();
        prop_assert_eq!(nonzero(&c), nonzero(&p));
        // `c` is `p` with zeros taken out: a subsequence of it.
        let mut it = p.iter();
        prop_assert!(c.iter().all(|b| it.any(|x| x == b)));
        prop_assert_eq!(collapsed(&c), c);
    }
}
