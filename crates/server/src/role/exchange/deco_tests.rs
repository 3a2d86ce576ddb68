//! A location's decoration of proxied responses, through the test driver: the body compressed
//! as it arrives (chunked, the connection kept), headers added and hidden, upstream errors
//! replaced by the error page, an unreachable upstream answered with it.

use std::io::Read;

use crate::testkit::Harness;

fn harness() -> Harness {
    Harness::new(
        r#"
[http]
gzip = { types = ["text/html"], min_length = 10, level = 5 }
[[server]]
listen = ["127.0.0.1:8080"]
  [[server.location]]
  path = "/"
  proxy_pass = "app"
  proxy_hide_header = ["X-Powered-By"]
  proxy_intercept_errors = true
  add_header = { "X-A" = "1", "X-Always" = { value = "yes", always = true } }
  error_page = { "404 502" = "/oops" }
  [[server.location]]
  path = "= /oops"
  return = { status = 200, content_type = "text/html", body = "custom page" }
[[upstream]]
name = "app"
servers = ["127.0.0.1:9001"]
keepalive = 4
retries = 0
"#,
    )
}

const GZ_GET: &[u8] = b"GET /page HTTP/1.1\r\nHost: h.test\r\nAccept-Encoding: gzip\r\n\r\n";

fn gunzip(b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(b)
        .read_to_end(&mut out)
        .expect("a gzip body");
    out
}

#[test]
fn a_proxied_body_is_compressed_as_it_arrives_and_the_connection_kept() {
    let mut h = harness();
    let c = h.client();
    h.send(c, GZ_GET);
    let (u, _) = h.accept_upstream();
    h.upstream_got(u);
    let body: Vec<u8> = (0..4000)
        .flat_map(|i| format!("<p>line {i}</p>\n").into_bytes())
        .collect();
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\nX-Powered-By: php\r\nETag: \"e\"\r\n\r\n",
        body.len()
    );
    h.send(u, head.as_bytes());
    h.send(u, &body[..30_000]);
    let first = h.output(c);
    let text = String::from_utf8_lossy(&first);
    assert!(text.contains("Content-Encoding: gzip\r\n"), "{text}");
    assert!(text.contains("Transfer-Encoding: chunked\r\n"), "{text}");
    assert!(text.contains("Vary: Accept-Encoding\r\n") && text.contains("X-A: 1\r\n"));
    assert!(text.contains("ETag: W/\"e\"\r\n") && !text.contains("X-Powered-By"));
    assert!(!text.contains("Content-Length"), "{text}");
    h.send(u, &body[30_000..]);
    let mut all = first;
    all.extend_from_slice(&h.output(c));
    assert!(
        all.ends_with(b"\r\n0\r\n\r\n"),
        "the last chunk ends the body"
    );
    let r = &crate::testkit::parse_responses(&all)[0];
    assert_eq!(r.status, 200);
    assert_eq!(gunzip(&r.body), body);
    assert!(!r.closes());
    // The connection goes on, and the upstream connection was pooled for it.
    h.send(c, GZ_GET);
    assert!(
        h.connects().is_empty(),
        "the pooled upstream connection is reused"
    );
    assert!(h.upstream_got(u).starts_with(b"GET /page "));
}

#[test]
fn an_intercepted_upstream_error_gets_the_error_page() {
    let mut h = harness();
    let c = h.client();
    h.send(c, GZ_GET);
    let (u, _) = h.accept_upstream();
    h.upstream_got(u);
    h.send(u, b"HTTP/1.1 404 Not Found\r\nContent-Length: 3\r\n\r\nno!");
    let r = h.response(c);
    assert_eq!((r.status, r.text().as_str()), (404, "custom page"));
    assert_eq!(
        r.header("x-always"),
        None,
        "the error page's location sets no headers"
    );
}

#[test]
fn an_unreachable_upstream_gets_the_error_page() {
    let mut h = harness();
    let c = h.client();
    h.send(c, GZ_GET);
    let (u, _) = h.connects()[0];
    h.upstream_refuses(u);
    let r = h.response(c);
    assert_eq!((r.status, r.text().as_str()), (502, "custom page"));
}
