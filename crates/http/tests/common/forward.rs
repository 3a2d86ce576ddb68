//! The framing oracle for messages crossing the proxy, shared by the property tests
//! (`tests/forward_prop.rs`) and the fuzz targets (`fuzz/fuzz_targets/forward_*.rs`).
//!
//! Each check replays what the proxy does with one message: it parses it, writes the head for
//! the other side and relays the body the way the zone does (raw bytes for
//! [`ClientFraming::Same`], decoded data for [`ClientFraming::Close`]). Then it parses that output
//! with ringx's own parser, as the next hop would, and requires exactly one message carrying
//! exactly the relayed body: the declared framing is the framing sent, and nothing is left over
//! to be read as a second message.
#![allow(dead_code)]

use ringx_http::upstream::{
    parse_response, upgrade_request, write_request_head, write_response_head, ClientFraming,
    Forward, ResponseBody,
};
use ringx_http::{
    httparse, parse_request, BodyDecoder, BodyKind, BodyLimits, Limits, Parsed, Version,
};

/// Limits large enough that a forwarded head (which gains `X-Forwarded-*` fields) is never
/// refused for its size.
const WIDE: Limits = Limits {
    max_head: 1 << 20,
    max_uri: 1 << 20,
    max_headers: 512,
};

/// The body of a message as the proxy relays it: `raw` is what it writes to the other side,
/// `data` the body's content. None when the input holds no complete, valid body (the proxy
/// gives up on the exchange then: nothing follows it on the connection).
fn relay(kind: BodyKind, input: &[u8], dechunk: bool) -> Option<(Vec<u8>, Vec<u8>)> {
    let mut dec = BodyDecoder::new(kind, BodyLimits::default());
    let (mut raw, mut data, mut pos) = (Vec::new(), Vec::new(), 0);
    while !dec.is_done() {
        let d = dec.decode(&input[pos..]).ok()?;
        if dechunk {
            raw.extend_from_slice(d.data);
        } else {
            raw.extend_from_slice(&input[pos..pos + d.consumed]);
        }
        data.extend_from_slice(d.data);
        pos += d.consumed;
        if d.consumed == 0 && !d.done {
            return None; // incomplete
        }
    }
    Some((raw, data))
}

/// Decodes `input` as a body framed by `kind` and requires it to end exactly at the end of
/// `input`: returns the data, or why not.
fn read_exactly(kind: BodyKind, input: &[u8]) -> Result<Vec<u8>, String> {
    let mut dec = BodyDecoder::new(kind, BodyLimits::default());
    let (mut data, mut pos) = (Vec::new(), 0);
    while !dec.is_done() {
        let d = dec
            .decode(&input[pos..])
            .map_err(|e| format!("the next hop cannot read the relayed body: {e}"))?;
        data.extend_from_slice(d.data);
        pos += d.consumed;
        if d.consumed == 0 && !d.done {
            return Err(format!(
                "the relayed body ends before its declared framing ({pos} of {} bytes read)",
                input.len()
            ));
        }
    }
    if pos != input.len() {
        return Err(format!(
            "{} relayed bytes are left after the declared body: a second message",
            input.len() - pos
        ));
    }
    Ok(data)
}

/// How the proxy is configured for one forwarded request.
#[derive(Debug, Clone, Copy)]
pub struct ForwardOpts<'a> {
    pub host: Option<&'a str>,
    pub forwarded_headers: bool,
    pub close: bool,
}

/// Forwards the request at the start of `input` (its body and whatever follows) and checks
/// the upstream's view of it. `Ok(false)`: nothing to check (no complete, valid request and
/// body); `Err`: the property failed, with the bytes.
pub fn check_request(input: &[u8], o: ForwardOpts<'_>) -> Result<bool, String> {
    let mut h = vec![httparse::EMPTY_HEADER; 256];
    let Ok(Parsed::Complete(req)) = parse_request(input, &mut h, &Limits::default()) else {
        return Ok(false);
    };
    let Some((raw_body, data)) = relay(req.body, &input[req.head_len..], false) else {
        return Ok(false);
    };
    let upgrade = upgrade_request(&req);
    let mut out = Vec::new();
    write_request_head(
        &mut out,
        &req,
        &Forward {
            client: Some("192.0.2.1".parse().unwrap()),
            proto: "http",
            host: o.host,
            forwarded_headers: o.forwarded_headers,
            close: o.close,
            upgrade,
            tls_client: None,
        },
    );
    let head_len = out.len();
    out.extend_from_slice(&raw_body);
    let show = || String::from_utf8_lossy(&out).into_owned();
    let mut h2 = vec![httparse::EMPTY_HEADER; 512];
    let fwd = match parse_request(&out, &mut h2, &WIDE) {
        Ok(Parsed::Complete(r)) => r,
        // A request without a Host (HTTP/1.0 may omit it) has none to forward: not framing.
        Err(e) if req.host.is_none() && o.host.is_none() && e.reason == "missing Host header" => {
            return Ok(false)
        }
        other => {
            return Err(format!(
                "forwarded head does not parse ({other:?}):\n{}",
                show()
            ))
        }
    };
    if fwd.head_len != head_len {
        return Err(format!(
            "forwarded head ends at {} not {head_len}:\n{}",
            fwd.head_len,
            show()
        ));
    }
    if (fwd.method_str, fwd.path, fwd.query) != (req.method_str, req.path, req.query) {
        return Err(format!("forwarded request line differs:\n{}", show()));
    }
    if fwd.body != req.body {
        return Err(format!(
            "client body {:?} forwarded as {:?}:\n{}",
            req.body,
            fwd.body,
            show()
        ));
    }
    let fwd_upgrade = fwd.header("upgrade");
    if fwd_upgrade != upgrade {
        return Err(format!(
            "Upgrade {upgrade:?} forwarded as {fwd_upgrade:?}:\n{}",
            show()
        ));
    }
    let got = read_exactly(fwd.body, &out[head_len..]).map_err(|e| format!("{e}:\n{}", show()))?;
    if got != data {
        return Err(format!("the upstream reads another body:\n{}", show()));
    }
    Ok(true)
}

