//! The bytes of HTTP's grammar shared by the parsers: the character classes of RFC 9110
//! §5.6 and a byte search tuned for the short fields of a head.

/// The first `needle` in `hay`. Heads' short fields (a target's query mark, a Host's port) are
/// searched on every request: below 32 bytes a byte loop finishes before memchr's vector
/// search has paid its set-up, so memchr is kept for longer input only.
#[inline(always)]
pub(crate) fn find_byte(needle: u8, hay: &[u8]) -> Option<usize> {
    if hay.len() <= 32 {
        hay.iter().position(|&b| b == needle)
    } else {
        memchr::memchr(needle, hay)
    }
}

/// `tchar` (RFC 9110 §5.6.2): a table, as the parsers look up every byte of a method and of
/// each field name.
#[inline]
pub(crate) fn is_tchar(b: u8) -> bool {
    TCHAR[b as usize]
}

const TCHAR: [bool; 256] = {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        t[b] = c.is_ascii_alphanumeric()
            || matches!(
                c,
                b'!' | b'#'
                    | b'$'
                    | b'%'
                    | b'&'
                    | b'\''
                    | b'*'
                    | b'+'
                    | b'-'
                    | b'.'
                    | b'^'
                    | b'_'
                    | b'`'
                    | b'|'
                    | b'~'
            );
        b += 1;
    }
    t
};

/// A byte `httparse` admits in a field value: HTAB, SP, VCHAR, obs-text.
#[inline]
pub(crate) fn is_field_byte(b: u8) -> bool {
    b == b'\t' || (b' '..=b'~').contains(&b) || b >= 0x80
}

/// Whether every byte of `v` is a field byte, eight at a time: a word with no byte below
/// SP and none equal to DEL passes at once; one with such a byte (a tab, most likely) is
/// looked at byte by byte.
pub(crate) fn all_field_bytes(v: &[u8]) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let mut words = v.chunks_exact(8);
    for w in &mut words {
        let x = u64::from_le_bytes(w.try_into().expect("eight bytes"));
        // A byte below 0x20 (high bit clear before the subtraction, set after), or 0x7f.
        let low = x.wrapping_sub(ONES * 0x20) & !x & HIGH;
        let d = x ^ (ONES * 0x7f);
        let del = d.wrapping_sub(ONES) & !d & HIGH;
        if (low | del) != 0 && !w.iter().all(|&b| is_field_byte(b)) {
            return false;
        }
    }
    words.remainder().iter().all(|&b| is_field_byte(b))
}

/// `qdtext = HTAB / SP / %x21 / %x23-5B / %x5D-7E / obs-text`
pub(crate) fn is_qdtext(b: u8) -> bool {
    b == b'\t'
        || b == b' '
        || b == 0x21
        || (0x23..=0x5b).contains(&b)
        || (0x5d..=0x7e).contains(&b)
        || b >= 0x80
}

#[cfg(test)]
mod tests {
    #[test]
    fn field_bytes_eight_at_a_time_as_one_by_one() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for len in 0..40 {
            for _ in 0..2000 {
                let v: Vec<u8> = (0..len)
                    .map(|_| {
                        seed ^= seed << 13;
                        seed ^= seed >> 7;
                        seed ^= seed << 17;
                        // Mostly field bytes, sometimes a control, DEL, tab or obs-text.
                        match seed % 16 {
                            0 => (seed >> 8) as u8 % 0x20,
                            1 => 0x7f,
                            2 => b'\t',
                            3 => 0x80 | (seed >> 8) as u8,
                            _ => b' ' + (seed >> 8) as u8 % 0x5f,
                        }
                    })
                    .collect();
                let one = v.iter().all(|&b| super::is_field_byte(b));
                assert_eq!(super::all_field_bytes(&v), one, "{v:?}");
            }
        }
    }

    #[test]
    fn tchar_table_is_rfc_9110s() {
        for b in 0..=255u8 {
            let want = b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
            assert_eq!(super::is_tchar(b), want, "{b:#x}");
        }
    }
}
