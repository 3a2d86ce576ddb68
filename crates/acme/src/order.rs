//! One order carried out (RFC 8555 §7.4): every authorization's challenge answered in
//! `crate::shared` (or by the DNS hook) and announced, the order polled until ready,
//! finalized with a CSR for a new key, and the certificate fetched. The answers are taken
//! down when the order ends, however it ends. With `[cluster]` each answer is also posted
//! to every host through Redis before the CA is told (`crate::challenges_redis`), since
//! behind a load balancer the CA's validation may reach any of them.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use instant_acme::{
    Account, AuthorizationStatus, CertificateIdentifier, ChallengeType, Identifier, NewOrder,
    OrderStatus,
};

use crate::block::block_on;
use crate::certs::{self, KeyType};
use crate::challenges_redis::{Answer, Relay};
use crate::shared::Shared;

/// How a CA is to validate the names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Challenge {
    Http01,
    TlsAlpn01,
    Dns01,
}

/// How long an order may take before it is given up (and retried later).
const ORDER_DEADLINE: Duration = Duration::from_secs(300);

/// What an order needs.
pub struct Ctx<'a> {
    pub account: &'a Account,
    pub shared: &'static Shared,
    pub challenge: Challenge,
    pub key_type: KeyType,
    pub dns_hook: Option<&'a Path>,
    pub dns_wait: Duration,
    /// `[cluster]`: the answers posted to every host too.
    pub relay: Option<&'a Relay>,
}

/// A certificate obtained: the chain as the CA sent it, and its key (PEM).
pub struct Issued {
    pub chain_pem: String,
    pub key_pem: String,
}

/// Why an order failed.
#[derive(Debug)]
pub struct Failure {
    pub message: String,
    /// The CA said `rateLimited` (with its Retry-After, if it gave one).
    pub rate_limited: Option<Option<Duration>>,
}

impl From<instant_acme::Error> for Failure {
    fn from(e: instant_acme::Error) -> Failure {
        let rate_limited = match &e {
            instant_acme::Error::Api(p)
                if p.r#type.as_deref() == Some("urn:ietf:params:acme:error:rateLimited") =>
            {
                // The header of the response that carried the error (instant-acme keeps
                // none): our client noted it for this thread.
                Some(crate::http::last_retry_after())
            }
            _ => None,
        };
        Failure {
            message: e.to_string(),
            rate_limited,
        }
    }
}

impl From<&str> for Failure {
    fn from(message: &str) -> Failure {
        Failure::from(message.to_string())
    }
}

impl From<String> for Failure {
    fn from(message: String) -> Failure {
        Failure {
            message,
            rate_limited: None,
        }
    }
}

/// A challenge answer to take down when the order ends.
enum Posted {
    Http(String),
    Alpn(String),
    Dns(String, String),
    /// Posted to every host through Redis as well.
    Shared(Answer),
}

struct Cleanup<'a> {
    cx: &'a Ctx<'a>,
    posted: Vec<Posted>,
}

impl Drop for Cleanup<'_> {
    fn drop(&mut self) {
        for p in self.posted.drain(..) {
            match p {
                Posted::Http(token) => self.cx.shared.set_http01(&token, None),
                Posted::Alpn(name) => self.cx.shared.set_alpn(&name, None),
                Posted::Shared(a) => {
                    if let Some(r) = self.cx.relay {
                        if let Err(e) = r.withdraw(&a) {
                            tracing::info!(
                                "ACME: cannot take down {} on the other hosts ({e}); it \
                                 lapses there within {:?}",
                                a.target(),
                                crate::challenges_redis::TTL
                            );
                        }
                    }
                }
                Posted::Dns(fqdn, value) => {
                    if let Some(hook) = self.cx.dns_hook {
                        if let Err(e) = run_hook(hook, "remove", &fqdn, &value, DNS_HOOK_TIMEOUT) {
                            tracing::warn!("ACME: {e}; remove the record by hand");
                        }
                    }
                }
            }
        }
    }
}

/// How long the dns-01 hook may take to add or remove a record before it is killed.
pub const DNS_HOOK_TIMEOUT: Duration = Duration::from_secs(120);

