//! The HTTP/2 role through the test driver: an HTTP/2 client played with the protocol
//! crate's own HPACK and frame writers, against `return`, static files, the proxy (with an
//! upstream played by the harness), flow control, the limits, and draining.

use std::collections::HashMap;
use std::time::Duration;

use ringx_engine::ConnId;
use ringx_h2proto::frame::{self, flag, kind, FrameHeader};
use ringx_h2proto::hpack::{Decoder, Encoder};

use crate::testkit::{Harness, TempDir};

/// What a client received on one stream.
#[derive(Debug, Default, Clone)]
struct Got {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    /// Fields of a HEADERS block after the response head's.
    trailers: Vec<(String, String)>,
    ended: bool,
    reset: Option<u32>,
}

impl Got {
    fn header(&self, n: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == n)
            .map(|(_, v)| v.as_str())
    }
}

/// An HTTP/2 client: writes requests, reads what the server sent.
struct Client {
    c: ConnId,
    enc: Encoder,
    dec: Decoder,
    inbuf: Vec<u8>,
    streams: HashMap<u32, Got>,
    goaway: Option<(u32, u32)>,
    /// The server's SETTINGS arrived (the first frame).
    settings: bool,
    window_updates: u32,
}

impl Client {
    /// Connects and sends the preface with `settings` (id, value) pairs.
    fn open(h: &mut Harness, settings: &[(u16, u32)]) -> Client {
        Client::open_after(h, b"", settings)
    }

    /// Connects and sends `first` (a PROXY header), then the preface with `settings`, all in
    /// one write.
    fn open_after(h: &mut Harness, first: &[u8], settings: &[(u16, u32)]) -> Client {
        let c = h.client();
        let mut b = first.to_vec();
        b.extend_from_slice(frame::PREFACE);
        frame::write_header(&mut b, settings.len() * 6, kind::SETTINGS, 0, 0);
        for (id, v) in settings {
            b.extend_from_slice(&id.to_be_bytes());
            b.extend_from_slice(&v.to_be_bytes());
        }
        h.send(c, &b);
        Client::on(c)
    }

    /// A client on connection `c`, whose preface the test sends itself.
    fn on(c: ConnId) -> Client {
        Client {
            c,
            enc: Encoder::default(),
            dec: Decoder::default(),
            inbuf: Vec::new(),
            streams: HashMap::new(),
            goaway: None,
            settings: false,
            window_updates: 0,
        }
    }

    fn headers(&mut self, id: u32, fields: &[(&str, &str)], end_stream: bool) -> Vec<u8> {
        let mut block = Vec::new();
        self.enc.encode(
            &mut block,
            fields.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())),
        );
        let mut b = Vec::new();
        frame::write_header_block(&mut b, id, &block, end_stream, 16_384);
        b
    }

    fn get(&mut self, h: &mut Harness, id: u32, path: &str) {
        let b = self.headers(
            id,
            &[
                (":method", "GET"),
                (":scheme", "http"),
                (":path", path),
                (":authority", "example.com"),
            ],
            true,
        );
        h.send(self.c, &b);
    }

    /// Reads everything the server sent since the last call.
    fn read(&mut self, h: &mut Harness) {
        let out = h.output(self.c);
        self.inbuf.extend_from_slice(&out);
        let mut pos = 0;
        while let Some(f) = FrameHeader::parse(&self.inbuf[pos..]) {
            let end = pos + 9 + f.len as usize;
            if end > self.inbuf.len() {
                break;
            }
            let p = self.inbuf[pos + 9..end].to_vec();
            pos = end;
            match f.kind {
                kind::SETTINGS if !f.has(flag::ACK) => self.settings = true,
                kind::HEADERS | kind::CONTINUATION => {
                    let g = self.streams.entry(f.stream).or_default();
                    let mut fields = Vec::new();
                    self.dec
                        .decode(&p, 1 << 20, |n, v| {
                            fields.push((
                                String::from_utf8_lossy(n).into_owned(),
                                String::from_utf8_lossy(v).into_owned(),
                            ))
                        })
                        .expect("valid HPACK");
                    if g.status != 0 && f.kind == kind::HEADERS {
                        g.trailers.append(&mut fields);
                    }
                    for (n, v) in fields {
                        if n == ":status" {
                            g.status = v.parse().unwrap();
                        } else {
                            g.headers.push((n, v));
                        }
                    }
                    g.ended |= f.has(flag::END_STREAM);
                }
                kind::DATA => {
                    let g = self.streams.entry(f.stream).or_default();
                    g.body.extend_from_slice(&p);
                    g.ended |= f.has(flag::END_STREAM);
                }
                kind::RST_STREAM => {
                    let code = u32::from_be_bytes(p[..4].try_into().unwrap());
                    self.streams.entry(f.stream).or_default().reset = Some(code);
                }
                kind::GOAWAY => {
                    let last = u32::from_be_bytes(p[..4].try_into().unwrap());
                    let code = u32::from_be_bytes(p[4..8].try_into().unwrap());
                    self.goaway = Some((last, code));
                }
                kind::WINDOW_UPDATE => self.window_updates += 1,
                _ => {}
            }
        }
        self.inbuf.drain(..pos);
    }

    fn got(&mut self, h: &mut Harness, id: u32) -> Got {
        self.read(h);
        self.streams.get(&id).cloned().unwrap_or_default()
    }
}

