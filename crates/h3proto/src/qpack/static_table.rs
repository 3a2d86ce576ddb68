//! The QPACK static table (RFC 9204 Appendix A): 99 entries, indexed from 0, chosen from
//! the fields most common on the web in 2018. Unlike HPACK's it is not shared with the
//! dynamic table's index space: a field line says which table it refers to.

/// The entries, by index.
pub const STATIC: [(&[u8], &[u8]); 99] = [
    (b":authority", b""),
    (b":path", b"/"),
    (b"age", b"0"),
    (b"content-disposition", b""),
    (b"content-length", b"0"),
    (b"cookie", b""),
    (b"date", b""),
    (b"etag", b""),
    (b"if-modified-since", b""),
    (b"if-none-match", b""),
    (b"last-modified", b""),
    (b"link", b""),
    (b"location", b""),
    (b"referer", b""),
    (b"set-cookie", b""),
    (b":method", b"CONNECT"),
    (b":method", b"DELETE"),
    (b":method", b"GET"),
    (b":method", b"HEAD"),
    (b":method", b"OPTIONS"),
    (b":method", b"POST"),
    (b":method", b"PUT"),
    (b":scheme", b"http"),
    (b":scheme", b"https"),
    (b":status", b"103"),
    (b":status", b"200"),
    (b":status", b"304"),
    (b":status", b"404"),
    (b":status", b"503"),
    (b"accept", b"*/*"),
    (b"accept", b"application/dns-message"),
    (b"accept-encoding", b"gzip, deflate, br"),
    (b"accept-ranges", b"bytes"),
    (b"access-control-allow-headers", b"cache-control"),
    (b"access-control-allow-headers", b"content-type"),
    (b"access-control-allow-origin", b"*"),
    (b"cache-control", b"max-age=0"),
    (b"cache-control", b"max-age=2592000"),
    (b"cache-control", b"max-age=604800"),
    (b"cache-control", b"no-cache"),
    (b"cache-control", b"no-store"),
    (b"cache-control", b"public, max-age=31536000"),
    (b"content-encoding", b"br"),
    (b"content-encoding", b"gzip"),
    (b"content-type", b"application/dns-message"),
    (b"content-type", b"application/javascript"),
    (b"content-type", b"application/json"),
    (b"content-type", b"application/x-www-form-urlencoded"),
    (b"content-type", b"image/gif"),
    (b"content-type", b"image/jpeg"),
    (b"content-type", b"image/png"),
    (b"content-type", b"text/css"),
    (b"content-type", b"text/html; charset=utf-8"),
    (b"content-type", b"text/plain"),
    (b"content-type", b"text/plain;charset=utf-8"),
    (b"range", b"bytes=0-"),
    (b"strict-transport-security", b"max-age=31536000"),
    (
        b"strict-transport-security",
        b"max-age=31536000; includesubdomains",
    ),
    (
        b"strict-transport-security",
        b"max-age=31536000; includesubdomains; preload",
    ),
    (b"vary", b"accept-encoding"),
    (b"vary", b"origin"),
    (b"x-content-type-options", b"nosniff"),
    (b"x-xss-protection", b"1; mode=block"),
    (b":status", b"100"),
    (b":status", b"204"),
    (b":status", b"206"),
    (b":status", b"302"),
    (b":status", b"400"),
    (b":status", b"403"),
    (b":status", b"421"),
    (b":status", b"425"),
    (b":status", b"500"),
    (b"accept-language", b""),
    (b"access-control-allow-credentials", b"FALSE"),
    (b"access-control-allow-credentials", b"TRUE"),
    (b"access-control-allow-headers", b"*"),
    (b"access-control-allow-methods", b"get"),
    (b"access-control-allow-methods", b"get, post, options"),
    (b"access-control-allow-methods", b"options"),
    (b"access-control-expose-headers", b"content-length"),
    (b"access-control-request-headers", b"content-type"),
    (b"access-control-request-method", b"get"),
    (b"access-control-request-method", b"post"),
    (b"alt-svc", b"clear"),
    (b"authorization", b""),
    (
        b"content-security-policy",
        b"script-src 'none'; object-src 'none'; base-uri 'none'",
    ),
    (b"early-data", b"1"),
    (b"expect-ct", b""),
    (b"forwarded", b""),
    (b"if-range", b""),
    (b"origin", b""),
    (b"purpose", b"prefetch"),
    (b"server", b""),
    (b"timing-allow-origin", b"*"),
    (b"upgrade-insecure-requests", b"1"),
    (b"user-agent", b""),
    (b"x-forwarded-for", b""),
    (b"x-frame-options", b"deny"),
    (b"x-frame-options", b"sameorigin"),
];

