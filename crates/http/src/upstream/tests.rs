use super::*;
use crate::{parse_request, Limits, Parsed};

fn resp(raw: &[u8], head: bool) -> Result<(u16, ResponseBody, bool, usize), UpstreamError> {
    let mut h = [httparse::EMPTY_HEADER; 64];
    match parse_response(raw, &mut h, 8192, head)? {
        Parsed::Complete(r) => Ok((r.status, r.body, r.keep_alive, r.head_len)),
        Parsed::Partial => Err(UpstreamError("partial")),
    }
}

#[test]
fn response_framing() {
    let cases: &[(&[u8], bool, u16, ResponseBody, bool)] = &[
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n",
            false,
            200,
            ResponseBody::Length(5),
            true,
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            false,
            200,
            ResponseBody::Chunked,
            true,
        ),
        (
            b"HTTP/1.1 200 OK\r\n\r\n",
            false,
            200,
            ResponseBody::UntilClose,
            false,
        ),
        (
            b"HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\n",
            false,
            200,
            ResponseBody::Length(1),
            false,
        ),
        (
            b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 1\r\n\r\n",
            false,
            200,
            ResponseBody::Length(1),
            true,
        ),
        (
            b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 1\r\n\r\n",
            false,
            200,
            ResponseBody::Length(1),
            false,
        ),
        (
            b"HTTP/1.1 204 No Content\r\n\r\n",
            false,
            204,
            ResponseBody::None,
            true,
        ),
        (
            b"HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\n",
            false,
            304,
            ResponseBody::None,
            true,
        ),
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n",
            true,
            200,
            ResponseBody::None,
            true,
        ),
        (
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n",
            false,
            101,
            ResponseBody::None,
            true,
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
            false,
            200,
            ResponseBody::UntilClose,
            false,
        ),
        // TE overrides CL; the connection is not reused (it may be a smuggling attempt).
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
            false,
            200,
            ResponseBody::Chunked,
            false,
        ),
    ];
    for (raw, head, st, body, keep) in cases {
        let (s, b, k, n) =
            resp(raw, *head).unwrap_or_else(|e| panic!("{e}: {:?}", String::from_utf8_lossy(raw)));
        assert_eq!(
            (s, b, k, n),
            (*st, *body, *keep, raw.len()),
            "{}",
            String::from_utf8_lossy(raw)
        );
    }
}

#[test]
fn bad_responses() {
    for raw in [
        &b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n"[..],
        b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, chunked\r\n\r\n",
        b"HTTP/1.1 2000 OK\r\n\r\n",
        b"HTTP/1.0 011 Odd\r\n\r\n",
        b"garbage\r\n\r\n",
    ] {
        assert!(
            resp(raw, false).is_err(),
            "{}",
            String::from_utf8_lossy(raw)
        );
    }
    // Same Content-Length twice is tolerated.
    assert!(resp(
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n",
        false
    )
    .is_ok());
    let mut h = [httparse::EMPTY_HEADER; 8];
    assert!(matches!(
        parse_response(b"HTTP/1.1 200 OK\r\nX: y", &mut h, 8192, false),
        Ok(Parsed::Partial)
    ));
    let big = [b"HTTP/1.1 200 OK\r\nX: ".as_slice(), &[b'a'; 9000]].concat();
    let mut h = [httparse::EMPTY_HEADER; 8];
    assert!(parse_response(&big, &mut h, 8192, false).is_err());
}

fn forward(raw: &[u8], f: &Forward<'_>) -> String {
    let mut h = [httparse::EMPTY_HEADER; 64];
    let Ok(Parsed::Complete(req)) = parse_request(raw, &mut h, &Limits::default()) else {
        panic!("request")
    };
    let mut out = Vec::new();
    write_request_head(&mut out, &req, f);
    String::from_utf8(out).unwrap()
}

fn fwd() -> Forward<'static> {
    Forward {
        client: Some("192.0.2.7".parse().unwrap()),
        proto: "http",
        host: None,
        forwarded_headers: true,
        close: false,
        upgrade: None,
        tls_client: None,
    }
}

