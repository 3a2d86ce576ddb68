//! Shared ticket keys against a real redis-server: two "hosts" (a client, a sync and keys
//! each) in one process.

use std::sync::Arc;
use std::time::Duration;

use ringx_tls::ticket_keys::{KeyMaterial, SharedTickets};
use rustls::server::ProducesTickets;

use crate::testing::{missing, wait_for, RedisServer};
use crate::tickets::{Record, Source, TicketSettings, TicketSync};
use crate::{Client, Settings, Target};

fn skip() -> bool {
    if let Some(why) = missing() {
        eprintln!("SKIP: {why}");
        return true;
    }
    false
}

struct Host {
    keys: Arc<SharedTickets>,
    sync: TicketSync,
}

impl Host {
    /// A host on `redis`; `prefix` tells each test's keys from the others' (a test's
    /// stopped server's port may be another's next).
    fn start(addr: &str, prefix: &str, period: Duration) -> Host {
        let client = Client::start(Settings {
            target: Target::Servers(vec![addr.to_string()]),
            username: None,
            password: None,
            tls: None,
            prefix: prefix.into(),
            // Generous: a first refresh that fails (a loaded machine) means a local key.
            connect_timeout: Duration::from_secs(2),
            timeout: Duration::from_secs(2),
            events_secret: None,
        })
        .unwrap();
        let keys = Arc::new(SharedTickets::new());
        let settings = TicketSettings {
            period,
            refresh: Duration::from_millis(50),
        };
        let sync = TicketSync::start(client, keys.clone(), settings).unwrap();
        Host { keys, sync }
    }

    fn source(&self) -> Source {
        self.sync.counters().source()
    }

    fn current(&self) -> Option<[u8; 16]> {
        self.keys.ids().0
    }

    fn rotations(&self) -> (u64, u64) {
        let c = self.sync.counters();
        (
            c.rotations_cluster
                .load(std::sync::atomic::Ordering::Relaxed),
            c.rotations_local.load(std::sync::atomic::Ordering::Relaxed),
        )
    }

