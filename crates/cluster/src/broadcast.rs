//! The publishing side: an event sent to every host and the confirmations collected
//! ([`broadcast`]), and the heartbeats that say which hosts are alive ([`heartbeat`],
//! [`alive_hosts`]). All of it through the [`Client`], each command within its budget; it
//! runs on the admin thread and the subscriber's, never on a request's path.

use std::collections::BTreeMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use crate::client::Client;
use crate::error::Error;
use crate::events::{self, Event};
use crate::resp::Value;

/// Heartbeats older than this are removed from the set.
const FORGET_AFTER_MS: u64 = 3_600_000;
/// How often the confirmations are looked at while waiting for them: each look is an
/// HGETALL through the process's one connection, shared with everything else it does, and
/// up to 8 broadcasts may wait at once.
const POLL_EVERY: Duration = Duration::from_millis(50);

/// What came of an event sent to every host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub id: String,
    /// Subscribers the message reached, as Redis counted them.
    pub receivers: i64,
    /// Host id -> what it said (`STATUS TEXT`), in host order.
    pub confirmed: BTreeMap<String, String>,
    /// Hosts alive when it was sent that did not confirm within the wait.
    pub missing: Vec<String>,
    /// Hosts that heartbeat within the last hour but not within [`events::ALIVE_FOR`] (their
    /// subscription down, or stopped), that did not confirm: not known to have done it.
    pub unreachable: Vec<String>,
    /// Redis failed while the confirmations were awaited.
    pub error: Option<String>,
}

impl Outcome {
    /// Every host alive confirmed, none seen within the hour is unreachable, and as many
    /// hosts confirmed as subscribers Redis delivered it to: fewer means a subscriber that
    /// did not confirm under an id of its own (two processes under one host id write one
    /// field; or a subscriber that is not ringx).
    pub fn ok(&self) -> bool {
        self.missing.is_empty()
            && self.unreachable.is_empty()
            && self.confirmed.len() as i64 >= self.receivers
    }

    /// Subscribers it reached beyond the hosts that confirmed.
    pub fn unconfirmed_receivers(&self) -> i64 {
        (self.receivers - self.confirmed.len() as i64).max(0)
    }
}

/// Redis's clock in milliseconds (the hosts' clocks need not agree).
fn redis_ms(c: &Client) -> Result<u64, Error> {
    match c.call(&[b"TIME"], c.timeout())? {
        Value::Array(v) if v.len() == 2 => {
            let n = |i: usize| v[i].text().and_then(|t| t.parse::<u64>().ok());
            match (n(0), n(1)) {
                (Some(s), Some(us)) => Ok(s * 1000 + us / 1000),
                _ => Err(Error::Reply(format!("TIME answered {v:?}"))),
            }
        }
        other => Err(Error::Reply(format!("TIME answered {other:?}"))),
    }
}

/// Says that `host` is alive now (and forgets hosts silent for an hour).
pub fn heartbeat(c: &Client, host: &str) -> Result<(), Error> {
    let now = redis_ms(c)?;
    let key = c.key(events::HOSTS);
    let budget = c.timeout();
    c.call(
        &[
            b"ZADD",
            key.as_bytes(),
            now.to_string().as_bytes(),
            host.as_bytes(),
        ],
        budget,
    )?;
    let old = format!("({}", now.saturating_sub(FORGET_AFTER_MS));
    c.call(
        &[b"ZREMRANGEBYSCORE", key.as_bytes(), b"-inf", old.as_bytes()],
        budget,
    )?;
    Ok(())
}

/// The key that says which process heartbeats as `host` (see [`claim`]).
fn instance_key(c: &Client, host: &str) -> String {
    c.key(&format!("instance:{host}"))
}

/// `GETSET KEY INSTANCE` and `PEXPIRE KEY ALIVE_FOR` in one command: the instance that
/// heartbeat under this id before, if its heartbeat is that recent.
const CLAIM_SCRIPT: &str = "local old = redis.call('GETSET', KEYS[1], ARGV[1]) \
                            redis.call('PEXPIRE', KEYS[1], ARGV[2]) return old";

/// Says that process `instance` (a token of its own, random) heartbeats as `host`; the
/// other instance that did within [`events::ALIVE_FOR`], if one did: two processes under
/// one host id (a copied configuration, a host name that is `localhost` everywhere, or the
/// old and the new process of a binary upgrade), which the confirmations cannot tell apart.
pub fn claim(c: &Client, host: &str, instance: &str) -> Result<Option<String>, Error> {
    let key = instance_key(c, host);
    let ttl = events::ALIVE_FOR.as_millis().to_string();
    match c.call(
        &[
            b"EVAL",
            CLAIM_SCRIPT.as_bytes(),
            b"1",
            key.as_bytes(),
            instance.as_bytes(),
            ttl.as_bytes(),
        ],
        c.timeout(),
    )? {
        Value::Nil => Ok(None),
        v => match v.text() {
            Some(old) if old == instance => Ok(None),
            Some(old) => Ok(Some(old.to_string())),
            None => Err(Error::Reply(format!("EVAL answered {v:?}"))),
        },
    }
}

/// The hosts whose last heartbeat is within [`events::ALIVE_FOR`], sorted.
pub fn alive_hosts(c: &Client) -> Result<Vec<String>, Error> {
    Ok(known_hosts(c)?.0)
}

