//! The proxy cache through a zone driven by the test driver: hits and misses, expiry,
//! revalidation, stale copies standing in for errors, background updates, collapsing,
//! variants, purging, keys with CR and LF.
//!
//! Caches are process-wide and found by name and directory: every test has its own
//! directory. The cache's clock is the zone's, so `advance` ages entries.

use std::time::Duration;

use crate::cache::CacheZone;
use crate::testkit::{get, Harness, Resp, TempDir};

fn cached(dir: &TempDir, pc: &str) -> Harness {
    Harness::new(&format!(
        r#"
[[proxy_cache_path]]
name = "c"
path = "{}/cache"
[[server]]
listen = ["127.0.0.1:8080"]
  [[server.location]]
  path = "/"
  proxy_pass = "app"
  proxy_cache = {{ zone = "c"{sep}{pc} }}
[[upstream]]
name = "app"
servers = ["127.0.0.1:9001"]
retries = 0
read_timeout = "5s"
"#,
        dir.path(),
        sep = if pc.is_empty() { "" } else { ", " },
    ))
}

fn ok(cc: &str, body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 200 OK\r\nCache-Control: {cc}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

fn cache_status(r: &Resp) -> &str {
    r.header("x-cache-status").unwrap_or("-")
}

/// A miss goes to the upstream; the client gets its response marked MISS.
fn miss(h: &mut Harness, req: &[u8], resp: &[u8]) -> (Resp, ringx_engine::ConnId) {
    let c = h.client();
    h.send(c, req);
    // A new upstream connection, or the pooled one an earlier miss left.
    let u = match h.connects().first() {
        Some(&(u, _)) => {
            h.t.connected(&mut h.z, u);
            u
        }
        None => h.dialed.last().expect("a miss goes upstream").0,
    };
    h.upstream_got(u);
    h.send(u, resp);
    (h.response(c), u)
}

/// The response of one request on a new connection, with nothing sent upstream.
fn hit(h: &mut Harness, req: &[u8]) -> Resp {
    let c = h.client();
    h.send(c, req);
    assert!(
        h.connects().is_empty(),
        "a hit opens no upstream connection"
    );
    h.response(c)
}

#[test]
fn a_miss_is_stored_and_the_next_request_hits() {
    let dir = TempDir::new(&[]);
    let mut h = cached(&dir, "");
    let (r, u) = miss(&mut h, &get("/a"), &ok("max-age=60", "hello"));
    assert_eq!(
        (r.status, r.text().as_str(), cache_status(&r)),
        (200, "hello", "MISS")
    );
    h.advance(Duration::from_secs(3));
    let r = hit(&mut h, &get("/a"));
    assert_eq!(
        (r.status, r.text().as_str(), cache_status(&r)),
        (200, "hello", "HIT")
    );
    assert_eq!(r.header("age"), Some("3"));
    assert_eq!(r.header("content-type"), Some("text/plain"));
    assert!(h.upstream_got(u).is_empty(), "nothing more went upstream");
    let head = h.client();
    h.send(head, b"HEAD /a HTTP/1.1\r\nHost: h.test\r\n\r\n");
    let out = h.output(head);
    assert!(out.starts_with(b"HTTP/1.1 200 OK\r\n") && out.ends_with(b"\r\n\r\n"));
    assert_eq!(
        h.counters.cache[0].load(std::sync::atomic::Ordering::Relaxed),
        2,
        "two hits counted"
    );
}

/// What may not be stored is not: Set-Cookie, no-store, private, and responses with no
/// freshness unless `valid` gives one.
#[test]
fn responses_that_must_not_be_stored_are_fetched_again() {
    let dir = TempDir::new(&[]);
    let mut h = cached(&dir, r#"valid = { "404" = "1m" }"#);
    for resp in [
        b"HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nSet-Cookie: s=1\r\nContent-Length: 1\r\n\r\nx".to_vec(),
        ok("no-store", "x"),
        ok("private, max-age=60", "x"),
        b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx".to_vec(),
    ] {
        let (r, _) = miss(&mut h, &get("/n"), &resp);
        assert_eq!(cache_status(&r), "MISS");
    }
    let (r, _) = miss(
        &mut h,
        &get("/n"),
        b"HTTP/1.1 404 Not Found\r\nContent-Length: 2\r\n\r\nno",
    );
    assert_eq!(r.status, 404);
    assert_eq!(
        cache_status(&hit(&mut h, &get("/n"))),
        "HIT",
        "valid covers 404"
    );
}

/// An entry expires; with validators the cache asks conditionally, and a 304 refreshes it:
/// the client gets the stored body, REVALIDATED, and the entry is fresh again.
#[test]
fn expired_entries_are_revalidated() {
    let dir = TempDir::new(&[]);
    let mut h = cached(&dir, "");
    let first = b"HTTP/1.1 200 OK\r\nCache-Control: max-age=2\r\nETag: \"v1\"\r\nContent-Length: 4\r\n\r\nbody";
    let (r, u) = miss(&mut h, &get("/r"), first);
    assert_eq!(cache_status(&r), "MISS");
    h.advance(Duration::from_secs(3));
    let c = h.client();
    h.send(c, &get("/r"));
    let sent = String::from_utf8(h.upstream_got(u)).unwrap();
    assert!(sent.contains("If-None-Match: \"v1\"\r\n"), "{sent}");
    h.send(
        u,
        b"HTTP/1.1 304 Not Modified\r\nCache-Control: max-age=60\r\nETag: \"v1\"\r\n\r\n",
    );
    let r = h.response(c);
    assert_eq!(
        (r.status, r.text().as_str(), cache_status(&r)),
        (200, "body", "REVALIDATED")
    );
    assert_eq!(cache_status(&hit(&mut h, &get("/r"))), "HIT");
}

/// Without validators an expired entry is fetched again (EXPIRED) and replaced.
#[test]
fn expired_entries_without_validators_are_replaced() {
    let dir = TempDir::new(&[]);
    let mut h = cached(&dir, "");
    let (_, u) = miss(&mut h, &get("/e"), &ok("max-age=1", "old"));
    h.advance(Duration::from_millis(1500));
    let c = h.client();
    h.send(c, &get("/e"));
    assert!(!String::from_utf8(h.upstream_got(u))
        .unwrap()
        .contains("If-None-Match"));
    h.send(u, &ok("max-age=60", "new"));
    let r = h.response(c);
    assert_eq!((r.text().as_str(), cache_status(&r)), ("new", "EXPIRED"));
    assert_eq!(hit(&mut h, &get("/e")).text(), "new");
}

/// `use_stale = ["error"]`: with the upstream down, the expired copy answers (STALE); a
/// status `use_stale` names does the same; without a stale copy, the error passes.
#[test]
fn a_stale_copy_answers_while_the_upstream_is_down() {
    let dir = TempDir::new(&[]);
    let mut h = cached(
        &dir,
        r#"use_stale = ["error", "timeout", "http_500"], revalidate = false"#,
    );
    let (_, u) = miss(&mut h, &get("/s"), &ok("max-age=1", "kept"));
    h.reset(u); // the server goes down
    h.advance(Duration::from_secs(2));
    let c = h.client();
    h.send(c, &get("/s"));
    let u = h.connects()[0].0;
    h.upstream_refuses(u);
    let r = h.response(c);
    assert_eq!(
        (r.status, r.text().as_str(), cache_status(&r)),
        (200, "kept", "STALE")
    );

    let c = h.client();
    h.send(c, &get("/s"));
    let (u, _) = h.accept_upstream();
    h.upstream_got(u);
    h.send(
        u,
        b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 4\r\n\r\noops",
    );
    let r = h.response(c);
    assert_eq!(
        (r.status, r.text().as_str(), cache_status(&r)),
        (200, "kept", "STALE")
    );
    h.send(c, &get("/s"));
    assert!(
        h.upstream_got(u).starts_with(b"GET /s "),
        "the upstream connection was kept"
    );
    h.send(u, b"HTTP/1.1 503 Unavailable\r\nContent-Length: 0\r\n\r\n");
    assert_eq!(h.response(c).status, 503, "http_503 is not in use_stale");
    h.reset(u);

    let c = h.client();
    h.send(c, &get("/never"));
    let u = h.connects()[0].0;
    h.upstream_refuses(u);
    assert_eq!(h.response(c).status, 502);
}

/// stale-while-revalidate: the stale copy answers at once (STALE), then the same connection
/// refreshes the entry; the next request hits the new one.
#[test]
fn stale_while_revalidate_updates_in_the_background() {
    let dir = TempDir::new(&[]);
    let mut h = cached(&dir, "background_update = true");
    let (_, u) = miss(
        &mut h,
        &get("/w"),
        &ok("max-age=1, stale-while-revalidate=60", "v1"),
    );
    h.advance(Duration::from_secs(2));
    let c = h.client();
    h.send(c, &get("/w"));
    let r = h.response(c);
    assert_eq!((r.text().as_str(), cache_status(&r)), ("v1", "STALE"));
    assert!(
        h.upstream_got(u).starts_with(b"GET /w "),
        "the update went upstream"
    );
    let other = h.client();
    h.send(other, &get("/w"));
    assert_eq!(cache_status(&h.response(other)), "UPDATING");
    h.send(u, &ok("max-age=60", "v2"));
    h.send(c, &get("/w"));
    let r = h.response(c);
    assert_eq!((r.text().as_str(), cache_status(&r)), ("v2", "HIT"));
}

/// 100 requests for one missing key at once: one goes upstream, the others wait and are
/// answered from the entry it fills.
#[test]
fn a_burst_of_misses_makes_one_upstream_request() {
    let dir = TempDir::new(&[]);
    let mut h = cached(&dir, "");
    let cs: Vec<_> = (0..100).map(|_| h.client()).collect();
    for &c in &cs {
        h.send(c, &get("/hot"));
    }
    let connects = h.connects();
    assert_eq!(connects.len(), 1, "one fill");
    let u = connects[0].0;
    h.t.connected(&mut h.z, u);
    h.upstream_got(u);
    h.advance(Duration::from_millis(40));
    h.send(u, &ok("max-age=60", "hot"));
    h.advance(Duration::from_millis(20));
    let mut statuses = std::collections::BTreeMap::new();
    for &c in &cs {
        let r = h.response(c);
        assert_eq!(r.text(), "hot");
        *statuses.entry(cache_status(&r).to_string()).or_insert(0) += 1;
    }
    assert_eq!(statuses.get("MISS"), Some(&1));
    assert_eq!(statuses.get("HIT"), Some(&99));
    assert!(h.connects().is_empty());
}

/// `lock_timeout`: a waiter that waited that long goes to the upstream itself.
#[test]
fn a_waiter_goes_upstream_after_the_lock_timeout() {
    let dir = TempDir::new(&[]);
    let mut h = cached(&dir, r#"lock_timeout = "1s""#);
    let a = h.client();
    h.send(a, &get("/slow"));
    assert_eq!(h.connects().len(), 1);
    let b = h.client();
    h.send(b, &get("/slow"));
    h.advance(Duration::from_millis(900));
    assert!(h.connects().is_empty());
    h.advance(Duration::from_millis(200));
    assert_eq!(h.connects().len(), 1, "the waiter went itself");
}

/// Vary: variants are kept apart by the named request field.
#[test]
fn variants_are_kept_apart() {
    let dir = TempDir::new(&[]);
    let mut h = cached(&dir, "");
    let ask = |lang: &str| {
        format!("GET /v HTTP/1.1\r\nHost: h.test\r\nAccept-Language: {lang}\r\n\r\n").into_bytes()
    };
    let resp = |body: &str| {
        format!(
            "HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nVary: Accept-Language\r\nContent-Length: 2\r\n\r\n{body}"
        )
        .into_bytes()
    };
    miss(&mut h, &ask("en"), &resp("en"));
    let (r, _) = miss(&mut h, &ask("fr"), &resp("fr"));
    assert_eq!(cache_status(&r), "MISS", "another variant");
    assert_eq!(hit(&mut h, &ask("en")).text(), "en");
    assert_eq!(hit(&mut h, &ask("fr")).text(), "fr");
}

/// Purging removes the entry; a key holding CR and LF (from a decoded `$uri`) is stored and
/// purged by those very bytes, and does not collide with its neighbours.
#[test]
fn purge_and_keys_with_cr_lf() {
    let dir = TempDir::new(&[]);
    let mut h = cached(&dir, r#"key = "$uri""#);
    miss(&mut h, &get("/a%0D%0Ab"), &ok("max-age=60", "crlf"));
    let (r, _) = miss(&mut h, &get("/a%0Db"), &ok("max-age=60", "cr"));
    assert_eq!(cache_status(&r), "MISS");
    assert_eq!(hit(&mut h, &get("/a%0D%0Ab")).text(), "crlf");
    let zone = CacheZone::all()
        .into_iter()
        .find(|z| z.dir.starts_with(dir.path()))
        .expect("the test's cache");
    assert!(!zone.purge(b"/a\nb"));
    assert!(zone.purge(b"/a\r\nb"));
    let (r, _) = miss(&mut h, &get("/a%0D%0Ab"), &ok("max-age=60", "again"));
    assert_eq!((r.text().as_str(), cache_status(&r)), ("again", "MISS"));
    assert_eq!(hit(&mut h, &get("/a%0Db")).text(), "cr");
}

/// Requests the cache does not answer pass by: other methods, ranges, credentials.
#[test]
fn other_requests_bypass_the_cache() {
    let dir = TempDir::new(&[]);
    let mut h = cached(&dir, "");
    miss(&mut h, &get("/b"), &ok("max-age=60", "x"));
    for req in [
        "POST /b HTTP/1.1\r\nHost: h.test\r\nContent-Length: 0\r\n\r\n",
        "GET /b HTTP/1.1\r\nHost: h.test\r\nRange: bytes=0-0\r\n\r\n",
        "GET /b HTTP/1.1\r\nHost: h.test\r\nAuthorization: Basic eDp5\r\n\r\n",
    ] {
        let (r, _) = miss(&mut h, req.as_bytes(), &ok("max-age=60", "y"));
        assert_eq!(cache_status(&r), "BYPASS", "{req}");
    }
    assert_eq!(hit(&mut h, &get("/b")).text(), "x");
}

/// A background update that breaks midway is retried on another server, and what is stored
/// is the retry's response alone (the broken attempt's bytes are forgotten).
#[test]
fn a_retried_update_stores_only_the_retry() {
    let dir = TempDir::new(&[]);
    let mut h = Harness::new(&format!(
        r#"
[[proxy_cache_path]]
name = "c"
path = "{}/cache"
[[server]]
listen = ["127.0.0.1:8080"]
  [[server.location]]
  path = "/"
  proxy_pass = "app"
  proxy_cache = {{ zone = "c", background_update = true }}
[[upstream]]
name = "app"
servers = ["127.0.0.1:9001", "127.0.0.1:9002"]
retries = 1
"#,
        dir.path()
    ));
    let (_, u1) = miss(
        &mut h,
        &get("/r"),
        &ok("max-age=1, stale-while-revalidate=60", "old"),
    );
    h.advance(Duration::from_secs(2));
    let c = h.client();
    h.send(c, &get("/r"));
    assert_eq!(cache_status(&h.response(c)), "STALE");
    // The update goes out; the server answers half a body and breaks.
    let u = match h.connects().first() {
        Some(&(u, _)) => {
            h.t.connected(&mut h.z, u);
            u
        }
        None => u1,
    };
    h.upstream_got(u);
    h.send(
        u,
        b"HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nContent-Length: 8\r\n\r\nbrok",
    );
    h.reset(u);
    // The retry goes to the other server: a new connection, or the one the miss left pooled.
    let u2 = match h.connects().first() {
        Some(&(x, _)) => {
            h.t.connected(&mut h.z, x);
            x
        }
        None => u1,
    };
    assert_ne!(u2, u);
    assert!(
        h.upstream_got(u2).starts_with(b"GET /r "),
        "retried on the other server"
    );
    h.send(u2, &ok("max-age=60", "whole"));
    h.send(c, &get("/r"));
    let r = h.response(c);
    assert_eq!((r.text().as_str(), cache_status(&r)), ("whole", "HIT"));
}
