//! Purges and drains sent to every host (`?cluster=1` on the admin port, issue 42): this
//! host's name in them (`[cluster] host_id`), its subscriber (`ringx_cluster::Subscriber`)
//! and what it does with each event it receives, and the admin's answer to one it sends.
//! The same subscriber takes the ACME challenge answers another host's order posts
//! (`ringx_acme::challenges_redis`), so that this host answers the CA's validation too.
//!
//! The host asked applies the action itself first (so that it is done even when Redis is
//! not there), then publishes it and waits up to `confirm_timeout` for the confirmations;
//! its own subscriber, knowing the message by its id, confirms without applying it again
//! (another process with the same host id applies it). A drain is applied last on the
//! host asked: after its answer is written, since the process ends when the drain is done.

use std::sync::Mutex;
use std::time::Duration;

use ringx_acme::challenges_redis;
use ringx_cluster::broadcast::{broadcast, Outcome};
use ringx_cluster::{Applied, Client, Event, Handler, Subscriber};
use ringx_config::Config;

use crate::status_json::string;

struct Running {
    host_id: String,
    confirm_timeout: Duration,
    _sub: Subscriber,
}

static RUNNING: Mutex<Option<Running>> = Mutex::new(None);

/// `[cluster] host_id`, or `HOSTNAME:ADMIN_PORT` (`HOSTNAME` without `[admin]`).
pub fn host_id(cfg: &Config) -> Option<String> {
    let c = cfg.cluster.as_ref()?.get_ref();
    if let Some(h) = &c.host_id {
        return Some(h.get_ref().clone());
    }
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| ringx_config::cluster::is_host_id(h))
        .unwrap_or_else(|| "localhost".into());
    Some(match &cfg.admin {
        Some(a) => format!("{name}:{}", a.listen.get_ref().port()),
        None => name,
    })
}

/// Starts the subscriber for `client` (none: stops it). A reload keeps a running one unless
/// the host id changed; the subscriber follows new Redis settings by itself.
pub fn start(cfg: &Config, client: Option<&Client>) {
    let mut cur = RUNNING.lock().unwrap_or_else(|e| e.into_inner());
    let (Some(client), Some(id)) = (client, host_id(cfg)) else {
        *cur = None;
        return;
    };
    let confirm_timeout = cfg.cluster.as_ref().map_or(Duration::from_secs(2), |c| {
        c.get_ref().confirm_timeout.get_ref().0
    });
    if let Some(r) = cur.as_mut().filter(|r| r.host_id == id) {
        r.confirm_timeout = confirm_timeout;
        return;
    }
    let c = client.clone();
    let handler: Handler = std::sync::Arc::new(move |ev, auth| apply(Some(&c), ev, auth));
    match Subscriber::start(client.clone(), id.clone(), handler) {
        Ok(sub) => {
            tracing::info!("cluster: this host is {id:?} in purges and drains sent to every host");
            *cur = Some(Running {
                host_id: id,
                confirm_timeout,
                _sub: sub,
            });
        }
        Err(e) => {
            tracing::error!("cluster: cannot start the subscriber thread: {e}");
            *cur = None;
        }
    }
}