/// The hosts that heartbeat within [`events::ALIVE_FOR`], and those that did within the
/// last hour but not since (the heartbeats kept), each sorted.
pub fn known_hosts(c: &Client) -> Result<(Vec<String>, Vec<String>), Error> {
    let now = redis_ms(c)?;
    let key = c.key(events::HOSTS);
    let alive_since = now.saturating_sub(events::ALIVE_FOR.as_millis() as u64);
    let since = format!("({}", now.saturating_sub(FORGET_AFTER_MS));
    let v = match c.call(
        &[
            b"ZRANGEBYSCORE",
            key.as_bytes(),
            since.as_bytes(),
            b"+inf",
            b"WITHSCORES",
        ],
        c.timeout(),
    )? {
        Value::Array(v) => v,
        other => return Err(Error::Reply(format!("ZRANGEBYSCORE answered {other:?}"))),
    };
    let (mut alive, mut gone) = (Vec::new(), Vec::new());
    for hs in v.chunks(2) {
        let (Some(h), Some(score)) = (
            hs[0].text(),
            hs.get(1)
                .and_then(Value::text)
                .and_then(|t| t.parse::<f64>().ok()),
        ) else {
            return Err(Error::Reply(format!("ZRANGEBYSCORE answered {hs:?}")));
        };
        if score > alive_since as f64 {
            alive.push(h.to_string());
        } else {
            gone.push(h.to_string());
        }
    }
    alive.sort();
    gone.sort();
    Ok((alive, gone))
}

/// A token unique across hosts and processes: the process's random hasher keys over
/// `origin`, the time and a counter. Message ids, and each subscriber's instance.
pub fn new_id(origin: &str) -> String {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write(origin.as_bytes());
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    h.write_u128(t.as_nanos());
    let n = SEQ.fetch_add(1, Relaxed);
    h.write_u64(n);
    format!("{:016x}{n:x}", h.finish())
}

/// The confirmations of `key` so far.
fn confirmations(c: &Client, key: &str) -> Result<BTreeMap<String, String>, Error> {
    match c.call(&[b"HGETALL", key.as_bytes()], c.timeout())? {
        Value::Array(v) => Ok(v
            .chunks(2)
            .filter_map(|kv| match kv {
                [k, v] => Some((
                    k.text()?.to_string(),
                    String::from_utf8_lossy(v.bytes()?).into_owned(),
                )),
                _ => None,
            })
            .collect()),
        other => Err(Error::Reply(format!("HGETALL answered {other:?}"))),
    }
}

/// Publishes `action` on `target` from host `origin` and waits, `wait` at most, until every
/// host alive and every subscriber it reached has confirmed. An error when it could not be
/// published (Redis unavailable, or a field that cannot be sent).
pub fn broadcast(
    c: &Client,
    origin: &str,
    action: &str,
    target: &[u8],
    wait: Duration,
) -> Result<Outcome, Error> {
    let counters = &c.counters().events;
    let fail = |e: Error| {
        counters.publish_failed.fetch_add(1, Relaxed);
        e
    };
    let ev = Event {
        id: new_id(origin),
        origin: origin.to_string(),
        sent_ms: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64),
        action: action.to_string(),
        target: target.to_vec(),
    };
    let secret = c.settings().events_secret;
    let msg = ev
        .encode(secret.as_ref().map(String::as_bytes))
        .ok_or_else(|| {
            fail(Error::Reply(
                "the message cannot be sent: a host id or action that is not 1-128 printable \
             characters, or over 64 KiB"
                    .into(),
            ))
        })?;
    let (alive, gone) = known_hosts(c).map_err(fail)?;
    let channel = c.key(events::CHANNEL);
    // Before PUBLISH: this process's subscriber may have the message before its answer.
    c.remember_sent(&ev.id);
    let receivers = match c.call(&[b"PUBLISH", channel.as_bytes(), &msg], c.timeout()) {
        Ok(Value::Int(n)) => n,
        Ok(other) => return Err(fail(Error::Reply(format!("PUBLISH answered {other:?}")))),
        Err(e) => return Err(fail(e)),
    };
    counters.published.fetch_add(1, Relaxed);
    let key = events::confirm_key(&c.settings().prefix, &ev.id);
    let deadline = Instant::now() + wait;
    let mut confirmed = BTreeMap::new();
    let error = loop {
        let error = match confirmations(c, &key) {
            Ok(got) => {
                confirmed = got;
                None
            }
            Err(e) => Some(e.to_string()),
        };
        let all_alive = alive.iter().all(|h| confirmed.contains_key(h));
        if (all_alive && confirmed.len() as i64 >= receivers) || Instant::now() >= deadline {
            break error;
        }
        std::thread::sleep(POLL_EVERY.min(deadline.saturating_duration_since(Instant::now())));
    };
    let missing: Vec<String> = alive
        .into_iter()
        .filter(|h| !confirmed.contains_key(h))
        .collect();
    let unreachable: Vec<String> = gone
        .into_iter()
        .filter(|h| !confirmed.contains_key(h))
        .collect();
    counters
        .confirmed
        .fetch_add(confirmed.len() as u64, Relaxed);
    counters
        .unconfirmed
        .fetch_add(missing.len() as u64, Relaxed);
    counters
        .unreachable
        .fetch_add(unreachable.len() as u64, Relaxed);
    Ok(Outcome {
        id: ev.id,
        receivers,
        confirmed,
        missing,
        unreachable,
        error,
    })
}
