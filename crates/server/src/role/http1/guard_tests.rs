//! Access rules, basic authentication, `auth_request`, `limit_req` and `limit_conn` through a
//! zone driven by the test driver, as a client sees them.
//!
//! Limit zones are process-wide tables found by name: every test names its own.

use std::time::Duration;

use crate::testkit::{get, Harness, TempDir};

const APR1_SECRET: &str = "$apr1$saltsalt$LrttParrLPdxvgutaSXWJ0";

fn zone(extra_top: &str, location: &str) -> Harness {
    Harness::new(&format!(
        r#"
{extra_top}
[[server]]
listen = ["127.0.0.1:8080"]
  [[server.location]]
  path = "/"
  return = {{ status = 200, body = "open" }}
  [[server.location]]
  path = "/g/"
  return = {{ status = 200, body = "guarded" }}
  {location}
[[upstream]]
name = "auth"
servers = ["127.0.0.1:9001"]
retries = 0
read_timeout = "5s"
"#
    ))
}

fn status_from(h: &mut Harness, peer: &str, req: &[u8]) -> u16 {
    let c = h.client_from(peer);
    h.send(c, req);
    h.response(c).status
}

/// nginx's order: the first matching rule decides, IPv6 included; other locations are open.
#[test]
fn access_rules_apply_in_order() {
    let mut h = zone(
        "",
        r#"access = ["deny 192.0.2.10", "allow 192.0.2.0/24", "allow 2001:db8::/32", "deny all"]"#,
    );
    assert_eq!(status_from(&mut h, "192.0.2.10:1000", &get("/g/")), 403);
    assert_eq!(status_from(&mut h, "192.0.2.11:1000", &get("/g/")), 200);
    assert_eq!(status_from(&mut h, "[2001:db8::7]:1000", &get("/g/")), 200);
    assert_eq!(status_from(&mut h, "198.51.100.1:1000", &get("/g/")), 403);
    assert_eq!(status_from(&mut h, "198.51.100.1:1000", &get("/")), 200);
    assert_eq!(
        h.counters
            .access_denied
            .load(std::sync::atomic::Ordering::Relaxed),
        2
    );
}

/// A trusted proxy's X-Forwarded-For names the client the rules see; an untrusted peer's is
/// ignored.
#[test]
fn access_rules_see_the_real_address_behind_a_trusted_proxy() {
    let mut h = zone(
        "[http]\nreal_ip_from = [\"10.0.0.0/8\"]\nreal_ip_header = \"X-Forwarded-For\"\n",
        r#"access = ["allow 203.0.113.0/24", "deny all"]"#,
    );
    let fwd = |ip: &str| {
        format!("GET /g/ HTTP/1.1\r\nHost: h.test\r\nX-Forwarded-For: {ip}\r\n\r\n").into_bytes()
    };
    assert_eq!(
        status_from(&mut h, "10.0.0.1:1000", &fwd("203.0.113.9")),
        200
    );
    assert_eq!(
        status_from(&mut h, "10.0.0.1:1000", &fwd("198.51.100.9")),
        403
    );
    assert_eq!(status_from(&mut h, "10.0.0.1:1000", &get("/g/")), 403);
    assert_eq!(
        status_from(&mut h, "198.51.100.1:1000", &fwd("203.0.113.9")),
        403,
        "an untrusted peer cannot claim an address"
    );
}

