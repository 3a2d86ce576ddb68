//! Automatic certificates: `tls = { acme = true }` on a `[[server]]`, and the `[acme]` section
//! that says where they come from.
//!
//! ```toml
//! [acme]
//! directory = "https://acme-v02.api.letsencrypt.org/directory"   # the default
//! ca = "/etc/ringx/private-ca.pem"   # trust for the directory's own TLS certificate
//! contact = ["mailto:ops@example.com"]
//! eab = { kid = "...", hmac_key = "base64url..." }   # external account binding
//! key_type = "ecdsa-p256"            # or "ecdsa-p384", "rsa2048", "rsa3072", "rsa4096"
//! storage = "/var/lib/ringx/acme"    # account key and certificates (keys mode 0600)
//! challenge = "http-01"              # or "tls-alpn-01", "dns-01"; default: http-01 where a
//!                                    # plain listener is on port 80, else tls-alpn-01
//! dns_hook = "/etc/ringx/dns-hook"   # dns-01: `HOOK add|remove FQDN VALUE`
//! dns_propagation = "60s"            # dns-01: wait this long after the hook added the record
//! pending = "self-signed"            # until the first certificate: or "refuse" the handshake
//! ```
//!
//! A server with `tls = { acme = true }` gets a certificate for its `server_name`s. A
//! wildcard name can only be validated through dns-01, so it is refused unless `dns_hook` is
//! set.

use std::path::PathBuf;

use serde::Deserialize;
use toml::Spanned;

use crate::error::{ConfigError, Source};
use crate::units::Dur;
use crate::vhost::Server;

/// Let's Encrypt's production directory.
pub const LETS_ENCRYPT: &str = "https://acme-v02.api.letsencrypt.org/directory";

/// The `[acme]` section.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Acme {
    #[serde(default = "default_directory")]
    pub directory: Spanned<String>,
    /// PEM certificates to trust for the directory's HTTPS (a private CA); default: the
    /// system's bundle.
    pub ca: Option<Spanned<PathBuf>>,
    /// Contact URIs (`mailto:`); a bare address gets `mailto:`.
    #[serde(default, deserialize_with = "one_or_many")]
    pub contact: Vec<String>,
    /// External account binding, for CAs that ask for one.
    pub eab: Option<Spanned<Eab>>,
    #[serde(default = "default_key_type")]
    pub key_type: Spanned<String>,
    #[serde(default = "default_storage")]
    pub storage: Spanned<PathBuf>,
    pub challenge: Option<Spanned<String>>,
    pub dns_hook: Option<Spanned<PathBuf>>,
    #[serde(default = "default_propagation")]
    pub dns_propagation: Dur,
    #[serde(default = "default_pending")]
    pub pending: Spanned<String>,
}

/// External account binding: the key id and the MAC key (base64url) the CA gave.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Eab {
    pub kid: String,
    pub hmac_key: String,
}

impl Default for Acme {
    fn default() -> Self {
        toml::from_str("").expect("defaults deserialise")
    }
}

fn default_directory() -> Spanned<String> {
    Spanned::new(0..0, LETS_ENCRYPT.into())
}
fn default_key_type() -> Spanned<String> {
    Spanned::new(0..0, "ecdsa-p256".into())
}
fn default_storage() -> Spanned<PathBuf> {
    Spanned::new(0..0, PathBuf::from("/var/lib/ringx/acme"))
}
fn default_propagation() -> Dur {
    Dur(std::time::Duration::from_secs(60))
}
fn default_pending() -> Spanned<String> {
    Spanned::new(0..0, "self-signed".into())
}

fn one_or_many<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    struct OneOrMany;
    impl<'de> serde::de::Visitor<'de> for OneOrMany {
        type Value = Vec<String>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a string or a list of strings")
        }
        fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Vec<String>, E> {
            Ok(vec![s.to_string()])
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(
            self,
            mut seq: A,
        ) -> Result<Vec<String>, A::Error> {
            let mut v = Vec::new();
            while let Some(s) = seq.next_element()? {
                v.push(s);
            }
            Ok(v)
        }
    }
    d.deserialize_any(OneOrMany)
}

