//! Helpers shared by the integration tests.
#![allow(dead_code)]

use ringx_http::{parse_request, BodyKind, Limits, Method, Parsed, Request, RequestError, Version};

/// An owned copy of a [`Request`], for comparing parses of different buffers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owned {
    pub method: Method,
    pub method_str: String,
    pub target: String,
    pub path: String,
    pub query: Option<String>,
    pub version: Version,
    pub host: Option<String>,
    pub host_name: Option<String>,
    pub headers: Vec<(String, Vec<u8>)>,
    pub body: BodyKind,
    pub keep_alive: bool,
    pub expect_continue: bool,
    pub head_len: usize,
}

impl Owned {
    pub fn from_request(r: &Request<'_, '_>) -> Owned {
        Owned {
            method: r.method,
            method_str: r.method_str.to_owned(),
            target: r.target.to_owned(),
            path: r.path.to_owned(),
            query: r.query.map(str::to_owned),
            version: r.version,
            host: r.host.map(ascii),
            host_name: r.host_name().map(ascii),
            headers: r
                .headers
                .iter()
                .map(|h| (h.name.to_owned(), h.value.to_vec()))
                .collect(),
            body: r.body,
            keep_alive: r.keep_alive,
            expect_continue: r.expect_continue,
            head_len: r.head_len,
        }
    }
}

/// Parses with `limits`, using `limits.max_headers` empty header slots like
/// the server does. `Ok(None)` is `Parsed::Partial`.
pub fn parse_with(buf: &[u8], limits: &Limits) -> Result<Option<Owned>, RequestError> {
    let mut headers = vec![httparse::EMPTY_HEADER; limits.max_headers];
    match parse_request(buf, &mut headers, limits)? {
        Parsed::Complete(r) => Ok(Some(Owned::from_request(&r))),
        Parsed::Partial => Ok(None),
    }
}

pub fn parse(buf: &[u8]) -> Result<Option<Owned>, RequestError> {
    parse_with(buf, &Limits::default())
}

use ringx_http::{BodyDecoder, BodyError, BodyLimits};

/// Result of feeding a body to a decoder the way the server does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fed {
    pub body: Vec<u8>,
    /// Input bytes left after the body (the next pipelined request).
    pub leftover: Vec<u8>,
    pub done: bool,
    pub received: u64,
}

/// Feeds `input`, cut at `cuts` (sorted or not, out-of-range ignored), to a
/// fresh decoder: append each piece to a pending buffer, decode while
/// progress is made, drop consumed bytes. Checks the API invariants on
/// every call. On error returns the error and the body decoded before it.
pub fn feed(
    kind: BodyKind,
    limits: BodyLimits,
    input: &[u8],
    cuts: &[usize],
) -> Result<Fed, (BodyError, Vec<u8>)> {
    let mut cuts: Vec<usize> = cuts.iter().copied().filter(|&c| c <= input.len()).collect();
    cuts.push(input.len());
    cuts.sort_unstable();
    let mut decoder = BodyDecoder::new(kind, limits);
    let mut pending: Vec<u8> = Vec::new();
    let mut body = Vec::new();
    let mut start = 0;
    for cut in cuts {
        pending.extend_from_slice(&input[start..cut]);
        start = cut;
        loop {
            if decoder.is_done() {
                break;
            }
            let d = match decoder.decode(&pending) {
                Ok(d) => d,
                Err(e) => {
                    // Errors are sticky.
                    assert!(decoder.decode(b"0\r\n\r\n").is_err());
                    return Err((e, body));
                }
            };
            assert!(d.consumed <= pending.len());
            assert!(d.data.len() <= d.consumed);
            let base = pending.as_ptr() as usize;
            let data_start = d.data.as_ptr() as usize;
            assert!(
                d.data.is_empty()
                    || (data_start >= base && data_start + d.data.len() <= base + d.consumed)
            );
            assert_eq!(d.done, decoder.is_done());
            body.extend_from_slice(d.data);
            let (consumed, done) = (d.consumed, d.done);
            pending.drain(..consumed);
            if consumed == 0 || done {
                break;
            }
        }
    }
    assert_eq!(decoder.received(), body.len() as u64);
    Ok(Fed {
        received: decoder.received(),
        body,
        leftover: pending,
        done: decoder.is_done(),
    })
}

/// A validated host as text; the parser promises it is ASCII.
fn ascii(b: &[u8]) -> String {
    assert!(
        b.is_ascii(),
        "a validated host with a non-ASCII byte: {b:?}"
    );
    String::from_utf8(b.to_vec()).expect("ASCII is UTF-8")
}
