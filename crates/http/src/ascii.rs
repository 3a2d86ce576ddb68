//! Case-insensitive comparison of field names with the names the server knows, on the hot
//! path of every request and proxied response.

/// Whether `name` equals `lower` in any case: the same answer as
/// `name.eq_ignore_ascii_case(lower)` where `lower` is made of lowercase ASCII letters, digits
/// and `-` (a field name or token as the server spells it), compared eight bytes at a time.
///
/// Each byte of `name` is ORed with 0x20 where `lower` has a letter (bit 6 set), and with
/// nothing where it has a digit or `-`, then compared: a letter matches itself and its
/// uppercase (which differs by 0x20 alone), anything else only itself.
#[inline(always)]
pub(crate) fn eq_lower(name: &[u8], lower: &[u8]) -> bool {
    debug_assert!(lower
        .iter()
        .all(|&b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'));
    let n = lower.len();
    if name.len() != n {
        return false;
    }
    if n < 8 {
        return name
            .iter()
            .zip(lower)
            .all(|(&a, &b)| a | ((b & 0x40) >> 1) == b);
    }
    let mut i = 0;
    while i + 8 <= n {
        if !word_eq(name, lower, i) {
            return false;
        }
        i += 8;
    }
    // The tail: the last eight bytes, overlapping what was compared.
    i == n || word_eq(name, lower, n - 8)
}

#[inline(always)]
fn word_eq(name: &[u8], lower: &[u8], at: usize) -> bool {
    let word = |s: &[u8]| u64::from_le_bytes(s[at..at + 8].try_into().expect("eight bytes"));
    let l = word(lower);
    word(name) | ((l & 0x4040_4040_4040_4040) >> 1) == l
}

#[cfg(test)]
mod tests {
    use super::eq_lower;

    #[test]
    fn same_as_eq_ignore_ascii_case() {
        let lowers: &[&[u8]] = &[
            b"",
            b"te",
            b"host",
            b"expect",
            b"upgrade",
            b"connection",
            b"content-length",
            b"transfer-encoding",
            b"x-forwarded-for",
            b"proxy-connection",
            b"100-continue",
        ];
        for &l in lowers {
            // Every single-byte change of the name, and its case variants.
            let mut names: Vec<Vec<u8>> = vec![l.to_vec(), l.to_ascii_uppercase()];
            for i in 0..l.len() {
                for b in 0..=255u8 {
                    let mut n = l.to_vec();
                    n[i] = b;
                    names.push(n.clone());
                    names.push(n.to_ascii_uppercase());
                }
            }
            names.push(l.iter().chain(b"x").copied().collect());
            if !l.is_empty() {
                names.push(l[1..].to_vec());
            }
            for n in &names {
                assert_eq!(eq_lower(n, l), n.eq_ignore_ascii_case(l), "{n:?} vs {l:?}");
            }
        }
    }
}
