//! The bytes of HTTP's grammar shared by the parsers: the character classes of RFC 9110
//! §5.6 and a byte search tuned for the short fields of a head.

/// The first `needle` in `hay`. Heads' short fields (a target's query mark, a Host's port) are
/// searched on every request: below 32 bytes a byte loop finishes before memchr's vector
/// search has paid its set-up, so memchr is kept for longer input only.
pub(crate) fn find_byte(needle: u8, hay: &[u8]) -> Option<usize> {
    if hay.len() <= 32 {
        hay.iter().position(|&b| b == needle)
    } else {
        memchr::memchr(needle, hay)
    }
}

/// `tchar` (RFC 9110 §5.6.2).
pub(crate) fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric()
        || matches!(
            b,
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
        )
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