/// Relays the upstream response at the start of `input` to a client speaking `client`, which
/// asked for a kept-alive connection when `keep`, and checks the client's view of it.
/// `Ok(false)`: nothing to check; `Err`: the property failed.
pub fn check_response(
    input: &[u8],
    head_request: bool,
    client: Version,
    keep: bool,
) -> Result<bool, String> {
    let mut h = [httparse::EMPTY_HEADER; 64];
    let Ok(Parsed::Complete(resp)) = parse_response(input, &mut h, 8192, head_request) else {
        return Ok(false);
    };
    if resp.status < 200 {
        return Ok(false); // interim responses are not relayed; 101 starts a tunnel
    }
    let rest = &input[resp.head_len..];
    // As the zone decides: a body delimited by closing cannot leave the client's connection open.
    let keep_client = keep && resp.body != ResponseBody::UntilClose;
    let conn: &[u8] = match (keep_client, client) {
        (false, _) => b"Connection: close\r\n",
        (true, Version::Http11) => b"",
        (true, Version::Http10) => b"Connection: keep-alive\r\n",
    };
    let mut out = Vec::new();
    let framing = write_response_head(&mut out, &resp, client, conn);
    let head_len = out.len();
    let relayed = match resp.body {
        ResponseBody::None => Some((Vec::new(), Vec::new())),
        ResponseBody::UntilClose => Some((rest.to_vec(), rest.to_vec())),
        ResponseBody::Length(n) => relay(BodyKind::Length(n), rest, false),
        ResponseBody::Chunked => relay(BodyKind::Chunked, rest, framing == ClientFraming::Close),
    };
    let Some((raw_body, data)) = relayed else {
        return Ok(false);
    };
    out.extend_from_slice(&raw_body);
    let show = || String::from_utf8_lossy(&out).into_owned();
    let mut h2 = [httparse::EMPTY_HEADER; 80];
    let seen = match parse_response(&out, &mut h2, 1 << 20, head_request) {
        Ok(Parsed::Complete(r)) => r,
        other => {
            return Err(format!(
                "relayed head does not parse ({other:?}):\n{}",
                show()
            ))
        }
    };
    if seen.head_len != head_len || seen.status != resp.status {
        return Err(format!("relayed head differs:\n{}", show()));
    }
    let want = match (resp.body, framing) {
        (ResponseBody::None, _) => ResponseBody::None,
        (_, ClientFraming::Close) => ResponseBody::UntilClose,
        (body, ClientFraming::Same) => body,
    };
    if seen.body != want {
        return Err(format!(
            "upstream body {:?} relayed as {framing:?} but declared as {:?}:\n{}",
            resp.body,
            seen.body,
            show()
        ));
    }
    let says_close = seen.headers.iter().any(|f| {
        f.name.eq_ignore_ascii_case("connection") && f.value.eq_ignore_ascii_case(b"close")
    });
    if framing == ClientFraming::Close && !says_close {
        return Err(format!(
            "a body delimited by closing without Connection: close:\n{}",
            show()
        ));
    }
    let got = match seen.body {
        ResponseBody::None => read_exactly(BodyKind::None, &out[head_len..]),
        ResponseBody::Length(n) => read_exactly(BodyKind::Length(n), &out[head_len..]),
        ResponseBody::Chunked => read_exactly(BodyKind::Chunked, &out[head_len..]),
        ResponseBody::UntilClose => Ok(out[head_len..].to_vec()),
    }
    .map_err(|e| format!("{e}:\n{}", show()))?;
    if got != data {
        return Err(format!("the client reads another body:\n{}", show()));
    }
    Ok(true)
}
