//! Properties of the upstream response parser: it never panics, a generated response parses
//! to what was generated, and every strict prefix of its head is `Partial`.

use proptest::prelude::*;
use ringx_http::upstream::{parse_response, ResponseBody};
use ringx_http::{httparse, Parsed};

fn token() -> impl Strategy<Value = String> {
    "[A-Za-z][A-Za-z0-9-]{0,15}".prop_filter("not a framing field", |n| {
        let l = n.to_ascii_lowercase();
        !matches!(
            l.as_str(),
            "content-length" | "transfer-encoding" | "connection"
        )
    })
}

proptest! {
    #[test]
    fn never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..600), head in any::<bool>()) {
        let mut h = [httparse::EMPTY_HEADER; 16];
        let _ = parse_response(&bytes, &mut h, 512, head);
    }

    #[test]
    fn generated_responses_parse(
        status in 200u16..600,
        fields in proptest::collection::vec((token(), "[ -~]{0,20}"), 0..8),
        framing in 0u8..3,
        len in 0u64..100_000,
        close in any::<bool>(),
    ) {
        let mut raw = format!("HTTP/1.1 {status} Whatever\r\n");
        for (n, v) in &fields {
            raw += &format!("{n}: {}\r\n", v.trim());
        }
        match framing {
            0 => raw += &format!("Content-Length: {len}\r\n"),
            1 => raw += "Transfer-Encoding: chunked\r\n",
            _ => {}
        }
        if close {
            raw += "Connection: close\r\n";
        }
        raw += "\r\n";
        let raw = raw.into_bytes();
        let mut h = [httparse::EMPTY_HEADER; 16];
        let Ok(Parsed::Complete(r)) = parse_response(&raw, &mut h, 8192, false) else {
            panic!("did not parse: {}", String::from_utf8_lossy(&raw));
        };
        prop_assert_eq!(r.status, status);
        prop_assert_eq!(r.head_len, raw.len());
        let no_body = status == 204 || status == 304;
        let want = match framing {
            _ if no_body => ResponseBody::None,
            0 => ResponseBody::Length(len),
            1 => ResponseBody::Chunked,
            _ => ResponseBody::UntilClose,
        };
        prop_assert_eq!(r.body, want);
        prop_assert_eq!(r.keep_alive, !close && want != ResponseBody::UntilClose);
        for cut in 0..raw.len() {
            let mut h2 = [httparse::EMPTY_HEADER; 16];
            prop_assert!(matches!(parse_response(&raw[..cut], &mut h2, 8192, false), Ok(Parsed::Partial)));
        }
    }
}
