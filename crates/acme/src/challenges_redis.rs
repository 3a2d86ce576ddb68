//! Challenge answers a fleet shares (`[cluster]`, issue 42). Behind a load balancer the CA's
//! validation may reach any host, not only the one that ordered: http-01's
//! `GET /.well-known/acme-challenge/TOKEN` on port 80, tls-alpn-01's handshake with ALPN
//! `acme-tls/1`. As certmagic's distributed solver does with its storage, the host that
//! orders puts each answer in Redis before it tells the CA to validate, and every host
//! answers from it:
//!
//! 1. [`Relay::post`]: `SET PREFIX acme/challenges/http-01/TOKEN KEYAUTH PX 360000` (for
//!    tls-alpn-01, `.../tls-alpn-01/NAME`: the key authorization is all a host needs to make
//!    the challenge certificate, RFC 8737, under a throwaway key of its own), then the event
//!    `acme-challenge` with the target `http-01/TOKEN` sent to every host
//!    (`ringx_cluster::broadcast`, on `PREFIX events`);
//! 2. [`receive`], on each host's subscriber thread: the key read, the answer put in that
//!    host's [`Shared`] (where its zones find it exactly as they find the host's own: one
//!    lock-free load), and confirmed;
//! 3. the ordering host waits up to `[cluster] confirm_timeout` until every host alive has
//!    confirmed, and only then tells the CA. When the order ends, however it ends,
//!    [`Relay::withdraw`] deletes the key and sends `acme-challenge-done`; each host takes the
//!    answer down ([`forget`]). One not taken down (a message lost) lapses with the key's time
//!    to live, on every host.
//!
//! Why a copy on every host fed through pub/sub, rather than a look in Redis when the CA's
//! request arrives at a host that has no answer of its own:
//! - tls-alpn-01 is answered in rustls's certificate resolver, a synchronous call in the
//!   middle of the zone's handshake: it cannot wait for Redis without stalling the zone's
//!   event loop, and parking a handshake would be a new state in every TLS transport;
//! - the ordering host knows that every host alive holds the answer before the CA is told,
//!   so a validation never races a lookup (Let's Encrypt validates from several vantage
//!   points at once: they may reach several hosts, and all of them answer);
//! - a request for a token nobody posted (scanners walk `/.well-known/`) costs a map lookup
//!   as before, never a Redis round trip that strangers could make every host do.
//!
//! The price: a host whose subscription is down when an answer is posted misses it (pub/sub
//! keeps nothing). The ordering host logs it as missing; a validation that reached it fails
//! and the order is retried with ACME's backoff, posting afresh.
//!
//! Without Redis (down, or an ACL that refuses these keys), posting fails at once, is logged
//! and counted, and the order goes on: the ordering host answers its own challenges as a
//! host without `[cluster]` does.

use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use ringx_cluster::broadcast::{self, Outcome};
use ringx_cluster::{Client, Error, Value};

use crate::certs;
use crate::shared::Shared;

/// The event that posts an answer, and the one that takes it down.
pub const POST: &str = "acme-challenge";
pub const DONE: &str = "acme-challenge-done";
/// How long an answer lives in Redis and in a copy on another host: the longest an order
/// takes (`order::ORDER_DEADLINE`, 300 s) and a minute.
pub const TTL: Duration = Duration::from_secs(360);

/// One challenge's answer, by what a validation names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// http-01: the token in the path.
    Http01(String),
    /// tls-alpn-01: the name in the SNI.
    TlsAlpn01(String),
}

impl Answer {
    /// The event's target, and the key's end: `http-01/TOKEN`, `tls-alpn-01/NAME`.
    pub fn target(&self) -> String {
        match self {
            Answer::Http01(t) => format!("http-01/{t}"),
            Answer::TlsAlpn01(n) => format!("tls-alpn-01/{n}"),
        }
    }

    /// The answer a target names; None for anything else (another program may publish on
    /// the channel, so nothing is taken that could not be a token or a DNS name).
    pub fn parse(target: &[u8]) -> Option<Answer> {
        let (kind, id) = std::str::from_utf8(target).ok()?.split_once('/')?;
        match kind {
            "http-01" if is_b64url(id) => Some(Answer::Http01(id.into())),
            "tls-alpn-01" if is_dns_name(id) => Some(Answer::TlsAlpn01(id.into())),
            _ => None,
        }
    }

    /// Its key in Redis, under `[cluster] prefix`.
    pub fn key(&self, c: &Client) -> String {
        c.key(&format!("acme/challenges/{}", self.target()))
    }
}

