//! Properties of the upstream response parser: it never panics, a generated response parses
//! to what was generated, and every strict prefix of its head is `Partial`.

use proptest::prelude::*;
use std::mem::MaybeUninit;

use ringx_http::upstream::{parse_response, parse_response_uninit, ResponseBody};
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

/// What a parse says, in a form that can be compared (the heads borrow different storage).
fn summary(
    r: Result<
        Parsed<ringx_http::upstream::ResponseHead<'_, '_>>,
        ringx_http::upstream::UpstreamError,
    >,
) -> String {
    match r {
        Ok(Parsed::Complete(h)) => {
            let fields: Vec<_> = h.headers.iter().map(|f| (f.name, f.value)).collect();
            format!(
                "{:?} {} {:?} {:?} {:?} {} {}",
                h.version, h.status, h.reason, fields, h.body, h.keep_alive, h.head_len
            )
        }
        Ok(Parsed::Partial) => "partial".into(),
        Err(e) => format!("error {e}"),
    }
}

proptest! {
    /// The proxy's hot path (uninitialised header storage) says what the plain parser says,
    /// field limit included.
    #[test]
    fn uninit_storage_parses_the_same(
        bytes in proptest::collection::vec(any::<u8>(), 0..300),
        fields in proptest::collection::vec((token(), "[ -~]{0,12}"), 0..20),
        head in any::<bool>(),
        garbage in any::<bool>(),
    ) {
        let raw = if garbage {
            bytes
        } else {
            let mut r = "HTTP/1.1 200 OK\r\n".to_string();
            for (n, v) in &fields {
                r += &format!("{n}: {}\r\n", v.trim());
            }
            r += "Content-Length: 3\r\n\r\nabc";
            r.into_bytes()
        };
        let mut h = [httparse::EMPTY_HEADER; 16];
        let mut u = [const { MaybeUninit::<httparse::Header>::uninit() }; 16];
        prop_assert_eq!(
            summary(parse_response(&raw, &mut h, 512, head)),
            summary(parse_response_uninit(&raw, &mut u, 512, head))
        );
    }

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
