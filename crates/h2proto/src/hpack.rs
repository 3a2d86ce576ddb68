//! HPACK (RFC 7541) through `loona-hpack`, with the header list bounded while it is decoded.
//!
//! A header block is decoded to the end even when its list is too large: the dynamic table
//! must follow every block the peer encoded, or every later block would decode wrongly. Past
//! the limit nothing is kept — fields that come from the table are borrowed, not copied — so
//! a small block that expands hugely (an HPACK bomb) costs the time to walk it and nothing
//! more; the block itself is bounded before it reaches the decoder (`Limits::max_header_block`).

use std::borrow::Cow;

/// The dynamic table size we decode with: the protocol's default, which we never raise
/// (SETTINGS_HEADER_TABLE_SIZE is not sent).
pub const TABLE_SIZE: usize = 4096;
/// Per-field overhead of the header list size (RFC 9113 §6.5.2, RFC 7541 §4.1).
pub const FIELD_OVERHEAD: usize = 32;

/// A connection's HPACK decoder.
pub struct Decoder {
    inner: loona_hpack::Decoder<'static>,
}

/// A header block that is not valid HPACK: a COMPRESSION_ERROR.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InvalidBlock;

/// How decoding a block went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decoded {
    /// Every field was handed over.
    Whole,
    /// The list went over the limit: fields after that point were not handed over.
    TooLarge,
}

impl Default for Decoder {
    fn default() -> Self {
        let mut inner = loona_hpack::Decoder::new();
        inner.set_max_allowed_table_size(TABLE_SIZE);
        Decoder { inner }
    }
}

impl Decoder {
    /// Decodes `block`, handing each field to `field` while the list stays within
    /// `max_list` bytes. `Err`: the block is not valid HPACK.
    pub fn decode(
        &mut self,
        block: &[u8],
        max_list: usize,
        mut field: impl FnMut(&[u8], &[u8]),
    ) -> Result<Decoded, InvalidBlock> {
        let mut size = 0usize;
        let mut over = false;
        self.inner
            .decode_with_cb(block, |n: Cow<[u8]>, v: Cow<[u8]>| {
                if over {
                    return;
                }
                size = size.saturating_add(n.len() + v.len() + FIELD_OVERHEAD);
                if size > max_list {
                    over = true;
                    return;
                }
                field(&n, &v);
            })
            .map_err(|_| InvalidBlock)?;
        Ok(if over {
            Decoded::TooLarge
        } else {
            Decoded::Whole
        })
    }
}

/// A connection's HPACK encoder.
pub struct Encoder {
    inner: loona_hpack::Encoder<'static>,
    /// A smaller table the peer asked for, announced at the start of the next block.
    size_update: Option<usize>,
    size: usize,
}

impl Default for Encoder {
    fn default() -> Self {
        Encoder {
            inner: loona_hpack::Encoder::new(),
            size_update: None,
            size: TABLE_SIZE,
        }
    }
}

impl Encoder {
    /// The peer's SETTINGS_HEADER_TABLE_SIZE: the table shrinks to it (a larger one is
    /// allowed but not used).
    pub fn peer_table_size(&mut self, max: u32) {
        let want = (max as usize).min(TABLE_SIZE);
        if want != self.size {
            self.size = want;
            self.inner.set_max_table_size(want);
            self.size_update = Some(want);
        }
    }

    /// Encodes a field list into `out`.
    pub fn encode<'a>(
        &mut self,
        out: &mut Vec<u8>,
        fields: impl IntoIterator<Item = (&'a [u8], &'a [u8])>,
    ) {
        if let Some(n) = self.size_update.take() {
            // RFC 7541 §6.3: a dynamic table size update, at the start of the block.
            let _ = loona_hpack::encoder::encode_integer_into(n, 5, 0x20, out);
        }
        for f in fields {
            // Writing into a Vec cannot fail.
            let _ = self.inner.encode_header_into(f, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Fields = Vec<(Vec<u8>, Vec<u8>)>;

    fn fields(
        d: &mut Decoder,
        block: &[u8],
        max: usize,
    ) -> (Result<Decoded, InvalidBlock>, Fields) {
        let mut v = Vec::new();
        let r = d.decode(block, max, |n, x| v.push((n.to_vec(), x.to_vec())));
        (r, v)
    }

    #[test]
    fn round_trip_and_table_size_update() {
        let mut e = Encoder::default();
        let mut d = Decoder::default();
        let list: Vec<(&[u8], &[u8])> =
            vec![(b":status", b"200"), (b"x-a", b"b"), (b"server", b"ringx")];
        for _ in 0..3 {
            let mut out = Vec::new();
            e.encode(&mut out, list.iter().copied());
            let (r, got) = fields(&mut d, &out, 1 << 16);
            assert_eq!(r, Ok(Decoded::Whole));
            let want: Vec<_> = list.iter().map(|(a, b)| (a.to_vec(), b.to_vec())).collect();
            assert_eq!(got, want);
        }
        e.peer_table_size(0);
        let mut out = Vec::new();
        e.encode(&mut out, list.iter().copied());
        assert_eq!(out[0], 0x20, "a size update to 0 first");
        let (r, _) = fields(&mut d, &out, 1 << 16);
        assert_eq!(r, Ok(Decoded::Whole));
    }

    /// A bomb: one 4000-byte field indexed into the table, then referenced 10,000 times in a
    /// 10 kB block. Decoding stops keeping fields at the limit, and still follows the table.
    #[test]
    fn a_bomb_stops_at_the_list_limit() {
        let mut d = Decoder::default();
        let mut block = vec![0x40, 0x01, b'x'];
        block.push(0x7f);
        let mut n = 4000 - 127;
        while n >= 128 {
            block.push((n % 128) as u8 | 0x80);
            n /= 128;
        }
        block.push(n as u8);
        block.extend(std::iter::repeat_n(b'a', 4000));
        block.extend(std::iter::repeat_n(0x80 | 62, 10_000));
        let mut kept = 0usize;
        let r = d.decode(&block, 16 * 1024, |n, v| kept += n.len() + v.len());
        assert_eq!(r, Ok(Decoded::TooLarge));
        assert!(kept <= 16 * 1024, "{kept}");
        // The table still holds the field: a later block referring to it decodes.
        let (r, got) = fields(&mut d, &[0x80 | 62], 1 << 16);
        assert_eq!(r, Ok(Decoded::Whole));
        assert_eq!(got[0].1.len(), 4000);
    }

    #[test]
    fn invalid_blocks_are_errors() {
        let mut d = Decoder::default();
        // An index past both tables; a size update above the allowed size; one at the end.
        for b in [&[0x80 | 70][..], &[0x3f, 0xe1, 0x7f], &[0x82, 0x20]] {
            assert!(fields(&mut d, b, 1 << 16).0.is_err(), "{b:?}");
        }
    }
}
