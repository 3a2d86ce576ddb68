//! The zone driven through the test driver: routing, keep-alive and pipelining, limits,
//! timeouts, drain and reload, as a client sees them.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crate::testkit::{get, Harness, TempDir};
use crate::zone::CMD_DRAIN;

const HTTP: &str = r#"
[http]
client_header_timeout = "10s"
client_body_timeout = "12s"
keepalive_timeout = "30s"
send_timeout = "20s"
lingering_timeout = "5s"
keepalive_requests = 3
client_max_body_size = "100"
max_header_size = "1k"
"#;

const SERVERS: &str = r#"
[[server]]
listen = ["127.0.0.1:8080"]
server_name = ["h.test"]
  [[server.location]]
  path = "/"
  return = { status = 200, body = "root" }
  [[server.location]]
  path = "/a/"
  return = { status = 200, body = "a" }
  [[server.location]]
  path = "/a/b/"
  return = { status = 201, body = "ab" }
  [[server.location]]
  path = "/exact"
  exact = true
  return = { status = 202, body = "exact" }
[[server]]
listen = ["127.0.0.1:8080"]
server_name = ["*.wild.test"]
  [[server.location]]
  path = "/"
  return = { status = 200, body = "wild" }
[[server]]
listen = ["127.0.0.1:8080"]
server_name = ["other.test"]
default = true
  [[server.location]]
  path = "/only/"
  return = { status = 200, body = "default" }
"#;

fn zone() -> Harness {
    Harness::new(&format!("{HTTP}{SERVERS}"))
}

fn req(method: &str, path: &str, host: &str, extra: &str) -> Vec<u8> {
    format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\n{extra}\r\n").into_bytes()
}

/// One GET on a new connection; the response.
fn fetch(h: &mut Harness, path: &str, host: &str) -> crate::testkit::Resp {
    let c = h.client();
    h.send(c, &req("GET", path, host, ""));
    h.response(c)
}

// ---- routing ------------------------------------------------------------------------------

#[test]
fn a_return_location_answers_with_its_status_and_body() {
    let mut h = zone();
    let r = fetch(&mut h, "/", "h.test");
    assert_eq!((r.status, r.text().as_str()), (200, "root"));
    assert_eq!(r.header("content-length"), Some("4"));
    assert!(r.header("date").is_some() && r.header("server").is_some());
}

#[test]
fn the_longest_prefix_wins() {
    let mut h = zone();
    assert_eq!(fetch(&mut h, "/a/x", "h.test").text(), "a");
    assert_eq!(fetch(&mut h, "/a/b/x", "h.test").text(), "ab");
    assert_eq!(fetch(&mut h, "/ab", "h.test").text(), "root");
}

#[test]
fn an_exact_location_matches_only_its_path() {
    let mut h = zone();
    assert_eq!(fetch(&mut h, "/exact", "h.test").status, 202);
    assert_eq!(fetch(&mut h, "/exact/", "h.test").text(), "root");
}

#[test]
fn the_host_picks_the_server() {
    let mut h = zone();
    assert_eq!(fetch(&mut h, "/", "H.TEST:8080").text(), "root");
    assert_eq!(fetch(&mut h, "/", "x.wild.test").text(), "wild");
    assert_eq!(fetch(&mut h, "/only/", "unknown.test").text(), "default");
}

#[test]
fn no_matching_location_is_404() {
    let mut h = zone();
    let r = fetch(&mut h, "/nowhere", "other.test");
    assert_eq!(r.status, 404);
    assert!(r.text().contains("404 Not Found"));
    assert!(!r.closes(), "a 404 keeps the connection");
}

#[test]
fn paths_are_normalised_before_routing() {
    let mut h = zone();
    assert_eq!(fetch(&mut h, "/x/../a/b/%2e/y", "h.test").text(), "ab");
    assert_eq!(fetch(&mut h, "//a//x", "h.test").text(), "a");
}

