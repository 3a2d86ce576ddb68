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

/// Whether `s` is a valid `uri-host [ ":" port ]` (no userinfo).
pub(crate) fn is_valid_host(s: &str) -> bool {
    let (host, port) = split_port(s);
    let host_ok = if let Some(literal) = host.strip_prefix('[') {
        match literal.strip_suffix(']') {
            Some(inner) => is_ip_literal(inner),
            None => false,
        }
    } else {
        !host.is_empty() && is_reg_name(host)
    };
    host_ok
        && match port {
            None => true,
            Some(port) => is_valid_port(port),
        }
}

/// Splits `host[:port]` into the host (IP-literals keep their brackets) and
/// the port text, if a `:` is present.
pub(crate) fn split_port(s: &str) -> (&str, Option<&str>) {
    let host_end = if s.starts_with('[') {
        s.find(']').map_or(s.len(), |i| i + 1)
    } else {
        s.find(':').unwrap_or(s.len())
    };
    let (host, rest) = s.split_at(host_end);
    match rest.strip_prefix(':') {
        Some(port) => (host, Some(port)),
        // Anything other than ":port" after the host makes `port` invalid.
        None if rest.is_empty() => (host, None),
        None => (host, Some(rest)),
    }
}

fn is_valid_port(port: &str) -> bool {
    port.is_empty()
        || (port.len() <= 5
            && port.bytes().all(|b| b.is_ascii_digit())
            && port.parse::<u32>().is_ok_and(|p| p <= 65535))
}

fn is_ip_literal(inner: &str) -> bool {
    if let Some(future) = inner.strip_prefix(['v', 'V']) {
        let Some((version, rest)) = future.split_once('.') else {
            return false;
        };
        !version.is_empty()
            && version.bytes().all(|b| b.is_ascii_hexdigit())
            && !rest.is_empty()
            && rest
                .bytes()
                .all(|b| is_unreserved(b) || is_sub_delim(b) || b == b':')
    } else {
        // std's parser implements the RFC 4291 text forms used by RFC 3986
        // (no zone identifiers).
        inner.parse::<Ipv6Addr>().is_ok()
    }
}

fn is_reg_name(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let ok = b.get(i + 1).is_some_and(u8::is_ascii_hexdigit)
                    && b.get(i + 2).is_some_and(u8::is_ascii_hexdigit);
                if !ok {
                    return false;
                }
                i += 3;
            }
            c if is_unreserved(c) || is_sub_delim(c) => i += 1,
            _ => return false,
        }
    }
    true
}

fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

fn is_sub_delim(b: u8) -> bool {
    matches!(
        b,
        b'!' | b'$' | b'&' | b'\'' | b'(' | b')' | b'*' | b'+' | b',' | b';' | b'='
    )
}

#[cfg(test)]
mod tests {
    use super::*;

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
            assert!(is_valid_host(ok), "{ok}");
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
            assert!(!is_valid_host(bad), "{bad}");
        }
    }

    #[test]
    fn split() {
        assert_eq!(split_port("a:1"), ("a", Some("1")));
        assert_eq!(split_port("a"), ("a", None));
        assert_eq!(split_port("[::1]:8"), ("[::1]", Some("8")));
        assert_eq!(split_port("[::1]"), ("[::1]", None));
    }
}
