//! Whether a response may be stored, and for how long it is fresh (RFC 9111, as nginx reads
//! it): `Cache-Control` (`s-maxage` over `max-age`; `no-store`, `private`, `no-cache` keep it
//! out) and `Expires` give the freshness and take precedence over the location's `valid`
//! overrides; `stale-while-revalidate` and `stale-if-error` extend how long a stale copy may
//! serve; `Set-Cookie` and `Vary: *` keep a response out, and `Vary` lists the request
//! fields that tell its variants apart.

use std::time::{Duration, SystemTime};

use ringx_config::cache::StatusSet;

/// What a storable response's fields say.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Freshness {
    /// How long it is fresh from now.
    pub fresh: Duration,
    /// How long after that a stale copy may be served while it is refreshed, or instead of
    /// an error (`Cache-Control` extensions of RFC 5861).
    pub stale_while_revalidate: Duration,
    pub stale_if_error: Duration,
    /// The request fields named by `Vary`, lowercase, sorted (none: one variant).
    pub vary: Vec<String>,
    /// Validators, for conditional requests (clients') and revalidation (the cache's).
    pub etag: Option<String>,
    pub last_modified: Option<String>,
}

/// Statuses a response may be stored with by its own fields (RFC 9110 §15.1's heuristically
/// cacheable ones, less 206: ranges are not cached); `valid` may add others.
const CACHEABLE: [u16; 11] = [200, 203, 204, 300, 301, 308, 404, 405, 410, 414, 501];

/// Whether a response of `status` with `headers` may be stored, and its freshness. `valid`:
/// the location's overrides, used when the response gives no freshness of its own.
pub fn storable(
    status: u16,
    headers: &[(&str, &[u8])],
    valid: &[(StatusSet, Duration)],
    now: SystemTime,
) -> Option<Freshness> {
    let mut f = Freshness::default();
    let (mut max_age, mut s_maxage) = (None, None);
    let (mut expires, mut date, mut age) = (None, None, 0u64);
    for (name, value) in headers {
        let v = std::str::from_utf8(value).unwrap_or("");
        match name.to_ascii_lowercase().as_str() {
            "cache-control" => {
                for d in v.split(',') {
                    let d = d.trim();
                    let (k, arg) = match d.split_once('=') {
                        Some((k, a)) => (k.trim(), Some(a.trim().trim_matches('"'))),
                        None => (d, None),
                    };
                    let secs = || arg.and_then(|a| a.parse::<u64>().ok());
                    match k.to_ascii_lowercase().as_str() {
                        "no-store" | "private" | "no-cache" => return None,
                        "max-age" => max_age = Some(secs().unwrap_or(0)),
                        "s-maxage" => s_maxage = Some(secs().unwrap_or(0)),
                        "stale-while-revalidate" => {
                            f.stale_while_revalidate = Duration::from_secs(secs().unwrap_or(0))
                        }
                        "stale-if-error" => {
                            f.stale_if_error = Duration::from_secs(secs().unwrap_or(0))
                        }
                        _ => {}
                    }
                }
            }
            // An invalid Expires means "already expired" (RFC 9111 §5.3).
            "expires" => {
                expires = Some(httpdate::parse_http_date(v).unwrap_or(SystemTime::UNIX_EPOCH))
            }
            "date" => date = httpdate::parse_http_date(v).ok(),
            "age" => age = v.trim().parse().unwrap_or(0),
            "set-cookie" => return None,
            "vary" => {
                for n in v.split(',').map(str::trim).filter(|n| !n.is_empty()) {
                    if n == "*" {
                        return None;
                    }
                    f.vary.push(n.to_ascii_lowercase());
                }
            }
            "etag" => f.etag = Some(v.to_string()),
            "last-modified" => f.last_modified = Some(v.to_string()),
            _ => {}
        }
    }
    f.vary.sort();
    f.vary.dedup();
    let own = s_maxage.or(max_age).map(Duration::from_secs).or_else(|| {
        expires.map(|e| {
            e.duration_since(date.unwrap_or(now))
                .unwrap_or(Duration::ZERO)
        })
    });
    f.fresh = match own {
        Some(d) if CACHEABLE.contains(&status) || listed(valid, status) => {
            d.saturating_sub(Duration::from_secs(age))
        }
        Some(_) => return None,
        None => valid.iter().find(|(s, _)| s.matches(status))?.1,
    };
    let keeps =
        !f.fresh.is_zero() || !f.stale_while_revalidate.is_zero() || !f.stale_if_error.is_zero();
    keeps.then_some(f)
}

