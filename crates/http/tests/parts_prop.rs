//! `request_from_parts` (an HTTP/2 request's decoded fields) against `parse_request` (the
//! same request written as HTTP/1.1 text): for any method, target and fields that such a text
//! can carry (no CR, LF or NUL, no space in the method or target, values trimmed, as an
//! HTTP/2 peer's are after HPACK's checks), both accept or both refuse with the same status,
//! and what they accept is the same request. The HTTP/2 role used to write every request as
//! HTTP/1.1 and parse it; it builds it from the parts now, and must not let through anything
//! the parser refused.

use proptest::prelude::*;
use ringx_http::httparse::{Header, EMPTY_HEADER};
use ringx_http::{parse_request, request_from_parts, Limits, Parsed, Request};

/// Bytes around the rules: controls, DEL, obs-text, separators, and plain ones.
fn byte() -> impl Strategy<Value = u8> {
    prop_oneof![
        8 => proptest::sample::select(b"abcXYZ019-._~/%?=&".to_vec()),
        2 => proptest::sample::select(b"\t \x01\x1f\x7f\x80\xff:;,\"()<>@[]{}".to_vec()),
        1 => any::<u8>().prop_filter("no CR, LF or NUL", |b| !matches!(b, b'\r' | b'\n' | 0)),
    ]
}

fn text(min: usize, max: usize) -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(byte(), min..max)
}

/// A value as HPACK's checks leave it: no whitespace at either end.
fn value() -> impl Strategy<Value = Vec<u8>> {
    text(0, 40).prop_map(|v| {
        let t = |b: &u8| *b == b' ' || *b == b'\t';
        let start = v.iter().position(|b| !t(b)).unwrap_or(v.len());
        let end = v.iter().rposition(|b| !t(b)).map_or(start, |e| e + 1);
        v[start..end].to_vec()
    })
}

/// A field name: mostly well-known ones (framing, Host, Connection), else random.
fn name() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        3 => proptest::sample::select(vec![
            b"host".to_vec(), b"content-length".to_vec(), b"transfer-encoding".to_vec(),
            b"connection".to_vec(), b"expect".to_vec(), b"x-a".to_vec(), b"cookie".to_vec(),
        ]),
        2 => text(1, 8).prop_filter("no space or colon", |n| !n.iter().any(|b| matches!(b, b' ' | b'\t' | b':'))),
    ]
}

fn method() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        4 => proptest::sample::select(vec![b"GET".to_vec(), b"POST".to_vec(), b"OPTIONS".to_vec(), b"CONNECT".to_vec(), b"HEAD".to_vec()]),
        1 => text(1, 40).prop_filter("no space", |m| !m.iter().any(|b| matches!(b, b' ' | b'\t'))),
    ]
}

fn target() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        3 => text(0, 40).prop_map(|t| [b"/".to_vec(), t].concat()),
        1 => Just(b"*".to_vec()),
        1 => text(1, 40),
    ]
    .prop_filter("no space or tab", |t| {
        !t.iter().any(|b| matches!(b, b' ' | b'\t'))
    })
}

/// What a request is, compared field by field.
fn key(r: &Request<'_, '_>) -> String {
    format!(
        "{:?} {} {} {} {:?} {:?} {:?} {:?} {} {} {:?}",
        r.method,
        r.method_str,
        r.target,
        r.path,
        r.query,
        r.version,
        r.host,
        r.body,
        r.keep_alive,
        r.expect_continue,
        r.headers
            .iter()
            .map(|h| (h.name, h.value))
            .collect::<Vec<_>>(),
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    #[test]
    fn parts_and_text_agree(m in method(), t in target(), fields in proptest::collection::vec((name(), value()), 0..6)) {
        let limits = Limits { max_headers: 5, max_uri: 32, ..Limits::default() };
        let mut text = [m.clone(), b" ".to_vec(), t.clone(), b" HTTP/1.1\r\n".to_vec()].concat();
        for (n, v) in &fields {
            text.extend_from_slice(n);
            text.extend_from_slice(b": ");
            text.extend_from_slice(v);
            text.extend_from_slice(b"\r\n");
        }
        text.extend_from_slice(b"\r\n");
        let mut storage = vec![EMPTY_HEADER; limits.max_headers];
        let parsed = parse_request(&text, &mut storage, &limits);
        // The parts: strings only where they are UTF-8 (an HTTP/2 method and path are tokens
        // and URI bytes; obs-text in them the parser refuses or keeps as it came).
        let (Ok(ms), Ok(ts)) = (std::str::from_utf8(&m), std::str::from_utf8(&t)) else {
            // A caller refuses a target that is not UTF-8 with 400 before building (the
            // HTTP/2 role does): the parser refuses it too.
            if std::str::from_utf8(&t).is_err() && std::str::from_utf8(&m).is_ok() {
                if let Ok(Parsed::Complete(_)) = parsed {
                    prop_assert!(false, "a target that is not UTF-8 accepted");
                }
            }
            return Ok(());
        };
        let names: Option<Vec<&str>> = fields.iter().map(|(n, _)| std::str::from_utf8(n).ok()).collect();
        let Some(names) = names else { return Ok(()); };
        let headers: Vec<Header<'_>> = names.iter().zip(&fields).map(|(n, (_, v))| Header { name: n, value: v }).collect();
        let built = request_from_parts(ms, ts, &headers, &limits);
        match (parsed, built) {
            (Ok(Parsed::Complete(a)), Ok(b)) => {
                // The text says HTTP/1.1: the version and what follows from it agree.
                prop_assert_eq!(key(&a), key(&b));
            }
            (Err(a), Err(b)) => prop_assert_eq!(a.status, b.status, "{} / {}", a.reason, b.reason),
            (a, b) => prop_assert!(false, "text: {:?}, parts: {:?}", a.map(|p| matches!(p, Parsed::Complete(_))).map_err(|e| e.reason), b.map(|_| ()).map_err(|e| e.reason)),
        }
    }
}
