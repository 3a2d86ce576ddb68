//! [`Storage`] in Redis (`[cluster]`): the account and certificates that a fleet of hosts
//! shares, so that one host orders and the others load what it stored.
//!
//! - Keys: `PREFIX acme/KEY`, where KEY is what [`DirStorage`](crate::DirStorage) would make
//!   a path of (`ringx:acme/certs/HOST/NAME/cert.pem`).
//! - Secrets (the account's credentials, certificate keys) are kept in Redis only: this
//!   storage writes no file, so no copy lies on any host's disk. Who may read them is
//!   Redis's to say (an ACL user for ringx, `[cluster] username`).
//! - The lock: `SET PREFIX acme/locks/NAME TOKEN NX PX 30000`, the token naming this host
//!   and process with 128 random bits; while held, a thread of the lock's refreshes its
//!   expiry every 10 s, only where the key still holds this token; dropped, it is deleted
//!   the same way (compare-and-delete, a Lua script run by Redis in one step), so a host
//!   whose lock expired while it was cut off never frees another host's. A host that
//!   finds the lock taken waits for it, polling, as long as its holder keeps it.

use std::io;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ringx_cluster::{Client, Value};

use crate::storage::{check_key, Held, Storage};

/// Sets the key's expiry if it still holds the token: 1 if it did, else 0.
const REFRESH: &str = "if redis.call('get', KEYS[1]) == ARGV[1] then \
     return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end";
/// Deletes the key if it still holds the token: 1 if it did, else 0.
const RELEASE: &str = "if redis.call('get', KEYS[1]) == ARGV[1] then \
     return redis.call('del', KEYS[1]) else return 0 end";

/// [`Storage`] in Redis.
pub struct RedisStorage {
    client: Client,
    /// How long a lock outlives its holder's last refresh.
    lock_ttl: Duration,
    /// How often a waiting host asks for the lock again.
    poll: Duration,
    /// How long a host waits for a lock another keeps refreshing, before it gives up this
    /// time (the order is then retried with the manager's backoff).
    max_wait: Duration,
}

impl RedisStorage {
    pub fn new(client: Client) -> RedisStorage {
        RedisStorage {
            client,
            lock_ttl: Duration::from_secs(30),
            poll: Duration::from_millis(250),
            max_wait: Duration::from_secs(15 * 60),
        }
    }

    /// Shorter times, for tests.
    pub fn with_lock_times(mut self, ttl: Duration, poll: Duration, max_wait: Duration) -> Self {
        self.lock_ttl = ttl;
        self.poll = poll;
        self.max_wait = max_wait;
        self
    }

    fn key(&self, key: &str) -> io::Result<String> {
        check_key(key)?;
        Ok(self.client.key(&format!("acme/{key}")))
    }

    fn call(&self, what: &str, args: &[&[u8]]) -> io::Result<Value> {
        self.client
            .call(args, self.client.timeout())
            .map_err(|e| io::Error::other(format!("Redis {what}: {e}")))
    }
}

/// A random token naming this host and process: `HOST/PID/HEX`.
fn token() -> io::Result<String> {
    let mut r = [0u8; 16];
    rustls::crypto::aws_lc_rs::default_provider()
        .secure_random
        .fill(&mut r)
        .map_err(|_| io::Error::other("no random bytes for the lock's token"))?;
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "host".into());
    let hex: String = r.iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!("{host}/{}/{hex}", std::process::id()))
}

impl Storage for RedisStorage {
    fn load(&self, key: &str) -> io::Result<Option<Vec<u8>>> {
        let k = self.key(key)?;
        match self.call(&format!("GET {k}"), &[b"GET", k.as_bytes()])? {
            Value::Bulk(v) => Ok(Some(v)),
            Value::Nil => Ok(None),
            other => Err(io::Error::other(format!(
                "Redis GET {k}: answered {other:?}"
            ))),
        }
    }

    fn store(&self, key: &str, data: &[u8], _secret: bool) -> io::Result<()> {
        let k = self.key(key)?;
        match self.call(&format!("SET {k}"), &[b"SET", k.as_bytes(), data])? {
            Value::Simple(s) if s == "OK" => Ok(()),
            other => Err(io::Error::other(format!(
                "Redis SET {k}: answered {other:?}"
            ))),
        }
    }

