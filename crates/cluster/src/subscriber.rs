//! The subscriber: a thread with a connection of its own (a subscribed connection runs no
//! other command), subscribed to `PREFIX events`. Each event it receives is handed to the
//! binary's handler, which applies it (a purge, a drain), and its result is confirmed under
//! `PREFIX confirm:ID` through the [`Client`] (`HSET` host -> result and `EXPIRE` 60 s, in
//! one `EVAL`). While subscribed it says every 2 s that this host is alive (`ZADD PREFIX
//! hosts`, scored by Redis's clock), so a host that publishes knows whom to wait for.
//!
//! A lost connection (Redis restarted, a failover, the master moved: the client's thread
//! finds it at another address) is made anew with backoff (100 ms doubling to 5 s) and
//! subscribed again; an idle connection is pinged every second. Events published while no
//! connection was up are lost (pub/sub keeps nothing): their origin sees this host missing.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::broadcast;
use crate::client::Client;
use crate::conn::Conn;
use crate::discover;
use crate::error::Error;
use crate::events::{self, DecodeError, Event, HEARTBEAT_EVERY};
use crate::resp::Value;
use crate::settings::Settings;

const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(5);
/// How long one read waits: how soon a stop or a periodic task is seen.
const TICK: Duration = Duration::from_millis(200);
const PING_EVERY: Duration = Duration::from_secs(1);
/// The ids of authenticated messages remembered at most (within 5 minutes).
const SEEN_KEPT: usize = 4096;
/// How long a confirmation is kept.
const CONFIRM_TTL_S: &[u8] = b"60";
/// `HSET KEY HOST RESULT` and `EXPIRE KEY TTL` as one command.
const CONFIRM_SCRIPT: &str = "redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) \
                              return redis.call('EXPIRE', KEYS[1], ARGV[3])";

/// What the handler did with an event.
pub struct Applied {
    /// An HTTP status and its text, as the admin API would answer it locally.
    pub status: u16,
    pub text: String,
    /// Done once the confirmation is written (a drain: the process may end soon after).
    pub then: Option<Box<dyn FnOnce() + Send>>,
}

/// What applies an event on this host; `authenticated`: it carried the MAC of `[cluster]
/// events_secret (false without a secret: anyone who can publish on the channel may have
/// sent it).
pub type Handler = Arc<dyn Fn(&Event, bool) -> Applied + Send + Sync>;

/// The subscriber thread; it stops (within 200 ms) when this is dropped.
pub struct Subscriber {
    stop: Arc<AtomicBool>,
}

impl Drop for Subscriber {
    fn drop(&mut self) {
        self.stop.store(true, Relaxed);
    }
}

impl Subscriber {
    /// Starts the thread for host `host_id` (an [`events::is_name`]).
    pub fn start(client: Client, host_id: String, handler: Handler) -> std::io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let mut t = Thread {
            instance: broadcast::new_id(&host_id),
            conflict: false,
            client,
            host_id,
            handler,
            stop: stop.clone(),
            conn: None,
            backoff: BACKOFF_MIN,
            next_try: Instant::now(),
            last_rx: Instant::now(),
            ping_sent: None,
            last_beat: None,
            ever: false,
            seen: VecDeque::new(),
        };
        std::thread::Builder::new()
            .name("ringx-cluster-sub".into())
            .spawn(move || t.run())?;
        Ok(Subscriber { stop })
    }
}

struct Thread {
    client: Client,
    host_id: String,
    /// This subscriber's token in its heartbeats, and whether another process heartbeats
    /// under the same host id ([`broadcast::claim`]).
    instance: String,
    conflict: bool,
    handler: Handler,
    stop: Arc<AtomicBool>,
    /// The connection, the settings it was made with, and the channel.
    conn: Option<(Conn, Settings, String)>,
    backoff: Duration,
    next_try: Instant,
    last_rx: Instant,
    ping_sent: Option<Instant>,
    last_beat: Option<Instant>,
    ever: bool,
    /// With a secret: the ids of the authenticated messages taken within
    /// [`events::MAX_AGE`], and when each was sent, oldest first (a replay is refused).
    seen: VecDeque<(String, u64)>,
}

