//! Decoding HPACK's Huffman code (RFC 7541 Appendix B), which HPACK (HTTP/2) and QPACK
//! (HTTP/3, RFC 9204 §4.1.2) strings use, four bits at a time. Hand-written because it is
//! most of what a request head costs to decode: clients that never index their fields
//! (quic-go's) Huffman-code every value of every request, and `httlib-huffman`'s fastest
//! decoder took 40% of ringx-h3proto's time per request (`cargo bench -p ringx-h3proto
//! --bench decode`), with a second pass over the output to check the padding. Here each input byte is two table lookups in a state machine over the
//! code's tree (as nghttp2 does), and the padding is checked by the state it ends in.
//!
//! The table is built once from `httlib-huffman`'s code table (the RFC's), not written out.

use std::sync::OnceLock;

/// The string is not a valid Huffman coding (EOS in it, or a bad padding).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Invalid;

/// What reading one nibble does from one state: the next state, and the symbol completed
/// on the way, if any (codes are 5 bits or longer, so a nibble completes one at most).
#[derive(Clone, Copy, Default)]
struct Step {
    next: u8,
    /// `EMIT`: `sym` was completed; `FAIL`: the nibble completes EOS (an error, §5.2).
    flags: u8,
    sym: u8,
}

const EMIT: u8 = 1;
const FAIL: u8 = 2;

/// The code's tree has 256 internal nodes (257 symbols): states are their numbers, the
/// root 0.
struct Machine {
    steps: Vec<[Step; 16]>,
    /// A state where input may end: the root, or a run of fewer than 8 one bits from it
    /// (padding is the start of EOS's code, all ones, under 8 bits).
    may_end: [bool; 256],
}

fn machine() -> &'static Machine {
    static MACHINE: OnceLock<Machine> = OnceLock::new();
    MACHINE.get_or_init(build)
}

/// A child in the tree: an internal node's number, or a symbol (256 is EOS).
#[derive(Clone, Copy, PartialEq)]
enum Node {
    Inner(usize),
    Leaf(u16),
    Empty,
}

fn build() -> Machine {
    let table = &httlib_huffman::encoder::table::ENCODE_TABLE;
    let mut tree: Vec<[Node; 2]> = vec![[Node::Empty; 2]];
    for (sym, &(bits, code)) in table.iter().enumerate() {
        let mut at = 0;
        for i in (0..bits).rev() {
            let bit = ((code >> i) & 1) as usize;
            if i == 0 {
                tree[at][bit] = Node::Leaf(sym as u16);
            } else {
                at = match tree[at][bit] {
                    Node::Inner(n) => n,
                    _ => {
                        tree.push([Node::Empty; 2]);
                        tree[at][bit] = Node::Inner(tree.len() - 1);
                        tree.len() - 1
                    }
                };
            }
        }
    }
    assert_eq!(tree.len(), 256, "the RFC 7541 code has 256 internal nodes");
    let mut may_end = [false; 256];
    let (mut at, mut ones) = (0, 0);
    loop {
        may_end[at] = true;
        match tree[at][1] {
            Node::Inner(n) if ones < 7 => {
                at = n;
                ones += 1;
            }
            _ => break,
        }
    }
    let steps = (0..tree.len())
        .map(|state| {
            let mut row = [Step::default(); 16];
            for (nibble, step) in row.iter_mut().enumerate() {
                let mut at = state;
                for i in (0..4).rev() {
                    match tree[at][(nibble >> i) & 1] {
                        Node::Inner(n) => at = n,
                        Node::Leaf(256) | Node::Empty => {
                            step.flags = FAIL;
                            break;
                        }
                        Node::Leaf(sym) => {
                            step.flags |= EMIT;
                            step.sym = sym as u8;
                            at = 0;
                        }
                    }
                }
                step.next = at as u8;
            }
            row
        })
        .collect();
    Machine { steps, may_end }
}

/// Decodes `raw` into `out` (cleared first); invalid for EOS in the input or a padding
/// longer than 7 bits or not all ones (RFC 7541 §5.2).
pub fn decode(raw: &[u8], out: &mut Vec<u8>) -> Result<(), Invalid> {
    let m = machine();
    out.clear();
    // Every code is 5 bits or longer: at most 8 symbols for 5 bytes.
    out.reserve(raw.len() * 8 / 5 + 1);
    let mut state = 0usize;
    for &b in raw {
        for nibble in [b >> 4, b & 0x0f] {
            let step = m.steps[state][usize::from(nibble)];
            if step.flags & FAIL != 0 {
                return Err(Invalid);
            }
            if step.flags & EMIT != 0 {
                out.push(step.sym);
            }
            state = usize::from(step.next);
        }
    }
    if m.may_end[state] {
        Ok(())
    } else {
        Err(Invalid)
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
        fn encoded_strings_round_trip(s in proptest::collection::vec(any::<u8>(), 0..80)) {
            let mut coded = Vec::new();
            httlib_huffman::encode(&s, &mut coded).unwrap();
            prop_assert_eq!(ours(&coded), Ok(s));
        }
    }
}
