//! Table of well-formed requests, checking every field of the result, and
//! the same requests split at every byte boundary.

mod common;

use common::{parse, Owned};
use ringx_http::{parse_request, BodyKind, Limits, Method, Parsed, Version};

struct Case {
    name: &'static str,
    raw: &'static [u8],
    method: Method,
    target: &'static str,
    path: &'static str,
    query: Option<&'static str>,
    version: Version,
    host: Option<&'static str>,
    host_name: Option<&'static str>,
    headers: &'static [(&'static str, &'static [u8])],
    body: BodyKind,
    keep_alive: bool,
    expect_continue: bool,
    /// `None`: the whole input is the head.
    head_len: Option<usize>,
}

const GET: Case = Case {
    name: "",
    raw: b"",
    method: Method::Get,
    target: "/",
    path: "/",
    query: None,
    version: Version::Http11,
    host: Some("h"),
    host_name: Some("h"),
    headers: &[("Host", b"h")],
    body: BodyKind::None,
    keep_alive: true,
    expect_continue: false,
    head_len: None,
};

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "origin-form with query",
            raw: b"GET /index.html?a=b&c HTTP/1.1\r\nHost: example.com\r\nUser-Agent: t/1\r\n\r\n",
            target: "/index.html?a=b&c",
            path: "/index.html",
            query: Some("a=b&c"),
            host: Some("example.com"),
            host_name: Some("example.com"),
            headers: &[("Host", b"example.com"), ("User-Agent", b"t/1")],
            ..GET
        },
        Case {
            name: "empty query",
            raw: b"GET /x? HTTP/1.1\r\nHost: h\r\n\r\n",
            target: "/x?",
            path: "/x",
            query: Some(""),
            ..GET
        },
        Case {
            name: "absolute-form: host from target, Host header ignored",
            raw: b"GET http://a.example/x?y=1 HTTP/1.1\r\nHost: other.example\r\n\r\n",
            target: "http://a.example/x?y=1",
            path: "/x",
            query: Some("y=1"),
            host: Some("a.example"),
            host_name: Some("a.example"),
            headers: &[("Host", b"other.example")],
            ..GET
        },
        Case {
            name: "absolute-form, https, uppercase scheme, port, empty path",
            raw: b"GET HTTPS://A.example:8443 HTTP/1.1\r\nHost: h\r\n\r\n",
            target: "HTTPS://A.example:8443",
            path: "/",
            host: Some("A.example:8443"),
            host_name: Some("A.example"),
            ..GET
        },
        Case {
            name: "absolute-form, query without path",
            raw: b"GET http://[::1]:80?q HTTP/1.1\r\nHost: h\r\n\r\n",
            target: "http://[::1]:80?q",
            path: "/",
            query: Some("q"),
            host: Some("[::1]:80"),
            host_name: Some("[::1]"),
            ..GET
        },
        Case {
            name: "HTTP/1.0 without Host, no keep-alive",
            raw: b"GET /old HTTP/1.0\r\n\r\n",
            target: "/old",
            path: "/old",
            version: Version::Http10,
            host: None,
            host_name: None,
            headers: &[],
            keep_alive: false,
            ..GET
        },
        Case {
            name: "HTTP/1.0 with keep-alive",
            raw: b"GET / HTTP/1.0\r\nHost: h\r\nConnection: Keep-Alive\r\n\r\n",
            version: Version::Http10,
            headers: &[("Host", b"h"), ("Connection", b"Keep-Alive")],
            keep_alive: true,
            ..GET
        },
        Case {
            name: "HTTP/1.0 keep-alive and close",
            raw: b"GET / HTTP/1.0\r\nConnection: keep-alive\r\nconnection: CLOSE\r\n\r\n",
            version: Version::Http10,
            host: None,
            host_name: None,
            headers: &[("Connection", b"keep-alive"), ("connection", b"CLOSE")],
            keep_alive: false,
            ..GET
        },
        Case {
            name: "HTTP/1.0 ignores Expect",
            raw: b"POST / HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n",
            method: Method::Post,
            version: Version::Http10,
            host: None,
            host_name: None,
            headers: &[("Expect", b"100-continue"), ("Content-Length", b"3")],
            body: BodyKind::Length(3),
            keep_alive: false,
            ..GET
        },
        Case {
            name: "pipelined second request left unconsumed",
            raw: b"GET /a HTTP/1.1\r\nHost: h\r\n\r\nGET /b HTTP/1.1\r\nHost: h\r\n\r\n",
            target: "/a",
            path: "/a",
            head_len: Some(28),
            ..GET
        },
        Case {
            name: "Connection token list with close",
            raw: b"GET / HTTP/1.1\r\nHost: h\r\nConnection: foo, \t Close ,bar\r\n\r\n",
            headers: &[("Host", b"h"), ("Connection", b"foo, \t Close ,bar")],
            keep_alive: false,
            ..GET
        },
        Case {
            name: "Connection tokens across several headers",
            raw: b"GET / HTTP/1.1\r\nConnection: upgrade\r\nHost: h\r\nConnection: ,,close,\r\n\r\n",
            headers: &[("Connection", b"upgrade"), ("Host", b"h"), ("Connection", b",,close,")],
            keep_alive: false,
            ..GET
        },
        Case {
            name: "Connection token that only contains 'close'",
            raw: b"GET / HTTP/1.1\r\nHost: h\r\nConnection: closed, keep-alive\r\n\r\n",
            headers: &[("Host", b"h"), ("Connection", b"closed, keep-alive")],
            ..GET
        },
        Case {
            name: "OPTIONS asterisk-form",
            raw: b"OPTIONS * HTTP/1.1\r\nHost: h:8080\r\n\r\n",
            method: Method::Options,
            target: "*",
            path: "*",
            host: Some("h:8080"),
            headers: &[("Host", b"h:8080")],
            ..GET
        },
        Case {
            name: "CONNECT authority-form",
            raw: b"CONNECT a.example:443 HTTP/1.1\r\nHost: a.example:443\r\n\r\n",
            method: Method::Connect,
            target: "a.example:443",
            path: "a.example:443",
            host: Some("a.example:443"),
            host_name: Some("a.example"),
            headers: &[("Host", b"a.example:443")],
            ..GET
        },
        Case {
            name: "leading CRLFs",
            raw: b"\r\n\r\nGET / HTTP/1.1\r\nHost: h\r\n\r\n",
            ..GET
        },
        Case {
            name: "leading LFs",
            raw: b"\n\r\n\nGET / HTTP/1.1\r\nHost: h\r\n\r\n",
            ..GET
        },
        Case {
            name: "LF-only line endings",
            raw: b"GET /lf HTTP/1.1\nHost: h\nX-A: b\n\n",
            target: "/lf",
            path: "/lf",
            headers: &[("Host", b"h"), ("X-A", b"b")],
            ..GET
        },
        Case {
            name: "POST with Content-Length and OWS",
            raw: b"POST /up HTTP/1.1\r\nHost: h\r\nContent-Length: \t 0042 \r\n\r\n",
            method: Method::Post,
            target: "/up",
            path: "/up",
            headers: &[("Host", b"h"), ("Content-Length", b"0042")],
            body: BodyKind::Length(42),
            ..GET
        },
        Case {
            name: "Content-Length: 0",
            raw: b"PUT /x HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n",
            method: Method::Put,
            target: "/x",
            path: "/x",
            headers: &[("Host", b"h"), ("Content-Length", b"0")],
            body: BodyKind::Length(0),
            ..GET
        },
        Case {
            name: "chunked, case-insensitive, with Expect",
            raw: b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: Chunked\r\nExpect: 100-Continue\r\n\r\n",
            method: Method::Post,
            headers: &[("Host", b"h"), ("Transfer-Encoding", b"Chunked"), ("Expect", b"100-Continue")],
            body: BodyKind::Chunked,
            expect_continue: true,
            ..GET
        },
        Case {
            name: "chunked with empty list elements",
            raw: b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: , chunked ,\r\n\r\n",
            method: Method::Post,
            headers: &[("Host", b"h"), ("Transfer-Encoding", b", chunked ,")],
            body: BodyKind::Chunked,
            ..GET
        },
        Case {
            name: "lowercase method is Other; obs-text and tabs in values",
            raw: b"get / HTTP/1.1\r\nHost: h\r\nX: \t a\xffb\tc \t\r\nEmpty:\r\n\r\n",
            method: Method::Other,
            headers: &[("Host", b"h"), ("X", b"a\xffb\tc"), ("Empty", b"")],
            ..GET
        },
        Case {
            name: "IPv6 Host with port, extension method",
            raw: b"PURGE /c HTTP/1.1\r\nhost: [2001:db8::1]:8080\r\n\r\n",
            method: Method::Other,
            target: "/c",
            path: "/c",
            host: Some("[2001:db8::1]:8080"),
            host_name: Some("[2001:db8::1]"),
            headers: &[("host", b"[2001:db8::1]:8080")],
            ..GET
        },
    ]
}

