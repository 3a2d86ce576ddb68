//! The TLS settings of every server, as rustls configurations, and which of them a listener
//! offers by SNI. Built once per configuration (start-up, reload); each zone then takes its
//! own copy with a session cache of its own ([`Sites::for_zone`]), so that nothing a
//! handshake touches is shared between zones except the ticket keys, which every zone must
//! know to resume every ticket.

use std::sync::Arc;

use rustls::server::{
    ClientHello, ProducesTickets, ResolvesServerCert, ServerSessionMemoryCache,
    WebPkiClientVerifier,
};
use rustls::sign::CertifiedKey;
use rustls::{RootCertStore, ServerConfig};

use crate::provider::Provider;
use crate::select::CertSet;
use crate::sni::SniMap;
use crate::ticket_keys::SharedTickets;
use crate::tickets;

/// Session resumption settings.
#[derive(Debug, Clone)]
pub struct Sessions {
    /// Session IDs each zone remembers (0: none).
    pub cache: usize,
    /// Ticket key lifetime in seconds; `None`: no tickets.
    pub ticket_rotate_s: Option<u32>,
    /// Ticket keys shared with other hosts (`[cluster]`), used instead of this process's own
    /// rotating ones when tickets are on.
    pub shared_tickets: Option<Arc<SharedTickets>>,
}

/// Client certificates a server asks for.
pub struct ClientAuth {
    pub roots: RootCertStore,
    pub required: bool,
}

/// One server's TLS, as configured.
pub struct SiteSpec {
    pub keys: Vec<Arc<CertifiedKey>>,
    pub client: Option<ClientAuth>,
    /// Offer HTTP/2 (ALPN `h2` before `http/1.1`).
    pub h2: bool,
    /// Where the certificate comes from instead of `keys` (ACME: a certificate swapped in
    /// while the server runs, and tls-alpn-01's challenge certificates); its servers also
    /// accept ALPN `acme-tls/1`, last.
    pub resolver: Option<Arc<dyn ResolvesServerCert>>,
}

/// Every TLS server's rustls configuration and each listener's SNI map.
#[derive(Clone)]
pub struct Sites {
    /// Per server (`None`: a plain server).
    configs: Vec<Option<Arc<ServerConfig>>>,
    /// Per listener (`None`: a plain listener).
    listeners: Vec<Option<SniMap>>,
    /// Per server: it asks for client certificates.
    client_auth: Vec<bool>,
    cache: usize,
    provider: Provider,
}

/// ALPN protocols offered, in preference order (HTTP/2 first where a server offers it).
pub const ALPN: &[&[u8]] = &[b"http/1.1"];
pub const ALPN_H2: &[&[u8]] = &[b"h2", b"http/1.1"];
/// tls-alpn-01's protocol (RFC 8737), offered by servers whose certificate comes from ACME.
pub const ACME_TLS: &[u8] = b"acme-tls/1";

impl Sites {
    /// Builds the configurations. `servers[i]` is server i's TLS (`None`: plain);
    /// `listeners[l]` maps SNI names to server indices for listener l.
    pub fn build(
        provider: Provider,
        sessions: &Sessions,
        server_order: bool,
        servers: Vec<Option<SiteSpec>>,
        listeners: Vec<Option<SniMap>>,
    ) -> Result<Sites, String> {
        let crypto = provider.crypto();
        let ticketer: Option<Arc<dyn ProducesTickets>> =
            match (sessions.ticket_rotate_s, &sessions.shared_tickets) {
                (Some(s), Some(shared)) => {
                    shared.set_period(s);
                    Some(shared.clone())
                }
                (Some(s), None) => Some(tickets::rotating(provider, s).map_err(|e| e.to_string())?),
                (None, _) => None,
            };
        let mut configs = Vec::with_capacity(servers.len());
        let client_auth = servers
            .iter()
            .map(|s| s.as_ref().is_some_and(|s| s.client.is_some()))
            .collect();
        for spec in servers {
            let Some(spec) = spec else {
                configs.push(None);
                continue;
            };
            let builder = ServerConfig::builder_with_provider(crypto.clone())
                .with_safe_default_protocol_versions()
                .map_err(|e| format!("TLS versions: {e}"))?;
            let builder = match spec.client {
                None => builder.with_no_client_auth(),
                Some(ca) => {
                    let v = WebPkiClientVerifier::builder_with_provider(
                        Arc::new(ca.roots),
                        crypto.clone(),
                    );
                    let v = if ca.required {
                        v
                    } else {
                        v.allow_unauthenticated()
                    };
                    builder.with_client_cert_verifier(
                        v.build().map_err(|e| format!("client CA: {e}"))?,
                    )
                }
            };
            let acme = spec.resolver.is_some();
            let resolver = match spec.resolver {
                Some(r) => r,
                None => Arc::new(CertSet::new(spec.keys)),
            };
            let mut cfg = builder.with_cert_resolver(resolver);
            let alpn = if spec.h2 { ALPN_H2 } else { ALPN };
            cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
            if acme {
                // A CA validating tls-alpn-01 offers this protocol alone; rustls picks the
                // first of ours a client offers, so it is last.
                cfg.alpn_protocols.push(ACME_TLS.to_vec());
            }
            // 0-RTT stays off (rustls's default, max_early_data_size 0): early data can be
            // replayed, and a replayed POST would run twice.
            cfg.max_early_data_size = 0;
            // `server_order` (`[tls] prefer_server_ciphers`, on by default): the server's
            // preference, as nginx's `ssl_prefer_server_ciphers on` (Debian's default). Every
            // suite offered is AEAD with forward secrecy, and the server's order
            // (`provider::preferred_order`) puts the cheaper ones first whatever a client
            // lists (testssl.sh rates a server without an order HIGH; bench/README.md "TLS
            // scan"). Off, the client's order decides, as Mozilla's intermediate
            // configuration asks: a client without AES hardware lists ChaCha20 first.
            cfg.ignore_client_order = server_order;
            // After the handshake the records are sealed in place (record.rs) or by the
            // kernel, with the keys rustls hands over.
            cfg.enable_secret_extraction = true;
            cfg.send_tls13_tickets = if ticketer.is_some() { 2 } else { 0 };
            if let Some(t) = &ticketer {
                cfg.ticketer = t.clone();
            }
            configs.push(Some(Arc::new(cfg)));
        }
        Ok(Sites {
            configs,
            listeners,
            client_auth,
            cache: sessions.cache,
            provider,
        })
    }