/// The key types `key_type` takes.
pub const KEY_TYPES: &[&str] = &["ecdsa-p256", "ecdsa-p384", "rsa2048", "rsa3072", "rsa4096"];
/// The challenges `challenge` takes.
pub const CHALLENGES: &[&str] = &["http-01", "tls-alpn-01", "dns-01"];

impl Acme {
    /// The contact URIs as sent to the CA.
    pub fn contact_uris(&self) -> Vec<String> {
        self.contact
            .iter()
            .map(|c| match c.contains(':') {
                true => c.clone(),
                false => format!("mailto:{c}"),
            })
            .collect()
    }
}

/// The names a server with `tls = { acme = true }` gets its certificate for.
pub fn names(s: &Server) -> Vec<String> {
    s.server_name
        .iter()
        .map(|n| n.get_ref().trim_end_matches('.').to_ascii_lowercase())
        .collect()
}

/// Checks `[acme]` and the names of every server that takes its certificate from it.
pub(crate) fn validate(
    acme: Option<&Acme>,
    servers: &[Spanned<Server>],
    src: &Source,
) -> Result<(), ConfigError> {
    let default = Acme::default();
    let a = acme.unwrap_or(&default);
    let dir = a.directory.get_ref();
    if !dir.starts_with("https://") {
        return Err(src.err(
            a.directory.span(),
            format!("directory = {dir:?}: an ACME directory is an https:// URL"),
        ));
    }
    if !KEY_TYPES.contains(&a.key_type.get_ref().as_str()) {
        return Err(src.err(
            a.key_type.span(),
            format!(
                "key_type = {:?}: use one of {KEY_TYPES:?}",
                a.key_type.get_ref()
            ),
        ));
    }
    if let Some(c) = &a.challenge {
        if !CHALLENGES.contains(&c.get_ref().as_str()) {
            return Err(src.err(
                c.span(),
                format!("challenge = {:?}: use one of {CHALLENGES:?}", c.get_ref()),
            ));
        }
        if c.get_ref() == "dns-01" && a.dns_hook.is_none() {
            return Err(src.err(
                c.span(),
                "challenge = \"dns-01\" needs dns_hook: the command that adds and removes the TXT records",
            ));
        }
    }
    if !matches!(a.pending.get_ref().as_str(), "self-signed" | "refuse") {
        return Err(src.err(
            a.pending.span(),
            format!(
                "pending = {:?}: use \"self-signed\" or \"refuse\"",
                a.pending.get_ref()
            ),
        ));
    }
    if let Some(e) = &a.eab {
        let ok = |s: &str| {
            !s.is_empty()
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_=".contains(&b))
        };
        if e.get_ref().kid.is_empty() || !ok(&e.get_ref().hmac_key) {
            return Err(src.err(
                e.span(),
                "eab needs kid and hmac_key (the MAC key, base64url, as the CA gave it)",
            ));
        }
    }
    for s in servers {
        let sv = s.get_ref();
        let Some(t) = &sv.tls else { continue };
        if !t.get_ref().is_acme() {
            continue;
        }
        if sv.server_name.is_empty() {
            return Err(src.err(
                t.span(),
                "tls = { acme = true } needs server_name: the names the certificate is for",
            ));
        }
        for n in &sv.server_name {
            let name = n.get_ref();
            if name.starts_with("*.") {
                if a.dns_hook.is_none() {
                    return Err(src.err(
                        n.span(),
                        format!(
                            "server_name {name:?}: a wildcard certificate can only be validated \
                             through dns-01; set [acme] dns_hook, or list the names"
                        ),
                    ));
                }
                continue;
            }
            if !is_dns_name(name) {
                return Err(src.err(
                    n.span(),
                    format!(
                        "server_name {name:?}: an ACME certificate is for DNS names (letters, \
                         digits, '-' and dots), a wildcard only as a first label \"*.\""
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// A host name a CA can validate: dot-separated labels of letters, digits and `-`.
fn is_dns_name(n: &str) -> bool {
    let n = n.trim_end_matches('.');
    !n.is_empty()
        && n.len() <= 253
        && n.parse::<std::net::IpAddr>().is_err()
        && n.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}
