//! The cryptography under rustls. Both of rustls's providers are built in and `[tls]
//! provider` picks one; the default is the one that measured faster on this machine
//! (bench/README.md, "HTTPS").

use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::server::ProducesTickets;
use rustls::{CipherSuite, SupportedCipherSuite};

/// A rustls crypto provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Provider {
    /// AWS-LC (BoringSSL's descendant): assembly for AES-GCM, X25519 and P-256. RSA
    /// signatures and the TLS 1.3 key schedule's HMAC are *ring*'s, which measured cheaper
    /// per handshake here (rsa_key.rs, hkdf.rs).
    #[default]
    AwsLc,
    /// *ring*.
    Ring,
}

impl Provider {
    pub fn parse(name: &str) -> Option<Provider> {
        match name {
            "aws-lc-rs" => Some(Provider::AwsLc),
            "ring" => Some(Provider::Ring),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Provider::AwsLc => "aws-lc-rs",
            Provider::Ring => "ring",
        }
    }

    /// The provider with its default suites: TLS 1.3 AES-128-GCM, AES-256-GCM and
    /// ChaCha20-Poly1305, and TLS 1.2 ECDHE with the same AEADs, in that order
    /// (`preferred_order`). That is nginx's default policy (`ssl_protocols TLSv1.2
    /// TLSv1.3`, `ssl_ciphers HIGH:!aNULL:!MD5`) less what rustls never offers (CBC and
    /// non-forward-secret suites).
    pub fn crypto(self) -> Arc<CryptoProvider> {
        match self {
            Provider::AwsLc => {
                let base = rustls::crypto::aws_lc_rs::default_provider();
                Arc::new(CryptoProvider {
                    // The TLS 1.3 key schedule's HKDF keyed once per secret (hkdf.rs).
                    cipher_suites: preferred_order(crate::hkdf::aws_lc_suites()),
                    key_provider: &crate::rsa_key::RingRsa,
                    ..base
                })
            }
            Provider::Ring => {
                let base = rustls::crypto::ring::default_provider();
                Arc::new(CryptoProvider {
                    cipher_suites: preferred_order(base.cipher_suites.clone()),
                    ..base
                })
            }
        }
    }

    /// A ticket key generator's product: tickets sealed with a fresh random key.
    pub(crate) fn ticketer(self) -> Result<Arc<dyn ProducesTickets>, rustls::Error> {
        match self {
            Provider::AwsLc => rustls::crypto::aws_lc_rs::Ticketer::new(),
            Provider::Ring => rustls::crypto::ring::Ticketer::new(),
        }
    }
}

/// The server's order of `suites` (the server picks, `sites.rs`): TLS 1.3 before 1.2, and
/// within each AES-128-GCM, then AES-256-GCM, then ChaCha20-Poly1305, the order of
/// Mozilla's intermediate configuration and of Go's and BoringSSL's servers on AES hardware.
/// rustls lists AES-256-GCM first. AES-128 runs 10 rounds to AES-256's 14, and its suites'
/// SHA-256 key schedule has the SHA extensions of current x86 and ARM CPUs where
/// AES-256-GCM's SHA-384 has none; QUIC's key schedule derives more keys than TLS over TCP
/// does (bench/README.md, "HTTP/3").
fn preferred_order(mut suites: Vec<SupportedCipherSuite>) -> Vec<SupportedCipherSuite> {
    suites.sort_by_key(|s| {
        let tls12 = matches!(s, SupportedCipherSuite::Tls12(_));
        (tls12, aead_rank(s.suite()))
    });
    suites
}

/// Where a suite's AEAD stands in [`preferred_order`].
fn aead_rank(s: CipherSuite) -> u8 {
    match s {
        CipherSuite::TLS13_AES_128_GCM_SHA256
        | CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256
        | CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 => 0,
        CipherSuite::TLS13_AES_256_GCM_SHA384
        | CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384
        | CipherSuite::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384 => 1,
        _ => 2,
    }
}
