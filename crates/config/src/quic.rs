//! HTTP/3's side of the configuration: `quic = true` on a `[[server]]` with `tls` (QUIC on
//! UDP, at the same addresses and ports as the server's TCP listeners), and the `[http]`
//! limits a zone holds QUIC peers to.
//!
//! ```toml
//! [http]
//! quic_max_connections = 10000  # QUIC connections one zone holds; past it new ones are refused
//! quic_idle_timeout = "30s"     # a connection silent this long is closed (RFC 9000 §10.1)
//! quic_max_streams = 100        # request streams one connection may have open at once
//! quic_retry = "auto"           # Retry tokens (address validation): "auto", "always", "never"
//! quic_early_data = false       # 0-RTT: GET/HEAD/OPTIONS served early, others 425 Too Early
//! quic_host = 0                 # behind `ringx lb`: this host's id there (1..255); 0: alone
//!
//! [[server]]
//! listen = ["0.0.0.0:443", "[::]:443"]
//! tls = { cert = "/etc/ringx/fullchain.pem", key = "/etc/ringx/key.pem" }
//! quic = true                   # HTTP/3 on UDP 443; TCP responses carry Alt-Svc: h3=":443"
//! ```
//!
//! Everything is checked here, at its place in the file. What the QUIC endpoint does with the
//! values is the server's (`ringx-quic`'s `Limits`).

use serde::Deserialize;
use toml::Spanned;

use crate::error::{ConfigError, Source};
use crate::units::Dur;
use crate::upstream::{Stream, StreamProtocol};
use crate::vhost::Server;

/// When a zone asks a new client to prove its address with a Retry token (RFC 9000 §8.1)
/// before it keeps any state for it. A Retry costs the client a round trip; without one, a
/// flood of Initial packets from forged addresses makes the zone hold handshakes for no one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Retry {
    /// Only while the zone is under load (many handshakes in progress): clients pay the round
    /// trip when a flood is likely, not otherwise.
    #[default]
    Auto,
    /// Every new connection.
    Always,
    /// No new connection (the 3× amplification limit still holds until the address is
    /// validated by the handshake).
    Never,
}

/// The `[http]` limits checked here.
pub(crate) struct Limits<'a> {
    pub max_connections: &'a Spanned<u32>,
    pub idle_timeout: &'a Spanned<Dur>,
    pub max_streams: &'a Spanned<u32>,
    pub host: &'a Spanned<u32>,
    pub early_data: &'a Spanned<bool>,
    /// `[tls] session_tickets`.
    pub tickets: bool,
}

/// The checks of `quic = true` on servers and streams, and of the `[http]` limits.
pub(crate) fn validate(
    limits: Limits<'_>,
    servers: &[Spanned<Server>],
    streams: &[Spanned<Stream>],
    src: &Source,
) -> Result<(), ConfigError> {
    validate_limits(&limits, src)?;
    if *limits.early_data.get_ref() && !limits.tickets {
        return Err(src.err(
            limits.early_data.span(),
            "quic_early_data = true needs session tickets: a client sends 0-RTT only with the \
             ticket of an earlier connection; set [tls] session_tickets = true (the default), \
             or remove quic_early_data",
        ));
    }
    for s in streams {
        if let Some(q) = s.get_ref().quic.as_ref().filter(|q| *q.get_ref()) {
            return Err(src.err(
                q.span(),
                "quic = true is for a [[server]] with tls (HTTP/3); a [[stream]] passes bytes \
                 on: to pass QUIC through to a server behind, remove quic and use \
                 protocol = \"udp\"",
            ));
        }
    }
    for s in servers {
        let sv = s.get_ref();
        if *sv.quic.get_ref() && sv.tls.is_none() {
            return Err(src.err(
                sv.quic.span(),
                "quic = true needs tls on this server: QUIC is always encrypted (TLS 1.3 over \
                 UDP); add tls = { cert = \"fullchain.pem\", key = \"key.pem\" } (or \
                 tls = { acme = true }), or remove quic",
            ));
        }
    }
    agree_per_address(servers, src)?;
    for st in streams {
        let st = st.get_ref();
        if st.protocol != StreamProtocol::Udp {
            continue;
        }
        for a in &st.listen {
            let owner = servers.iter().find(|s| {
                *s.get_ref().quic.get_ref()
                    && s.get_ref()
                        .listen
                        .iter()
                        .any(|b| b.get_ref() == a.get_ref())
            });
            if let Some(o) = owner {
                return Err(src.err(
                    a.span(),
                    format!(
                        "udp {} is also the QUIC address of the server at line {} (quic = \
                         true): give the stream another port, or remove quic from that server",
                        a.get_ref(),
                        src.err(o.span(), "").line
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Servers that share a listen address agree about `quic`: HTTP/3 on a UDP port serves every
/// server of the address (SNI picks among them as on TCP), so one cannot have it alone.
fn agree_per_address(servers: &[Spanned<Server>], src: &Source) -> Result<(), ConfigError> {
    for (i, s) in servers.iter().enumerate() {
        let quic = *s.get_ref().quic.get_ref();
        for a in &s.get_ref().listen {
            let other = servers[..i].iter().find(|o| {
                *o.get_ref().quic.get_ref() != quic
                    && o.get_ref()
                        .listen
                        .iter()
                        .any(|b| b.get_ref() == a.get_ref())
            });
            if let Some(o) = other {
                let line = src.err(o.span(), "").line;
                let (theirs, ours) = if quic {
                    ("no quic", "has quic = true")
                } else {
                    ("quic = true", "has none")
                };
                return Err(src.err(
                    a.span(),
                    format!(
                        "servers on {} disagree about quic: the server at line {line} has \
                         {theirs} and this one {ours}; HTTP/3 on an address serves all its \
                         servers or none: write the same quic in both",
                        a.get_ref()
                    ),
                ));
            }
        }
    }
    Ok(())
}

fn validate_limits(h: &Limits<'_>, src: &Source) -> Result<(), ConfigError> {
    let n = |v: &Spanned<u32>, lo: u32, hi: u32, what: &str| {
        let x = *v.get_ref();
        if x < lo || x > hi {
            return Err(src.err(v.span(), format!("{what} must be between {lo} and {hi}")));
        }
        Ok(())
    };
    n(h.max_connections, 1, 1_000_000, "quic_max_connections")?;
    n(h.max_streams, 1, 65_536, "quic_max_streams")?;
    if *h.host.get_ref() > 255 {
        return Err(src.err(
            h.host.span(),
            "quic_host must be between 0 and 255: the host byte of this host's QUIC connection \
             IDs, the quic_host of its backend in the balancer's [lb] (0: no balancer)",
        ));
    }
    let idle = h.idle_timeout.get_ref().0;
    if idle < std::time::Duration::from_secs(1) || idle > std::time::Duration::from_secs(3600) {
        return Err(src.err(
            h.idle_timeout.span(),
            "quic_idle_timeout must be between 1s and 1h",
        ));
    }
    Ok(())
}

pub(crate) fn default_max_connections() -> Spanned<u32> {
    Spanned::new(0..0, 10_000)
}
pub(crate) fn default_idle_timeout() -> Spanned<Dur> {
    Spanned::new(0..0, Dur(std::time::Duration::from_secs(30)))
}
pub(crate) fn default_host() -> Spanned<u32> {
    Spanned::new(0..0, 0)
}
pub(crate) fn default_max_streams() -> Spanned<u32> {
    Spanned::new(0..0, 100)
}

pub(crate) fn default_early_data() -> Spanned<bool> {
    Spanned::new(0..0, false)
}
