//! HPACK (RFC 7541): the decoder, ours, with the header list bounded while it is decoded;
//! the encoder through `loona-hpack`.
//!
//! Why the decoder is hand-written: the crates at hand either decode a block into owned
//! vectors (no bound until the bomb has expanded) or, like `loona-hpack`, rebuild a table of
//! the whole Huffman code for every Huffman-coded string (80% of a request's CPU in
//! `bench/h2.py`). Huffman strings are decoded by `ringx_http::huffman`, shared with QPACK.
//!
//! A header block is decoded to the end even when its list is too large: the dynamic table
//! must follow every block the peer encoded, or every later block would decode wrongly. Past
//! the limit nothing is handed over; fields from the table are borrowed, not copied, so a
//! small block that expands hugely (an HPACK bomb) costs the time to walk it and nothing
//! more; the block itself is bounded before it reaches the decoder (`Limits::max_header_block`).

use std::collections::VecDeque;

/// The dynamic table size we decode with: the protocol's default, which we never raise
/// (SETTINGS_HEADER_TABLE_SIZE is not sent).
pub const TABLE_SIZE: usize = 4096;
/// Per-field overhead of the header list size (RFC 9113 §6.5.2, RFC 7541 §4.1).
pub const FIELD_OVERHEAD: usize = 32;

/// RFC 7541 Appendix A.
const STATIC: [(&[u8], &[u8]); 61] = [
    (b":authority", b""),
    (b":method", b"GET"),
    (b":method", b"POST"),
    (b":path", b"/"),
    (b":path", b"/index.html"),
    (b":scheme", b"http"),
    (b":scheme", b"https"),
    (b":status", b"200"),
    (b":status", b"204"),
    (b":status", b"206"),
    (b":status", b"304"),
    (b":status", b"400"),
    (b":status", b"404"),
    (b":status", b"500"),
    (b"accept-charset", b""),
    (b"accept-encoding", b"gzip, deflate"),
    (b"accept-language", b""),
    (b"accept-ranges", b""),
    (b"accept", b""),
    (b"access-control-allow-origin", b""),
    (b"age", b""),
    (b"allow", b""),
    (b"authorization", b""),
    (b"cache-control", b""),
    (b"content-disposition", b""),
    (b"content-encoding", b""),
    (b"content-language", b""),
    (b"content-length", b""),
    (b"content-location", b""),
    (b"content-range", b""),
    (b"content-type", b""),
    (b"cookie", b""),
    (b"date", b""),
    (b"etag", b""),
    (b"expect", b""),
    (b"expires", b""),
    (b"from", b""),
    (b"host", b""),
    (b"if-match", b""),
    (b"if-modified-since", b""),
    (b"if-none-match", b""),
    (b"if-range", b""),
    (b"if-unmodified-since", b""),
    (b"last-modified", b""),
    (b"link", b""),
    (b"location", b""),
    (b"max-forwards", b""),
    (b"proxy-authenticate", b""),
    (b"proxy-authorization", b""),
    (b"range", b""),
    (b"referer", b""),
    (b"refresh", b""),
    (b"retry-after", b""),
    (b"server", b""),
    (b"set-cookie", b""),
    (b"strict-transport-security", b""),
    (b"transfer-encoding", b""),
    (b"user-agent", b""),
    (b"vary", b""),
    (b"via", b""),
    (b"www-authenticate", b""),
];

/// A connection's HPACK decoder.
pub struct Decoder {
    /// Newest first.
    table: VecDeque<(Vec<u8>, Vec<u8>)>,
    /// Bytes of the table (each entry counts its name, value and 32).
    size: usize,
    /// The table's current maximum (a size update may lower it).
    max: usize,
    /// Decoded Huffman strings (name, value), kept for their capacity.
    scratch: (Vec<u8>, Vec<u8>),
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
        Decoder {
            table: VecDeque::new(),
            size: 0,
            max: TABLE_SIZE,
            scratch: (Vec::new(), Vec::new()),
        }
    }
}

