//! Keys and certificates: the key and CSR of an order, what the CA sent turned into what
//! rustls serves, its validity and ARI identifier, and the certificates ringx makes itself
//! (the temporary self-signed one, tls-alpn-01's challenge certificate).

use std::sync::Arc;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use instant_acme::CertificateIdentifier;
use rcgen::{CertificateParams, CustomExtension, DistinguishedName, KeyPair};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// The key of an ordered certificate (`[acme] key_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyType {
    EcdsaP256,
    EcdsaP384,
    Rsa(u16),
}

impl KeyType {
    /// `key_type` as configured.
    pub fn parse(s: &str) -> Option<KeyType> {
        Some(match s {
            "ecdsa-p256" => KeyType::EcdsaP256,
            "ecdsa-p384" => KeyType::EcdsaP384,
            "rsa2048" => KeyType::Rsa(2048),
            "rsa3072" => KeyType::Rsa(3072),
            "rsa4096" => KeyType::Rsa(4096),
            _ => return None,
        })
    }

    /// A new key of this type.
    pub fn generate(self) -> Result<KeyPair, String> {
        let r = match self {
            KeyType::EcdsaP256 => KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256),
            KeyType::EcdsaP384 => KeyPair::generate_for(&rcgen::PKCS_ECDSA_P384_SHA384),
            KeyType::Rsa(bits) => {
                let size = match bits {
                    2048 => rcgen::RsaKeySize::_2048,
                    3072 => rcgen::RsaKeySize::_3072,
                    _ => rcgen::RsaKeySize::_4096,
                };
                KeyPair::generate_rsa_for(&rcgen::PKCS_RSA_SHA256, size)
            }
        };
        r.map_err(|e| format!("key generation: {e}"))
    }
}

/// A certificate's validity (seconds since the epoch) and its RFC 9773 identifier.
#[derive(Debug, Clone)]
pub struct Validity {
    pub not_before: i64,
    pub not_after: i64,
    /// `base64url(AKI keyIdentifier).base64url(serial)`; None when the leaf has no AKI.
    pub ari: Option<CertificateIdentifier<'static>>,
    /// The leaf's issuer, for logs.
    pub issuer: String,
}

impl Validity {
    /// Two thirds of the way through the lifetime: when renewal starts.
    pub fn two_thirds(&self) -> i64 {
        self.not_before + (self.not_after - self.not_before) * 2 / 3
    }
}

/// A certificate signing request for `names` with `key`.
pub fn csr(names: &[String], key: &KeyPair) -> Result<Vec<u8>, String> {
    let mut p = CertificateParams::new(names.to_vec()).map_err(|e| format!("CSR: {e}"))?;
    p.distinguished_name = DistinguishedName::new();
    let req = p.serialize_request(key).map_err(|e| format!("CSR: {e}"))?;
    Ok(req.der().to_vec())
}

/// The chain the CA sent (PEM, leaf first) and its key, as rustls serves them, with the
/// leaf's validity.
pub fn certified(
    chain_pem: &[u8],
    key_pem: &[u8],
) -> Result<(Arc<CertifiedKey>, Validity), String> {
    let chain: Result<Vec<CertificateDer<'static>>, _> =
        CertificateDer::pem_slice_iter(chain_pem).collect();
    let chain = chain.map_err(|e| format!("certificate PEM: {e}"))?;
    let leaf = chain.first().ok_or("no certificate in the PEM")?;
    let validity = validity(leaf)?;
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| format!("key PEM: {e}"))?;
    let signing = rustls::crypto::aws_lc_rs::sign::any_supported_type(&key)
        .map_err(|e| format!("key: {e}"))?;
    let ck = CertifiedKey::new(chain, signing);
    ck.keys_match()
        .map_err(|e| format!("the key does not match the certificate: {e}"))?;
    Ok((Arc::new(ck), validity))
}

