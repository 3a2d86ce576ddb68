//! QPACK's primitives (RFC 9204 §4.1): integers with an N-bit prefix (HPACK's, RFC 7541
//! §5.1, here up to 62 bits) and string literals with a Huffman flag just above their
//! length's prefix.
//!
//! Both say whether they were cut short ([`Prim::Short`]: on the encoder stream, wait for
//! more) or are invalid ([`Prim::Invalid`]); a field section is whole, so there both are
//! errors.

/// Why a primitive was not read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prim {
    /// It goes on past the bytes given.
    Short,
    /// It is not valid: too large, over a length limit, bad Huffman code.
    Invalid,
}

/// The largest integer read: what a QUIC varint holds. Nothing QPACK counts goes near it.
pub const MAX_INT: u64 = crate::varint::MAX;

/// Reads the integer with an `n`-bit prefix (1..=8) at the start of `b`: its value and
/// length.
pub fn int(b: &[u8], n: u8) -> Result<(u64, usize), Prim> {
    let mask = (1u16 << n) - 1;
    let first = u64::from(u16::from(*b.first().ok_or(Prim::Short)?) & mask);
    if first < u64::from(mask) {
        return Ok((first, 1));
    }
    let mut v = first;
    for (i, &x) in b[1..].iter().enumerate() {
        // 9 continuation bytes carry 63 bits: past that it cannot be a 62-bit value.
        if i >= 9 {
            return Err(Prim::Invalid);
        }
        v = v
            .checked_add(u64::from(x & 0x7f) << (7 * i))
            .filter(|&v| v <= MAX_INT)
            .ok_or(Prim::Invalid)?;
        if x & 0x80 == 0 {
            return Ok((v, i + 2));
        }
    }
    Err(Prim::Short)
}

/// Appends `v` with an `n`-bit prefix; `flags` are the first byte's bits above it.
pub fn write_int(out: &mut Vec<u8>, n: u8, flags: u8, v: u64) {
    let mask = ((1u16 << n) - 1) as u8;
    if v < u64::from(mask) {
        out.push(flags | v as u8);
        return;
    }
    out.push(flags | mask);
    let mut rest = v - u64::from(mask);
    while rest >= 0x80 {
        out.push(rest as u8 | 0x80);
        rest >>= 7;
    }
    out.push(rest as u8);
}

/// Reads the string literal at the start of `b` whose length has an `n`-bit prefix and whose
/// Huffman flag is the bit above it. Raw strings are borrowed, Huffman-coded ones decoded
/// into `scratch`. A length over `max_len` is invalid as soon as it is read: a peer cannot
/// make us wait for (and hold) a string we would refuse.
pub fn string<'a>(
    b: &'a [u8],
    n: u8,
    max_len: usize,
    scratch: &'a mut Vec<u8>,
) -> Result<(&'a [u8], usize), Prim> {
    let huffman = b.first().ok_or(Prim::Short)? & (1 << n) != 0;
    let (len, k) = int(b, n)?;
    let len = usize::try_from(len)
        .ok()
        .filter(|&l| l <= max_len)
        .ok_or(Prim::Invalid)?;
    let raw = b.get(k..k + len).ok_or(Prim::Short)?;
    if !huffman {
        return Ok((raw, k + len));
    }
    huffman_decode(raw, scratch)?;
    Ok((scratch, k + len))
}

/// Decodes a Huffman-coded string (RFC 7541 Appendix B) into `out`: EOS in the string, or
/// a padding of 8 bits or more or not all ones, is invalid (§5.2).
pub fn huffman_decode(raw: &[u8], out: &mut Vec<u8>) -> Result<(), Prim> {
    ringx_http::huffman::decode(raw, out).map_err(|_| Prim::Invalid)
}

/// Bits of `s` in the Huffman code.
fn huffman_bits(s: &[u8]) -> usize {
    let table = &httlib_huffman::encoder::table::ENCODE_TABLE;
    s.iter().map(|&c| table[c as usize].0 as usize).sum()
}

