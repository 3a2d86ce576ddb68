//! Decoding HPACK's Huffman code (RFC 7541 Appendix B), which HPACK (HTTP/2) and QPACK
//! (HTTP/3, RFC 9204 §4.1.2) strings use. Hand-written because it is most of what a request
//! head costs to decode: clients that never index their fields (quic-go's) Huffman-code
//! every value of every request, and `httlib-huffman`'s fastest decoder took 40% of
//! ringx-h3proto's time per request (`cargo bench -p ringx-h3proto --bench decode`), with a
//! second pass over the output to check the padding.
//!
//! The code is canonical (within a length, codes count up in symbol order), so a symbol is
//! found from the input's next bits alone: one lookup in a 256-entry table by the next 8
//! bits for the 74 symbols whose codes are 8 bits or shorter (every letter, digit and the
//! punctuation of hosts, paths and dates), and for the longer ones the first code of each
//! length (9 to 30 bits). The input is read into a 64-bit accumulator, refilled when under
//! 30 bits. This replaced a nibble-at-a-time state machine over the code's tree (as nghttp2
//! decodes), whose two dependent lookups per input byte made `decode` 4.8% of a zone's time
//! at 10 × 100 HTTP/3 streams: a quic-go GET's head decodes in 364–369 ns against 392
//! (`cargo bench -p ringx-h3proto --bench decode`).
//!
//! The tables are built once from `httlib-huffman`'s code table (the RFC's), not written out.

use std::sync::OnceLock;

/// The string is not a valid Huffman coding (EOS in it, or a bad padding).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Invalid;

/// EOS, the 257th symbol: never valid in a string (§5.2).
const EOS: u16 = 256;

/// Bits read by the one-lookup table: codes this long or shorter are decoded by it.
const FAST: u32 = 8;

/// The longest code (EOS's).
const LONGEST: usize = 30;

struct Tables {
    /// By the input's next 8 bits: the symbol whose code they begin with and the code's
    /// length, for codes of 8 bits or fewer; length 0 where the code is longer.
    fast: [(u8, u8); 1 << FAST],
    /// For each length from 9 bits: its first code, how many codes it has, and where its
    /// symbols begin in `by_code`.
    first: [u32; LONGEST + 1],
    count: [u32; LONGEST + 1],
    start: [u16; LONGEST + 1],
    /// The symbols in the order of their codes.
    by_code: Vec<u16>,
}

fn tables() -> &'static Tables {
    static TABLES: OnceLock<Tables> = OnceLock::new();
    TABLES.get_or_init(build)
}

fn build() -> Tables {
    let table = &httlib_huffman::encoder::table::ENCODE_TABLE;
    let mut syms: Vec<(u32, u32, u16)> = table
        .iter()
        .enumerate()
        .map(|(sym, &(bits, code))| (bits as u32, code, sym as u16))
        .collect();
    syms.sort_unstable();
    let mut t = Tables {
        fast: [(0, 0); 1 << FAST],
        first: [0; LONGEST + 1],
        count: [0; LONGEST + 1],
        start: [0; LONGEST + 1],
        by_code: syms.iter().map(|&(_, _, sym)| sym).collect(),
    };
    for (i, &(bits, code, sym)) in syms.iter().enumerate() {
        let len = bits as usize;
        if t.count[len] == 0 {
            t.first[len] = code;
            t.start[len] = i as u16;
        }
        assert_eq!(
            code,
            t.first[len] + t.count[len],
            "RFC 7541's code is canonical"
        );
        t.count[len] += 1;
        if bits <= FAST {
            // Every 8-bit string that begins with the code.
            let shift = FAST - bits;
            for rest in 0..1u32 << shift {
                t.fast[((code << shift) | rest) as usize] = (sym as u8, bits as u8);
            }
        }
    }
    assert_eq!(t.by_code.len(), 257);
    t
}

impl Tables {
    /// The symbol of a code longer than 8 bits at the top of `acc`, where `bits` bits are
    /// input, and its length; None if no code is complete in those bits.
    fn long(&self, acc: u64, bits: u32) -> Option<(u16, u32)> {
        for len in FAST + 1..=bits.min(LONGEST as u32) {
            let code = (acc >> (64 - len)) as u32;
            let at = code.wrapping_sub(self.first[len as usize]);
            if at < self.count[len as usize] {
                let sym = self.by_code[usize::from(self.start[len as usize]) + at as usize];
                return Some((sym, len));
            }
        }
        None
    }
}

