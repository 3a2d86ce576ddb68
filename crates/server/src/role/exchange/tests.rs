//! Proxying through a zone driven by the test driver: what the upstream receives, pooling,
//! retries, failures, timeouts, back-pressure, pipelining behind a proxied request, upgrades.

use std::time::Duration;

use ringx_engine::ConnId;

use crate::testkit::{get, Harness, Resp};

fn proxy_with(upstream: &str, location: &str) -> Harness {
    Harness::new(&format!(
        r#"
[http]
client_body_timeout = "10s"
send_timeout = "20s"
client_max_body_size = "1m"
[[server]]
listen = ["127.0.0.1:8080"]
  [[server.location]]
  path = "/"
  proxy_pass = "app"
  {location}
[[upstream]]
name = "app"
keepalive = 4
connect_timeout = "5s"
{upstream}
"#
    ))
}

/// Two servers (9001, 9002), one retry.
fn two() -> Harness {
    proxy_with(
        "servers = [\"127.0.0.1:9001\", \"127.0.0.1:9002\"]\nretries = 1\nread_timeout = \"15s\"",
        "",
    )
}

/// One server (9001), no retry.
fn one() -> Harness {
    proxy_with(
        "servers = [\"127.0.0.1:9001\"]\nretries = 0\nread_timeout = \"15s\"",
        "",
    )
}

const OK: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi";

fn ok_body(r: &Resp) -> bool {
    r.status == 200 && r.body == b"hi"
}

fn port(h: &Harness, u: ConnId) -> u16 {
    h.dialed
        .iter()
        .rev()
        .find(|(x, _)| *x == u)
        .expect("dialed")
        .1
        .port()
}

/// A client sends `req`; the upstream connect is accepted. Returns both ends.
fn start(h: &mut Harness, req: &[u8]) -> (ConnId, ConnId) {
    let c = h.client();
    h.send(c, req);
    let (u, _) = h.accept_upstream();
    (c, u)
}

#[test]
fn a_request_is_forwarded_with_the_client_address_and_its_response_relayed() {
    let mut h = one();
    let (c, u) = start(&mut h, &get("/x?y=1"));
    let sent = String::from_utf8(h.upstream_got(u)).unwrap();
    assert!(
        sent.starts_with("GET /x?y=1 HTTP/1.1\r\nHost: h.test\r\n"),
        "{sent}"
    );
    assert!(sent.contains("X-Forwarded-For: 192.0.2.10\r\n"), "{sent}");
    assert!(sent.contains("X-Real-IP: 192.0.2.10\r\n"), "{sent}");
    h.send(u, OK);
    assert!(ok_body(&h.response(c)));
}

#[test]
fn an_upstream_connection_goes_back_to_the_pool_and_carries_the_next_request() {
    let mut h = one();
    let (c, u) = start(&mut h, &get("/1"));
    h.upstream_got(u);
    h.send(u, OK);
    h.response(c);
    let c2 = h.client();
    h.send(c2, &get("/2"));
    assert!(
        h.connects().is_empty(),
        "no new connect: the pooled one is used"
    );
    assert!(h.upstream_got(u).starts_with(b"GET /2 "));
    h.send(u, OK);
    assert!(ok_body(&h.response(c2)));
}

#[test]
fn a_refused_connect_is_retried_on_the_next_server() {
    let mut h = two();
    let c = h.client();
    h.send(c, &get("/"));
    let (u1, a1) = h.connects()[0];
    h.upstream_refuses(u1);
    let (u2, a2) = h.accept_upstream();
    assert_ne!(a1, a2, "another server");
    h.send(u2, OK);
    assert!(ok_body(&h.response(c)));
}

