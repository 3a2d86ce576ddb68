//! The ACME thread. It owns the account and the schedule: at start (and after each reload)
//! every slot's certificate is loaded from storage and installed, and what is missing is
//! ordered; each certificate is renewed at two thirds of its lifetime, jittered, or earlier
//! where the CA's renewal information (ARI, RFC 9773) says so; failures are retried with
//! exponential backoff (longer when the CA says `rateLimited`). Orders run one at a time
//! on this one thread, so the same names are never ordered twice at once; across a fleet,
//! [`Storage::lock`] does the same.

use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use instant_acme::{Account, AccountCredentials, ExternalAccountKey, NewAccount};

use crate::block::block_on;
pub use crate::certs::KeyType;
use crate::certs::{self, Validity};
use crate::challenges_redis::Relay;
pub use crate::order::Challenge;
use crate::order::{self, Failure};
use crate::shared::{global, Slot};
use crate::storage::{account_key, cert_key, DirStorage, Storage};
use crate::storage_redis::RedisStorage;

/// `[acme]`, as the thread uses it.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub directory: String,
    pub ca: Option<PathBuf>,
    pub contact: Vec<String>,
    /// (key id, MAC key base64url).
    pub eab: Option<(String, String)>,
    pub key_type: KeyType,
    pub storage: PathBuf,
    /// `[cluster]`: the account and certificates in Redis, shared by the fleet, instead of
    /// `storage`.
    pub cluster: Option<ringx_cluster::Client>,
    /// `[cluster] host_id` and `confirm_timeout`: this host in the challenge answers it
    /// posts to the others, and how long it waits for them to confirm.
    pub host_id: String,
    pub confirm_timeout: Duration,
    pub challenge: Challenge,
    pub dns_hook: Option<PathBuf>,
    pub dns_wait: Duration,
    /// The first retry after a failure; each next one waits twice as long, up to `max_backoff`.
    pub min_backoff: Duration,
    pub max_backoff: Duration,
}

/// What the control thread asks for: the settings and the slots to keep certificates in.
struct Plan {
    settings: Option<Settings>,
    slots: Vec<Arc<Slot>>,
    changed: bool,
}

struct Handle {
    plan: Mutex<Plan>,
    cv: Condvar,
}

fn handle() -> &'static Handle {
    static H: OnceLock<Handle> = OnceLock::new();
    H.get_or_init(|| Handle {
        plan: Mutex::new(Plan {
            settings: None,
            slots: Vec::new(),
            changed: false,
        }),
        cv: Condvar::new(),
    })
}

/// Keeps certificates for `slots` (start-up, and every reload): starts the ACME thread the
/// first time. Returns at once; nothing here waits for the CA.
pub fn manage(settings: Settings, slots: Vec<Arc<Slot>>) {
    static STARTED: OnceLock<()> = OnceLock::new();
    let h = handle();
    global().set_managed(&slots);
    {
        let mut p = h.plan.lock().unwrap_or_else(|e| e.into_inner());
        p.settings = Some(settings);
        p.slots = slots;
        p.changed = true;
    }
    h.cv.notify_all();
    STARTED.get_or_init(|| {
        let r = std::thread::Builder::new()
            .name("ringx-acme".into())
            .spawn(run);
        if let Err(e) = r {
            tracing::error!("ACME: cannot start its thread: {e}");
        }
    });
}

/// One slot's schedule.
struct Job {
    slot: Arc<Slot>,
    due: Instant,
    failures: u32,
    validity: Option<Validity>,
    /// ARI is asked at `due` rather than ordering, while the certificate is before its 2/3.
    ari_poll: bool,
}

fn now_secs() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// The instant `t` (seconds since the epoch) falls at, from now.
fn at(t: i64) -> Instant {
    let now = now_secs();
    Instant::now() + Duration::from_secs(t.saturating_sub(now).max(0) as u64)
}

/// A small random number (xorshift seeded from the clock): jitter, not secrets.
/// How long to wait after the `failures`-th failure in a row: `min_backoff` doubled each
/// time up to `max_backoff`, times `jitter` (0.75 to 1.25); on `rateLimited` at least the
/// CA's Retry-After (a minute where it gave none), even past `max_backoff`.
fn backoff(
    (min, max): (Duration, Duration),
    failures: u32,
    rate_limited: Option<Option<Duration>>,
    jitter: f64,
) -> Duration {
    let shift = failures.saturating_sub(1).min(20);
    let base = min.saturating_mul(1 << shift).min(max);
    let wait = base.mul_f64(jitter);
    match rate_limited {
        Some(after) => wait.max(after.unwrap_or(RATE_LIMITED_FLOOR)),
        None => wait,
    }
}