fn window_update(id: u32, inc: u32) -> Vec<u8> {
    let mut b = Vec::new();
    frame::write_window_update(&mut b, id, inc);
    b
}

fn data(id: u32, bytes: &[u8], end: bool) -> Vec<u8> {
    let mut b = Vec::new();
    let f = if end { flag::END_STREAM } else { 0 };
    frame::write_header(&mut b, bytes.len(), kind::DATA, f, id);
    b.extend_from_slice(bytes);
    b
}

const RETURN: &str = r#"
[[server]]
listen = ["127.0.0.1:8080"]
  [[server.location]]
  path = "/"
  return = { status = 200, body = "hello over h2" }
"#;

#[test]
fn an_h2c_request_is_answered_on_its_stream() {
    let mut h = Harness::new(RETURN);
    let mut cl = Client::open(&mut h, &[]);
    cl.get(&mut h, 1, "/x");
    let g = cl.got(&mut h, 1);
    assert!(cl.settings, "SETTINGS first");
    assert_eq!(
        (g.status, g.body.as_slice(), g.ended),
        (200, &b"hello over h2"[..], true)
    );
    assert_eq!(g.header("content-length"), Some("13"));
    assert!(g.header("date").is_some() && g.header("server").is_some());
    assert!(
        g.header("connection").is_none(),
        "no connection-specific field"
    );
    // Two more on the same connection, answered in order of their streams.
    cl.get(&mut h, 3, "/");
    cl.get(&mut h, 5, "/y");
    assert!(cl.got(&mut h, 3).ended && cl.got(&mut h, 5).ended);
    assert_eq!(
        h.counters
            .h2_requests
            .load(std::sync::atomic::Ordering::Relaxed),
        3
    );
    assert!(h.t.is_open(cl.c));
}

#[test]
fn static_files_with_range_and_304() {
    let body: Vec<u8> = (0..40_000u32).map(|i| (i % 251) as u8).collect();
    let dir = TempDir::new(&[("f.bin", &body)]);
    let mut h = Harness::new(&format!(
        "[[server]]\nlisten = [\"127.0.0.1:8080\"]\n[[server.location]]\npath = \"/\"\nroot = \"{}\"\n",
        dir.path()
    ));
    let mut cl = Client::open(&mut h, &[]);
    cl.get(&mut h, 1, "/f.bin");
    let g = cl.got(&mut h, 1);
    assert_eq!(g.status, 200);
    assert_eq!(g.body, body, "byte-exact, in frames of the window");
    let etag = g.header("etag").unwrap().to_string();
    let b = cl.headers(
        3,
        &[
            (":method", "GET"),
            (":scheme", "http"),
            (":path", "/f.bin"),
            (":authority", "a"),
            ("range", "bytes=100-199"),
        ],
        true,
    );
    h.send(cl.c, &b);
    let g = cl.got(&mut h, 3);
    assert_eq!(g.status, 206);
    assert_eq!(g.body, &body[100..200]);
    let b = cl.headers(
        5,
        &[
            (":method", "GET"),
            (":scheme", "http"),
            (":path", "/f.bin"),
            (":authority", "a"),
            ("if-none-match", &etag),
        ],
        true,
    );
    h.send(cl.c, &b);
    let g = cl.got(&mut h, 5);
    assert_eq!((g.status, g.body.len(), g.ended), (304, 0, true));
    cl.get(&mut h, 7, "/missing");
    assert_eq!(cl.got(&mut h, 7).status, 404);
}

/// A peer window of 1000 bytes: the body goes 1000 bytes per window update, and two
/// streams share the connection.
#[test]
fn the_peer_window_paces_the_body() {
    let body = vec![b'z'; 5000];
    let dir = TempDir::new(&[("big", &body)]);
    let mut h = Harness::new(&format!(
        "[[server]]\nlisten = [\"127.0.0.1:8080\"]\n[[server.location]]\npath = \"/\"\nroot = \"{}\"\n",
        dir.path()
    ));
    let mut cl = Client::open(&mut h, &[(4, 1000)]);
    cl.get(&mut h, 1, "/big");
    cl.get(&mut h, 3, "/big");
    assert_eq!(cl.got(&mut h, 1).body.len(), 1000);
    assert_eq!(cl.got(&mut h, 3).body.len(), 1000);
    h.send(cl.c, &window_update(1, 1500));
    let g = cl.got(&mut h, 1);
    assert_eq!((g.body.len(), g.ended), (2500, false));
    assert_eq!(
        cl.got(&mut h, 3).body.len(),
        1000,
        "its own window is still closed"
    );
    h.send(cl.c, &window_update(1, 10_000));
    h.send(cl.c, &window_update(3, 10_000));
    assert!(cl.got(&mut h, 1).ended);
    let g = cl.got(&mut h, 3);
    assert_eq!((g.body, g.ended), (body, true));
}