/// Runs `HOOK add|remove FQDN VALUE`, killing it (and what it started, its process group)
/// when it has not exited within `timeout`: a hung DNS API must not stall the ACME thread.
fn run_hook(
    hook: &Path,
    op: &str,
    fqdn: &str,
    value: &str,
    timeout: Duration,
) -> Result<(), String> {
    use std::os::unix::process::CommandExt;
    let mut child = Command::new(hook)
        .args([op, fqdn, value])
        .stdin(std::process::Stdio::null())
        .process_group(0)
        .spawn()
        .map_err(|e| format!("dns_hook {}: {e}", hook.display()))?;
    let deadline = Instant::now() + timeout;
    let st = loop {
        match child.try_wait() {
            Ok(Some(st)) => break st,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Ok(None) => {
                // SAFETY: a signal to the process group the child leads (made above).
                unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
                let _ = child.wait();
                return Err(format!(
                    "dns_hook {} {op} {fqdn}: still running after {timeout:?}, killed; a hook \
                     must add or remove the TXT record and exit within that (try it by hand: \
                     {} {op} {fqdn} VALUE)",
                    hook.display(),
                    hook.display()
                ));
            }
            Err(e) => return Err(format!("dns_hook {}: {e}", hook.display())),
        }
    };
    match st.success() {
        true => Ok(()),
        false => Err(format!("dns_hook {} {op} {fqdn}: {st}", hook.display())),
    }
}

/// Orders a certificate for `names`; `replaces` names the certificate it renews (ARI).
pub fn obtain(
    cx: &Ctx<'_>,
    names: &[String],
    replaces: Option<CertificateIdentifier<'static>>,
) -> Result<Issued, Failure> {
    let ids: Vec<Identifier> = names.iter().map(|n| Identifier::Dns(n.clone())).collect();
    let mut new = NewOrder::new(&ids);
    if let Some(r) = replaces {
        new = new.replaces(r);
    }
    let mut order = block_on(cx.account.new_order(&new))?;
    let mut cleanup = Cleanup {
        cx,
        posted: Vec::new(),
    };
    {
        let mut authzs = order.authorizations();
        while let Some(a) = block_on(authzs.next()) {
            let mut a = a?;
            match a.status {
                AuthorizationStatus::Pending => {}
                AuthorizationStatus::Valid => continue,
                s => return Err(format!("authorization is {s:?}").into()),
            }
            let kind = match (a.wildcard, cx.challenge) {
                (true, _) | (_, Challenge::Dns01) => ChallengeType::Dns01,
                (_, Challenge::Http01) => ChallengeType::Http01,
                (_, Challenge::TlsAlpn01) => ChallengeType::TlsAlpn01,
            };
            let mut ch = a
                .challenge(kind.clone())
                .ok_or_else(|| format!("the CA offers no {kind:?} challenge"))?;
            let ka = ch.key_authorization();
            let name = match ch.identifier().identifier {
                Identifier::Dns(d) => d.clone(),
                other => return Err(format!("identifier {other:?}").into()),
            };
            let answer = match kind {
                ChallengeType::Http01 => {
                    cx.shared.set_http01(&ch.token, Some(ka.as_str()));
                    cleanup.posted.push(Posted::Http(ch.token.clone()));
                    Some(Answer::Http01(ch.token.clone()))
                }
                ChallengeType::TlsAlpn01 => {
                    let cert = certs::alpn_challenge(&name, ka.digest().as_ref())?;
                    cx.shared.set_alpn(&name, Some(cert));
                    cleanup.posted.push(Posted::Alpn(name.clone()));
                    Some(Answer::TlsAlpn01(name.clone()))
                }
                _ => {
                    let hook = cx.dns_hook.ok_or("dns-01 without dns_hook")?;
                    let fqdn = format!("_acme-challenge.{name}");
                    let value = ka.dns_value();
                    run_hook(hook, "add", &fqdn, &value, DNS_HOOK_TIMEOUT)?;
                    cleanup.posted.push(Posted::Dns(fqdn, value));
                    std::thread::sleep(cx.dns_wait);
                    None
                }
            };
            if let (Some(a), Some(r)) = (answer, cx.relay) {
                share(cx, r, &a, ka.as_str());
                cleanup.posted.push(Posted::Shared(a));
            }
            tracing::debug!(name = %name, "ACME: {kind:?} answer posted");
            block_on(ch.set_ready())?;
        }
    }
    let start = Instant::now();
    let mut delay = Duration::from_millis(200);
    let mut wait = |what: &str| -> Result<(), Failure> {
        if start.elapsed() > ORDER_DEADLINE {
            return Err(format!("the order is still {what} after {ORDER_DEADLINE:?}").into());
        }
        std::thread::sleep(delay);
        delay = (delay * 2).min(Duration::from_secs(5));
        Ok(())
    };
    loop {
        let st = block_on(order.refresh())?;
        match st.status {
            OrderStatus::Ready | OrderStatus::Valid | OrderStatus::Processing => break,
            OrderStatus::Invalid => {
                let why = match &st.error {
                    Some(p) => p.to_string(),
                    None => challenge_errors(&mut order),
                };
                return Err(format!("the order is invalid: {why}").into());
            }
            OrderStatus::Pending => wait("pending")?,
        }
    }
    let key = cx.key_type.generate()?;
    if order.state().status == OrderStatus::Ready {
        block_on(order.finalize_csr(&certs::csr(names, &key)?))?;
    }
    let chain_pem = loop {
        match block_on(order.certificate())? {
            Some(c) => break c,
            None => wait("processing")?,
        }
    };
    drop(cleanup);
    Ok(Issued {
        chain_pem,
        key_pem: key.serialize_pem(),
    })
}