/// The least wait after a `rateLimited` error that came without a Retry-After.
const RATE_LIMITED_FLOOR: Duration = Duration::from_secs(60);

fn random(below: u64) -> u64 {
    use std::cell::Cell;
    thread_local!(static S: Cell<u64> = const { Cell::new(0) });
    S.with(|s| {
        let mut x = s.get();
        if x == 0 {
            x = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
                ^ (u64::from(std::process::id()) << 32)
                | 1;
        }
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        s.set(x);
        if below == 0 {
            0
        } else {
            x % below
        }
    })
}

/// When to renew a certificate by its own lifetime: two thirds of the way, less up to a
/// twentieth of the lifetime at random (a fleet's renewals spread out).
fn renew_at(v: &Validity) -> i64 {
    let life = (v.not_after - v.not_before).max(1) as u64;
    v.two_thirds() - random(life / 20 + 1) as i64
}

struct Worker {
    settings: Option<Settings>,
    /// A directory (`[acme] storage`), or Redis with `[cluster]` (a store the fleet shares).
    storage: Box<dyn Storage>,
    account: Option<Account>,
    /// The stored account is unknown to the CA (its data was reset): register anew.
    stale_account: bool,
    jobs: Vec<Job>,
}

fn run() {
    let mut w = Worker {
        settings: None,
        storage: Box::new(DirStorage::new("/var/lib/ringx/acme")),
        account: None,
        stale_account: false,
        jobs: Vec::new(),
    };
    let h = handle();
    loop {
        let next = w.jobs.iter().map(|j| j.due).min();
        {
            let mut p = h.plan.lock().unwrap_or_else(|e| e.into_inner());
            while !p.changed {
                let wait = match next {
                    Some(t) => t.saturating_duration_since(Instant::now()),
                    None => Duration::from_secs(3600),
                };
                if wait.is_zero() {
                    break;
                }
                p =
                    h.cv.wait_timeout(p, wait)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                if next.is_some_and(|t| t <= Instant::now()) {
                    break;
                }
            }
            if p.changed {
                p.changed = false;
                let (s, slots) = (p.settings.clone(), p.slots.clone());
                drop(p);
                w.replan(s, slots);
                continue;
            }
        }
        let now = Instant::now();
        if let Some(i) = w.jobs.iter().position(|j| j.due <= now) {
            w.work(i);
        }
    }
}

impl Worker {
    /// New settings or slots: keep the schedule of slots kept, load the new ones.
    fn replan(&mut self, settings: Option<Settings>, slots: Vec<Arc<Slot>>) {
        if settings != self.settings {
            if let Some(s) = &settings {
                self.storage = match &s.cluster {
                    Some(c) => Box::new(RedisStorage::new(c.clone())),
                    None => Box::new(DirStorage::new(&s.storage)),
                };
            }
            let same_ca = settings.as_ref().map(|s| (&s.directory, &s.ca))
                == self.settings.as_ref().map(|s| (&s.directory, &s.ca));
            if !same_ca {
                self.account = None;
                self.jobs.clear();
            }
            self.settings = settings;
        }
        let mut jobs = Vec::with_capacity(slots.len());
        for slot in slots {
            match self.jobs.iter().position(|j| Arc::ptr_eq(&j.slot, &slot)) {
                Some(i) => jobs.push(self.jobs.swap_remove(i)),
                None => jobs.push(self.load(slot)),
            }
        }
        self.jobs = jobs;
    }

    fn dir(&self) -> &str {
        self.settings.as_ref().map_or("", |s| s.directory.as_str())
    }

    /// A slot's certificate from storage, installed if it is still valid, and its schedule.
    fn load(&mut self, slot: Arc<Slot>) -> Job {
        let mut job = Job {
            slot,
            due: Instant::now(),
            failures: 0,
            validity: None,
            ari_poll: false,
        };
        if let Some(v) = self.load_stored(&job.slot) {
            schedule(&mut job, v);
        } else {
            tracing::info!(
                names = job.slot.names.join(" "),
                "ACME: no certificate in storage yet; ordering one (meanwhile: {})",
                if job.slot.current().is_some() {
                    "a temporary self-signed certificate"
                } else {
                    "handshakes refused"
                }
            );
        }
        job
    }