const PROXY: &str = r#"
[[server]]
listen = ["127.0.0.1:8080"]
  [[server.location]]
  path = "/"
  proxy_pass = "app"
[[upstream]]
name = "app"
servers = ["127.0.0.1:9001"]
keepalive = 4
retries = 0
"#;

#[test]
fn a_proxied_stream_reaches_an_http1_upstream_and_the_pool_is_reused() {
    let mut h = Harness::new(PROXY);
    let mut cl = Client::open(&mut h, &[]);
    cl.get(&mut h, 1, "/api?q=1");
    let (u, _) = h.accept_upstream();
    h.flush();
    let req = String::from_utf8(h.upstream_got(u)).unwrap();
    assert!(req.starts_with("GET /api?q=1 HTTP/1.1\r\n"), "{req}");
    assert!(
        req.contains("\r\nHost: example.com\r\n") || req.contains("\r\nhost: example.com\r\n"),
        "{req}"
    );
    h.send(
        u,
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-Up: 1\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
    );
    let g = cl.got(&mut h, 1);
    assert_eq!(
        (g.status, g.body.as_slice(), g.ended),
        (200, &b"hello world"[..], true)
    );
    assert_eq!(g.header("x-up"), Some("1"));
    assert!(g.header("transfer-encoding").is_none());
    // The next stream goes over the pooled connection.
    cl.get(&mut h, 3, "/two");
    assert!(h.connects().is_empty(), "reused from the pool");
    h.flush();
    assert!(String::from_utf8(h.upstream_got(u))
        .unwrap()
        .starts_with("GET /two "));
    h.send(u, b"HTTP/1.1 204 No Content\r\n\r\n");
    let g = cl.got(&mut h, 3);
    assert_eq!((g.status, g.ended), (204, true));
}

#[test]
fn a_request_body_streams_to_the_upstream_chunked_or_with_its_length() {
    let mut h = Harness::new(PROXY);
    let mut cl = Client::open(&mut h, &[]);
    let b = cl.headers(
        1,
        &[
            (":method", "POST"),
            (":scheme", "http"),
            (":path", "/up"),
            (":authority", "a"),
        ],
        false,
    );
    h.send(cl.c, &b);
    let (u, _) = h.accept_upstream();
    h.send(cl.c, &data(1, b"abc", false));
    h.send(cl.c, &data(1, b"de", true));
    h.flush();
    let got = String::from_utf8(h.upstream_got(u)).unwrap();
    assert!(
        got.contains("Transfer-Encoding: chunked\r\n")
            || got.contains("transfer-encoding: chunked\r\n"),
        "{got}"
    );
    assert!(
        got.ends_with("\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"),
        "{got:?}"
    );
    h.send(u, b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok");
    assert_eq!(cl.got(&mut h, 1).status, 201);
    // With a content-length: passed as it is.
    let b = cl.headers(
        3,
        &[
            (":method", "POST"),
            (":scheme", "http"),
            (":path", "/up"),
            (":authority", "a"),
            ("content-length", "4"),
        ],
        false,
    );
    h.send(cl.c, &b);
    h.send(cl.c, &data(3, b"wxyz", true));
    h.flush();
    let got = String::from_utf8(h.upstream_got(u)).unwrap();
    assert!(
        got.to_ascii_lowercase().contains("content-length: 4\r\n"),
        "{got}"
    );
    assert!(got.ends_with("\r\n\r\nwxyz"), "{got:?}");
}

#[test]
fn smuggling_attempts_never_reach_the_upstream() {
    let mut h = Harness::new(PROXY);
    let mut cl = Client::open(&mut h, &[]);
    let cases: [&[(&str, &str)]; 3] = [
        &[("x-a", "1\r\nx-smuggled: 1")],
        &[("transfer-encoding", "chunked")],
        &[("content-length", "1"), ("content-length", "2")],
    ];
    let mut id = 1;
    for extra in cases {
        let mut f = vec![
            (":method", "POST"),
            (":scheme", "http"),
            (":path", "/"),
            (":authority", "a"),
        ];
        f.extend_from_slice(extra);
        let b = cl.headers(id, &f, false);
        h.send(cl.c, &b);
        assert_eq!(
            cl.got(&mut h, id).reset,
            Some(1),
            "PROTOCOL_ERROR for {extra:?}"
        );
        id += 2;
    }
    // More DATA than the content-length: reset before a byte of the excess is forwarded.
    let b = cl.headers(
        id,
        &[
            (":method", "POST"),
            (":scheme", "http"),
            (":path", "/"),
            (":authority", "a"),
            ("content-length", "2"),
        ],
        false,
    );
    h.send(cl.c, &b);
    let (u, _) = h.accept_upstream();
    h.send(cl.c, &data(id, b"0123456789", false));
    h.flush();
    let got = h.upstream_got(u);
    assert!(
        !got.ends_with(b"0123456789") && !got.windows(3).any(|w| w == b"012"),
        "{got:?}"
    );
    assert_eq!(cl.got(&mut h, id).reset, Some(1));
    assert!(
        h.t.closed(u),
        "the cut request's upstream connection is closed"
    );
    assert!(h.connects().is_empty());
}

#[test]
fn an_unreachable_upstream_is_a_502_on_that_stream_only() {
    let mut h = Harness::new(PROXY);
    let mut cl = Client::open(&mut h, &[]);
    cl.get(&mut h, 1, "/");
    let (u, _) = h.connects().remove(0);
    h.upstream_refuses(u);
    let g = cl.got(&mut h, 1);
    assert_eq!((g.status, g.ended), (502, true));
    assert!(h.t.is_open(cl.c), "the connection carries on");
}

#[test]
fn a_slow_reader_pauses_the_upstream_until_its_window_opens() {
    let mut h = Harness::new(PROXY);
    let mut cl = Client::open(&mut h, &[(4, 100)]);
    cl.get(&mut h, 1, "/big");
    let (u, _) = h.accept_upstream();
    let body = vec![b'q'; 600 * 1024];
    let mut resp =
        format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len()).into_bytes();
    resp.extend_from_slice(&body[..300 * 1024]);
    h.send(u, &resp);
    assert_eq!(cl.got(&mut h, 1).body.len(), 100);
    assert!(
        h.t.recv_paused(u),
        "the upstream waits for the client's window"
    );
    h.send(cl.c, &window_update(0, 1 << 30));
    h.send(cl.c, &window_update(1, 1 << 30));
    h.flush();
    assert!(!h.t.recv_paused(u));
    h.send(u, &body[300 * 1024..]);
    let g = cl.got(&mut h, 1);
    assert_eq!((g.body.len(), g.ended), (body.len(), true));
}

