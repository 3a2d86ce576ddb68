//! Basic authentication (`auth_basic`) against an htpasswd file: bcrypt (`bcrypt` crate),
//! SHA-crypt `$5$`/`$6$` (`sha-crypt`), and Apache's `$apr1$` / glibc's `$1$` MD5-crypt,
//! written out here over the `md-5` crate because no maintained crate verifies it (it is a
//! fixed 1000-round recipe, below).
//!
//! A password hash is made to be slow: bcrypt at cost 10 takes tens of milliseconds, during
//! which the zone serves nothing else (nginx's workers block in `crypt()` the same way). So a
//! zone remembers the credentials it verified (a keyed 128-bit hash of the `Authorization`
//! value, for a minute, at most 4096 of them): a logged-in client costs one verification per
//! minute per zone, not one per request. Wrong passwords are not remembered, so guessing
//! stays as slow as the hash makes it; put a `limit_req` in front of such locations.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use base64::Engine as _;
use ringx_config::htpasswd::{HashKind, User};

/// How long a verified credential is trusted without verifying it again.
const REMEMBER: Duration = Duration::from_secs(60);
/// Credentials remembered per zone.
const REMEMBER_MAX: usize = 4096;

/// A location's `auth_basic`: its users and the challenge it answers with.
pub struct BasicAuth {
    /// `WWW-Authenticate: Basic realm="..."` with CRLF.
    pub challenge: String,
    users: HashMap<String, User>,
    /// Tells this file's credentials apart from another's in a zone's memory (and from the
    /// same file's before a reload).
    id: u64,
}

impl BasicAuth {
    pub fn load(realm: &str, path: &std::path::Path) -> Result<BasicAuth, String> {
        use std::sync::atomic::{AtomicU64, Ordering};
        static IDS: AtomicU64 = AtomicU64::new(1);
        let users = ringx_config::htpasswd::load(path)?;
        Ok(BasicAuth {
            challenge: format!("WWW-Authenticate: Basic realm=\"{realm}\", charset=\"UTF-8\"\r\n"),
            users: users.into_iter().map(|u| (u.name.clone(), u)).collect(),
            id: IDS.fetch_add(1, Ordering::Relaxed),
        })
    }

    /// Whether the request's `Authorization` value names a user of the file with the right
    /// password.
    pub fn check(&self, authorization: Option<&[u8]>, mem: &mut Remembered, now: Instant) -> bool {
        let Some(v) = authorization else {
            return false;
        };
        let mut key = Vec::with_capacity(v.len() + 8);
        key.extend_from_slice(&self.id.to_le_bytes());
        key.extend_from_slice(v);
        let k = super::key::hash128(&key);
        if mem.ok.get(&k).is_some_and(|t| *t > now) {
            return true;
        }
        let ok = self.verify(v);
        if ok {
            if mem.ok.len() >= REMEMBER_MAX {
                mem.ok.retain(|_, t| *t > now);
                if mem.ok.len() >= REMEMBER_MAX {
                    mem.ok.clear();
                }
            }
            mem.ok.insert(k, now + REMEMBER);
        }
        ok
    }

