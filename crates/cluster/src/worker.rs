//! The cluster thread: it owns the one connection to the master and runs the queued
//! commands on it in order. Without a connection it answers each command at once with
//! [`Error::Down`] and reconnects with backoff (100 ms doubling to 5 s, jittered); while
//! idle it asks the master its `ROLE` every second, so a lost Redis or a failover (the
//! master now a replica, `-READONLY`) is noticed, logged and counted without a caller.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::ClientConfig;

use crate::conn::{Conn, Dial};
use crate::discover::{self, Role};
use crate::error::Error;
use crate::metrics::Counters;
use crate::resp::Value;
use crate::settings::Settings;

const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(5);
const HEALTH_EVERY: Duration = Duration::from_secs(1);
/// While Redis stays unreachable, a warning this often (each attempt is logged at debug).
const STILL_DOWN_EVERY: Duration = Duration::from_secs(60);

pub(crate) struct Job {
    pub args: Vec<Vec<u8>>,
    pub deadline: Instant,
    pub reply: SyncSender<Result<Value, Error>>,
}

pub(crate) enum Msg {
    Call(Job),
    Reconfigure(Box<Settings>, Option<Arc<ClientConfig>>),
}

struct Worker {
    settings: Settings,
    tls: Option<Arc<ClientConfig>>,
    conn: Option<Conn>,
    counters: Arc<Counters>,
    /// Why the last connection attempt failed, told to callers while down.
    why_down: String,
    backoff: Duration,
    next_try: Instant,
    /// The last exchange with the master, for the health check.
    last_io: Instant,
    /// Since when Redis is unreachable, and when that was last warned about.
    down_since: Option<Instant>,
    warned: Instant,
    ever_up: bool,
    /// `ROLE` refused on this connection (an ACL): `PING` instead.
    ping_only: bool,
}

pub(crate) fn spawn(
    settings: Settings,
    tls: Option<Arc<ClientConfig>>,
    rx: Receiver<Msg>,
    counters: Arc<Counters>,
) -> std::io::Result<()> {
    let now = Instant::now();
    let mut w = Worker {
        settings,
        tls,
        conn: None,
        counters,
        why_down: "not connected yet".into(),
        backoff: BACKOFF_MIN,
        next_try: now,
        last_io: now,
        down_since: Some(now),
        warned: now,
        ever_up: false,
        ping_only: false,
    };
    std::thread::Builder::new()
        .name("ringx-cluster".into())
        .spawn(move || w.run(rx))
        .map(|_| ())
}

impl Worker {
    fn run(&mut self, rx: Receiver<Msg>) {
        loop {
            let now = Instant::now();
            if self.conn.is_none() && now >= self.next_try {
                self.connect();
            }
            let now = Instant::now();
            let wake = match self.conn {
                Some(_) => self.last_io + HEALTH_EVERY,
                None => self.next_try,
            };
            match rx.recv_timeout(wake.saturating_duration_since(now)) {
                Ok(Msg::Call(job)) => self.call(job),
                Ok(Msg::Reconfigure(s, tls)) => {
                    tracing::info!("cluster: new settings; reconnecting to Redis");
                    self.settings = *s;
                    self.tls = tls;
                    self.conn = None;
                    self.next_try = Instant::now();
                    self.backoff = BACKOFF_MIN;
                    self.counters.up.store(false, Relaxed);
                }
                Err(RecvTimeoutError::Timeout) => self.health(),
                Err(RecvTimeoutError::Disconnected) => return,
            }
        }
    }

    fn dial(&self) -> Dial {
        self.settings.dial(self.tls.clone())
    }

