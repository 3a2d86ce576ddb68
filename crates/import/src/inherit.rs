//! Directives that a location inherits from its server and from `http`, as nginx merges
//! them: a scalar (`root`, `gzip`) from the nearest level that sets it; a list (`add_header`,
//! `proxy_set_header`, `error_page`, `allow`/`deny`, `limit_req`) only by a level that sets
//! none of its own — the first one a level writes replaces what it inherited.

use std::collections::HashSet;

use ringx_nginxconf::Directive;

use crate::cx::Cx;
use crate::values;

/// What a level hands down.
#[derive(Debug, Clone, Default)]
pub struct Inh {
    pub root: Option<String>,
    pub index: Option<Vec<String>>,
    /// (name, value, always)
    pub add_header: Vec<(String, String, bool)>,
    pub error_page: Vec<(String, String)>,
    pub recursive_error_pages: Option<bool>,
    pub access: Vec<String>,
    /// Some(realm), or None with `auth_basic off`.
    pub auth_basic: Option<String>,
    pub auth_basic_user_file: Option<String>,
    pub limit_req: Vec<(String, u32, bool)>,
    pub limit_req_status: Option<u16>,
    pub limit_conn: Vec<(String, u32)>,
    pub limit_conn_status: Option<u16>,
    pub proxy_set_header: Vec<(String, String, String)>,
    pub proxy_hide_header: Vec<String>,
    pub proxy_intercept_errors: Option<bool>,
    pub proxy_cache: Option<String>,
    pub proxy_cache_key: Option<String>,
    pub proxy_cache_valid: Vec<(String, String)>,
    pub proxy_cache_use_stale: Vec<String>,
    pub proxy_cache_background_update: Option<bool>,
    pub proxy_cache_lock: Option<bool>,
    pub proxy_cache_lock_timeout: Option<String>,
    pub proxy_cache_revalidate: Option<bool>,
    /// `Cache-Control` of `expires` (None: off).
    pub expires: Option<String>,
    pub gzip: Option<bool>,
    pub default_type: Option<String>,
    /// (connect, read, send) upstream timeouts.
    pub proxy_timeouts: [Option<String>; 3],
}

