//! The checks that span sections for access control, limits and the proxy cache
//! (`crate::guard`, `crate::cache`): zones named by locations exist, escalation has an `[xdp]`
//! filter to push to, user files load, cache paths are usable. Kept apart from the types so
//! that the schema, the locations and these checks import each other in one direction only.

use std::time::Duration;

use toml::Spanned;

use crate::error::{ConfigError, Source};
use crate::guard::{Escalate, Fallback, Scope};
use crate::schema::Config;
use crate::units::{Dur, Size};

/// Checks across sections: zone names, what locations name, escalation's XDP filter, user
/// files, auth targets.
pub(crate) fn validate_guard(cfg: &Config, src: &Source) -> Result<(), ConfigError> {
    let mut names: Vec<&Spanned<String>> = Vec::new();
    let zone_names = cfg
        .limit_req_zone
        .iter()
        .map(|z| &z.get_ref().name)
        .chain(cfg.limit_conn_zone.iter().map(|z| &z.get_ref().name));
    for n in zone_names {
        if n.get_ref().is_empty() {
            return Err(src.err(n.span(), "a limit zone needs a name"));
        }
        if let Some(first) = names.iter().find(|o| o.get_ref() == n.get_ref()) {
            let line = src.err(first.span(), "").line;
            return Err(src.err(
                n.span(),
                format!(
                    "limit zone {:?} is already defined at line {line}",
                    n.get_ref()
                ),
            ));
        }
        names.push(n);
    }
    let sizes = cfg
        .limit_req_zone
        .iter()
        .filter_map(|z| z.get_ref().size.as_ref())
        .chain(
            cfg.limit_conn_zone
                .iter()
                .filter_map(|z| z.get_ref().size.as_ref()),
        );
    for z in sizes {
        zone_size(z, src)?;
    }
    for z in &cfg.limit_req_zone {
        let z = z.get_ref();
        zone_scope(&z.scope, &z.cluster_fallback, &z.cluster_sync, cfg, src)?;
    }
    for z in &cfg.limit_conn_zone {
        let z = z.get_ref();
        zone_scope(&z.scope, &z.cluster_fallback, &z.cluster_sync, cfg, src)?;
    }
    if let Some(e) = &cfg.http.escalate_malformed {
        escalate(e, cfg, src)?;
    }
    if let Some(h) = &cfg.http.real_ip_header {
        if !is_token(h.get_ref()) {
            return Err(src.err(
                h.span(),
                format!("real_ip_header {:?} is not a header name", h.get_ref()),
            ));
        }
    }
    for s in &cfg.server {
        for l in &s.get_ref().location {
            let l = l.get_ref();
            if let Some(lr) = &l.limit_req {
                let lr = lr.get_ref();
                if !cfg
                    .limit_req_zone
                    .iter()
                    .any(|z| z.get_ref().name.get_ref() == lr.zone.get_ref())
                {
                    return Err(src.err(
                        lr.zone.span(),
                        format!("no [[limit_req_zone]] named {:?}", lr.zone.get_ref()),
                    ));
                }
                if let Some(e) = &lr.escalate {
                    escalate(e, cfg, src)?;
                }
            }
            if let Some(lc) = &l.limit_conn {
                let lc = lc.get_ref();
                if !cfg
                    .limit_conn_zone
                    .iter()
                    .any(|z| z.get_ref().name.get_ref() == lc.zone.get_ref())
                {
                    return Err(src.err(
                        lc.zone.span(),
                        format!("no [[limit_conn_zone]] named {:?}", lc.zone.get_ref()),
                    ));
                }
                if *lc.max.get_ref() == 0 {
                    return Err(src.err(lc.max.span(), "limit_conn max must be at least 1"));
                }
            }
            if let Some(a) = &l.auth_basic {
                let a = a.get_ref();
                if !a
                    .realm
                    .get_ref()
                    .bytes()
                    .all(|b| b >= 0x20 && b != 0x7f && b != b'"' && b != b'\\')
                {
                    return Err(src.err(
                        a.realm.span(),
                        "auth_basic realm may not hold quotes, backslashes or control characters",
                    ));
                }
                crate::htpasswd::load(a.user_file.get_ref())
                    .map_err(|e| src.err(a.user_file.span(), e))?;
            }
            if let Some(a) = &l.auth_request {
                let a = a.get_ref();
                let uri = a.uri.get_ref();
                if !uri.starts_with('/') || uri.bytes().any(|b| b <= b' ' || b == 0x7f) {
                    return Err(src.err(
                        a.uri.span(),
                        format!("auth_request uri {uri:?} must be a path starting with '/', without spaces or control characters"),
                    ));
                }
                crate::upstream::check_target(&cfg.upstream, &a.proxy_pass, src)?;
            }
        }
    }
    Ok(())
}

