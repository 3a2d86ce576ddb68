//! Who may make a request, and how often: per-location access rules (`access`), basic
//! authentication (`auth_basic`), authorisation by a subrequest (`auth_request`), request
//! and connection limits (`limit_req`, `limit_conn`, with their `[[limit_req_zone]]` and
//! `[[limit_conn_zone]]`), escalation of abusive clients to the XDP block list, and the real
//! client address behind a trusted proxy (`[http] real_ip_from`).
//!
//! ```toml
//! [http]
//! real_ip_from = ["10.0.0.0/8"]       # proxies whose client-address header is believed
//! real_ip_header = "X-Forwarded-For"  # default "X-Real-IP", as nginx
//! real_ip_recursive = true            # skip trusted addresses from the right (nginx's rule)
//! escalate_malformed = { after = 20, within = "60s", block_for = "10m" }
//!
//! [[limit_req_zone]]
//! name = "per_ip"
//! key = "$remote_addr"                # any key template (crate::keytmpl)
//! rate = "10r/s"                      # or "r/m"
//! size = "1m"                         # state for 65536 keys (16 bytes each)
//! scope = "cluster"                   # the rate holds across the hosts of [cluster]
//! cluster_fallback = "local"          # Redis gone: each host its share ("open", "closed")
//! cluster_sync = "20ms"               # how often each host syncs its counts with Redis
//!
//! [[limit_conn_zone]]
//! name = "addr"
//! key = "$remote_addr"
//!
//! [[server.location]]
//! path = "/admin/"
//! access = ["allow 127.0.0.1", "allow 10.0.0.0/8", "deny all"]
//! auth_basic = { realm = "admin", user_file = "/etc/ringx/htpasswd" }
//! auth_request = { proxy_pass = "auth", uri = "/check" }
//! limit_req = { zone = "per_ip", burst = 20, nodelay = true, status = 429, escalate = { after = 100, block_for = "60s" } }
//! limit_conn = { zone = "addr", max = 10 }
//! ```
//!
//! Every value is checked while it is parsed (a bad CIDR, rate or status is reported at its
//! `FILE:LINE:COL`), and [`validate`] checks what spans sections: zones named by locations
//! exist, escalation has an `[xdp]` filter to push to, user files load.

use std::path::PathBuf;
use std::time::Duration;

use serde::de::{self, Deserializer};
use serde::Deserialize;
use toml::Spanned;

use crate::keytmpl::Template;
use crate::units::{Dur, Size};
use crate::xdp::CidrValue;

/// `[[limit_req_zone]]`: the shared state of a request-rate limit.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitReqZone {
    pub name: Spanned<String>,
    pub key: Spanned<Template>,
    pub rate: Spanned<Rate>,
    /// Memory for the keys' state: 16 bytes a key (default 1m: 65536 keys).
    pub size: Option<Spanned<Size>>,
    /// `"local"` (this host, the default) or `"cluster"` (every host of `[cluster]`).
    pub scope: Option<Spanned<Scope>>,
    /// A cluster zone while Redis is slow or gone (default `"local"`).
    pub cluster_fallback: Option<Spanned<Fallback>>,
    /// How often a host sends its counts to Redis and learns the others' (default 20ms).
    pub cluster_sync: Option<Spanned<Dur>>,
}

/// `[[limit_conn_zone]]`: the shared state of a concurrent-request limit.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitConnZone {
    pub name: Spanned<String>,
    pub key: Spanned<Template>,
    /// Memory for the keys' state: 16 bytes a key (default 1m: 65536 keys).
    pub size: Option<Spanned<Size>>,
    /// `"local"` (this host, the default) or `"cluster"` (every host of `[cluster]`).
    pub scope: Option<Spanned<Scope>>,
    /// A cluster zone while Redis is slow or gone (default `"local"`).
    pub cluster_fallback: Option<Spanned<Fallback>>,
    /// How often a host sends its counts to Redis and learns the others' (default 20ms).
    pub cluster_sync: Option<Spanned<Dur>>,
}

