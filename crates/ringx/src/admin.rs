//! The admin listener (`[admin] listen`): `GET /` (the status page, `status_html.rs`) and
//! `/status.json`, `POST /action` (its actions, `admin_action.rs`), `GET /metrics`
//! (Prometheus text format), `GET /healthz`, `POST /drain` (with `[admin] token` only), and
//! `PURGE` (or `DELETE`) `/cache/NAME?key=KEY` to remove a proxy cache entry (`/cache/NAME`
//! alone empties the cache), served by one plain blocking thread. It is not on any request path, so it
//! needs none of the zones' machinery; the socket has `SO_REUSEPORT` so that during a binary
//! upgrade the old and the new process can both hold it.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ringx_server::metrics::Metrics;

/// Binds the admin address (before privileges are dropped). Start-up has checked that no
/// other process holds it (`lifecycle::serve`, with the listen addresses, before any is bound).
pub fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let l = ringx_engine::bind_reuseport(addr, &ringx_engine::ListenOptions::default())
        .map_err(|e| std::io::Error::new(e.kind(), format!("admin listener {addr}: {e}")))?;
    l.set_nonblocking(false)?;
    Ok(l)
}

/// What the admin thread serves from.
pub struct Admin {
    pub board: crate::status::Board,
    /// `healthy` goes false when the server starts draining (`/healthz` then answers 503).
    pub healthy: Arc<AtomicBool>,
    /// `[admin] token`: what the actions need.
    pub token: Option<String>,
}

