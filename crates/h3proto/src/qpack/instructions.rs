//! The instructions on QPACK's two unidirectional streams (RFC 9204 §4.3, §4.4): the
//! encoder stream changes the peer decoder's dynamic table; the decoder stream tells the
//! encoder what was received. Each is parsed from a stream's buffered bytes, with `None`
//! while one is cut short.

use super::prim::{self, Prim};
use crate::error::{ConnError, ErrorCode};

/// An encoder-stream instruction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EncoderInstruction {
    SetCapacity(u64),
    /// Insert With Name Reference: the name is the static table's entry or the dynamic
    /// table's `index` back from the newest.
    InsertNameRef {
        is_static: bool,
        index: u64,
        value: Vec<u8>,
    },
    /// Insert With Literal Name.
    InsertLiteral {
        name: Vec<u8>,
        value: Vec<u8>,
    },
    /// Duplicate the entry `index` back from the newest.
    Duplicate(u64),
}

fn encoder_error(e: Prim) -> Option<ConnError> {
    match e {
        Prim::Short => None,
        Prim::Invalid => Some(ConnError::new(
            ErrorCode::QpackEncoderStream,
            "an invalid encoder-stream instruction",
        )),
    }
}

impl EncoderInstruction {
    /// Reads the instruction at the start of `b` and its length. Strings longer than
    /// `max_string` (the table's capacity: a longer one could never be inserted) are
    /// QPACK_ENCODER_STREAM_ERROR as soon as their length is read.
    pub fn parse(b: &[u8], max_string: usize) -> Result<Option<(Self, usize)>, ConnError> {
        match Self::parse_inner(b, max_string) {
            Ok(r) => Ok(Some(r)),
            Err(e) => encoder_error(e).map_or(Ok(None), Err),
        }
    }

    fn parse_inner(b: &[u8], max: usize) -> Result<(Self, usize), Prim> {
        let first = *b.first().ok_or(Prim::Short)?;
        let mut scratch = Vec::new();
        if first & 0x80 != 0 {
            let (index, n) = prim::int(b, 6)?;
            let (value, m) = prim::string(&b[n..], 7, max, &mut scratch)?;
            let is_static = first & 0x40 != 0;
            let value = value.to_vec();
            return Ok((
                EncoderInstruction::InsertNameRef {
                    is_static,
                    index,
                    value,
                },
                n + m,
            ));
        }
        if first & 0x40 != 0 {
            let (name, n) = prim::string(b, 5, max, &mut scratch)?;
            let name = name.to_vec();
            let (value, m) = prim::string(&b[n..], 7, max, &mut scratch)?;
            let value = value.to_vec();
            return Ok((EncoderInstruction::InsertLiteral { name, value }, n + m));
        }
        let (v, n) = prim::int(b, 5)?;
        if first & 0x20 != 0 {
            Ok((EncoderInstruction::SetCapacity(v), n))
        } else {
            Ok((EncoderInstruction::Duplicate(v), n))
        }
    }

    /// Appends the instruction.
    pub fn write(&self, out: &mut Vec<u8>) {
        match self {
            EncoderInstruction::SetCapacity(c) => prim::write_int(out, 5, 0x20, *c),
            EncoderInstruction::InsertNameRef {
                is_static,
                index,
                value,
            } => {
                prim::write_int(out, 6, if *is_static { 0xc0 } else { 0x80 }, *index);
                prim::write_string(out, 7, 0, value);
            }
            EncoderInstruction::InsertLiteral { name, value } => {
                prim::write_string(out, 5, 0x40, name);
                prim::write_string(out, 7, 0, value);
            }
            EncoderInstruction::Duplicate(i) => prim::write_int(out, 5, 0, *i),
        }
    }
}

/// A decoder-stream instruction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecoderInstruction {
    /// The field section on this stream was decoded.
    SectionAck(u64),
    /// This stream was abandoned (reset, or read no further).
    StreamCancel(u64),
    /// This many more inserts were received.
    InsertCountIncrement(u64),
}

impl DecoderInstruction {
    /// Reads the instruction at the start of `b` and its length.
    pub fn parse(b: &[u8]) -> Result<Option<(Self, usize)>, ConnError> {
        let Some(&first) = b.first() else {
            return Ok(None);
        };
        let r = if first & 0x80 != 0 {
            prim::int(b, 7).map(|(v, n)| (DecoderInstruction::SectionAck(v), n))
        } else if first & 0x40 != 0 {
            prim::int(b, 6).map(|(v, n)| (DecoderInstruction::StreamCancel(v), n))
        } else {
            prim::int(b, 6).map(|(v, n)| (DecoderInstruction::InsertCountIncrement(v), n))
        };
        match r {
            Ok(r) => Ok(Some(r)),
            Err(Prim::Short) => Ok(None),
            Err(Prim::Invalid) => Err(ConnError::new(
                ErrorCode::QpackDecoderStream,
                "an invalid decoder-stream instruction",
            )),
        }
    }