    /// The stored certificate's validity, without installing it.
    fn peek_stored(&self, slot: &Slot) -> Option<Validity> {
        let first = slot.names.first()?;
        let chain = self
            .storage
            .load(&cert_key(self.dir(), first, "cert.pem"))
            .ok()??;
        let leaf = rustls_pki_types::pem::PemObject::pem_slice_iter(&chain)
            .next()?
            .ok()?;
        certs::validity(&leaf).ok()
    }

    /// The stored certificate, installed when it is valid now.
    fn load_stored(&self, slot: &Slot) -> Option<Validity> {
        let first = slot.names.first()?;
        let get = |f: &str| self.storage.load(&cert_key(self.dir(), first, f));
        let (chain, key) = match (get("cert.pem"), get("key.pem")) {
            (Ok(Some(c)), Ok(Some(k))) => (c, k),
            (Err(e), _) | (_, Err(e)) => {
                tracing::warn!("ACME: storage: {e}");
                return None;
            }
            _ => return None,
        };
        match certs::certified(&chain, &key) {
            Ok((ck, v)) if v.not_after > now_secs() && covers(&ck, &slot.names) => {
                slot.install(ck, v.not_after);
                tracing::info!(
                    names = slot.names.join(" "),
                    "ACME: certificate loaded from storage (issuer {}, expires in {} days)",
                    v.issuer,
                    (v.not_after - now_secs()) / 86400
                );
                Some(v)
            }
            Ok(_) => None,
            Err(e) => {
                tracing::warn!(
                    names = slot.names.join(" "),
                    "ACME: stored certificate: {e}"
                );
                None
            }
        }
    }
}

/// Renewal of a certificate just installed: at its 2/3 point, and ARI asked before then
/// where the CA has it.
fn schedule(job: &mut Job, v: Validity) {
    let renew = renew_at(&v);
    let now = now_secs();
    // ARI is asked halfway to the renewal point (at most a day on), so that a CA's
    // earlier window (a revocation) is seen in time.
    let poll = now + ((renew - now) / 2).clamp(0, 86400);
    job.ari_poll = v.ari.is_some() && poll < renew;
    job.due = at(if job.ari_poll { poll } else { renew });
    job.validity = Some(v);
    job.failures = 0;
}

