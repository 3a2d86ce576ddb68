//! Basic authentication (`auth_basic`) against an htpasswd file (the hashes: `hash.rs`).
//!
//! A password hash is made to be slow: bcrypt at cost 10 takes tens of milliseconds. nginx's
//! workers block in `crypt()` for it; here a slow hash ([`hash::slow`]: bcrypt, SHA-crypt at
//! its default rounds) is verified on the auth pool's threads (`verify.rs`) while the zone
//! serves its other requests, and the request waits for the answer as a `limit_req` delay
//! does (the answer lands in its `Progress`). Fast ones (MD5-crypt, SHA-crypt of few rounds)
//! are verified on the zone, where handing them over would cost about as much as they do.
//! Without a pool (`[runtime] auth_threads = 0`) everything is verified on the zone, as nginx
//! does.
//!
//! A zone also remembers the credentials it found right (a keyed 128-bit hash of the
//! `Authorization` value, for a minute, at most 4096 of them): a logged-in client costs one
//! verification per minute per zone, not one per request. Wrong passwords are not remembered,
//! so guessing stays as slow as the hash makes it; put a `limit_req` in front of such
//! locations.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use ringx_config::htpasswd::HashKind;

use super::hash::{self, verify_hash};
use super::verify::{Tag, ZoneVerify};
use crate::metrics::{bump, ZoneCounters};

/// How long a verified credential is trusted without verifying it again.
const REMEMBER: Duration = Duration::from_secs(60);
/// Credentials remembered per zone.
const REMEMBER_MAX: usize = 4096;

/// A user of the file.
struct Entry {
    kind: HashKind,
    hash: Arc<str>,
    /// Verified on the pool, not the zone ([`hash::slow`]).
    slow: bool,
}

/// A location's `auth_basic`: its users and the challenge it answers with.
pub struct BasicAuth {
    /// `WWW-Authenticate: Basic realm="..."` with CRLF.
    pub challenge: String,
    users: HashMap<String, Entry>,
    /// Tells this file's credentials apart from another's in a zone's memory (and from the
    /// same file's before a reload).
    id: u64,
}

/// What `auth_basic` says of a request.
#[derive(Debug, PartialEq, Eq)]
pub enum Checked {
    Pass,
    Refuse,
    /// Its password is being verified on the pool: look again when the answer is in.
    Wait,
    /// Every queue of the pool is full.
    Busy,
}

/// The verification of a request's credentials handed to the pool: their key, and the answer
/// once it came (None: still being verified). Kept in the request's `Progress`.
pub type Asked = Option<(u128, Option<bool>)>;

impl BasicAuth {
    pub fn load(realm: &str, path: &std::path::Path) -> Result<BasicAuth, String> {
        use std::sync::atomic::{AtomicU64, Ordering};
        static IDS: AtomicU64 = AtomicU64::new(1);
        let users = ringx_config::htpasswd::load(path)?;
        let users = users.into_iter().map(|u| {
            let e = Entry {
                kind: u.kind,
                slow: hash::slow(u.kind, &u.hash),
                hash: u.hash.into(),
            };
            (u.name, e)
        });
        Ok(BasicAuth {
            challenge: format!("WWW-Authenticate: Basic realm=\"{realm}\", charset=\"UTF-8\"\r\n"),
            users: users.collect(),
            id: IDS.fetch_add(1, Ordering::Relaxed),
        })
    }

    /// Whether the request's `Authorization` value names a user of the file with the right
    /// password: remembered, answered by the pool (`asked`), verified now, or handed to the
    /// pool (`tag`: who waits for it).
    pub fn check(
        &self,
        authorization: Option<&[u8]>,
        asked: &mut Asked,
        za: &mut ZoneAuth,
        (tag, now): (Tag, Instant),
        n: &ZoneCounters,
    ) -> Checked {
        let Some(v) = authorization else {
            return Checked::Refuse;
        };
        let mut key = Vec::with_capacity(v.len() + 8);
        key.extend_from_slice(&self.id.to_le_bytes());
        key.extend_from_slice(v);
        let k = super::key::hash128(&key);
        if za.ok.get(&k).is_some_and(|t| *t > now) {
            return Checked::Pass;
        }
        match *asked {
            Some((ak, Some(ok))) if ak == k => return za.answer(k, ok, now),
            Some((ak, None)) if ak == k => return Checked::Wait,
            _ => {}
        }
        let Some((u, pass)) = self.user(v) else {
            return Checked::Refuse;
        };
        if let (Some(pool), true) = (za.pool.as_mut(), u.slow) {
            return match pool.submit(tag, k, (u.kind, &u.hash), &pass) {
                Ok(()) => {
                    bump(&n.auth_pool, 1);
                    *asked = Some((k, None));
                    Checked::Wait
                }
                Err(_) => {
                    bump(&n.auth_busy, 1);
                    Checked::Busy
                }
            };
        }
        bump(&n.auth_inline, 1);
        let ok = verify_hash(u.kind, &u.hash, &pass);
        za.answer(k, ok, now)
    }