#[test]
fn every_server_refusing_is_502() {
    let mut h = two();
    let c = h.client();
    h.send(c, &get("/"));
    for _ in 0..2 {
        let (u, _) = h.connects()[0];
        h.upstream_refuses(u);
    }
    let r = h.response(c);
    // The request was read whole: the connection goes on, as nginx keeps it after a 502.
    assert!(r.status == 502 && !r.closes());
    assert!(h.connects().is_empty(), "retries = 1: two tries in all");
    h.send(c, &get("/again"));
    let (u, _) = h.accept_upstream();
    h.send(u, OK);
    assert!(
        ok_body(&h.response(c)),
        "the next request on the connection is proxied"
    );
}

#[test]
fn a_reset_before_any_response_byte_is_retried_for_an_idempotent_request() {
    let mut h = two();
    let (c, u1) = start(&mut h, &get("/"));
    h.reset(u1);
    let (u2, _) = h.accept_upstream();
    assert!(h.upstream_got(u2).starts_with(b"GET / "));
    h.send(u2, OK);
    assert!(ok_body(&h.response(c)));
}

#[test]
fn a_post_is_not_retried_after_a_reset() {
    let mut h = two();
    let (c, u1) = start(
        &mut h,
        b"POST / HTTP/1.1\r\nHost: h.test\r\nContent-Length: 2\r\n\r\nab",
    );
    h.reset(u1);
    assert!(h.connects().is_empty(), "not idempotent: no retry");
    assert_eq!(h.response(c).status, 502);
}

/// The keep-alive race: the server closed an idle connection just as it was reused. The
/// request goes again on a fresh connection, without using a retry or blaming the server.
#[test]
fn a_pooled_connection_closed_before_any_byte_is_retried_silently() {
    let mut h = one(); // no retry left: only a silent retry can save the request
    let (c, u) = start(&mut h, &get("/1"));
    h.send(u, OK);
    h.response(c);
    h.send(c, &get("/2"));
    assert!(
        h.upstream_got(u).windows(6).any(|w| w == b"GET /2"),
        "the request went to the pooled connection"
    );
    h.eof(u);
    let (u2, _) = h.accept_upstream();
    assert!(h.upstream_got(u2).starts_with(b"GET /2 "));
    h.send(u2, OK);
    assert!(ok_body(&h.response(c)));
}

