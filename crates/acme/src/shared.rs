//! What the ACME thread hands to the zones: for each set of names its certificate
//! ([`Slot`]), and the answers to the challenges under way. Zones only load (one atomic
//! load of an `Arc`, no lock: `arc_swap`); the writers are the ACME thread and, with
//! `[cluster]`, the subscriber's thread (the answers of another host's order,
//! `crate::challenges_redis`), each building a new map and swapping it in (`rcu`, so that
//! neither loses the other's change). Another host's answers lapse by themselves. A
//! [`Slot`] is created when a configuration is compiled and kept across reloads by its
//! names, so a reload neither loses a certificate nor orders one.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use arc_swap::{ArcSwap, ArcSwapOption};
use rustls::sign::CertifiedKey;

/// The process's ACME state.
pub fn global() -> &'static Shared {
    static G: OnceLock<Shared> = OnceLock::new();
    G.get_or_init(Shared::default)
}

/// One certificate's names and what is served for them.
#[derive(Debug)]
pub struct Slot {
    /// The names, lowercase, in the configuration's order (the first names the storage entry).
    pub names: Vec<String>,
    cert: ArcSwapOption<CertifiedKey>,
    /// Served until the first certificate arrives; None: such handshakes are refused.
    pending: ArcSwapOption<CertifiedKey>,
    /// When the served certificate expires (seconds since the epoch; 0: none yet).
    not_after: AtomicI64,
}

impl Slot {
    /// The certificate a handshake gets: the obtained one, else the temporary one (or none).
    #[inline]
    pub fn current(&self) -> Option<Arc<CertifiedKey>> {
        self.cert.load_full().or_else(|| self.pending.load_full())
    }

    /// Whether a certificate from the CA is installed.
    pub fn has_cert(&self) -> bool {
        self.cert.load().is_some()
    }

    /// Installs a certificate from the CA; new handshakes get it at once.
    pub fn install(&self, key: Arc<CertifiedKey>, not_after: i64) {
        self.cert.store(Some(key));
        self.not_after.store(not_after, Ordering::Relaxed);
    }

    /// When the installed certificate expires (None: none installed).
    pub fn not_after(&self) -> Option<i64> {
        Some(self.not_after.load(Ordering::Relaxed)).filter(|&t| t != 0)
    }

    /// Sets what is served until the first certificate (None: refuse).
    pub fn set_pending(&self, key: Option<Arc<CertifiedKey>>) {
        self.pending.store(key);
    }
}

/// Counters for `/metrics`.
#[derive(Debug, Default)]
pub struct Counters {
    pub orders_ok: AtomicU64,
    pub orders_failed: AtomicU64,
    pub http01_answered: AtomicU64,
    pub http01_unknown: AtomicU64,
    /// Answers this host posted through Redis (`crate::challenges_redis`): every host alive
    /// confirmed, some did not in time, or Redis failed (this host alone answers).
    pub shared_posted: AtomicU64,
    pub shared_unconfirmed: AtomicU64,
    pub shared_failed: AtomicU64,
    /// Answers another host posted, put in here; messages for which none could be.
    pub shared_received: AtomicU64,
    pub shared_refused: AtomicU64,
}

/// An answer and, for one another host posted, when it lapses (None: this host's own, taken
/// down by its order).
type Timed<T> = (T, Option<Instant>);

fn live<T: Clone>(e: Option<&Timed<T>>) -> Option<T> {
    e.filter(|(_, until)| until.is_none_or(|t| Instant::now() < t))
        .map(|(v, _)| v.clone())
}

/// Every slot and the challenges under way.
#[derive(Default)]
pub struct Shared {
    slots: Mutex<Vec<Arc<Slot>>>,
    /// The slots of the configuration in force (`/metrics` shows these).
    managed: Mutex<Vec<Arc<Slot>>>,
    /// http-01: token → key authorization.
    http01: ArcSwap<HashMap<String, Timed<Arc<str>>>>,
    /// tls-alpn-01: name → the challenge certificate.
    alpn: ArcSwap<HashMap<String, Timed<Arc<CertifiedKey>>>>,
    pub counters: Counters,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("acme::Shared")
    }
}

