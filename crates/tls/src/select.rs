//! One server's certificates, offered by what the client can verify: a server with an RSA
//! and an ECDSA certificate for the same names gives ECDSA to clients that accept it and RSA
//! to the rest (nginx does the same with two `ssl_certificate` lines).

use std::sync::Arc;

use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

/// A server's certificates, in the order they were configured.
#[derive(Debug)]
pub struct CertSet {
    keys: Vec<Arc<CertifiedKey>>,
}

impl CertSet {
    pub fn new(keys: Vec<Arc<CertifiedKey>>) -> CertSet {
        CertSet { keys }
    }

    /// The certificate for the client's most preferred signature scheme that one of the keys
    /// can sign with (clients list ECDSA before RSA, so a client that verifies both gets the
    /// cheaper ECDSA handshake); the first one at all when none can (the handshake then fails
    /// as it must, with an alert).
    pub fn choose(&self, schemes: &[rustls::SignatureScheme]) -> Option<Arc<CertifiedKey>> {
        if self.keys.len() > 1 {
            for s in schemes {
                let one = std::slice::from_ref(s);
                if let Some(k) = self
                    .keys
                    .iter()
                    .find(|k| k.key.choose_scheme(one).is_some())
                {
                    return Some(k.clone());
                }
            }
        }
        self.keys.first().cloned()
    }
}

impl ResolvesServerCert for CertSet {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.choose(hello.signature_schemes())
    }
}
