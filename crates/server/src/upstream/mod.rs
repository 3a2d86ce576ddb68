//! Reverse proxy and L4 proxy: upstream pools compiled from the configuration (shared,
//! read-only, by every zone), active health checks on a control thread, and the per-zone
//! state — balancers, passive failure marks, idle keep-alive connections — that the zone's
//! handler uses on the request path without sharing anything with other zones.

pub mod connector;
pub mod dial;
pub mod health;
pub mod pools;
pub mod stats;

use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use ringx_balance::{Maglev, Policy, ServerSpec};

use ringx_config::upstream::{resolve_addr, Balance, ProxyProtocol, ServerEntry};
use ringx_config::{Config, Source};

use crate::error::Error;

/// One server of an upstream.
pub struct ServerDef {
    pub name: String,
    pub addr: SocketAddr,
    pub weight: u32,
    pub max_fails: u32,
    pub fail_timeout: Duration,
    pub backup: bool,
    /// Set by the health checker; always true without `[upstream.health]`.
    pub healthy: AtomicBool,
    /// Requests, failures and response times per zone; drain and weight from the status page.
    pub stats: stats::ServerStats,
}

/// What the balancer hashes for `balance = "hash"`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HashKey {
    Client,
    Uri,
    Header(String),
}

pub struct HealthDef {
    pub interval: Duration,
    pub path: String,
    pub expect: Option<u16>,
    pub rise: u32,
    pub fall: u32,
    pub timeout: Duration,
}

/// TLS to an upstream's servers.
pub struct UpTls {
    pub config: Arc<rustls::ClientConfig>,
    /// The same, offering ALPN `h2` (gRPC's multiplexed connections).
    pub h2: Arc<rustls::ClientConfig>,
    /// Per server (in the upstream's order): the name sent as SNI and verified (`sni`, or
    /// the server's host as written). Made when the configuration is compiled, so that a
    /// name TLS cannot carry is refused there (`ringx check`, FILE:LINE:COL) and a connection
    /// never goes out in clear for want of one.
    names: Vec<rustls::pki_types::ServerName<'static>>,
}

impl UpTls {
    /// TLS with `config` (ALPN http/1.1) and its `h2` twin, for `servers`; the error names
    /// the first name that cannot be a TLS server name (the server, or `sni`) and why.
    pub fn new(
        config: Arc<rustls::ClientConfig>,
        sni: Option<&str>,
        servers: &[ServerDef],
    ) -> Result<UpTls, String> {
        let mut names = Vec::with_capacity(servers.len());
        for s in servers {
            let (host, what) = match sni {
                Some(n) => (n, "sni"),
                None => (host_of(&s.name), "the server's host"),
            };
            names.push(tls_name(host).map_err(|why| {
                format!(
                    "{what} {host:?} (server {}) cannot be sent as a TLS server name: {why}; \
                     set tls = {{ sni = \"name.in.its.certificate\" }}",
                    s.name
                )
            })?);
        }
        let mut h2 = (*config).clone();
        h2.alpn_protocols = vec![b"h2".to_vec()];
        Ok(UpTls {
            config,
            h2: Arc::new(h2),
            names,
        })
    }

    /// The name a connection to server `i` sends as SNI and verifies.
    pub fn name(&self, i: usize) -> rustls::pki_types::ServerName<'static> {
        self.names[i].clone()
    }
}

/// `host` as a TLS server name: a DNS name (no wildcard: a certificate may hold one, a
/// client never asks for one) or an IP address (no IPv6 zone: it means nothing to the peer).
fn tls_name(host: &str) -> Result<rustls::pki_types::ServerName<'static>, &'static str> {
    if host.contains('*') {
        return Err("a wildcard names no server");
    }
    if host.contains('%') {
        return Err("an IPv6 zone is not part of an address a certificate can hold");
    }
    rustls::pki_types::ServerName::try_from(host.to_string()).map_err(|_| {
        "not a DNS name (letters, digits and inner hyphens in each label) nor an IP address"
    })
}

/// The host of `host:port` (`[v6]:port` → `v6`).
fn host_of(name: &str) -> &str {
    if let Some(v6) = name.strip_prefix('[') {
        return v6.split(']').next().unwrap_or(v6);
    }
    name.rsplit_once(':').map_or(name, |(h, _)| h)
}

