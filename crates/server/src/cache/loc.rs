//! A location's `proxy_cache`, compiled, and the lookup that decides, for one request,
//! between a hit (fresh, or stale where allowed), a fetch that fills the entry, waiting for
//! another request's fill, and passing the request by.

use std::time::{Duration, Instant};

use ringx_config::cache::{ProxyCache, StatusSet, UseStale as Cond};
use ringx_config::keytmpl::Template;
use ringx_config::Config;
use ringx_http::{Method, Request, Version};

use super::fill::{Asked, Fill, Mode, UseStale};
use super::object::Age;
use super::{CacheZone, Found};
use crate::error::Error;
use crate::rewrite::Added;

/// The cache statuses, as `$upstream_cache_status` names them (the order of the per-zone
/// counters).
pub const STATUSES: [&str; 7] = [
    "HIT",
    "MISS",
    "EXPIRED",
    "STALE",
    "UPDATING",
    "REVALIDATED",
    "BYPASS",
];

/// Counts an answer of `status` in the zone's counters.
pub fn count(n: &crate::metrics::ZoneCounters, status: &str) {
    if let Some(i) = STATUSES.iter().position(|s| *s == status) {
        crate::metrics::bump(&n.cache[i], 1);
    }
}

/// A location's cache settings.
pub struct CacheLoc {
    pub zone: &'static CacheZone,
    key: Template,
    valid: Vec<(StatusSet, Duration)>,
    use_stale: UseStale,
    background_update: bool,
    lock: bool,
    lock_timeout: Duration,
    get: bool,
    head: bool,
    /// `X-Cache-Status: ` (the configured name), or empty for none.
    status_name: String,
    revalidate: bool,
}

/// What the cache does with a request.
pub enum Decision {
    /// Not for the cache (method, range, credentials): proxied as is, marked BYPASS.
    Bypass,
    /// Answer from `found`, with this status; `update`: then refresh the entry in the
    /// background on this connection.
    Hit {
        found: Found,
        status: &'static str,
        update: Option<Box<Fill>>,
    },
    /// Fetch from the upstream, filling the entry.
    Fetch(Box<Fill>),
    /// Another request is filling the entry: look again after this long.
    Wait(Duration),
    /// Waited `lock_timeout` for another's fill: go to the upstream, store nothing.
    Uncached,
}

/// What a lookup needs of the request beyond the request itself.
pub struct Ctx<'a> {
    pub client: Option<std::net::IpAddr>,
    pub tls: bool,
    pub uri: &'a str,
    pub keep: bool,
    pub now: Instant,
    /// The wall clock then (Unix ms).
    pub now_ms: u64,
    /// When this request started waiting for another's fill, and how many looks it had.
    pub waiting: Option<(Instant, u32)>,
}

impl CacheLoc {
    pub fn compile(pc: &ProxyCache, cfg: &Config) -> Result<CacheLoc, Error> {
        let p = cfg
            .proxy_cache_path
            .iter()
            .map(|p| p.get_ref())
            .find(|p| p.name.get_ref() == pc.zone.get_ref())
            .ok_or_else(|| Error::config(format!("no proxy_cache_path {:?}", pc.zone.get_ref())))?;
        let zone = CacheZone::get(
            p.name.get_ref(),
            p.path.get_ref(),
            p.max_size.get_ref().0,
            p.memory_size.get_ref().0,
            p.max_object.get_ref().0,
            p.inactive.0,
        )
        .map_err(|e| {
            Error::io(
                format!("proxy_cache_path {}", p.path.get_ref().display()),
                e,
            )
        })?;
        let mut use_stale = UseStale::default();
        for c in &pc.use_stale {
            match *c.get_ref() {
                Cond::Error => use_stale.error = true,
                Cond::Timeout => use_stale.timeout = true,
                Cond::Updating => use_stale.updating = true,
                Cond::Status(s) => use_stale.statuses.push(s),
            }
        }
        let methods = |m: &str| pc.methods.iter().any(|x| x.get_ref() == m);
        Ok(CacheLoc {
            zone,
            key: pc.key.get_ref().clone(),
            valid: pc
                .valid
                .iter()
                .map(|(s, d)| (s.get_ref().clone(), d.0))
                .collect(),
            use_stale,
            background_update: pc.background_update,
            lock: pc.lock,
            lock_timeout: pc.lock_timeout.0,
            get: methods("GET"),
            head: methods("HEAD"),
            status_name: pc.status_header.clone(),
            revalidate: pc.revalidate,
        })
    }

