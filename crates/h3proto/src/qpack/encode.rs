//! The QPACK encoder we answer with: the static table and literals only, never the dynamic
//! table. That is QPACK's simplest correct encoder (RFC 9204 §2.1): no encoder stream
//! instructions, every section's Required Insert Count 0 so no stream is ever blocked on
//! us, nothing to track per stream, and no memory a peer can make us hold. Responses lose
//! a little compression on repeated custom fields; the static table covers the common
//! ones, and Huffman coding the rest.
//!
//! The peer's decoder stream then has nothing to acknowledge: a Section Acknowledgment or
//! an Insert Count Increment from it is QPACK_DECODER_STREAM_ERROR (§4.4), and Stream
//! Cancellations are read and ignored.

use super::instructions::DecoderInstruction;
use super::prim;
use super::static_table;
use crate::error::{ConnError, ErrorCode};

/// Appends the field section of `fields`: the prefix (Required Insert Count 0, Base 0),
/// then each field as an indexed static entry, a literal with a static name, or a literal.
pub fn encode_section<'a>(
    out: &mut Vec<u8>,
    fields: impl IntoIterator<Item = (&'a [u8], &'a [u8])>,
) {
    out.extend_from_slice(&[0, 0]);
    for (name, value) in fields {
        encode_field(out, name, value);
    }
}

/// Appends one field line (copied when this thread encoded the same field last:
/// `lines.rs`).
pub fn encode_field(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    super::lines::append(out, name, value, encode_line)
}

/// Appends one field line, encoded here and now.
pub(super) fn encode_line(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    match static_table::find(name, value) {
        Some((i, true)) => prim::write_int(out, 6, 0xc0, i as u64),
        Some((i, false)) => {
            prim::write_int(out, 4, 0x50, i as u64);
            prim::write_string(out, 7, 0, value);
        }
        None => {
            prim::write_string(out, 3, 0x20, name);
            prim::write_string(out, 7, 0, value);
        }
    }
}

/// The `:status` line of a response, then its fields.
pub fn encode_response<'a>(
    out: &mut Vec<u8>,
    status: u16,
    fields: impl IntoIterator<Item = (&'a [u8], &'a [u8])>,
) {
    out.extend_from_slice(&[0, 0]);
    let mut digits = [0u8; 3];
    let s = status.min(999);
    digits[0] = b'0' + (s / 100) as u8;
    digits[1] = b'0' + (s / 10 % 10) as u8;
    digits[2] = b'0' + (s % 10) as u8;
    encode_field(out, b":status", &digits);
    for (name, value) in fields {
        encode_field(out, name, value);
    }
}

/// Reads the peer's decoder stream: `pending` holds an instruction cut short between calls.
pub fn feed_decoder_stream(pending: &mut Vec<u8>, b: &[u8]) -> Result<(), ConnError> {
    pending.extend_from_slice(b);
    let mut pos = 0;
    let r = loop {
        match DecoderInstruction::parse(&pending[pos..]) {
            Ok(Some((i, n))) => {
                pos += n;
                match i {
                    DecoderInstruction::StreamCancel(_) => {}
                    DecoderInstruction::SectionAck(_) => {
                        break Err(ConnError::new(
                            ErrorCode::QpackDecoderStream,
                            "a Section Acknowledgment with nothing to acknowledge",
                        ))
                    }
                    DecoderInstruction::InsertCountIncrement(_) => {
                        break Err(ConnError::new(
                            ErrorCode::QpackDecoderStream,
                            "an Insert Count Increment past our inserts",
                        ))
                    }
                }
            }
            Ok(None) => break Ok(()),
            Err(e) => break Err(e),
        }
    };
    pending.drain(..pos);
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_use_the_static_table() {
        let mut out = Vec::new();
        encode_response(&mut out, 200, [(&b"content-type"[..], &b"text/plain"[..])]);
        // RIC 0, Base 0, static 25 (:status 200), static 53 (content-type text/plain).
        assert_eq!(out, [0x00, 0x00, 0xd9, 0xf5]);
        out.clear();
        encode_response(&mut out, 201, [(&b"x-a"[..], &b"b"[..])]);
        // :status by name (index 24) with "201" Huffman-coded (15 bits); x-a with a literal
        // name, raw (its code is no shorter).
        assert_eq!(
            out,
            [0x00, 0x00, 0x5f, 0x09, 0x82, 0x10, 0x03, 0x23, b'x', b'-', b'a', 0x01, b'b']
        );
    }

    proptest::proptest! {
        /// A line copied from the thread's cache (`lines.rs`) is the one encoding makes,
        /// whichever fields came before.
        #[test]
        fn cached_lines_are_the_encoded_ones(
            fields in proptest::collection::vec(
                ("(:status|server|date|content-type|x-[a-c]{1,3})", "[0-9a-z /]{0,8}"), 1..80)
        ) {
            for (n, v) in fields.iter().chain(fields.iter()) {
                let (mut cached, mut fresh) = (Vec::new(), Vec::new());
                encode_field(&mut cached, n.as_bytes(), v.as_bytes());
                encode_line(&mut fresh, n.as_bytes(), v.as_bytes());
                proptest::prop_assert_eq!(cached, fresh);
            }
        }
    }

    #[test]
    fn the_peer_decoder_stream_has_nothing_to_ack() {
        let mut p = Vec::new();
        assert_eq!(feed_decoder_stream(&mut p, &[0x44, 0x7f]), Ok(()));
        assert_eq!(p, [0x7f]);
        assert_eq!(
            feed_decoder_stream(&mut p, &[0x01]),
            Ok(()),
            "a cancellation of 64"
        );
        assert!(p.is_empty());
        assert_eq!(
            feed_decoder_stream(&mut p, &[0x84]).unwrap_err().code,
            ErrorCode::QpackDecoderStream
        );
        assert_eq!(
            feed_decoder_stream(&mut Vec::new(), &[0x01])
                .unwrap_err()
                .code,
            ErrorCode::QpackDecoderStream
        );
    }
}