    fn lock(&self, key: &str) -> io::Result<Box<dyn Held>> {
        let k = self.key(&format!("locks/{key}"))?;
        let token = token()?;
        let ttl = self.lock_ttl.as_millis().to_string();
        let start = Instant::now();
        let mut told = false;
        loop {
            let r = self.call(
                &format!("lock {k}"),
                &[
                    b"SET",
                    k.as_bytes(),
                    token.as_bytes(),
                    b"NX",
                    b"PX",
                    ttl.as_bytes(),
                ],
            )?;
            match r {
                Value::Simple(s) if s == "OK" => {
                    return Ok(Box::new(RedisHeld::start(
                        self.client.clone(),
                        k,
                        token,
                        self.lock_ttl,
                    )))
                }
                Value::Nil => {}
                other => {
                    return Err(io::Error::other(format!(
                        "Redis lock {k}: answered {other:?}"
                    )))
                }
            }
            if !told {
                told = true;
                let holder = self.call(&format!("GET {k}"), &[b"GET", k.as_bytes()]);
                let holder = holder.ok().and_then(|v| v.text().map(str::to_string));
                tracing::info!(
                    "ACME: {k} is held by {}; waiting for it (that host is ordering)",
                    holder.as_deref().unwrap_or("another host")
                );
            }
            if start.elapsed() >= self.max_wait {
                return Err(io::Error::other(format!(
                    "Redis lock {k}: still held by another host after {:.0?}",
                    self.max_wait
                )));
            }
            std::thread::sleep(self.poll);
        }
    }
}

/// A Redis lock held: refreshed by a thread until dropped, then released.
struct RedisHeld {
    client: Client,
    key: String,
    token: String,
    stop: Option<mpsc::Sender<()>>,
    refresher: Option<JoinHandle<()>>,
}

impl Held for RedisHeld {}

impl RedisHeld {
    fn start(client: Client, key: String, token: String, ttl: Duration) -> RedisHeld {
        let (stop, stopped) = mpsc::channel::<()>();
        let (c, k, t) = (client.clone(), key.clone(), token.clone());
        let refresher = std::thread::Builder::new()
            .name("ringx-acme-lock".into())
            .spawn(move || refresh(&c, &k, &t, ttl, &stopped))
            .map_err(|e| tracing::warn!("ACME: no thread to keep the lock {key}: {e}"))
            .ok();
        RedisHeld {
            client,
            key,
            token,
            stop: Some(stop),
            refresher,
        }
    }
}

/// Keeps the lock alive every third of its time to live, while it is this host's.
fn refresh(c: &Client, key: &str, token: &str, ttl: Duration, stopped: &mpsc::Receiver<()>) {
    let ms = ttl.as_millis().to_string();
    while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(ttl / 3) {
        let r = c.call(
            &[
                b"EVAL",
                REFRESH.as_bytes(),
                b"1",
                key.as_bytes(),
                token.as_bytes(),
                ms.as_bytes(),
            ],
            c.timeout(),
        );
        match r {
            Ok(Value::Int(1)) => {}
            Ok(_) => {
                tracing::error!(
                    "ACME: the lock {key} expired while this host held it (Redis was \
                     unreachable for {ttl:?}); another host may be ordering the same names"
                );
                return;
            }
            Err(e) => tracing::warn!("ACME: cannot refresh the lock {key}: {e}"),
        }
    }
}

impl Drop for RedisHeld {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.refresher.take() {
            let _ = t.join();
        }
        let r = self.client.call(
            &[
                b"EVAL",
                RELEASE.as_bytes(),
                b"1",
                self.key.as_bytes(),
                self.token.as_bytes(),
            ],
            self.client.timeout(),
        );
        match r {
            Ok(Value::Int(1)) => {}
            Ok(_) => tracing::warn!(
                "ACME: the lock {} had expired before it was released (another host's now)",
                self.key
            ),
            Err(e) => tracing::warn!(
                "ACME: cannot release the lock {} ({e}); it expires by itself",
                self.key
            ),
        }
    }
}

#[cfg(test)]
#[path = "storage_redis_tests.rs"]
mod tests;