/// Decodes `raw` into `out` (cleared first); invalid for EOS in the input or a padding
/// longer than 7 bits or not all ones (RFC 7541 §5.2).
pub fn decode(raw: &[u8], out: &mut Vec<u8>) -> Result<(), Invalid> {
    let t = tables();
    out.clear();
    // Every code is 5 bits or longer: at most 8 symbols for 5 bytes.
    out.reserve(raw.len() * 8 / 5 + 1);
    // The input not decoded yet, from the top bit down; `bits` of it are input.
    let (mut acc, mut bits) = (0u64, 0u32);
    let mut next = raw.iter();
    loop {
        // Refilled when under 30 bits (the longest code), up to 57 or more.
        if bits < LONGEST as u32 {
            while bits <= 56 {
                let Some(&b) = next.next() else { break };
                acc |= u64::from(b) << (56 - bits);
                bits += 8;
            }
        }
        let (sym, len) = t.fast[(acc >> (64 - FAST)) as usize];
        let len = u32::from(len);
        if len != 0 && len <= bits {
            out.push(sym);
            acc <<= len;
            bits -= len;
            continue;
        }
        match t.long(acc, bits) {
            Some((EOS, _)) => return Err(Invalid),
            Some((sym, len)) => {
                out.push(sym as u8);
                acc <<= len;
                bits -= len;
            }
            // No code is complete in what is left (under 30 bits, or one would be): it must
            // be the padding, the start of EOS (all ones) and under 8 bits.
            None => {
                let padding = bits == 0 || bits < 8 && acc >> (64 - bits) == (1 << bits) - 1;
                return if padding { Ok(()) } else { Err(Invalid) };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// What decoding was before this module (in ringx-h2proto and ringx-h3proto):
    /// httlib-huffman's decoder, then the padding checked from the decoded symbols' code
    /// lengths.
    fn reference(raw: &[u8]) -> Result<Vec<u8>, ()> {
        let mut out = Vec::new();
        httlib_huffman::decode(raw, &mut out, httlib_huffman::DecoderSpeed::OneBit)
            .map_err(|_| ())?;
        let table = &httlib_huffman::encoder::table::ENCODE_TABLE;
        let bits: usize = out.iter().map(|&c| table[c as usize].0 as usize).sum();
        let pad = (raw.len() * 8).checked_sub(bits).ok_or(())?;
        if pad >= 8 {
            return Err(());
        }
        let ones = (1u8 << pad) - 1;
        if raw.last().is_some_and(|&x| x & ones != ones) {
            return Err(());
        }
        Ok(out)
    }

    fn ours(raw: &[u8]) -> Result<Vec<u8>, ()> {
        let mut out = vec![1, 2, 3];
        decode(raw, &mut out).map(|()| out).map_err(|_| ())
    }

    #[test]
    fn rfc7541_appendix_c_strings() {
        // C.4.1: "www.example.com"; C.6.1: a date.
        let www = [
            0xf1, 0xe3, 0xc2, 0xe5, 0xf2, 0x3a, 0x6b, 0xa0, 0xab, 0x90, 0xf4, 0xff,
        ];
        assert_eq!(ours(&www), Ok(b"www.example.com".to_vec()));
        let date = [
            0xd0, 0x7a, 0xbe, 0x94, 0x10, 0x54, 0xd4, 0x44, 0xa8, 0x20, 0x05, 0x95, 0x04, 0x0b,
            0x81, 0x66, 0xe0, 0x82, 0xa6, 0x2d, 0x1b, 0xff,
        ];
        assert_eq!(ours(&date), Ok(b"Mon, 21 Oct 2013 20:13:21 GMT".to_vec()));
        assert_eq!(ours(&[]), Ok(Vec::new()));
    }

    #[test]
    fn bad_padding_and_eos_are_errors() {
        assert_eq!(ours(&[0x1f]), Ok(b"a".to_vec()));
        // "a" then padding with a zero bit; then a whole byte of padding.
        assert_eq!(ours(&[0x18]), Err(()));
        assert_eq!(ours(&[0x1f, 0xff]), Err(()));
        // EOS itself (30 one bits) is never valid input.
        assert_eq!(ours(&[0xff, 0xff, 0xff, 0xff]), Err(()));
    }

    proptest! {
        #[test]
        fn any_bytes_decode_as_the_reference_does(
            raw in proptest::collection::vec(any::<u8>(), 0..40)
        ) {
            prop_assert_eq!(ours(&raw), reference(&raw));
        }

        #[test]
        fn damaged_encodings_decode_as_the_reference_does(
            s in proptest::collection::vec(any::<u8>(), 0..40),
            cut in 0usize..4,
            tail in proptest::collection::vec(any::<u8>(), 0..3),
            flip in any::<(usize, u8)>(),
        ) {
            let mut coded = Vec::new();
            httlib_huffman::encode(&s, &mut coded).unwrap();
            coded.truncate(coded.len().saturating_sub(cut));
            coded.extend_from_slice(&tail);
            if !coded.is_empty() {
                let at = flip.0 % coded.len();
                coded[at] ^= flip.1;
            }
            prop_assert_eq!(ours(&coded), reference(&coded));
        }

        #[test]
        fn encoded_strings_round_trip(s in proptest::collection::vec(any::<u8>(), 0..80)) {
            let mut coded = Vec::new();
            httlib_huffman::encode(&s, &mut coded).unwrap();
            prop_assert_eq!(ours(&coded), Ok(s));
        }
    }
}