impl Worker {
    fn work(&mut self, i: usize) {
        let Some(settings) = self.settings.clone() else {
            self.jobs[i].due = Instant::now() + Duration::from_secs(3600);
            return;
        };
        if self.jobs[i].ari_poll {
            return self.ask_ari(i);
        }
        let slot = self.jobs[i].slot.clone();
        let names = slot.names.join(" ");
        let result = self.order(&settings, i);
        let job = &mut self.jobs[i];
        match result {
            Ok((v, ordered)) => {
                if ordered {
                    global()
                        .counters
                        .orders_ok
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                schedule(job, v);
            }
            Err(f) => {
                global()
                    .counters
                    .orders_failed
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                job.failures += 1;
                if f.message.contains("accountDoesNotExist") {
                    self.account = None;
                    self.stale_account = true;
                }
                let wait = backoff(
                    (settings.min_backoff, settings.max_backoff),
                    job.failures,
                    f.rate_limited,
                    0.75 + random(500) as f64 / 1000.0,
                );
                job.due = Instant::now() + wait;
                let left = slot.not_after().map(|t| (t - now_secs()) / 86400);
                match left {
                    Some(d) => tracing::warn!(
                        names,
                        "ACME: renewal failed ({}); the current certificate expires in {d} days; \
                         retrying in {:.0?}",
                        f.message,
                        wait
                    ),
                    None => tracing::warn!(
                        names,
                        "ACME: order failed ({}); retrying in {:.0?}",
                        f.message,
                        wait
                    ),
                }
            }
        }
    }

    /// The CA's renewal window for a certificate: renew now if it has begun (a revocation),
    /// else at a random point in it when that is before our own time.
    fn ask_ari(&mut self, i: usize) {
        let Some(v) = self.jobs[i].validity.clone() else {
            self.jobs[i].ari_poll = false;
            return;
        };
        let renew = renew_at(&v);
        let answer = match (&v.ari, self.account()) {
            (Some(id), Ok(acc)) => block_on(acc.renewal_info(id)).map_err(|e| e.to_string()),
            (None, _) => Err("no ARI identifier".into()),
            (_, Err(f)) => Err(f.message),
        };
        let job = &mut self.jobs[i];
        let now = now_secs();
        match answer {
            Ok((info, retry)) => {
                let start = info.suggested_window.start.unix_timestamp();
                let end = info.suggested_window.end.unix_timestamp();
                // A window already over means "renew now" (RFC 9773 §4.2); otherwise a point in
                // it, but not in a certificate's first half (a short-lived certificate's window
                // can begin at issuance).
                let floor = v.not_before + (v.not_after - v.not_before) / 2;
                let pick = if end <= now {
                    now
                } else {
                    (start + random((end - start).max(1) as u64) as i64).max(floor)
                };
                let next_poll = now + retry.as_secs().clamp(60, 86400) as i64;
                if pick <= renew.min(next_poll) {
                    job.ari_poll = false;
                    job.due = at(pick);
                } else if next_poll < renew {
                    job.due = at(next_poll);
                } else {
                    job.ari_poll = false;
                    job.due = at(renew);
                }
            }
            Err(e) => {
                tracing::debug!("ACME: renewal information: {e}");
                job.ari_poll = false;
                job.due = at(renew);
            }
        }
    }

    /// The account: from storage, or registered (and stored) now.
    fn account(&mut self) -> Result<&Account, Failure> {
        if self.account.is_none() {
            let s = self
                .settings
                .clone()
                .ok_or("no [acme] settings".to_string())?;
            let http = || -> Result<Box<crate::http::Client>, Failure> {
                Ok(Box::new(crate::http::Client::new(s.ca.as_deref())?))
            };
            let key = account_key(&s.directory);
            let stored = self
                .storage
                .load(&key)
                .map_err(|e| format!("storage: {e}"))?
                .filter(|_| !std::mem::take(&mut self.stale_account));
            let acc =
                match stored.and_then(|b| serde_json::from_slice::<AccountCredentials>(&b).ok()) {
                    Some(creds) => {
                        block_on(Account::builder_with_http(http()?).from_credentials(creds))?
                    }
                    None => {
                        let contact: Vec<&str> = s.contact.iter().map(String::as_str).collect();
                        let eab = match &s.eab {
                            Some((kid, mac)) => {
                                use base64::Engine as _;
                                let mac = base64::engine::general_purpose::URL_SAFE_NO_PAD
                                    .decode(mac.trim_end_matches('='))
                                    .map_err(|e| format!("eab hmac_key: {e}"))?;
                                Some(ExternalAccountKey::new(kid.clone(), &mac))
                            }
                            None => None,
                        };
                        let new = NewAccount {
                            contact: &contact,
                            terms_of_service_agreed: true,
                            only_return_existing: false,
                        };
                        let (acc, creds) = block_on(Account::builder_with_http(http()?).create(
                            &new,
                            s.directory.clone(),
                            eab.as_ref(),
                        ))?;
                        let json = serde_json::to_vec(&creds).map_err(|e| e.to_string())?;
                        self.storage
                            .store(&key, &json, true)
                            .map_err(|e| format!("storage: {e}"))?;
                        tracing::info!("ACME: account registered at {}", s.directory);
                        acc
                    }
                };
            self.account = Some(acc);
        }
        Ok(self.account.as_ref().expect("set above"))
    }

    /// Orders job `i`'s certificate under the storage lock, stores and installs it.
    /// Returns the certificate's validity, and whether it was ordered (not taken from the
    /// storage, where another host put it).
    fn order(&mut self, s: &Settings, i: usize) -> Result<(Validity, bool), Failure> {
        let slot = self.jobs[i].slot.clone();
        let first = slot.names.first().cloned().ok_or("no names".to_string())?;
        let _held = self
            .storage
            .lock(&first.replace('*', "_wildcard_"))
            .map_err(|e| {
                format!(
                    "storage lock: {e}; the storage must be writable by the user ringx runs as \
                     ([runtime] user; under systemd, a path in ReadWritePaths=)"
                )
            })?;
        // Another host of the fleet may have renewed it while this one waited for the lock:
        // a stored certificate newer than the one this host serves is taken, not reordered.
        let had = self.jobs[i].validity.as_ref().map_or(0, |v| v.not_after);
        if let Some(v) = self.peek_stored(&slot) {
            if v.not_after > had && v.two_thirds() > now_secs() {
                let v = self.load_stored(&slot).ok_or("storage changed")?;
                return Ok((v, false));
            }
        }
        let replaces = self.jobs[i].validity.as_ref().and_then(|v| v.ari.clone());
        tracing::info!(names = slot.names.join(" "), "ACME: ordering a certificate");
        let account = self.account()?.clone();
        let relay = s.cluster.as_ref().map(|c| Relay {
            client: c.clone(),
            host_id: s.host_id.clone(),
            wait: s.confirm_timeout,
        });
        let cx = order::Ctx {
            account: &account,
            shared: global(),
            challenge: s.challenge,
            key_type: s.key_type,
            dns_hook: s.dns_hook.as_deref(),
            dns_wait: s.dns_wait,
            relay: relay.as_ref(),
        };
        let issued = match order::obtain(&cx, &slot.names, replaces.clone()) {
            // A CA that refuses the replacement (the old one was not its own) is asked afresh.
            Err(f)
                if replaces.is_some()
                    && f.rate_limited.is_none()
                    && f.message.contains("replace") =>
            {
                order::obtain(&cx, &slot.names, None)?
            }
            r => r?,
        };
        let (ck, v) = certs::certified(issued.chain_pem.as_bytes(), issued.key_pem.as_bytes())?;
        let st = |f: &str, data: &str, secret: bool| {
            self.storage
                .store(&cert_key(&s.directory, &first, f), data.as_bytes(), secret)
                .map_err(|e| format!("storage: {e}"))
        };
        st("key.pem", &issued.key_pem, true)?;
        st("cert.pem", &issued.chain_pem, false)?;
        slot.install(ck, v.not_after);
        tracing::info!(
            names = slot.names.join(" "),
            "ACME: certificate installed (issuer {}, expires in {:.1} days)",
            v.issuer,
            (v.not_after - now_secs()) as f64 / 86400.0
        );
        Ok((v, true))
    }
}

/// Whether the certificate names every one of `names` (a stored one from before the
/// configuration changed may not).
fn covers(ck: &rustls::sign::CertifiedKey, names: &[String]) -> bool {
    let Some(leaf) = ck.cert.first() else {
        return false;
    };
    let Ok((_, c)) = x509_parser::parse_x509_certificate(leaf.as_ref()) else {
        return false;
    };
    let san: Vec<String> = c
        .subject_alternative_name()
        .ok()
        .flatten()
        .map(|s| {
            s.value
                .general_names
                .iter()
                .filter_map(|g| match g {
                    x509_parser::extensions::GeneralName::DNSName(d) => {
                        Some(d.to_ascii_lowercase())
                    }
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default();
    names.iter().all(|n| san.contains(n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_the_cap_and_honours_retry_after() {
        let s = |n| Duration::from_secs(n);
        let b = |failures, limited, jitter| backoff((s(2), s(3600)), failures, limited, jitter);
        // Doubling from min_backoff, jittered, up to max_backoff.
        assert_eq!(b(1, None, 1.0), s(2));
        assert_eq!(b(2, None, 1.0), s(4));
        assert_eq!(b(5, None, 1.0), s(32));
        assert_eq!(b(5, None, 0.75), s(24));
        assert_eq!(b(40, None, 1.0), s(3600));
        assert_eq!(b(40, None, 1.25), s(4500));
        // rateLimited: at least the CA's Retry-After, past the cap too ...
        assert_eq!(b(1, Some(Some(s(600))), 0.75), s(600));
        assert_eq!(b(40, Some(Some(s(7200))), 1.0), s(7200));
        // ... but never less than the doubling would wait.
        assert_eq!(b(12, Some(Some(s(10))), 1.0), s(3600));
        // Without a Retry-After, a minute at least.
        assert_eq!(b(1, Some(None), 0.75), RATE_LIMITED_FLOOR);
        assert_eq!(b(1, Some(Some(s(0))), 1.0), s(2));
    }

    #[test]
    fn renewal_is_two_thirds_less_a_jitter() {
        let v = Validity {
            not_before: 0,
            not_after: 90 * 86400,
            ari: None,
            issuer: String::new(),
        };
        for _ in 0..100 {
            let t = renew_at(&v);
            assert!(
                (60 * 86400 - 90 * 86400 / 20 - 1..=60 * 86400).contains(&t),
                "{t}"
            );
        }
    }
}
