//! rustls's certificate resolver for a server whose certificate comes from ACME: a
//! ClientHello that offers only `acme-tls/1` is a CA validating a tls-alpn-01 challenge and
//! gets that challenge's certificate (none: the handshake fails, as it must for a name
//! ringx is not validating); any other gets the slot's certificate.

use std::sync::Arc;

use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use crate::shared::{Shared, Slot};

/// The ALPN protocol of tls-alpn-01 (RFC 8737).
pub const ACME_TLS_ALPN: &[u8] = b"acme-tls/1";

/// The resolver of one ACME server (shared by every zone's copy of its configuration).
#[derive(Debug)]
pub struct Resolver {
    slot: Arc<Slot>,
    shared: &'static Shared,
}

impl Resolver {
    pub fn new(slot: Arc<Slot>, shared: &'static Shared) -> Resolver {
        Resolver { slot, shared }
    }
}

impl ResolvesServerCert for Resolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let validating = hello
            .alpn()
            .is_some_and(|mut protos| protos.any(|p| p == ACME_TLS_ALPN));
        if validating {
            return self.shared.alpn_cert(hello.server_name()?);
        }
        self.slot.current()
    }
}