fn expected(case: &Case) -> Owned {
    Owned {
        method: case.method,
        method_str: std::str::from_utf8(case.raw)
            .unwrap_or_else(|_| {
                std::str::from_utf8(&case.raw[..case.raw.iter().position(|&b| b == 0xff).unwrap()])
                    .unwrap()
            })
            .trim_start_matches(['\r', '\n'])
            .split(' ')
            .next()
            .unwrap()
            .to_owned(),
        target: case.target.to_owned(),
        path: case.path.to_owned(),
        query: case.query.map(str::to_owned),
        version: case.version,
        host: case.host.map(str::to_owned),
        host_name: case.host_name.map(str::to_owned),
        headers: case
            .headers
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_vec()))
            .collect(),
        body: case.body,
        keep_alive: case.keep_alive,
        expect_continue: case.expect_continue,
        head_len: case.head_len.unwrap_or(case.raw.len()),
    }
}

#[test]
fn well_formed_requests() {
    for case in cases() {
        let got = parse(case.raw).unwrap_or_else(|e| panic!("{}: {e}", case.name));
        let got = got.unwrap_or_else(|| panic!("{}: partial", case.name));
        assert_eq!(got, expected(&case), "{}", case.name);
    }
}

#[test]
fn well_formed_requests_split_at_every_byte() {
    for case in cases() {
        let want = expected(&case);
        for k in 0..=case.raw.len() {
            let got = parse(&case.raw[..k]).unwrap_or_else(|e| panic!("{} at {k}: {e}", case.name));
            if k < want.head_len {
                assert_eq!(got, None, "{} at {k}", case.name);
            } else {
                assert_eq!(got.as_ref(), Some(&want), "{} at {k}", case.name);
            }
        }
    }
}