/// What this host does with an event another process sent (the subscriber confirms this
/// process's own without handing them over: the admin request that sent one applied it).
/// A drain only when `authenticated` (its MAC under `[cluster] events_secret` checked):
/// otherwise anyone who can publish in Redis could stop every host.
fn apply(client: Option<&Client>, ev: &Event, authenticated: bool) -> Applied {
    let done = |status, text: &str| Applied {
        status,
        text: text.into(),
        then: None,
    };
    match ev.action.as_str() {
        "purge" => {
            let target = String::from_utf8_lossy(&ev.target);
            let (status, text) = crate::cache_purge::purge(&format!("/cache/{target}"));
            done(status, &text)
        }
        "drain" if !authenticated => {
            tracing::warn!(
                "cluster: refused a drain from host {} (message {}): a drain sent through \
                 Redis needs [cluster] events_secret, the same on every host",
                ev.origin,
                ev.id
            );
            done(403, NOT_AUTHENTICATED)
        }
        "drain" => Applied {
            status: 200,
            text: "draining".into(),
            then: Some(Box::new(drain_self)),
        },
        // Another host's ACME order: its challenge's answer, so that this host answers the
        // CA's validation too (read from Redis by this, the subscriber's thread; the zones
        // then find it as they find this host's own), and taken down when the order ends.
        challenges_redis::POST => match client {
            Some(c) => {
                let (status, text) = challenges_redis::receive(c, ringx_acme::global(), &ev.target);
                done(status, &text)
            }
            None => done(503, "no cluster client here"),
        },
        challenges_redis::DONE => {
            let (status, text) = challenges_redis::forget(ringx_acme::global(), &ev.target);
            done(status, &text)
        }
        other => done(400, &format!("unknown action {other:?}")),
    }
}

const NOT_AUTHENTICATED: &str = "refused: a drain sent through Redis needs [cluster] \
                                 events_secret on every host";

/// The answer to `POST /drain?cluster=1` without `[cluster] events_secret` (checked
/// before anything is done: 400, nothing done).
pub fn drain_needs_secret() -> (u16, String) {
    (
        400,
        "{\"error\":\"a drain with cluster=1 needs [cluster] events_secret, the same on every \
         host: without it the other hosts refuse a drain sent through Redis; nothing done\"}\n"
            .into(),
    )
}

/// Starts this process's graceful drain as SIGTERM does (the control thread takes the
/// signal: it stops accepting, `/healthz` answers 503, and the process ends when the
/// requests in flight have, or at `drain_timeout`).
pub fn drain_self() {
    tracing::info!("cluster: draining this host");
    // SAFETY: kill(2) with this process's own id and a signal number; it touches no memory.
    // Every thread blocks SIGTERM, so it waits for the control thread's sigtimedwait.
    unsafe {
        libc::kill(libc::getpid(), libc::SIGTERM);
    }
}

/// Sends `action` on `target` to every host, this one having done it with the result
/// `local`; (HTTP status, JSON answer). 200: every host alive confirmed ([`Outcome::ok`]);
/// 504: some did not within `confirm_timeout`, or are unreachable; 503: it could not be sent (Redis unavailable), the local part
/// done all the same; 400: no `[cluster]`.
pub fn send(client: Client, action: &str, target: &str, local: (u16, &str)) -> (u16, String) {
    let (id, wait) = {
        let cur = RUNNING.lock().unwrap_or_else(|e| e.into_inner());
        match cur.as_ref() {
            Some(r) => (r.host_id.clone(), r.confirm_timeout),
            None => return not_running(action, target, local),
        }
    };
    let r = broadcast(&client, &id, action, target.as_bytes(), wait);
    match &r {
        Ok(o) if o.ok() => tracing::info!(
            "admin: {action} {target:?} sent to every host (message {}): {} confirmed",
            o.id,
            o.confirmed.len()
        ),
        Ok(o) => tracing::warn!(
            "admin: {action} {target:?} sent to every host (message {}): not confirmed \
             within {wait:?} by [{}], nor by [{}] (no heartbeat for over 7 s); {} of the {} \
             subscribers reached did not confirm under a host id of their own",
            o.id,
            o.missing.join(" "),
            o.unreachable.join(" "),
            o.unconfirmed_receivers(),
            o.receivers
        ),
        Err(e) => tracing::warn!(
            "admin: {action} {target:?} done on this host only: cannot send it to the others: {e}"
        ),
    }
    answer(action, target, &id, local, r.map_err(|e| e.to_string()))
}

