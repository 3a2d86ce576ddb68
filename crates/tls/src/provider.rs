//! The cryptography under rustls. Both of rustls's providers are built in and `[tls]
//! provider` picks one; the default is the one that measured faster on this machine
//! (bench/README.md, "HTTPS").

use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::server::ProducesTickets;

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

    /// The provider with its default suites: TLS 1.3 AES-256-GCM, AES-128-GCM and
    /// ChaCha20-Poly1305, and TLS 1.2 ECDHE with the same AEADs. That is nginx's default
    /// policy (`ssl_protocols TLSv1.2 TLSv1.3`, `ssl_ciphers HIGH:!aNULL:!MD5`) less what
    /// rustls never offers (CBC and non-forward-secret suites).
    pub fn crypto(self) -> Arc<CryptoProvider> {
        match self {
            Provider::AwsLc => {
                let base = rustls::crypto::aws_lc_rs::default_provider();
                Arc::new(CryptoProvider {
                    // The TLS 1.3 key schedule's HKDF keyed once per secret (hkdf.rs).
                    cipher_suites: crate::hkdf::aws_lc_suites(),
                    key_provider: &crate::rsa_key::RingRsa,
                    ..base
                })
            }
            Provider::Ring => Arc::new(rustls::crypto::ring::default_provider()),
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