/// base64url without padding (RFC 8555 tokens and thumbprints), 1 to 256 characters.
fn is_b64url(s: &str) -> bool {
    (1..=256).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// A lower-case DNS name as the ACME thread orders it (no wildcard: those are dns-01's).
fn is_dns_name(s: &str) -> bool {
    (1..=253).contains(&s.len())
        && s.split('.').all(|l| {
            (1..=63).contains(&l.len())
                && l.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        })
}

/// A key authorization, `TOKEN.THUMBPRINT` (RFC 8555 §8.1); for http-01, of that token.
fn is_key_auth(ka: &str, a: &Answer) -> bool {
    match ka.split_once('.') {
        Some((token, thumb)) if is_b64url(token) && is_b64url(thumb) => match a {
            Answer::Http01(t) => t == token,
            Answer::TlsAlpn01(_) => true,
        },
        _ => false,
    }
}

/// What posts this host's answers for the others: its cluster client and host id, and how
/// long it waits for their confirmations.
#[derive(Debug, Clone)]
pub struct Relay {
    pub client: Client,
    pub host_id: String,
    pub wait: Duration,
}

impl Relay {
    /// Puts the answer `key_auth` in Redis (with [`TTL`]) and has every host take it; waits,
    /// `wait` at most, for the confirmations of every host alive. An error when Redis failed:
    /// then only this host answers.
    pub fn post(&self, a: &Answer, key_auth: &str) -> Result<Outcome, Error> {
        let c = &self.client;
        let key = a.key(c);
        let ttl = TTL.as_millis().to_string();
        let set = [
            &b"SET"[..],
            key.as_bytes(),
            key_auth.as_bytes(),
            b"PX",
            ttl.as_bytes(),
        ];
        match c.call(&set, c.timeout())? {
            Value::Simple(s) if s == "OK" => {}
            other => return Err(Error::Reply(format!("SET {key} answered {other:?}"))),
        }
        broadcast::broadcast(c, &self.host_id, POST, a.target().as_bytes(), self.wait)
    }

    /// Deletes the answer from Redis and has every host take it down (not waiting for them:
    /// one that does not lets it lapse).
    pub fn withdraw(&self, a: &Answer) -> Result<(), Error> {
        let c = &self.client;
        let key = a.key(c);
        c.call(&[b"DEL", key.as_bytes()], c.timeout())?;
        broadcast::broadcast(
            c,
            &self.host_id,
            DONE,
            a.target().as_bytes(),
            Duration::ZERO,
        )
        .map(|_| ())
    }
}

/// Another host posted the answer `target` names: read from Redis and put in `shared` until
/// [`TTL`] from now. Runs on the subscriber's thread. The status and text its confirmation
/// carries: 200 taken; 404 nothing in Redis (taken down already, or lapsed); 400 not an
/// answer; 503 Redis failed.
pub fn receive(client: &Client, shared: &Shared, target: &[u8]) -> (u16, String) {
    let refused = |status, why: String| {
        shared.counters.shared_refused.fetch_add(1, Relaxed);
        (status, why)
    };
    let Some(a) = Answer::parse(target) else {
        return refused(400, "not an ACME challenge's answer".into());
    };
    let key = a.key(client);
    let ka = match client.call(&[b"GET", key.as_bytes()], client.timeout()) {
        Ok(Value::Bulk(v)) => String::from_utf8(v).unwrap_or_default(),
        Ok(Value::Nil) => return refused(404, format!("no {key} in Redis")),
        Ok(other) => return refused(502, format!("GET {key} answered {other:?}")),
        Err(e) => return refused(503, format!("cannot read {key}: {e}")),
    };
    if !is_key_auth(&ka, &a) {
        return refused(400, format!("{key} holds no key authorization for it"));
    }
    let until = Instant::now() + TTL;
    match &a {
        Answer::Http01(token) => shared.set_http01_from_peer(token, &ka, until),
        Answer::TlsAlpn01(name) => {
            let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, ka.as_bytes());
            match certs::alpn_challenge(name, digest.as_ref()) {
                Ok(cert) => shared.set_alpn_from_peer(name, cert, until),
                Err(e) => return refused(500, format!("challenge certificate: {e}")),
            }
        }
    }
    shared.counters.shared_received.fetch_add(1, Relaxed);
    (200, format!("answering {}", a.target()))
}

/// Another host's order ended: its answer taken down here (never this host's own).
pub fn forget(shared: &Shared, target: &[u8]) -> (u16, String) {
    let gone = match Answer::parse(target) {
        Some(Answer::Http01(token)) => shared.take_down_peer_http01(&token),
        Some(Answer::TlsAlpn01(name)) => shared.take_down_peer_alpn(&name),
        None => return (400, "not an ACME challenge's answer".into()),
    };
    match gone {
        true => (200, "taken down".into()),
        false => (404, "no such answer here".into()),
    }
}

#[cfg(test)]
#[path = "challenges_redis_tests.rs"]
mod tests;