/// The answer to `cluster=1` on a host without `[cluster]` (checked before anything is
/// done: 400, nothing done).
pub fn no_cluster() -> (u16, String) {
    (
        400,
        "{\"error\":\"cluster=1 needs a [cluster] section: this host shares nothing; nothing \
         done\"}\n"
            .into(),
    )
}

/// `[cluster]` is there but its subscriber is not (its thread could not be started): done
/// on this host only.
fn not_running(action: &str, target: &str, local: (u16, &str)) -> (u16, String) {
    let why = "this host's subscriber is not running: see the log line \"cannot start the \
               subscriber thread\"";
    (
        503,
        format!(
            "{}\"cluster\":{{\"ok\":false,\"error\":{}}}}}\n",
            head(action, target, None, local),
            string(&format!("not sent to the other hosts: {why}"))
        ),
    )
}

fn result(status: u16, text: &str) -> String {
    format!("\"status\":{status},\"result\":{}", string(text.trim_end()))
}

/// The answer's start: what was asked, this host's id, what was done here.
fn head(action: &str, target: &str, host: Option<&str>, local: (u16, &str)) -> String {
    format!(
        "{{\"action\":{},\"target\":{},\"host\":{},\"local\":{{{}}},",
        string(action),
        string(target),
        host.map_or("null".into(), string),
        result(local.0, local.1)
    )
}