/// The leaf's validity and ARI identifier.
pub fn validity(leaf: &CertificateDer<'_>) -> Result<Validity, String> {
    let (_, c) = x509_parser::parse_x509_certificate(leaf.as_ref())
        .map_err(|e| format!("certificate does not parse: {e}"))?;
    let v = c.validity();
    let aki = c
        .extensions()
        .iter()
        .find_map(|e| match e.parsed_extension() {
            x509_parser::extensions::ParsedExtension::AuthorityKeyIdentifier(a) => {
                a.key_identifier.as_ref().map(|k| k.0.to_vec())
            }
            _ => None,
        });
    let ari = aki.map(|aki| CertificateIdentifier {
        authority_key_identifier: URL_SAFE_NO_PAD.encode(aki).into(),
        serial: URL_SAFE_NO_PAD
            .encode(c.tbs_certificate.raw_serial())
            .into(),
    });
    Ok(Validity {
        not_before: v.not_before.timestamp(),
        not_after: v.not_after.timestamp(),
        ari,
        issuer: c.issuer().to_string(),
    })
}

fn to_certified(cert: rcgen::Certificate, key: &KeyPair) -> Result<Arc<CertifiedKey>, String> {
    let der = PrivateKeyDer::try_from(key.serialize_der()).map_err(|e| e.to_string())?;
    let signing = rustls::crypto::aws_lc_rs::sign::any_supported_type(&der)
        .map_err(|e| format!("key: {e}"))?;
    Ok(Arc::new(CertifiedKey::new(
        vec![cert.der().clone()],
        signing,
    )))
}

/// A self-signed certificate for `names`, served until the CA's arrives (a client sees an
/// untrusted certificate instead of no answer; `[acme] pending = "refuse"` turns it off).
pub fn self_signed(names: &[String]) -> Result<Arc<CertifiedKey>, String> {
    let key = KeyType::EcdsaP256.generate()?;
    let mut p = CertificateParams::new(names.to_vec()).map_err(|e| e.to_string())?;
    p.distinguished_name = DistinguishedName::new();
    p.distinguished_name
        .push(rcgen::DnType::CommonName, "ringx temporary certificate");
    let cert = p.self_signed(&key).map_err(|e| e.to_string())?;
    to_certified(cert, &key)
}

/// tls-alpn-01's certificate for `name` (RFC 8737 §3): self-signed, the name alone, and the
/// SHA-256 of the key authorization in the critical acmeIdentifier extension.
pub fn alpn_challenge(name: &str, digest: &[u8]) -> Result<Arc<CertifiedKey>, String> {
    let key = KeyType::EcdsaP256.generate()?;
    let mut p = CertificateParams::new(vec![name.to_string()]).map_err(|e| e.to_string())?;
    p.distinguished_name = DistinguishedName::new();
    p.custom_extensions = vec![CustomExtension::new_acme_identifier(digest)];
    let cert = p.self_signed(&key).map_err(|e| e.to_string())?;
    to_certified(cert, &key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn self_signed_round_trips_through_pem() {
        let key = KeyType::EcdsaP256.generate().unwrap();
        let p = CertificateParams::new(vec!["a.test".to_string()]).unwrap();
        let cert = p.self_signed(&key).unwrap();
        let (ck, v) = certified(cert.pem().as_bytes(), key.serialize_pem().as_bytes()).unwrap();
        assert_eq!(ck.cert.len(), 1);
        assert!(v.not_after > v.not_before);
        assert!(v.two_thirds() > v.not_before && v.two_thirds() < v.not_after);
        let other = KeyType::EcdsaP256.generate().unwrap();
        assert!(certified(cert.pem().as_bytes(), other.serialize_pem().as_bytes()).is_err());
    }

    #[test]
    fn key_types_and_challenge_certificate() {
        assert_eq!(KeyType::parse("rsa2048"), Some(KeyType::Rsa(2048)));
        assert_eq!(KeyType::parse("dsa"), None);
        let ck = alpn_challenge("a.test", &[7u8; 32]).unwrap();
        let (_, c) = x509_parser::parse_x509_certificate(ck.cert[0].as_ref()).unwrap();
        let ext = c
            .extensions()
            .iter()
            .find(|e| e.oid.to_id_string() == "1.3.6.1.5.5.7.1.31")
            .expect("acmeIdentifier");
        assert!(ext.critical);
        assert!(self_signed(&["a.test".into(), "b.test".into()]).is_ok());
        assert!(
            !csr(&["a.test".into()], &KeyType::EcdsaP256.generate().unwrap())
                .unwrap()
                .is_empty()
        );
    }
}
