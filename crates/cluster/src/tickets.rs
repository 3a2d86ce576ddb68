//! TLS session ticket keys shared by every host through Redis, so that a ticket one host
//! issued resumes on another (issue 42). The keys are put into a
//! [`SharedTickets`](ringx_tls::ticket_keys::SharedTickets), which seals and opens the
//! tickets on the handshake path; a thread of this module's refreshes them from Redis and
//! rotates them, so that a handshake never waits on Redis.
//!
//! - `PREFIX tls:ticket_keys` holds the current key and the previous one:
//!   `ringx-ticket-keys/1 ID CREATED SECRET [ID CREATED SECRET]`, in hex, CREATED in
//!   milliseconds by Redis's clock (`TIME`), so that the hosts' clocks need not agree. It
//!   expires 3 periods after its last write: no host alive, no key kept.
//! - Every [`TicketSettings::refresh`] each host's thread reads it. When the current key is
//!   a period old (`[tls] ticket_key_rotate`), or there is none, the host that takes the
//!   lock `PREFIX tls:ticket_keys:lock` (`SET NX PX 10000`, a token of its own, released by
//!   compare-and-delete) makes a new key current and keeps the one it replaces as the
//!   previous: a key seals for one period and opens for one more, as rustls's
//!   `TicketRotator`'s generations do. The others take it on their next refresh (until then,
//!   tickets sealed under the new key do not resume on them: a full handshake).
//! - Redis unreachable at start: a key of this host's own (tickets resume on this host only),
//!   said once and shown on `/metrics` (`ringx_tls_ticket_key_source{source="local"}`).
//!   Redis lost later: the last keys from Redis go on sealing, so tickets still resume on
//!   every host, until the current one is two periods old; then this host seals with keys
//!   of its own, rotated every period, and keeps the last keys from Redis to open tickets for
//!   one more period. When Redis answers again its keys seal again (rotated first if due),
//!   and this host's own keys open for one more period. Nothing to do by hand.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ringx_tls::ticket_keys::{KeyMaterial, SharedTickets, ID_LEN, SECRET_LEN};
use zeroize::{Zeroize, Zeroizing};

use crate::client::Client;
use crate::error::Error;
use crate::resp::Value;

pub use crate::tickets_metrics::{Source, SyncCounters};
/// The process's shared keys, which the TLS configurations take with `[cluster]`.
pub use ringx_tls::ticket_keys::global as shared_keys;

const MAGIC: &str = "ringx-ticket-keys/1";
/// How long the rotating host holds the lock at most (it needs a few commands).
const LOCK_TTL_MS: u64 = 10_000;
/// Deletes the lock if it still holds the token: 1 if it did, else 0.
const RELEASE: &str = "if redis.call('get', KEYS[1]) == ARGV[1] then \
     return redis.call('del', KEYS[1]) else return 0 end";

/// How the keys are rotated and refreshed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TicketSettings {
    /// `[tls] ticket_key_rotate`: how long a key seals; it opens as long again.
    pub period: Duration,
    /// How often each host reads the keys.
    pub refresh: Duration,
}

impl TicketSettings {
    /// The refresh every 2 s: a key made current on one host seals on the others within
    /// that, for one `GET` and one `TIME` per host every 2 s.
    pub fn new(period: Duration) -> TicketSettings {
        TicketSettings {
            period,
            refresh: Duration::from_secs(2),
        }
    }
}