#[test]
fn request_rewrite() {
    let out = forward(
        b"POST /a?b=1 HTTP/1.1\r\nHost: ex.com\r\nConnection: keep-alive, X-Hop\r\nX-Hop: 1\r\nKeep-Alive: 5\r\nTE: trailers\r\nX-Forwarded-For: 10.0.0.1\r\nX-Real-IP: 6.6.6.6\r\nTransfer-Encoding: chunked\r\nAccept: */*\r\n\r\n",
        &fwd(),
    );
    assert_eq!(
        out,
        "POST /a?b=1 HTTP/1.1\r\nHost: ex.com\r\nAccept: */*\r\nTransfer-Encoding: chunked\r\n\
         X-Forwarded-For: 10.0.0.1, 192.0.2.7\r\nX-Real-IP: 192.0.2.7\r\nX-Forwarded-Proto: http\r\n\
         Forwarded: for=192.0.2.7;proto=http;host=ex.com\r\n\r\n"
    );
    let f = Forward {
        host: Some("up.internal"),
        close: true,
        forwarded_headers: false,
        ..fwd()
    };
    let out = forward(
        b"GET http://ex.com/p?q HTTP/1.1\r\nHost: ex.com\r\nContent-Length: 0\r\n\r\n",
        &f,
    );
    assert_eq!(
        out,
        "GET /p?q HTTP/1.1\r\nHost: up.internal\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    let f = Forward {
        client: Some("2001:db8::1".parse().unwrap()),
        ..fwd()
    };
    let out = forward(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n", &f);
    assert!(
        out.contains("Forwarded: for=\"[2001:db8::1]\";proto=http;host=h\r\n"),
        "{out}"
    );
}

#[test]
fn upgrade_passes() {
    let raw = b"GET /ws HTTP/1.1\r\nHost: h\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: k\r\n\r\n";
    let mut h = [httparse::EMPTY_HEADER; 64];
    let Ok(Parsed::Complete(req)) = parse_request(raw, &mut h, &Limits::default()) else {
        panic!()
    };
    let up = upgrade_request(&req);
    assert_eq!(up, Some(&b"websocket"[..]));
    let mut out = Vec::new();
    write_request_head(
        &mut out,
        &req,
        &Forward {
            upgrade: up,
            tls_client: None,
            forwarded_headers: false,
            ..fwd()
        },
    );
    let out = String::from_utf8(out).unwrap();
    assert_eq!(out, "GET /ws HTTP/1.1\r\nHost: h\r\nSec-WebSocket-Key: k\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n");
}

#[test]
fn response_rewrite() {
    let raw = b"HTTP/1.1 200 Fine\r\nConnection: close, X-Hop\r\nX-Hop: 1\r\nTransfer-Encoding: chunked\r\nContent-Length: 9\r\nServer: up\r\n\r\n";
    let mut h = [httparse::EMPTY_HEADER; 64];
    let Ok(Parsed::Complete(r)) = parse_response(raw, &mut h, 8192, false) else {
        panic!()
    };
    let mut out = Vec::new();
    assert_eq!(
        write_response_head(&mut out, &r, Version::Http11, b""),
        ClientFraming::Same
    );
    assert_eq!(
        String::from_utf8_lossy(&out),
        "HTTP/1.1 200 Fine\r\nServer: up\r\nTransfer-Encoding: chunked\r\n\r\n"
    );
    out.clear();
    let f = write_response_head(&mut out, &r, Version::Http10, b"Connection: close\r\n");
    assert_eq!(f, ClientFraming::Close);
    assert_eq!(
        String::from_utf8_lossy(&out),
        "HTTP/1.1 200 Fine\r\nServer: up\r\nConnection: close\r\n\r\n"
    );
    let raw = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: a\r\n\r\n";
    let Ok(Parsed::Complete(r)) = parse_response(raw, &mut h, 8192, false) else {
        panic!()
    };
    out.clear();
    write_response_head(&mut out, &r, Version::Http11, b"");
    assert_eq!(String::from_utf8_lossy(&out), "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nSec-WebSocket-Accept: a\r\nConnection: upgrade\r\n\r\n");
}

#[test]
fn proxy_owned_names() {
    for n in [
        "Connection",
        "KEEP-ALIVE",
        "proxy-connection",
        "te",
        "Trailer",
        "transfer-encoding",
        "Upgrade",
        "expect",
        "Content-Length",
    ] {
        assert!(is_proxy_owned(n), "{n}");
    }
    for n in [
        "",
        "t",
        "tes",
        "Host",
        "Connections",
        "keep-alivf",
        "Content-Lengtg",
        "Content-Type",
        "Expecu",
    ] {
        assert!(!is_proxy_owned(n), "{n}");
    }
}

/// httparse ends a value at CR or LF and refuses NUL and the other control bytes (but HTAB),
/// so no parsed value holds one and `finish_response` does not look for them again.
#[test]
fn value_bytes_are_checked_by_httparse() {
    for bad in [&b"\0"[..], b"\r", b"\rx", b"\x01", b"\x7f", b"\x1f"] {
        let mut raw = b"HTTP/1.1 200 OK\r\nX-A: a".to_vec();
        raw.extend_from_slice(bad);
        raw.extend_from_slice(b"b\r\nContent-Length: 0\r\n\r\n");
        let mut h = [httparse::EMPTY_HEADER; 8];
        assert!(
            parse_response(&raw, &mut h, 8192, false).is_err(),
            "{bad:?}"
        );
        let mut u = [const { MaybeUninit::<Header>::uninit() }; 8];
        assert!(
            parse_response_uninit(&raw, &mut u, 8192, false).is_err(),
            "{bad:?}"
        );
    }
    // A bare LF ends the line: what follows is the next field, never part of the value.
    let raw = b"HTTP/1.1 200 OK\r\nX-A: a\nX-B: b\r\nContent-Length: 0\r\n\r\n";
    let mut h = [httparse::EMPTY_HEADER; 8];
    match parse_response(raw, &mut h, 8192, false) {
        Ok(Parsed::Complete(r)) => {
            assert!(r.headers.iter().all(|h| !h.value.contains(&b'\n')));
            assert_eq!(r.headers[0].value, b"a");
        }
        other => panic!("{other:?}"),
    }
    let tab = b"HTTP/1.1 200 OK\r\nX-A: a\tb\r\nContent-Length: 0\r\n\r\n";
    let mut h = [httparse::EMPTY_HEADER; 8];
    assert!(matches!(
        parse_response(tab, &mut h, 8192, false),
        Ok(Parsed::Complete(_))
    ));
}

/// Issue 26: `Connection: Content-Length` used to remove the length from the forwarded head, so
/// the upstream read the body as a second request. The framing is the proxy's own.
#[test]
fn connection_cannot_name_away_the_framing() {
    let smuggled = "GET /secret/x HTTP/1.1\r\nHost: localhost\r\n\r\n";
    let raw = format!(
        "POST /api/a HTTP/1.1\r\nHost: h\r\nConnection: Content-Length, Host, Upgrade, X-Hop\r\n\
         X-Hop: 1\r\nContent-Length: {}\r\n\r\n",
        smuggled.len()
    );
    let f = Forward {
        forwarded_headers: false,
        ..fwd()
    };
    assert_eq!(
        forward(raw.as_bytes(), &f),
        format!(
            "POST /api/a HTTP/1.1\r\nHost: h\r\nContent-Length: {}\r\n\r\n",
            smuggled.len()
        )
    );
    let raw = "POST /a HTTP/1.1\r\nHost: h\r\nConnection: transfer-encoding\r\n\
               Transfer-Encoding: chunked\r\n\r\n";
    assert_eq!(
        forward(raw.as_bytes(), &f),
        "POST /a HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
    );
    // The length is the parsed one, not a copy of the client's digits.
    let raw = "PUT /a HTTP/1.1\r\nContent-Length: 007\r\nHost: h\r\n\r\n";
    assert_eq!(
        forward(raw.as_bytes(), &f),
        "PUT /a HTTP/1.1\r\nHost: h\r\nContent-Length: 7\r\n\r\n"
    );
}

fn rewrite(raw: &[u8], head: bool, client: Version, conn: &[u8]) -> (String, ClientFraming) {
    let mut h = [httparse::EMPTY_HEADER; 64];
    let Ok(Parsed::Complete(r)) = parse_response(raw, &mut h, 8192, head) else {
        panic!("response")
    };
    let mut out = Vec::new();
    let f = write_response_head(&mut out, &r, client, conn);
    (String::from_utf8(out).unwrap(), f)
}

/// Issue 26: an upstream's `Connection: Content-Length` used to strip the length from the head
/// a kept-alive client got, so the next response ran into this body.
#[test]
fn response_framing_is_the_proxys() {
    let raw = b"HTTP/1.1 200 OK\r\nConnection: Content-Length, Transfer-Encoding\r\nContent-Length: 5\r\n\r\nhello";
    assert_eq!(
        rewrite(raw, false, Version::Http11, b""),
        (
            "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n".to_string(),
            ClientFraming::Same
        )
    );
    // HEAD and 304 keep the representation's length; 204 never has one.
    let raw = b"HTTP/1.1 200 OK\r\nConnection: content-length\r\nContent-Length: 99\r\n\r\n";
    assert_eq!(
        rewrite(raw, true, Version::Http11, b"").0,
        "HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n"
    );
    let raw = b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n";
    assert_eq!(
        rewrite(raw, false, Version::Http11, b"").0,
        "HTTP/1.1 204 No Content\r\n\r\n"
    );
    // A body delimited by closing says so, whatever connection line the caller offered.
    let raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
    assert_eq!(
        rewrite(raw, false, Version::Http10, b"Connection: keep-alive\r\n"),
        (
            "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n".to_string(),
            ClientFraming::Close
        )
    );
    let raw = b"HTTP/1.1 200 OK\r\nServer: x\r\n\r\n";
    assert_eq!(
        rewrite(raw, false, Version::Http11, b""),
        (
            "HTTP/1.1 200 OK\r\nServer: x\r\nConnection: close\r\n\r\n".to_string(),
            ClientFraming::Close
        )
    );
}

/// A location's changes to a forwarded request: the target, the client's fields it sets
/// (dropped, and the proxy's own copy of a forwarding field left out), the fields it adds.
#[test]
fn request_edit() {
    let raw = b"GET /api/x?q=1 HTTP/1.1\r\nHost: ex.com\r\nUser-Agent: ua\r\nX-Forwarded-For: 10.0.0.1\r\nAccept: */*\r\n\r\n";
    let mut h = [httparse::EMPTY_HEADER; 16];
    let Ok(Parsed::Complete(req)) = parse_request(raw, &mut h, &Limits::default()) else {
        panic!()
    };
    let drop = ["user-agent".to_string(), "x-forwarded-for".to_string()];
    let mut out = Vec::new();
    write_request_head_edit(
        &mut out,
        &req,
        &fwd(),
        &RequestEdit {
            target: Some("/v2/x?q=1"),
            drop: &drop,
            add: b"X-Forwarded-For: 1.2.3.4\r\nX-Id: 7\r\n",
        },
    );
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "GET /v2/x?q=1 HTTP/1.1\r\nHost: ex.com\r\nAccept: */*\r\nX-Real-IP: 192.0.2.7\r\n\
         X-Forwarded-Proto: http\r\nForwarded: for=192.0.2.7;proto=http;host=ex.com\r\n\
         X-Forwarded-For: 1.2.3.4\r\nX-Id: 7\r\n\r\n"
    );
}