#[test]
fn a_drain_sends_goaway_and_lets_the_stream_in_flight_finish() {
    let mut h = Harness::new(PROXY);
    let mut cl = Client::open(&mut h, &[]);
    cl.get(&mut h, 1, "/");
    let (u, _) = h.accept_upstream();
    h.drain();
    cl.read(&mut h);
    assert_eq!(cl.goaway, Some((1, 0)), "GOAWAY NO_ERROR, last stream 1");
    cl.get(&mut h, 3, "/late");
    assert!(
        h.connects().is_empty(),
        "a stream after GOAWAY is not served"
    );
    h.send(u, b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
    assert_eq!(cl.got(&mut h, 1).body, b"ok");
    h.flush();
    assert!(h.t.closed(cl.c), "closed once its last stream ended");
}

#[test]
fn rapid_reset_ends_the_connection_with_enhance_your_calm() {
    let mut h = Harness::new(&format!("[http2]\nmax_resets = 20\n{RETURN}"));
    let mut cl = Client::open(&mut h, &[]);
    let mut b = Vec::new();
    for n in 0..40u32 {
        let id = 1 + 2 * n;
        b.extend(cl.headers(
            id,
            &[
                (":method", "POST"),
                (":scheme", "http"),
                (":path", "/"),
                (":authority", "a"),
            ],
            false,
        ));
        frame::write_rst(&mut b, id, ringx_h2proto::ErrorCode::Cancel);
    }
    h.send(cl.c, &b);
    cl.read(&mut h);
    assert_eq!(cl.goaway.map(|g| g.1), Some(0xb), "ENHANCE_YOUR_CALM");
    h.flush();
    assert!(h.t.closed(cl.c));
    let n = h.counters.h2_errors[ringx_h2proto::Why::RapidReset.index()]
        .load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(n, 1);
}

#[test]
fn a_zero_window_stall_is_ended_at_the_send_timeout() {
    let dir = TempDir::new(&[("big", &[b'x'; 10_000])]);
    let mut h = Harness::new(&format!(
        "[http]\nsend_timeout = \"5s\"\n[[server]]\nlisten = [\"127.0.0.1:8080\"]\n[[server.location]]\npath = \"/\"\nroot = \"{}\"\n",
        dir.path()
    ));
    let mut cl = Client::open(&mut h, &[(4, 0)]);
    cl.get(&mut h, 1, "/big");
    assert_eq!(cl.got(&mut h, 1).status, 200);
    h.advance(Duration::from_secs(4));
    assert!(h.t.is_open(cl.c));
    h.advance(Duration::from_secs(2));
    h.flush();
    assert!(h.t.closed(cl.c));
    let n =
        h.counters.h2_errors[crate::metrics::H2_STALL].load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(n, 1);
}

#[test]
fn an_oversized_header_list_gets_431() {
    let mut h = Harness::new(&format!("[http2]\nmax_header_list_size = \"2k\"\n{RETURN}"));
    let mut cl = Client::open(&mut h, &[]);
    let big = "v".repeat(3000);
    let b = cl.headers(
        1,
        &[
            (":method", "GET"),
            (":scheme", "http"),
            (":path", "/"),
            (":authority", "a"),
            ("x-big", &big),
        ],
        true,
    );
    h.send(cl.c, &b);
    assert_eq!(cl.got(&mut h, 1).status, 431);
    cl.get(&mut h, 3, "/");
    assert_eq!(cl.got(&mut h, 3).status, 200, "the connection goes on");
}

/// A location's per-request behaviour reaches HTTP/2 streams through the same routing,
/// response writer and exchange preparation as HTTP/1 requests.
const DECORATED: &str = r#"
[http]
gzip = { types = ["text/html"], min_length = 10, level = 5 }
[[server]]
listen = ["127.0.0.1:8080"]
rewrite = ["^/old/(.*)$ /new/$1 permanent", "^/in/(.*)$ /page/$1 last"]
  [[server.location]]
  path = "/page/"
  proxy_pass = "http://app/v2/"
  proxy_hide_header = ["X-Powered-By"]
  proxy_intercept_errors = true
  proxy_set_header = { "X-Req" = "$request_method $uri" }
  add_header = { "X-A" = "1", "X-Always" = { value = "yes", always = true } }
  error_page = { "404 502" = "/oops" }
  [[server.location]]
  path = "= /oops"
  return = { status = 200, content_type = "text/html", body = "custom page" }
  [[server.location]]
  path = "/"
  return = { status = 200, content_type = "text/html", body = "<p>local page, long enough to compress</p>" }
  add_header = { "X-Local" = "$host" }
[[upstream]]
name = "app"
servers = ["127.0.0.1:9001"]
keepalive = 4
retries = 0
"#;

fn gunzip(b: &[u8]) -> Vec<u8> {
    use std::io::Read;
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(b)
        .read_to_end(&mut out)
        .expect("a gzip body");
    out
}

fn gz_get(cl: &mut Client, h: &mut Harness, id: u32, path: &str) {
    let b = cl.headers(
        id,
        &[
            (":method", "GET"),
            (":scheme", "http"),
            (":path", path),
            (":authority", "h.test"),
            ("accept-encoding", "gzip"),
        ],
        true,
    );
    h.send(cl.c, &b);
}

#[test]
fn a_proxied_stream_gets_the_location_rewrite_headers_and_compression() {
    let mut h = Harness::new(DECORATED);
    let mut cl = Client::open(&mut h, &[]);
    gz_get(&mut cl, &mut h, 1, "/in/x?q=1");
    let (u, _) = h.accept_upstream();
    h.flush();
    let req = String::from_utf8(h.upstream_got(u)).unwrap();
    assert!(
        req.starts_with("GET /v2/x?q=1 HTTP/1.1\r\n"),
        "rewritten, then the proxy_pass URI part: {req}"
    );
    assert!(req.contains("\r\nX-Req: GET /page/x\r\n"), "{req}");
    let body: Vec<u8> = (0..4000)
        .flat_map(|i| format!("<p>line {i}</p>\n").into_bytes())
        .collect();
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\nX-Powered-By: php\r\n\r\n",
        body.len()
    );
    h.send(u, head.as_bytes());
    h.send(u, &body);
    let g = cl.got(&mut h, 1);
    assert_eq!((g.status, g.ended), (200, true));
    assert_eq!(g.header("content-encoding"), Some("gzip"));
    assert_eq!(g.header("vary"), Some("Accept-Encoding"));
    assert_eq!(
        (g.header("x-a"), g.header("x-always")),
        (Some("1"), Some("yes"))
    );
    assert!(g.header("x-powered-by").is_none() && g.header("content-length").is_none());
    assert_eq!(gunzip(&g.body), body);
    // The upstream connection went back to the pool.
    gz_get(&mut cl, &mut h, 3, "/page/y");
    assert!(h.connects().is_empty(), "reused from the pool");
}

