//! `PURGE /cache/NAME?key=KEY` on the admin port, done on this host: what the admin
//! listener answers, and what a purge sent to every host does on each (`cluster_events.rs`).

/// `PURGE /cache/NAME?key=KEY` (the key percent-encoded, so it may hold any byte, CR and LF
/// included): removes one entry; `PURGE /cache/NAME`: every entry.
pub fn purge(target: &str) -> (u16, String) {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let Some(name) = path.strip_prefix("/cache/").filter(|n| !n.is_empty()) else {
        return (404, "not found: PURGE /cache/NAME?key=KEY\n".into());
    };
    let Some(zone) = ringx_server::cache::CacheZone::named(name) else {
        return (404, format!("no proxy_cache_path named {name:?}\n"));
    };
    let key = query
        .split('&')
        .find_map(|kv| kv.strip_prefix("key="))
        .map(crate::admin_action::percent_decode);
    match key {
        None if query.is_empty() => {
            let n = zone.purge_all();
            (200, format!("purged {n} entries of {name}\n"))
        }
        None => (
            400,
            "give key=KEY (percent-encoded), or nothing to purge all\n".into(),
        ),
        Some(None) => (400, "the key is not valid percent-encoding\n".into()),
        Some(Some(k)) if zone.purge(&k) => (200, "purged\n".into()),
        Some(Some(_)) => (404, "no such entry\n".into()),
    }
}