/// 401 with the realm's challenge without or with wrong credentials, 200 with right ones, on
/// the same keep-alive connection.
#[test]
fn basic_auth_challenges_and_admits() {
    let dir = TempDir::new(&[("users", format!("alice:{APR1_SECRET}\n").as_bytes())]);
    let mut h = zone(
        "",
        &format!(
            r#"auth_basic = {{ realm = "staff only", user_file = "{}/users" }}"#,
            dir.path()
        ),
    );
    let c = h.client();
    h.send(c, &get("/g/"));
    let r = h.response(c);
    assert_eq!(r.status, 401);
    assert_eq!(
        r.header("www-authenticate"),
        Some("Basic realm=\"staff only\", charset=\"UTF-8\"")
    );
    assert!(!r.closes());
    let with = |cred: &str| {
        format!("GET /g/ HTTP/1.1\r\nHost: h.test\r\nAuthorization: Basic {cred}\r\n\r\n")
            .into_bytes()
    };
    h.send(c, &with("YWxpY2U6d3Jvbmc=")); // alice:wrong
    assert_eq!(h.response(c).status, 401);
    h.send(c, &with("YWxpY2U6c2VjcmV0")); // alice:secret
    let r = h.response(c);
    assert_eq!((r.status, r.text().as_str()), (200, "guarded"));
}

/// `limit_req` with nodelay: `burst + 1` requests pass at once, the next is refused with the
/// configured status and a Retry-After; the rate lets one more through per interval.
#[test]
fn limit_req_nodelay_refuses_over_the_burst() {
    let mut h = zone(
        "[[limit_req_zone]]\nname = \"t_nodelay\"\nkey = \"$remote_addr\"\nrate = \"10r/s\"\n",
        r#"limit_req = { zone = "t_nodelay", burst = 2, nodelay = true, status = 429 }"#,
    );
    let c = h.client();
    for _ in 0..3 {
        h.send(c, &get("/g/"));
        assert_eq!(h.response(c).status, 200);
    }
    h.send(c, &get("/g/"));
    let r = h.response(c);
    assert_eq!(r.status, 429);
    assert_eq!(r.header("retry-after"), Some("1"));
    assert_eq!(
        status_from(&mut h, "198.51.100.2:1", &get("/g/")),
        200,
        "another client has its own rate"
    );
    h.advance(Duration::from_millis(100));
    h.send(c, &get("/g/"));
    assert_eq!(h.response(c).status, 200);
    h.send(c, &get("/g/"));
    assert_eq!(h.response(c).status, 429);
}

/// Without nodelay, requests over the rate within the burst wait their turn: the second is
/// answered 100 ms after the first, the third 200 ms after.
#[test]
fn limit_req_delays_within_the_burst() {
    let mut h = zone(
        "[[limit_req_zone]]\nname = \"t_delay\"\nkey = \"$remote_addr\"\nrate = \"10r/s\"\n",
        r#"limit_req = { zone = "t_delay", burst = 5 }"#,
    );
    let cs: Vec<_> = (0..3).map(|_| h.client()).collect();
    for &c in &cs {
        h.send(c, &get("/g/"));
    }
    assert_eq!(h.responses(cs[0]).len(), 1);
    assert!(h.responses(cs[1]).is_empty(), "the second waits");
    h.advance(Duration::from_millis(99));
    assert!(h.responses(cs[1]).is_empty());
    h.advance(Duration::from_millis(1));
    assert_eq!(h.response(cs[1]).status, 200);
    assert!(h.responses(cs[2]).is_empty());
    h.advance(Duration::from_millis(100));
    assert_eq!(h.response(cs[2]).status, 200);
}

/// A pipelined request behind a delayed one waits for it, and answers come in order.
#[test]
fn a_delayed_request_keeps_pipelined_ones_in_order() {
    let mut h = zone(
        "[[limit_req_zone]]\nname = \"t_pipe\"\nkey = \"$remote_addr\"\nrate = \"10r/s\"\n",
        r#"limit_req = { zone = "t_pipe", burst = 5 }"#,
    );
    let c = h.client();
    let mut two = get("/g/");
    two.extend_from_slice(&get("/g/"));
    two.extend_from_slice(&get("/"));
    h.send(c, &two);
    assert_eq!(h.responses(c).len(), 1);
    h.advance(Duration::from_millis(100));
    let rs = h.responses(c);
    assert_eq!(rs.len(), 2);
    assert_eq!(rs[1].text(), "open");
}

