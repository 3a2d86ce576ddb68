//! The proxy cache: `[[proxy_cache_path]]` (a cache's storage: its memory and disk tiers and
//! their bounds) and a location's `proxy_cache` (what is cached there, under which key, for
//! how long, and when stale copies may be served), in nginx's names.
//!
//! ```toml
//! [[proxy_cache_path]]
//! name = "pages"
//! path = "/var/cache/ringx/pages"   # the disk tier; kept across restarts
//! max_size = "1g"                   # disk bound, least recently used out first
//! memory_size = "64m"               # memory bound, least recently used out first
//! max_object = "8m"                 # larger responses are passed on, not stored
//! inactive = "10m"                  # entries not asked for this long are removed
//!
//! [[server.location]]
//! path = "/"
//! proxy_pass = "app"
//!   [server.location.proxy_cache]
//!   zone = "pages"
//!   key = "$scheme$host$request_uri"
//!   valid = { "200 301" = "10m", "404" = "1m" }
//!   use_stale = ["error", "timeout", "updating", "http_502", "http_503"]
//!   background_update = true
//!   lock = true
//!   lock_timeout = "5s"
//! ```

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::de::{self, Deserializer};
use serde::Deserialize;
use toml::Spanned;

use crate::keytmpl::Template;
use crate::units::{Dur, Size};

/// `[[proxy_cache_path]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CachePath {
    pub name: Spanned<String>,
    pub path: Spanned<PathBuf>,
    #[serde(default = "default_max_size")]
    pub max_size: Spanned<Size>,
    #[serde(default = "default_memory_size")]
    pub memory_size: Spanned<Size>,
    #[serde(default = "default_max_object")]
    pub max_object: Spanned<Size>,
    #[serde(default = "default_inactive")]
    pub inactive: Dur,
}

fn default_max_size() -> Spanned<Size> {
    Spanned::new(0..0, Size(1 << 30))
}
fn default_memory_size() -> Spanned<Size> {
    Spanned::new(0..0, Size(64 << 20))
}
fn default_max_object() -> Spanned<Size> {
    Spanned::new(0..0, Size(8 << 20))
}
fn default_inactive() -> Dur {
    Dur(Duration::from_secs(600))
}

/// A location's `proxy_cache`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProxyCache {
    pub zone: Spanned<String>,
    #[serde(default = "default_key")]
    pub key: Spanned<Template>,
    /// Freshness by status for responses that give none themselves (`"200 302" = "10m"`,
    /// `"any" = "1m"`); without an entry (and without Cache-Control or Expires) a response
    /// is not stored.
    #[serde(default)]
    pub valid: BTreeMap<Spanned<StatusSet>, Dur>,
    /// When a stale copy is served instead of an error or of waiting.
    #[serde(default)]
    pub use_stale: Vec<Spanned<UseStale>>,
    /// A stale copy served while updating is refreshed by the same connection after the
    /// client has its answer (nginx's `proxy_cache_background_update`).
    #[serde(default)]
    pub background_update: bool,
    /// One request fills an entry; the others wait for it (`proxy_cache_lock`).
    #[serde(default = "yes")]
    pub lock: bool,
    /// How long a request waits for another's fill before it goes to the upstream itself
    /// (and its response is not stored).
    #[serde(default = "default_lock_timeout")]
    pub lock_timeout: Dur,
    /// Methods answered from the cache (GET and HEAD; entries are filled by GETs, a HEAD that
    /// misses is passed on).
    #[serde(default = "default_methods")]
    pub methods: Vec<Spanned<String>>,
    /// The response header with the cache status (HIT, MISS, EXPIRED, STALE, UPDATING,
    /// REVALIDATED, BYPASS); `""` for none.
    #[serde(default = "default_status_header")]
    pub status_header: String,
    /// Refresh expired entries with a conditional request (If-None-Match /
    /// If-Modified-Since): a 304 keeps the body (`proxy_cache_revalidate`).
    #[serde(default = "yes")]
    pub revalidate: bool,
}

fn default_key() -> Spanned<Template> {
    Spanned::new(
        0..0,
        Template::parse("$scheme$host$request_uri").expect("the default key parses"),
    )
}
fn yes() -> bool {
    true
}
fn default_lock_timeout() -> Dur {
    Dur(Duration::from_secs(5))
}
fn default_methods() -> Vec<Spanned<String>> {
    vec![
        Spanned::new(0..0, "GET".into()),
        Spanned::new(0..0, "HEAD".into()),
    ]
}
fn default_status_header() -> String {
    "X-Cache-Status".into()
}

/// The statuses a `valid` entry is for: `"200 301"`, `"any"`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct StatusSet(pub Option<Vec<u16>>);

impl StatusSet {
    pub fn matches(&self, status: u16) -> bool {
        self.0.as_ref().is_none_or(|v| v.contains(&status))
    }
}

impl<'de> Deserialize<'de> for StatusSet {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        if s.trim() == "any" {
            return Ok(StatusSet(None));
        }
        let mut v = Vec::new();
        for w in s.split_whitespace() {
            let st: u16 = w.parse().map_err(|_| {
                de::Error::custom(format!(
                    "valid {s:?}: list statuses like \"200 301\", or \"any\""
                ))
            })?;
            if !(200..=599).contains(&st) {
                return Err(de::Error::custom(format!(
                    "valid: status {st} is not between 200 and 599"
                )));
            }
            v.push(st);
        }
        if v.is_empty() {
            return Err(de::Error::custom("valid: an empty status list"));
        }
        Ok(StatusSet(Some(v)))
    }
}

/// `use_stale` conditions (nginx's `proxy_cache_use_stale`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UseStale {
    /// No server could be reached, or the response was malformed.
    Error,
    Timeout,
    /// Another request is refreshing the entry.
    Updating,
    /// The server answered with this status.
    Status(u16),
}

impl<'de> Deserialize<'de> for UseStale {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Ok(match s.as_str() {
            "error" => UseStale::Error,
            "timeout" => UseStale::Timeout,
            "updating" => UseStale::Updating,
            _ => match s.strip_prefix("http_").and_then(|n| n.parse::<u16>().ok()) {
                Some(n @ (403 | 404 | 429 | 500 | 502 | 503 | 504)) => UseStale::Status(n),
                _ => {
                    return Err(de::Error::custom(format!(
                        "use_stale {s:?}: one of error, timeout, updating, http_500, http_502, \
                         http_503, http_504, http_403, http_404 or http_429"
                    )))
                }
            },
        })
    }
}
