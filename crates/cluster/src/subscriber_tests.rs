//! Hosts sharing one real redis-server: an event broadcast from one reaches all, each
//! applies it once and confirms; Redis restarted under them, they subscribe again; Redis
//! gone, broadcasting fails at once with the error.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::broadcast::{alive_hosts, broadcast};
use crate::testing::{missing, wait_for, RedisServer};
use crate::{Applied, Client, Event, Handler, Settings, Subscriber, Target};

fn client_with(addr: String, events_secret: Option<&str>) -> Client {
    Client::start(Settings {
        target: Target::Servers(vec![addr]),
        username: None,
        password: None,
        tls: None,
        prefix: "s:".into(),
        connect_timeout: Duration::from_millis(500),
        timeout: Duration::from_secs(1),
        events_secret: events_secret.map(str::to_string),
    })
    .unwrap()
}

/// A host: its client, its subscriber, and the events it applied (and how many of them
/// were authenticated).
struct Host {
    c: Client,
    _sub: Subscriber,
    seen: Arc<Mutex<Vec<Event>>>,
    authenticated: Arc<AtomicUsize>,
}

fn host(addr: String, id: &str) -> Host {
    host_with(addr, id, None)
}

fn host_with(addr: String, id: &str, secret: Option<&str>) -> Host {
    let c = client_with(addr, secret);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let authenticated = Arc::new(AtomicUsize::new(0));
    let (s, a) = (seen.clone(), authenticated.clone());
    let handler: Handler = Arc::new(move |ev: &Event, authenticated: bool| {
        s.lock().unwrap().push(ev.clone());
        a.fetch_add(usize::from(authenticated), Relaxed);
        Applied {
            status: 200,
            text: format!("did {}\n", ev.action),
            then: None,
        }
    });
    let sub = Subscriber::start(c.clone(), id.into(), handler).unwrap();
    Host {
        c,
        _sub: sub,
        seen,
        authenticated,
    }
}

#[test]
fn an_event_reaches_every_host_and_each_confirms() {
    if !ringx_kerneltest::require(missing()) {
        return;
    }
    let mut r = RedisServer::start();
    let hosts: Vec<Host> = ["a", "b", "c"]
        .iter()
        .map(|id| host(r.addr(), id))
        .collect();
    let a = &hosts[0].c;
    wait_for("three hosts alive", || {
        alive_hosts(a).is_ok_and(|h| h == ["a", "b", "c"])
    });
    let o = broadcast(a, "a", "purge", b"c?key=k\r\n", Duration::from_secs(10)).unwrap();
    assert_eq!(o.receivers, 3);
    assert!(o.missing.is_empty() && o.error.is_none(), "{o:?}");
    let confirmed: Vec<(&str, &str)> = o
        .confirmed
        .iter()
        .map(|(h, r)| (h.as_str(), r.as_str()))
        .collect();
    assert_eq!(
        confirmed,
        [
            ("a", "200 applied by the request on this host"),
            ("b", "200 did purge"),
            ("c", "200 did purge")
        ]
    );
    assert!(o.ok(), "{o:?}");
    // The process that published it is the one that applied it already: its subscriber
    // confirms without handing it over again.
    assert!(hosts[0].seen.lock().unwrap().is_empty());
    for h in &hosts[1..] {
        let seen = h.seen.lock().unwrap();
        assert_eq!(seen.len(), 1);
        assert_eq!(
            (
                seen[0].origin.as_str(),
                seen[0].target.as_slice(),
                &seen[0].id
            ),
            ("a", &b"c?key=k\r\n"[..], &o.id)
        );
    }
    // The confirmations expire (written with their EXPIRE in one command).
    let key = crate::events::confirm_key("s:", &o.id);
    let ttl = a.call(&[b"PTTL", key.as_bytes()], Duration::from_secs(1));
    assert!(
        matches!(ttl, Ok(crate::Value::Int(ms)) if ms > 0 && ms <= 60_000),
        "{ttl:?}"
    );
    let ev = &a.counters().events;
    assert_eq!(ev.published.load(Relaxed), 1);
    assert_eq!(ev.confirmed.load(Relaxed), 3);
    assert!(a
        .counters()
        .render()
        .contains("ringx_cluster_redis_confirmations_total{result=\"confirmed\"} 3\n"));

    // Redis restarted: every host subscribes again by itself, and the next event reaches all.
    r.stop();
    wait_for("the subscriptions lost", || {
        hosts
            .iter()
            .all(|h| !h.c.counters().events.subscribed.load(Relaxed))
    });
    let down = broadcast(a, "a", "drain", b"", Duration::from_secs(10));
    assert!(down.is_err(), "{down:?}");
    assert_eq!(ev.publish_failed.load(Relaxed), 1);
    r.restart();
    // A spurious PING timeout may have made one more subscription: at least 2, and subscribed.
    wait_for("subscribed again", || {
        hosts.iter().all(|h| {
            let ev = &h.c.counters().events;
            ev.subscribes.load(Relaxed) >= 2 && ev.subscribed.load(Relaxed)
        })
    });
    wait_for("three hosts alive again", || {
        alive_hosts(a).is_ok_and(|h| h.len() == 3)
    });
    let o = broadcast(&hosts[1].c, "b", "drain", b"", Duration::from_secs(10)).unwrap();
    assert_eq!((o.confirmed.len(), o.missing.len()), (3, 0), "{o:?}");
    let seen: Vec<usize> = hosts.iter().map(|h| h.seen.lock().unwrap().len()).collect();
    assert_eq!(seen, [1, 1, 2]);
}

