//! QUIC variable-length integers (RFC 9000 §16): every HTTP/3 frame type, length, setting
//! and stream type is one. The two high bits of the first byte give the length (1, 2, 4 or
//! 8 bytes); the rest is the value, big-endian, up to 2^62 - 1.
//!
//! Decoding tells "not all here yet" (`None`) from a value: a stream's bytes arrive in
//! pieces, and a varint cut at a piece's end is not an error.

/// The largest value a varint holds.
pub const MAX: u64 = (1 << 62) - 1;

/// Decodes the varint at the start of `b`: its value and length, or `None` while it is not
/// all in `b`.
#[inline]
pub fn decode(b: &[u8]) -> Option<(u64, usize)> {
    let first = *b.first()?;
    let len = 1usize << (first >> 6);
    let bytes = b.get(..len)?;
    let v = bytes[1..]
        .iter()
        .fold(u64::from(first & 0x3f), |v, &x| (v << 8) | u64::from(x));
    Some((v, len))
}

/// How many bytes `v` takes (its shortest form).
#[inline]
pub fn len(v: u64) -> usize {
    match v {
        0..=63 => 1,
        64..=16_383 => 2,
        16_384..=1_073_741_823 => 4,
        _ => 8,
    }
}

/// Appends `v` in its shortest form. Values above [`MAX`] are ours alone to write (nothing
/// from the network is re-encoded unchecked) and are clamped to it.
#[inline]
pub fn encode(out: &mut Vec<u8>, v: u64) {
    let (bytes, n) = encoded(v);
    out.extend_from_slice(&bytes[..n]);
}

/// `v` in its shortest form: the first `.1` bytes of `.0`. Clamped to [`MAX`] as [`encode`].
#[inline]
pub fn encoded(v: u64) -> ([u8; 8], usize) {
    debug_assert!(v <= MAX, "a varint over 2^62 - 1");
    let v = v.min(MAX);
    let mut b = [0u8; 8];
    let n = len(v);
    match n {
        1 => b[0] = v as u8,
        2 => b[..2].copy_from_slice(&(v as u16 | 0x4000).to_be_bytes()),
        4 => b[..4].copy_from_slice(&(v as u32 | 0x8000_0000).to_be_bytes()),
        _ => b = (v | 0xc000_0000_0000_0000).to_be_bytes(),
    }
    (b, n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn rfc9000_appendix_a_examples() {
        let cases: [(&[u8], u64); 4] = [
            (
                &[0xc2, 0x19, 0x7c, 0x5e, 0xff, 0x14, 0xe8, 0x8c],
                151_288_809_941_952_652,
            ),
            (&[0x9d, 0x7f, 0x3e, 0x7d], 494_878_333),
            (&[0x7b, 0xbd], 15_293),
            (&[0x25], 37),
        ];
        for (bytes, v) in cases {
            assert_eq!(decode(bytes), Some((v, bytes.len())));
            let mut out = Vec::new();
            encode(&mut out, v);
            assert_eq!(out, bytes);
        }
        // A non-shortest form is still the same value (RFC 9000 §16 allows it).
        assert_eq!(decode(&[0x40, 0x25]), Some((37, 2)));
    }

    #[test]
    fn a_cut_varint_needs_more() {
        assert_eq!(decode(&[]), None);
        assert_eq!(decode(&[0x9d, 0x7f, 0x3e]), None);
        assert_eq!(decode(&[0xc0]), None);
    }

    proptest! {
        #[test]
        fn round_trip(v in 0..=MAX, tail in proptest::collection::vec(any::<u8>(), 0..4)) {
            let mut out = Vec::new();
            encode(&mut out, v);
            prop_assert_eq!(out.len(), len(v));
            let n = out.len();
            out.extend_from_slice(&tail);
            prop_assert_eq!(decode(&out), Some((v, n)));
            for cut in 0..n {
                prop_assert_eq!(decode(&out[..cut]), None);
            }
        }
    }
}