impl Shared {
    /// The slot for these names (the same one for the same names, in any order), created
    /// with `pending` as its temporary certificate if it is new.
    pub fn slot(
        &self,
        names: &[String],
        pending: impl FnOnce() -> Option<Arc<CertifiedKey>>,
    ) -> Arc<Slot> {
        let mut key: Vec<String> = names.to_vec();
        key.sort();
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(s) = slots.iter().find(|s| {
            let mut k = s.names.clone();
            k.sort();
            k == key
        }) {
            return s.clone();
        }
        let s = Arc::new(Slot {
            names: names.to_vec(),
            cert: ArcSwapOption::empty(),
            pending: ArcSwapOption::new(pending()),
            not_after: AtomicI64::new(0),
        });
        slots.push(s.clone());
        s
    }

    /// The slots the ACME thread keeps certificates in now (a reload that drops a server
    /// drops its line from `/metrics`).
    pub fn set_managed(&self, slots: &[Arc<Slot>]) {
        *self.managed.lock().unwrap_or_else(|e| e.into_inner()) = slots.to_vec();
    }

    /// The certificates obtained for the configuration in force, for the served
    /// certificates' expiry on `/metrics` (beside the files'): the names (joined by commas),
    /// the leaf's subject (its names where the subject is empty, as a CA may leave it) and
    /// when it expires.
    pub fn served(&self) -> Vec<(String, String, i64)> {
        let slots = self
            .managed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        slots
            .iter()
            .filter_map(|s| {
                let not_after = s.not_after()?;
                let names = s.names.join(",");
                let subject = s
                    .cert
                    .load()
                    .as_ref()
                    .and_then(|ck| {
                        let (_, c) = x509_parser::parse_x509_certificate(ck.cert.first()?).ok()?;
                        Some(c.subject().to_string())
                    })
                    .filter(|s| !s.is_empty())
                    .unwrap_or_else(|| format!("DNS:{}", s.names.join(",DNS:")));
                Some((names, subject, not_after))
            })
            .collect()
    }

    /// The key authorization for an http-01 token ringx issued (None: not one of ours).
    #[inline]
    pub fn http01(&self, token: &str) -> Option<Arc<str>> {
        let found = live(self.http01.load().get(token));
        let c = match found {
            Some(_) => &self.counters.http01_answered,
            None => &self.counters.http01_unknown,
        };
        c.fetch_add(1, Ordering::Relaxed);
        found
    }

    /// Whether any http-01 answer is waiting (tests and logs).
    pub fn http01_pending(&self) -> usize {
        self.http01.load().len()
    }

    /// Posts (or, with None, takes down) the answer to an http-01 token: the ACME thread's
    /// while an order is under way.
    pub fn set_http01(&self, token: &str, answer: Option<&str>) {
        edit(
            &self.http01,
            token,
            answer.map(|a| (Arc::from(a), None)),
            false,
        );
    }

    /// Posts another host's answer to an http-01 token, until `until` at most.
    pub fn set_http01_from_peer(&self, token: &str, answer: &str, until: Instant) {
        edit(
            &self.http01,
            token,
            Some((Arc::from(answer), Some(until))),
            false,
        );
    }

    /// Takes down another host's answer to `token` (never this host's own): whether there
    /// was one.
    pub fn take_down_peer_http01(&self, token: &str) -> bool {
        edit(&self.http01, token, None, true)
    }

    /// The tls-alpn-01 certificate for a name being validated.
    #[inline]
    pub fn alpn_cert(&self, name: &str) -> Option<Arc<CertifiedKey>> {
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        live(self.alpn.load().get(&name))
    }

    /// Posts (or takes down) tls-alpn-01's certificate for `name`.
    pub fn set_alpn(&self, name: &str, cert: Option<Arc<CertifiedKey>>) {
        edit(&self.alpn, name, cert.map(|c| (c, None)), false);
    }

    /// Posts the tls-alpn-01 certificate made for another host's order, until `until`.
    pub fn set_alpn_from_peer(&self, name: &str, cert: Arc<CertifiedKey>, until: Instant) {
        edit(&self.alpn, name, Some((cert, Some(until))), false);
    }

    /// Takes down the certificate posted for another host's order (never this host's own,
    /// which an order of its own for the same name may have posted since): whether there
    /// was one.
    pub fn take_down_peer_alpn(&self, name: &str) -> bool {
        edit(&self.alpn, name, None, true)
    }
}

