//! `auth_basic` with the auth pool (`guard::verify`): a slow hash is verified off the zone
//! while the zone serves its other requests, and the request waiting for it is answered when
//! the pool's answer comes back (the test runs the pool's worker by hand, then wakes the zone).

use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use crate::guard::verify::{Worker, QUEUE};
use crate::testkit::{get, Harness, TempDir};

/// `htpasswd -nbB -C 4`, password "secret": bcrypt, so verified on the pool.
const BCRYPT_SECRET: &str = "$2y$04$PSP8EQ/tSO3IOd.ESMCCZOSVl7MNmbPFnP892W9X4fHnLGQe1p.RK";
/// MD5-crypt, password "secret": fast, so verified on the zone.
const APR1_SECRET: &str = "$apr1$saltsalt$LrttParrLPdxvgutaSXWJ0";
const ALICE_RIGHT: &str = "YWxpY2U6c2VjcmV0"; // alice:secret
const ALICE_WRONG: &str = "YWxpY2U6d3Jvbmc="; // alice:wrong
const BOB_RIGHT: &str = "Ym9iOnNlY3JldA=="; // bob:secret

fn zone() -> (Harness, Worker, TempDir) {
    let users = format!("alice:{BCRYPT_SECRET}\nbob:{APR1_SECRET}\n");
    let dir = TempDir::new(&[("users", users.as_bytes())]);
    let (h, w) = Harness::with_auth_pool(&format!(
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
    (h, w, dir)
}

fn with(cred: &str) -> Vec<u8> {
    format!("GET /g/ HTTP/1.1\r\nHost: h.test\r\nAuthorization: Basic {cred}\r\n\r\n").into_bytes()
}

/// The pool verifies everything handed to it, then the zone is woken with the answers.
fn answer_all(h: &mut Harness, w: &mut Worker) {
    while w.run_one() {}
    h.wake();
}

/// A wrong and a right password both wait for the pool while a plain request on the same zone
/// is answered at once; the pool's answers then come back to their connections. A right
/// password is remembered (the next request is not verified again), a wrong one is not.
#[test]
fn a_slow_hash_waits_on_the_pool_while_the_zone_serves_others() {
    let (mut h, mut w, _dir) = zone();
    let (wrong, plain, right) = (h.client(), h.client(), h.client());
    h.send(wrong, &with(ALICE_WRONG));
    h.send(right, &with(ALICE_RIGHT));
    h.send(plain, &get("/"));
    assert_eq!(h.response(plain).status, 200, "answered at once");
    assert!(h.output(wrong).is_empty() && h.output(right).is_empty());
    answer_all(&mut h, &mut w);
    let r = h.response(wrong);
    assert_eq!(r.status, 401);
    assert!(r.header("www-authenticate").is_some() && !r.closes());
    let r = h.response(right);
    assert_eq!((r.status, r.text().as_str()), (200, "guarded"));
    assert_eq!(h.counters.auth_pool.load(Relaxed), 2);
    assert_eq!(h.counters.auth_denied.load(Relaxed), 1);
    // Remembered: answered now, nothing handed over.
    h.send(right, &with(ALICE_RIGHT));
    assert_eq!(h.response(right).status, 200);
    // Not remembered: verified again.
    h.send(wrong, &with(ALICE_WRONG));
    assert!(h.output(wrong).is_empty());
    answer_all(&mut h, &mut w);
    assert_eq!(h.response(wrong).status, 401);
    assert_eq!(h.counters.auth_pool.load(Relaxed), 3);
    // A fast hash is verified on the zone.
    h.send(plain, &with(BOB_RIGHT));
    assert_eq!(h.response(plain).status, 200);
    assert_eq!(h.counters.auth_inline.load(Relaxed), 1);
    assert!(!w.run_one());
}

/// Requests pipelined behind one that waits for the pool stay buffered and are answered in
/// order after it.
#[test]
fn pipelined_requests_wait_behind_a_verification() {
    let (mut h, mut w, _dir) = zone();
    let c = h.client();
    let mut both = with(ALICE_RIGHT);
    both.extend_from_slice(&get("/"));
    h.send(c, &both);
    assert!(h.output(c).is_empty());
    answer_all(&mut h, &mut w);
    let rs = h.responses(c);
    assert_eq!(
        rs.iter().map(|r| (r.status, r.text())).collect::<Vec<_>>(),
        [(200, "guarded".to_string()), (200, "open".to_string())]
    );
}

/// An answer for a connection that has gone reaches no successor in its slot: the new
/// connection gets its own answer.
#[test]
fn an_answer_for_a_closed_connection_is_dropped() {
    let (mut h, mut w, _dir) = zone();
    let first = h.client();
    h.send(first, &with(ALICE_RIGHT));
    h.reset(first);
    let second = h.client();
    assert_eq!(
        first, second,
        "the slot is reused (else this test shows nothing)"
    );
    h.send(second, &with(ALICE_WRONG));
    assert!(w.run_one(), "the first connection's answer (right)");
    h.wake();
    assert!(h.output(second).is_empty(), "not taken for the second");
    answer_all(&mut h, &mut w);
    assert_eq!(h.response(second).status, 401);
}

/// With every queue of the pool full, a request is refused with 503 and a Retry-After instead
/// of queued; once the pool catches up, requests are verified again.
#[test]
fn a_full_pool_answers_503() {
    let (mut h, mut w, _dir) = zone();
    let waiting: Vec<_> = (0..QUEUE)
        .map(|_| {
            let c = h.client();
            h.send(c, &with(ALICE_WRONG));
            c
        })
        .collect();
    let c = h.client();
    h.send(c, &with(ALICE_RIGHT));
    let r = h.response(c);
    assert_eq!((r.status, r.header("retry-after")), (503, Some("1")));
    assert_eq!(h.counters.auth_busy.load(Relaxed), 1);
    answer_all(&mut h, &mut w);
    assert!(waiting.iter().all(|&c| h.response(c).status == 401));
    let c = h.client();
    h.send(c, &with(ALICE_RIGHT));
    answer_all(&mut h, &mut w);
    assert_eq!(h.response(c).status, 200);
}

/// A request whose answer never comes is not held forever: the connection closes after
/// `send_timeout`.
#[test]
fn a_verification_that_never_answers_times_out() {
    let (mut h, _w, _dir) = zone();
    let c = h.client();
    h.send(c, &with(ALICE_RIGHT));
    h.advance(Duration::from_secs(59));
    assert!(!h.t.closed(c));
    h.advance(Duration::from_secs(2));
    assert!(h.t.closed(c), "closed after send_timeout (60 s)");
}
