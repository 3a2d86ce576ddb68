//! TLS settings: a `[[server]]`'s `tls` (certificates, client certificates) and the global
//! `[tls]` section (sessions, handshake budget).
//!
//! ```toml
//! [[server]]
//! listen = ["0.0.0.0:443"]
//! server_name = ["example.com", "*.example.com"]
//! tls = { cert = "/etc/ringx/example.pem", key = "/etc/ringx/example.key" }
//! # or an RSA and an ECDSA certificate for the same names, chosen per client:
//! # tls = [{ cert = "rsa.pem", key = "rsa.key" }, { cert = "ec.pem", key = "ec.key" }]
//! # or the full form, with client certificates (mTLS):
//! # tls = { certs = [{ cert = "ec.pem", key = "ec.key" }], client_ca = "ca.pem", verify = "required" }
//!
//! [tls]
//! session_cache = 20000        # TLS sessions remembered per zone (session IDs)
//! session_tickets = true       # stateless resumption, valid in every zone
//! provider = "aws-lc-rs"       # or "ring"
//! ticket_key_rotate = "6h"     # a ticket key encrypts this long, then decrypts as long again
//!                              # (with [cluster], the keys are shared by every host: docs/cluster.md)
//! handshake_share = 0.5        # most of a zone's time that handshakes may take
//! ktls = "auto"                # the kernel seals records where it can (kTLS), or "off"
//! prefer_server_ciphers = true # ringx's suite order decides (AES-128-GCM, AES-256-GCM,
//!                              # ChaCha20-Poly1305); false: the client's order does
//! ```
//!
//! The files are only named here; reading and checking them (a key that does not match its
//! certificate, an expired certificate, a chain out of order) is the server's, with the span of
//! the entry kept for `FILE:LINE:COL`.

use std::path::PathBuf;

use serde::Deserialize;
use toml::Spanned;

use crate::error::{ConfigError, Source};
use crate::units::Dur;

/// A certificate chain (leaf first) and its private key, PEM files.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CertKey {
    pub cert: Spanned<PathBuf>,
    pub key: Spanned<PathBuf>,
}

/// A server's `tls` value as written: one pair, a list of pairs, or the full table.
#[derive(Debug)]
pub enum TlsValue {
    List(Vec<Spanned<CertKey>>),
    Table(TlsTable),
}

// Not `#[serde(untagged)]`: an untagged enum buffers the value first, and toml's `Spanned`
// (which the file positions in errors come from) cannot be read back from that buffer.
impl<'de> Deserialize<'de> for TlsValue {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct TlsValueVisitor;
        impl<'de> serde::de::Visitor<'de> for TlsValueVisitor {
            type Value = TlsValue;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a table { cert = \"...\", key = \"...\" } or a list of them")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<TlsValue, A::Error> {
                let mut v = Vec::new();
                while let Some(e) = seq.next_element()? {
                    v.push(e);
                }
                Ok(TlsValue::List(v))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<TlsValue, A::Error> {
                TlsTable::deserialize(serde::de::value::MapAccessDeserializer::new(map))
                    .map(TlsValue::Table)
            }
        }
        d.deserialize_any(TlsValueVisitor)
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsTable {
    pub cert: Option<Spanned<PathBuf>>,
    pub key: Option<Spanned<PathBuf>>,
    #[serde(default)]
    pub certs: Vec<Spanned<CertKey>>,
    /// CA certificates that client certificates must chain to.
    pub client_ca: Option<Spanned<PathBuf>>,
    /// `"required"`: no handshake without a valid client certificate; `"optional"`: one is
    /// asked for and verified if sent.
    pub verify: Option<Spanned<String>>,
    /// The certificate comes from the `[acme]` CA, for the server's names
    /// (`crate::acme`), instead of files.
    pub acme: Option<Spanned<bool>>,
}

/// Whether and how client certificates are verified.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientVerify {
    Required,
    Optional,
}

/// A server's TLS settings, checked.
#[derive(Debug, Clone)]
pub struct ServerTls {
    /// Where `tls` is in the file (for errors about its files).
    pub span: std::ops::Range<usize>,
    pub certs: Vec<Spanned<CertKey>>,
    pub client_ca: Option<Spanned<PathBuf>>,
    pub verify: Option<ClientVerify>,
    /// The certificate comes from ACME (`certs` is then empty).
    pub acme: bool,
}

impl TlsValue {
    /// Whether the certificate comes from ACME (`tls = { acme = true }`).
    pub fn is_acme(&self) -> bool {
        match self {
            TlsValue::List(_) => false,
            TlsValue::Table(t) => t.acme.as_ref().is_some_and(|a| *a.get_ref()),
        }
    }

