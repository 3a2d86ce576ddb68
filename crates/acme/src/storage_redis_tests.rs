//! RedisStorage against a real redis-server: blobs under the prefix, the lock's exclusion,
//! refresh and compare-and-delete, and Redis gone.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ringx_cluster::testing::{missing, RedisServer};
use ringx_cluster::{Client, Settings, Target, Value};

use super::*;
use crate::storage::{account_key, Storage};

fn client(addr: String) -> Client {
    Client::start(Settings {
        target: Target::Servers(vec![addr]),
        username: None,
        password: None,
        tls: None,
        prefix: "t1:".into(),
        connect_timeout: Duration::from_millis(500),
        timeout: Duration::from_secs(2),
        events_secret: None,
    })
    .unwrap()
}

fn storage(c: &Client) -> RedisStorage {
    RedisStorage::new(c.clone()).with_lock_times(
        Duration::from_millis(300),
        Duration::from_millis(20),
        Duration::from_secs(10),
    )
}

fn get(c: &Client, key: &str) -> Value {
    c.call(&[b"GET", key.as_bytes()], Duration::from_secs(2))
        .unwrap()
}

#[test]
fn blobs_live_under_the_prefix_and_keys_stay_inside() {
    if !ringx_kerneltest::require(missing()) {
        return;
    }
    let r = RedisServer::start();
    let c = client(r.addr());
    let st = storage(&c);
    let k = account_key("https://127.0.0.1:14000/dir");
    assert!(st.load(&k).unwrap().is_none());
    st.store(&k, b"secret\0bytes", true).unwrap();
    assert_eq!(st.load(&k).unwrap().as_deref(), Some(&b"secret\0bytes"[..]));
    assert_eq!(
        get(&c, "t1:acme/accounts/127.0.0.1_14000_dir/account.json"),
        Value::Bulk(b"secret\0bytes".to_vec())
    );
    for bad in ["../x", "a/../../x", "/abs", "a b", ""] {
        assert!(st.store(bad, b"", false).is_err(), "{bad:?}");
        assert!(st.load(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn one_holder_at_a_time_and_the_next_gets_it_when_released() {
    if !ringx_kerneltest::require(missing()) {
        return;
    }
    let r = RedisServer::start();
    let c = client(r.addr());
    let a = storage(&c).lock("a.test").unwrap();
    let holder = get(&c, "t1:acme/locks/a.test");
    let holder = holder.text().unwrap().to_string();
    assert!(
        holder.contains(&format!("/{}/", std::process::id())),
        "{holder}"
    );
    let got = Arc::new(AtomicBool::new(false));
    let (c2, got2) = (client(r.addr()), got.clone());
    let waiter = std::thread::spawn(move || {
        let held = storage(&c2).lock("a.test").unwrap();
        got2.store(true, Ordering::SeqCst);
        let t = get(&c2, "t1:acme/locks/a.test");
        drop(held);
        t
    });
    // Held past several lifetimes of 300 ms: refreshed, so the other host goes on waiting.
    std::thread::sleep(Duration::from_millis(1000));
    assert!(!got.load(Ordering::SeqCst), "the lock was taken twice");
    assert_eq!(
        get(&c, "t1:acme/locks/a.test").text(),
        Some(holder.as_str())
    );
    let released = Instant::now();
    drop(a);
    let second = waiter.join().unwrap();
    assert!(released.elapsed() < Duration::from_secs(2));
    assert_ne!(
        second.text(),
        Some(holder.as_str()),
        "each holder has its own token"
    );
    assert_eq!(get(&c, "t1:acme/locks/a.test"), Value::Nil);
}

#[test]
fn a_host_never_frees_another_hosts_lock() {
    if !ringx_kerneltest::require(missing()) {
        return;
    }
    let r = RedisServer::start();
    let c = client(r.addr());
    let held = storage(&c).lock("b.test").unwrap();
    // As if this host's lock had expired while it was cut off, and another host took it.
    let b = Duration::from_secs(2);
    c.call(&[b"SET", b"t1:acme/locks/b.test", b"other/1/00"], b)
        .unwrap();
    // Its refresher sees the lock is no longer its own, and leaves the expiry alone.
    std::thread::sleep(Duration::from_millis(250));
    assert_eq!(
        c.call(&[b"PTTL", b"t1:acme/locks/b.test"], b).unwrap(),
        Value::Int(-1)
    );
    drop(held);
    assert_eq!(
        get(&c, "t1:acme/locks/b.test"),
        Value::Bulk(b"other/1/00".to_vec())
    );
}

#[test]
fn without_redis_the_lock_fails_instead_of_hanging() {
    if !ringx_kerneltest::require(missing()) {
        return;
    }
    let mut r = RedisServer::start();
    let c = client(r.addr());
    let st = storage(&c);
    st.store("x", b"1", false).unwrap();
    r.stop();
    let t = Instant::now();
    let mut errors = 0;
    // The first command may still meet the old connection; then Redis is down.
    for _ in 0..3 {
        if let Err(e) = st.lock("c.test") {
            assert!(e.to_string().starts_with("Redis lock"), "{e}");
            errors += 1;
        }
    }
    assert_eq!(errors, 3);
    assert!(st.load("x").is_err());
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
}
