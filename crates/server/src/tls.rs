//! TLS for the servers that have it: their certificates loaded and checked (errors at the
//! `FILE:LINE:COL` of the `tls` entry, with the PEM path), the rustls configurations built
//! ([`ringx_tls::Sites`]), and each zone's share of it ([`ZoneTls`]: its copy of the
//! configurations, its handshake budget, and the connections whose handshake waits for it).

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::time::{Duration, Instant};

use ringx_config::Config;
use ringx_engine::ConnId;
use ringx_tls::material;
use ringx_tls::sites::{ClientAuth, Sessions, SiteSpec};
use ringx_tls::sni::SniMap;
use ringx_tls::{Budget, Provider, Sites};
use rustls_pki_types::UnixTime;

use crate::error::Error;
use crate::route::Routes;

/// The TLS part of a compiled configuration.
pub struct TlsSetup {
    pub sites: Sites,
    pub share: f64,
    /// The ciphers the kernel seals, when kernel TLS is on (`[tls] ktls`) and the kernel has
    /// it.
    pub ktls: Option<ringx_tls::ktls::Support>,
    /// Every certificate served, for the status page and `/metrics`.
    pub certs: Vec<crate::metrics::listeners::CertInfo>,
}

/// The kernel's answer, asked once per process (a reload keeps it; the start-up log line
/// says it).
fn ktls_probe() -> &'static ringx_tls::ktls::Probe {
    static PROBE: std::sync::OnceLock<ringx_tls::ktls::Probe> = std::sync::OnceLock::new();
    PROBE.get_or_init(ringx_tls::ktls::probe)
}

/// Loads every server's certificates and builds the configurations; `None` when no server
/// has `tls`.
pub fn compile(cfg: &Config, routes: &Routes) -> Result<Option<TlsSetup>, Error> {
    let streams_tls = cfg.stream.iter().map(|s| s.get_ref().tls.as_ref());
    let values: Vec<_> = cfg
        .server
        .iter()
        .map(|s| s.get_ref().tls.as_ref())
        .chain(streams_tls)
        .collect();
    if values.iter().all(Option::is_none) {
        return Ok(None);
    }
    let ktls = match cfg.tls.ktls.get_ref().as_str() {
        "off" => None,
        _ => ktls_probe().support,
    };
    static LOGGED: std::sync::Once = std::sync::Once::new();
    LOGGED.call_once(|| match cfg.tls.ktls.get_ref().as_str() {
        "off" => tracing::info!(
            "TLS: kernel TLS off ([tls] ktls = \"off\"): records are sealed in user space"
        ),
        _ => tracing::info!("TLS: {}", ktls_probe().detail),
    });
    let provider = Provider::parse(cfg.tls.provider.get_ref()).unwrap_or_default();
    let crypto = provider.crypto();
    let now = UnixTime::now();
    let src = ringx_config::Source {
        name: &cfg.origin.name,
        text: &cfg.origin.text,
    };
    // Servers first, then streams (stream i is entry `cfg.server.len() + i`).
    let mut specs = Vec::with_capacity(values.len());
    let mut certs = Vec::new();
    // ALPN h2 per server ([http2] enable, a server's own `http2`); never on streams.
    let h2: Vec<bool> = routes.servers.iter().map(|s| s.http2).collect();
    for (i, t) in values.into_iter().enumerate() {
        let Some(t) = t else {
            specs.push(None);
            continue;
        };
        let st = t.get_ref().resolve(t.span(), &src)?;
        let resolver = match (st.acme, cfg.server.get(i)) {
            (true, Some(s)) => Some(acme_resolver(cfg, s.get_ref())),
            _ => None,
        };
        let mut keys = Vec::new();
        for ck in &st.certs {
            let ck = ck.get_ref();
            let m =
                material::load(ck.cert.get_ref(), ck.key.get_ref(), &crypto, now).map_err(|e| {
                    let span = if e.path == *ck.key.get_ref() {
                        ck.key.span()
                    } else {
                        ck.cert.span()
                    };
                    Error::config(cfg.error_at(span, e.to_string()).to_string())
                })?;
            let left = m.not_after - now.as_secs() as i64;
            if !certs
                .iter()
                .any(|c: &crate::metrics::listeners::CertInfo| c.path == *ck.cert.get_ref())
            {
                certs.push(crate::metrics::listeners::CertInfo {
                    path: ck.cert.get_ref().clone(),
                    subject: m.subject.clone(),
                    not_after: m.not_after,
                });
            }
            if left < 14 * 86400 {
                tracing::warn!(
                    "{}: the certificate ({}) expires in {} days",
                    ck.cert.get_ref().display(),
                    m.subject,
                    left / 86400
                );
            }
            keys.push(m.key);
        }
        let client = match &st.client_ca {
            None => None,
            Some(ca) => Some(ClientAuth {
                roots: material::load_roots(ca.get_ref()).map_err(|e| {
                    Error::config(cfg.error_at(ca.span(), e.to_string()).to_string())
                })?,
                required: st.verify != Some(ringx_config::tls::ClientVerify::Optional),
            }),
        };
        specs.push(Some(SiteSpec {
            keys,
            client,
            h2: h2.get(i).copied().unwrap_or(false),
            resolver,
        }));
    }
    // A TLS listener's handshakes pick their server with the map requests pick theirs by
    // `Host` with (`Routes::by_name`).
    let listeners = routes
        .by_listener
        .iter()
        .zip(&routes.listener_kind)
        .zip(&routes.by_name)
        .map(|((servers, kind), by_name)| {
            if let crate::route::ListenerKind::Stream(i) = kind {
                let at = cfg.server.len() + i;
                specs[at].as_ref()?;
                return Some(SniMap::new(std::iter::empty(), at));
            }
            let first = *servers.first()?;
            specs[first].as_ref()?;
            Some(by_name.clone())
        })
        .collect();
    let sessions = Sessions {
        cache: cfg.tls.session_cache,
        ticket_rotate_s: cfg
            .tls
            .session_tickets
            .then(|| cfg.tls.ticket_key_rotate.get_ref().0.as_secs() as u32),
        // With [cluster], the keys every host shares (through Redis: ringx's cluster.rs
        // fills them), the same across reloads; without it, this process's own.
        shared_tickets: cfg.cluster.is_some().then(ringx_tls::ticket_keys::global),
    };
    let server_order = cfg.tls.prefer_server_ciphers;
    let sites =
        Sites::build(provider, &sessions, server_order, specs, listeners).map_err(Error::config)?;
    Ok(Some(TlsSetup {
        sites,
        share: *cfg.tls.handshake_share.get_ref(),
        ktls,
        certs,
    }))
}

