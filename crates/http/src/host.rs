//! `Host` / authority validation (RFC 9110 §7.2, RFC 3986 §3.2.2).
//!
//! ```text
//! host        = uri-host [ ":" port ]
//! uri-host    = IP-literal / IPv4address / reg-name
//! IP-literal  = "[" ( IPv6address / IPvFuture ) "]"
//! IPvFuture   = "v" 1*HEXDIG "." 1*( unreserved / sub-delims / ":" )
//! reg-name    = *( unreserved / pct-encoded / sub-delims )
//! port        = *DIGIT
//! ```
//!
//! IPv4address is a subset of reg-name, so it needs no separate rule. We
//! are stricter than the grammar in two places, because the `http` and
//! `https` schemes forbid an empty host (RFC 9110 §4.2.1) and a port must
//! fit in 16 bits: an empty host and a port above 65535 are invalid.

use std::net::Ipv6Addr;

/// Byte classes of the host grammar, one table lookup per byte: every request's `Host` is
/// checked, so this runs once per request on the hot path.
const REG: u8 = 1; // unreserved / sub-delims: a reg-name byte on its own
const HEX: u8 = 2;
const DIGIT: u8 = 4;

static CLASS: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        let b = i as u8;
        let mut c = 0;
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') || is_sub_delim(b) {
            c |= REG;
        }
        if b.is_ascii_hexdigit() {
            c |= HEX;
        }
        if b.is_ascii_digit() {
            c |= DIGIT;
        }
        t[i] = c;
        i += 1;
    }
    t
};

#[inline]
fn class(b: u8) -> u8 {
    CLASS[b as usize]
}

/// Whether `b` is a valid `uri-host [ ":" port ]` (no userinfo). Every byte of a valid host
/// is ASCII, which is why `Request::host` can stay bytes: nothing on the request path has to
/// turn it into `str`, which would cost a UTF-8 check per request for nothing.
pub(crate) fn is_valid_host(b: &[u8]) -> bool {
    let port_at = if b.first() == Some(&b'[') {
        let Some(close) = memchr::memchr(b']', b) else {
            return false;
        };
        if !is_ip_literal(&b[1..close]) {
            return false;
        }
        close + 1
    } else {
        // reg-name, in one pass up to the port's colon.
        let mut i = 0;
        while i < b.len() {
            let c = b[i];
            if class(c) & REG != 0 {
                i += 1;
            } else if c == b'%' {
                let hex = |j: usize| b.get(j).is_some_and(|&h| class(h) & HEX != 0);
                if !(hex(i + 1) && hex(i + 2)) {
                    return false;
                }
                i += 3;
            } else if c == b':' {
                break;
            } else {
                return false;
            }
        }
        if i == 0 {
            return false; // the http(s) schemes forbid an empty host
        }
        i
    };
    match &b[port_at..] {
        [] => true,
        [b':', port @ ..] => is_valid_port(port),
        // Anything other than ":port" after the host.
        _ => false,
    }
}

/// Splits `host[:port]` into the host (IP-literals keep their brackets) and
/// the port text, if a `:` is present.
pub(crate) fn split_port(b: &[u8]) -> (&[u8], Option<&[u8]>) {
    let host_end = if b.first() == Some(&b'[') {
        memchr::memchr(b']', b).map_or(b.len(), |i| i + 1)
    } else {
        crate::bytes::find_byte(b':', b).unwrap_or(b.len())
    };
    let (host, rest) = b.split_at(host_end);
    match rest.strip_prefix(b":") {
        Some(port) => (host, Some(port)),
        None if rest.is_empty() => (host, None),
        // Anything other than ":port" after the host comes back as the port text; callers
        // that validate reject it (`is_valid_host`).
        None => (host, Some(rest)),
    }
}

/// Empty, or at most five digits with a value that fits in 16 bits.
fn is_valid_port(port: &[u8]) -> bool {
    if port.len() > 5 {
        return false;
    }
    let mut v: u32 = 0;
    for &d in port {
        if class(d) & DIGIT == 0 {
            return false;
        }
        v = v * 10 + u32::from(d - b'0');
    }
    v <= 65535
}

fn is_ip_literal(inner: &[u8]) -> bool {
    if let [b'v' | b'V', future @ ..] = inner {
        let Some(dot) = memchr::memchr(b'.', future) else {
            return false;
        };
        let (version, rest) = (&future[..dot], &future[dot + 1..]);
        !version.is_empty()
            && version.iter().all(|&b| class(b) & HEX != 0)
            && !rest.is_empty()
            && rest.iter().all(|&b| class(b) & REG != 0 || b == b':')
    } else {
        // std's parser implements the RFC 4291 text forms used by RFC 3986
        // (no zone identifiers). It takes text: anything non-ASCII is invalid anyway.
        inner.is_ascii() && std::str::from_utf8(inner).is_ok_and(|t| t.parse::<Ipv6Addr>().is_ok())
    }
}

