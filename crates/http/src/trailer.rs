//! Which fields may be passed on as trailers: the one list every proxy path uses (HTTP/1.1
//! chunked trailer sections either way, HTTP/2 trailers either way, gRPC's).

use crate::upstream::is_client_cert_field;

/// Fields that must never travel as trailers, and are dropped from every trailer section
/// ringx passes on, in both directions (RFC 9110 §6.5.1: "Many fields cannot be processed
/// outside the header section because their evaluation is necessary prior to receiving the
/// content, such as those that describe message framing, routing, authentication, request
/// modifiers, response controls, or content format."; a recipient may merge trailers into
/// the header section (§6.5.2), so one passed on could override what the proxy checked or
/// wrote in the header section). The list follows RFC 7230 §4.1.2's and Go's HTTP/2
/// `badTrailer` (authorization, cache-control, connection, content-encoding,
/// content-length, content-range, content-type, expect, host, keep-alive, max-forwards,
/// pragma, proxy-authenticate, proxy-authorization, proxy-connection, range, te, trailer,
/// transfer-encoding, www-authenticate), with what else belongs to the same classes or to
/// the proxy alone:
///
/// - framing and connection (the proxy writes its own framing; RFC 9110 §7.6.1, RFC 9113
///   §8.2.2): `content-length`, `transfer-encoding`, `trailer`, `connection`, `keep-alive`,
///   `proxy-connection`, `te`, `upgrade`, `http2-settings`;
/// - content format, needed before the content is read: `content-type`, `content-encoding`,
///   `content-range`;
/// - routing and request modifiers: `host`, `max-forwards`, `expect`, `range`, `if-match`,
///   `if-none-match`, `if-modified-since`, `if-unmodified-since`, `if-range`;
/// - authentication and state (credentials checked, or set, from the header section):
///   `authorization`, `proxy-authorization`, `www-authenticate`, `proxy-authenticate`,
///   `cookie`, `set-cookie`; `authentication-info` stays (RFC 9110 §11.6.3 allows it as a
///   trailer);
/// - response and cache controls: `cache-control`, `pragma`, `expires`, `age`, `vary`,
///   `location`, `retry-after`;
/// - what the proxy alone writes about the client: `forwarded`, `x-forwarded-*`,
///   `x-real-ip`, `x-ssl-client-*` (see [`is_client_cert_field`]).
///
/// gRPC's own trailers (`grpc-status`, `grpc-message`, `grpc-status-details-bin`) and any
/// other field (`x-checksum`, `server-timing`) pass.
///
/// nginx 1.22 passes no request trailer on: an HTTP/2 request with trailers gets GOAWAY
/// PROTOCOL_ERROR, an HTTP/1.1 chunked one reaches the upstream de-chunked, its trailer
/// section dropped; `grpc_pass` passes the upstream's trailers to the client.
pub fn is_forbidden_trailer(name: &[u8]) -> bool {
    const NOT_TRAILERS: [&[u8]; 43] = [
        b"content-length",
        b"transfer-encoding",
        b"trailer",
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"te",
        b"upgrade",
        b"http2-settings",
        b"content-type",
        b"content-encoding",
        b"content-range",
        b"host",
        b"max-forwards",
        b"expect",
        b"range",
        b"if-match",
        b"if-none-match",
        b"if-modified-since",
        b"if-unmodified-since",
        b"if-range",
        b"authorization",
        b"proxy-authorization",
        b"www-authenticate",
        b"proxy-authenticate",
        b"cookie",
        b"set-cookie",
        b"cache-control",
        b"pragma",
        b"expires",
        b"age",
        b"vary",
        b"location",
        b"retry-after",
        b"forwarded",
        b"x-real-ip",
        b"x-forwarded-for",
        b"x-forwarded-proto",
        b"x-forwarded-host",
        b"x-forwarded-port",
        b"x-forwarded-prefix",
        b"x-forwarded-server",
        b"x-forwarded-ssl",
    ];
    const FORWARDED: &[u8] = b"x-forwarded-";
    NOT_TRAILERS.iter().any(|n| name.eq_ignore_ascii_case(n))
        || (name.len() >= FORWARDED.len()
            && name[..FORWARDED.len()].eq_ignore_ascii_case(FORWARDED))
        || std::str::from_utf8(name).is_ok_and(is_client_cert_field)
}

/// The field lines of a trailer section (`name: value`, each ending in CRLF, as the chunked
/// decoder keeps them or HTTP/2 trailers are written as lines) without those that must not
/// be trailers ([`is_forbidden_trailer`]).
pub fn allowed_lines(lines: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(lines.len());
    for line in lines.split_inclusive(|&b| b == b'\n') {
        let name = line.split(|&b| b == b':').next().unwrap_or(line);
        if line.contains(&b':') && !is_forbidden_trailer(name.trim_ascii()) {
            out.extend_from_slice(line);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forbidden_fields_are_not_trailers() {
        for n in [
            "Host",
            "authorization",
            "X-Forwarded-For",
            "x-forwarded-anything",
            "content-length",
            "TE",
            "cookie",
            "Set-Cookie",
            "expect",
            "trailer",
            "Transfer-Encoding",
            "connection",
            "content-type",
            "if-none-match",
            "cache-control",
            "x-ssl-client-verify",
            "forwarded",
            "x-real-ip",
        ] {
            assert!(is_forbidden_trailer(n.as_bytes()), "{n}");
        }
        for n in [
            "x-checksum",
            "grpc-status",
            "grpc-message",
            "grpc-status-details-bin",
            "server-timing",
            "authentication-info",
            "x-forwarded",
            "hostname",
            "digest",
        ] {
            assert!(!is_forbidden_trailer(n.as_bytes()), "{n}");
        }
    }

    #[test]
    fn lines_keep_only_allowed_fields() {
        let lines = b"X-Checksum: abc\r\nHost: evil\r\nauthorization: x\r\n\
                      grpc-status: 0\r\nX-Forwarded-For: 6.6.6.6\r\nContent-Length: 9\r\n";
        assert_eq!(
            allowed_lines(lines),
            b"X-Checksum: abc\r\ngrpc-status: 0\r\n".to_vec()
        );
        assert_eq!(allowed_lines(b""), b"".to_vec());
    }
}