    fn connect(&mut self) {
        match discover::connect(&self.settings.target, &self.dial()) {
            Ok(c) => {
                let c_addr = c.addr.clone();
                self.counters.connects.fetch_add(1, Relaxed);
                let mut master = self
                    .counters
                    .master
                    .lock()
                    .unwrap_or_else(|e| e.into_inner());
                if !master.is_empty() && *master != c_addr {
                    self.counters.failovers.fetch_add(1, Relaxed);
                    tracing::warn!("cluster: the Redis master is now {c_addr} (was {master})");
                }
                *master = c_addr.clone();
                drop(master);
                match self.down_since.take() {
                    Some(t) if self.ever_up => {
                        self.counters.reconnects.fetch_add(1, Relaxed);
                        tracing::info!(
                            "cluster: Redis reachable again at {c_addr} after {:.1?}; reconnected",
                            t.elapsed()
                        );
                    }
                    _ => tracing::info!("cluster: connected to the Redis master at {c_addr}"),
                }
                self.ever_up = true;
                self.ping_only = false;
                self.conn = Some(c);
                self.last_io = Instant::now();
                self.backoff = BACKOFF_MIN;
                self.counters.up.store(true, Relaxed);
            }
            Err(e) => {
                self.counters.connect_failures.fetch_add(1, Relaxed);
                self.why_down = e.to_string();
                let now = Instant::now();
                let since = *self.down_since.get_or_insert(now);
                if self.counters.connect_failures.load(Relaxed) == 1
                    || now.duration_since(self.warned) >= STILL_DOWN_EVERY
                {
                    self.warned = now;
                    tracing::warn!(
                        "cluster: cannot reach the Redis master for {:.0?} ({e}); retrying, \
                         meanwhile this host serves on its own",
                        since.elapsed()
                    );
                } else {
                    tracing::debug!("cluster: Redis connect failed: {e}");
                }
                self.next_try = now + jitter(self.backoff);
                self.backoff = (self.backoff * 2).min(BACKOFF_MAX);
            }
        }
    }

    /// The connection failed or the master stepped down: drop it, reconnect at once.
    fn lost(&mut self, why: &str) {
        let addr = self.conn.take().map(|c| c.addr).unwrap_or_default();
        self.counters.up.store(false, Relaxed);
        self.down_since = Some(Instant::now());
        self.warned = Instant::now();
        self.why_down = why.to_string();
        self.next_try = Instant::now();
        tracing::warn!(
            "cluster: lost the Redis master {addr} ({why}); reconnecting, meanwhile this host \
             serves on its own"
        );
    }

    fn call(&mut self, job: Job) {
        if Instant::now() >= job.deadline {
            // Its caller has given up: a stale command is not sent.
            return;
        }
        if self.conn.is_none() && Instant::now() >= self.next_try {
            self.connect();
        }
        let Some(conn) = self.conn.as_mut() else {
            let _ = job.reply.try_send(Err(Error::Down(self.why_down.clone())));
            return;
        };
        let args: Vec<&[u8]> = job.args.iter().map(Vec::as_slice).collect();
        let r = conn.call(&args);
        self.last_io = Instant::now();
        let r = match r {
            Ok(Value::Error(e)) => {
                if e.starts_with("READONLY") || e.starts_with("MASTERDOWN") {
                    self.lost(&e);
                }
                Err(Error::Reply(e))
            }
            Ok(v) => Ok(v),
            Err(e) => {
                self.lost(&e.to_string());
                Err(e)
            }
        };
        let _ = job.reply.try_send(r);
    }

    /// An idle connection's check: still there, still the master.
    fn health(&mut self) {
        let Some(conn) = self.conn.as_mut() else {
            return;
        };
        self.last_io = Instant::now();
        if self.ping_only {
            if let Err(e) = conn.call(&[b"PING"]) {
                self.lost(&e.to_string());
            }
            return;
        }
        match discover::role(conn) {
            Ok(Role::Master) => {}
            Ok(Role::Unknown) => self.ping_only = true,
            Ok(Role::Other(r)) => self.lost(&format!("it is now a {r}: a failover")),
            Err(e) => self.lost(&e.to_string()),
        }
    }
}

/// `d` give or take a quarter, so that a fleet's hosts do not reconnect in step.
fn jitter(d: Duration) -> Duration {
    let n = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |t| t.subsec_nanos());
    d.mul_f64(0.75 + f64::from(n % 500) / 1000.0)
}