#[test]
fn two_processes_under_one_host_id_both_apply_and_the_answer_is_not_ok() {
    if !ringx_kerneltest::require(missing()) {
        return;
    }
    let r = RedisServer::start();
    // A copied configuration, or a binary upgrade's old and new process: one id, two
    // processes.
    let a1 = host(r.addr(), "a");
    let a2 = host(r.addr(), "a");
    let conflicts = |h: &Host| h.c.counters().events.host_id_conflicts.load(Relaxed);
    wait_for("the two processes seen under one id", || {
        conflicts(&a1) + conflicts(&a2) > 0
    });
    wait_for("both subscribed", || {
        [&a1, &a2]
            .iter()
            .all(|h| h.c.counters().events.subscribed.load(Relaxed))
    });
    assert!(a1
        .c
        .counters()
        .render()
        .contains("\nringx_cluster_redis_host_id_conflicts_total "));
    let o = broadcast(&a1.c, "a", "purge", b"c", Duration::from_secs(3)).unwrap();
    // The other process applied it: it is not the one that sent it, whatever its id.
    assert!(a1.seen.lock().unwrap().is_empty());
    assert_eq!(a2.seen.lock().unwrap().len(), 1);
    // Two subscribers, one field confirmed: not every host is known to have done it.
    assert_eq!(o.receivers, 2);
    assert_eq!(o.confirmed.keys().collect::<Vec<_>>(), ["a"]);
    assert_eq!(o.unconfirmed_receivers(), 1);
    assert!(o.missing.is_empty() && !o.ok(), "{o:?}");
}