#[test]
fn a_path_above_the_root_is_400_and_closes() {
    let mut h = zone();
    let c = h.client();
    h.send(c, &req("GET", "/../etc/passwd", "h.test", ""));
    let r = h.response(c);
    assert_eq!(r.status, 400);
    assert!(r.closes());
    assert!(
        h.t.closed(c),
        "nothing more was sent: closed after the response"
    );
}

#[test]
fn head_gets_the_head_only() {
    let mut h = zone();
    let c = h.client();
    h.send(c, &req("HEAD", "/a/", "h.test", ""));
    let out = h.output(c);
    assert!(out.ends_with(b"\r\n\r\n"), "{out:?}");
    assert!(String::from_utf8_lossy(&out).contains("Content-Length: 1\r\n"));
}

#[test]
fn options_asterisk_lists_the_methods() {
    let mut h = zone();
    let c = h.client();
    h.send(c, b"OPTIONS * HTTP/1.1\r\nHost: h.test\r\n\r\n");
    let r = h.response(c);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("allow"), Some("GET, HEAD, POST, OPTIONS"));
}

#[test]
fn connect_is_405() {
    let mut h = zone();
    let c = h.client();
    h.send(
        c,
        b"CONNECT h.test:443 HTTP/1.1\r\nHost: h.test:443\r\n\r\n",
    );
    assert_eq!(h.response(c).status, 405);
}

#[test]
fn static_files_are_served_with_validators_and_missing_ones_are_404() {
    let dir = TempDir::new(&[("x.txt", b"hello file"), ("d/index.html", b"<p>i</p>")]);
    let mut h = Harness::new(&format!(
        "[[server]]\nlisten = [\"127.0.0.1:8080\"]\n[[server.location]]\npath = \"/\"\nroot = \"{}\"\n",
        dir.path()
    ));
    let c = h.client();
    h.send(c, &get("/x.txt"));
    let r = h.response(c);
    assert_eq!((r.status, r.text().as_str()), (200, "hello file"));
    assert_eq!(r.header("content-type"), Some("text/plain"));
    let etag = r.header("etag").expect("an ETag").to_string();
    h.send(
        c,
        &req(
            "GET",
            "/x.txt",
            "h.test",
            &format!("If-None-Match: {etag}\r\n"),
        ),
    );
    assert_eq!(h.response(c).status, 304);
    h.send(c, &req("GET", "/x.txt", "h.test", "Range: bytes=1-4\r\n"));
    let r = h.response(c);
    assert_eq!((r.status, r.text().as_str()), (206, "ello"));
    h.send(c, &get("/d/"));
    assert_eq!(h.response(c).text(), "<p>i</p>");
    h.send(c, &get("/missing"));
    assert_eq!(h.response(c).status, 404);
}

/// A refusal does not wait for a request's body: a client trickling it holds nothing.
#[test]
fn a_post_to_a_static_location_is_refused_at_once() {
    let dir = TempDir::new(&[("x.txt", b"x")]);
    let mut h = Harness::new(&format!(
        "[[server]]\nlisten = [\"127.0.0.1:8080\"]\n[[server.location]]\npath = \"/\"\nroot = \"{}\"\n",
        dir.path()
    ));
    let c = h.client();
    h.send(
        c,
        &req("POST", "/x.txt", "h.test", "Content-Length: 50\r\n"),
    );
    let r = h.response(c);
    assert_eq!(r.status, 405);
    assert_eq!(r.header("allow"), Some("GET, HEAD"));
    assert!(r.closes(), "the unread body makes the connection unusable");
    assert!(h.t.write_shut(c));
}

// ---- keep-alive and pipelining --------------------------------------------------------------

#[test]
fn a_keep_alive_connection_serves_request_after_request() {
    let mut h = zone();
    let c = h.client();
    for path in ["/", "/a/"] {
        h.send(c, &get(path));
        assert!(!h.response(c).closes());
    }
    assert!(h.t.is_open(c));
}