impl Thread {
    fn run(&mut self) {
        while !self.stop.load(Relaxed) {
            if self.conn.is_none() {
                if Instant::now() >= self.next_try {
                    self.subscribe();
                } else {
                    std::thread::sleep(TICK.min(self.next_try - Instant::now()));
                }
                continue;
            }
            self.poll();
            if self.conn.is_some() {
                self.tick();
            }
        }
        self.client
            .counters()
            .events
            .subscribed
            .store(false, Relaxed);
    }

    fn subscribe(&mut self) {
        let (settings, dial) = self.client.dial();
        let channel = format!("{}{}", settings.prefix, events::CHANNEL);
        let made = discover::connect(&settings.target, &dial).and_then(|mut c| {
            match c.call(&[b"SUBSCRIBE", channel.as_bytes()])? {
                Value::Array(v) if v.first().and_then(Value::text) == Some("subscribe") => {}
                other => return Err(Error::Reply(format!("SUBSCRIBE answered {other:?}"))),
            }
            c.set_read_timeout(TICK)?;
            Ok(c)
        });
        match made {
            Ok(c) => {
                let ev = &self.client.counters().events;
                ev.subscribed.store(true, Relaxed);
                ev.subscribes.fetch_add(1, Relaxed);
                tracing::info!(
                    "cluster: host {} {}subscribed to {channel} at {}",
                    self.host_id,
                    if self.ever { "re-" } else { "" },
                    c.addr
                );
                self.ever = true;
                self.conn = Some((c, settings, channel));
                self.backoff = BACKOFF_MIN;
                self.last_rx = Instant::now();
                self.ping_sent = None;
                self.last_beat = None;
            }
            Err(e) => {
                tracing::debug!("cluster: cannot subscribe to {channel}: {e}");
                self.next_try = Instant::now() + self.backoff;
                self.backoff = (self.backoff * 2).min(BACKOFF_MAX);
            }
        }
    }

    fn lost(&mut self, why: &str) {
        if let Some((c, _, channel)) = self.conn.take() {
            tracing::warn!(
                "cluster: the subscription to {channel} at {} ended ({why}); subscribing again",
                c.addr
            );
        }
        self.client
            .counters()
            .events
            .subscribed
            .store(false, Relaxed);
        self.next_try = Instant::now();
    }

    /// Reads what came (or waits [`TICK`] for it) and handles it.
    fn poll(&mut self) {
        let Some((conn, _, channel)) = self.conn.as_mut() else {
            return;
        };
        let got = match conn.poll() {
            Ok(Some(v)) => v,
            Ok(None) => return,
            Err(e) => return self.lost(&e.to_string()),
        };
        self.last_rx = Instant::now();
        self.ping_sent = None;
        let Value::Array(parts) = got else {
            return;
        };
        match (
            parts.first().and_then(Value::text),
            parts.get(1),
            parts.get(2),
        ) {
            (Some("message"), Some(ch), Some(msg)) if ch.text() == Some(channel.as_str()) => {
                let msg = msg.bytes().unwrap_or_default().to_vec();
                self.message(&msg);
            }
            _ => {} // a pong, or the subscription's confirmation again
        }
    }