/// Entry `i`, if there is one.
pub fn get(i: u64) -> Option<(&'static [u8], &'static [u8])> {
    usize::try_from(i).ok().and_then(|i| STATIC.get(i)).copied()
}

/// What the table has for a field: the index of an entry with this name and value, else of
/// one with this name (the first, whose value is most common), else nothing.
pub fn find(name: &[u8], value: &[u8]) -> Option<(usize, bool)> {
    // Every field of every response is looked up here. The names are grouped by length
    // (at most six share one), so a lookup compares a few names of the right length, most
    // of them told apart by their first byte, rather than a sorted search's memcmp calls.
    let entries = by_length()
        .get(name.len())?
        .iter()
        .find(|e| e.0 == name)?
        .1
        .as_slice();
    let exact = entries.iter().find(|&&i| STATIC[usize::from(i)].1 == value);
    Some(match exact {
        Some(&i) => (usize::from(i), true),
        None => (usize::from(entries[0]), false),
    })
}

/// The table's names by length, each with its entries in table order.
#[allow(clippy::type_complexity)]
fn by_length() -> &'static [Vec<(&'static [u8], Vec<u8>)>] {
    static INDEX: std::sync::OnceLock<Vec<Vec<(&'static [u8], Vec<u8>)>>> =
        std::sync::OnceLock::new();
    INDEX.get_or_init(|| {
        let longest = STATIC.iter().map(|e| e.0.len()).max().unwrap_or(0);
        let mut idx: Vec<Vec<(&'static [u8], Vec<u8>)>> = vec![Vec::new(); longest + 1];
        for (i, &(n, _)) in STATIC.iter().enumerate() {
            let same = &mut idx[n.len()];
            match same.iter_mut().find(|e| e.0 == n) {
                Some(e) => e.1.push(i as u8),
                None => same.push((n, vec![i as u8])),
            }
        }
        idx
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_rfc9204_appendix_a() {
        assert_eq!(STATIC.len(), 99);
        assert_eq!(get(0), Some((&b":authority"[..], &b""[..])));
        assert_eq!(get(1), Some((&b":path"[..], &b"/"[..])));
        assert_eq!(get(17), Some((&b":method"[..], &b"GET"[..])));
        assert_eq!(get(25), Some((&b":status"[..], &b"200"[..])));
        assert_eq!(get(63), Some((&b":status"[..], &b"100"[..])));
        assert_eq!(
            get(85),
            Some((
                &b"content-security-policy"[..],
                &b"script-src 'none'; object-src 'none'; base-uri 'none'"[..]
            ))
        );
        assert_eq!(get(98), Some((&b"x-frame-options"[..], &b"sameorigin"[..])));
        assert_eq!(get(99), None);
        assert_eq!(get(u64::MAX), None);
        // Names are lowercase tokens, as every field name sent must be.
        for (n, _) in STATIC {
            let n = n.strip_prefix(b":").unwrap_or(n);
            assert!(n.iter().all(|b| b.is_ascii_lowercase() || *b == b'-'));
        }
    }

    #[test]
    fn fields_are_found() {
        assert_eq!(find(b":method", b"GET"), Some((17, true)));
        assert_eq!(find(b":status", b"201"), Some((24, false)));
        assert_eq!(find(b"content-type", b"text/plain"), Some((53, true)));
        assert_eq!(find(b"x-unknown", b""), None);
    }

    /// The index finds what a walk along the whole table finds: for every entry, and for
    /// every name with a value the table does not have.
    #[test]
    fn the_index_agrees_with_the_table() {
        let walk = |name: &[u8], value: &[u8]| {
            let exact = STATIC.iter().position(|&(n, v)| n == name && v == value);
            let named = STATIC.iter().position(|&(n, _)| n == name);
            exact.map(|i| (i, true)).or(named.map(|i| (i, false)))
        };
        for (n, v) in STATIC {
            assert_eq!(find(n, v), walk(n, v));
            assert_eq!(find(n, b"\x00other"), walk(n, b"\x00other"));
        }
    }
}