fn zone_size(z: &Spanned<Size>, src: &Source) -> Result<(), ConfigError> {
    let b = z.get_ref().0;
    if !(1024..=(1 << 30)).contains(&b) {
        return Err(src.err(
            z.span(),
            format!("limit zone size {b} must be between 1k and 1g (16 bytes per key)"),
        ));
    }
    Ok(())
}

/// `scope = "cluster"` needs `[cluster]`; its other keys need that scope; the sync period is
/// between 5 ms and 1 s.
fn zone_scope(
    scope: &Option<Spanned<Scope>>,
    fallback: &Option<Spanned<Fallback>>,
    sync: &Option<Spanned<Dur>>,
    cfg: &Config,
    src: &Source,
) -> Result<(), ConfigError> {
    let cluster = scope.as_ref().filter(|s| *s.get_ref() == Scope::Cluster);
    match cluster {
        Some(s) if cfg.cluster.is_none() => {
            return Err(src.err(
                s.span(),
                "scope = \"cluster\" shares the limit through Redis: it needs a [cluster] \
                 section (redis = [\"host:port\"])",
            ))
        }
        Some(_) => {}
        None => {
            let stray = fallback
                .as_ref()
                .map(|f| (f.span(), "cluster_fallback"))
                .or(sync.as_ref().map(|d| (d.span(), "cluster_sync")));
            if let Some((span, key)) = stray {
                return Err(src.err(
                    span,
                    format!("{key} is for a zone with scope = \"cluster\""),
                ));
            }
        }
    }
    if let Some(d) = sync {
        let t = d.get_ref().0;
        if t < Duration::from_millis(5) || t > Duration::from_secs(1) {
            return Err(src.err(d.span(), "cluster_sync must be between 5ms and 1s"));
        }
    }
    Ok(())
}

fn escalate(e: &Spanned<Escalate>, cfg: &Config, src: &Source) -> Result<(), ConfigError> {
    if cfg.xdp.is_none() {
        return Err(src.err(
            e.span(),
            "escalate pushes clients into the XDP block list: it needs an [xdp] section \
             (the filter on the device clients arrive on)",
        ));
    }
    let x = e.get_ref();
    if *x.after.get_ref() == 0 {
        return Err(src.err(x.after.span(), "escalate after must be at least 1"));
    }
    if x.block_for.0 < Duration::from_secs(1) || x.block_for.0 > Duration::from_secs(7 * 86400) {
        return Err(src.err(e.span(), "escalate block_for must be between 1s and 7 days"));
    }
    if x.within.0.is_zero() {
        return Err(src.err(e.span(), "escalate within must be longer than 0"));
    }
    Ok(())
}

fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// Whether serving this configuration needs the client's address on every connection
/// (access rules, limits keyed by it, escalation).
pub fn needs_client_address(cfg: &Config) -> bool {
    !cfg.limit_req_zone.is_empty()
        || !cfg.limit_conn_zone.is_empty()
        || cfg.http.escalate_malformed.is_some()
        || cfg.server.iter().any(|s| {
            s.get_ref()
                .location
                .iter()
                .any(|l| !l.get_ref().access.is_empty())
        })
}

/// Whether a location sends requests of its own to an upstream (`auth_request`), so the
/// zones need outbound connections even with no `proxy_pass`.
pub fn has_subrequests(cfg: &Config) -> bool {
    cfg.server.iter().any(|s| {
        s.get_ref()
            .location
            .iter()
            .any(|l| l.get_ref().auth_request.is_some())
    })
}

pub(crate) fn validate_cache(cfg: &Config, src: &Source) -> Result<(), ConfigError> {
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