/// Serves the admin endpoints on `l` in a thread of its own.
pub fn spawn(l: TcpListener, admin: Admin) {
    let spawned = std::thread::Builder::new()
        .name("ringx-admin".into())
        .spawn(move || {
            for s in l.incoming() {
                match s {
                    Ok(s) => {
                        if let Err(e) = serve_one(s, &admin) {
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

fn serve_one(mut s: TcpStream, admin: &Admin) -> std::io::Result<()> {
    let metrics: &Metrics = &admin.board.metrics;
    let healthy: &AtomicBool = &admin.healthy;
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
    let end = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or(buf.len())
        + 4;
    let head_text = String::from_utf8_lossy(&buf[..end.min(buf.len())]).into_owned();
    let line = head_text.lines().next().unwrap_or_default();
    let mut parts = line.split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let head = method == "HEAD";
    let header = |name: &str| {
        head_text.lines().skip(1).find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_string())
        })
    };
    if method == "POST" {
        let len: usize = header("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        if len > 16 * 1024 {
            return respond(&mut s, 413, "text/plain", "form too large\n", false);
        }
        let mut body = buf.get(end..).unwrap_or_default().to_vec();
        while body.len() < len {
            let n = s.read(&mut chunk)?;
            if n == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..n]);
        }
        body.truncate(len);
        return post(&mut s, admin, target, &body, header);
    }
    if method == "PURGE" || method == "DELETE" {
        let (target, everywhere) = cluster_flag(target);
        if everywhere {
            // Every host's cache: with [admin] token, it needs the token (in a header).
            let given = header_token(&header);
            let req = crate::admin_action::Request {
                fields: &[],
                header_token: given.as_deref(),
                peer: s.peer_addr().ok(),
            };
            let allowed = crate::admin_action::allowed(admin.token.as_deref(), &req, "purge");
            if let Err((status, msg)) = allowed {
                return respond(&mut s, status, "text/plain", &msg, false);
            }
        }
        let client = crate::cluster::client();
        if everywhere && client.is_none() {
            // Checked before anything is done: no host could be sent it.
            let (status, json) = crate::cluster_events::no_cluster();
            return respond(&mut s, status, "application/json", &json, false);
        }
        // Taken before anything is done: "try again" must mean that nothing was.
        let slot = match everywhere.then(Slot::take) {
            Some(None) => return respond(&mut s, 503, "text/plain", BUSY, false),
            Some(Some(slot)) => Some(slot),
            None => None,
        };
        let (status, body) = crate::cache_purge::purge(&target);
        // Sent to every host unless the request itself is wrong (then no host could do it).
        let sendable = status != 400 && target.starts_with("/cache/") && target.len() > 7;
        let (Some(slot), Some(client), true) = (slot, client, sendable) else {
            return respond(&mut s, status, "text/plain", &body, false);
        };
        let target = target["/cache/".len()..].to_string();
        return send_later(
            &s,
            slot,
            move || crate::cluster_events::send(client, "purge", &target, (status, &body)),
            || {},
        );
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
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    match path {
        "/" | "/status" => {
            let q = crate::admin_action::fields(query);
            let get = |k: &str| {
                q.iter()
                    .find(|(n, _)| n == k)
                    .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
            };
            let refresh = get("refresh").and_then(|r| r.parse().ok()).unwrap_or(5u32);
            // The page carries the token in its forms only when it was opened with the right one.
            let token = get("token").filter(|t| admin.token.as_deref() == Some(t.as_str()));
            let page = crate::status_html::render(
                &admin.board.snapshot(),
                refresh,
                token.as_deref(),
                admin.token.is_some(),
            );
            respond(&mut s, 200, "text/html; charset=utf-8", &page, head)
        }
        "/status.json" => {
            let body = crate::status_json::render(&admin.board.snapshot());
            respond(&mut s, 200, "application/json", &body, head)
        }
        "/metrics" => {
            let mut body = metrics.render();
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs() as i64);
            body.push_str(&ringx_acme::global().render_metrics(now));
            body.push_str(&crate::cluster::render_metrics());
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
            "not found: try /, /status.json, /metrics, /healthz, POST /action, POST /drain or PURGE /cache/NAME?key=KEY\n",
            head,
        ),
    }
}

/// `POST /action`: the status page's forms (back to the page after an action that worked)
/// and scripts (the message as plain text).
fn post(
    s: &mut TcpStream,
    admin: &Admin,
    target: &str,
    body: &[u8],
    header: impl Fn(&str) -> Option<String>,
) -> std::io::Result<()> {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    if path != "/action" && path != "/drain" {
        return respond(s, 404, "text/plain", "POST /action or /drain only\n", false);
    }
    let mut fields = crate::admin_action::fields(query);
    fields.extend(crate::admin_action::fields(&String::from_utf8_lossy(body)));
    let header_token = header_token(&header);
    let req = crate::admin_action::Request {
        fields: &fields,
        header_token: header_token.as_deref(),
        peer: s.peer_addr().ok(),
    };
    if path == "/drain" {
        return drain(s, admin, &req);
    }
    let (status, msg) =
        crate::admin_action::run(&admin.board.metrics, admin.token.as_deref(), &req);
    let back = fields.iter().any(|(k, v)| k == "back" && v == b"1");
    if status == 200 && back {
        let token = fields
            .iter()
            .find(|(k, _)| k == "token")
            .map(|(_, v)| String::from_utf8_lossy(v).into_owned());
        let location = match token {
            Some(t) if !t.is_empty() => format!("/?token={}", encode(&t)),
            _ => "/".to_string(),
        };
        let out = format!(
            "HTTP/1.1 303 See Other\r\nLocation: {location}\r\nContent-Type: text/plain\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{msg}",
            msg.len()
        );
        return s.write_all(out.as_bytes());
    }
    respond(s, status, "text/plain", &msg, false)
}

/// The token of `X-Ringx-Token:` or `Authorization: Bearer`.
fn header_token(header: &impl Fn(&str) -> Option<String>) -> Option<String> {
    let bearer = header("authorization")
        .and_then(|a| a.strip_prefix("Bearer ").map(|t| t.trim().to_string()));
    header("x-ringx-token").or(bearer)
}

/// `POST /drain`: this host's graceful drain, as SIGTERM starts it; with `cluster=1`, every
/// host's. The answer is written before this host starts draining (it ends when done).
///
/// It needs `[admin] token`, and refuses when none is set: without one it would be a
/// plain form POST that any web page the operator opens could send to the admin address
/// (the drain cannot be undone, unlike the status page's actions).
fn drain(
    s: &mut TcpStream,
    admin: &Admin,
    req: &crate::admin_action::Request,
) -> std::io::Result<()> {
    let Some(token) = admin.token.as_deref() else {
        tracing::warn!(
            "admin: refused a drain from {}: no [admin] token is set",
            req.peer.map_or("?".to_string(), |p| p.to_string())
        );
        return respond(s, 403, "text/plain", DRAIN_NEEDS_A_TOKEN, false);
    };
    if let Err((status, msg)) = crate::admin_action::allowed(Some(token), req, "drain") {
        return respond(s, status, "text/plain", &msg, false);
    }
    let everywhere = req
        .fields
        .iter()
        .any(|(k, v)| k == "cluster" && is_yes(&String::from_utf8_lossy(v)));
    let peer = req.peer.map_or("?".to_string(), |p| p.to_string());
    if !everywhere {
        tracing::info!("admin: drain (from {peer})");
        let written = respond(s, 200, "text/plain", "draining\n", false);
        crate::cluster_events::drain_self();
        return written;
    }
    let Some(client) = crate::cluster::client() else {
        // No [cluster]: nothing is done.
        let (status, json) = crate::cluster_events::no_cluster();
        return respond(s, status, "application/json", &json, false);
    };
    if client.settings().events_secret.is_none() {
        let (status, json) = crate::cluster_events::drain_needs_secret();
        return respond(s, status, "application/json", &json, false);
    }
    let Some(slot) = Slot::take() else {
        // Nothing done, this host's drain included: "try again" says so.
        return respond(s, 503, "text/plain", BUSY, false);
    };
    tracing::info!("admin: drain of every host (from {peer})");
    send_later(
        s,
        slot,
        move || crate::cluster_events::send(client, "drain", "", (200, "draining")),
        crate::cluster_events::drain_self,
    )
}

const DRAIN_NEEDS_A_TOKEN: &str = "forbidden: POST /drain needs a token: set [admin] token = \
                                   \"...\" and send it (X-Ringx-Token:, Authorization: Bearer \
                                   or a token field)\n";

/// Requests sent to every host being answered, at most [`MAX_SENDING`] at a time.
static SENDING: AtomicUsize = AtomicUsize::new(0);
const MAX_SENDING: usize = 8;
const BUSY: &str = "too many requests to every host in flight; nothing done: try again\n";

/// One of the [`MAX_SENDING`] places, given back when dropped.
struct Slot;

impl Slot {
    /// A place, if one is free.
    fn take() -> Option<Slot> {
        if SENDING.fetch_add(1, Ordering::AcqRel) >= MAX_SENDING {
            SENDING.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(Slot)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        SENDING.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Answers `s` from a thread of its own with the JSON `send` makes: a purge or drain sent to
/// every host waits for their confirmations, and the listener (`/healthz` among the rest)
/// goes on meanwhile. `then` runs once the answer is written (or could not be), and only
/// when `send` ran.
fn send_later(
    s: &TcpStream,
    slot: Slot,
    send: impl FnOnce() -> (u16, String) + Send + 'static,
    then: fn(),
) -> std::io::Result<()> {
    let mut out = s.try_clone()?;
    let spawned = std::thread::Builder::new()
        .name("ringx-admin-send".into())
        .spawn(move || {
            let (status, json) = send();
            if let Err(e) = respond(&mut out, status, "application/json", &json, false) {
                tracing::debug!("admin: {e}");
            }
            drop(slot);
            then();
        });
    if let Err(e) = spawned {
        let mut s = s.try_clone()?;
        return respond(
            &mut s,
            503,
            "text/plain",
            &format!("cannot start a thread to send it to every host ({e}): try again\n"),
            false,
        );
    }
    Ok(())
}

fn is_yes(v: &str) -> bool {
    matches!(v, "1" | "true" | "yes" | "on")
}

/// The target without its `cluster` parameter, and whether that was `1` (`true`, `yes`,
/// `on`, or no value: the action is then sent to every host).
fn cluster_flag(target: &str) -> (String, bool) {
    let Some((path, query)) = target.split_once('?') else {
        return (target.to_string(), false);
    };
    let mut everywhere = false;
    let rest: Vec<&str> = query
        .split('&')
        .filter(|kv| match kv.split_once('=').unwrap_or((kv, "1")) {
            ("cluster", v) => {
                everywhere = is_yes(v);
                false
            }
            _ => true,
        })
        .collect();
    let rest = rest.join("&");
    if rest.is_empty() {
        (path.to_string(), everywhere)
    } else {
        (format!("{path}?{rest}"), everywhere)
    }
}

/// Percent-encodes what is not unreserved (RFC 3986).
fn encode(v: &str) -> String {
    v.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
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
        403 => "Forbidden",
        413 => "Content Too Large",
        404 => "Not Found",
        405 => "Method Not Allowed",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
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
    fn the_cluster_flag_is_taken_off_the_target() {
        use super::cluster_flag;
        assert_eq!(
            cluster_flag("/cache/c?key=%2Fa&cluster=1"),
            ("/cache/c?key=%2Fa".into(), true)
        );
        assert_eq!(
            cluster_flag("/cache/c?cluster=1"),
            ("/cache/c".into(), true)
        );
        assert_eq!(
            cluster_flag("/cache/c?cluster&key=x"),
            ("/cache/c?key=x".into(), true)
        );
        assert_eq!(
            cluster_flag("/cache/c?key=x&cluster=0"),
            ("/cache/c?key=x".into(), false)
        );
        assert_eq!(cluster_flag("/cache/c"), ("/cache/c".into(), false));
    }

    #[test]
    fn tokens_in_locations_are_encoded() {
        assert_eq!(super::encode("a b&c=d~"), "a%20b%26c%3Dd~");
    }
}