/// A location's changes to a relayed response: hidden fields, added ones, and a body
/// re-encoded (no length, chunked to HTTP/1.1 and closed for HTTP/1.0, the ETag weak, no
/// Accept-Ranges, Vary added once).
#[test]
fn response_edit() {
    let raw = b"HTTP/1.1 200 OK\r\nContent-Length: 900\r\nETag: \"x\"\r\nAccept-Ranges: bytes\r\nX-Powered-By: php\r\nVary: Cookie\r\n\r\n";
    let mut h = [httparse::EMPTY_HEADER; 16];
    let Ok(Parsed::Complete(r)) = parse_response(raw, &mut h, 8192, false) else {
        panic!()
    };
    let hide = ["x-powered-by".to_string()];
    let edit = ResponseEdit {
        hide: &hide,
        encode: Some("br"),
        vary: true,
        add: b"X-A: 1\r\n",
    };
    let mut out = Vec::new();
    let f = write_response_head_edit(&mut out, &r, Version::Http11, b"", &edit);
    assert_eq!(f, ClientFraming::Same);
    assert_eq!(
        String::from_utf8_lossy(&out),
        "HTTP/1.1 200 OK\r\nETag: W/\"x\"\r\nVary: Cookie\r\nVary: Accept-Encoding\r\nX-A: 1\r\n\
         Content-Encoding: br\r\nTransfer-Encoding: chunked\r\n\r\n"
    );
    out.clear();
    let f = write_response_head_edit(
        &mut out,
        &r,
        Version::Http10,
        b"Connection: keep-alive\r\n",
        &edit,
    );
    assert_eq!(f, ClientFraming::Close);
    assert!(String::from_utf8_lossy(&out)
        .ends_with("Content-Encoding: br\r\nConnection: close\r\n\r\n"));
    // Not re-encoded: the length stays; Vary already covering Accept-Encoding is not repeated.
    let raw = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nVary: accept-encoding\r\n\r\n";
    let Ok(Parsed::Complete(r)) = parse_response(raw, &mut h, 8192, false) else {
        panic!()
    };
    out.clear();
    let edit = ResponseEdit {
        vary: true,
        ..ResponseEdit::default()
    };
    write_response_head_edit(&mut out, &r, Version::Http11, b"", &edit);
    assert_eq!(
        String::from_utf8_lossy(&out),
        "HTTP/1.1 200 OK\r\nVary: accept-encoding\r\nContent-Length: 5\r\n\r\n"
    );
}

