//! The client against a server that never answers, no server at all, and a real
//! redis-server stopped and started again under it.

use std::net::TcpListener;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use crate::testing::{missing, wait_for, RedisServer};
use crate::{Client, Error, Settings, Target, Value};

fn settings(addr: String, timeout: Duration) -> Settings {
    Settings {
        target: Target::Servers(vec![addr]),
        username: None,
        password: None,
        tls: None,
        prefix: "t:".into(),
        connect_timeout: Duration::from_millis(500),
        timeout,
        events_secret: None,
    }
}

#[test]
fn a_caller_never_waits_past_its_budget() {
    // Accepts and never answers: the thread is stuck on it for its 5 s timeout.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let c = Client::start(settings(
        silent.local_addr().unwrap().to_string(),
        Duration::from_secs(5),
    ))
    .unwrap();
    for budget in [50u64, 100, 200] {
        let t = Instant::now();
        let r = c.call(&[b"GET", b"k"], Duration::from_millis(budget));
        let took = t.elapsed();
        assert_eq!(r, Err(Error::Timeout(Duration::from_millis(budget))));
        assert!(
            took >= Duration::from_millis(budget) && took < Duration::from_millis(budget + 150),
            "budget {budget} ms, waited {took:?}"
        );
    }
    // One that must not wait at all looks and goes on.
    let p = c
        .submit(&[b"GET", b"k"], Duration::from_millis(30))
        .unwrap();
    assert!(p.try_get().is_none());
    std::thread::sleep(Duration::from_millis(40));
    assert!(matches!(p.try_get(), Some(Err(Error::Timeout(_)))));
    assert_eq!(c.counters().errors("timeout"), 4);
    assert!(!c.counters().up.load(Relaxed));
}

#[test]
fn without_a_server_callers_are_told_at_once() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let c = Client::start(settings(
        format!("127.0.0.1:{port}"),
        Duration::from_secs(1),
    ))
    .unwrap();
    wait_for("a failed connect", || {
        c.counters().connect_failures.load(Relaxed) > 0
    });
    let t = Instant::now();
    match c.call(&[b"PING"], Duration::from_secs(2)) {
        Err(Error::Down(why)) => assert!(why.contains(&port.to_string()), "{why}"),
        other => panic!("{other:?}"),
    }
    assert!(
        t.elapsed() < Duration::from_millis(500),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(c.counters().errors("down"), 1);
}

#[test]
fn redis_stopped_and_back_is_reconnected_to() {
    if !ringx_kerneltest::require(missing()) {
        return;
    }
    let mut r = RedisServer::start();
    let c = Client::start(settings(r.addr(), Duration::from_secs(1))).unwrap();
    let b = Duration::from_secs(2);
    let key = c.key("k");
    assert_eq!(key, "t:k");
    assert_eq!(
        c.call(&[b"SET", key.as_bytes(), b"v"], b),
        Ok(Value::Simple("OK".into()))
    );
    assert_eq!(
        c.call(&[b"GET", key.as_bytes()], b),
        Ok(Value::Bulk(b"v".to_vec()))
    );
    assert_eq!(c.call(&[b"GET", b"t:none"], b), Ok(Value::Nil));
    assert!(matches!(
        c.call(&[b"NOSUCHCOMMAND"], b),
        Err(Error::Reply(_))
    ));
    assert!(c.counters().up.load(Relaxed));
    r.stop();
    // The health check notices without a caller.
    wait_for("down", || !c.counters().up.load(Relaxed));
    assert!(c.call(&[b"GET", key.as_bytes()], b).is_err());
    r.restart();
    wait_for("up again", || c.counters().up.load(Relaxed));
    assert_eq!(c.counters().reconnects.load(Relaxed), 1);
    assert_eq!(c.call(&[b"GET", key.as_bytes()], b), Ok(Value::Nil));
    let m = c.counters().render();
    assert!(
        m.contains("ringx_cluster_redis_reconnects_total 1\n"),
        "{m}"
    );
    assert!(
        m.contains(&format!(
            "ringx_cluster_redis_up{{master=\"{}\"}} 1\n",
            r.addr()
        )),
        "{m}"
    );
}

#[test]
fn a_replica_is_not_taken_for_the_master() {
    if !ringx_kerneltest::require(missing()) {
        return;
    }
    let master = RedisServer::start();
    let replica = RedisServer::start();
    let dial = crate::conn::Dial {
        tls: None,
        connect_timeout: Duration::from_secs(1),
        timeout: Duration::from_secs(1),
        username: None,
        password: None,
    };
    let mut rc = crate::conn::Conn::open(&replica.addr(), &dial, false).unwrap();
    let port = master.port.to_string();
    let r = rc
        .call(&[b"REPLICAOF", b"127.0.0.1", port.as_bytes()])
        .unwrap();
    assert_eq!(r, Value::Simple("OK".into()));
    // The replica is listed first; the master is the one connected to.
    let c = Client::start(Settings {
        target: Target::Servers(vec![replica.addr(), master.addr()]),
        ..settings(String::new(), Duration::from_secs(1))
    })
    .unwrap();
    wait_for("up", || c.counters().up.load(Relaxed));
    assert_eq!(*c.counters().master.lock().unwrap(), master.addr());
}