pub struct UpstreamDef {
    pub name: String,
    pub servers: Vec<ServerDef>,
    pub policy: Policy,
    pub hash_key: HashKey,
    pub maglev: Option<Arc<Maglev>>,
    pub keepalive: u32,
    pub keepalive_timeout: Duration,
    pub connect_timeout: Duration,
    pub read_timeout: Duration,
    pub send_timeout: Duration,
    pub retries: u32,
    pub proxy_protocol: ProxyProtocol,
    pub health: Option<HealthDef>,
    pub tls: Option<UpTls>,
    /// `bind = "client"`: connections leave from the client's address (transparent), and
    /// are never pooled for another client.
    pub bind_client: bool,
}

impl UpstreamDef {
    pub fn specs(&self) -> Vec<ServerSpec> {
        self.servers
            .iter()
            .map(|s| ServerSpec {
                weight: s.weight,
                backup: s.backup,
            })
            .collect()
    }
}

/// Every upstream of the configuration, named ones first, then one per distinct
/// `http://host:port` / `host:port` written directly in a `proxy_pass`.
pub struct Upstreams {
    pub list: Vec<UpstreamDef>,
    /// +1 each time the status page changes a server's weight: each zone's balancers look
    /// at the servers' weights again when it moved.
    pub admin_epoch: std::sync::atomic::AtomicU64,
    /// The crypto provider for TLS upstreams, and the configuration of `https://` targets
    /// (system CAs, verified), built when the first is met.
    provider: ringx_tls::Provider,
    https_default: Option<Arc<rustls::ClientConfig>>,
}

impl Upstreams {
    /// Compiles `[[upstream]]` and the implicit upstreams of `proxy_pass` values.
    pub fn compile(cfg: &Config) -> Result<Upstreams, Error> {
        let src = Source {
            name: "(config)",
            text: "",
        };
        let provider = ringx_tls::Provider::parse(cfg.tls.provider.get_ref()).unwrap_or_default();
        let mut list = Vec::new();
        for u in &cfg.upstream {
            let u = u.get_ref();
            let mut servers = Vec::new();
            for s in &u.servers {
                let r = ServerEntry::resolve(s, &src).map_err(|e| Error::config(e.message))?;
                servers.push(ServerDef {
                    name: r.name,
                    addr: r.addr,
                    weight: r.weight,
                    max_fails: r.max_fails,
                    fail_timeout: r.fail_timeout,
                    backup: r.backup,
                    healthy: AtomicBool::new(true),
                    stats: Default::default(),
                });
            }
            let policy = match u.balance {
                Balance::RoundRobin => Policy::RoundRobin,
                Balance::LeastConn => Policy::LeastConn,
                Balance::RandomTwo => Policy::RandomTwo,
                Balance::Hash => Policy::Hash,
            };
            let maglev = (policy == Policy::Hash).then(|| {
                let names: Vec<String> = servers.iter().map(|s| s.name.clone()).collect();
                let weights: Vec<u32> = servers.iter().map(|s| s.weight).collect();
                Arc::new(Maglev::new(&names, &weights))
            });
            let key = u.hash_key.get_ref();
            let hash_key = match key.strip_prefix("header:") {
                Some(h) => HashKey::Header(h.to_string()),
                None if key == "uri" => HashKey::Uri,
                None => HashKey::Client,
            };
            let tls = match &u.tls {
                None => None,
                Some(t) => Some(client_tls(cfg, provider, t.get_ref(), t.span(), &servers)?),
            };
            list.push(UpstreamDef {
                name: u.name.get_ref().clone(),
                servers,
                policy,
                hash_key,
                maglev,
                keepalive: u.keepalive,
                keepalive_timeout: u.keepalive_timeout.0,
                connect_timeout: u.connect_timeout.0,
                read_timeout: u.read_timeout.0,
                send_timeout: u.send_timeout.0,
                retries: u.retries,
                proxy_protocol: u.proxy_protocol,
                health: u.health.as_ref().map(|h| HealthDef {
                    interval: h.interval.0,
                    path: h.path.clone(),
                    expect: h.expect,
                    rise: h.rise,
                    fall: h.fall,
                    timeout: h.timeout.0,
                }),
                tls,
                bind_client: u.bind.is_some(),
            });
        }
        Ok(Upstreams {
            list,
            admin_epoch: Default::default(),
            provider,
            https_default: None,
        })
    }

    /// Builds upstream `i`'s Maglev table if its policy did not (UDP streams pick a server by
    /// a hash of the client's address whatever the policy).
    pub fn ensure_maglev(&mut self, i: usize) {
        let u = &mut self.list[i];
        if u.maglev.is_none() {
            let names: Vec<String> = u.servers.iter().map(|s| s.name.clone()).collect();
            let weights: Vec<u32> = u.servers.iter().map(|s| s.weight).collect();
            u.maglev = Some(Arc::new(Maglev::new(&names, &weights)));
        }
    }

