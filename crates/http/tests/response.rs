//! Status lines, reason phrases, chunked encoding, error pages and dates.

use ringx_http::{
    fmt_http_date, parse_http_date, reason, write_chunk, write_last_chunk, write_status_line,
    BodyDecoder, BodyKind, BodyLimits, DateCache,
};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Sun, 06 Nov 1994 08:49:37 GMT
const RFC_EXAMPLE: u64 = 784_111_777;

fn at(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(secs)
}

#[test]
fn reason_phrases() {
    let table = [
        (100, "Continue"),
        (200, "OK"),
        (204, "No Content"),
        (206, "Partial Content"),
        (301, "Moved Permanently"),
        (304, "Not Modified"),
        (400, "Bad Request"),
        (404, "Not Found"),
        (405, "Method Not Allowed"),
        (413, "Content Too Large"),
        (414, "URI Too Long"),
        (417, "Expectation Failed"),
        (431, "Request Header Fields Too Large"),
        (500, "Internal Server Error"),
        (501, "Not Implemented"),
        (505, "HTTP Version Not Supported"),
        (0, "Unknown"),
        (299, "Unknown"),
        (999, "Unknown"),
    ];
    for (status, phrase) in table {
        assert_eq!(reason(status), phrase, "{status}");
    }
}

#[test]
fn status_lines() {
    for (status, line) in [
        (200, &b"HTTP/1.1 200 OK\r\n"[..]),
        (431, b"HTTP/1.1 431 Request Header Fields Too Large\r\n"),
        (599, b"HTTP/1.1 599 Unknown\r\n"),
    ] {
        let mut out = b"prefix".to_vec();
        write_status_line(&mut out, status);
        assert_eq!(&out[6..], line);
    }
}

#[test]
fn date_cache_format() {
    let mut cache = DateCache::new();
    assert_eq!(cache.header().len(), 37);
    assert!(cache.header().starts_with(b"Date: ") && cache.header().ends_with(b" GMT\r\n"));

    cache.update(at(RFC_EXAMPLE));
    assert_eq!(cache.header(), b"Date: Sun, 06 Nov 1994 08:49:37 GMT\r\n");
    // Same second: unchanged; next second: updated.
    cache.update(at(RFC_EXAMPLE) + Duration::from_millis(999));
    assert_eq!(cache.header(), b"Date: Sun, 06 Nov 1994 08:49:37 GMT\r\n");
    cache.update(at(RFC_EXAMPLE + 1));
    assert_eq!(cache.header(), b"Date: Sun, 06 Nov 1994 08:49:38 GMT\r\n");
    cache.update(at(0));
    assert_eq!(cache.header(), b"Date: Thu, 01 Jan 1970 00:00:00 GMT\r\n");
    // Out-of-range times are clamped rather than panicking.
    cache.update(UNIX_EPOCH - Duration::from_secs(10));
    assert_eq!(cache.header(), b"Date: Thu, 01 Jan 1970 00:00:00 GMT\r\n");
    cache.update(at(u64::from(u32::MAX) * 1000));
    assert_eq!(cache.header(), b"Date: Fri, 31 Dec 9999 23:59:59 GMT\r\n");
}

#[test]
fn http_dates() {
    assert_eq!(
        fmt_http_date(at(RFC_EXAMPLE)),
        "Sun, 06 Nov 1994 08:49:37 GMT"
    );
    for s in [
        "Sun, 06 Nov 1994 08:49:37 GMT",
        "Sunday, 06-Nov-94 08:49:37 GMT",
        "Sun Nov  6 08:49:37 1994",
    ] {
        assert_eq!(parse_http_date(s), Some(at(RFC_EXAMPLE)), "{s}");
    }
    for s in [
        "",
        "yesterday",
        "Sun, 06 Nov 1994 08:49:37 UTC",
        "Sun, 32 Nov 1994 08:49:37 GMT",
    ] {
        assert_eq!(parse_http_date(s), None, "{s}");
    }
}

#[test]
fn chunk_encoder_round_trips() {
    let mut out = Vec::new();
    write_chunk(&mut out, b"");
    assert!(out.is_empty());
    let big = vec![b'x'; 300];
    write_chunk(&mut out, b"hello");
    write_chunk(&mut out, &big);
    write_last_chunk(&mut out);
    assert!(out.starts_with(b"5\r\nhello\r\n12c\r\n"));
    assert!(out.ends_with(b"x\r\n0\r\n\r\n"));

    let mut decoder = BodyDecoder::new(BodyKind::Chunked, BodyLimits::default());
    let mut input = &out[..];
    let mut body = Vec::new();
    while !decoder.is_done() {
        let d = decoder.decode(input).unwrap();
        body.extend_from_slice(d.data);
        input = &input[d.consumed..];
    }
    assert!(input.is_empty());
    assert_eq!(body, [&b"hello"[..], &big].concat());
}