/// The list directives already written at the current level (so the first resets what
/// was inherited).
#[derive(Default)]
pub struct Level(HashSet<&'static str>);

impl Level {
    fn first(&mut self, what: &'static str) -> bool {
        self.0.insert(what)
    }
}

fn on_off(d: &Directive) -> Option<bool> {
    match d.args().first() {
        Some(&"on") => Some(true),
        Some(&"off") => Some(false),
        _ => None,
    }
}

/// Takes `d` into `inh` if it is an inherited directive (and notes its fate); false if it
/// is not one.
pub fn take(cx: &mut Cx, inh: &mut Inh, lvl: &mut Level, d: &Directive) -> bool {
    let a = d.args();
    let r = &mut cx.report;
    match d.name.as_str() {
        "root" => match a.first() {
            Some(p) if !p.contains('$') => {
                inh.root = Some(cx.under_prefix(p));
                cx.report.ok(d);
            }
            _ => r.refuse(
                d,
                "a root with variables: ringx's root is a fixed directory",
            ),
        },
        "index" => {
            if a.iter().any(|i| i.contains('$')) {
                r.refuse(d, "index names with variables");
            } else {
                inh.index = Some(a.iter().map(|s| s.to_string()).collect());
                r.ok(d);
            }
        }
        "add_header" => {
            if lvl.first("add_header") {
                inh.add_header.clear();
            }
            if let Some(Err(e)) = a.get(1).map(|v| ringx_config::template::Template::parse(v)) {
                r.refuse(d, format!("ringx cannot take its value: {e}"));
                return true;
            }
            match a.as_slice() {
                [n, v] => {
                    inh.add_header.push((n.to_string(), v.to_string(), false));
                    r.ok(d);
                }
                [n, v, "always"] => {
                    inh.add_header.push((n.to_string(), v.to_string(), true));
                    r.ok(d);
                }
                _ => r.refuse(d, "expected NAME VALUE [always]"),
            }
        }
        "error_page" => {
            if lvl.first("error_page") {
                inh.error_page.clear();
            }
            // error_page CODE... [=[RESPONSE]] URI
            let Some((uri, rest)) = a.split_last() else {
                r.refuse(d, "no page");
                return true;
            };
            let (codes, eq): (Vec<&str>, Option<&str>) = match rest.split_last() {
                Some((e, codes)) if e.starts_with('=') => (codes.to_vec(), Some(e)),
                _ => (rest.to_vec(), None),
            };
            if codes.is_empty() || codes.iter().any(|c| c.parse::<u16>().is_err()) {
                r.refuse(d, "expected status codes, then [=CODE] and the page");
                return true;
            }
            let target = match eq {
                Some(e) => format!("{e} {uri}"),
                None => uri.to_string(),
            };
            inh.error_page.push((codes.join(" "), target));
            r.ok(d);
        }
        "recursive_error_pages" => {
            inh.recursive_error_pages = on_off(d);
            r.ok(d);
        }
        "allow" | "deny" => {
            if lvl.first("access") {
                inh.access.clear();
            }
            match a.first() {
                Some(who) if !who.starts_with("unix:") => {
                    inh.access.push(format!("{} {who}", d.name));
                    r.ok(d);
                }
                _ => r.refuse(d, "ringx has no UNIX-domain clients"),
            }
        }
        "auth_basic" => {
            inh.auth_basic = match a.first() {
                Some(&"off") | None => None,
                Some(realm) => Some(realm.to_string()),
            };
            r.ok(d);
        }
        "auth_basic_user_file" => match a.first() {
            Some(f) if !f.contains('$') => {
                inh.auth_basic_user_file = Some(cx.under_conf(f));
                cx.report.ok(d);
            }
            _ => r.refuse(d, "a file name with variables"),
        },
        "limit_req" => {
            if lvl.first("limit_req") {
                inh.limit_req.clear();
            }
            let mut zone = None;
            let mut burst = 0;
            let mut nodelay = false;
            let mut bad = None;
            for w in &a {
                if let Some(z) = w.strip_prefix("zone=") {
                    zone = Some(z.to_string());
                } else if let Some(b) = w.strip_prefix("burst=") {
                    burst = b.parse().unwrap_or(0);
                } else if *w == "nodelay" {
                    nodelay = true;
                } else {
                    bad = Some(w.to_string());
                }
            }
            match (zone, bad) {
                (Some(z), None) => {
                    inh.limit_req.push((z, burst, nodelay));
                    r.ok(d);
                }
                (_, Some(b)) => r.refuse(d, format!("{b:?}: ringx's limit_req has zone, burst and nodelay (delay= is not supported)")),
                (None, None) => r.refuse(d, "no zone="),
            }
        }
        "limit_conn" => {
            if lvl.first("limit_conn") {
                inh.limit_conn.clear();
            }
            match a.as_slice() {
                [z, n] if n.parse::<u32>().is_ok() => {
                    inh.limit_conn.push((z.to_string(), n.parse().unwrap_or(0)));
                    r.ok(d);
                }
                _ => r.refuse(d, "expected ZONE NUMBER"),
            }
        }
        "limit_req_status" | "limit_conn_status" => match a.first().and_then(|c| c.parse().ok()) {
            Some(c) => {
                if d.name == "limit_req_status" {
                    inh.limit_req_status = Some(c);
                } else {
                    inh.limit_conn_status = Some(c);
                }
                r.ok(d);
            }
            None => r.refuse(d, "not a status code"),
        },
        "proxy_set_header" => {
            if lvl.first("proxy_set_header") {
                inh.proxy_set_header.clear();
            }
            match a.as_slice() {
                [n, v] => {
                    inh.proxy_set_header
                        .push((n.to_string(), v.to_string(), d.place()));
                    // Its fate is noted where a location proxies with it (or at the end).
                    cx.headers.push(d.clone());
                }
                _ => r.refuse(d, "expected NAME VALUE"),
            }
        }
        "proxy_hide_header" => {
            if lvl.first("proxy_hide_header") {
                inh.proxy_hide_header.clear();
            }
            inh.proxy_hide_header
                .extend(a.iter().map(|s| s.to_string()));
            r.ok(d);
        }
        "proxy_intercept_errors" => {
            inh.proxy_intercept_errors = on_off(d);
            r.ok(d);
        }
        "proxy_cache" => {
            inh.proxy_cache = a.first().filter(|z| **z != "off").map(|z| z.to_string());
            r.ok(d);
        }
        "proxy_cache_key" => {
            inh.proxy_cache_key = a.first().map(|k| k.to_string());
            r.ok(d);
        }
        "proxy_cache_valid" => {
            if lvl.first("proxy_cache_valid") {
                inh.proxy_cache_valid.clear();
            }
            match a.split_last() {
                Some((t, codes)) if values::duration(t).is_some() => {
                    let codes = if codes.is_empty() {
                        "200 301 302".to_string()
                    } else {
                        codes.join(" ")
                    };
                    inh.proxy_cache_valid
                        .push((codes, values::duration(t).unwrap_or_default()));
                    r.ok(d);
                }
                _ => r.refuse(d, "expected [CODE...] TIME"),
            }
        }
        "proxy_cache_use_stale" => {
            inh.proxy_cache_use_stale = a
                .iter()
                .filter(|w| **w != "off")
                .map(|w| w.to_string())
                .collect();
            r.ok(d);
        }
        "proxy_cache_background_update" => {
            inh.proxy_cache_background_update = on_off(d);
            r.ok(d);
        }
        "proxy_cache_lock" => {
            inh.proxy_cache_lock = on_off(d);
            r.ok(d);
        }
        "proxy_cache_revalidate" => {
            inh.proxy_cache_revalidate = on_off(d);
            r.ok(d);
        }
        "proxy_cache_lock_timeout" => {
            inh.proxy_cache_lock_timeout = a.first().and_then(|t| values::duration(t));
            r.ok(d);
        }
        "expires" => expires(cx, inh, d),
        "gzip" => {
            inh.gzip = on_off(d);
            // The http level's gzip is [http] gzip; below it, compress = false.
            cx.report.ok(d);
        }
        "default_type" => {
            inh.default_type = a.first().map(|t| t.to_string());
            cx.report.approx(
                d,
                "ringx's return bodies get this type; for files ringx's own MIME table \
                 decides, and an unknown extension gets application/octet-stream",
            );
        }
        "proxy_connect_timeout" | "proxy_read_timeout" | "proxy_send_timeout" => {
            let i = match d.name.as_str() {
                "proxy_connect_timeout" => 0,
                "proxy_read_timeout" => 1,
                _ => 2,
            };
            match a.first().and_then(|t| values::duration(t)) {
                Some(t) => {
                    inh.proxy_timeouts[i] = Some(t);
                    cx.report.approx(
                        d,
                        "ringx's upstream timeouts belong to the [[upstream]]: set there for \
                         the upstream this level proxies to",
                    );
                }
                None => r.refuse(d, "not a time"),
            }
        }
        _ => return false,
    }
    true
}

fn expires(cx: &mut Cx, inh: &mut Inh, d: &Directive) {
    let a = d.args();
    let v = match a.as_slice() {
        ["off"] => {
            inh.expires = None;
            cx.report.ok(d);
            return;
        }
        ["epoch"] => "no-cache".to_string(),
        ["max"] => "max-age=315360000".to_string(),
        [t] if t.starts_with('-') => "no-cache".to_string(),
        [t] => match values::time_ms(t.trim_start_matches('+')) {
            Some(ms) => format!("max-age={}", ms / 1000),
            None => {
                cx.report
                    .refuse(d, "not a time (ringx has no modified/@ forms)");
                return;
            }
        },
        _ => {
            cx.report
                .refuse(d, "ringx has no `modified` or time-of-day forms");
            return;
        }
    };
    inh.expires = Some(v);
    cx.report.approx(
        d,
        "sent as add_header Cache-Control (same statuses); ringx adds no Expires header",
    );
}