/// The JSON answer.
fn answer(
    action: &str,
    target: &str,
    host: &str,
    local: (u16, &str),
    r: Result<Outcome, String>,
) -> (u16, String) {
    let head = head(action, target, Some(host), local);
    match r {
        Err(e) => (
            503,
            format!(
                "{head}\"cluster\":{{\"ok\":false,\"error\":{}}}}}\n",
                string(&format!("not sent to the other hosts: {e}"))
            ),
        ),
        Ok(o) => {
            let confirmed: Vec<String> = o
                .confirmed
                .iter()
                .map(|(h, v)| {
                    let (status, text) = v.split_once(' ').unwrap_or((v, ""));
                    format!(
                        "{{\"host\":{},{}}}",
                        string(h),
                        result(status.parse().unwrap_or(0), text)
                    )
                })
                .collect();
            let list = |v: &[String]| v.iter().map(|h| string(h)).collect::<Vec<_>>().join(",");
            let ok = o.ok();
            let body = format!(
                "{head}\"cluster\":{{\"ok\":{ok},\"id\":{},\"receivers\":{},\
                 \"unconfirmed_receivers\":{},\"confirmed\":[{}],\"missing\":[{}],\
                 \"unreachable\":[{}],\"error\":{}}}}}\n",
                string(&o.id),
                o.receivers,
                o.unconfirmed_receivers(),
                confirmed.join(","),
                list(&o.missing),
                list(&o.unreachable),
                o.error.as_deref().map_or("null".into(), string)
            );
            (if ok { 200 } else { 504 }, body)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_list_who_confirmed_and_who_is_missing() {
        let o = Outcome {
            id: "1f".into(),
            receivers: 2,
            confirmed: [
                ("a".to_string(), "200 applied".to_string()),
                ("b".to_string(), "404 no such entry".to_string()),
            ]
            .into(),
            missing: vec!["c".into()],
            unreachable: vec!["d".into()],
            error: None,
        };
        let (status, body) = answer("purge", "c?key=%2Fa", "a", (200, "purged\n"), Ok(o));
        assert_eq!(status, 504);
        assert_eq!(
            body,
            "{\"action\":\"purge\",\"target\":\"c?key=%2Fa\",\"host\":\"a\",\"local\":{\"status\":200,\
             \"result\":\"purged\"},\"cluster\":{\"ok\":false,\"id\":\"1f\",\"receivers\":2,\
             \"unconfirmed_receivers\":0,\"confirmed\":[{\"host\":\"a\",\"status\":200,\"result\":\"applied\"},{\"host\":\"b\",\
             \"status\":404,\"result\":\"no such entry\"}],\"missing\":[\"c\"],\
             \"unreachable\":[\"d\"],\"error\":null}}\n"
        );
        // Nobody missing, but 3 subscribers reached and 2 confirmations: two processes
        // under one host id wrote one field. Not every host is known to have done it.
        let o = Outcome {
            id: "2f".into(),
            receivers: 3,
            confirmed: [
                ("a".to_string(), "200 applied".to_string()),
                ("b".to_string(), "200 purged".to_string()),
            ]
            .into(),
            missing: vec![],
            unreachable: vec![],
            error: None,
        };
        let (status, body) = answer("purge", "c", "a", (200, "purged\n"), Ok(o));
        assert_eq!(status, 504, "{body}");
        assert!(
            body.contains(
                "\"ok\":false,\"id\":\"2f\",\"receivers\":3,\"unconfirmed_receivers\":1,"
            ),
            "{body}"
        );
        // Everyone alive confirmed, but a host seen within the hour has no heartbeat now: it
        // may serve what was purged.
        let o = Outcome {
            id: "3f".into(),
            receivers: 1,
            confirmed: [("a".to_string(), "200 applied".to_string())].into(),
            missing: vec![],
            unreachable: vec!["b".into()],
            error: None,
        };
        let (status, body) = answer("purge", "c", "a", (200, "purged\n"), Ok(o));
        assert_eq!(status, 504, "{body}");
        assert!(
            body.contains("\"missing\":[],\"unreachable\":[\"b\"],"),
            "{body}"
        );
        let (status, body) = not_running("purge", "c", (200, "purged 3 entries of c\n"));
        assert_eq!(status, 503);
        assert_eq!(
            body,
            "{\"action\":\"purge\",\"target\":\"c\",\"host\":null,\"local\":{\"status\":200,\
             \"result\":\"purged 3 entries of c\"},\"cluster\":{\"ok\":false,\"error\":\"not sent \
             to the other hosts: this host's subscriber is not running: see the log line \
             \\\"cannot start the subscriber thread\\\"\"}}\n"
        );
        let (status, body) = answer("drain", "", "a", (200, "draining"), Err("down".into()));
        assert_eq!(status, 503);
        assert!(
            body.ends_with(
                "\"cluster\":{\"ok\":false,\"error\":\"not sent to the other hosts: down\"}}\n"
            ),
            "{body}"
        );
    }

    #[test]
    fn a_host_applies_what_others_sent_whatever_their_id() {
        let ev = |origin: &str, action: &str| Event {
            id: "1".into(),
            origin: origin.into(),
            sent_ms: 0,
            action: action.into(),
            target: b"nope".to_vec(),
        };
        // A purge with a MAC or without.
        for authenticated in [false, true] {
            let a = apply(None, &ev("other", "purge"), authenticated);
            assert_eq!(
                (a.status, a.text.as_str()),
                (404, "no proxy_cache_path named \"nope\"\n")
            );
        }
        assert_eq!(apply(None, &ev("other", "reboot"), true).status, 400);
        // Another host's ACME challenge: read from Redis through the client (none here), and
        // taken down (none here to take down); neither one needs a MAC.
        let mut ch = ev("other", challenges_redis::POST);
        ch.target = b"http-01/tok".to_vec();
        assert_eq!(apply(None, &ch, false).status, 503);
        ch.action = challenges_redis::DONE.into();
        assert_eq!(apply(None, &ch, false).status, 404);
        ch.target = b"nope".to_vec();
        assert_eq!(apply(None, &ch, true).status, 400);
        assert!(apply(None, &ev("other", "drain"), true).then.is_some());
        // A drain without a MAC checked under events_secret: refused, nothing done.
        let a = apply(None, &ev("other", "drain"), false);
        assert!(a.then.is_none());
        assert_eq!((a.status, a.text.as_str()), (403, NOT_AUTHENTICATED));
    }
}
