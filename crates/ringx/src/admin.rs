//! The admin listener (`[admin] listen`): `GET /metrics` (Prometheus text format),
//! `GET /healthz`, and `PURGE` (or `DELETE`) `/cache/NAME?key=KEY` to remove a proxy cache
//! entry (`/cache/NAME` alone empties the cache), served by one plain blocking thread. It is not on any request path, so it
//! needs none of the zones' machinery; the socket has `SO_REUSEPORT` so that during a binary
//! upgrade the old and the new process can both hold it.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ringx_server::metrics::Metrics;

/// Binds the admin address (before privileges are dropped).
pub fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    // During a binary upgrade the old process holds the admin address until this one serves.
    if !crate::upgrade::is_upgrade() {
        ringx_engine::ensure_unclaimed(addr)
            .map_err(|e| std::io::Error::new(e.kind(), format!("admin listener: {e}")))?;
    }
    let l = ringx_engine::bind_reuseport(addr, &ringx_engine::ListenOptions::default())
        .map_err(|e| std::io::Error::new(e.kind(), format!("admin listener {addr}: {e}")))?;
    l.set_nonblocking(false)?;
    Ok(l)
}

/// Serves the admin endpoints on `l` in a thread of its own. `healthy` goes false when the
/// server starts draining (`/healthz` then answers 503).
pub fn spawn(l: TcpListener, metrics: Arc<Metrics>, healthy: Arc<AtomicBool>) {
    let spawned = std::thread::Builder::new()
        .name("ringx-admin".into())
        .spawn(move || {
            for s in l.incoming() {
                match s {
                    Ok(s) => {
                        if let Err(e) = serve_one(s, &metrics, &healthy) {
                            tracing::debug!("admin: {e}");
                        }
                    }
                    Err(e) => {
                        tracing::warn!("admin accept: {e}");
                        std::thread::sleep(Duration::from_millis(100));
                    }
                }
            }
        });
    if let Err(e) = spawned {
        tracing::error!("cannot start the admin thread: {e}");
    }
}

fn serve_one(mut s: TcpStream, metrics: &Metrics, healthy: &AtomicBool) -> std::io::Result<()> {
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    s.set_write_timeout(Some(Duration::from_secs(2)))?;
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = s.read(&mut chunk)?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
        if buf.len() > 16 * 1024 {
            return respond(&mut s, 431, "text/plain", "request head too large\n", false);
        }
    }
    let line = buf.split(|&b| b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut parts = line.split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let head = method == "HEAD";
    if method == "PURGE" || method == "DELETE" {
        let (status, body) = purge(target);
        return respond(&mut s, status, "text/plain", &body, false);
    }
    if method != "GET" && !head {
        return respond(
            &mut s,
            405,
            "text/plain",
            "GET or HEAD (PURGE or DELETE for /cache/NAME)\n",
            head,
        );
    }
    match target.split('?').next().unwrap_or("") {
        "/metrics" => {
            let mut body = metrics.render();
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs() as i64);
            body.push_str(&ringx_acme::global().render_metrics(now));
            respond(
                &mut s,
                200,
                "text/plain; version=0.0.4; charset=utf-8",
                &body,
                head,
            )
        }
        "/healthz" => {
            if healthy.load(Ordering::Relaxed) {
                respond(&mut s, 200, "text/plain", "ok\n", head)
            } else {
                respond(&mut s, 503, "text/plain", "draining\n", head)
            }
        }
        _ => respond(
            &mut s,
            404,
            "text/plain",
            "not found: try /metrics, /healthz or PURGE /cache/NAME?key=KEY\n",
            head,
        ),
    }
}

/// `PURGE /cache/NAME?key=KEY` (the key percent-encoded, so it may hold any byte, CR and LF
/// included): removes one entry; `PURGE /cache/NAME`: every entry.
fn purge(target: &str) -> (u16, String) {
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
        .map(percent_decode);
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

/// `%XX` decoding (and `+` as a space, as forms write it); None for a bad escape.
fn percent_decode(s: &str) -> Option<Vec<u8>> {
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

fn respond(
    s: &mut TcpStream,
    status: u16,
    ctype: &str,
    body: &str,
    head_only: bool,
) -> std::io::Result<()> {
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        _ => "",
    };
    let mut out = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    if !head_only {
        out.extend_from_slice(body.as_bytes());
    }
    s.write_all(&out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn keys_are_percent_decoded() {
        assert_eq!(
            super::percent_decode("http%3A%2F%2Fh%2Fa%0D%0Ab+c").unwrap(),
            b"http://h/a\r\nb c"
        );
        assert!(super::percent_decode("%G1").is_none());
        assert!(super::percent_decode("%4").is_none());
    }
}