#[test]
fn pipelined_requests_are_answered_in_order() {
    let mut h = zone();
    let c = h.client();
    let mut burst = get("/a/b/");
    burst.extend(get("/exact"));
    burst.extend(get("/a/"));
    h.send(c, &burst);
    let bodies: Vec<String> = h.responses(c).iter().map(|r| r.text()).collect();
    assert_eq!(bodies, ["ab", "exact", "a"]);
}

/// However the bytes are split, the same responses come out.
#[test]
fn pipelined_requests_split_anywhere_give_the_same_responses() {
    let mut burst = get("/a/b/");
    burst.extend(b"POST /a/ HTTP/1.1\r\nHost: h.test\r\nContent-Length: 3\r\n\r\nxyz");
    burst.extend(get("/exact"));
    let mut want = None;
    for cut in 1..burst.len() {
        let mut h = zone();
        let c = h.client();
        h.send(c, &burst[..cut]);
        h.send(c, &burst[cut..]);
        let got: Vec<(u16, String)> = h
            .responses(c)
            .iter()
            .map(|r| (r.status, r.text()))
            .collect();
        let want = want.get_or_insert_with(|| got.clone());
        assert_eq!(&got, want, "cut at {cut}");
    }
    assert_eq!(want.map(|w| w.len()), Some(3));
}

#[test]
fn connection_close_is_honoured() {
    let mut h = zone();
    let c = h.client();
    h.send(c, &req("GET", "/", "h.test", "Connection: close\r\n"));
    assert!(h.response(c).closes());
    assert!(h.t.closed(c));
}