    /// The upstream a `proxy_pass` value names, creating an implicit one for an address.
    pub fn resolve_target(&mut self, target: &str) -> Result<usize, Error> {
        // `app`, or `http://app` as nginx writes a named upstream.
        let bare = ringx_config::upstream::scheme_less(target);
        if let Some(i) = self
            .list
            .iter()
            .position(|u| u.name == target || u.name == bare)
        {
            return Ok(i);
        }
        let https = ringx_config::upstream::https_addr(target);
        let addr_s = match &https {
            Some(a) => a.as_str(),
            None => ringx_config::upstream::scheme_less(target).trim_end_matches('/'),
        };
        let addr = resolve_addr(addr_s).map_err(Error::config)?;
        let name = match https {
            Some(_) => format!("https://{addr}"),
            None => format!("{addr}"),
        };
        let servers = vec![ServerDef {
            name: addr_s.to_string(),
            addr,
            weight: 1,
            max_fails: 1,
            fail_timeout: Duration::from_secs(10),
            backup: false,
            healthy: AtomicBool::new(true),
            stats: Default::default(),
        }];
        let tls = match https {
            None => None,
            Some(_) => {
                let config = match &self.https_default {
                    Some(c) => c.clone(),
                    None => {
                        let spec = ringx_tls::client::ClientSpec {
                            ca: None,
                            verify: true,
                            cert: None,
                        };
                        let c = ringx_tls::client::config(self.provider, &spec).map_err(|e| {
                            Error::config(format!("proxy_pass {target}: {e} (name a CA with an [[upstream]] tls = {{ ca = ... }})"))
                        })?;
                        self.https_default = Some(c.clone());
                        c
                    }
                };
                Some(
                    UpTls::new(config, None, &servers)
                        .map_err(|e| Error::config(format!("proxy_pass {target}: {e}")))?,
                )
            }
        };
        if let Some(i) = self.list.iter().position(|u| u.name == name) {
            return Ok(i);
        }
        self.list.push(UpstreamDef {
            name: name.clone(),
            servers,
            policy: Policy::RoundRobin,
            hash_key: HashKey::Client,
            maglev: None,
            keepalive: 32,
            keepalive_timeout: Duration::from_secs(60),
            connect_timeout: Duration::from_secs(5),
            read_timeout: Duration::from_secs(60),
            send_timeout: Duration::from_secs(60),
            retries: 2,
            proxy_protocol: ProxyProtocol::Off,
            health: None,
            tls,
            bind_client: false,
        });
        Ok(self.list.len() - 1)
    }
}

/// The client TLS of an `[[upstream]] tls`, errors placed at the entry.
fn client_tls(
    cfg: &Config,
    provider: ringx_tls::Provider,
    u: &ringx_config::tls::UpstreamTls,
    span: std::ops::Range<usize>,
    servers: &[ServerDef],
) -> Result<UpTls, Error> {
    let cert = match (&u.cert, &u.key) {
        (Some(c), Some(k)) => Some((c.get_ref().as_path(), k.get_ref().as_path())),
        (None, None) => None,
        _ => {
            return Err(Error::config(
                cfg.error_at(span, "tls needs both cert and key for a client certificate")
                    .to_string(),
            ))
        }
    };
    let spec = ringx_tls::client::ClientSpec {
        ca: u.ca.as_ref().map(|c| c.get_ref().as_path()),
        verify: u.verify,
        cert,
    };
    let config = ringx_tls::client::config(provider, &spec)
        .map_err(|e| Error::config(cfg.error_at(span.clone(), e.to_string()).to_string()))?;
    if !u.verify {
        tracing::warn!(
            "{}",
            cfg.error_at(
                span.clone(),
                "tls verify = false: the upstream's certificate is not checked, so anyone on \
                 the path to it can read and change the traffic; name its CA with ca = \"...\""
            )
        );
    }
    UpTls::new(config, u.sni.as_deref(), servers)
        .map_err(|e| Error::config(cfg.error_at(span, e).to_string()))
}

#[cfg(test)]
mod tests {
    use super::tls_name;

    /// Names TLS can carry, and the ones that used to send a connection out in clear.
    #[test]
    fn tls_names_refused_rather_than_dropped() {
        for ok in ["app.test", "a-b.c.test", "127.0.0.1", "::1", "localhost"] {
            assert!(tls_name(ok).is_ok(), "{ok}");
        }
        for bad in [
            "*.app.test",
            "fe80::1%eth0",
            "bad-.test",
            "-bad.test",
            "a..test",
            "",
        ] {
            assert!(tls_name(bad).is_err(), "{bad}");
        }
    }
}