    fn errors(&self) -> u64 {
        let c = self.sync.counters();
        c.refresh_errors.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn opens(&self, ticket: &[u8]) -> bool {
        self.keys.decrypt(ticket).is_some()
    }
}

const LONG: Duration = Duration::from_secs(3600);

#[test]
fn the_stored_form_reads_back_and_nothing_else_does() {
    let r = Record {
        current: KeyMaterial::generate(5).unwrap(),
        previous: Some(KeyMaterial::generate(3).unwrap()),
    };
    assert_eq!(Record::decode(&r.encode()), Some(r));
    let one = Record {
        current: KeyMaterial::generate(5).unwrap(),
        previous: None,
    };
    let enc = one.encode();
    assert_eq!(Record::decode(&enc), Some(one));
    assert!(!format!("{:?}", Record::decode(&enc)).contains("secret: ["));
    let text = String::from_utf8(enc.to_vec()).unwrap();
    for bad in [
        "",
        "ringx-ticket-keys/1",
        "ringx-ticket-keys/2 00 1 00",
        &text[..text.len() - 1],
        &text.replace("ringx-ticket-keys/1 ", "ringx-ticket-keys/1  "),
        &format!("{text} x"),
    ] {
        assert_eq!(Record::decode(bad.as_bytes()), None, "{bad:?}");
    }
}

#[test]
fn one_host_makes_the_keys_and_a_ticket_from_one_opens_on_the_other() {
    if skip() {
        return;
    }
    let redis = RedisServer::start();
    let (a, b) = (
        Host::start(&redis.addr(), "one:", LONG),
        Host::start(&redis.addr(), "one:", LONG),
    );
    wait_for("both on the keys from Redis", || {
        a.source() == Source::Cluster && b.source() == Source::Cluster && a.current() == b.current()
    });
    assert!(a.current().is_some());
    let made = a.rotations().0 + b.rotations().0;
    assert_eq!(made, 1, "the lock let one host make them");
    let t = a.keys.encrypt(b"state from a").unwrap();
    assert_eq!(b.keys.decrypt(&t).as_deref(), Some(&b"state from a"[..]));
    let metrics = b.sync.render();
    assert!(metrics.contains("ringx_tls_ticket_key_source{source=\"cluster\"} 1"));
    assert!(metrics.contains("ringx_tls_tickets_total{result=\"opened\"} 1"));
    // A host started later takes the same keys and makes none.
    let m = Host::start(&redis.addr(), "one:", LONG);
    wait_for("third host", || m.source() == Source::Cluster);
    assert_eq!(m.current(), a.current());
    assert_eq!(m.rotations().0, 0);
}

#[test]
fn keys_rotate_and_the_previous_one_still_opens_everywhere() {
    if skip() {
        return;
    }
    let redis = RedisServer::start();
    let period = Duration::from_millis(1500);
    let (a, b) = (
        Host::start(&redis.addr(), "rot:", period),
        Host::start(&redis.addr(), "rot:", period),
    );
    wait_for("both on the first key", || {
        a.source() == Source::Cluster && a.current().is_some() && a.current() == b.current()
    });
    let first = a.current().unwrap();
    let old = a.keys.encrypt(b"old").unwrap();
    wait_for("a rotation seen by both", || {
        let (ca, cb) = (a.keys.ids(), b.keys.ids());
        ca.0.is_some_and(|c| c != first) && ca == cb && ca.1 == vec![first]
    });
    assert!(a.opens(&old) && b.opens(&old), "the previous key opens");
    let new = b.keys.encrypt(b"new").unwrap();
    assert!(a.opens(&new));
    // Two more rotations: the first key is erased everywhere.
    let second = a.current().unwrap();
    wait_for("two rotations past the first key", || {
        let (ca, cb) = (a.keys.ids(), b.keys.ids());
        ca.0.is_some_and(|c| c != second) && ca == cb && !ca.1.contains(&first)
    });
    assert!(!a.opens(&old) && !b.opens(&old));
}

#[test]
fn redis_gone_keeps_the_last_keys_then_local_ones_after_two_periods() {
    if skip() {
        return;
    }
    let mut redis = RedisServer::start();
    let (a, b) = (
        Host::start(&redis.addr(), "gone:", LONG),
        Host::start(&redis.addr(), "gone:", LONG),
    );
    wait_for("both on the keys from Redis", || {
        a.source() == Source::Cluster && a.current().is_some() && a.current() == b.current()
    });
    let before = a.current();
    redis.stop();
    wait_for("refreshes failing", || a.errors() >= 2 && b.errors() >= 2);
    assert_eq!((a.source(), b.source()), (Source::Cluster, Source::Cluster));
    assert_eq!(
        (a.current(), b.current()),
        (before, before),
        "the last keys kept"
    );
    let t = a.keys.encrypt(b"while Redis is away").unwrap();
    assert!(b.opens(&t), "still resumes on the other host");
    // Redis back, empty: a new key, and the last one still opens as the previous.
    redis.restart();
    wait_for("a new key from Redis on both", || {
        let (ca, cb) = (a.keys.ids(), b.keys.ids());
        ca.0 != before && ca == cb && ca.1 == vec![before.unwrap()]
    });
    assert!(a.opens(&t) && b.opens(&t));

    // With a short period: two periods without Redis, and this host seals with its own key;
    // the last key from Redis still opens.
    let period = Duration::from_millis(1000);
    let c = Host::start(&redis.addr(), "gone:", period);
    wait_for("c on the keys from Redis", || c.source() == Source::Cluster);
    let from_redis = c.keys.encrypt(b"x").unwrap();
    redis.stop();
    wait_for("c on its own key", || c.source() == Source::Local);
    assert!(c.rotations().1 >= 1);
    assert!(
        c.opens(&from_redis),
        "the key from Redis opens for one more period"
    );
    assert!(c
        .sync
        .render()
        .contains("ringx_tls_ticket_key_source{source=\"local\"} 1"));
}

#[test]
fn redis_unreachable_at_start_then_back() {
    if skip() {
        return;
    }
    let mut redis = RedisServer::start();
    redis.stop();
    let (a, b) = (
        Host::start(&redis.addr(), "start:", LONG),
        Host::start(&redis.addr(), "start:", LONG),
    );
    wait_for("both on keys of their own", || {
        a.source() == Source::Local && b.source() == Source::Local
    });
    assert_ne!(a.current(), b.current());
    let t = a.keys.encrypt(b"local").unwrap();
    assert!(a.opens(&t) && !b.opens(&t), "resumes on its own host only");
    assert_eq!((a.rotations().1, b.rotations().1), (1, 1));
    redis.restart();
    wait_for("both on the keys from Redis", || {
        a.source() == Source::Cluster && a.current().is_some() && a.current() == b.current()
    });
    assert!(a.opens(&t), "this host's own key opens for one more period");
    let u = b.keys.encrypt(b"shared").unwrap();
    assert!(a.opens(&u));
}