/// Reads an integer with an `n`-bit prefix at the start of `b` (RFC 7541 §5.1): the value
/// and the bytes it took. Values that need more than 4 continuation bytes (over 2^28) are
/// refused: nothing in a header block is that large.
fn integer(b: &[u8], n: u8) -> Result<(usize, usize), InvalidBlock> {
    let mask = (1usize << n) - 1;
    let first = *b.first().ok_or(InvalidBlock)? as usize & mask;
    if first < mask {
        return Ok((first, 1));
    }
    let mut v = mask;
    for (i, &x) in b[1..].iter().enumerate().take(4) {
        v += ((x & 0x7f) as usize) << (7 * i);
        if x & 0x80 == 0 {
            return Ok((v, i + 2));
        }
    }
    Err(InvalidBlock)
}

/// A string literal at the start of `b` (RFC 7541 §5.2): raw bytes are borrowed, Huffman
/// ones decoded into `scratch`. Returns the string and the bytes it took.
fn string<'a>(b: &'a [u8], scratch: &'a mut Vec<u8>) -> Result<(&'a [u8], usize), InvalidBlock> {
    let huffman = b.first().ok_or(InvalidBlock)? & 0x80 != 0;
    let (len, n) = integer(b, 7)?;
    let raw = b.get(n..n + len).ok_or(InvalidBlock)?;
    if !huffman {
        return Ok((raw, n + len));
    }
    // EOS and a bad padding (RFC 7541 §5.2) are refused by the decoder.
    ringx_http::huffman::decode(raw, scratch).map_err(|_| InvalidBlock)?;
    Ok((scratch, n + len))
}

impl Decoder {
    /// Entry `i` (1-based) of the static table followed by the dynamic one.
    fn get(&self, i: usize) -> Result<(&[u8], &[u8]), InvalidBlock> {
        match i {
            0 => Err(InvalidBlock),
            1..=61 => Ok(STATIC[i - 1]),
            _ => self
                .table
                .get(i - 62)
                .map(|(n, v)| (&n[..], &v[..]))
                .ok_or(InvalidBlock),
        }
    }

    fn evict_to(&mut self, max: usize) {
        while self.size > max {
            let (n, v) = self.table.pop_back().expect("size counts entries");
            self.size -= n.len() + v.len() + FIELD_OVERHEAD;
        }
    }

    fn insert(&mut self, name: Vec<u8>, value: Vec<u8>) {
        let sz = name.len() + value.len() + FIELD_OVERHEAD;
        if sz > self.max {
            // Larger than the table: it empties it (RFC 7541 §4.4).
            self.table.clear();
            self.size = 0;
            return;
        }
        self.evict_to(self.max - sz);
        self.size += sz;
        self.table.push_front((name, value));
    }

    /// Decodes `block`, handing each field to `field` while the list stays within
    /// `max_list` bytes. `Err`: the block is not valid HPACK.
    pub fn decode(
        &mut self,
        block: &[u8],
        max_list: usize,
        mut field: impl FnMut(&[u8], &[u8]),
    ) -> Result<Decoded, InvalidBlock> {
        let mut list = List {
            size: 0,
            max: max_list,
            over: false,
            fields: 0,
        };
        let mut scratch = std::mem::take(&mut self.scratch);
        let r = self.walk(block, &mut scratch, &mut list, &mut field);
        self.scratch = scratch;
        r?;
        Ok(if list.over {
            Decoded::TooLarge
        } else {
            Decoded::Whole
        })
    }

    fn walk(
        &mut self,
        block: &[u8],
        scratch: &mut (Vec<u8>, Vec<u8>),
        list: &mut List,
        field: &mut impl FnMut(&[u8], &[u8]),
    ) -> Result<(), InvalidBlock> {
        let mut pos = 0;
        while pos < block.len() {
            let b = &block[pos..];
            let first = b[0];
            if first & 0x80 != 0 {
                let (i, n) = integer(b, 7)?;
                let (name, value) = self.get(i)?;
                list.emit(field, name, value);
                pos += n;
            } else if first & 0xe0 == 0x20 {
                // A table size update: only before the block's first field (§4.2).
                if list.fields > 0 {
                    return Err(InvalidBlock);
                }
                let (max, n) = integer(b, 5)?;
                if max > TABLE_SIZE {
                    return Err(InvalidBlock);
                }
                self.max = max;
                self.evict_to(max);
                pos += n;
            } else {
                let (prefix, indexing) = if first & 0x40 != 0 {
                    (6, true)
                } else {
                    (4, false)
                };
                let (i, mut n) = integer(b, prefix)?;
                let (sn, sv) = (&mut scratch.0, &mut scratch.1);
                let name: &[u8] = if i == 0 {
                    let (name, k) = string(&b[n..], sn)?;
                    n += k;
                    name
                } else {
                    let (name, _) = self.get(i)?;
                    sn.clear();
                    sn.extend_from_slice(name);
                    sn
                };
                let (value, k) = string(&b[n..], sv)?;
                n += k;
                list.emit(field, name, value);
                if indexing {
                    let (name, value) = (name.to_vec(), value.to_vec());
                    self.insert(name, value);
                }
                pos += n;
            }
        }
        Ok(())
    }
}