#[test]
fn a_502_answer_is_retried_on_another_server() {
    let mut h = two();
    let (c, u1) = start(&mut h, &get("/"));
    h.send(u1, b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n");
    let (u2, _) = h.accept_upstream();
    h.send(u2, OK);
    assert!(ok_body(&h.response(c)));
}

#[test]
fn a_502_answer_with_no_retry_left_is_passed_on() {
    let mut h = one();
    let (c, u) = start(&mut h, &get("/"));
    h.send(
        u,
        b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 3\r\n\r\nup!",
    );
    let r = h.response(c);
    assert_eq!(
        (r.status, r.text().as_str()),
        (502, "up!"),
        "the server's own page"
    );
}

#[test]
fn a_response_cut_midway_closes_the_client_connection() {
    let mut h = two();
    let (c, u) = start(&mut h, &get("/"));
    h.send(u, b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n01234");
    h.reset(u);
    assert!(
        h.connects().is_empty(),
        "part of the response went out: no retry"
    );
    let out = h.output(c);
    assert!(out.ends_with(b"01234"));
    assert!(h.t.closed(c), "the client sees the response cut");
}

#[test]
fn an_unparsable_response_is_blamed_on_its_server() {
    let mut h = two();
    let (c, u1) = start(&mut h, &get("/"));
    let bad = port(&h, u1);
    h.send(u1, b"NOT HTTP AT ALL\r\n\r\n");
    let (u2, _) = h.accept_upstream();
    h.send(u2, OK);
    assert!(ok_body(&h.response(c)));
    // The server that answered garbage is marked down (max_fails = 1): the next requests
    // all go to the other one, where round robin would alternate.
    for _ in 0..2 {
        let c = h.client();
        h.send(c, &get("/"));
        let (u, _) = match h.connects().first() {
            Some(&x) => {
                h.t.connected(&mut h.z, x.0);
                x
            }
            None => (u2, h.dialed[1].1),
        };
        assert_ne!(port(&h, u), bad);
        h.send(u, OK);
        h.response(c);
    }
}

#[test]
fn an_upstream_that_does_not_answer_gets_504_after_read_timeout() {
    let mut h = one();
    let (c, _u) = start(&mut h, &get("/"));
    h.advance(Duration::from_secs(14));
    assert!(h.output(c).is_empty());
    h.advance(Duration::from_secs(2));
    assert_eq!(h.response(c).status, 504);
}

#[test]
fn a_connect_that_hangs_is_retried_then_504() {
    let mut h = two();
    let c = h.client();
    h.send(c, &get("/"));
    assert_eq!(h.connects().len(), 1);
    h.advance(Duration::from_secs(6));
    assert_eq!(h.connects().len(), 1, "connect_timeout: the other server");
    h.advance(Duration::from_secs(6));
    assert_eq!(h.response(c).status, 504);
}

#[test]
fn a_chunked_response_reaches_an_http10_client_unchunked_and_closed() {
    let mut h = one();
    let (c, u) = start(
        &mut h,
        b"GET / HTTP/1.0\r\nHost: h.test\r\nConnection: keep-alive\r\n\r\n",
    );
    h.send(
        u,
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
    );
    let out = String::from_utf8(h.output(c)).unwrap();
    assert!(out.ends_with("\r\n\r\nabcde"), "{out}");
    assert!(!out.contains("chunked"));
    assert!(h.t.closed(c));
}

#[test]
fn a_chunked_response_reaches_an_http11_client_as_it_came() {
    let mut h = one();
    let (c, u) = start(&mut h, &get("/"));
    let body = b"3\r\nabc\r\n0\r\n\r\n";
    let mut resp = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    resp.extend(body);
    h.send(u, &resp);
    let r = h.response(c);
    assert_eq!(r.body, b"abc");
    assert!(h.t.is_open(c), "keep-alive");
}

#[test]
fn a_request_body_streams_to_the_upstream() {
    let mut h = one();
    let (c, u) = start(
        &mut h,
        b"POST /up HTTP/1.1\r\nHost: h.test\r\nContent-Length: 10\r\n\r\n01234",
    );
    let got = h.upstream_got(u);
    let text = String::from_utf8_lossy(&got);
    assert!(
        text.contains("\r\nContent-Length: 10\r\n") && text.ends_with("\r\n\r\n01234"),
        "{text}"
    );
    h.send(c, b"56789");
    assert_eq!(h.upstream_got(u), b"56789");
    h.send(u, OK);
    assert!(ok_body(&h.response(c)));
}

#[test]
fn a_small_body_is_replayed_to_the_next_server() {
    let mut h = two();
    let (c, u1) = start(
        &mut h,
        b"PUT /f HTTP/1.1\r\nHost: h.test\r\nContent-Length: 4\r\n\r\nbody",
    );
    h.reset(u1);
    let (u2, _) = h.accept_upstream();
    let got = h.upstream_got(u2);
    assert!(got.starts_with(b"PUT /f ") && got.ends_with(b"\r\n\r\nbody"));
    h.send(u2, OK);
    assert!(ok_body(&h.response(c)));
}

#[test]
fn a_body_too_large_to_replay_is_not_retried() {
    let mut h = two();
    let body = vec![b'x'; 70 * 1024];
    let mut req = format!(
        "PUT /f HTTP/1.1\r\nHost: h.test\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    req.extend(&body);
    let (c, u1) = start(&mut h, &req);
    h.reset(u1);
    assert!(
        h.connects().is_empty(),
        "over 64 KiB: the body cannot be sent again"
    );
    assert_eq!(h.response(c).status, 502);
}

#[test]
fn a_client_leaving_mid_body_closes_the_upstream_connection() {
    let mut h = one();
    let (c, u) = start(
        &mut h,
        b"POST / HTTP/1.1\r\nHost: h.test\r\nContent-Length: 10\r\n\r\n01",
    );
    h.eof(c);
    assert!(h.t.closed(c));
    assert!(
        h.t.closed(u),
        "the exchange was cut: the upstream connection is not reusable"
    );
}

#[test]
fn a_slow_client_pauses_the_upstream_until_it_reads() {
    let mut h = one();
    let (c, u) = start(&mut h, &get("/big"));
    h.t.set_window(c, Some(0));
    let body = vec![b'z'; 300 * 1024];
    h.send(
        u,
        format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len()).as_bytes(),
    );
    let mut sent = 0;
    for piece in body.chunks(16384) {
        if h.t.recv_paused(u) {
            break;
        }
        h.send(u, piece);
        sent += piece.len();
    }
    assert!(
        h.t.recv_paused(u),
        "the client's queue is full: the upstream waits"
    );
    assert!(sent < body.len());
    h.t.set_window(c, None);
    h.flush();
    assert!(!h.t.recv_paused(u), "resumed once the client read");
    h.send(u, &body[sent..]);
    assert_eq!(h.response(c).body.len(), body.len());
}

#[test]
fn a_slow_upstream_pauses_the_client_body() {
    let mut h = one();
    let len = 600 * 1024;
    let c = h.client();
    h.send(
        c,
        format!("POST / HTTP/1.1\r\nHost: h.test\r\nContent-Length: {len}\r\n\r\n").as_bytes(),
    );
    let (u, _) = h.accept_upstream();
    h.t.set_window(u, Some(0));
    let body = vec![b'q'; len];
    let mut sent = 0;
    for piece in body.chunks(16384) {
        if h.t.recv_paused(c) {
            break;
        }
        h.send(c, piece);
        sent += piece.len();
    }
    assert!(
        h.t.recv_paused(c),
        "the upstream's queue is full: the client waits"
    );
    assert!(sent < len);
    h.t.set_window(u, None);
    h.flush();
    assert!(!h.t.recv_paused(c), "resumed once the upstream took it");
    h.send(c, &body[sent..]);
    let got = h.upstream_got(u);
    assert!(got.ends_with(&body[len - 100..]));
    h.send(u, OK);
    assert!(ok_body(&h.response(c)));
}

#[test]
fn a_pipelined_request_waits_for_the_proxied_one() {
    let mut h = one();
    let mut two_reqs = get("/1");
    two_reqs.extend(get("/2"));
    let (c, u) = start(&mut h, &two_reqs);
    let got = h.upstream_got(u);
    assert!(got.starts_with(b"GET /1 ") && !String::from_utf8_lossy(&got).contains("GET /2"));
    h.send(u, OK);
    assert!(
        h.upstream_got(u).starts_with(b"GET /2 "),
        "then the next, on the same connection"
    );
    h.send(u, b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\ntwo");
    let bodies: Vec<String> = h.responses(c).iter().map(|r| r.text()).collect();
    assert_eq!(bodies, ["hi", "two"]);
}

#[test]
fn a_101_turns_the_connections_into_a_tunnel() {
    let mut h = one();
    let (c, u) = start(
        &mut h,
        b"GET /ws HTTP/1.1\r\nHost: h.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
    );
    let got = String::from_utf8(h.upstream_got(u)).unwrap();
    assert!(got.contains("Upgrade: websocket\r\n"), "{got}");
    h.send(u, b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\nfrom-up");
    let out = h.output(c);
    assert!(out.starts_with(b"HTTP/1.1 101 ") && out.ends_with(b"from-up"));
    h.send(c, b"\x81\x02hi");
    assert_eq!(
        h.upstream_got(u),
        b"\x81\x02hi",
        "client bytes go through untouched"
    );
    h.send(u, b"more");
    assert_eq!(h.output(c), b"more");
}

/// Bytes nobody asked for on a pooled connection: it leaves the pool, so the next request is
/// not written to a connection that will never answer it.
#[test]
fn unsolicited_bytes_on_a_pooled_connection_keep_the_next_request_off_it() {
    let mut h = one();
    let (c, u) = start(&mut h, &get("/1"));
    h.upstream_got(u);
    h.send(u, OK);
    h.response(c);
    h.send(u, b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
    assert!(h.t.closed(u));
    h.send(c, &get("/2"));
    let (u2, _) = h.accept_upstream();
    assert!(h.upstream_got(u2).starts_with(b"GET /2 "));
    h.send(u2, OK);
    assert!(ok_body(&h.response(c)));
}

/// `proxy_host = "upstream"`: the Host is the address of the server the request goes to, on
/// a retry too (the head is rewritten for the next server).
#[test]
fn proxy_host_upstream_sends_the_server_address_as_host() {
    let mut h = proxy_with(
        "servers = [\"127.0.0.1:9001\", \"127.0.0.1:9002\"]\nretries = 1",
        "proxy_host = \"upstream\"",
    );
    let (c, u1) = start(&mut h, &get("/"));
    let p1 = port(&h, u1);
    let got = String::from_utf8(h.upstream_got(u1)).unwrap();
    assert!(
        got.contains(&format!("\r\nHost: 127.0.0.1:{p1}\r\n")),
        "{got}"
    );
    h.reset(u1);
    let (u2, a2) = h.accept_upstream();
    assert_ne!(a2.port(), p1, "the retry goes to the other server");
    let got = String::from_utf8(h.upstream_got(u2)).unwrap();
    let want = format!("\r\nHost: {a2}\r\n");
    assert!(got.contains(&want), "the retry names its own server: {got}");
    h.send(u2, OK);
    assert!(ok_body(&h.response(c)));
}

#[test]
fn a_response_with_an_empty_length_completes_at_its_head() {
    let mut h = one();
    let (c, u) = start(&mut h, &get("/empty"));
    h.upstream_got(u);
    h.send(u, b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
    let r = h.response(c);
    assert_eq!((r.status, r.body.len()), (200, 0));
    h.send(c, &get("/next"));
    assert!(
        h.connects().is_empty(),
        "the upstream connection was pooled"
    );
    assert!(
        h.upstream_got(u).starts_with(b"GET /next "),
        "the next request went out"
    );
}

#[test]
fn a_head_request_gets_no_body_and_keeps_both_connections() {
    let mut h = one();
    let (c, u) = start(&mut h, b"HEAD / HTTP/1.1\r\nHost: h.test\r\n\r\n");
    h.upstream_got(u);
    h.send(u, b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n");
    let out = h.output(c);
    assert!(out.ends_with(b"Content-Length: 100\r\n\r\n"), "{out:?}");
    h.send(c, &get("/next"));
    assert!(
        h.connects().is_empty(),
        "the upstream connection was pooled"
    );
    assert!(h.upstream_got(u).starts_with(b"GET /next "));
}

#[test]
fn interim_responses_are_not_passed_on() {
    let mut h = one();
    let (c, u) = start(&mut h, &get("/"));
    h.send(
        u,
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n",
    );
    h.send(u, OK);
    let out = h.output(c);
    assert!(out.starts_with(b"HTTP/1.1 200 OK\r\n"), "{out:?}");
}

#[test]
fn a_response_until_close_ends_at_the_server_fin() {
    let mut h = one();
    let (c, u) = start(&mut h, &get("/"));
    h.send(u, b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nall of it");
    h.eof(u);
    let out = String::from_utf8(h.output(c)).unwrap();
    assert!(out.ends_with("all of it"), "{out}");
    assert!(
        h.t.closed(c),
        "no length: the client learns the end from the close"
    );
    assert!(h.t.closed(u));
}

#[test]
fn a_client_waiting_for_a_slow_upstream_is_not_timed_out_by_its_own_deadline() {
    let mut h = proxy_with("servers = [\"127.0.0.1:9001\"]\nread_timeout = \"60s\"", "");
    let (c, u) = start(&mut h, &get("/"));
    h.advance(Duration::from_secs(45)); // past send_timeout (20 s), within read_timeout
    assert!(h.t.is_open(c) && h.output(c).is_empty());
    h.send(u, OK);
    assert!(ok_body(&h.response(c)));
}

// ---- reloads: what is in flight keeps its upstream, new requests take the new one ---------

fn cfg_to(server: &str) -> String {
    format!(
        "[[server]]\nlisten = [\"127.0.0.1:8080\"]\n[[server.location]]\npath = \"/\"\nproxy_pass = \"app\"\n\
         [[upstream]]\nname = \"app\"\nservers = [\"{server}\"]\nretries = 0\n"
    )
}

#[test]
fn a_reload_does_not_wait_for_a_proxied_request_and_that_request_finishes() {
    let mut h = Harness::new(&cfg_to("127.0.0.1:9001"));
    let (c, u) = start(&mut h, &get("/slow"));
    h.upstream_got(u);
    h.reload(&cfg_to("127.0.0.1:9009"), 2, true, Duration::from_secs(30));
    assert!(h.reloaded(), "applied at once, with a request in flight");
    // A new request goes to the new upstream now.
    let c2 = h.client();
    h.send(c2, &get("/new"));
    let (u2, a2) = h.accept_upstream();
    assert_eq!(a2.port(), 9009);
    h.send(u2, OK);
    assert!(ok_body(&h.response(c2)));
    // The request in flight finishes on the old one, whole.
    h.send(u, b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nold");
    assert_eq!(h.response(c).text(), "old");
    assert!(h.t.closed(u), "the old upstream's connection is not pooled");
    h.advance(Duration::from_millis(200));
    assert_eq!(
        h.z.retired_generations(),
        0,
        "the old upstream state is forgotten"
    );
}

#[test]
fn a_request_still_on_replaced_upstreams_after_drain_timeout_is_cut() {
    let mut h = Harness::new(&cfg_to("127.0.0.1:9001"));
    let (c, u) = start(&mut h, &get("/forever"));
    h.reload(&cfg_to("127.0.0.1:9009"), 2, true, Duration::from_secs(3));
    h.advance(Duration::from_secs(2));
    assert!(h.t.is_open(u));
    h.advance(Duration::from_secs(2));
    assert!(h.t.closed(u), "past drain_timeout");
    assert!(
        h.connects().is_empty(),
        "no new connection from replaced upstreams"
    );
    assert_eq!(h.response(c).status, 504);
}

#[test]
fn a_reload_that_keeps_the_upstreams_keeps_the_pool() {
    let mut h = Harness::new(&cfg_to("127.0.0.1:9001"));
    let (c, u) = start(&mut h, &get("/1"));
    h.upstream_got(u);
    h.send(u, OK);
    h.response(c);
    h.reload(&cfg_to("127.0.0.1:9001"), 2, false, Duration::from_secs(3));
    h.send(c, &get("/2"));
    assert!(
        h.connects().is_empty(),
        "the pooled connection serves the next request"
    );
    assert!(h.upstream_got(u).starts_with(b"GET /2 "));
}

/// A response with `Content-Length: 0` is complete with its head.
#[test]
fn an_empty_body_ends_with_the_head() {
    let mut h = one();
    let (c, u) = start(&mut h, &get("/1"));
    h.upstream_got(u);
    h.send(u, b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
    let r = h.response(c);
    assert_eq!((r.status, r.body.len()), (200, 0));
    h.send(c, &get("/2"));
    assert!(
        h.upstream_got(u).starts_with(b"GET /2 "),
        "the connection was pooled"
    );
}