    /// A zone's copy: the same settings and ticket keys, its own session cache.
    pub fn for_zone(&self) -> Sites {
        let configs = self
            .configs
            .iter()
            .map(|c| {
                c.as_ref().map(|c| {
                    let mut z = ServerConfig::clone(c);
                    z.session_storage = if self.cache > 0 {
                        ServerSessionMemoryCache::new(self.cache)
                    } else {
                        Arc::new(rustls::server::NoServerSessionStorage {})
                    };
                    Arc::new(z)
                })
            })
            .collect();
        Sites {
            configs,
            listeners: self.listeners.clone(),
            client_auth: self.client_auth.clone(),
            cache: self.cache,
            provider: self.provider,
        }
    }

    /// The crypto provider the configurations were built with.
    pub fn provider(&self) -> Provider {
        self.provider
    }

    /// Whether listener `l` speaks TLS.
    pub fn is_tls(&self, l: usize) -> bool {
        matches!(self.listeners.get(l), Some(Some(_)))
    }

    /// Whether the server a handshake on listener `l` with this SNI name gets asks for
    /// client certificates.
    pub fn asks_client_cert(&self, l: usize, sni: Option<&str>) -> bool {
        let Some(Some(map)) = self.listeners.get(l) else {
            return false;
        };
        self.client_auth
            .get(map.pick(sni))
            .copied()
            .unwrap_or(false)
    }

    /// The server a handshake on listener `l` with this SNI name gets (None: a plain
    /// listener).
    pub fn server(&self, l: usize, sni: Option<&str>) -> Option<usize> {
        Some(self.listeners.get(l)?.as_ref()?.pick(sni))
    }

    /// The configuration for a handshake on listener `l` with this SNI name.
    pub fn config(&self, l: usize, sni: Option<&str>) -> Option<Arc<ServerConfig>> {
        let map = self.listeners.get(l)?.as_ref()?;
        let i = map.pick(sni);
        self.configs.get(i)?.clone()
    }
}

impl Sites {
    /// The TLS configuration of a QUIC listener on TCP listener `l`'s address: the
    /// listener's default server's, with a certificate chosen by SNI among all the servers
    /// of the address (QUIC's handshake takes one rustls configuration for every name).
    /// The caller sets QUIC's ALPN. Client certificates and the other per-server settings
    /// are the default server's. None: a plain listener.
    pub fn quic_config(&self, l: usize) -> Option<ServerConfig> {
        let map = self.listeners.get(l)?.as_ref()?.clone();
        let base = self.configs.get(map.pick(None))?.clone()?;
        let servers = self
            .configs
            .iter()
            .map(|c| c.as_ref().map(|c| c.cert_resolver.clone()))
            .collect();
        let mut cfg = (*base).clone();
        cfg.cert_resolver = Arc::new(BySni { map, servers });
        Some(cfg)
    }
}

/// Picks the server by the ClientHello's SNI, then its certificate by its own resolver.
#[derive(Debug)]
struct BySni {
    map: SniMap,
    servers: Vec<Option<Arc<dyn ResolvesServerCert>>>,
}

impl ResolvesServerCert for BySni {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let i = self.map.pick(hello.server_name());
        self.servers.get(i)?.as_ref()?.resolve(hello)
    }
}