/// Appends `s` as a string literal with an `n`-bit length prefix under `flags`, Huffman-coded
/// when that is shorter.
pub fn write_string(out: &mut Vec<u8>, n: u8, flags: u8, s: &[u8]) {
    let coded = huffman_bits(s).div_ceil(8);
    if coded < s.len() {
        // Coded straight after its length (known beforehand): no buffer of its own.
        let mark = out.len();
        write_int(out, n, flags | (1 << n), coded as u64);
        let start = out.len();
        if httlib_huffman::encode(s, out).is_ok() && out.len() - start == coded {
            return;
        }
        out.truncate(mark);
    }
    write_int(out, n, flags, s.len() as u64);
    out.extend_from_slice(s);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn rfc7541_integer_examples() {
        assert_eq!(int(&[0b0000_1010], 5), Ok((10, 1)));
        assert_eq!(int(&[0x1f, 0x9a, 0x0a], 5), Ok((1337, 3)));
        assert_eq!(int(&[42], 8), Ok((42, 1)));
        assert_eq!(int(&[0x1f, 0x9a], 5), Err(Prim::Short));
        let mut too_big = vec![0xff];
        too_big.extend_from_slice(&[0xff; 9]);
        too_big.push(0x01);
        assert_eq!(int(&too_big, 8), Err(Prim::Invalid));
        let mut out = Vec::new();
        write_int(&mut out, 5, 0xe0, 1337);
        assert_eq!(out, [0xff, 0x9a, 0x0a]);
    }

    #[test]
    fn rfc7541_huffman_examples() {
        // C.4.1: "www.example.com".
        let coded = [
            0xf1, 0xe3, 0xc2, 0xe5, 0xf2, 0x3a, 0x6b, 0xa0, 0xab, 0x90, 0xf4, 0xff,
        ];
        let mut out = Vec::new();
        huffman_decode(&coded, &mut out).unwrap();
        assert_eq!(out, b"www.example.com");
        let mut w = Vec::new();
        write_string(&mut w, 7, 0, b"www.example.com");
        assert_eq!((w[0], &w[1..]), (0x80 | 12, &coded[..]));
        // "a" is 5 bits: padded with ones it is valid; with zeros, or with 8 bits more, not.
        huffman_decode(&[0x1f], &mut out).unwrap();
        assert_eq!(out, b"a");
        assert_eq!(huffman_decode(&[0x18], &mut out), Err(Prim::Invalid));
        assert_eq!(huffman_decode(&[0x1f, 0xff], &mut out), Err(Prim::Invalid));
    }

    #[test]
    fn a_string_over_its_limit_is_refused_before_it_arrives() {
        let mut s = Vec::new();
        assert_eq!(
            string(&[0x7f, 0x80, 0x01], 7, 100, &mut s),
            Err(Prim::Invalid)
        );
        assert_eq!(string(&[0x05, b'a'], 7, 100, &mut s), Err(Prim::Short));
    }

    proptest! {
        #[test]
        fn integers_round_trip(v in 0..=MAX_INT, n in 1u8..=8) {
            let mut out = Vec::new();
            write_int(&mut out, n, 0, v);
            prop_assert_eq!(int(&out, n), Ok((v, out.len())));
            for cut in 0..out.len() {
                prop_assert_eq!(int(&out[..cut], n), Err(Prim::Short));
            }
        }

        #[test]
        fn strings_round_trip(s in proptest::collection::vec(any::<u8>(), 0..80), n in 3u8..=7) {
            let mut out = Vec::new();
            write_string(&mut out, n, 0, &s);
            let mut scratch = Vec::new();
            let (got, len) = string(&out, n, 1000, &mut scratch).unwrap();
            prop_assert_eq!(got, &s[..]);
            prop_assert_eq!(len, out.len());
        }

        #[test]
        fn any_bytes_decode_without_panic(raw in proptest::collection::vec(any::<u8>(), 0..40)) {
            let mut out = Vec::new();
            let _ = huffman_decode(&raw, &mut out);
        }
    }
}
