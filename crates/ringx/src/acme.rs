//! Hands the configuration's ACME servers to the ACME thread (`ringx_acme::manager`), at
//! start-up once the zones serve (so the challenges can be answered) and after each reload.
//! The slots were made when the configuration was compiled (`ringx_server::tls`); here they
//! are looked up by the same names.

use std::path::Path;
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
/// Missing folders above it are made mode 0755 (as `mkdir -p` would), so that the user can
/// reach it; one that is there and shut to that user is named in a warning.
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
    for w in make_storage(dir, owner) {
        tracing::warn!("{w}");
    }
}

/// Makes `dir` as [`prepare_storage`] says; returns what went wrong, as warnings.
fn make_storage(dir: &Path, owner: Option<(u32, u32)>) -> Vec<String> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    let mut warnings = Vec::new();
    // The folders to make, outermost first.
    let missing: Vec<&Path> = {
        let mut v: Vec<&Path> = dir
            .ancestors()
            .take_while(|p| !p.as_os_str().is_empty() && !p.exists())
            .collect();
        v.reverse();
        v
    };
    for p in &missing {
        let mode = if *p == dir { 0o700 } else { 0o755 };
        match std::fs::DirBuilder::new().mode(mode).create(p) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => {
                warnings.push(format!(
                    "ACME: cannot create the storage {} ({}: {e}); certificates cannot be \
                     ordered until it exists: create it or set [acme] storage to a writable folder",
                    dir.display(),
                    p.display()
                ));
                return warnings;
            }
        }
    }
    let Some((uid, gid)) = owner else {
        return warnings;
    };
    if let Err(e) = std::os::unix::fs::chown(dir, Some(uid), Some(gid)) {
        warnings.push(format!(
            "ACME: cannot give the storage {} to uid {uid}: {e}; chown it to the user of \
             [runtime] user",
            dir.display()
        ));
    }
    // Every folder above must let the user through (search permission).
    for p in dir.ancestors().skip(1) {
        if p.as_os_str().is_empty() {
            break;
        }
        let Ok(m) = std::fs::metadata(p) else {
            continue;
        };
        let bits = if m.uid() == uid {
            m.mode() >> 6
        } else if m.gid() == gid {
            m.mode() >> 3
        } else {
            m.mode()
        };
        if bits & 0o1 == 0 {
            warnings.push(format!(
                "ACME: the storage {} is under {} (mode {:04o}, uid {}), which uid {uid} cannot \
                 enter: the certificates cannot be stored; chmod o+x {} or set [acme] storage \
                 elsewhere",
                dir.display(),
                p.display(),
                m.mode() & 0o7777,
                m.uid(),
                p.display()
            ));
            break;
        }
    }
    warnings
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
    }

    fn tmp(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("ringx-acme-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir(&d).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
        d
    }

    #[test]
    fn missing_parents_are_made_0755_and_the_storage_0700() {
        let base = tmp("parents");
        let dir = base.join("a/b/acme");
        assert_eq!(make_storage(&dir, None), Vec::<String>::new());
        assert_eq!(mode(&base.join("a")), 0o755);
        assert_eq!(mode(&base.join("a/b")), 0o755);
        assert_eq!(mode(&dir), 0o700);
        // Made again: nothing to say, nothing changed.
        assert_eq!(make_storage(&dir, None), Vec::<String>::new());
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn the_storage_goes_to_the_user_and_a_shut_parent_is_named() {
        // SAFETY: geteuid reads no memory of ours.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: chown needs root");
            return;
        }
        let base = tmp("owner");
        let dir = base.join("x/y/acme");
        assert_eq!(
            make_storage(&dir, Some((65534, 65534))),
            Vec::<String>::new()
        );
        let m = std::fs::metadata(&dir).unwrap();
        assert_eq!((m.uid(), m.gid()), (65534, 65534));
        assert_eq!(mode(&base.join("x")), 0o755);
        // A folder above that the user cannot enter (as the old mkdir -p 0700 left them).
        std::fs::set_permissions(base.join("x"), std::fs::Permissions::from_mode(0o700)).unwrap();
        let w = make_storage(&dir, Some((65534, 65534)));
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].contains(&format!("under {}", base.join("x").display())),
            "{w:?}"
        );
        assert!(w[0].contains("chmod o+x"), "{w:?}");
        std::fs::remove_dir_all(&base).unwrap();
    }
}