    /// The user the credentials name, and the password given.
    fn user(&self, v: &[u8]) -> Option<(&Entry, Vec<u8>)> {
        let b64 = strip_scheme(v)?;
        let mut raw = base64::engine::general_purpose::STANDARD.decode(b64).ok()?;
        let colon = raw.iter().position(|&b| b == b':')?;
        let u = std::str::from_utf8(&raw[..colon])
            .ok()
            .and_then(|n| self.users.get(n))?;
        Some((u, raw.split_off(colon + 1)))
    }
}

/// `Basic <credentials>`: the scheme is case-insensitive, spaces may pad.
fn strip_scheme(v: &[u8]) -> Option<&[u8]> {
    let v = v.trim_ascii();
    if v.len() < 6 || !v[..6].eq_ignore_ascii_case(b"basic ") {
        return None;
    }
    Some(v[6..].trim_ascii())
}

/// A zone's side of `auth_basic`: the credentials it verified lately, and its end of the
/// pool (None: every hash is verified on the zone).
#[derive(Default)]
pub struct ZoneAuth {
    ok: HashMap<u128, Instant>,
    pub pool: Option<ZoneVerify>,
}

impl ZoneAuth {
    /// A verification's answer for credentials `k`: remembered when right.
    fn answer(&mut self, k: u128, ok: bool, now: Instant) -> Checked {
        if !ok {
            return Checked::Refuse;
        }
        if self.ok.len() >= REMEMBER_MAX {
            self.ok.retain(|_, t| *t > now);
            if self.ok.len() >= REMEMBER_MAX {
                self.ok.clear();
            }
        }
        self.ok.insert(k, now + REMEMBER);
        Checked::Pass
    }
}

#[cfg(test)]
mod tests {
    use super::super::hash::VECTORS;
    use super::super::verify::{unstarted, Worker};
    use super::*;
    use ringx_engine::{ConnId, Waker};

    const TAG: Tag = Tag {
        conn: ConnId(3),
        gen: 1,
        stream: 0,
    };
    const ALICE: &[u8] = b"Basic YWxpY2U6c2VjcmV0"; // alice:secret
    const ALICE_WRONG: &[u8] = b"Basic YWxpY2U6c2VjcmV1"; // alice:secreu
    const BOB: &[u8] = b"Basic Ym9iOnNlY3JldA=="; // bob:secret

    /// alice's hash is VECTORS[i]; bob's is MD5-crypt (fast).
    fn auth(i: usize) -> (BasicAuth, crate::testkit::TempDir) {
        let text = format!("alice:{}\nbob:{}\n", VECTORS[i].0, VECTORS[0].0);
        let dir = crate::testkit::TempDir::new(&[("users", text.as_bytes())]);
        let path = format!("{}/users", dir.path());
        (
            BasicAuth::load("r", std::path::Path::new(&path)).unwrap(),
            dir,
        )
    }

    fn pooled() -> (ZoneAuth, Worker, Waker) {
        let w = Waker::new().unwrap();
        let (mut workers, mut ends) = unstarted(1, std::slice::from_ref(&w));
        let za = ZoneAuth {
            pool: ends.pop(),
            ..ZoneAuth::default()
        };
        (za, workers.remove(0), w)
    }

