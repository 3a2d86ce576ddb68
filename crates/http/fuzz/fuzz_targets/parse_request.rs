//! Fuzz `parse_request`: never panics, results point into the input, and
//! the verdict does not depend on where the input was cut.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ringx_http::httparse::{Header, EMPTY_HEADER};
use ringx_http::{parse_request, Limits, Parsed, Request};

/// Comparable summary of a parse result.
type Summary = Result<Option<String>, u16>;

fn within(outer: &[u8], inner: &[u8]) -> bool {
    let (o, i) = (outer.as_ptr() as usize, inner.as_ptr() as usize);
    inner.is_empty() || (i >= o && i + inner.len() <= o + outer.len())
}

fn check(buf: &[u8], req: &Request<'_, '_>, limits: &Limits) {
    let head = &buf[..req.head_len];
    assert!(req.head_len <= buf.len() && req.head_len <= limits.max_head);
    assert!(req.headers.len() <= limits.max_headers);
    assert!(req.target.len() <= limits.max_uri);
    assert!(within(head, req.method_str.as_bytes()));
    assert!(within(head, req.target.as_bytes()));
    assert!(req.path == "/" || within(req.target.as_bytes(), req.path.as_bytes()));
    if let Some(q) = req.query {
        assert!(within(req.target.as_bytes(), q.as_bytes()));
    }
    if let Some(h) = req.host {
        assert!(within(head, h));
        assert!(h.is_ascii(), "a validated host is ASCII");
        assert!(within(h, req.host_name().unwrap()));
    }
    for h in req.headers {
        assert!(within(head, h.name.as_bytes()) && within(head, h.value));
        // field-vchar / SP / HTAB only: release builds rely on httparse for this.
        assert!(h.value.iter().all(|&b| b == b'\t' || (b' '..=b'~').contains(&b) || b >= 0x80));
    }
    // No NUL and no bare CR: release builds rely on httparse for this too.
    assert!(!head.contains(&0));
    for (i, &b) in head.iter().enumerate() {
        assert!(b != b'\r' || head.get(i + 1) == Some(&b'\n'));
    }
}

fn run(buf: &[u8], limits: &Limits) -> Summary {
    let mut headers: Vec<Header<'_>> = vec![EMPTY_HEADER; limits.max_headers];
    match parse_request(buf, &mut headers, limits) {
        Ok(Parsed::Complete(req)) => {
            check(buf, &req, limits);
            Ok(Some(format!("{req:?}")))
        }
        Ok(Parsed::Partial) => Ok(None),
        Err(e) => {
            assert!(matches!(e.status, 400 | 414 | 417 | 431 | 501 | 505), "{e}");
            assert!(!e.reason.is_empty());
            Err(e.status)
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&config, buf)) = data.split_first() else {
        return;
    };
    // Small limits half of the time, so the limit paths are reachable.
    let limits = if config & 1 == 0 {
        Limits::default()
    } else {
        Limits {
            max_head: 24 + usize::from(config >> 2),
            max_uri: usize::from(config >> 4),
            max_headers: usize::from(config >> 5),
        }
    };
    let full = run(buf, &limits);
    match &full {
        Ok(Some(_)) => {
            // A complete head: exactly its bytes parse the same, and every
            // shorter prefix is incomplete.
            let mut headers = vec![EMPTY_HEADER; limits.max_headers];
            let Ok(Parsed::Complete(req)) = parse_request(buf, &mut headers, &limits) else {
                unreachable!()
            };
            let head_len = req.head_len;
            assert_eq!(run(&buf[..head_len], &limits), full);
            for k in [0, head_len / 2, head_len.saturating_sub(1)] {
                if k < head_len {
                    assert_eq!(run(&buf[..k], &limits), Ok(None), "prefix {k}");
                }
            }
        }
        Ok(None) => {}
        Err(status) => {
            // A rejected input: every prefix is incomplete or rejected the
            // same way.
            for k in (0..buf.len()).step_by(1 + buf.len() / 16) {
                match run(&buf[..k], &limits) {
                    Ok(None) => {}
                    other => assert_eq!(other, Err(*status), "prefix {k}"),
                }
            }
        }
    }
});
