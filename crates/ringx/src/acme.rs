//! Hands the configuration's ACME servers to the ACME thread (`ringx_acme::manager`), at
//! start-up once the zones serve (so the challenges can be answered) and after each reload.
//! The slots were made when the configuration was compiled (`ringx_server::tls`); here they
//! are looked up by the same names.

use std::time::Duration;

use ringx_acme::{Challenge, KeyType, Settings};
use ringx_config::acme::{names, Acme};
use ringx_config::Config;

/// Starts (or updates) the ACME work for `cfg`; a configuration without ACME servers leaves
/// the thread idle.
pub fn start(cfg: &Config) {
    let servers: Vec<_> = cfg
        .server
        .iter()
        .map(|s| s.get_ref())
        .filter(|s| s.tls.as_ref().is_some_and(|t| t.get_ref().is_acme()))
        .collect();
    if servers.is_empty() && cfg.acme.is_none() {
        return;
    }
    let slots = servers
        .iter()
        .map(|s| ringx_acme::global().slot(&names(s), || None))
        .collect();
    let settings = settings(cfg, cfg.acme.as_ref().unwrap_or(&Acme::default()));
    tracing::info!(
        "ACME: {} certificate(s) from {} by {:?}, stored in {}",
        servers.len(),
        settings.directory,
        settings.challenge,
        match &settings.cluster {
            Some(_) => "Redis ([cluster])".to_string(),
            None => settings.storage.display().to_string(),
        }
    );
    ringx_acme::manager::manage(settings, slots);
}

/// Creates `[acme] storage` (mode 0700) before privileges are dropped, owned by the user
/// they drop to (`owner`), so that the ACME thread can write the account and certificates.
pub fn prepare_storage(cfg: &Config, owner: Option<(u32, u32)>) {
    let acme_servers = cfg.server.iter().any(|s| {
        s.get_ref()
            .tls
            .as_ref()
            .is_some_and(|t| t.get_ref().is_acme())
    });
    // With [cluster] the certificates are kept in Redis: no directory, no copy on disk.
    if !acme_servers || cfg.cluster.is_some() {
        return;
    }
    let default = Acme::default();
    let dir = cfg.acme.as_ref().unwrap_or(&default).storage.get_ref();
    use std::os::unix::fs::DirBuilderExt;
    if let Err(e) = std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
    {
        tracing::warn!("ACME: cannot create the storage {}: {e}", dir.display());
        return;
    }
    if let Some((uid, gid)) = owner {
        if let Err(e) = std::os::unix::fs::chown(dir, Some(uid), Some(gid)) {
            tracing::warn!(
                "ACME: cannot give the storage {} to uid {uid}: {e}",
                dir.display()
            );
        }
    }
}

/// `[acme]` as the ACME thread takes it.
fn settings(cfg: &Config, a: &Acme) -> Settings {
    let challenge = match a.challenge.as_ref().map(|c| c.get_ref().as_str()) {
        Some("http-01") => Challenge::Http01,
        Some("tls-alpn-01") => Challenge::TlsAlpn01,
        Some("dns-01") => Challenge::Dns01,
        // A CA validates http-01 on port 80: where a plain server listens there, that;
        // otherwise on the TLS port itself.
        _ => {
            let plain80 = cfg.server.iter().any(|s| {
                let s = s.get_ref();
                s.tls.is_none() && s.listen.iter().any(|l| l.get_ref().port() == 80)
            });
            if plain80 {
                Challenge::Http01
            } else {
                Challenge::TlsAlpn01
            }
        }
    };
    Settings {
        directory: a.directory.get_ref().clone(),
        ca: a.ca.as_ref().map(|c| c.get_ref().clone()),
        contact: a.contact_uris(),
        eab: a
            .eab
            .as_ref()
            .map(|e| (e.get_ref().kid.clone(), e.get_ref().hmac_key.clone())),
        key_type: KeyType::parse(a.key_type.get_ref()).unwrap_or(KeyType::EcdsaP256),
        storage: a.storage.get_ref().clone(),
        cluster: crate::cluster::client(),
        host_id: crate::cluster_events::host_id(cfg).unwrap_or_default(),
        confirm_timeout: cfg.cluster.as_ref().map_or(Duration::from_secs(2), |c| {
            c.get_ref().confirm_timeout.get_ref().0
        }),
        challenge,
        dns_hook: a.dns_hook.as_ref().map(|h| h.get_ref().clone()),
        dns_wait: a.dns_propagation.0,
        min_backoff: Duration::from_secs(2),
        max_backoff: Duration::from_secs(3600),
    }
}
