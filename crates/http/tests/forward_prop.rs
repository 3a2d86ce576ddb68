//! Properties of the framing of messages crossing the proxy (issue 26): for any request ringx
//! parses, the head it forwards declares exactly the body it relays, and for any upstream
//! response, so does the head the client gets; no second message can ride in the body. The
//! inputs mix in every field that takes part in framing, `Connection` options naming them, and
//! a second message after (or inside) the body. The oracle is `common/forward.rs`.

#[path = "common/forward.rs"]
mod forward;

use forward::{check_request, check_response, ForwardOpts};
use proptest::prelude::*;
use ringx_http::Version;

const SMUGGLED_REQUEST: &str = "GET /secret/x HTTP/1.1\r\nHost: localhost\r\n\r\n";
const SMUGGLED_RESPONSE: &str = "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nforged";

/// `Connection` options, the framing fields among them.
fn connection() -> impl Strategy<Value = String> {
    let option = prop::sample::select(vec![
        "Content-Length",
        "content-length",
        "Transfer-Encoding",
        "Host",
        "Upgrade",
        "keep-alive",
        "close",
        "X-A",
        "TE",
        "Expect",
        "Trailer",
    ]);
    prop::collection::vec(option, 1..4).prop_map(|v| v.join(", "))
}

/// A field of a message: the ones that frame it or name others, and plain ones.
fn field() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => connection().prop_map(|c| format!("Connection: {c}")),
        1 => (0u64..80).prop_map(|n| format!("Content-Length: {n}")),
        1 => Just("Transfer-Encoding: chunked".to_string()),
        1 => Just("Transfer-Encoding: gzip".to_string()),
        1 => Just("Upgrade: websocket".to_string()),
        1 => Just("X-A: 1".to_string()),
        1 => Just("Keep-Alive: timeout=5".to_string()),
        1 => Just("TE: trailers".to_string()),
        1 => Just("Expect: 100-continue".to_string()),
        1 => Just("Trailer: X-T".to_string()),
    ]
}

/// How the body is sent, whatever the fields say: nothing, `n` bytes, or chunks.
#[derive(Debug, Clone)]
enum Body {
    Plain(Vec<u8>),
    Chunks(Vec<Vec<u8>>),
}

fn body(smuggled: &'static str) -> impl Strategy<Value = Body> {
    let bytes = prop_oneof![
        2 => Just(smuggled.as_bytes().to_vec()),
        1 => prop::collection::vec(any::<u8>(), 0..40),
    ];
    prop_oneof![
        bytes.clone().prop_map(Body::Plain),
        prop::collection::vec(bytes, 0..3).prop_map(Body::Chunks),
    ]
}

fn encode(b: &Body, framing: u8, fields: &mut Vec<String>) -> Vec<u8> {
    match b {
        Body::Plain(p) => {
            if framing == 1 {
                fields.push(format!("Content-Length: {}", p.len()));
            }
            p.clone()
        }
        Body::Chunks(cs) => {
            if framing == 1 {
                fields.push("Transfer-Encoding: chunked".into());
            }
            let mut out = Vec::new();
            for c in cs.iter().filter(|c| !c.is_empty()) {
                out.extend_from_slice(format!("{:x}\r\n", c.len()).as_bytes());
                out.extend_from_slice(c);
                out.extend_from_slice(b"\r\n");
            }
            out.extend_from_slice(b"0\r\n\r\n");
            out
        }
    }
}

fn message(
    start: String,
    mut fields: Vec<String>,
    body: &Body,
    framing: u8,
    tail: &str,
) -> Vec<u8> {
    let encoded = encode(body, framing, &mut fields);
    let mut raw = start.into_bytes();
    for f in fields {
        raw.extend_from_slice(f.as_bytes());
        raw.extend_from_slice(b"\r\n");
    }
    raw.extend_from_slice(b"\r\n");
    raw.extend_from_slice(&encoded);
    raw.extend_from_slice(tail.as_bytes());
    raw
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn forwarded_requests_declare_the_relayed_body(
        method in prop::sample::select(vec!["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]),
        target in prop::sample::select(vec!["/api/a", "/x?y=1", "http://ex.com/p?q"]),
        http10 in prop::bool::weighted(0.2),
        fields in prop::collection::vec(field(), 0..6),
        body in body(SMUGGLED_REQUEST),
        framing in 0u8..2,
        tail in prop::sample::select(vec!["", SMUGGLED_REQUEST]),
        host in prop::option::of(Just("up.internal")),
        forwarded_headers in any::<bool>(),
        close in any::<bool>(),
    ) {
        let version = if http10 { "HTTP/1.0" } else { "HTTP/1.1" };
        let mut fields = fields;
        fields.insert(0, "Host: h.example".into());
        let raw = message(format!("{method} {target} {version}\r\n"), fields, &body, framing, tail);
        let o = ForwardOpts { host, forwarded_headers, close };
        if let Err(e) = check_request(&raw, o) {
            panic!("{e}\n--- client sent:\n{}", String::from_utf8_lossy(&raw));
        }
    }

    #[test]
    fn relayed_responses_declare_the_relayed_body(
        status in prop::sample::select(vec![200u16, 201, 204, 206, 304, 404, 500]),
        http10 in prop::bool::weighted(0.2),
        fields in prop::collection::vec(field(), 0..6),
        body in body(SMUGGLED_RESPONSE),
        framing in 0u8..2,
        tail in prop::sample::select(vec!["", SMUGGLED_RESPONSE]),
        head_request in prop::bool::weighted(0.2),
        client10 in prop::bool::weighted(0.3),
        keep in any::<bool>(),
    ) {
        let version = if http10 { "HTTP/1.0" } else { "HTTP/1.1" };
        let raw = message(format!("{version} {status} X\r\n"), fields, &body, framing, tail);
        let client = if client10 { Version::Http10 } else { Version::Http11 };
        if let Err(e) = check_response(&raw, head_request, client, keep) {
            panic!("{e}\n--- upstream sent:\n{}", String::from_utf8_lossy(&raw));
        }
    }
}

/// The probes of issue 26, checked by the same oracle.
#[test]
fn the_issue_probes() {
    let req = format!(
        "POST /api/a HTTP/1.1\r\nHost: localhost\r\nConnection: Content-Length\r\n\
         Content-Length: {}\r\n\r\n{SMUGGLED_REQUEST}",
        SMUGGLED_REQUEST.len()
    );
    let o = ForwardOpts {
        host: None,
        forwarded_headers: true,
        close: false,
    };
    assert_eq!(check_request(req.as_bytes(), o), Ok(true));
    let resp = format!(
        "HTTP/1.1 200 OK\r\nConnection: Content-Length\r\nContent-Length: 5\r\n\r\nhello{SMUGGLED_RESPONSE}"
    );
    assert_eq!(
        check_response(resp.as_bytes(), false, Version::Http11, true),
        Ok(true)
    );
}