/// The names `Connection` lists are gathered once per head; past the eight kept, the fields
/// are scanned for each name as before: either way every field they name is dropped, and
/// only those.
#[test]
fn connection_named_fields_go_however_many_are_named() {
    for listed in [1usize, 8, 9, 12] {
        let names: Vec<String> = (0..listed).map(|i| format!("X-N{i}")).collect();
        let mut raw = format!("HTTP/1.1 200 OK\r\nConnection: {}\r\n", names.join(", "));
        for n in &names {
            raw.push_str(&format!("{n}: 1\r\n"));
        }
        raw.push_str("X-Kept: 2\r\nContent-Length: 0\r\n\r\n");
        let (out, _) = rewrite(raw.as_bytes(), false, Version::Http11, b"");
        assert_eq!(
            out, "HTTP/1.1 200 OK\r\nX-Kept: 2\r\nContent-Length: 0\r\n\r\n",
            "{listed} names"
        );
    }
}

/// Lines received exactly as `put` writes them are copied, runs at once; any other form (no
/// space, more white space, a bare LF, an empty value) is written field by field as before,
/// and so are the fields around those the proxy drops or those a `Connection` option names.
#[test]
fn passed_fields_copied_or_rewritten() {
    let raw = b"HTTP/1.1 200 OK\r\nServer: s\r\nDate: d\r\nX-A:a\r\nX-B:  b  \r\nX-C: c\nX-D: \r\n\
                X-E:\r\nConnection: keep-alive, X-F\r\nX-F: f\r\nX-G: g\r\nContent-Length: 1\r\n\
                X-H: h\r\nX-I: i\r\n\r\n";
    let (out, f) = rewrite(raw, false, Version::Http11, b"");
    assert_eq!(f, ClientFraming::Same);
    assert_eq!(
        out,
        "HTTP/1.1 200 OK\r\nServer: s\r\nDate: d\r\nX-A: a\r\nX-B: b\r\nX-C: c\r\nX-D: \r\n\
         X-E: \r\nX-G: g\r\nX-H: h\r\nX-I: i\r\nContent-Length: 1\r\n\r\n"
    );
    // The same head into a sink that is not text: every field put.
    struct Puts(Vec<String>);
    impl HeadSink for Puts {
        fn mark(&self) -> usize {
            0
        }
        fn status(&mut self, _: u16, _: &str) {}
        fn put(&mut self, name: &[u8], value: &[u8]) {
            self.0.push(format!(
                "{}={}",
                String::from_utf8_lossy(name),
                String::from_utf8_lossy(value)
            ));
        }
        fn lines(&mut self, lines: &[u8]) {
            self.0.push(String::from_utf8_lossy(lines).into_owned());
        }
        fn length(&mut self, len: u64) {
            self.0.push(format!("len={len}"));
        }
    }
    let mut h = [httparse::EMPTY_HEADER; 64];
    let Ok(Parsed::Complete(r)) = parse_response(raw, &mut h, 8192, false) else {
        panic!("response")
    };
    let mut sink = Puts(Vec::new());
    write_response_head(&mut sink, &r, Version::Http11, b"");
    assert_eq!(
        sink.0,
        [
            "Server=s", "Date=d", "X-A=a", "X-B=b", "X-C=c", "X-D=", "X-E=", "X-G=g", "X-H=h",
            "X-I=i", "", "len=1", "", "\r\n"
        ]
    );
}

/// The status line is copied only where it is what would be written: HTTP/1.1, the code and
/// the reason as received; an HTTP/1.0 one, or one without a reason, is written anew.
#[test]
fn status_line_copied_or_rewritten() {
    for (raw, line) in [
        (
            &b"HTTP/1.1 200 OK\r\nX-A: a\r\n\r\n"[..],
            "HTTP/1.1 200 OK\r\n",
        ),
        (b"HTTP/1.0 200 OK\r\nX-A: a\r\n\r\n", "HTTP/1.1 200 OK\r\n"),
        (b"HTTP/1.1 200 \r\nX-A: a\r\n\r\n", "HTTP/1.1 200 OK\r\n"),
        (
            b"HTTP/1.1 404 Nope \r\nX-A: a\r\n\r\n",
            "HTTP/1.1 404 Nope \r\n",
        ),
        (b"HTTP/1.1 599 Odd\nX-A: a\r\n\r\n", "HTTP/1.1 599 Odd\r\n"),
    ] {
        let (out, _) = rewrite(raw, false, Version::Http11, b"");
        let want = format!("{line}X-A: a\r\n");
        assert!(out.starts_with(&want), "{out:?} for {raw:?}");
    }
}
