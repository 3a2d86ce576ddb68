//! The TLS 1.3 key schedule's HKDF, keyed once per secret, on *ring*'s HMAC.
//!
//! rustls's aws-lc-rs suites expand every label through aws-lc's `HKDF_expand`, which keys a
//! fresh HMAC each time: two extra SHA-384 compressions (the key's inner and outer pads) for
//! every label. A full handshake expands about twenty labels from about eight secrets, and
//! HKDF was over a quarter of a full handshake's instructions (callgrind, `bench/README.md`).
//! rustls's own [`HkdfUsingHmac`] keys an HMAC once per secret and signs each label from
//! that state. The HMAC under it is *ring*'s: its keyed state is a plain value copied per
//! signature, where aws-lc's goes through `HMAC_CTX_copy_ex` and the EVP layer, and it
//! measured a quarter cheaper per key-and-sign here (bench/README.md, "HTTPS"). Same
//! primitive, same output: the tests check RFC 5869's vectors and equality with rustls's
//! suites over random inputs.

use std::sync::OnceLock;

use ring::hmac;
use rustls::crypto::hmac::{Hmac, Key, Tag};
use rustls::crypto::tls13::HkdfUsingHmac;
use rustls::{SupportedCipherSuite, Tls13CipherSuite};

use crate::wipe::Wiped;

/// An HMAC whose key is set up once ([`Hmac::with_key`]) and then signs many messages.
struct RingHmac(hmac::Algorithm);

/// The keyed HMAC state, a plain value in *ring*, holds what the secret keys: wiped when the
/// key schedule drops it.
struct RingKey(Wiped<hmac::Key>);

impl Hmac for RingHmac {
    fn with_key(&self, key: &[u8]) -> Box<dyn Key> {
        Box::new(RingKey(Wiped::new(hmac::Key::new(self.0, key))))
    }

    fn hash_output_len(&self) -> usize {
        self.0.digest_algorithm().output_len()
    }
}

impl Key for RingKey {
    fn sign_concat(&self, first: &[u8], middle: &[&[u8]], last: &[u8]) -> Tag {
        let mut ctx = hmac::Context::with_key(&self.0);
        ctx.update(first);
        for m in middle {
            ctx.update(m);
        }
        ctx.update(last);
        Tag::new(ctx.sign().as_ref())
    }

    fn tag_len(&self) -> usize {
        self.0.algorithm().digest_algorithm().output_len()
    }
}

static HMAC_SHA256: RingHmac = RingHmac(hmac::HMAC_SHA256);
static HMAC_SHA384: RingHmac = RingHmac(hmac::HMAC_SHA384);
static HKDF_SHA256: HkdfUsingHmac<'static> = HkdfUsingHmac(&HMAC_SHA256);
static HKDF_SHA384: HkdfUsingHmac<'static> = HkdfUsingHmac(&HMAC_SHA384);

/// `suite` with the HKDF above, for the TLS 1.3 suites whose hash it has; others as they are.
fn rekeyed(suite: SupportedCipherSuite) -> SupportedCipherSuite {
    let SupportedCipherSuite::Tls13(t) = suite else {
        return suite;
    };
    let hkdf: &'static HkdfUsingHmac<'static> = match t.common.hash_provider.output_len() {
        32 => &HKDF_SHA256,
        48 => &HKDF_SHA384,
        _ => return suite,
    };
    // Built once per process (`aws_lc_suites` below), so the leak is one small struct per suite.
    let t: &'static Tls13CipherSuite = Box::leak(Box::new(Tls13CipherSuite {
        common: rustls::CipherSuiteCommon {
            suite: t.common.suite,
            hash_provider: t.common.hash_provider,
            confidentiality_limit: t.common.confidentiality_limit,
        },
        hkdf_provider: hkdf,
        aead_alg: t.aead_alg,
        quic: t.quic,
    }));
    SupportedCipherSuite::Tls13(t)
}

/// rustls's aws-lc-rs suites with the TLS 1.3 ones' HKDF keyed once per secret.
pub(crate) fn aws_lc_suites() -> Vec<SupportedCipherSuite> {
    static SUITES: OnceLock<Vec<SupportedCipherSuite>> = OnceLock::new();
    SUITES
        .get_or_init(|| {
            let base = rustls::crypto::aws_lc_rs::default_provider().cipher_suites;
            base.into_iter().map(rekeyed).collect()
        })
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::crypto::tls13::Hkdf;

    fn suite(s: SupportedCipherSuite) -> &'static Tls13CipherSuite {
        match s {
            SupportedCipherSuite::Tls13(t) => t,
            _ => unreachable!(),
        }
    }

    #[test]
    fn rfc5869_case_1() {
        // RFC 5869, A.1 (SHA-256): IKM 0x0b x 22, salt 0x00..0x0c, info 0xf0..0xf9, L = 42.
        let ikm = [0x0b; 22];
        let salt: Vec<u8> = (0..=0x0c).collect();
        let info: Vec<u8> = (0xf0..=0xf9).collect();
        let x = HKDF_SHA256.extract_from_secret(Some(&salt), &ikm);
        let mut okm = [0u8; 42];
        x.expand_slice(&[&info], &mut okm).unwrap();
        let want =
            "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865";
        let got: String = okm.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn the_same_key_schedule_as_rustls() {
        use aws_lc_rs::rand::{SecureRandom, SystemRandom};
        let rng = SystemRandom::new();
        let ours = crate::Provider::AwsLc.crypto();
        for theirs in rustls::crypto::aws_lc_rs::default_provider().cipher_suites {
            let SupportedCipherSuite::Tls13(a) = theirs else {
                continue;
            };
            let b = ours
                .cipher_suites
                .iter()
                .map(|s| suite(*s))
                .find(|s| s.common.suite == a.common.suite)
                .expect("every TLS 1.3 suite kept");
            assert!(!std::ptr::eq(a.hkdf_provider, b.hkdf_provider), "rekeyed");
            for _ in 0..50 {
                let mut salt = [0u8; 48];
                let mut secret = [0u8; 48];
                let mut info = [0u8; 40];
                rng.fill(&mut salt).unwrap();
                rng.fill(&mut secret).unwrap();
                rng.fill(&mut info).unwrap();
                let (x, y) = (
                    a.hkdf_provider.extract_from_secret(Some(&salt), &secret),
                    b.hkdf_provider.extract_from_secret(Some(&salt), &secret),
                );
                assert_eq!(
                    x.expand_block(&[&info[..7], &info[7..]]).as_ref(),
                    y.expand_block(&[&info[..7], &info[7..]]).as_ref()
                );
                let (mut o1, mut o2) = ([0u8; 100], [0u8; 100]);
                x.expand_slice(&[&info], &mut o1).unwrap();
                y.expand_slice(&[&info], &mut o2).unwrap();
                assert_eq!(o1, o2);
                let z1 = a.hkdf_provider.extract_from_zero_ikm(Some(&salt));
                let z2 = b.hkdf_provider.extract_from_zero_ikm(Some(&salt));
                assert_eq!(
                    z1.expand_block(&[&info]).as_ref(),
                    z2.expand_block(&[&info]).as_ref()
                );
                let okm = x.expand_block(&[b"k"]);
                assert_eq!(
                    a.hkdf_provider.hmac_sign(&okm, &info).as_ref(),
                    b.hkdf_provider.hmac_sign(&okm, &info).as_ref()
                );
            }
        }
    }
}