/// A cluster zone's settings (`scope = "cluster"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClusterLimit {
    pub fallback: Fallback,
    pub sync_every: Duration,
}

fn cluster_limit(
    scope: &Option<Spanned<Scope>>,
    fallback: &Option<Spanned<Fallback>>,
    sync: &Option<Spanned<Dur>>,
) -> Option<ClusterLimit> {
    (scope.as_ref().map(|s| *s.get_ref()) == Some(Scope::Cluster)).then(|| ClusterLimit {
        fallback: fallback.as_ref().map_or(Fallback::Local, |f| *f.get_ref()),
        sync_every: sync
            .as_ref()
            .map_or(DEFAULT_CLUSTER_SYNC, |d| d.get_ref().0),
    })
}

impl LimitReqZone {
    /// Its cluster settings, None for a zone of this host only.
    pub fn cluster(&self) -> Option<ClusterLimit> {
        cluster_limit(&self.scope, &self.cluster_fallback, &self.cluster_sync)
    }
}

impl LimitConnZone {
    /// Its cluster settings, None for a zone of this host only.
    pub fn cluster(&self) -> Option<ClusterLimit> {
        cluster_limit(&self.scope, &self.cluster_fallback, &self.cluster_sync)
    }
}

/// How often a cluster zone syncs when `cluster_sync` is not given.
pub const DEFAULT_CLUSTER_SYNC: Duration = Duration::from_millis(20);

/// `scope` of a limit zone.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    #[default]
    Local,
    Cluster,
}

/// `cluster_fallback`: what a cluster zone does while its host cannot sync with Redis.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Fallback {
    /// Each host enforces its share: the rate (or `max`) divided by the hosts last seen alive.
    #[default]
    Local,
    /// No limit until Redis is back (fail open).
    Open,
    /// Every request refused with the limit's status until Redis is back (fail closed).
    Closed,
}

/// Keys a zone of `size` bytes holds: 16 bytes each, a power of two, at least 64.
pub fn zone_keys(size: Option<&Spanned<Size>>) -> usize {
    let bytes = size.map_or(1 << 20, |s| s.get_ref().0);
    ((bytes / 16).max(64) as usize).next_power_of_two()
}

/// A location's `limit_req`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitReq {
    pub zone: Spanned<String>,
    /// Requests over the rate that wait (or, with `nodelay`, pass at once) before more are
    /// refused.
    #[serde(default)]
    pub burst: u32,
    #[serde(default)]
    pub nodelay: bool,
    #[serde(default = "default_limit_status")]
    pub status: Status,
    /// Push a client that keeps being refused into the XDP block list.
    pub escalate: Option<Spanned<Escalate>>,
}

/// A location's `limit_conn`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitConn {
    pub zone: Spanned<String>,
    /// Requests of one key in progress at once.
    pub max: Spanned<u32>,
    #[serde(default = "default_limit_status")]
    pub status: Status,
}

/// When a client is blocked in XDP, and for how long.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Escalate {
    /// Refusals (or malformed requests) of one client address within `within`.
    pub after: Spanned<u32>,
    pub block_for: Dur,
    #[serde(default = "default_within")]
    pub within: Dur,
}

fn default_within() -> Dur {
    Dur(Duration::from_secs(60))
}

/// The status a refusal answers with (nginx: 503 unless `limit_req_status` says otherwise).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Status(pub u16);

fn default_limit_status() -> Status {
    Status(503)
}

impl<'de> Deserialize<'de> for Status {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = u16::deserialize(d)?;
        if !(400..=599).contains(&v) {
            return Err(de::Error::custom(format!(
                "status {v}: a refusal must be a 4xx or 5xx status (429 or 503 usually)"
            )));
        }
        Ok(Status(v))
    }
}

/// A rate: `"10r/s"`, `"30r/m"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rate {
    pub requests: u64,
    pub per: Duration,
}