/// The certificate resolver of a server with `tls = { acme = true }`: its names' slot, kept
/// across reloads (the ACME thread fills it), with a temporary self-signed certificate
/// until the first one arrives unless `[acme] pending = "refuse"`.
fn acme_resolver(
    cfg: &Config,
    server: &ringx_config::Server,
) -> std::sync::Arc<dyn rustls::server::ResolvesServerCert> {
    let names = ringx_config::acme::names(server);
    let refuse = cfg
        .acme
        .as_ref()
        .is_some_and(|a| a.pending.get_ref() == "refuse");
    let shared = ringx_acme::global();
    let self_signed = || match ringx_acme::certs::self_signed(&names) {
        Ok(c) => Some(c),
        Err(e) => {
            tracing::warn!(
                "ACME: no temporary certificate for {}: {e}",
                names.join(" ")
            );
            None
        }
    };
    let slot = shared.slot(&names, || (!refuse).then(self_signed).flatten());
    if refuse {
        slot.set_pending(None);
    } else if slot.current().is_none() {
        slot.set_pending(self_signed());
    }
    std::sync::Arc::new(ringx_acme::Resolver::new(slot, shared))
}

/// One zone's TLS state.
pub struct ZoneTls {
    pub sites: Sites,
    /// The ciphers the kernel seals (kTLS), if it may.
    pub ktls: Option<ringx_tls::ktls::Support>,
    pub budget: Budget,
    /// Connections whose handshake waits for the budget.
    pub waiting: Waiting,
}

/// Handshakes waiting for the budget, with their connection's generation. Those already
/// under way go first (a client's second flight, which finishes a handshake the zone has paid
/// for). New ones are served round robin across client addresses, oldest first within each:
/// a flood of ClientHellos from a few addresses, however far beyond the budget, then delays a
/// client elsewhere by one handshake per flooding address, instead of putting it behind the
/// whole flood. A connection is queued once at most (`TlsTransport::queued`), so the queue is
/// bounded by the zone's connections, and what each holds meanwhile by
/// `ringx_tls::conn::MAX_HANDSHAKE_INPUT`. Entries of connections gone since are skipped
/// when their turn comes.
#[derive(Default)]
pub struct Waiting {
    started: VecDeque<(ConnId, u32)>,
    new: HashMap<Option<IpAddr>, VecDeque<(ConnId, u32)>>,
    /// Addresses with new handshakes waiting, in turn.
    turn: VecDeque<Option<IpAddr>>,
    new_count: usize,
}

impl Waiting {
    /// Queues a handshake from `src`.
    pub fn push(&mut self, c: ConnId, gen: u32, started: bool, src: Option<IpAddr>) {
        if started {
            return self.started.push_back((c, gen));
        }
        let q = self.new.entry(src).or_default();
        if q.is_empty() {
            self.turn.push_back(src);
        }
        q.push_back((c, gen));
        self.new_count += 1;
    }

    /// The next handshake to go on with.
    pub fn front(&self) -> Option<(ConnId, u32)> {
        if let Some(s) = self.started.front() {
            return Some(*s);
        }
        let src = self.turn.front()?;
        self.new.get(src)?.front().copied()
    }