    /// Appends the instruction.
    pub fn write(self, out: &mut Vec<u8>) {
        match self {
            DecoderInstruction::SectionAck(id) => prim::write_int(out, 7, 0x80, id),
            DecoderInstruction::StreamCancel(id) => prim::write_int(out, 6, 0x40, id),
            DecoderInstruction::InsertCountIncrement(n) => prim::write_int(out, 6, 0, n),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn all_encoder(mut b: &[u8]) -> Vec<EncoderInstruction> {
        let mut v = Vec::new();
        while let Some((i, n)) = EncoderInstruction::parse(b, 4096).unwrap() {
            v.push(i);
            b = &b[n..];
        }
        assert!(b.is_empty());
        v
    }

    #[test]
    fn rfc9204_appendix_b_encoder_streams() {
        use EncoderInstruction::*;
        // B.2: Set Dynamic Table Capacity 220, Insert With Name Reference (static 0,
        // :authority = www.example.com), and (static 1, :path = /sample/path).
        let b2 = b"\x3f\xbd\x01\xc0\x0fwww.example.com\xc1\x0c/sample/path";
        assert_eq!(
            all_encoder(b2),
            [
                SetCapacity(220),
                InsertNameRef {
                    is_static: true,
                    index: 0,
                    value: b"www.example.com".to_vec()
                },
                InsertNameRef {
                    is_static: true,
                    index: 1,
                    value: b"/sample/path".to_vec()
                },
            ]
        );
        // B.3: Insert With Literal Name custom-key = custom-value.
        let b3 = b"\x4acustom-key\x0ccustom-value";
        assert_eq!(
            all_encoder(b3),
            [InsertLiteral {
                name: b"custom-key".to_vec(),
                value: b"custom-value".to_vec()
            }]
        );
        // B.4: Duplicate (relative index 2); B.5: Insert With Name Reference (dynamic,
        // relative index 1: custom-key = custom-value2).
        assert_eq!(all_encoder(b"\x02"), [Duplicate(2)]);
        assert_eq!(
            all_encoder(b"\x81\x0dcustom-value2"),
            [InsertNameRef {
                is_static: false,
                index: 1,
                value: b"custom-value2".to_vec()
            }]
        );
        // Cut anywhere, an instruction waits for the rest.
        for cut in 0..b3.len() {
            assert_eq!(EncoderInstruction::parse(&b3[..cut], 4096), Ok(None));
        }
        assert!(
            EncoderInstruction::parse(b3, 5).is_err(),
            "a name over the limit"
        );
    }

    #[test]
    fn rfc9204_appendix_b_decoder_streams() {
        use DecoderInstruction::*;
        // B.2's Section Acknowledgment of stream 4, B.3's Insert Count Increment of 1,
        // B.4's Stream Cancellation of stream 8.
        for (b, want) in [
            (0x84, SectionAck(4)),
            (0x01, InsertCountIncrement(1)),
            (0x48, StreamCancel(8)),
        ] {
            assert_eq!(DecoderInstruction::parse(&[b]), Ok(Some((want, 1))));
            let mut out = Vec::new();
            want.write(&mut out);
            assert_eq!(out, [b]);
        }
        assert_eq!(DecoderInstruction::parse(&[0xff]), Ok(None));
    }

    proptest! {
        #[test]
        fn encoder_instructions_round_trip(kind in 0u8..4, v in 0..=prim::MAX_INT,
            name in proptest::collection::vec(any::<u8>(), 0..40),
            value in proptest::collection::vec(any::<u8>(), 0..40)) {
            let i = match kind {
                0 => EncoderInstruction::SetCapacity(v),
                1 => EncoderInstruction::InsertNameRef { is_static: v % 2 == 0, index: v, value },
                2 => EncoderInstruction::InsertLiteral { name, value },
                _ => EncoderInstruction::Duplicate(v),
            };
            let mut out = Vec::new();
            i.write(&mut out);
            prop_assert_eq!(EncoderInstruction::parse(&out, 100), Ok(Some((i, out.len()))));
        }

        #[test]
        fn decoder_instructions_round_trip(kind in 0u8..3, v in 0..=prim::MAX_INT) {
            let i = match kind {
                0 => DecoderInstruction::SectionAck(v),
                1 => DecoderInstruction::StreamCancel(v),
                _ => DecoderInstruction::InsertCountIncrement(v),
            };
            let mut out = Vec::new();
            i.write(&mut out);
            prop_assert_eq!(DecoderInstruction::parse(&out), Ok(Some((i, out.len()))));
        }
    }
}
