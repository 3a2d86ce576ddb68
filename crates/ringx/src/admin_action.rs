//! The status page's actions, `POST /action` on the admin listener: drain a server, enable
//! it again, set its weight, purge a cache key. Fields come form-encoded (the page's forms,
//! `curl -d`) or in the query. With `[admin] token`, an action needs it (the `token` field,
//! `X-Ringx-Token:` or `Authorization: Bearer`); a wrong or missing one changes nothing,
//! answers 403 and is logged with the client's address, as every action is.
//!
//! A drained server gets no new request from any zone (requests in flight finish, idle
//! keep-alive connections stay pooled); its health checks go on. Both a drain and a weight
//! last until ringx stops or a reload changes the upstreams (a reload that leaves them as
//! they were keeps them).

use std::net::SocketAddr;
use std::sync::atomic::Ordering;

use ringx_server::metrics::Metrics;

/// `%XX` decoding (and `+` as a space, as forms write it); None for a bad escape.
pub fn percent_decode(s: &str) -> Option<Vec<u8>> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    Some(out)
}

/// The fields of a form-encoded text, decoded (a field that is not valid encoding is left
/// out).
pub fn fields(text: &str) -> Vec<(String, Vec<u8>)> {
    text.split('&')
        .filter(|kv| !kv.is_empty())
        .filter_map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            let k = String::from_utf8(percent_decode(k)?).ok()?;
            Some((k, percent_decode(v)?))
        })
        .collect()
}

/// Compares without stopping at the first difference (the time taken does not tell how
/// much of a guess was right).
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// What an action asked for.
pub struct Request<'a> {
    pub fields: &'a [(String, Vec<u8>)],
    /// The token from a header, if one was sent.
    pub header_token: Option<&'a str>,
    pub peer: Option<SocketAddr>,
}

impl Request<'_> {
    fn get(&self, k: &str) -> Option<&[u8]> {
        self.fields
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.as_slice())
    }
    fn text(&self, k: &str) -> String {
        String::from_utf8_lossy(self.get(k).unwrap_or_default()).into_owned()
    }
}

/// Carries out an action; (HTTP status, message).
pub fn run(m: &Metrics, token: Option<&str>, r: &Request) -> (u16, String) {
    let action = r.text("action");
    let peer = r.peer.map_or("?".to_string(), |p| p.to_string());
    if let Err(refused) = allowed(token, r, &action) {
        return refused;
    }
    let (status, msg) = match action.as_str() {
        "drain" | "enable" | "weight" => server_action(m, &action, r),
        "purge" => purge(r),
        "" => (400, "give action=drain|enable|weight|purge\n".into()),
        a => (
            400,
            format!("unknown action {a:?}: drain, enable, weight or purge\n"),
        ),
    };
    if status == 200 {
        tracing::info!("admin: {} (from {peer})", msg.trim_end());
    } else {
        tracing::warn!(
            "admin: action {action:?} from {peer} failed: {}",
            msg.trim_end()
        );
    }
    (status, msg)
}

/// Whether the request carries `[admin] token` (when one is configured); the refusal, logged
/// with the client's address, when not.
pub fn allowed(token: Option<&str>, r: &Request, action: &str) -> Result<(), (u16, String)> {
    let Some(want) = token else {
        return Ok(());
    };
    let given = r
        .header_token
        .map(str::as_bytes)
        .or_else(|| r.get("token"))
        .unwrap_or_default();
    if same(given, want.as_bytes()) {
        return Ok(());
    }
    tracing::warn!(
        "admin: refused action {action:?} from {}: {} token",
        r.peer.map_or("?".to_string(), |p| p.to_string()),
        if given.is_empty() { "no" } else { "wrong" }
    );
    Err((403, "forbidden: a valid [admin] token is needed\n".into()))
}

fn server_action(m: &Metrics, action: &str, r: &Request) -> (u16, String) {
    let (up, srv) = (r.text("upstream"), r.text("server"));
    let guard = m.upstreams.lock().unwrap_or_else(|e| e.into_inner());
    let Some(ups) = guard.as_ref() else {
        return (404, "no upstreams are configured\n".into());
    };
    let Some(def) = ups.list.iter().find(|d| d.name == up) else {
        return (404, format!("no upstream named {up:?}\n"));
    };
    let Some(s) = def
        .servers
        .iter()
        .find(|s| s.name == srv || s.addr.to_string() == srv)
    else {
        return (404, format!("upstream {up:?} has no server {srv:?}\n"));
    };
    match action {
        "drain" => {
            s.stats.drained.store(true, Ordering::Relaxed);
            (200, format!("drained server {srv} of upstream {up}\n"))
        }
        "enable" => {
            s.stats.drained.store(false, Ordering::Relaxed);
            (200, format!("enabled server {srv} of upstream {up}\n"))
        }
        _ => {
            let w = r.text("weight");
            match w.trim().parse::<u32>() {
                Ok(w @ 1..=1000) => {
                    s.stats.weight.store(w, Ordering::Relaxed);
                    ups.admin_epoch.fetch_add(1, Ordering::Relaxed);
                    (
                        200,
                        format!("set the weight of server {srv} of upstream {up} to {w}\n"),
                    )
                }
                _ => (
                    400,
                    format!("weight {w:?}: give a whole number from 1 to 1000\n"),
                ),
            }
        }
    }
}

fn purge(r: &Request) -> (u16, String) {
    let name = r.text("cache");
    let Some(zone) = ringx_server::cache::CacheZone::named(&name) else {
        return (404, format!("no proxy_cache_path named {name:?}\n"));
    };
    match r.get("key") {
        Some(k) if !k.is_empty() => {
            if zone.purge(k) {
                (
                    200,
                    format!("purged key {:?} of {name}\n", String::from_utf8_lossy(k)),
                )
            } else {
                (
                    404,
                    format!("no entry {:?} in {name}\n", String::from_utf8_lossy(k)),
                )
            }
        }
        _ => (
            400,
            "give key=KEY (PURGE /cache/NAME empties a cache)\n".into(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms_are_decoded() {
        let f = fields("action=weight&server=10.0.0.1%3A80&weight=5&key=a+b%0D");
        assert_eq!(f[1], ("server".into(), b"10.0.0.1:80".to_vec()));
        assert_eq!(f[3], ("key".into(), b"a b\r".to_vec()));
        assert!(percent_decode("%G1").is_none());
        assert!(percent_decode("%4").is_none());
    }

    #[test]
    fn token_comparison() {
        assert!(same(b"abc", b"abc"));
        assert!(!same(b"abc", b"abd"));
        assert!(!same(b"ab", b"abc"));
    }
}
