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
//! proxy_cache = { zone = "pages", key = "$scheme$host$request_uri",
//!                 valid = { "200 301" = "10m", "404" = "1m" },
//!                 use_stale = ["error", "timeout", "updating", "http_502", "http_503"],
//!                 background_update = true, lock = true, lock_timeout = "5s" }
//! ```

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::de::{self, Deserializer};
use serde::Deserialize;
use toml::Spanned;

use crate::error::{ConfigError, Source};
use crate::keytmpl::Template;
use crate::units::{Dur, Size};
use crate::Config;

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
                        "use_stale {s:?}: use error, timeout, updating, http_500, http_502, \
                         http_503, http_504, http_403, http_404 or http_429"
                    )))
                }
            },
        })
    }
}

pub(crate) fn validate(cfg: &Config, src: &Source) -> Result<(), ConfigError> {
    let mut seen: Vec<&Spanned<String>> = Vec::new();
    for c in &cfg.proxy_cache_path {
        let c = c.get_ref();
        if let Some(first) = seen.iter().find(|n| n.get_ref() == c.name.get_ref()) {
            let line = src.err(first.span(), "").line;
            return Err(src.err(
                c.name.span(),
                format!(
                    "proxy_cache_path {:?} is already defined at line {line}",
                    c.name.get_ref()
                ),
            ));
        }
        seen.push(&c.name);
        let p = c.path.get_ref();
        if !p.is_absolute() {
            return Err(src.err(
                c.path.span(),
                format!("{} must be an absolute path", p.display()),
            ));
        }
        if let Some(other) = cfg
            .proxy_cache_path
            .iter()
            .map(|o| o.get_ref())
            .find(|o| !std::ptr::eq(*o, c) && o.path.get_ref() == p)
        {
            return Err(src.err(
                c.path.span(),
                format!(
                    "{} is also the path of proxy_cache_path {:?}: give each cache its own directory",
                    p.display(),
                    other.name.get_ref()
                ),
            ));
        }
        match std::fs::metadata(p) {
            Ok(m) if !m.is_dir() => {
                return Err(src.err(c.path.span(), format!("{} is not a directory", p.display())))
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                // Created at start; its parent must be there.
                let parent = p.parent().filter(|d| d.is_dir());
                if parent.is_none() {
                    return Err(src.err(
                        c.path.span(),
                        format!(
                            "{}: neither it nor its parent directory exists",
                            p.display()
                        ),
                    ));
                }
            }
            Err(e) => return Err(src.err(c.path.span(), format!("{}: {e}", p.display()))),
        }
        for (what, s, min) in [
            ("max_size", &c.max_size, 1u64 << 20),
            ("memory_size", &c.memory_size, 1 << 16),
            ("max_object", &c.max_object, 1 << 10),
        ] {
            if s.get_ref().0 < min {
                return Err(src.err(
                    s.span(),
                    format!(
                        "{what} {} is below the least useful size ({min} bytes)",
                        s.get_ref().0
                    ),
                ));
            }
        }
        if c.max_object.get_ref().0 > c.max_size.get_ref().0 {
            return Err(src.err(
                c.max_object.span(),
                "max_object is larger than max_size: such an object could never be stored",
            ));
        }
    }
    for s in &cfg.server {
        for l in &s.get_ref().location {
            let Some(pc) = &l.get_ref().proxy_cache else {
                continue;
            };
            let pcv = pc.get_ref();
            if l.get_ref().proxy_pass.is_none() {
                return Err(src.err(
                    pc.span(),
                    "proxy_cache caches what proxy_pass fetches: this location has no proxy_pass",
                ));
            }
            if !cfg
                .proxy_cache_path
                .iter()
                .any(|c| c.get_ref().name.get_ref() == pcv.zone.get_ref())
            {
                return Err(src.err(
                    pcv.zone.span(),
                    format!("no [[proxy_cache_path]] named {:?}", pcv.zone.get_ref()),
                ));
            }
            for m in &pcv.methods {
                if !matches!(m.get_ref().as_str(), "GET" | "HEAD") {
                    return Err(src.err(
                        m.span(),
                        format!(
                            "proxy_cache methods: {:?} cannot be cached (GET and HEAD can)",
                            m.get_ref()
                        ),
                    ));
                }
            }
            if !is_token(&pcv.status_header) && !pcv.status_header.is_empty() {
                return Err(src.err(
                    pc.span(),
                    format!("status_header {:?} is not a header name", pcv.status_header),
                ));
            }
        }
    }
    Ok(())
}

fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}