/// Posts an answer to every host before the CA is told to validate; when that fails (Redis
/// down, an ACL without these keys), this host alone answers, as without `[cluster]`.
fn share(cx: &Ctx<'_>, r: &Relay, a: &Answer, key_auth: &str) {
    use std::sync::atomic::Ordering::Relaxed;
    let c = &cx.shared.counters;
    match r.post(a, key_auth) {
        Ok(o) if o.missing.is_empty() => {
            c.shared_posted.fetch_add(1, Relaxed);
            tracing::debug!(
                "ACME: {} posted to every host ({} confirmed)",
                a.target(),
                o.confirmed.len()
            );
        }
        Ok(o) => {
            c.shared_unconfirmed.fetch_add(1, Relaxed);
            tracing::warn!(
                "ACME: {} posted to every host, but [{}] did not confirm within {:?}: a \
                 validation that reaches them fails (the order is then retried)",
                a.target(),
                o.missing.join(" "),
                r.wait
            );
        }
        Err(e) => {
            c.shared_failed.fetch_add(1, Relaxed);
            tracing::warn!(
                "ACME: cannot post {} to the other hosts ({e}); only this host answers it",
                a.target()
            );
        }
    }
}

/// What the CA said of each failed challenge of an invalid order (its authorizations read
/// again), for the log: the operator's clue (a port not reached, a wrong answer).
fn challenge_errors(order: &mut instant_acme::Order) -> String {
    let mut why = Vec::new();
    let mut authzs = order.authorizations();
    while let Some(Ok(mut a)) = block_on(authzs.next()) {
        let Ok(st) = block_on(a.refresh()) else {
            continue;
        };
        for c in &st.challenges {
            if let Some(e) = &c.error {
                why.push(format!("{}: {:?}: {e}", st.identifier(), c.r#type));
            }
        }
    }
    match why.is_empty() {
        true => "an authorization failed".into(),
        false => why.join("; "),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn hook(name: &str, body: &str) -> std::path::PathBuf {
        let p = std::env::temp_dir().join(format!("ringx-hook-{name}-{}", std::process::id()));
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    #[test]
    fn the_dns_hook_runs_fails_and_times_out() {
        let ok = hook("ok", "[ \"$1 $2 $3\" = \"add _acme-challenge.a.test v\" ]");
        let t = Duration::from_secs(10);
        assert_eq!(
            run_hook(&ok, "add", "_acme-challenge.a.test", "v", t),
            Ok(())
        );
        let e = run_hook(&ok, "remove", "_acme-challenge.a.test", "v", t).unwrap_err();
        assert!(
            e.contains("remove _acme-challenge.a.test: exit status: 1"),
            "{e}"
        );
        // A hung hook, with a child of its own: both killed at the deadline.
        let hung = hook("hung", "sleep 60 & sleep 60");
        let start = Instant::now();
        let e = run_hook(&hung, "add", "x.test", "v", Duration::from_millis(300)).unwrap_err();
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{:?}",
            start.elapsed()
        );
        assert!(
            e.contains("still running after 300ms, killed") && e.contains("by hand"),
            "{e}"
        );
        let missing = std::path::Path::new("/nonexistent/hook");
        assert!(run_hook(missing, "add", "x", "v", t)
            .unwrap_err()
            .contains("/nonexistent/hook"));
        for p in [ok, hung] {
            let _ = std::fs::remove_file(p);
        }
    }
}