    /// Whether an authenticated event is fresh: sent within [`events::MAX_AGE`] of this
    /// host's clock, its id not taken before. Remembers it.
    fn fresh(&mut self, ev: &Event) -> Result<(), &'static str> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let max = events::MAX_AGE.as_millis() as u64;
        while self
            .seen
            .front()
            .is_some_and(|(_, t)| now.saturating_sub(*t) > max)
            || self.seen.len() >= SEEN_KEPT
        {
            self.seen.pop_front();
        }
        if now.abs_diff(ev.sent_ms) > max {
            return Err("sent over 5 minutes from this host's clock (a replay, or clocks apart)");
        }
        if self.seen.iter().any(|(id, _)| *id == ev.id) {
            return Err("its id was taken already (a replay)");
        }
        self.seen.push_back((ev.id.clone(), ev.sent_ms));
        Ok(())
    }

    fn message(&mut self, msg: &[u8]) {
        let secret = self.client.settings().events_secret;
        let decoded = Event::decode(msg, secret.as_ref().map(String::as_bytes));
        let counters = &self.client.counters().events;
        let got = match decoded {
            Ok(got) => got,
            Err(e @ DecodeError::Invalid(_)) => {
                counters.invalid.fetch_add(1, Relaxed);
                tracing::debug!("cluster: ignored a message on the channel: {e}");
                return;
            }
            Err(e @ DecodeError::Unauthenticated(_)) => {
                counters.unauthenticated.fetch_add(1, Relaxed);
                tracing::warn!("cluster: refused a message on the channel: {e}");
                return;
            }
        };
        let authenticated = got.authenticated;
        let ev = got.event;
        if authenticated {
            if let Err(why) = self.fresh(&ev) {
                let counters = &self.client.counters().events;
                counters.unauthenticated.fetch_add(1, Relaxed);
                tracing::warn!(
                    "cluster: refused {} {:?} from host {} (message {}): {why}",
                    ev.action,
                    String::from_utf8_lossy(&ev.target),
                    ev.origin,
                    ev.id
                );
                return;
            }
        }
        let counters = &self.client.counters().events;
        counters.received.fetch_add(1, Relaxed);
        // Known by its id, not its origin: another process may have this host id.
        let applied = if self.client.sent_here(&ev.id) {
            Applied {
                status: 200,
                text: "applied by the request on this host".into(),
                then: None,
            }
        } else {
            (self.handler)(&ev, authenticated)
        };
        tracing::info!(
            "cluster: {} {:?} from host {} (message {}): {} {}",
            ev.action,
            String::from_utf8_lossy(&ev.target),
            ev.origin,
            ev.id,
            applied.status,
            applied.text.trim_end()
        );
        let key = events::confirm_key(&self.client.settings().prefix, &ev.id);
        let value = format!("{} {}", applied.status, applied.text.trim_end());
        // One command: HSET and EXPIRE as two could leave the key for ever when the second
        // failed (the budget passed, the connection lost between them).
        let r = self.client.call(
            &[
                b"EVAL",
                CONFIRM_SCRIPT.as_bytes(),
                b"1",
                key.as_bytes(),
                self.host_id.as_bytes(),
                value.as_bytes(),
                CONFIRM_TTL_S,
            ],
            self.client.timeout(),
        );
        match r {
            Ok(_) => counters.confirms_sent.fetch_add(1, Relaxed),
            Err(e) => {
                tracing::warn!("cluster: cannot confirm message {}: {e}", ev.id);
                counters.confirms_failed.fetch_add(1, Relaxed)
            }
        };
        if let Some(then) = applied.then {
            then();
        }
    }

    /// Warns (once, then again after it stopped) and counts while another process
    /// heartbeats under this host id.
    fn check_instance(&mut self) {
        match broadcast::claim(&self.client, &self.host_id, &self.instance) {
            Ok(Some(other)) => {
                self.client
                    .counters()
                    .events
                    .host_id_conflicts
                    .fetch_add(1, Relaxed);
                if !self.conflict {
                    tracing::warn!(
                        "cluster: another process heartbeats as host {} (instance {other}, this \
                         one {}): the answers of purges and drains sent to every host cannot \
                         tell the two apart; give each its own [cluster] host_id (a binary \
                         upgrade's old and new process overlap for a while: that passes)",
                        self.host_id,
                        self.instance
                    );
                }
                self.conflict = true;
            }
            Ok(None) => self.conflict = false,
            Err(e) => tracing::debug!("cluster: heartbeat: {e}"),
        }
    }

    /// What is done between reads: the heartbeat, the ping, following the client.
    fn tick(&mut self) {
        let now = Instant::now();
        if self.last_beat.is_none_or(|t| now - t >= HEARTBEAT_EVERY) {
            self.last_beat = Some(now);
            if let Err(e) = broadcast::heartbeat(&self.client, &self.host_id) {
                tracing::debug!("cluster: heartbeat: {e}");
            }
            self.check_instance();
        }
        let Some((conn, settings, _)) = self.conn.as_mut() else {
            return;
        };
        // New settings (a reload), or the client's thread found the master elsewhere.
        let master = self
            .client
            .counters()
            .master
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if *settings != self.client.settings() {
            return self.lost("new settings");
        }
        if !master.is_empty() && master != conn.addr {
            return self.lost(&format!("the master is now {master}"));
        }
        match self.ping_sent {
            Some(t) if now - t > settings.timeout.max(PING_EVERY) => self.lost("no answer to PING"),
            None if now - self.last_rx >= PING_EVERY => {
                self.ping_sent = Some(now);
                if let Err(e) = conn.send(&[b"PING"]) {
                    self.lost(&e.to_string());
                }
            }
            _ => {}
        }
    }
}