#[test]
fn a_stream_gets_the_error_page_of_its_location() {
    let mut h = Harness::new(DECORATED);
    let mut cl = Client::open(&mut h, &[]);
    // An upstream error intercepted.
    gz_get(&mut cl, &mut h, 1, "/page/a");
    let (u, _) = h.accept_upstream();
    h.flush();
    h.upstream_got(u);
    h.send(u, b"HTTP/1.1 404 Not Found\r\nContent-Length: 3\r\n\r\nno!");
    let g = cl.got(&mut h, 1);
    assert_eq!(
        (g.status, g.body.as_slice(), g.ended),
        (404, &b"custom page"[..], true)
    );
    // An upstream that cannot be reached.
    gz_get(&mut cl, &mut h, 3, "/page/b");
    let (u, _) = h.connects().remove(0);
    h.upstream_refuses(u);
    let g = cl.got(&mut h, 3);
    assert_eq!(
        (g.status, g.body.as_slice(), g.ended),
        (502, &b"custom page"[..], true)
    );
    assert!(h.t.is_open(cl.c), "the connection carries on");
}

#[test]
fn a_local_stream_gets_redirects_added_headers_and_compression() {
    let mut h = Harness::new(DECORATED);
    let mut cl = Client::open(&mut h, &[]);
    gz_get(&mut cl, &mut h, 1, "/old/z");
    let g = cl.got(&mut h, 1);
    assert_eq!(g.status, 301);
    assert_eq!(g.header("location"), Some("http://h.test:8080/new/z"));
    gz_get(&mut cl, &mut h, 3, "/home");
    let g = cl.got(&mut h, 3);
    assert_eq!((g.status, g.ended), (200, true));
    assert_eq!(g.header("x-local"), Some("h.test"));
    assert_eq!(g.header("content-encoding"), Some("gzip"));
    assert_eq!(
        gunzip(&g.body),
        b"<p>local page, long enough to compress</p>".to_vec()
    );
}