/// Puts `v` at `k` in the map (None: removes it; with `peers_only`, only an entry another
/// host posted), and drops the entries that lapsed; whether an entry was removed. Only the
/// ACME and subscriber threads write, seldom: a copy of the map swapped in.
fn edit<T: Clone>(
    map: &ArcSwap<HashMap<String, Timed<T>>>,
    k: &str,
    v: Option<Timed<T>>,
    peers_only: bool,
) -> bool {
    let mut removed = false;
    map.rcu(|cur| {
        let now = Instant::now();
        let mut m: HashMap<String, Timed<T>> = cur
            .iter()
            .filter(|(_, (_, until))| until.is_none_or(|t| now < t))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        removed = false;
        match &v {
            Some(v) => {
                m.insert(k.to_string(), v.clone());
            }
            None if peers_only && m.get(k).is_some_and(|(_, until)| until.is_none()) => {}
            None => removed = m.remove(k).is_some(),
        }
        m
    });
    removed
}

impl Shared {
    /// The ACME part of `/metrics` (Prometheus text): days to expiry per certificate,
    /// orders, http-01 requests.
    pub fn render_metrics(&self, now: i64) -> String {
        let mut o = String::new();
        let slots = self
            .managed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if slots.is_empty() {
            return o;
        }
        o.push_str(
            "# HELP ringx_acme_certificate_expiry_days Days until the ACME certificate served \
             for these names expires (negative: expired; absent: none obtained yet).\n\
             # TYPE ringx_acme_certificate_expiry_days gauge\n",
        );
        for s in &slots {
            if let Some(t) = s.not_after() {
                let _ = writeln!(
                    o,
                    "ringx_acme_certificate_expiry_days{{names=\"{}\"}} {:.3}",
                    s.names.join(","),
                    (t - now) as f64 / 86400.0
                );
            }
        }
        o.push_str(
            "# HELP ringx_acme_certificate_pending Names served a temporary certificate (or \
             refused) until their first certificate arrives.\n\
             # TYPE ringx_acme_certificate_pending gauge\n",
        );
        for s in &slots {
            let _ = writeln!(
                o,
                "ringx_acme_certificate_pending{{names=\"{}\"}} {}",
                s.names.join(","),
                u8::from(!s.has_cert())
            );
        }
        let c = &self.counters;
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let _ = write!(
            o,
            "# HELP ringx_acme_orders_total ACME orders by result.\n\
             # TYPE ringx_acme_orders_total counter\n\
             ringx_acme_orders_total{{result=\"ok\"}} {}\n\
             ringx_acme_orders_total{{result=\"error\"}} {}\n\
             # HELP ringx_acme_http01_requests_total Requests to /.well-known/acme-challenge/: \
             for a token ringx issued, or not (404).\n\
             # TYPE ringx_acme_http01_requests_total counter\n\
             ringx_acme_http01_requests_total{{token=\"known\"}} {}\n\
             ringx_acme_http01_requests_total{{token=\"unknown\"}} {}\n",
            r(&c.orders_ok),
            r(&c.orders_failed),
            r(&c.http01_answered),
            r(&c.http01_unknown),
        );
        let _ = write!(
            o,
            "# HELP ringx_acme_cluster_challenges_total Challenge answers shared through Redis \
             ([cluster]): posted by this host (every host alive confirmed; unconfirmed: not \
             all in time; failed: Redis failed, this host alone answered), received from \
             another host's order, refused (nothing usable in Redis).\n\
             # TYPE ringx_acme_cluster_challenges_total counter\n\
             ringx_acme_cluster_challenges_total{{result=\"posted\"}} {}\n\
             ringx_acme_cluster_challenges_total{{result=\"unconfirmed\"}} {}\n\
             ringx_acme_cluster_challenges_total{{result=\"failed\"}} {}\n\
             ringx_acme_cluster_challenges_total{{result=\"received\"}} {}\n\
             ringx_acme_cluster_challenges_total{{result=\"refused\"}} {}\n",
            r(&c.shared_posted),
            r(&c.shared_unconfirmed),
            r(&c.shared_failed),
            r(&c.shared_received),
            r(&c.shared_refused),
        );
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_by_names_answers_and_metrics() {
        let sh = Shared::default();
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let pending = crate::certs::self_signed(&names(&["a.test"])).unwrap();
        let a = sh.slot(&names(&["a.test", "b.test"]), || Some(pending.clone()));
        // The same names in another order are the same slot; its temporary certificate stays.
        let again = sh.slot(&names(&["b.test", "a.test"]), || None);
        assert!(Arc::ptr_eq(&a, &again));
        assert!(a.current().is_some() && !a.has_cert());
        assert_eq!(sh.render_metrics(0), "", "nothing managed yet");
        sh.set_managed(std::slice::from_ref(&a));
        let m = sh.render_metrics(0);
        assert!(
            m.contains("ringx_acme_certificate_pending{names=\"a.test,b.test\"} 1"),
            "{m}"
        );
        assert!(!m.contains("expiry_days{"), "{m}");
        assert!(sh.served().is_empty(), "nothing obtained yet");
        a.install(pending.clone(), 86400 * 3);
        // What the served certificates' expiry on /metrics shows for it.
        let served = sh.served();
        assert_eq!(served.len(), 1, "{served:?}");
        assert_eq!(served[0].0, "a.test,b.test");
        assert!(served[0].1.contains("ringx temporary"), "{served:?}");
        assert_eq!(served[0].2, 86400 * 3);
        let m = sh.render_metrics(86400);
        assert!(
            m.contains("ringx_acme_certificate_expiry_days{names=\"a.test,b.test\"} 2.000"),
            "{m}"
        );
        assert!(
            m.contains("ringx_acme_certificate_pending{names=\"a.test,b.test\"} 0"),
            "{m}"
        );
        // http-01 answers: only the tokens posted, and counted.
        sh.set_http01("t1", Some("t1.k"));
        assert_eq!(sh.http01("t1").as_deref(), Some("t1.k"));
        assert_eq!(sh.http01("t2"), None);
        sh.set_http01("t1", None);
        assert_eq!(sh.http01("t1"), None);
        let m = sh.render_metrics(0);
        assert!(
            m.contains("{token=\"known\"} 1") && m.contains("{token=\"unknown\"} 2"),
            "{m}"
        );
        // tls-alpn-01: by name, any case, trailing dot ignored.
        sh.set_alpn("a.test", Some(pending.clone()));
        assert!(sh.alpn_cert("A.test.").is_some());
        sh.set_alpn("a.test", None);
        assert!(sh.alpn_cert("a.test").is_none());
    }

    #[test]
    fn answers_from_peers_lapse_and_never_take_down_this_hosts_own() {
        use std::time::Duration;
        let sh = Shared::default();
        let later = Instant::now() + Duration::from_secs(60);
        sh.set_http01_from_peer("p1", "p1.k", later);
        assert_eq!(sh.http01("p1").as_deref(), Some("p1.k"));
        assert!(sh.take_down_peer_http01("p1"));
        assert_eq!(sh.http01("p1"), None);
        assert!(!sh.take_down_peer_http01("p1"), "nothing left to take down");
        // This host's own answer stays when a peer's order for it ends.
        sh.set_http01("own", Some("own.k"));
        assert!(!sh.take_down_peer_http01("own"));
        assert_eq!(sh.http01("own").as_deref(), Some("own.k"));
        // A peer's answer past its time is not served, and is dropped at the next change.
        sh.set_http01_from_peer("old", "old.k", Instant::now());
        assert_eq!(sh.http01("old"), None);
        sh.set_http01_from_peer("p2", "p2.k", later);
        assert!(!sh.http01.load().contains_key("old"));
        let cert = crate::certs::self_signed(&["a.test".to_string()]).unwrap();
        sh.set_alpn("a.test", Some(cert.clone()));
        assert!(!sh.take_down_peer_alpn("a.test"));
        assert!(sh.alpn_cert("a.test").is_some());
        sh.set_alpn_from_peer("b.test", cert.clone(), later);
        assert!(sh.alpn_cert("b.test").is_some());
        assert!(sh.take_down_peer_alpn("b.test"));
        assert!(sh.alpn_cert("b.test").is_none());
        sh.set_alpn_from_peer("c.test", cert, Instant::now());
        assert!(sh.alpn_cert("c.test").is_none());
    }
}