const fn is_sub_delim(b: u8) -> bool {
    matches!(
        b,
        b'!' | b'$' | b'&' | b'\'' | b'(' | b')' | b'*' | b'+' | b',' | b';' | b'='
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn valid(s: &str) -> bool {
        is_valid_host(s.as_bytes())
    }

    #[test]
    fn hosts() {
        for ok in [
            "example.com",
            "example.com:80",
            "example.com:",
            "127.0.0.1:8080",
            "[::1]",
            "[::1]:443",
            "[2001:db8::ffff:1.2.3.4]",
            "[v1.fe:80]",
            "a%2Eb",
            "xn--bcher-kva.example",
            "EXAMPLE.com",
        ] {
            assert!(valid(ok), "{ok}");
        }
        for bad in [
            "",
            ":80",
            "a b",
            "user@host",
            "host:80:80",
            "host:99999",
            "host:123456",
            "host:8a",
            "[::1",
            "::1",
            "[::1]x",
            "[::1]:x",
            "[::1]80",
            "[v1.x]443",
            "[fe80::1%25eth0]",
            "[v.x]",
            "[v1.]",
            "a%zz",
            "a%2",
            "a/b",
            "a?b",
            "a#b",
            "ex\u{e4}mple.com",
        ] {
            assert!(!valid(bad), "{bad}");
        }
    }

    /// The grammar written out directly, independent of the byte-class table, so that the
    /// property test catches a table that drifts from it (for instance one that takes digits
    /// right after an IP-literal's `]` for a port: `[::1]80`; the grammar has `":" port`).
    fn reference(s: &str) -> bool {
        fn unreserved(b: u8) -> bool {
            b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
        }
        fn reg_name(s: &str) -> bool {
            let b = s.as_bytes();
            let mut i = 0;
            while i < b.len() {
                match b[i] {
                    b'%' => {
                        if !(b.get(i + 1).is_some_and(u8::is_ascii_hexdigit)
                            && b.get(i + 2).is_some_and(u8::is_ascii_hexdigit))
                        {
                            return false;
                        }
                        i += 3;
                    }
                    c if unreserved(c) || is_sub_delim(c) => i += 1,
                    _ => return false,
                }
            }
            true
        }
        let (host, port) = split_port(s.as_bytes());
        fn text(b: &[u8]) -> &str {
            std::str::from_utf8(b).expect("split at an ASCII byte")
        }
        let (host, port) = (text(host), port.map(text));
        let host_ok = match host.strip_prefix('[') {
            Some(literal) => literal.strip_suffix(']').is_some_and(|inner| {
                match inner.strip_prefix(['v', 'V']) {
                    Some(future) => future.split_once('.').is_some_and(|(v, rest)| {
                        !v.is_empty()
                            && v.bytes().all(|b| b.is_ascii_hexdigit())
                            && !rest.is_empty()
                            && rest
                                .bytes()
                                .all(|b| unreserved(b) || is_sub_delim(b) || b == b':')
                    }),
                    None => inner.parse::<Ipv6Addr>().is_ok(),
                }
            }),
            None => !host.is_empty() && reg_name(host),
        };
        let colon_before_port = port.is_none() || s[host.len()..].starts_with(':');
        host_ok
            && colon_before_port
            && port.is_none_or(|p| {
                p.is_empty()
                    || (p.len() <= 5
                        && p.bytes().all(|b| b.is_ascii_digit())
                        && p.parse::<u32>().is_ok_and(|v| v <= 65535))
            })
    }

    proptest::proptest! {
        #[test]
        fn table_matches_the_grammar(s in "[a-zA-Z0-9:%\\[\\].vV~!$&'()*+,;=_@/ -]{0,24}") {
            proptest::prop_assert_eq!(valid(&s), reference(&s), "{:?}", s);
        }

        #[test]
        fn table_matches_the_grammar_after_ip_literals(
            lit in proptest::sample::select(vec!["[::1]", "[v1.x]", "[2001:db8::1]", "[::1", "[]"]),
            rest in "[0-9:a\\]]{0,6}",
        ) {
            let s = format!("{lit}{rest}");
            proptest::prop_assert_eq!(valid(&s), reference(&s), "{:?}", s);
        }

        #[test]
        fn table_matches_the_grammar_on_any_text(s in "\\PC{0,16}") {
            proptest::prop_assert_eq!(valid(&s), reference(&s), "{:?}", s);
        }
    }

    #[test]
    fn ports() {
        for (p, ok) in [
            ("", true),
            ("0", true),
            ("65535", true),
            ("65536", false),
            ("00080", true),
            ("123456", false),
            ("8a", false),
        ] {
            assert_eq!(valid(&format!("h:{p}")), ok, "{p}");
            assert_eq!(reference(&format!("h:{p}")), ok, "{p}");
        }
    }

    #[test]
    fn split() {
        let split = |s: &'static str| split_port(s.as_bytes());
        assert_eq!(split("a:1"), (&b"a"[..], Some(&b"1"[..])));
        assert_eq!(split("a"), (&b"a"[..], None));
        assert_eq!(split("[::1]:8"), (&b"[::1]"[..], Some(&b"8"[..])));
        assert_eq!(split("[::1]"), (&b"[::1]"[..], None));
    }

    // `Request::host` is handed out as bytes on the promise that a valid host is ASCII. Uniform
    // random bytes almost never form a valid host, so the bytes are mostly host characters
    // (hex digits for `%XX`, brackets and colons for IP-literals and ports) with non-ASCII ones
    // mixed in.
    fn host_bytes() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
        use proptest::prelude::*;
        proptest::collection::vec(
            prop_oneof![
                6 => proptest::sample::select(b"ab09.-_~!:[]%fFvV".to_vec()),
                1 => 0x80u8..=0xff,
            ],
            0..24,
        )
    }

    proptest::proptest! {
        #[test]
        fn valid_hosts_are_ascii(b in host_bytes()) {
            if is_valid_host(&b) {
                proptest::prop_assert!(b.is_ascii(), "{:?}", b);
            }
        }
    }
}
