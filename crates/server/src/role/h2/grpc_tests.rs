//! gRPC calls through the HTTP/2 role and the test driver: what reaches the shared upstream
//! connection when clients open calls and reset them.

use ringx_h2proto::frame::{self, flag, kind, FrameHeader};
use ringx_h2proto::hpack::Encoder;
use ringx_h2proto::ErrorCode;

use crate::testkit::Harness;

const CONF: &str = r#"
[[server]]
listen = ["127.0.0.1:8080"]
  [[server.location]]
  path = "/"
  proxy_pass = "grpc://127.0.0.1:9001"
"#;

/// A unary call's frames on stream `id`: HEADERS, then one message with END_STREAM.
fn call(enc: &mut Encoder, id: u32) -> Vec<u8> {
    let fields: [(&[u8], &[u8]); 6] = [
        (b":method", b"POST"),
        (b":scheme", b"http"),
        (b":path", b"/t.T/Unary"),
        (b":authority", b"a"),
        (b"content-type", b"application/grpc"),
        (b"te", b"trailers"),
    ];
    let mut block = Vec::new();
    enc.encode(&mut block, fields);
    let mut b = Vec::new();
    frame::write_header_block(&mut b, id, &block, false, 16_384);
    let msg = b"\0\0\0\0\x04ping";
    frame::write_header(&mut b, msg.len(), kind::DATA, flag::END_STREAM, id);
    b.extend_from_slice(msg);
    b
}

/// The client preface with empty SETTINGS.
fn preface() -> Vec<u8> {
    let mut b = frame::PREFACE.to_vec();
    frame::write_header(&mut b, 0, kind::SETTINGS, 0, 0);
    b
}

/// (kind, stream) of each frame after the client preface in what the upstream received.
fn frames(mut b: &[u8]) -> Vec<(u8, u32)> {
    b = b
        .strip_prefix(frame::PREFACE)
        .expect("the client preface first");
    let mut out = Vec::new();
    while let Some(f) = FrameHeader::parse(b) {
        out.push((f.kind, f.stream));
        b = &b[9 + f.len as usize..];
    }
    out
}

#[test]
fn a_call_reset_in_the_read_that_opened_it_never_reaches_the_upstream() {
    let mut h = Harness::new(CONF);
    let c = h.client();
    let mut enc = Encoder::default();
    // A rapid reset: the call and its RST_STREAM in one read.
    let mut b = preface();
    b.extend(call(&mut enc, 1));
    frame::write_rst(&mut b, 1, ErrorCode::Cancel);
    h.send(c, &b);
    assert!(
        h.connects().is_empty(),
        "no upstream connection for a call already reset"
    );
    // A call that stays: it goes on, on a connection of its own; its reset, in a later
    // read, goes to the upstream too.
    h.send(c, &call(&mut enc, 3));
    let (u, _) = h.accept_upstream();
    h.send(c, &{
        let mut r = Vec::new();
        frame::write_rst(&mut r, 3, ErrorCode::Cancel);
        r
    });
    let got = frames(&h.upstream_got(u));
    let calls: Vec<_> = got.iter().filter(|f| f.0 == kind::HEADERS).collect();
    assert_eq!(
        calls,
        [&(kind::HEADERS, 1)],
        "one call, the upstream's stream 1: {got:?}"
    );
    assert!(
        got.contains(&(kind::RST_STREAM, 1)),
        "then cancelled: {got:?}"
    );
}
