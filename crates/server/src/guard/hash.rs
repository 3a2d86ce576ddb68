//! The password hashes of htpasswd files, verified: bcrypt (`bcrypt` crate), SHA-crypt
//! `$5$`/`$6$` (`sha-crypt`), and Apache's `$apr1$` / glibc's `$1$` MD5-crypt, written out here
//! over the `md-5` crate because no maintained crate verifies it (it is a fixed 1000-round
//! recipe, below); and what each costs, which decides where it is verified ([`slow`]).

use ringx_config::htpasswd::HashKind;

/// A verification estimated to take longer than this runs on the auth pool's threads
/// (`verify.rs`), not on the zone. Handing one over costs the zone a few microseconds (a push,
/// an unpark, the answer's wake-up, the request's head parsed again) and the request some tens
/// of microseconds of latency; below this a guess delays the zone's other requests by less
/// than a millisecond even when several arrive at once, so MD5-crypt (115 µs) and SHA-256-crypt
/// of up to about 3000 rounds stay inline, while bcrypt (900 µs at its lowest cost, 4; 54 ms
/// at `htpasswd -B -C 10`) and SHA-crypt at its default 5000 rounds (SHA-256 290 µs, SHA-512
/// 1 ms) go to the pool.
pub const INLINE_MAX_US: u64 = 200;

// What one verification costs, measured on this project's 2-core VM (AMD EPYC, release build,
// one core, 2026-12-01): bcrypt 53 µs per round of its 2^cost (cost 4: 0.9 ms, 10: 54 ms);
// SHA-crypt 24 µs plus 54 ns (SHA-256) or 200 ns (SHA-512) per round; MD5-crypt 115 µs (fixed).
const BCRYPT_ROUND_NS: u64 = 53_000;
const SHA_CRYPT_BASE_NS: u64 = 24_000;
const SHA256_ROUND_NS: u64 = 54;
const SHA512_ROUND_NS: u64 = 200;
const MD5_CRYPT_NS: u64 = 115_000;

/// Estimated microseconds one verification against `hash` takes on one core, from its
/// parameters (bcrypt's cost, SHA-crypt's rounds); a parameter that cannot be read counts as
/// the dearest.
pub fn cost_us(kind: HashKind, hash: &str) -> u64 {
    let ns = match kind {
        HashKind::Bcrypt => {
            // `$2y$NN$...`: 2^NN rounds of the expensive key schedule.
            let cost = hash.get(4..6).and_then(|c| c.parse::<u32>().ok());
            BCRYPT_ROUND_NS.saturating_mul(1u64 << cost.unwrap_or(31).min(31))
        }
        HashKind::Sha256Crypt => {
            SHA_CRYPT_BASE_NS + sha_rounds(hash).saturating_mul(SHA256_ROUND_NS)
        }
        HashKind::Sha512Crypt => {
            SHA_CRYPT_BASE_NS + sha_rounds(hash).saturating_mul(SHA512_ROUND_NS)
        }
        HashKind::Md5Crypt => MD5_CRYPT_NS,
    };
    ns / 1000
}

/// Whether verifying against `hash` is slow enough for the pool ([`INLINE_MAX_US`]).
pub fn slow(kind: HashKind, hash: &str) -> bool {
    cost_us(kind, hash) > INLINE_MAX_US
}

/// SHA-crypt's rounds: `$5$rounds=N$salt$...`, 5000 when not given, clamped to the
/// algorithm's 1000..=999999999.
fn sha_rounds(hash: &str) -> u64 {
    let Some(r) = hash.get(3..).and_then(|r| r.strip_prefix("rounds=")) else {
        return 5000;
    };
    let n = r.split('$').next().and_then(|n| n.parse::<u64>().ok());
    n.unwrap_or(999_999_999).clamp(1000, 999_999_999)
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

/// Hashes made with `openssl passwd` (-apr1, -1, -5, -6) and `htpasswd -B`, password
/// "secret".
#[cfg(test)]
pub(super) const VECTORS: [(&str, HashKind); 5] = [
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

#[cfg(test)]
mod tests {
    use super::*;

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
    fn slow_hashes_are_told_by_their_parameters() {
        use HashKind::*;
        let slow_of = |i: usize| slow(VECTORS[i].1, VECTORS[i].0);
        assert_eq!(
            (0..5).map(slow_of).collect::<Vec<_>>(),
            [false, false, true, true, true]
        );
        assert_eq!(cost_us(Bcrypt, "$2y$10$z5uzCcxtAI5NoIlyGoha/e"), 54_272);
        assert!(slow(Bcrypt, "$2y$04$x"), "bcrypt's lowest cost");
        assert!(slow(Bcrypt, "$2y$zz$x"), "unreadable: the dearest");
        assert!(!slow(Sha256Crypt, "$5$rounds=1000$salt$h"));
        assert!(!slow(Sha256Crypt, "$5$rounds=3000$salt$h"));
        assert!(slow(Sha256Crypt, "$5$rounds=4000$salt$h"));
        assert!(slow(Sha512Crypt, "$6$rounds=1000$salt$h"));
        assert_eq!(
            sha_rounds("$5$rounds=10$s$h"),
            1000,
            "the algorithm's least"
        );
        assert_eq!(sha_rounds("$5$rounds=x$s$h"), 999_999_999);
        assert_eq!(sha_rounds("$6$salt$h"), 5000);
    }
}