/// Whether `valid` names `status` itself (not through `any`).
fn listed(valid: &[(StatusSet, Duration)], status: u16) -> bool {
    valid
        .iter()
        .any(|(s, _)| s.0.as_ref().is_some_and(|v| v.contains(&status)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st(status: u16, hs: &[(&str, &str)], valid: &[(StatusSet, Duration)]) -> Option<Freshness> {
        let hs: Vec<(&str, &[u8])> = hs.iter().map(|(k, v)| (*k, v.as_bytes())).collect();
        let now = httpdate::parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT").unwrap();
        storable(status, &hs, valid, now)
    }

    fn valid(s: &str, secs: u64) -> (StatusSet, Duration) {
        let set = if s == "any" {
            StatusSet(None)
        } else {
            StatusSet(Some(s.split(' ').map(|x| x.parse().unwrap()).collect()))
        };
        (set, Duration::from_secs(secs))
    }

    #[test]
    fn the_response_fields_decide_first() {
        let v = [valid("200", 600)];
        assert_eq!(st(200, &[], &v).unwrap().fresh, Duration::from_secs(600));
        assert_eq!(
            st(200, &[("Cache-Control", "public, max-age=60")], &v)
                .unwrap()
                .fresh,
            Duration::from_secs(60)
        );
        assert_eq!(
            st(200, &[("cache-control", "max-age=60, s-maxage=30")], &v)
                .unwrap()
                .fresh,
            Duration::from_secs(30),
            "s-maxage is for shared caches"
        );
        assert_eq!(
            st(200, &[("Cache-Control", "max-age=60"), ("Age", "50")], &[])
                .unwrap()
                .fresh,
            Duration::from_secs(10)
        );
        let exp = [
            ("Date", "Sun, 06 Nov 1994 08:49:37 GMT"),
            ("Expires", "Sun, 06 Nov 1994 08:59:37 GMT"),
        ];
        assert_eq!(st(200, &exp, &[]).unwrap().fresh, Duration::from_secs(600));
        assert!(
            st(200, &[("Expires", "0")], &[]).is_none(),
            "an invalid Expires is expired"
        );
        for no in [
            ("Cache-Control", "no-store"),
            ("Cache-Control", "private, max-age=60"),
            ("Cache-Control", "no-cache"),
            ("Set-Cookie", "a=1"),
            ("Vary", "*"),
        ] {
            assert!(st(200, &[no], &v).is_none(), "{no:?}");
        }
        assert!(st(200, &[], &[]).is_none(), "no freshness at all");
        assert!(st(500, &[], &[valid("200 404", 60)]).is_none());
        assert!(st(302, &[("Cache-Control", "max-age=60")], &[]).is_none());
        assert!(st(302, &[("Cache-Control", "max-age=60")], &[valid("302", 1)]).is_some());
        assert_eq!(
            st(500, &[], &[valid("any", 5)]).unwrap().fresh,
            Duration::from_secs(5)
        );
    }

    #[test]
    fn stale_extensions_vary_and_validators() {
        let f = st(
            200,
            &[
                (
                    "Cache-Control",
                    "max-age=0, stale-while-revalidate=30, stale-if-error=600",
                ),
                ("Vary", "Accept-Encoding, accept-language"),
                ("Vary", "Accept-Encoding"),
                ("ETag", "\"v1\""),
            ],
            &[],
        )
        .unwrap();
        assert_eq!(f.fresh, Duration::ZERO);
        assert_eq!(f.stale_while_revalidate, Duration::from_secs(30));
        assert_eq!(f.stale_if_error, Duration::from_secs(600));
        assert_eq!(f.vary, ["accept-encoding", "accept-language"]);
        assert_eq!(f.etag.as_deref(), Some("\"v1\""));
        assert!(st(200, &[("Cache-Control", "max-age=0")], &[]).is_none());
    }
}