/// The keys as stored in Redis.
#[derive(Debug, PartialEq, Eq)]
pub struct Record {
    pub current: KeyMaterial,
    pub previous: Option<KeyMaterial>,
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex<const N: usize>(s: &str) -> Option<[u8; N]> {
    if s.len() != 2 * N || !s.is_ascii() {
        return None;
    }
    let mut out = [0u8; N];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

impl Record {
    /// The stored form (a secret: wiped when dropped).
    pub fn encode(&self) -> Zeroizing<Vec<u8>> {
        let mut s = Zeroizing::new(String::from(MAGIC));
        for k in std::iter::once(&self.current).chain(&self.previous) {
            let mut secret = Zeroizing::new(hex(&k.secret[..]));
            s.push_str(&format!(" {} {} ", hex(&k.id), k.created_ms));
            s.push_str(&secret);
            secret.zeroize();
        }
        Zeroizing::new(std::mem::take(&mut *s).into_bytes())
    }

    /// The stored form read back; `None` for anything else.
    pub fn decode(b: &[u8]) -> Option<Record> {
        let s = std::str::from_utf8(b).ok()?;
        let mut f = s.split(' ');
        if f.next()? != MAGIC {
            return None;
        }
        let words: Vec<&str> = f.collect();
        if words.len() != 3 && words.len() != 6 {
            return None;
        }
        let key = |w: &[&str]| {
            let secret = unhex::<SECRET_LEN>(w[2])?;
            Some(KeyMaterial {
                id: unhex::<ID_LEN>(w[0])?,
                created_ms: w[1].parse().ok()?,
                secret: Zeroizing::new(secret),
            })
        };
        Some(Record {
            current: key(&words[..3])?,
            previous: if words.len() == 6 {
                Some(key(&words[3..])?)
            } else {
                None
            },
        })
    }
}

/// The thread that keeps a [`SharedTickets`] filled from Redis; it stops when this is
/// dropped (at its next wake-up; what it put in stays).
pub struct TicketSync {
    stop: Option<mpsc::Sender<()>>,
    running: Arc<AtomicBool>,
    counters: Arc<SyncCounters>,
    keys: Arc<SharedTickets>,
    settings: Arc<Mutex<TicketSettings>>,
    client: Client,
}

impl Drop for TicketSync {
    fn drop(&mut self) {
        self.running.store(false, Relaxed);
        self.stop.take();
    }
}

impl TicketSync {
    /// Starts the thread; its first refresh is at once.
    pub fn start(
        client: Client,
        keys: Arc<SharedTickets>,
        settings: TicketSettings,
    ) -> std::io::Result<TicketSync> {
        let (stop, stopped) = mpsc::channel::<()>();
        let running = Arc::new(AtomicBool::new(true));
        let counters = Arc::new(SyncCounters::default());
        let settings = Arc::new(Mutex::new(settings));
        let mut st = State {
            record_key: client.key("tls:ticket_keys"),
            lock_key: client.key("tls:ticket_keys:lock"),
            client: client.clone(),
            keys: keys.clone(),
            settings: settings.clone(),
            cluster: None,
            local: Vec::new(),
            failing: false,
            counters: counters.clone(),
            running: running.clone(),
        };
        std::thread::Builder::new()
            .name("ringx-tickets".into())
            .spawn(move || loop {
                let wait = st.step();
                match stopped.recv_timeout(wait) {
                    Err(RecvTimeoutError::Timeout) => {}
                    _ => return,
                }
            })?;
        Ok(TicketSync {
            stop: Some(stop),
            running,
            counters,
            keys,
            settings,
            client,
        })
    }

    pub fn settings(&self) -> TicketSettings {
        *self.settings.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// New settings (a reload), taken at the next refresh; the keys are kept.
    pub fn set_settings(&self, s: TicketSettings) {
        *self.settings.lock().unwrap_or_else(|e| e.into_inner()) = s;
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    pub fn counters(&self) -> &SyncCounters {
        &self.counters
    }

    /// Prometheus text: the thread's counters and the tickets sealed and opened.
    pub fn render(&self) -> String {
        self.counters.render(&self.keys.counters)
    }
}

/// What the last successful read from Redis gave, and when.
struct Loaded {
    record: Record,
    /// The current key's age then, by Redis's clock.
    age: Duration,
    at: Instant,
}

impl Loaded {
    /// The current key's age now.
    fn age(&self) -> Duration {
        self.age + self.at.elapsed()
    }
}

struct State {
    client: Client,
    keys: Arc<SharedTickets>,
    settings: Arc<Mutex<TicketSettings>>,
    record_key: String,
    lock_key: String,
    cluster: Option<Loaded>,
    /// Keys this host made itself while Redis was away, oldest first; created by its clock.
    local: Vec<KeyMaterial>,
    /// Redis failed at the last refresh.
    failing: bool,
    counters: Arc<SyncCounters>,
    running: Arc<AtomicBool>,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn ms(d: Duration) -> u64 {
    d.as_millis() as u64
}

impl State {
    /// One refresh, then the keys put in; returns how long to wait for the next.
    fn settings(&self) -> TicketSettings {
        *self.settings.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn step(&mut self) -> Duration {
        let mut wait = self.settings().refresh;
        match self.refresh() {
            Ok(Some(l)) => {
                self.counters.refresh_ok.fetch_add(1, Relaxed);
                if self.failing {
                    tracing::info!("TLS tickets: Redis answers again; its keys seal tickets again");
                }
                self.failing = false;
                self.cluster = Some(l);
            }
            Ok(None) => {
                // No keys yet, another host is making them: ask again soon.
                self.counters.refresh_ok.fetch_add(1, Relaxed);
                wait = wait.min(Duration::from_millis(250));
            }
            Err(e) => {
                self.counters.refresh_errors.fetch_add(1, Relaxed);
                if !self.failing {
                    match &self.cluster {
                        Some(_) => tracing::warn!(
                            "TLS tickets: cannot read the keys from Redis ({e}); the last keys \
                             from Redis go on sealing tickets (every host opens them) until \
                             they are two periods old"
                        ),
                        None => tracing::warn!(
                            "TLS tickets: cannot read the keys from Redis ({e}); tickets are \
                             sealed with this host's own key and resume on this host only \
                             until Redis answers"
                        ),
                    }
                } else {
                    tracing::debug!("TLS tickets: Redis still failing: {e}");
                }
                self.failing = true;
            }
        }
        if self.running.load(Relaxed) {
            self.apply();
        }
        wait
    }

    /// The keys from Redis, rotated first if due; `None`: none there, and another host
    /// holds the lock to make them.
    fn refresh(&mut self) -> Result<Option<Loaded>, Error> {
        let now = self.redis_time()?;
        let mut rec = self.get()?;
        let period = ms(self.settings().period);
        let due = |r: &Option<Record>| {
            r.as_ref()
                .is_none_or(|r| now.saturating_sub(r.current.created_ms) >= period)
        };
        if due(&rec) && self.lock()? {
            let r = self.rotate(now, due);
            self.unlock();
            rec = r?;
        }
        Ok(rec.map(|record| Loaded {
            age: Duration::from_millis(now.saturating_sub(record.current.created_ms)),
            record,
            at: Instant::now(),
        }))
    }

    /// Under the lock: reads again (another host may have rotated since), and if still
    /// due makes a new key current.
    fn rotate(
        &mut self,
        now: u64,
        due: impl Fn(&Option<Record>) -> bool,
    ) -> Result<Option<Record>, Error> {
        let rec = self.get()?;
        if !due(&rec) {
            return Ok(rec);
        }
        let current = KeyMaterial::generate(now)
            .ok_or_else(|| Error::Down("no random bytes for a ticket key".into()))?;
        // Redis lost the keys (restarted without them): the last ones it had still open
        // tickets, as the previous key.
        let period = ms(self.settings().period);
        let last = self.cluster.as_ref().map(|l| &l.record.current);
        let last = last.filter(|k| now.saturating_sub(k.created_ms) < 2 * period);
        let new = Record {
            current,
            previous: rec.map(|r| r.current).or_else(|| last.cloned()),
        };
        let px = (3 * period).to_string();
        let v = new.encode();
        let r = self.call(&[b"SET", self.record_key.as_bytes(), &v, b"PX", px.as_bytes()])?;
        if r != Value::Simple("OK".into()) {
            return Err(Error::Reply(format!("SET answered {r:?}")));
        }
        self.counters.rotations_cluster.fetch_add(1, Relaxed);
        tracing::info!(
            "TLS tickets: this host made a new ticket key current for every host ({}){}",
            new.current.id_hex(),
            match &new.previous {
                Some(p) => format!("; {} opens tickets for one more period", p.id_hex()),
                None => String::new(),
            }
        );
        Ok(Some(new))
    }

    fn call(&self, args: &[&[u8]]) -> Result<Value, Error> {
        self.client.call(args, self.client.timeout())
    }

    /// Redis's clock, in milliseconds.
    fn redis_time(&self) -> Result<u64, Error> {
        let v = self.call(&[b"TIME"])?;
        let parts = match &v {
            Value::Array(a) if a.len() == 2 => a,
            _ => return Err(Error::Reply(format!("TIME answered {v:?}"))),
        };
        let n = |v: &Value| v.text().and_then(|t| t.parse::<u64>().ok());
        match (n(&parts[0]), n(&parts[1])) {
            (Some(s), Some(us)) => Ok(s * 1000 + us / 1000),
            _ => Err(Error::Reply(format!("TIME answered {v:?}"))),
        }
    }

    fn get(&self) -> Result<Option<Record>, Error> {
        match self.call(&[b"GET", self.record_key.as_bytes()])? {
            Value::Nil => Ok(None),
            Value::Bulk(mut b) => {
                let r = Record::decode(&b);
                b.zeroize();
                match r {
                    Some(r) => Ok(Some(r)),
                    None => Err(Error::Reply(format!(
                        "{} holds something else than ticket keys",
                        self.record_key
                    ))),
                }
            }
            v => Err(Error::Reply(format!("GET answered {v:?}"))),
        }
    }

    /// Takes the rotation lock: `false` when another host holds it.
    fn lock(&mut self) -> Result<bool, Error> {
        let token = self.token();
        let px = LOCK_TTL_MS.to_string();
        let k = self.lock_key.as_bytes();
        match self.call(&[b"SET", k, token.as_bytes(), b"NX", b"PX", px.as_bytes()])? {
            Value::Simple(s) if s == "OK" => Ok(true),
            Value::Nil => Ok(false),
            v => Err(Error::Reply(format!("SET NX answered {v:?}"))),
        }
    }

    fn unlock(&mut self) {
        let token = self.token();
        let k = self.lock_key.as_bytes();
        if let Err(e) = self.call(&[b"EVAL", RELEASE.as_bytes(), b"1", k, token.as_bytes()]) {
            // It expires by itself within LOCK_TTL_MS.
            tracing::debug!("TLS tickets: releasing the lock: {e}");
        }
    }

    /// This process's lock token: the thread's address and the process id are enough to
    /// tell it from every other holder (other hosts, other processes, other syncs here).
    fn token(&self) -> String {
        format!(
            "{}/{}/{:p}",
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|h| h.trim().to_string())
                .unwrap_or_default(),
            std::process::id(),
            Arc::as_ptr(&self.counters)
        )
    }

    /// Decides which keys seal and open now, and puts them in where that changed.
    fn apply(&mut self) {
        let p = self.settings().period;
        let now = now_ms();
        // The last keys from Redis seal while the current one is under two periods old.
        let from_cluster = self.cluster.as_ref().filter(|l| l.age() < 2 * p);
        if from_cluster.is_none()
            && !self.failing
            && self.cluster.is_none()
            && self.local.is_empty()
        {
            // Redis answers, with no keys yet: another host is making them.
            return;
        }
        let seal = match from_cluster {
            Some(l) => {
                self.set_source(Source::Cluster);
                l.record.current.clone()
            }
            None => {
                let fresh = self
                    .local
                    .last()
                    .filter(|k| now.saturating_sub(k.created_ms) < ms(p))
                    .cloned();
                let k = match fresh.or_else(|| KeyMaterial::generate(now)) {
                    Some(k) => k,
                    None => return tracing::warn!("TLS tickets: no random bytes for a key"),
                };
                if self.local.last().map(|l| l.id) != Some(k.id) {
                    self.counters.rotations_local.fetch_add(1, Relaxed);
                    if self.cluster.is_some() && self.local.is_empty() {
                        tracing::warn!(
                            "TLS tickets: the last keys from Redis are two periods old and \
                             Redis still does not answer; sealing with this host's own keys \
                             (tickets resume on this host only)"
                        );
                    }
                    self.local.push(k.clone());
                }
                self.set_source(Source::Local);
                k
            }
        };
        // This host's own keys open for one period after they stop sealing (they sealed for
        // one); Redis's previous key opens as Redis keeps it, and for a period past two once
        // Redis is gone.
        self.local
            .retain(|k| now.saturating_sub(k.created_ms) < 2 * ms(p) || k.id == seal.id);
        let mut open: Vec<&KeyMaterial> = self.local.iter().collect();
        if let Some(l) = &self.cluster {
            let age = l.age();
            if age < 3 * p {
                open.push(&l.record.current);
            }
            if let Some(prev) = &l.record.previous {
                let prev_age = age
                    + Duration::from_millis(
                        l.record.current.created_ms.saturating_sub(prev.created_ms),
                    );
                if !self.failing || prev_age < 3 * p {
                    open.push(prev);
                }
            }
        }
        open.retain(|k| k.id != seal.id);
        let (cur, others) = self.keys.ids();
        let want: Vec<[u8; ID_LEN]> = open.iter().map(|k| k.id).collect();
        if cur != Some(seal.id) || others != want {
            self.keys.install(Some(&seal), &open);
        }
        let created = match self.cluster.as_ref().filter(|_| from_cluster.is_some()) {
            Some(l) => now.saturating_sub(ms(l.age())),
            None => seal.created_ms,
        };
        self.counters.key_created_ms.store(created, Relaxed);
    }

    fn set_source(&self, s: Source) {
        let was = self.counters.source.swap(s as u8, Relaxed);
        if was == Source::Local as u8 && s == Source::Cluster {
            tracing::info!(
                "TLS tickets: sealed with the keys from Redis again (every host opens them)"
            );
        }
    }
}