#[test]
fn http10_closes_unless_it_asks_for_keep_alive() {
    let mut h = zone();
    let c = h.client();
    h.send(c, b"GET / HTTP/1.0\r\n\r\n");
    let r = h.response(c);
    assert!(r.closes() && h.t.closed(c));
    let c = h.client();
    h.send(c, b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    let r = h.response(c);
    assert_eq!(r.header("connection"), Some("keep-alive"));
    assert!(h.t.is_open(c));
}

#[test]
fn keepalive_requests_limits_a_connection() {
    let mut h = zone();
    let c = h.client();
    h.send(c, &get("/"));
    h.send(c, &get("/"));
    assert!(h.responses(c).iter().all(|r| !r.closes()));
    h.send(c, &get("/"));
    assert!(
        h.response(c).closes(),
        "the third of keepalive_requests = 3 says close"
    );
    assert!(h.t.closed(c));
}

#[test]
fn a_request_body_is_read_before_the_next_request() {
    let mut h = zone();
    let c = h.client();
    h.send(
        c,
        b"POST /a/ HTTP/1.1\r\nHost: h.test\r\nContent-Length: 10\r\n\r\n01234",
    );
    assert!(h.responses(c).is_empty(), "the answer waits for the body");
    let mut rest = b"56789".to_vec();
    rest.extend(get("/exact"));
    h.send(c, &rest);
    let bodies: Vec<String> = h.responses(c).iter().map(|r| r.text()).collect();
    assert_eq!(bodies, ["a", "exact"]);
}

#[test]
fn a_chunked_body_is_read_before_the_next_request() {
    let mut h = zone();
    let c = h.client();
    let mut b = b"POST /a/ HTTP/1.1\r\nHost: h.test\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n".to_vec();
    b.extend(get("/exact"));
    h.send(c, &b);
    let bodies: Vec<String> = h.responses(c).iter().map(|r| r.text()).collect();
    assert_eq!(bodies, ["a", "exact"]);
}

#[test]
fn expect_continue_gets_100_before_the_body_is_sent() {
    let mut h = zone();
    let c = h.client();
    h.send(
        c,
        &req(
            "POST",
            "/a/",
            "h.test",
            "Content-Length: 2\r\nExpect: 100-continue\r\n",
        ),
    );
    assert_eq!(h.output(c), b"HTTP/1.1 100 Continue\r\n\r\n");
    h.send(c, b"ok");
    assert_eq!(h.response(c).text(), "a");
}

#[test]
fn a_body_over_the_limit_is_413() {
    let mut h = zone();
    let c = h.client();
    h.send(c, &req("POST", "/a/", "h.test", "Content-Length: 101\r\n"));
    let r = h.response(c);
    assert!(r.status == 413 && r.closes());
    let c = h.client();
    let chunk = format!("{:x}\r\n{}\r\n", 101, "x".repeat(101));
    let mut b = req("POST", "/a/", "h.test", "Transfer-Encoding: chunked\r\n");
    b.extend(chunk.as_bytes());
    h.send(c, &b);
    assert_eq!(h.response(c).status, 413, "counted while streaming, too");
}

#[test]
fn a_head_over_the_limit_is_431() {
    let mut h = zone();
    let c = h.client();
    let big = format!("X-Big: {}\r\n", "y".repeat(2000));
    h.send(c, &req("GET", "/", "h.test", &big));
    assert_eq!(h.response(c).status, 431);
}

#[test]
fn a_malformed_request_is_400_and_nothing_after_it_is_answered() {
    let mut h = zone();
    let c = h.client();
    let mut b = b"GET / HTTP/1.1\r\nHost: h.test\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n"
        .to_vec();
    b.extend(get("/a/"));
    h.send(c, &b);
    let r = h.responses(c);
    assert_eq!(r.len(), 1, "{r:?}");
    assert!(r[0].status == 400 && r[0].closes());
    h.send(c, &get("/a/"));
    assert!(h.output(c).is_empty(), "lingering: input is discarded");
}

#[test]
fn a_slow_reader_stops_the_reading_of_its_requests() {
    let mut h = Harness::new(&format!(
        "{}{SERVERS}",
        HTTP.replace("keepalive_requests = 3", "keepalive_requests = 10000")
    ));
    let c = h.client();
    h.t.set_window(c, Some(0));
    let one = req(
        "GET",
        "/a/b/",
        "h.test",
        "X-Pad: 0123456789012345678901234567890123456789\r\n",
    );
    let burst: Vec<u8> = one.iter().copied().cycle().take(one.len() * 3000).collect();
    // As the kernel delivers it: receive buffers of 16 KiB, none once reading stopped.
    let mut sent = 0;
    for piece in burst.chunks(16384) {
        if h.t.recv_paused(c) {
            break;
        }
        h.send(c, piece);
        sent += piece.len();
    }
    assert!(h.t.recv_paused(c), "over 256 KiB queued: reading stops");
    assert!(h.t.is_open(c));
    h.t.set_window(c, None);
    h.flush();
    assert!(!h.t.recv_paused(c), "resumed once the queue drained");
    h.send(c, &burst[sent..]);
    assert_eq!(h.responses(c).len(), 3000);
}

#[test]
fn a_client_fin_after_a_response_closes_the_connection() {
    let mut h = zone();
    let c = h.client();
    h.send(c, &get("/"));
    h.eof(c);
    assert_eq!(h.responses(c).len(), 1);
    assert!(h.t.closed(c));
    let c = h.client();
    h.send(c, b"GET / HT");
    h.eof(c);
    assert!(h.t.closed(c), "a FIN in the middle of a head");
    assert!(h.output(c).is_empty());
}

#[test]
fn the_look_at_freed_memory_survives_the_zones_other_timers() {
    // Four keep-alive clients; two leave just before the others' keep-alive timeout. The zone
    // arms a look at freed memory (ctx/trim.rs) for after that timeout, whose timer call
    // must not forget it.
    let mut h = zone();
    let cs: Vec<_> = (0..4)
        .map(|_| {
            let c = h.client();
            h.send(c, &get("/"));
            assert_eq!(h.responses(c).len(), 1);
            c
        })
        .collect();
    h.advance(Duration::from_millis(29_800));
    for &c in &cs[..2] {
        h.eof(c);
        assert!(h.t.closed(c));
    }
    let at =
        h.z.ctx
            .trim
            .at()
            .expect("half the connections left: a look is armed");
    h.advance(Duration::from_millis(400));
    assert!(h.t.closed(cs[2]) && h.t.closed(cs[3]), "keep-alive timeout");
    assert_eq!(h.z.ctx.trim.at(), Some(at), "not due yet");
    assert!(
        h.t.next_timer().is_some_and(|t| t <= at),
        "the zone's timer forgot the look"
    );
    h.advance(Duration::from_millis(200));
    assert!(
        h.z.ctx.trim.at().is_none_or(|t| t > at),
        "the look was due and did not happen"
    );
}

// ---- timeouts -----------------------------------------------------------------------------

#[test]
fn an_idle_keep_alive_connection_closes_after_keepalive_timeout() {
    let mut h = zone();
    let c = h.client();
    h.send(c, &get("/"));
    h.responses(c);
    h.advance(Duration::from_secs(29));
    assert!(h.t.is_open(c));
    h.advance(Duration::from_secs(2));
    assert!(h.t.closed(c));
    assert!(h.output(c).is_empty(), "closed without a response");
}

#[test]
fn a_new_connection_must_send_its_head_within_client_header_timeout() {
    let mut h = zone();
    let c = h.client();
    h.advance(Duration::from_secs(9));
    assert!(h.t.is_open(c));
    h.advance(Duration::from_secs(2));
    assert!(h.t.closed(c), "no request at all: closed silently");
}

#[test]
fn a_partial_head_times_out_with_408() {
    let mut h = zone();
    let c = h.client();
    h.send(c, &get("/"));
    h.responses(c);
    h.advance(Duration::from_secs(25));
    h.send(c, b"GET / HTTP/1.1\r\nHo");
    h.advance(Duration::from_secs(11));
    let r = h.response(c);
    assert!(r.status == 408 && r.closes());
}

#[test]
fn a_stalled_body_times_out_with_408() {
    let mut h = zone();
    let c = h.client();
    h.send(
        c,
        b"POST /a/ HTTP/1.1\r\nHost: h.test\r\nContent-Length: 10\r\n\r\n01",
    );
    h.advance(Duration::from_secs(11));
    h.send(c, b"23"); // progress moves the body deadline
    h.advance(Duration::from_secs(11));
    assert!(h.responses(c).is_empty());
    h.advance(Duration::from_secs(2));
    assert_eq!(h.response(c).status, 408);
}

#[test]
fn a_reader_that_stops_is_closed_after_send_timeout_without_progress() {
    let mut h = zone();
    let c = h.client();
    h.t.set_window(c, Some(10));
    let mut burst = Vec::new();
    for _ in 0..2 {
        burst.extend(get("/a/b/"));
    }
    h.send(c, &burst);
    h.advance(Duration::from_secs(31)); // the keep-alive deadline, with output pending
    assert!(h.t.is_open(c), "still sending: the send timeout applies");
    h.t.set_window(c, Some(20)); // a little progress
    h.flush();
    // Progress is looked for at each deadline: the next one (50 s) sees it and gives the
    // connection another send_timeout; the one after (70 s) finds none.
    h.advance(Duration::from_secs(38));
    assert!(h.t.is_open(c), "progress restarted the send timeout");
    h.advance(Duration::from_secs(2));
    assert!(h.t.closed(c), "no progress for send_timeout");
}

#[test]
fn a_lingering_connection_closes_after_lingering_timeout() {
    let mut h = zone();
    let c = h.client();
    h.send(c, b"BAD\r\n\r\n");
    assert_eq!(h.response(c).status, 400);
    assert!(h.t.write_shut(c) && h.t.is_open(c));
    h.advance(Duration::from_secs(6));
    assert!(h.t.closed(c));
}

// ---- drain and reload ---------------------------------------------------------------------

fn drain(h: &mut Harness) {
    h.ctl.cmd.store(CMD_DRAIN, Ordering::Release);
    h.t.wake(&mut h.z);
}

#[test]
fn a_drain_stops_listening_gives_idle_connections_a_grace_and_exits_when_empty() {
    let mut h = zone();
    let idle = h.client();
    h.send(idle, &get("/"));
    h.responses(idle);
    let busy = h.client();
    h.send(
        busy,
        b"POST /a/ HTTP/1.1\r\nHost: h.test\r\nContent-Length: 4\r\n\r\n01",
    );
    drain(&mut h);
    assert!(!h.t.listening());
    h.send(busy, b"23");
    let r = h.response(busy);
    assert!(
        r.closes(),
        "a response prepared before the drain now says close"
    );
    h.advance(Duration::from_millis(1100));
    assert!(h.t.closed(idle), "idle keep-alive: closed after the grace");
    assert!(!h.t.exited(), "the answered one lingers");
    h.advance(Duration::from_secs(5));
    assert!(h.t.closed(busy), "after lingering_timeout");
    assert!(h.t.exited(), "no connection left: the zone ends");
}

#[test]
fn a_drain_that_finds_a_response_still_sending_closes_it_after_the_grace() {
    // The request's last bytes and the drain's wake-up can arrive in one batch, the data
    // first: the response is made for keep-alive and is still queued when the drain looks.
    let mut h = zone();
    let c = h.client();
    h.t.set_window(c, Some(0));
    h.send(c, &get("/"));
    drain(&mut h);
    h.t.set_window(c, None);
    h.flush();
    assert_eq!(h.responses(c).len(), 1);
    h.advance(Duration::from_millis(1100));
    assert!(
        h.t.closed(c),
        "closed after the drain's grace, not kept for keepalive_timeout"
    );
    assert!(h.t.exited());
}

#[test]
fn a_drain_serves_a_connection_accepted_while_the_accepts_were_being_cancelled() {
    // io_uring cancels accepts asynchronously, and a connection accepted meanwhile reaches
    // the zone after the drain began: with no connection left, the zone exits only once
    // the kernel has given the accepts back, and answers the late one first.
    let mut h = zone();
    h.t.hold_accepts();
    drain(&mut h);
    assert!(!h.t.listening());
    assert!(
        !h.t.exited(),
        "an accept may still hand the zone a connection"
    );
    let late = h.client();
    h.send(late, &get("/"));
    let r = h.response(late);
    assert!(
        r.text() == "root" && r.closes(),
        "served, with Connection: close"
    );
    h.t.give_back_accepts(&mut h.z);
    h.advance(Duration::from_secs(5));
    assert!(h.t.closed(late));
    assert!(
        h.t.exited(),
        "no connection left, no accept in flight: the zone ends"
    );
}

#[test]
fn a_drain_with_nothing_left_ends_when_the_accepts_are_given_back() {
    let mut h = zone();
    h.t.hold_accepts();
    drain(&mut h);
    assert!(
        !h.t.exited(),
        "an accept may still hand the zone a connection"
    );
    h.t.give_back_accepts(&mut h.z);
    assert!(h.t.exited(), "at once, not at the drain's next look");
}

#[test]
fn a_request_in_the_drain_grace_is_answered_with_close() {
    let mut h = zone();
    let c = h.client();
    h.send(c, &get("/"));
    h.responses(c);
    drain(&mut h);
    h.advance(Duration::from_millis(500));
    h.send(c, &get("/a/"));
    let r = h.response(c);
    assert!(r.text() == "a" && r.closes());
}

fn reload(h: &mut Harness, toml: &str) {
    h.reload(toml, 2, false, Duration::from_secs(30));
}

#[test]
fn a_reload_serves_new_requests_from_the_new_routes() {
    let mut h = zone();
    let c = h.client();
    h.send(c, &get("/"));
    assert_eq!(h.response(c).text(), "root");
    reload(
        &mut h,
        &format!(
            "{HTTP}{}",
            SERVERS.replace("body = \"root\"", "body = \"new\"")
        ),
    );
    h.send(c, &get("/"));
    assert_eq!(h.response(c).text(), "new", "the kept-alive connection too");
    assert_eq!(h.counters.generation.load(Ordering::Relaxed), 2);
    let events: Vec<_> = h.events.try_iter().collect();
    assert!(events
        .iter()
        .any(|e| matches!(e, crate::zone::ZoneEvent::Reloaded { generation: 2, .. })));
}

#[test]
fn a_reload_that_removes_an_address_closes_its_idle_connections() {
    let mut h = Harness::new(&format!(
        "{SERVERS}[[server]]\nlisten = [\"127.0.0.1:8081\"]\n[[server.location]]\npath = \"/\"\nreturn = {{ status = 200, body = \"b\" }}\n"
    ));
    let gone = h.client_on(1);
    h.send(gone, &get("/"));
    assert_eq!(h.response(gone).text(), "b");
    let stays = h.client_on(0);
    reload(&mut h, SERVERS);
    assert!(h.t.closed(gone), "idle on a removed address: closed");
    assert!(h.t.is_open(stays));
    let _ = Arc::clone(&h.ctl);
}

#[test]
fn requests_are_counted_by_status_class() {
    let mut h = zone();
    fetch(&mut h, "/", "h.test");
    fetch(&mut h, "/nowhere", "other.test");
    let c = &h.counters;
    assert_eq!(c.requests.load(Ordering::Relaxed), 2);
    assert_eq!(c.responses[1].load(Ordering::Relaxed), 1, "2xx");
    assert_eq!(c.responses[3].load(Ordering::Relaxed), 1, "4xx");
}

// ---- the connection limit ------------------------------------------------------------------

/// Near max_conns, the longest idle connections make room: new clients are served, never
/// turned away while connections merely wait (nginx reuses its idle connections the same
/// way).
#[test]
fn near_the_connection_limit_the_longest_idle_connections_make_room() {
    let mut h = Harness::with_max_conns(&format!("{HTTP}{SERVERS}"), 64);
    let mut conns = Vec::new();
    for i in 0..300 {
        let c = h.client();
        if i % 2 == 0 {
            h.send(c, &get("/"));
            h.responses(c);
        }
        conns.push(c);
        h.advance(Duration::from_millis(1));
    }
    let c = h.client();
    h.send(c, &get("/a/"));
    assert_eq!(h.response(c).text(), "a", "a new client is served");
    let open: Vec<bool> = conns.iter().map(|&c| h.t.is_open(c)).collect();
    assert!(
        open[open.len() - 20..].iter().all(|&o| o),
        "the newest stay"
    );
    // Each reclaim closes only the reserve (max_conns / 32 = 2) longest idle connections: the
    // zone stays near its limit instead of dropping every idle keep-alive connection.
    let active = h.counters.active.load(Ordering::Relaxed);
    assert!((60..=64).contains(&active), "{active} connections open");
}

/// A connection with a request in progress is never reclaimed.
#[test]
fn busy_connections_are_not_reclaimed() {
    let mut h = Harness::with_max_conns(&format!("{HTTP}{SERVERS}"), 32);
    let busy = h.client();
    h.send(
        busy,
        b"POST /a/ HTTP/1.1\r\nHost: h.test\r\nContent-Length: 4\r\n\r\n01",
    );
    for _ in 0..100 {
        h.client();
        h.advance(Duration::from_millis(1));
    }
    assert!(
        h.t.is_open(busy),
        "the oldest, but its request is in progress"
    );
    h.send(busy, b"23");
    assert_eq!(h.response(busy).text(), "a");
}
