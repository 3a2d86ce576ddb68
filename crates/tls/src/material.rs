//! Certificates and keys from PEM files, with the checks an operator wants before a server
//! starts: the files exist and hold what they should, the key matches the certificate, the
//! certificate is valid now, and the chain is in order (leaf first, each certificate issued
//! by the next).

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, UnixTime};

/// What is wrong with a certificate or key file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MaterialError {
    /// The PEM file at fault.
    pub path: PathBuf,
    pub message: String,
}

impl fmt::Display for MaterialError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.message)
    }
}

impl std::error::Error for MaterialError {}

fn err(path: &Path, message: impl Into<String>) -> MaterialError {
    MaterialError {
        path: path.to_path_buf(),
        message: message.into(),
    }
}

/// The family of a certificate's key: a client that cannot verify one is offered another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKind {
    Rsa,
    Ecdsa,
    Ed25519,
    Other,
}

/// A loaded certificate chain with its signing key.
#[derive(Debug)]
pub struct Material {
    pub key: Arc<CertifiedKey>,
    pub kind: KeyKind,
    /// The leaf's subject, for logs.
    pub subject: String,
    /// When the leaf expires (seconds since the epoch).
    pub not_after: i64,
}

/// Reads every certificate in a PEM file, in order.
pub fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, MaterialError> {
    let bytes = std::fs::read(path).map_err(|e| err(path, format!("cannot read: {e}")))?;
    let certs: Result<Vec<_>, _> = CertificateDer::pem_slice_iter(&bytes).collect();
    let certs = certs.map_err(|e| err(path, format!("not a valid PEM certificate file: {e}")))?;
    if certs.is_empty() {
        return Err(err(
            path,
            "holds no certificate (expected -----BEGIN CERTIFICATE-----)",
        ));
    }
    Ok(certs)
}

/// Reads the private key of a PEM file (PKCS#8, PKCS#1 or SEC1).
pub fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, MaterialError> {
    let bytes = std::fs::read(path).map_err(|e| err(path, format!("cannot read: {e}")))?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| {
        err(
            path,
            format!("holds no usable private key (PKCS#8, RSA or EC PEM): {e}"),
        )
    })
}

/// Loads and checks a certificate chain and its key. `now` decides validity.
pub fn load(
    cert: &Path,
    key: &Path,
    provider: &CryptoProvider,
    now: UnixTime,
) -> Result<Material, MaterialError> {
    let chain = read_certs(cert)?;
    let der = read_key(key)?;
    let signing = provider
        .key_provider
        .load_private_key(der)
        .map_err(|e| err(key, format!("unsupported private key: {e}")))?;
    let kind = match signing.algorithm() {
        rustls::SignatureAlgorithm::RSA => KeyKind::Rsa,
        rustls::SignatureAlgorithm::ECDSA => KeyKind::Ecdsa,
        rustls::SignatureAlgorithm::ED25519 => KeyKind::Ed25519,
        _ => KeyKind::Other,
    };
    let (subject, not_after) = check_chain(cert, &chain, now)?;
    let certified = CertifiedKey::new(chain, signing);
    certified.keys_match().map_err(|e| {
        err(
            key,
            format!(
                "does not match the certificate in {} ({e}): the key and the certificate must \
                 be a pair",
                cert.display()
            ),
        )
    })?;
    Ok(Material {
        key: Arc::new(certified),
        kind,
        subject,
        not_after,
    })
}

/// The leaf's subject and expiry, once the chain passed: each certificate parses, is valid at
/// `now`, and is issued by the one after it.
pub fn check_chain(
    path: &Path,
    chain: &[CertificateDer<'_>],
    now: UnixTime,
) -> Result<(String, i64), MaterialError> {
    let now = now.as_secs() as i64;
    let mut parsed = Vec::with_capacity(chain.len());
    for (i, der) in chain.iter().enumerate() {
        let (_, c) = x509_parser::parse_x509_certificate(der.as_ref()).map_err(|e| {
            err(
                path,
                format!("certificate {} of the chain does not parse: {e}", i + 1),
            )
        })?;
        let v = c.validity();
        let which = if i == 0 {
            "the certificate".to_string()
        } else {
            format!("certificate {} of the chain ({})", i + 1, c.subject())
        };
        if v.not_before.timestamp() > now {
            return Err(err(
                path,
                format!("{which} is not valid yet: valid from {}", v.not_before),
            ));
        }
        if v.not_after.timestamp() < now {
            return Err(err(
                path,
                format!("{which} has expired: valid until {}", v.not_after),
            ));
        }
        parsed.push(c);
    }
    for (i, pair) in parsed.windows(2).enumerate() {
        if pair[0].issuer() != pair[1].subject() {
            let issuer_at = parsed.iter().position(|c| c.subject() == pair[0].issuer());
            let hint = match issuer_at {
                Some(j) => format!(
                    "its issuer is certificate {} of the file: put the leaf first and each \
                     issuer right after the certificate it signed",
                    j + 1
                ),
                None => "its issuer is not the next certificate, nor any in the file".into(),
            };
            return Err(err(
                path,
                format!(
                    "chain out of order: certificate {} ({}) is issued by {}, but certificate \
                     {} is {}; {hint}",
                    i + 1,
                    pair[0].subject(),
                    pair[0].issuer(),
                    i + 2,
                    pair[1].subject(),
                ),
            ));
        }
    }
    let leaf = &parsed[0];
    Ok((
        leaf.subject().to_string(),
        leaf.validity().not_after.timestamp(),
    ))
}

/// Reads CA certificates (for client or upstream verification).
pub fn load_roots(path: &Path) -> Result<rustls::RootCertStore, MaterialError> {
    let mut roots = rustls::RootCertStore::empty();
    for c in read_certs(path)? {
        roots
            .add(c)
            .map_err(|e| err(path, format!("not a usable CA certificate: {e}")))?;
    }
    Ok(roots)
}