    fn verify(&self, v: &[u8]) -> bool {
        let Some(b64) = strip_scheme(v) else {
            return false;
        };
        let Ok(raw) = base64::engine::general_purpose::STANDARD.decode(b64) else {
            return false;
        };
        let Some(colon) = raw.iter().position(|&b| b == b':') else {
            return false;
        };
        let (user, pass) = (&raw[..colon], &raw[colon + 1..]);
        let Some(u) = std::str::from_utf8(user)
            .ok()
            .and_then(|n| self.users.get(n))
        else {
            return false;
        };
        verify_hash(u.kind, &u.hash, pass)
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

/// Whether `pass` matches `hash` of `kind`.
pub fn verify_hash(kind: HashKind, hash: &str, pass: &[u8]) -> bool {
    match kind {
        HashKind::Bcrypt => bcrypt::verify(pass, hash).unwrap_or(false),
        HashKind::Sha256Crypt => {
            std::str::from_utf8(pass).is_ok_and(|p| sha_crypt::sha256_check(p, hash).is_ok())
        }
        HashKind::Sha512Crypt => {
            std::str::from_utf8(pass).is_ok_and(|p| sha_crypt::sha512_check(p, hash).is_ok())
        }
        HashKind::Md5Crypt => md5_crypt_check(pass, hash),
    }
}

/// Credentials a zone verified lately.
#[derive(Default)]
pub struct Remembered {
    ok: HashMap<u128, Instant>,
}

/// MD5-crypt (Poul-Henning Kamp's FreeBSD recipe; Apache's `$apr1$` differs only in the
/// magic string), compared in constant time.
fn md5_crypt_check(pass: &[u8], hash: &str) -> bool {
    let (magic, rest) = if let Some(r) = hash.strip_prefix("$apr1$") {
        ("$apr1$", r)
    } else if let Some(r) = hash.strip_prefix("$1$") {
        ("$1$", r)
    } else {
        return false;
    };
    let Some((salt, want)) = rest.split_once('$') else {
        return false;
    };
    let salt = &salt.as_bytes()[..salt.len().min(8)];
    let got = md5_crypt(pass, magic.as_bytes(), salt);
    got.len() == want.len()
        && got
            .bytes()
            .zip(want.bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

fn md5_crypt(pw: &[u8], magic: &[u8], salt: &[u8]) -> String {
    use md5::{Digest, Md5};
    let alt = Md5::new()
        .chain_update(pw)
        .chain_update(salt)
        .chain_update(pw)
        .finalize();
    let mut ctx = Md5::new();
    ctx.update(pw);
    ctx.update(magic);
    ctx.update(salt);
    let mut n = pw.len();
    while n > 0 {
        ctx.update(&alt[..n.min(16)]);
        n = n.saturating_sub(16);
    }
    let mut i = pw.len();
    while i > 0 {
        if i & 1 == 1 {
            ctx.update([0u8]);
        } else {
            ctx.update(&pw[..1]);
        }
        i >>= 1;
    }
    let mut fin = ctx.finalize();
    for r in 0..1000 {
        let mut c = Md5::new();
        if r & 1 == 1 {
            c.update(pw);
        } else {
            c.update(fin);
        }
        if r % 3 != 0 {
            c.update(salt);
        }
        if r % 7 != 0 {
            c.update(pw);
        }
        if r & 1 == 1 {
            c.update(fin);
        } else {
            c.update(pw);
        }
        fin = c.finalize();
    }
    const ITOA: &[u8; 64] = b"./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    let mut out = String::with_capacity(22);
    let mut put = |mut v: u32, n: usize| {
        for _ in 0..n {
            out.push(ITOA[(v & 0x3f) as usize] as char);
            v >>= 6;
        }
    };
    for (a, b, c) in [(0, 6, 12), (1, 7, 13), (2, 8, 14), (3, 9, 15), (4, 10, 5)] {
        put(
            (u32::from(fin[a]) << 16) | (u32::from(fin[b]) << 8) | u32::from(fin[c]),
            4,
        );
    }
    put(u32::from(fin[11]), 2);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hashes made with `openssl passwd` (-apr1, -1, -5, -6) and `htpasswd -B`, password
    /// "secret".
    const VECTORS: [(&str, HashKind); 5] = [
        ("$apr1$saltsalt$LrttParrLPdxvgutaSXWJ0", HashKind::Md5Crypt),
        ("$1$saltsalt$9xy1btjgzLYfb7hivXtC//", HashKind::Md5Crypt),
        (
            "$5$saltsalt$0IyaXrmV7.sGNS6tirgqHLqX/G.FBvgkYA.lpPdS5sA",
            HashKind::Sha256Crypt,
        ),
        (
            "$6$saltsalt$TVLlQcbpFVof5W3Yz4DTP6gRstiNuHwwTt6GLc1E5n0U0aDehy0S5knV8wiOQSpT0Y77vwPZN.Pq.H91p5hVO1",
            HashKind::Sha512Crypt,
        ),
        (
            "$2y$05$H7IFwCdtrVmKEL9fIYgjQu35VEe5eCMdSkZXuunwF24bO6NtSG9Da",
            HashKind::Bcrypt,
        ),
    ];

    #[test]
    fn every_hash_kind_verifies_and_refuses() {
        for (h, kind) in VECTORS {
            assert_eq!(HashKind::of(h).unwrap(), kind, "{h}");
            assert!(verify_hash(kind, h, b"secret"), "{h}");
            assert!(!verify_hash(kind, h, b"Secret"), "{h}");
            assert!(!verify_hash(kind, h, b""), "{h}");
        }
    }

    #[test]
    fn credentials_are_checked_and_remembered() {
        let dir = crate::testkit::TempDir::new(&[(
            "users",
            format!("alice:{}\n", VECTORS[0].0).as_bytes(),
        )]);
        let a =
            BasicAuth::load("r", std::path::Path::new(&format!("{}/users", dir.path()))).unwrap();
        let mut mem = Remembered::default();
        let now = Instant::now();
        let good = b"Basic YWxpY2U6c2VjcmV0"; // alice:secret
        assert!(a.check(Some(good), &mut mem, now));
        assert!(a.check(Some(b"basic   YWxpY2U6c2VjcmV0 "), &mut mem, now));
        assert_eq!(mem.ok.len(), 2);
        assert!(
            !a.check(Some(b"Basic YWxpY2U6c2VjcmV1"), &mut mem, now),
            "wrong password"
        );
        assert!(
            !a.check(Some(b"Basic Ym9iOnNlY3JldA=="), &mut mem, now),
            "no such user"
        );
        assert!(!a.check(Some(b"Bearer YWxpY2U6c2VjcmV0"), &mut mem, now));
        assert!(!a.check(Some(b"Basic !!!"), &mut mem, now));
        assert!(!a.check(None, &mut mem, now));
        assert_eq!(mem.ok.len(), 2, "failures are not remembered");
    }
}
