//! What a stream does with its upstream connection once it has let go of it: nothing. A
//! closed connection's slot may carry another client's upstream by the time the stream ends.

use ringx_engine::ConnId;
use ringx_h2proto::frame::{self, kind};

use super::{data, window_update, Client};
use crate::testkit::Harness;

/// One upstream server, no keep-alive pool: every request opens its own connection.
const LIMITED: &str = r#"
[http]
client_max_body_size = "100"
[[server]]
listen = ["127.0.0.1:8080"]
  [[server.location]]
  path = "/"
  proxy_pass = "app"
[[upstream]]
name = "app"
servers = ["127.0.0.1:9001"]
keepalive = 0
retries = 0
"#;

/// Stream 3's POST body passes `client_max_body_size` after its request went upstream, so
/// it is answered 413 and lets go of that connection (returned: closed by then), while the
/// answer waits behind stream 1's response in a socket the client does not read.
fn refused_413() -> (Harness, Client, ConnId) {
    let mut h = Harness::new(LIMITED);
    let mut cl = Client::open(&mut h, &[(4, 1 << 30)]);
    h.send(cl.c, &window_update(0, 1 << 30));
    // Stream 1 fills the client's socket queue (the client reads nothing).
    h.t.set_window(cl.c, Some(0));
    cl.get(&mut h, 1, "/big");
    let (u1, _) = h.accept_upstream();
    let body = vec![b'q'; 400 * 1024];
    let mut resp =
        format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len()).into_bytes();
    resp.extend_from_slice(&body);
    h.send(u1, &resp);
    let fields = [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", "/up"),
        (":authority", "a"),
    ];
    let head = cl.headers(3, &fields, false);
    h.send(cl.c, &head);
    let (u3, _) = h.accept_upstream();
    h.send(cl.c, &data(3, &[b'x'; 200], false));
    h.flush();
    (h, cl, u3)
}

/// When the 413'd stream's slot then carries another client's upstream, the stream's end
/// (the client resets it while the 413 still waits) must not close that connection.
#[test]
fn a_413_stream_leaves_the_upstream_that_reused_its_slot_alone() {
    let (mut h, cl, u3) = refused_413();
    assert!(h.t.closed(u3), "the 413 let go of stream 3's upstream");
    // Another client's request reuses the slot.
    let c2 = h.client();
    h.send(c2, b"GET /other HTTP/1.1\r\nHost: a\r\n\r\n");
    let (u2, _) = h.accept_upstream();
    assert_eq!(u2, u3, "the test needs the slot reused");
    // The HTTP/2 client resets stream 3.
    let mut rst = Vec::new();
    frame::write_header(&mut rst, 4, kind::RST_STREAM, 0, 3);
    rst.extend_from_slice(&8u32.to_be_bytes());
    h.send(cl.c, &rst);
    h.flush();
    assert!(
        h.t.is_open(u2),
        "stream 3's end closed another client's upstream"
    );
}

/// The same 413, answered once the client reads again: ringx's page, not the empty output
/// of the exchange it let go of.
#[test]
fn a_413_for_a_proxied_stream_carries_its_page() {
    let (mut h, mut cl, _) = refused_413();
    h.t.set_window(cl.c, None);
    h.flush();
    let g = cl.got(&mut h, 3);
    assert_eq!((g.status, g.ended), (413, true));
    assert!(
        String::from_utf8_lossy(&g.body).contains("413 Content Too Large"),
        "{g:?}"
    );
}