    /// The cache status line for `status` (`X-Cache-Status: HIT\r\n`), empty without one.
    pub fn status_line(&self, status: &str) -> Vec<u8> {
        if self.status_name.is_empty() {
            return Vec::new();
        }
        format!("{}: {status}\r\n", self.status_name).into_bytes()
    }

    /// Decides what the cache does with `req`.
    pub fn decide(&self, req: &Request, cx: &Ctx) -> Decision {
        let method_ok = match req.method {
            Method::Get => self.get,
            Method::Head => self.head,
            _ => false,
        };
        if !method_ok || req.header("range").is_some() || req.header("authorization").is_some() {
            return Decision::Bypass;
        }
        let mut key = Vec::with_capacity(128);
        let ki = crate::guard::key::KeyInput {
            req,
            client: cx.client,
            tls: cx.tls,
            uri: cx.uri,
        };
        crate::guard::key::eval(&self.key, &ki, &mut key);
        let h = crate::cache::key_hash(&key);
        let now_ms = cx.now_ms;
        let found = self.zone.lookup(&key, h, |n| field(req, n));
        let fill = |mode, stale, status: &'static str, locked| {
            Box::new(Fill {
                zone: self.zone,
                key: key.clone(),
                hash: h,
                locked,
                mode,
                stale,
                valid: self.valid.clone(),
                use_stale: self.use_stale.clone(),
                asked: asked(req, cx.keep),
                status_line: self.status_line(status),
                status,
                stale_for_status: false,
                status_name: self.status_name.clone(),
            })
        };
        let Some((_, found)) = found else {
            // A HEAD that misses is passed on: entries are filled by GETs.
            if req.method == Method::Head {
                return Decision::Bypass;
            }
            if !self.lock {
                return Decision::Fetch(fill(Mode::Fetch, None, "MISS", false));
            }
            if self.zone.try_lock(h, cx.now) {
                return Decision::Fetch(fill(Mode::Fetch, None, "MISS", true));
            }
            return self.wait(cx);
        };
        let obj = found.object().clone();
        let age = obj.age(now_ms);
        // A stale copy a fill may fall back to or revalidate: one whose body is in memory
        // (a large one on disk is fetched whole again).
        let stale = matches!(found, Found::Mem(_)).then(|| obj.clone());
        if age == Age::Fresh {
            return Decision::Hit {
                found,
                status: "HIT",
                update: None,
            };
        }
        // Stale: refresh it, or let another request do it.
        let may_serve_stale = age == Age::StaleRevalidate || self.use_stale.updating;
        let get = req.method == Method::Get;
        if !self.zone.try_lock(h, cx.now) {
            if may_serve_stale {
                return Decision::Hit {
                    found,
                    status: "UPDATING",
                    update: None,
                };
            }
            return self.wait(cx);
        }
        if may_serve_stale && (self.background_update || age == Age::StaleRevalidate) && get {
            return Decision::Hit {
                found,
                status: "STALE",
                update: Some(fill(Mode::Background, stale, "", true)),
            };
        }
        let validators = obj.etag.is_some() || obj.last_modified.is_some();
        let mode = if self.revalidate && validators && stale.is_some() {
            Mode::Revalidate
        } else {
            Mode::Fetch
        };
        if !get {
            // A HEAD of an expired entry: passed on, the lock left for a GET.
            self.zone.unlock(h);
            return Decision::Bypass;
        }
        Decision::Fetch(fill(mode, stale, "EXPIRED", true))
    }

    /// Another request fills the entry: wait for it, looking again after 1, 2, 4, 8, then
    /// every 16 ms, up to `lock_timeout`.
    fn wait(&self, cx: &Ctx) -> Decision {
        let (since, looks) = cx.waiting.unwrap_or((cx.now, 0));
        if cx.now.saturating_duration_since(since) >= self.lock_timeout {
            return Decision::Uncached;
        }
        Decision::Wait(Duration::from_millis(1 << looks.min(4)))
    }
}

/// Every value of request field `name`, joined as one list (what a variant is keyed by).
pub fn field(req: &Request, name: &str) -> Option<Vec<u8>> {
    super::object::joined(
        req.headers
            .iter()
            .filter(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| h.value),
    )
}

fn asked(req: &Request, keep: bool) -> Asked {
    Asked {
        head_only: req.method == Method::Head,
        version11: req.version == Version::Http11,
        keep,
        fields: req
            .headers
            .iter()
            .map(|h| (h.name.to_ascii_lowercase(), h.value.to_vec()))
            .collect(),
        if_none_match: req.header("if-none-match").map(<[u8]>::to_vec),
        status_as: None,
        added: Added::default(),
    }
}