    #[test]
    fn credentials_are_checked_and_remembered() {
        let (a, _dir) = auth(0);
        let mut za = ZoneAuth::default();
        let n = ZoneCounters::default();
        let now = (TAG, Instant::now());
        let mut check = |v: Option<&[u8]>| a.check(v, &mut None, &mut za, now, &n);
        assert_eq!(check(Some(ALICE)), Checked::Pass);
        assert_eq!(check(Some(b"basic   YWxpY2U6c2VjcmV0 ")), Checked::Pass);
        assert_eq!(check(Some(ALICE_WRONG)), Checked::Refuse, "wrong password");
        assert_eq!(
            check(Some(b"Basic Y2Fyb2w6c2VjcmV0")),
            Checked::Refuse,
            "no such user"
        );
        assert_eq!(check(Some(b"Bearer YWxpY2U6c2VjcmV0")), Checked::Refuse);
        assert_eq!(check(Some(b"Basic !!!")), Checked::Refuse);
        assert_eq!(check(None), Checked::Refuse);
        assert_eq!(za.ok.len(), 2, "failures are not remembered");
        assert_eq!(n.auth_inline.load(std::sync::atomic::Ordering::Relaxed), 3);
    }

    #[test]
    fn a_slow_hash_is_verified_on_the_pool_once_and_its_answer_taken() {
        let (a, _dir) = auth(4); // bcrypt
        let (mut za, mut worker, _w) = pooled();
        let n = ZoneCounters::default();
        let now = (TAG, Instant::now());
        let mut asked: Asked = None;
        assert_eq!(
            a.check(Some(ALICE), &mut asked, &mut za, now, &n),
            Checked::Wait
        );
        let k = asked.expect("handed over").0;
        assert_eq!(asked, Some((k, None)));
        // Looked at again before the answer (a spurious resume): not handed over twice.
        assert_eq!(
            a.check(Some(ALICE), &mut asked, &mut za, now, &n),
            Checked::Wait
        );
        assert!(worker.run_one() && !worker.run_one(), "one job");
        let done = za.pool.as_mut().unwrap().take();
        assert_eq!(
            (done.len(), done[0].key, done[0].ok, done[0].tag),
            (1, k, true, TAG)
        );
        asked = Some((k, Some(true)));
        assert_eq!(
            a.check(Some(ALICE), &mut asked, &mut za, now, &n),
            Checked::Pass
        );
        // Remembered: the next request passes with nothing asked.
        assert_eq!(
            a.check(Some(ALICE), &mut None, &mut za, now, &n),
            Checked::Pass
        );
        // The fast hash of the same file is verified on the zone.
        assert_eq!(
            a.check(Some(BOB), &mut None, &mut za, now, &n),
            Checked::Pass
        );
        let r = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
        assert_eq!((r(&n.auth_pool), r(&n.auth_inline)), (1, 1));
    }

    #[test]
    fn a_wrong_password_is_refused_by_the_pool_and_not_remembered() {
        let (a, _dir) = auth(2); // SHA-256-crypt at 5000 rounds: slow
        let (mut za, mut worker, _w) = pooled();
        let n = ZoneCounters::default();
        let now = (TAG, Instant::now());
        let mut asked: Asked = None;
        assert_eq!(
            a.check(Some(ALICE_WRONG), &mut asked, &mut za, now, &n),
            Checked::Wait
        );
        worker.run_one();
        let d = za.pool.as_mut().unwrap().take()[0];
        assert!(!d.ok);
        asked = Some((d.key, Some(d.ok)));
        assert_eq!(
            a.check(Some(ALICE_WRONG), &mut asked, &mut za, now, &n),
            Checked::Refuse
        );
        assert!(za.ok.is_empty());
        // The answer is for those credentials only: others are verified on their own.
        asked = Some((d.key, Some(true)));
        assert_eq!(
            a.check(Some(ALICE), &mut asked, &mut za, now, &n),
            Checked::Wait
        );
        assert_ne!(asked.unwrap().0, d.key);
    }

    #[test]
    fn full_queues_answer_busy() {
        let (a, _dir) = auth(4);
        let (mut za, _worker, _w) = pooled();
        let n = ZoneCounters::default();
        let now = (TAG, Instant::now());
        let mut waiting = 0;
        while a.check(Some(ALICE), &mut None, &mut za, now, &n) == Checked::Wait {
            waiting += 1;
        }
        assert_eq!(waiting, super::super::verify::QUEUE);
        assert_eq!(
            a.check(Some(ALICE), &mut None, &mut za, now, &n),
            Checked::Busy
        );
        assert_eq!(n.auth_busy.load(std::sync::atomic::Ordering::Relaxed), 2);
    }
}