#[test]
fn a_host_alive_that_does_not_confirm_is_missing() {
    if !ringx_kerneltest::require(missing()) {
        return;
    }
    let r = RedisServer::start();
    let a = host(r.addr(), "a");
    // "ghost" said it was alive but is subscribed nowhere; "gone" said so a minute ago (its
    // subscription down since, or stopped).
    crate::broadcast::heartbeat(&a.c, "ghost").unwrap();
    let sec = |v: &crate::Value| match v {
        crate::Value::Array(t) => t[0].text().unwrap().parse::<u64>().unwrap(),
        other => panic!("TIME answered {other:?}"),
    };
    let t = sec(&a.c.call(&[b"TIME"], Duration::from_secs(1)).unwrap());
    let hosts = a.c.key(crate::events::HOSTS);
    let minute_ago = ((t - 60) * 1000).to_string();
    a.c.call(
        &[b"ZADD", hosts.as_bytes(), minute_ago.as_bytes(), b"gone"],
        Duration::from_secs(1),
    )
    .unwrap();
    wait_for("a alive", || {
        alive_hosts(&a.c).is_ok_and(|h| h == ["a", "ghost"])
    });
    let o = broadcast(&a.c, "a", "purge", b"c", Duration::from_secs(3)).unwrap();
    assert_eq!(o.missing, ["ghost"]);
    assert_eq!(o.unreachable, ["gone"]);
    assert!(!o.ok());
    assert_eq!(o.confirmed.keys().collect::<Vec<_>>(), ["a"]);
    assert_eq!(a.c.counters().events.unconfirmed.load(Relaxed), 1);
    assert_eq!(a.c.counters().events.unreachable.load(Relaxed), 1);
    // Messages on the channel that are not events are counted and ignored.
    let ch = a.c.key(crate::events::CHANNEL);
    a.c.call(
        &[b"PUBLISH", ch.as_bytes(), b"hello"],
        Duration::from_secs(1),
    )
    .unwrap();
    wait_for("the bad message counted", || {
        a.c.counters().events.invalid.load(Relaxed) == 1
    });
    assert!(a.seen.lock().unwrap().is_empty());
}

#[test]
fn with_a_secret_only_its_macs_are_taken_and_only_once() {
    if !ringx_kerneltest::require(missing()) {
        return;
    }
    const SECRET: &str = "a secret of the fleet, 16+";
    let r = RedisServer::start();
    let a = host_with(r.addr(), "a", Some(SECRET));
    let b = host_with(r.addr(), "b", Some(SECRET));
    wait_for("two hosts alive", || {
        alive_hosts(&a.c).is_ok_and(|h| h == ["a", "b"])
    });
    let o = broadcast(&a.c, "a", "drain", b"", Duration::from_secs(10)).unwrap();
    assert!(o.ok(), "{o:?}");
    assert_eq!(b.seen.lock().unwrap().len(), 1);
    assert_eq!(b.authenticated.load(Relaxed), 1);

    // Anyone else who can publish: without the MAC, with another secret's, the same
    // message again (a replay), or one sent 10 minutes ago. All counted and refused.
    let publish = |m: &[u8]| {
        let ch = a.c.key(crate::events::CHANNEL);
        a.c.call(&[b"PUBLISH", ch.as_bytes(), m], Duration::from_secs(1))
            .unwrap();
    };
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let ev = |id: &str, sent_ms: u64| Event {
        id: id.into(),
        origin: "mallory".into(),
        sent_ms,
        action: "drain".into(),
        target: Vec::new(),
    };
    publish(&ev("x1", now_ms).encode(None).unwrap());
    publish(
        &ev("x2", now_ms)
            .encode(Some(b"not the fleet's secret"))
            .unwrap(),
    );
    publish(
        &ev("x3", now_ms - 600_000)
            .encode(Some(SECRET.as_bytes()))
            .unwrap(),
    );
    let signed = ev("x4", now_ms).encode(Some(SECRET.as_bytes())).unwrap();
    publish(&signed);
    publish(&signed);
    wait_for("the five counted", || {
        [&a, &b].iter().all(|h| {
            let ev = &h.c.counters().events;
            ev.unauthenticated.load(Relaxed) + ev.received.load(Relaxed) >= 6
        })
    });
    for h in [&a, &b] {
        let ev = &h.c.counters().events;
        // x4 once; x1, x2, x3 and x4 again refused.
        assert_eq!(ev.unauthenticated.load(Relaxed), 4);
        assert!(h
            .c
            .counters()
            .render()
            .contains("ringx_cluster_redis_messages_total{kind=\"unauthenticated\"} 4\n"));
    }
    let ids = |h: &Host| -> Vec<String> {
        h.seen
            .lock()
            .unwrap()
            .iter()
            .map(|e| e.id.clone())
            .collect()
    };
    assert_eq!(ids(&a), ["x4"]);
    assert_eq!(ids(&b), [o.id.clone(), "x4".into()]);
}