    /// The CA file client certificates must chain to, where the server asks for them.
    pub fn client_ca(&self) -> Option<&Spanned<PathBuf>> {
        match self {
            TlsValue::List(_) => None,
            TlsValue::Table(t) => t.client_ca.as_ref(),
        }
    }

    /// The settings, or what is wrong with them.
    pub fn resolve(
        &self,
        span: std::ops::Range<usize>,
        src: &Source,
    ) -> Result<ServerTls, ConfigError> {
        let t = match self {
            TlsValue::List(certs) => return ServerTls::check(span, certs.clone(), None, None, src),
            TlsValue::Table(t) => t,
        };
        if let Some(a) = t.acme.as_ref().filter(|a| *a.get_ref()) {
            if t.cert.is_some() || t.key.is_some() || !t.certs.is_empty() {
                return Err(src.err(
                    a.span(),
                    "tls has acme = true and certificate files: the certificate comes from one or the other",
                ));
            }
        }
        let mut certs = t.certs.clone();
        match (&t.cert, &t.key) {
            (Some(c), Some(k)) => certs.insert(
                0,
                Spanned::new(
                    c.span().start..k.span().end.max(c.span().end),
                    CertKey {
                        cert: c.clone(),
                        key: k.clone(),
                    },
                ),
            ),
            (Some(c), None) => {
                return Err(src.err(c.span(), "tls has a cert but no key: add key = \"...\""))
            }
            (None, Some(k)) => {
                return Err(src.err(k.span(), "tls has a key but no cert: add cert = \"...\""))
            }
            (None, None) => {}
        }
        let verify = match &t.verify {
            None => None,
            Some(v) => Some(match v.get_ref().as_str() {
                "required" => ClientVerify::Required,
                "optional" => ClientVerify::Optional,
                other => {
                    return Err(src.err(
                        v.span(),
                        format!("verify = {other:?}: use \"required\" or \"optional\""),
                    ))
                }
            }),
        };
        let acme = self.is_acme();
        ServerTls::check_acme(span, certs, t.client_ca.clone(), verify, acme, src)
    }
}

impl ServerTls {
    fn check(
        span: std::ops::Range<usize>,
        certs: Vec<Spanned<CertKey>>,
        client_ca: Option<Spanned<PathBuf>>,
        verify: Option<ClientVerify>,
        src: &Source,
    ) -> Result<ServerTls, ConfigError> {
        ServerTls::check_acme(span, certs, client_ca, verify, false, src)
    }

    fn check_acme(
        span: std::ops::Range<usize>,
        certs: Vec<Spanned<CertKey>>,
        client_ca: Option<Spanned<PathBuf>>,
        verify: Option<ClientVerify>,
        acme: bool,
        src: &Source,
    ) -> Result<ServerTls, ConfigError> {
        if certs.is_empty() && !acme {
            return Err(src.err(
                span,
                "tls names no certificate: write tls = { cert = \"fullchain.pem\", key = \"key.pem\" } \
             (or tls = { acme = true })",
            ));
        }
        if certs.len() > 8 {
            return Err(src.err(span, "tls lists more than 8 certificates for one server"));
        }
        let verify = match (verify, &client_ca) {
            (Some(_), None) => {
                return Err(src.err(
                    span,
                    "tls has verify but no client_ca: name the CA file client certificates must chain to",
                ))
            }
            (None, Some(_)) => Some(ClientVerify::Required),
            (v, _) => v,
        };
        for ck in &certs {
            for p in [&ck.get_ref().cert, &ck.get_ref().key] {
                if p.get_ref().as_os_str().is_empty() {
                    return Err(src.err(p.span(), "empty file name"));
                }
            }
        }
        Ok(ServerTls {
            span,
            certs,
            client_ca,
            verify,
            acme,
        })
    }
}

/// The `[tls]` section.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tls {
    /// TLS sessions each zone remembers for session-ID resumption (TLS 1.2 clients without
    /// tickets, TLS 1.3 when tickets are off). 0: none.
    #[serde(default = "default_cache")]
    pub session_cache: usize,
    /// Stateless session tickets (every zone can resume every ticket).
    #[serde(default = "yes")]
    pub session_tickets: bool,
    /// How long one ticket key encrypts new tickets; it decrypts for as long again, then is
    /// erased.
    #[serde(default = "default_rotate")]
    pub ticket_key_rotate: Spanned<Dur>,
    /// The most of a zone's time that TLS handshakes may take (0.05 to 1). When handshakes
    /// use up their share, further handshake work waits for the next tick and established
    /// connections are served first.
    #[serde(default = "default_share")]
    pub handshake_share: Spanned<f64>,
    /// The cryptography under rustls: `"aws-lc-rs"` (default) or `"ring"`.
    #[serde(default = "default_provider")]
    pub provider: Spanned<String>,
    /// Kernel TLS: `"auto"` (default) hands each connection's sending side to the kernel
    /// after the handshake where the kernel has the `tls` module and the cipher (probed once
    /// at start), so files go by sendfile; `"off"` seals every record in ringx (nginx's
    /// default, which asks for `ssl_conf_command Options KTLS`).
    #[serde(default = "default_ktls")]
    pub ktls: Spanned<String>,
    /// Whose order of cipher suites decides: ringx's (AES-128-GCM, AES-256-GCM,
    /// ChaCha20-Poly1305, TLS 1.3 before 1.2; default, as nginx's `ssl_prefer_server_ciphers
    /// on`), or with `false` the client's (a client without AES hardware lists ChaCha20
    /// first; Mozilla's intermediate configuration sets nginx's directive off).
    #[serde(default = "yes")]
    pub prefer_server_ciphers: bool,
}

