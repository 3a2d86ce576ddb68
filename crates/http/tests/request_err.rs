//! Table of malformed, ambiguous and smuggling-prone requests with the
//! status each must be rejected with.

mod common;

use common::parse_with;
use ringx_http::Limits;

fn big(prefix: &str, fill: usize, suffix: &str) -> Vec<u8> {
    let mut v = prefix.as_bytes().to_vec();
    v.resize(v.len() + fill, b'a');
    v.extend_from_slice(suffix.as_bytes());
    v
}

fn many_headers(n: usize) -> Vec<u8> {
    let mut v = b"GET / HTTP/1.1\r\nHost: h\r\n".to_vec();
    for i in 1..n {
        v.extend_from_slice(format!("X-{i}: v\r\n").as_bytes());
    }
    v.extend_from_slice(b"\r\n");
    v
}

/// (name, raw request, expected status)
fn cases() -> Vec<(&'static str, Vec<u8>, u16)> {
    let s = |name: &'static str, raw: &[u8], status: u16| (name, raw.to_vec(), status);
    vec![
        // --- Transfer-Encoding / Content-Length (RFC 9112 §6.1, §6.3) ---
        s("CL + TE", b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", 400),
        s("TE + CL", b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nContent-Length: 0\r\n\r\n", 400),
        s("TE: chunked, chunked", b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked, chunked\r\n\r\n", 501),
        s("TE chunked in two lines", b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", 501),
        s("TE: gzip, chunked", b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501),
        s("TE: gzip + TE: chunked", b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n", 501),
        s("TE: xchunked", b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: xchunked\r\n\r\n", 400),
        s("TE: chunked, gzip", b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked, gzip\r\n\r\n", 400),
        s("TE: chunked + TE: identity", b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n\r\n", 400),
        s("TE: gzip", b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip\r\n\r\n", 400),
        s("TE empty", b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding:\r\n\r\n", 400),
        s("TE only commas", b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: , ,\r\n\r\n", 400),
        s("TE empty line + chunked", b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: \r\nTransfer-Encoding: chunked\r\n\r\n", 400),
        s("TE: chunked;x=1", b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked;x=1\r\n\r\n", 400),
        s("TE: \"chunked\"", b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: \"chunked\"\r\n\r\n", 400),
        s("TE: chunked junk", b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked junk\r\n\r\n", 400),
        s("TE with vertical tab", b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: \x0bchunked\r\n\r\n", 400),
        s("TE in HTTP/1.0", b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400),
        s("TE in HTTP/1.0 with CL", b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n", 400),
        s("duplicate CL, same value", b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n", 400),
        s("duplicate CL, different case", b"POST / HTTP/1.1\r\nHost: h\r\ncontent-length: 5\r\nCONTENT-LENGTH: 6\r\n\r\n", 400),
        s("CL list", b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5, 5\r\n\r\n", 400),
        s("CL +5", b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: +5\r\n\r\n", 400),
        s("CL -5", b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: -5\r\n\r\n", 400),
        s("CL space inside", b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1 0\r\n\r\n", 400),
        s("CL hex", b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 0x5\r\n\r\n", 400),
        s("CL letters", b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: five\r\n\r\n", 400),
        s("CL empty", b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length:\r\n\r\n", 400),
        s("CL overflow", b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 18446744073709551616\r\n\r\n", 400),
        s("CL decimal", b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5.0\r\n\r\n", 400),
        // --- field syntax (RFC 9112 §5) ---
        s("space before colon", b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length : 5\r\n\r\n", 400),
        s("tab before colon", b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding\t: chunked\r\n\r\n", 400),
        s("obs-fold", b"GET / HTTP/1.1\r\nHost: h\r\nX: a\r\n b\r\n\r\n", 400),
        s("obs-fold with tab", b"GET / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip,\r\n\tchunked\r\n\r\n", 400),
        s("whitespace before first header", b"GET / HTTP/1.1\r\n Host: h\r\n\r\n", 400),
        s("empty header name", b"GET / HTTP/1.1\r\nHost: h\r\n: x\r\n\r\n", 400),
        s("invalid header name", b"GET / HTTP/1.1\r\nHost: h\r\nX@Y: 1\r\n\r\n", 400),
        s("header line without colon", b"GET / HTTP/1.1\r\nHost: h\r\nJunk\r\n\r\n", 400),
        s("control byte in value", b"GET / HTTP/1.1\r\nHost: h\r\nX: a\x01b\r\n\r\n", 400),
        s("DEL in value", b"GET / HTTP/1.1\r\nHost: h\r\nX: a\x7fb\r\n\r\n", 400),
        s("ESC in value", b"GET / HTTP/1.1\r\nHost: h\r\nX: \x1b[0m\r\n\r\n", 400),
        // --- bare CR and NUL (RFC 9112 §2.2) ---
        s("bare CR in value", b"GET / HTTP/1.1\r\nHost: h\r\nX: a\rb\r\n\r\n", 400),
        s("bare CR after request line", b"GET / HTTP/1.1\rHost: h\r\n\r\n", 400),
        s("bare CR in leading empty line", b"\rGET / HTTP/1.1\r\nHost: h\r\n\r\n", 400),
        s("bare CR at end of head", b"GET / HTTP/1.1\r\nHost: h\r\n\r\r\n", 400),
        s("bare CR in target", b"GET /a\rb HTTP/1.1\r\nHost: h\r\n\r\n", 400),
        s("NUL in value", b"GET / HTTP/1.1\r\nHost: h\r\nX: a\0b\r\n\r\n", 400),
        s("NUL in target", b"GET /a\0b HTTP/1.1\r\nHost: h\r\n\r\n", 400),
        s("NUL in name", b"GET / HTTP/1.1\r\nHost: h\r\nX\0: b\r\n\r\n", 400),
        s("NUL before request", b"\0GET / HTTP/1.1\r\nHost: h\r\n\r\n", 400),
        // --- Host (RFC 9112 §3.2) ---
        s("missing Host", b"GET / HTTP/1.1\r\n\r\n", 400),
        s("missing Host with absolute-form", b"GET http://a/ HTTP/1.1\r\n\r\n", 400),
        s("duplicate Host", b"GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n", 400),
        s("duplicate Host in HTTP/1.0", b"GET / HTTP/1.0\r\nHost: a\r\nhost: b\r\n\r\n", 400),
        s("empty Host", b"GET / HTTP/1.1\r\nHost:\r\n\r\n", 400),
        s("Host with space", b"GET / HTTP/1.1\r\nHost: a b\r\n\r\n", 400),
        s("Host with userinfo", b"GET / HTTP/1.1\r\nHost: u@a\r\n\r\n", 400),
        s("Host with path", b"GET / HTTP/1.1\r\nHost: a/b\r\n\r\n", 400),
        s("Host bad port", b"GET / HTTP/1.1\r\nHost: a:99999\r\n\r\n", 400),
        s("Host unclosed IPv6", b"GET / HTTP/1.1\r\nHost: [::1\r\n\r\n", 400),
        s("Host non-ASCII", b"GET / HTTP/1.1\r\nHost: \xc3\xa4.example\r\n\r\n", 400),
        // --- request-target forms (RFC 9112 §3.2) ---
        s("absolute-form ftp", b"GET ftp://a/x HTTP/1.1\r\nHost: a\r\n\r\n", 400),
        s("absolute-form userinfo", b"GET http://user:pw@a/x HTTP/1.1\r\nHost: a\r\n\r\n", 400),
        s("absolute-form empty host", b"GET http:///x HTTP/1.1\r\nHost: a\r\n\r\n", 400),
        s("absolute-form without //", b"GET http:/x HTTP/1.1\r\nHost: a\r\n\r\n", 400),
        s("absolute-form bad authority", b"GET http://a%zz/ HTTP/1.1\r\nHost: a\r\n\r\n", 400),
        s("relative target", b"GET x/y HTTP/1.1\r\nHost: a\r\n\r\n", 400),
        s("asterisk-form with GET", b"GET * HTTP/1.1\r\nHost: a\r\n\r\n", 400),
        s("authority-form with GET", b"GET a.example:443 HTTP/1.1\r\nHost: a\r\n\r\n", 400),
        s("CONNECT with origin-form", b"CONNECT / HTTP/1.1\r\nHost: a\r\n\r\n", 400),
        s("CONNECT without port", b"CONNECT a.example HTTP/1.1\r\nHost: a\r\n\r\n", 400),
        s("CONNECT with userinfo", b"CONNECT u@a.example:443 HTTP/1.1\r\nHost: a\r\n\r\n", 400),
        s("fragment in target", b"GET /a#b HTTP/1.1\r\nHost: a\r\n\r\n", 400),
        s("non-ASCII target", b"GET /\xc3\xa4 HTTP/1.1\r\nHost: a\r\n\r\n", 400),
        // --- request line and version (RFC 9112 §2.3, §3) ---
        s("HTTP/2.0", b"GET / HTTP/2.0\r\nHost: a\r\n\r\n", 505),
        s("HTTP/1.2", b"GET / HTTP/1.2\r\nHost: a\r\n\r\n", 505),
        s("HTTP/0.9", b"GET / HTTP/0.9\r\n\r\n", 505),
        s("HTTP/3.0 with LF", b"GET / HTTP/3.0\n\n", 505),
        s("garbage version", b"GET / FOO/1.1\r\nHost: a\r\n\r\n", 400),
        s("lowercase version", b"GET / http/1.1\r\nHost: a\r\n\r\n", 400),
        s("version without minor", b"GET / HTTP/2\r\nHost: a\r\n\r\n", 400),
        s("two-digit major", b"GET / HTTP/10.1\r\nHost: a\r\n\r\n", 400),
        s("version with trailing space", b"GET / HTTP/1.1 \r\nHost: a\r\n\r\n", 400),
        s("missing version", b"GET /\r\nHost: a\r\n\r\n", 400),
        s("double space in request line", b"GET  / HTTP/1.1\r\nHost: a\r\n\r\n", 400),
        s("tab in request line", b"GET\t/ HTTP/1.1\r\nHost: a\r\n\r\n", 400),
        s("invalid method", b"G(T / HTTP/1.1\r\nHost: a\r\n\r\n", 400),
        s("empty request line then junk", b"\r\n \r\n", 400),
        // --- Expect (RFC 9110 §10.1.1) ---
        s("Expect: foo", b"GET / HTTP/1.1\r\nHost: a\r\nExpect: foo\r\n\r\n", 417),
        s("Expect list with unknown", b"GET / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue, foo\r\n\r\n", 417),
        s("Expect empty", b"GET / HTTP/1.1\r\nHost: a\r\nExpect:\r\n\r\n", 417),
        s("Expect 100-continue with parameter", b"GET / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue;x=1\r\n\r\n", 417),
        // --- limits ---
        ("URI too long", big("GET /", 8192, " HTTP/1.1\r\nHost: a\r\n\r\n"), 414),
        ("URI too long, request line incomplete", big("GET /", 8192, ""), 414),
        ("URI too long, head incomplete", big("GET /", 8192, " HTTP/1.1\r\nHost: a\r\n"), 414),
        ("URI too long in absolute-form", big("GET http://a/", 8192, " HTTP/1.1\r\nHost: a\r\n\r\n"), 414),
        ("head too large", big("GET / HTTP/1.1\r\nHost: a\r\nX: ", 16384, "\r\n\r\n"), 431),
        ("head too large, incomplete", big("GET / HTTP/1.1\r\nHost: a\r\nX: ", 16384, ""), 431),
        ("endless leading empty lines", b"\r\n".repeat(8193), 431),
        ("too many headers", many_headers(101), 431),
        // --- method length (RFC 9112 §3; issue 26: a 10 KB method was forwarded) ---
        ("10 KB method", big("", 10240, " / HTTP/1.1\r\nHost: a\r\n\r\n"), 501),
        ("33-byte method, request line incomplete", big("", 33, ""), 501),
        ("long method before a long target", big(&"M".repeat(40), 9000, " HTTP/1.1\r\n\r\n"), 501),
        ("long method before an invalid byte", big("", 40, "( / HTTP/1.1\r\n\r\n"), 501),
    ]
}

#[test]
fn malformed_requests() {
    let cases = cases();
    assert!(cases.len() >= 40);
    for (name, raw, status) in &cases {
        match parse_with(raw, &Limits::default()) {
            Err(e) => assert_eq!(e.status, *status, "{name}: {e}"),
            Ok(r) => panic!("{name}: accepted: {r:?}"),
        }
    }
}

/// Every prefix of a bad request is either incomplete or already rejected
/// with the same status: splitting never changes the verdict.
#[test]
fn malformed_requests_split_at_every_byte() {
    for (name, raw, status) in cases() {
        // Long inputs are sampled (every 7th prefix plus the last 64) to keep
        // the quadratic cost down in debug builds.
        let prefixes =
            (0..raw.len()).filter(|k| raw.len() < 1024 || k % 7 == 0 || k + 64 >= raw.len());
        for k in prefixes {
            match parse_with(&raw[..k], &Limits::default()) {
                Ok(None) => {}
                Ok(Some(r)) => panic!("{name} at {k}: accepted {r:?}"),
                Err(e) => assert_eq!(e.status, status, "{name} at {k}: {e}"),
            }
        }
    }
}

#[test]
fn exactly_max_headers_is_fine() {
    assert!(parse_with(&many_headers(100), &Limits::default())
        .unwrap()
        .is_some());
}

#[test]
fn small_limits() {
    let limits = Limits {
        max_head: 64,
        max_uri: 8,
        max_headers: 2,
    };
    let table: &[(&[u8], Option<u16>)] = &[
        (b"GET /1234567 HTTP/1.1\r\nHost: a\r\n\r\n", None),
        (b"GET /12345678 HTTP/1.1\r\nHost: a\r\n\r\n", Some(414)),
        (b"GET /12345678", Some(414)),
        (b"GET /1234567", None),
        (b"GET / HTTP/1.1\r\nHost: a\r\nA: 1\r\n\r\n", None),
        (
            b"GET / HTTP/1.1\r\nHost: a\r\nA: 1\r\nB: 2\r\n\r\n",
            Some(431),
        ),
        (
            b"GET / HTTP/1.1\r\nHost: a\r\nA: 012345678901234567890123456789012\r\n\r\n",
            Some(431),
        ),
        (
            b"GET / HTTP/1.1\r\nHost: a\r\nA: 01234567890123456789012345678901\r\n\r\n",
            None,
        ),
    ];
    for (raw, want) in table {
        let got = parse_with(raw, &limits).map_err(|e| e.status);
        match want {
            None => assert!(got.is_ok(), "{:?}: {got:?}", String::from_utf8_lossy(raw)),
            Some(status) => assert_eq!(
                got.unwrap_err(),
                *status,
                "{:?}",
                String::from_utf8_lossy(raw)
            ),
        }
    }
}

/// Inputs found by `cargo fuzz run parse_request`: a long "target" after an
/// invalid method gave 414 for the whole input but 400 for its prefixes.
#[test]
fn fuzz_regressions() {
    let cases: &[(Limits, &[u8])] = &[
        (
            Limits {
                max_head: 24,
                max_uri: 0,
                max_headers: 0,
            },
            b"\0 \xe4\0\0",
        ),
        (
            Limits {
                max_head: 39,
                max_uri: 3,
                max_headers: 1,
            },
            b" \xff\xff\xff\xff\n",
        ),
        (
            Limits {
                max_uri: 3,
                ..Limits::default()
            },
            b"G(T /abcdef HTTP/1.1\r\n\r\n",
        ),
    ];
    for (limits, raw) in cases {
        for k in 1..=raw.len() {
            match parse_with(&raw[..k], limits) {
                Ok(None) => {}
                other => assert_eq!(other.map_err(|e| e.status), Err(400), "{raw:?} at {k}"),
            }
        }
    }
}

#[test]
fn method_length_bound() {
    let at = |n: usize| format!("{} / HTTP/1.1\r\nHost: a\r\n\r\n", "M".repeat(n));
    assert_eq!(ringx_http::MAX_METHOD_LEN, 32);
    assert!(parse_with(at(32).as_bytes(), &Limits::default())
        .unwrap()
        .is_some());
    let e = parse_with(at(33).as_bytes(), &Limits::default()).unwrap_err();
    assert_eq!((e.status, e.reason), (501, "method too long"));
    // Known to no one yet registered: still forwarded (the proxy passes extension methods on).
    assert!(parse_with(
        b"UPDATEREDIRECTREF / HTTP/1.1\r\nHost: a\r\n\r\n",
        &Limits::default()
    )
    .unwrap()
    .is_some());
}