/// A load balancer in front announces the client with a PROXY header; h2c follows it.
const PROXIED_LB: &str = r#"
[[server]]
listen = ["127.0.0.1:8080"]
proxy_protocol = true
  [[server.location]]
  path = "/up/"
  proxy_pass = "app"
  [[server.location]]
  path = "/"
  return = { status = 200, body = "hello over h2" }
[[upstream]]
name = "app"
servers = ["127.0.0.1:9001"]
keepalive = 4
retries = 0
"#;

#[test]
fn h2c_follows_a_proxy_header_and_the_client_address_is_the_announced_one() {
    let mut h = Harness::new(PROXIED_LB);
    // The header and the preface in one read.
    let hdr = b"PROXY TCP4 203.0.113.9 10.0.0.1 4444 80\r\n";
    let mut cl = Client::open_after(&mut h, hdr, &[]);
    cl.get(&mut h, 1, "/up/x");
    let (u, _) = h.accept_upstream();
    h.flush();
    let req = String::from_utf8(h.upstream_got(u)).unwrap();
    assert!(req.starts_with("GET /up/x HTTP/1.1\r\n"), "{req}");
    assert!(
        req.contains("\r\nX-Forwarded-For: 203.0.113.9\r\n"),
        "{req}"
    );
    h.send(u, b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
    let g = cl.got(&mut h, 1);
    assert!(cl.settings, "spoken to as HTTP/2");
    assert_eq!(
        (g.status, g.body.as_slice(), g.ended),
        (200, &b"ok"[..], true)
    );
    // The header alone, the preface in a later read.
    let c = h.client();
    h.send(c, b"PROXY TCP4 203.0.113.10 10.0.0.1 4445 80\r\n");
    assert!(
        h.output(c).is_empty(),
        "nothing answered to the header alone"
    );
    let mut b = frame::PREFACE.to_vec();
    frame::write_header(&mut b, 0, kind::SETTINGS, 0, 0);
    h.send(c, &b);
    let mut cl = Client::on(c);
    cl.get(&mut h, 1, "/");
    let g = cl.got(&mut h, 1);
    assert!(cl.settings, "spoken to as HTTP/2");
    assert_eq!((g.status, g.body.as_slice()), (200, &b"hello over h2"[..]));
    // Without a header the connection is refused, preface or not.
    let c = h.client();
    let mut b = frame::PREFACE.to_vec();
    frame::write_header(&mut b, 0, kind::SETTINGS, 0, 0);
    h.send(c, &b);
    assert!(h.output(c).is_empty());
    assert!(!h.t.is_open(c), "closed without a PROXY header");
}

/// TCP may split a client's first write anywhere: a read that ends within the preface's
/// first 4 bytes (after the PROXY header, or alone) decides nothing yet.
#[test]
fn a_preface_cut_in_its_first_bytes_still_starts_http2() {
    let mut h = Harness::new(PROXIED_LB);
    let mut b = frame::PREFACE.to_vec();
    frame::write_header(&mut b, 0, kind::SETTINGS, 0, 0);
    for cut in 1..4 {
        let c = h.client();
        let mut first = b"PROXY TCP4 203.0.113.9 10.0.0.1 4444 80\r\n".to_vec();
        first.extend_from_slice(&b[..cut]);
        h.send(c, &first);
        assert!(h.output(c).is_empty(), "nothing answered yet ({cut} bytes)");
        h.send(c, &b[cut..]);
        let mut cl = Client::on(c);
        cl.get(&mut h, 1, "/");
        let g = cl.got(&mut h, 1);
        assert!(
            cl.settings,
            "spoken to as HTTP/2 ({cut} bytes after the header)"
        );
        assert_eq!((g.status, g.body.as_slice()), (200, &b"hello over h2"[..]));
    }
    let mut h = Harness::new(RETURN);
    for cut in 1..4 {
        let c = h.client();
        h.send(c, &b[..cut]);
        h.send(c, &b[cut..]);
        let mut cl = Client::on(c);
        cl.get(&mut h, 1, "/");
        assert_eq!(cl.got(&mut h, 1).status, 200, "{cut} bytes first");
        assert!(cl.settings);
    }
    // An HTTP/1 request that starts like the preface ("P") is still HTTP/1.
    let c = h.client();
    h.send(c, b"P");
    h.send(c, b"UT / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n");
    let out = String::from_utf8_lossy(&h.output(c)).into_owned();
    assert!(out.starts_with("HTTP/1.1 "), "{out}");
}

#[test]
fn an_upstream_chunked_trailer_section_reaches_the_client_as_trailers() {
    let mut h = Harness::new(PROXY);
    let mut cl = Client::open(&mut h, &[]);
    cl.get(&mut h, 1, "/t");
    let (u, _) = h.accept_upstream();
    h.flush();
    h.upstream_got(u);
    h.send(
        u,
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Checksum\r\n\r\n\
          5\r\nhello\r\n0\r\nX-Checksum: abc \r\nGrpc-Status:0\r\nConnection: close\r\n\
          Content-Length: 9\r\n\r\n",
    );
    let g = cl.got(&mut h, 1);
    assert_eq!(
        (g.status, g.body.as_slice(), g.ended),
        (200, &b"hello"[..], true)
    );
    let t = |n: &str, v: &str| (n.to_string(), v.to_string());
    assert_eq!(
        g.trailers,
        vec![t("x-checksum", "abc"), t("grpc-status", "0")],
        "lowercased, trimmed, connection and framing fields dropped"
    );
    // Without a trailer section the stream ends on its DATA, and the upstream is reused.
    cl.get(&mut h, 3, "/u");
    assert!(h.connects().is_empty(), "reused from the pool");
    h.flush();
    h.upstream_got(u);
    h.send(
        u,
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
    );
    let g = cl.got(&mut h, 3);
    assert_eq!((g.body.as_slice(), g.ended), (&b"ok"[..], true));
    assert!(g.trailers.is_empty());
}

/// A stream passes its location's guard as an HTTP/1 request does: access rules refuse it
/// with 403 (on that stream only), `limit_conn` counts a stream while it lives, and an
/// `auth_request` location asks its service per stream: a 401 is passed on (never the
/// content), a 2xx lets the stream through.
#[test]
fn a_stream_passes_its_locations_guard() {
    let mut h = Harness::new(
        r#"
[[limit_conn_zone]]
name = "h2_conn"
key = "$remote_addr"
[[server]]
listen = ["127.0.0.1:8080"]
  [[server.location]]
  path = "/"
  proxy_pass = "app"
  limit_conn = { zone = "h2_conn", max = 1 }
  [[server.location]]
  path = "/denied/"
  return = { status = 200, body = "secret" }
  access = ["deny all"]
  [[server.location]]
  path = "/auth/"
  return = { status = 200, body = "secret" }
  auth_request = { proxy_pass = "auth", uri = "/check" }
[[upstream]]
name = "app"
servers = ["127.0.0.1:9001"]
keepalive = 4
retries = 0
[[upstream]]
name = "auth"
servers = ["127.0.0.1:9002"]
keepalive = 4
retries = 0
"#,
    );
    let mut cl = Client::open(&mut h, &[]);
    cl.get(&mut h, 1, "/denied/x");
    let g = cl.got(&mut h, 1);
    assert_eq!((g.status, g.ended), (403, true));
    assert!(!g.body.windows(6).any(|w| w == b"secret"));
    cl.get(&mut h, 3, "/auth/x");
    let (a, _) = h.accept_upstream();
    h.flush();
    let sub = String::from_utf8(h.upstream_got(a)).unwrap();
    assert!(sub.starts_with("GET /check ") && sub.contains("X-Original-URI: /auth/x"));
    h.send(a, b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\n\r\n");
    let g = cl.got(&mut h, 3);
    assert_eq!((g.status, g.ended), (401, true));
    assert!(!g.body.windows(6).any(|w| w == b"secret"));
    // The next stream's subrequest goes on the kept-alive connection; allowed, it is served.
    cl.get(&mut h, 11, "/auth/y");
    h.flush();
    assert!(String::from_utf8(h.upstream_got(a))
        .unwrap()
        .contains("X-Original-URI: /auth/y"));
    h.send(a, b"HTTP/1.1 204 No Content\r\n\r\n");
    let g = cl.got(&mut h, 11);
    assert_eq!((g.status, g.body.as_slice()), (200, &b"secret"[..]));
    // limit_conn: a second stream while the first is proxied is refused; once the first
    // ended, the next passes.
    cl.get(&mut h, 13, "/slow");
    let (u, _) = h.accept_upstream();
    cl.get(&mut h, 15, "/x");
    assert_eq!(cl.got(&mut h, 15).status, 503);
    h.flush();
    h.upstream_got(u);
    h.send(u, b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi");
    assert_eq!(cl.got(&mut h, 13).status, 200);
    cl.get(&mut h, 17, "/x");
    h.flush();
    assert!(String::from_utf8(h.upstream_got(u))
        .unwrap()
        .starts_with("GET /x "));
    h.send(u, b"HTTP/1.1 204 No Content\r\n\r\n");
    assert_eq!(cl.got(&mut h, 17).status, 204);
    assert!(h.t.is_open(cl.c));
}

/// A stream whose password is verified on the auth pool (`guard::verify`) waits alone: the
/// connection's other streams are answered meanwhile, and each answer of the pool comes back
/// to its stream.
#[test]
fn a_stream_waits_for_the_auth_pool_alone() {
    let users = "alice:$2y$04$PSP8EQ/tSO3IOd.ESMCCZOSVl7MNmbPFnP892W9X4fHnLGQe1p.RK\n";
    let dir = TempDir::new(&[("users", users.as_bytes())]);
    let (mut h, mut w) = Harness::with_auth_pool(&format!(
        r#"
[[server]]
listen = ["127.0.0.1:8080"]
  [[server.location]]
  path = "/"
  return = {{ status = 200, body = "open" }}
  [[server.location]]
  path = "/g/"
  return = {{ status = 200, body = "guarded" }}
  auth_basic = {{ realm = "r", user_file = "{}/users" }}
"#,
        dir.path()
    ));
    let mut cl = Client::open(&mut h, &[]);
    for (id, cred) in [(1, "YWxpY2U6d3Jvbmc="), (3, "YWxpY2U6c2VjcmV0")] {
        let auth = format!("Basic {cred}");
        let b = cl.headers(
            id,
            &[
                (":method", "GET"),
                (":scheme", "http"),
                (":path", "/g/"),
                (":authority", "a"),
                ("authorization", &auth),
            ],
            true,
        );
        h.send(cl.c, &b);
    }
    cl.get(&mut h, 5, "/");
    assert_eq!(
        cl.got(&mut h, 5).status,
        200,
        "answered while the others wait"
    );
    assert_eq!(cl.got(&mut h, 1).status, 0);
    while w.run_one() {}
    h.wake();
    let g = cl.got(&mut h, 1);
    assert_eq!(g.status, 401);
    assert!(g.header("www-authenticate").is_some());
    let g = cl.got(&mut h, 3);
    assert_eq!((g.status, g.body.as_slice()), (200, &b"guarded"[..]));
}

/// A QUIC server's answers over HTTP/2 carry its `Alt-Svc` once, as fields: a `return` from
/// its load-time fields, a missing file's 404 from the location's added lines, a proxied
/// response from its decoration (`alt_svc.rs`).
#[test]
fn a_quic_servers_answers_over_h2_carry_alt_svc() {
    let dir = TempDir::new(&[]);
    let mut h = Harness::with_quic(&format!(
        "[[server]]\nlisten = [\"127.0.0.1:8443\"]\n\
         [[server.location]]\npath = \"/\"\nreturn = {{ status = 200, body = \"hi\" }}\n\
         [[server.location]]\npath = \"/f/\"\nalias = \"{}/\"\n\
         [[server.location]]\npath = \"/up/\"\nproxy_pass = \"http://127.0.0.1:9001\"\n",
        dir.path()
    ));
    let alt = |g: &Got| -> Vec<String> {
        g.headers
            .iter()
            .filter(|(k, _)| k == "alt-svc")
            .map(|(_, v)| v.clone())
            .collect()
    };
    let want = ["h3=\":8443\"; ma=86400".to_string()];
    let mut cl = Client::open(&mut h, &[]);
    cl.get(&mut h, 1, "/");
    let g = cl.got(&mut h, 1);
    assert_eq!((g.status, alt(&g)), (200, want.to_vec()));
    cl.get(&mut h, 3, "/f/missing");
    let g = cl.got(&mut h, 3);
    assert_eq!((g.status, alt(&g)), (404, want.to_vec()));
    cl.get(&mut h, 5, "/up/x");
    let (u, _) = h.accept_upstream();
    h.flush();
    h.upstream_got(u);
    h.send(u, b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
    let g = cl.got(&mut h, 5);
    assert_eq!((g.status, g.body.as_slice()), (200, &b"ok"[..]));
    assert_eq!(alt(&g), want.to_vec());
}

#[path = "upstream_tests.rs"]
mod upstream;