impl Default for Tls {
    fn default() -> Self {
        toml::from_str("").expect("defaults deserialise")
    }
}

fn default_cache() -> usize {
    20_000
}
fn yes() -> bool {
    true
}
fn default_rotate() -> Spanned<Dur> {
    Spanned::new(0..0, Dur(std::time::Duration::from_secs(6 * 3600)))
}
fn default_provider() -> Spanned<String> {
    Spanned::new(0..0, "aws-lc-rs".into())
}
fn default_ktls() -> Spanned<String> {
    Spanned::new(0..0, "auto".into())
}
fn default_share() -> Spanned<f64> {
    Spanned::new(0..0, 0.5)
}

/// Checks `[tls]` and each server's `tls` value.
pub(crate) fn validate<'a>(
    tls: &Tls,
    servers: impl Iterator<Item = &'a Spanned<TlsValue>>,
    src: &Source,
) -> Result<(), ConfigError> {
    let share = *tls.handshake_share.get_ref();
    if !(0.05..=1.0).contains(&share) {
        return Err(src.err(
            tls.handshake_share.span(),
            "handshake_share must be between 0.05 and 1",
        ));
    }
    let rotate = tls.ticket_key_rotate.get_ref().0.as_secs();
    if !(60..=6 * 3600).contains(&rotate) {
        return Err(src.err(
            tls.ticket_key_rotate.span(),
            "ticket_key_rotate must be between 1m and 6h",
        ));
    }
    if !matches!(tls.provider.get_ref().as_str(), "aws-lc-rs" | "ring") {
        return Err(src.err(
            tls.provider.span(),
            format!(
                "provider = {:?}: use \"aws-lc-rs\" or \"ring\"",
                tls.provider.get_ref()
            ),
        ));
    }
    if !matches!(tls.ktls.get_ref().as_str(), "auto" | "off") {
        return Err(src.err(
            tls.ktls.span(),
            format!(
                "ktls = {:?}: use \"auto\" (the kernel seals records where it can) or \"off\"",
                tls.ktls.get_ref()
            ),
        ));
    }
    for t in servers {
        t.get_ref().resolve(t.span(), src)?;
    }
    Ok(())
}

/// `[[upstream]] tls`: TLS to the upstream's servers.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamTls {
    /// The name sent as SNI and verified in the certificate (default: the server's host
    /// name as written in `servers`).
    pub sni: Option<String>,
    /// CA certificates to verify against (default: the system bundle).
    pub ca: Option<Spanned<PathBuf>>,
    /// Verify the server's certificate (on by default).
    #[serde(default = "yes")]
    pub verify: bool,
    /// A client certificate and key for upstreams that ask for one (mTLS).
    pub cert: Option<Spanned<PathBuf>>,
    pub key: Option<Spanned<PathBuf>>,
}