impl Rate {
    /// The time one request uses of the rate (1/rate).
    pub fn interval(&self) -> Duration {
        self.per / self.requests.max(1) as u32
    }

    pub fn parse(s: &str) -> Result<Rate, String> {
        let bad = || {
            format!("invalid rate {s:?}: write requests per second or minute, like \"10r/s\" or \"30r/m\"")
        };
        let (n, unit) = s.trim().split_once("r/").ok_or_else(bad)?;
        let requests: u64 = n.trim().parse().map_err(|_| bad())?;
        let per = match unit.trim() {
            "s" => Duration::from_secs(1),
            "m" => Duration::from_secs(60),
            _ => return Err(bad()),
        };
        if requests == 0 || requests > 1_000_000 {
            return Err(format!(
                "rate {s:?}: between 1 and 1000000 requests per period"
            ));
        }
        Ok(Rate { requests, per })
    }
}

impl<'de> Deserialize<'de> for Rate {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Rate::parse(&s).map_err(de::Error::custom)
    }
}

/// One `access` rule: `"allow 10.0.0.0/8"`, `"deny 2001:db8::/32"`, `"deny all"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AccessRule {
    pub allow: bool,
    /// None: `all`.
    pub from: Option<ringx_xdp::Cidr>,
}

impl AccessRule {
    pub fn parse(s: &str) -> Result<AccessRule, String> {
        let mut it = s.split_whitespace();
        let (verb, what) = (it.next().unwrap_or(""), it.next());
        let allow = match verb {
            "allow" => true,
            "deny" => false,
            _ => {
                return Err(format!(
                    "access rule {s:?}: start with \"allow\" or \"deny\", like \"allow 10.0.0.0/8\" or \"deny all\""
                ))
            }
        };
        let (Some(what), None) = (what, it.next()) else {
            return Err(format!(
                "access rule {s:?}: give one address, prefix or \"all\" after {verb}"
            ));
        };
        let from = match what {
            "all" => None,
            c => Some(c.parse().map_err(|e| format!("access rule {s:?}: {e}"))?),
        };
        Ok(AccessRule { allow, from })
    }
}

impl<'de> Deserialize<'de> for AccessRule {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        AccessRule::parse(&s).map_err(de::Error::custom)
    }
}

/// `auth_basic = { realm, user_file }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthBasic {
    pub realm: Spanned<String>,
    pub user_file: Spanned<PathBuf>,
}

/// `auth_request = { proxy_pass, uri }`: a GET of `uri` (with the client's headers) to
/// `proxy_pass` decides: 2xx allows, 401 and 403 refuse, anything else is a 500.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthRequest {
    pub proxy_pass: Spanned<String>,
    pub uri: Spanned<String>,
}

/// The real-address settings of `[http]`.
pub struct RealIp<'a> {
    pub from: &'a [CidrValue],
    pub header: &'a str,
    pub recursive: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_and_rules_parse() {
        let r = Rate::parse("10r/s").unwrap();
        assert_eq!(r.interval(), Duration::from_millis(100));
        assert_eq!(
            Rate::parse("30r/m").unwrap().interval(),
            Duration::from_secs(2)
        );
        for bad in ["10", "10/s", "0r/s", "r/s", "10r/h", "-1r/s"] {
            assert!(Rate::parse(bad).is_err(), "{bad}");
        }
        let a = AccessRule::parse("allow 10.0.0.0/8").unwrap();
        assert!(a.allow && a.from.unwrap().prefix_len() == 8);
        assert_eq!(
            AccessRule::parse("deny all").unwrap(),
            AccessRule {
                allow: false,
                from: None
            }
        );
        assert!(AccessRule::parse("deny  2001:db8::/32").is_ok());
        for bad in [
            "permit all",
            "allow",
            "allow 10.0.0.0/33",
            "deny 10.0.0.0/8 now",
            "allow 300.1.1.1",
        ] {
            assert!(AccessRule::parse(bad).is_err(), "{bad}");
        }
    }
}