/// The header list being decoded: its size against the limit.
struct List {
    size: usize,
    max: usize,
    over: bool,
    fields: usize,
}

impl List {
    fn emit(&mut self, field: &mut impl FnMut(&[u8], &[u8]), n: &[u8], v: &[u8]) {
        self.fields += 1;
        if self.over {
            return;
        }
        self.size = self.size.saturating_add(n.len() + v.len() + FIELD_OVERHEAD);
        if self.size > self.max {
            self.over = true;
            return;
        }
        field(n, v);
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

    /// RFC 7541 C.4: requests with Huffman coding, the dynamic table carried across them.
    #[test]
    fn rfc7541_huffman_examples() {
        let hex = |h: &str| -> Vec<u8> {
            (0..h.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&h[i..i + 2], 16).unwrap())
                .collect()
        };
        let mut d = Decoder::default();
        let (r, got) = fields(&mut d, &hex("828684418cf1e3c2e5f23a6ba0ab90f4ff"), 1 << 16);
        assert_eq!(r, Ok(Decoded::Whole));
        assert_eq!(
            got[3],
            (b":authority".to_vec(), b"www.example.com".to_vec())
        );
        let (_, got) = fields(&mut d, &hex("828684be5886a8eb10649cbf"), 1 << 16);
        assert_eq!(got[3].1, b"www.example.com", "from the dynamic table");
        assert_eq!(got[4], (b"cache-control".to_vec(), b"no-cache".to_vec()));
        let (_, got) = fields(
            &mut d,
            &hex("828785bf408825a849e95ba97d7f8925a849e95bb8e8b4bf"),
            1 << 16,
        );
        assert_eq!(got[4], (b"custom-key".to_vec(), b"custom-value".to_vec()));
        assert_eq!(d.size, 164, "the table's size as the RFC gives it");
    }

    /// Whatever the bytes: no panic, and the table stays within its size.
    #[test]
    fn arbitrary_blocks_never_panic() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut d = Decoder::default();
        for _ in 0..20_000 {
            let len = (seed % 40) as usize;
            let block: Vec<u8> = (0..len)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    seed as u8
                })
                .collect();
            let _ = d.decode(&block, 1 << 12, |_, _| {});
            assert!(d.size <= d.max && d.max <= TABLE_SIZE);
        }
    }

    #[test]
    fn invalid_blocks_are_errors() {
        let mut d = Decoder::default();
        // Huffman "a" (00011) padded by zeros, by more than 7 bits, and the EOS symbol.
        for b in [
            &[0x00, 0x01, b'x', 0x81, 0x18][..],
            &[0x00, 0x01, b'x', 0x82, 0x1f, 0xff],
            &[0x00, 0x01, b'x', 0x84, 0xff, 0xff, 0xff, 0xff],
        ] {
            assert!(fields(&mut d, b, 1 << 16).0.is_err(), "{b:?}");
        }
        assert_eq!(
            fields(&mut d, &[0x00, 0x01, b'x', 0x81, 0x1f], 1 << 16).0,
            Ok(Decoded::Whole)
        );
        // An index past both tables; a size update above the allowed size; one at the end.
        for b in [&[0x80 | 70][..], &[0x3f, 0xe1, 0x7f], &[0x82, 0x20]] {
            assert!(fields(&mut d, b, 1 << 16).0.is_err(), "{b:?}");
        }
    }
}
