//! `[cluster]`: the process's one Redis client (`ringx_cluster`), started with the server
//! (before privileges are dropped, so its TLS files are read as root can), given new
//! settings on a reload, and what `/metrics` shows of it. The ACME thread takes it as its
//! storage (`crate::acme`); the cluster limit zones sync through it
//! (`ringx_server::guard::cluster_sync`); its subscriber, for purges and drains sent to every
//! host, is `crate::cluster_events`; the TLS session ticket keys every host shares are kept
//! filled from it by a [`TicketSync`] (the TLS configurations take those keys,
//! `ringx_cluster::tickets::shared_keys`, whenever `[cluster]` is configured).

use std::sync::Mutex;

use ringx_cluster::{Client, Settings, Target, TicketSettings, TicketSync, TlsSpec};
use ringx_config::cluster::Cluster;
use ringx_config::Config;

static CLIENT: Mutex<Option<Client>> = Mutex::new(None);
/// The thread that fills the shared ticket keys, while `[cluster]` and session tickets are
/// on and some server has TLS.
static TICKETS: Mutex<Option<TicketSync>> = Mutex::new(None);

/// The client, when `[cluster]` is configured.
pub fn client() -> Option<Client> {
    CLIENT.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// `[cluster]` as the client takes it.
fn settings(c: &Cluster) -> Settings {
    let list = |v: &Option<toml::Spanned<Vec<toml::Spanned<String>>>>| {
        v.as_ref().map_or(Vec::new(), |l| {
            l.get_ref().iter().map(|a| a.get_ref().clone()).collect()
        })
    };
    let target = match (&c.sentinel, &c.master) {
        (Some(_), Some(m)) => Target::Sentinel {
            sentinels: list(&c.sentinel),
            master: m.get_ref().clone(),
        },
        _ => Target::Servers(list(&c.redis)),
    };
    Settings {
        target,
        username: c.username.as_ref().map(|u| u.get_ref().clone()),
        password: c.password.as_ref().map(|p| p.get_ref().clone()),
        tls: c.tls().map(|t| TlsSpec {
            ca: t.ca.as_ref().map(|p| p.get_ref().clone()),
            sni: t.sni.clone(),
            verify: t.verify,
            cert: t
                .cert
                .as_ref()
                .zip(t.key.as_ref())
                .map(|(c, k)| (c.get_ref().clone(), k.get_ref().clone())),
        }),
        prefix: c.prefix.get_ref().clone(),
        connect_timeout: c.connect_timeout.get_ref().0,
        timeout: c.timeout.get_ref().0,
        events_secret: c.events_secret.as_ref().map(|s| s.get_ref().clone()),
    }
}

/// Starts the client for `cfg`'s `[cluster]`, gives a running one new settings, or stops
/// it when the section is gone. Fails, changing nothing, when the TLS files cannot be
/// used, at the `tls` key's FILE:LINE:COL.
pub fn start(cfg: &Config) -> Result<(), String> {
    let mut cur = CLIENT.lock().unwrap_or_else(|e| e.into_inner());
    let Some(c) = &cfg.cluster else {
        if cur.take().is_some() {
            tracing::info!("cluster: [cluster] removed; this host no longer uses Redis");
            ringx_server::guard::cluster_sync::set_client(None);
        }
        drop(cur);
        crate::cluster_events::start(cfg, None);
        tickets(cfg, None);
        return Ok(());
    };
    let c = c.get_ref();
    let s = settings(c);
    let at = |e: String| {
        let span = c.tls.as_ref().map_or(0..0, |t| t.span());
        cfg.error_at(span, format!("[cluster] tls: {e}"))
            .to_string()
    };
    match cur.as_ref() {
        Some(client) => client.reconfigure(s).map_err(at)?,
        None => {
            tracing::info!(
                "cluster: Redis at {}, keys under {:?}, a command's budget {:?}",
                match &s.target {
                    Target::Servers(v) => v.join(" "),
                    Target::Sentinel { sentinels, master } =>
                        format!("master {master:?} of sentinels {}", sentinels.join(" ")),
                },
                s.prefix,
                s.timeout
            );
            *cur = Some(Client::start(s).map_err(at)?);
        }
    }
    // Cluster limit zones sync through it (their thread starts with the first client).
    ringx_server::guard::cluster_sync::set_client(cur.clone());
    let client = cur.clone();
    drop(cur);
    // Its subscriber: purges and drains from the other hosts.
    crate::cluster_events::start(cfg, client.as_ref());
    tickets(cfg, client.as_ref());
    Ok(())
}

/// Starts, keeps (with the new period) or stops the ticket keys' thread for `cfg`.
fn tickets(cfg: &Config, client: Option<&Client>) {
    let tls = cfg.server.iter().any(|s| s.get_ref().tls.is_some())
        || cfg.stream.iter().any(|s| s.get_ref().tls.is_some());
    let want = client.filter(|_| cfg.tls.session_tickets && tls);
    let mut cur = TICKETS.lock().unwrap_or_else(|e| e.into_inner());
    let Some(client) = want else {
        if cur.take().is_some() {
            tracing::info!("TLS tickets: no longer shared through Redis");
        }
        return;
    };
    let settings = TicketSettings::new(cfg.tls.ticket_key_rotate.get_ref().0);
    match cur.as_ref() {
        // The same client (a reload): the same thread, which keeps its keys.
        Some(t) if t.client() == client => t.set_settings(settings),
        _ => {
            let keys = ringx_cluster::tickets::shared_keys();
            *cur = match TicketSync::start(client.clone(), keys, settings) {
                Ok(t) => {
                    tracing::info!(
                        "TLS tickets: keys shared by every host through Redis, rotated every \
                         {:?}",
                        settings.period
                    );
                    Some(t)
                }
                Err(e) => {
                    tracing::error!("TLS tickets: cannot start the ticket keys' thread: {e}");
                    None
                }
            };
        }
    }
}

/// The client's lines of `/metrics`, the cluster limit zones' and the ticket keys' (none
/// without `[cluster]`).
pub fn render_metrics() -> String {
    let mut s = client().map_or(String::new(), |c| c.counters().render());
    s.push_str(&ringx_server::guard::cluster::render_metrics());
    if let Some(t) = TICKETS.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
        s.push_str(&t.render());
    }
    s
}
