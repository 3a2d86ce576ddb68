//! Fuzz the upstream response parser and the proxy's response rewriting: never panics, a
//! complete head is within the input, every prefix of a complete head is partial (or an
//! error that the whole input also gives), and the rewritten head for the client parses back
//! with the same status and no hop-by-hop fields but the proxy's own `Connection` line.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ringx_http::upstream::{parse_response, write_response_head, ClientFraming, ResponseBody};
use ringx_http::{httparse, Parsed, Version};

fuzz_target!(|data: &[u8]| {
    let Some((&flags, input)) = data.split_first() else {
        return;
    };
    let head_req = flags & 1 == 1;
    let mut h = [httparse::EMPTY_HEADER; 32];
    let Ok(Parsed::Complete(r)) = parse_response(input, &mut h, 4096, head_req) else {
        return;
    };
    assert!(r.head_len <= input.len());
    if head_req || r.status == 204 || r.status == 304 || (100..200).contains(&r.status) {
        assert_eq!(r.body, ResponseBody::None);
    }
    for cut in 0..r.head_len {
        let mut h2 = [httparse::EMPTY_HEADER; 32];
        if let Ok(Parsed::Complete(_)) = parse_response(&input[..cut], &mut h2, 4096, head_req) {
            panic!("a strict prefix of a head parsed as complete");
        }
    }
    let version = if flags & 2 == 0 {
        Version::Http11
    } else {
        Version::Http10
    };
    let mut out = Vec::new();
    let framing = write_response_head(&mut out, &r, version, b"");
    let mut h3 = [httparse::EMPTY_HEADER; 40];
    let mut again = httparse::Response::new(&mut h3);
    match again.parse(&out) {
        Ok(httparse::Status::Complete(n)) => assert_eq!(n, out.len()),
        other => panic!("rewritten head does not parse: {other:?}"),
    }
    assert_eq!(again.code, Some(r.status));
    for f in again.headers.iter() {
        // The proxy's own Connection line: `upgrade` for a 101, `close` where the body ends
        // with the connection; the upstream's is never passed on.
        if f.name.eq_ignore_ascii_case("connection") {
            let own = if r.status == 101 {
                &b"upgrade"[..]
            } else {
                assert_eq!(
                    framing,
                    ClientFraming::Close,
                    "the upstream's Connection passed on"
                );
                b"close"
            };
            assert_eq!(
                f.value,
                own,
                "Connection: {:?}",
                String::from_utf8_lossy(f.value)
            );
            continue;
        }
        for hop in ["keep-alive", "te", "trailer", "proxy-connection"] {
            assert!(
                !f.name.eq_ignore_ascii_case(hop),
                "hop-by-hop {hop} passed on"
            );
        }
    }
});