/// `limit_conn`: a second request of the same client while the first is in progress is
/// refused; once the first is answered, another passes.
#[test]
fn limit_conn_counts_requests_in_progress() {
    let mut h = Harness::new(
        r#"
[[limit_conn_zone]]
name = "t_conn"
key = "$remote_addr"
[[server]]
listen = ["127.0.0.1:8080"]
  [[server.location]]
  path = "/"
  proxy_pass = "app"
  limit_conn = { zone = "t_conn", max = 1 }
[[upstream]]
name = "app"
servers = ["127.0.0.1:9001"]
"#,
    );
    let a = h.client();
    h.send(a, &get("/slow"));
    let (u, _) = h.accept_upstream();
    let b = h.client();
    h.send(b, &get("/x"));
    assert_eq!(h.response(b).status, 503);
    h.send(u, b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi");
    assert_eq!(h.response(a).status, 200);
    h.upstream_got(u);
    h.send(b, &get("/x"));
    assert!(
        h.upstream_got(u).starts_with(b"GET /x "),
        "the pooled connection carries it"
    );
}

/// `auth_request`: the subrequest carries the client's fields and the original URI; a 2xx
/// lets the request through, a 401 is passed on with its challenge, anything else is a 500.
#[test]
fn auth_request_decides() {
    let mut h = zone(
        "",
        r#"auth_request = { proxy_pass = "auth", uri = "/check" }"#,
    );
    let c = h.client();
    h.send(
        c,
        b"GET /g/x?y=1 HTTP/1.1\r\nHost: h.test\r\nCookie: s=1\r\n\r\n",
    );
    let (u, _) = h.accept_upstream();
    let sub = String::from_utf8(h.upstream_got(u)).unwrap();
    assert!(
        sub.starts_with("GET /check HTTP/1.1\r\nHost: h.test\r\n"),
        "{sub}"
    );
    assert!(sub.contains("Cookie: s=1\r\n") && sub.contains("X-Original-URI: /g/x?y=1\r\n"));
    assert!(
        h.responses(c).is_empty(),
        "the request waits for the answer"
    );
    h.send(u, b"HTTP/1.1 204 No Content\r\n\r\n");
    h.advance(Duration::ZERO);
    let r = h.response(c);
    assert_eq!((r.status, r.text().as_str()), (200, "guarded"));

    // The pooled connection carries the next subrequest: a 401 with its challenge.
    h.send(c, &get("/g/"));
    assert!(
        h.connects().is_empty(),
        "the idle upstream connection is reused"
    );
    assert!(h.upstream_got(u).starts_with(b"GET /check "));
    h.send(
        u,
        b"HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Bearer realm=\"x\"\r\nContent-Length: 3\r\n\r\nno!",
    );
    h.advance(Duration::ZERO);
    let r = h.response(c);
    assert_eq!(r.status, 401);
    assert_eq!(r.header("www-authenticate"), Some("Bearer realm=\"x\""));

    h.send(c, &get("/g/"));
    h.upstream_got(u);
    h.send(u, b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n");
    h.advance(Duration::ZERO);
    assert_eq!(h.response(c).status, 403);

    h.send(c, &get("/g/"));
    h.upstream_got(u);
    h.send(
        u,
        b"HTTP/1.1 302 Found\r\nLocation: /login\r\nContent-Length: 0\r\n\r\n",
    );
    h.advance(Duration::ZERO);
    assert_eq!(h.response(c).status, 500);
}

/// An auth service that cannot be reached is a 500, and the connection goes on.
#[test]
fn auth_request_unreachable_is_a_500() {
    let mut h = zone(
        "",
        r#"auth_request = { proxy_pass = "auth", uri = "/check" }"#,
    );
    let c = h.client();
    h.send(c, &get("/g/"));
    let u = h.connects()[0].0;
    h.upstream_refuses(u);
    h.advance(Duration::from_millis(1));
    let r = h.response(c);
    assert_eq!(r.status, 500);
    h.send(c, &get("/"));
    assert_eq!(h.response(c).text(), "open");
}