#[test]
fn header_lookup_and_method_str() {
    let buf = b"DELETE /r HTTP/1.1\r\nHost: h\r\nX-Dup: 1\r\nx-dup: 2\r\n\r\n";
    let mut headers = [httparse::EMPTY_HEADER; 8];
    let Parsed::Complete(req) = parse_request(buf, &mut headers, &Limits::default()).unwrap()
    else {
        panic!("partial");
    };
    assert_eq!(req.method, Method::Delete);
    assert_eq!(req.method_str, "DELETE");
    assert_eq!(req.method.as_str(), "DELETE");
    assert_eq!(req.header("X-DUP"), Some(&b"1"[..]));
    assert_eq!(req.header("host"), Some(&b"h"[..]));
    assert_eq!(req.header("missing"), None);
}

#[test]
fn limits_are_inclusive() {
    let limits = Limits {
        max_head: 40,
        max_uri: 5,
        max_headers: 1,
    };
    // Target of exactly max_uri bytes, head of exactly max_head bytes.
    let buf = b"GET /1234 HTTP/1.1\r\nHost: abcdefghij\r\n\r\n";
    assert_eq!(buf.len(), 40);
    let got = common::parse_with(buf, &limits).unwrap().unwrap();
    assert_eq!(got.head_len, 40);
    // A caller passing more storage than max_headers is still limited.
    let buf = b"GET / HTTP/1.1\r\nHost: h\r\nA: b\r\n\r\n";
    let mut headers = [httparse::EMPTY_HEADER; 10];
    let limits = Limits {
        max_headers: 1,
        ..Limits::default()
    };
    assert_eq!(
        parse_request(buf, &mut headers, &limits)
            .unwrap_err()
            .status,
        431
    );
}
