//! The handle callers hold: commands go to the cluster thread through a bounded queue, and
//! the reply comes back on a channel of its own. A caller never waits past its budget
//! ([`Client::call`]), and one that must not wait at all takes a [`Pending`] and looks at
//! it later ([`Client::submit`], [`Pending::try_get`]).

use std::collections::VecDeque;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustls::ClientConfig;

use crate::conn::Dial;
use crate::error::Error;
use crate::metrics::Counters;
use crate::resp::Value;
use crate::settings::Settings;
use crate::worker::{self, Job, Msg};

/// Commands queued for the thread at most; past it callers get [`Error::Busy`] at once.
const QUEUE: usize = 1024;
/// The ids of the messages this process published that are remembered (8 broadcasts wait
/// at once at most, each 60 s at most: far fewer are ever needed).
const SENT_KEPT: usize = 1024;

/// The cluster client; clones share the thread, which stops when the last one goes.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    tx: SyncSender<Msg>,
    counters: Arc<Counters>,
    settings: Mutex<Settings>,
    /// The TLS of `settings`, made once (its files may not be readable later).
    tls: Mutex<Option<Arc<ClientConfig>>>,
    /// The ids of the last messages published through this client, newest last
    /// ([`crate::broadcast`]): its subscriber knows its own messages by them.
    sent: Mutex<VecDeque<String>>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "cluster::Client({:?})", self.settings().target)
    }
}

/// Two handles are equal when they share the thread.
impl PartialEq for Client {
    fn eq(&self, other: &Client) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

impl Client {
    /// Starts the cluster thread; it connects in the background (nothing here waits for
    /// Redis). Fails only when the TLS files cannot be used, saying which.
    pub fn start(settings: Settings) -> Result<Client, String> {
        let tls = match &settings.tls {
            Some(t) => Some(t.client_config()?),
            None => None,
        };
        let (tx, rx) = mpsc::sync_channel(QUEUE);
        let counters = Arc::new(Counters::default());
        worker::spawn(settings.clone(), tls.clone(), rx, counters.clone())
            .map_err(|e| format!("cannot start the cluster thread: {e}"))?;
        Ok(Client {
            inner: Arc::new(Inner {
                tx,
                counters,
                settings: Mutex::new(settings),
                tls: Mutex::new(tls),
                sent: Mutex::new(VecDeque::new()),
            }),
        })
    }

    /// New settings (a reload): the thread reconnects with them. Fails, changing nothing,
    /// when the TLS files cannot be used.
    pub fn reconfigure(&self, settings: Settings) -> Result<(), String> {
        if settings == self.settings() {
            return Ok(());
        }
        let tls = match &settings.tls {
            Some(t) => Some(t.client_config()?),
            None => None,
        };
        // Both under the settings' lock, so that `dial` never pairs one with the other's old.
        let mut cur = self
            .inner
            .settings
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        *self.inner.tls.lock().unwrap_or_else(|e| e.into_inner()) = tls.clone();
        *cur = settings.clone();
        drop(cur);
        // Blocking send: a reload waits for room, never a request.
        self.inner
            .tx
            .send(Msg::Reconfigure(Box::new(settings), tls))
            .map_err(|_| "the cluster thread has stopped".to_string())
    }

    pub fn settings(&self) -> Settings {
        self.inner
            .settings
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The settings and how to reach a server with them: for a connection of its own (the
    /// subscriber's).
    pub fn dial(&self) -> (Settings, Dial) {
        let s = self
            .inner
            .settings
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let tls = self
            .inner
            .tls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        (s.clone(), s.dial(tls))
    }

    /// `[cluster] prefix` followed by `key`.
    pub fn key(&self, key: &str) -> String {
        format!("{}{key}", self.settings().prefix)
    }

    /// The configured budget of one command.
    pub fn timeout(&self) -> Duration {
        self.settings().timeout
    }

    pub fn counters(&self) -> &Counters {
        &self.inner.counters
    }

    /// Queues `args` (the command's name first) and returns at once; the reply is the
    /// [`Pending`]'s, which gives up at `budget` from now.
    pub fn submit(&self, args: &[&[u8]], budget: Duration) -> Result<Pending, Error> {
        let c = &self.inner.counters;
        c.commands
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let deadline = Instant::now() + budget;
        let (reply, rx) = mpsc::sync_channel(1);
        let job = Job {
            args: args.iter().map(|a| a.to_vec()).collect(),
            deadline,
            reply,
        };
        match self.inner.tx.try_send(Msg::Call(job)) {
            Ok(()) => Ok(Pending {
                rx,
                deadline,
                budget,
                counters: c.clone(),
            }),
            Err(TrySendError::Full(_)) => {
                c.error(&Error::Busy);
                Err(Error::Busy)
            }
            Err(TrySendError::Disconnected(_)) => {
                let e = Error::Down("the cluster thread has stopped".into());
                c.error(&e);
                Err(e)
            }
        }
    }

    /// Remembers that this process publishes the message `id` (before it is published: its
    /// own subscriber may receive it before PUBLISH answers).
    pub fn remember_sent(&self, id: &str) {
        let mut sent = self.inner.sent.lock().unwrap_or_else(|e| e.into_inner());
        if sent.len() >= SENT_KEPT {
            sent.pop_front();
        }
        sent.push_back(id.to_string());
    }

    /// Whether this process published the message `id` (the host asked, which applied it
    /// already), as opposed to another process, whatever host id that one has.
    pub fn sent_here(&self, id: &str) -> bool {
        let sent = self.inner.sent.lock().unwrap_or_else(|e| e.into_inner());
        sent.iter().rev().any(|s| s == id)
    }

    /// Runs `args` and waits for the reply, `budget` at most.
    pub fn call(&self, args: &[&[u8]], budget: Duration) -> Result<Value, Error> {
        self.submit(args, budget)?.wait()
    }
}

/// A command queued; its reply, when it comes.
pub struct Pending {
    rx: Receiver<Result<Value, Error>>,
    deadline: Instant,
    budget: Duration,
    counters: Arc<Counters>,
}

impl Pending {
    /// The reply if it is there, without waiting: `None` until it comes or the budget ends.
    pub fn try_get(&self) -> Option<Result<Value, Error>> {
        match self.rx.try_recv() {
            Ok(r) => Some(self.count(r)),
            Err(_) if Instant::now() >= self.deadline => {
                Some(self.count(Err(Error::Timeout(self.budget))))
            }
            Err(_) => None,
        }
    }

    /// Waits for the reply until the budget ends.
    pub fn wait(self) -> Result<Value, Error> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        let r = match self.rx.recv_timeout(left) {
            Ok(r) => r,
            Err(RecvTimeoutError::Timeout) => Err(Error::Timeout(self.budget)),
            Err(RecvTimeoutError::Disconnected) => {
                Err(Error::Down("the cluster thread has stopped".into()))
            }
        };
        self.count(r)
    }

    fn count(&self, r: Result<Value, Error>) -> Result<Value, Error> {
        if let Err(e) = &r {
            self.counters.error(e);
        }
        r
    }
}