    /// Removes what [`Waiting::front`] returned; its address's turn passes.
    pub fn pop_front(&mut self) {
        if self.started.pop_front().is_some() {
            return;
        }
        let Some(src) = self.turn.pop_front() else {
            return;
        };
        if let Some(q) = self.new.get_mut(&src) {
            if q.pop_front().is_some() {
                self.new_count -= 1;
            }
            if q.is_empty() {
                self.new.remove(&src);
            } else {
                self.turn.push_back(src);
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.started.is_empty() && self.new_count == 0
    }

    pub fn len(&self) -> usize {
        self.started.len() + self.new_count
    }
}

/// How often a zone goes on with handshakes that wait for the budget.
pub const RETRY: Duration = Duration::from_millis(1);

impl ZoneTls {
    pub fn new(setup: &TlsSetup, now: Instant) -> ZoneTls {
        ZoneTls {
            sites: setup.sites.for_zone(),
            ktls: setup.ktls,
            budget: Budget::new(setup.share, now),
            waiting: Waiting::default(),
        }
    }

    /// A reload: new handshakes use the new certificates; connections keep theirs.
    pub fn replace(&mut self, setup: &TlsSetup, now: Instant) {
        self.sites = setup.sites.for_zone();
        self.ktls = setup.ktls;
        let (waits, spent) = (self.budget.waits, self.budget.spent_ns);
        self.budget = Budget::new(setup.share, now);
        // The counters go on across reloads.
        self.budget.waits = waits;
        self.budget.spent_ns = spent;
    }
}

/// The transport of a connection accepted on listener `li`: TLS where the listener speaks it
/// (kernel TLS offered where the zone's driver can hand the keys over in order), else plain.
pub fn transport_for(
    z: Option<&ZoneTls>,
    li: usize,
    io: &ringx_engine::Io,
) -> crate::transport::Transport {
    use crate::transport::{TlsTransport, Transport};
    match z {
        Some(z) if z.sites.is_tls(li) => {
            let ktls = z.ktls.filter(|_| io.can_set_sockopt());
            Transport::Tls(Box::new(TlsTransport::new(z.sites.provider(), ktls)))
        }
        _ => Transport::Plain,
    }
}

/// The body nginx sends for plain HTTP on a TLS port.
pub const PLAIN_HTTP_BODY: &str = "<html>\r\n<head><title>400 The plain HTTP request was sent to HTTPS port</title></head>\r\n<body>\r\n<center><h1>400 Bad Request</h1></center>\r\n<center>The plain HTTP request was sent to HTTPS port</center>\r\n</body>\r\n</html>\r\n";

/// What a connection's handshake agreed.
pub fn info_of(conn: &ringx_tls::Session) -> crate::transport::TlsInfo {
    let protocol = match conn.protocol_version() {
        Some(rustls::ProtocolVersion::TLSv1_3) => "TLSv1.3",
        Some(rustls::ProtocolVersion::TLSv1_2) => "TLSv1.2",
        _ => "-",
    };
    let cipher = conn
        .negotiated_cipher_suite()
        .and_then(|s| s.suite().as_str())
        .unwrap_or("-");
    // Printable before anything reads it: it goes into upstream headers and log lines.
    let client_dn = conn
        .peer_certificates()
        .and_then(|c| c.first())
        .and_then(|der| {
            x509_parser::parse_x509_certificate(der.as_ref())
                .ok()
                .map(|(_, c)| printable(&c.subject().to_string()))
        });
    crate::transport::TlsInfo {
        protocol,
        cipher,
        sni: conn.server_name().map(str::to_string),
        client_dn,
        client_auth: false,
        server: 0,
        resumed: matches!(conn.handshake_kind(), Some(rustls::HandshakeKind::Resumed)),
        h2: conn.alpn_protocol() == Some(b"h2"),
    }
}

/// A certificate field as it may go into a header or a log line: printable ASCII, anything
/// else (a CR or LF in a subject would split a header) as `\xHH`.
pub fn printable(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if (0x20..0x7f).contains(&b) && b != b'\\' {
            out.push(b as char);
        } else {
            out.push_str(&format!("\\x{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::Waiting;
    use ringx_engine::ConnId;

    fn ip(last: u8) -> Option<std::net::IpAddr> {
        Some(std::net::IpAddr::from([127, 0, 0, last]))
    }

    /// Handshakes under way go first; new ones take turns by client address, oldest first
    /// within one.
    #[test]
    fn started_first_then_addresses_in_turn() {
        let mut w = Waiting::default();
        let flood = ip(1);
        for i in 0..100 {
            w.push(ConnId(i), 1, false, flood);
        }
        w.push(ConnId(2000), 7, false, ip(2));
        w.push(ConnId(3000), 1, true, flood);
        assert_eq!(w.len(), 102);
        let mut order = Vec::new();
        while let Some((c, _)) = w.front() {
            order.push(c.0);
            w.pop_front();
            if order.len() == 5 {
                break;
            }
        }
        assert_eq!(
            order,
            [3000, 0, 2000, 1, 2],
            "under way, flood, the other client, flood"
        );
        assert_eq!(w.len(), 97);
    }
}
