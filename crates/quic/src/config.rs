//! What a zone's QUIC endpoint is made with: the keys every zone shares (stateless resets
//! and address-validation tokens must be recognised by whichever zone a packet reaches), the
//! connection IDs that name the zone ([`ZoneCids`]), TLS from ringx's own certificates and
//! SNI selection (`rustls`, as the TCP listeners use it), and the limits that bound what a
//! peer can make a zone hold.

use std::sync::Arc;
use std::time::Duration;

use aws_lc_rs::{hkdf, hmac};
use quinn_proto::crypto::rustls::QuicServerConfig;
use quinn_proto::{
    EndpointConfig, IdleTimeout, MtuDiscoveryConfig, ServerConfig, TransportConfig, VarInt,
};

use crate::cid::{Owner, ZoneCids};
use crate::early::{SingleUseTickets, StatefulOnly};
use crate::known_paths::FULL;

/// The ALPN of HTTP/3 (RFC 9114 §3.1).
pub const ALPN_H3: &[u8] = b"h3";

/// The secrets the zones of a process share.
#[derive(Clone)]
pub struct Keys {
    /// Stateless reset tokens are derived from it (RFC 9000 §10.3.2): any zone can reset a
    /// connection another zone lost.
    reset: Arc<hmac::Key>,
    /// Retry and NEW_TOKEN tokens are sealed with keys derived from it: a token one zone
    /// issued is accepted by another.
    token: Arc<hkdf::Prk>,
    /// The sessions of the tickets issued where 0-RTT is on, each resumable once
    /// (`early.rs`): a ticket one zone issued resumes in another, and only once.
    tickets: Arc<SingleUseTickets>,
}

impl Keys {
    /// Fresh keys from the system's cryptographic generator.
    pub fn generate() -> Result<Keys, Error> {
        let mut secret = [0u8; 64];
        aws_lc_rs::rand::fill(&mut secret).map_err(|_| Error::Random)?;
        let reset = hmac::Key::new(hmac::HMAC_SHA256, &secret[..32]);
        let token = hkdf::Salt::new(hkdf::HKDF_SHA256, &[]).extract(&secret[32..]);
        secret.fill(0);
        Ok(Keys {
            reset: Arc::new(reset),
            token: Arc::new(token),
            tickets: Arc::new(SingleUseTickets::default()),
        })
    }
}

/// What a peer may make a zone hold, and how long an idle connection lives.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Request streams a connection may have open at once.
    pub max_streams: u32,
    /// Unidirectional streams a connection may have open at once: HTTP/3 needs three of the
    /// client's (control, QPACK encoder and decoder, RFC 9114 §6.2), and clients open a few
    /// reserved ones to exercise the rule that unknown types are ignored.
    pub max_uni_streams: u32,
    /// A connection with no packet for this long is closed silently (RFC 9000 §10.1).
    pub idle_timeout: Duration,
    /// Bytes a stream may send before the zone reads them (its flow-control window).
    pub stream_window: u32,
    /// Bytes all of a connection's streams may send before the zone reads them.
    pub conn_window: u32,
    /// Handshakes a zone keeps in progress before it refuses new ones.
    pub max_incoming: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_streams: 128,
            max_uni_streams: 16,
            idle_timeout: Duration::from_secs(60),
            stream_window: 1 << 20,
            conn_window: 8 << 20,
            max_incoming: 4096,
        }
    }
}

/// Why a QUIC endpoint could not be made.
#[derive(Debug)]
pub enum Error {
    /// The system's random generator failed.
    Random,
    /// The TLS configuration cannot carry QUIC: its provider lacks TLS_AES_128_GCM_SHA256,
    /// which protects the Initial packets (RFC 9001 §5.2). That TLS 1.3 is enabled at all
    /// is for the configuration to check: a listener with `quic = true` must allow it.
    Tls(String),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Random => write!(f, "QUIC: the system's random generator failed"),
            Error::Tls(e) => write!(
                f,
                "QUIC: the TLS configuration cannot be used ({e}); QUIC needs TLS 1.3 with \
                 TLS_AES_128_GCM_SHA256 enabled"
            ),
        }
    }
}

impl std::error::Error for Error {}

/// The endpoint configuration of the zone `owner` names: its connection IDs, the shared
/// reset key.
pub fn endpoint_config(owner: Owner, keys: &Keys) -> EndpointConfig {
    let mut c = EndpointConfig::new(keys.reset.clone());
    c.cid_generator(move || Box::new(ZoneCids::new(owner, None)));
    c
}

/// The server configuration over `tls` (ringx's certificates and SNI selection, with the
/// ALPN set to `h3` and 0-RTT off: see [`for_quic`]), with `limits`.
pub fn server_config(
    tls: Arc<rustls::ServerConfig>,
    limits: &Limits,
    keys: &Keys,
) -> Result<ServerConfig, Error> {
    let crypto = QuicServerConfig::try_from(tls).map_err(|e| Error::Tls(e.to_string()))?;
    let crypto = crate::handshake::ObservedConfig::new(crypto);
    let mut c = ServerConfig::new(Arc::new(crypto), keys.token.clone());
    c.transport_config(Arc::new(transport(limits, None)));
    c.max_incoming(limits.max_incoming);
    Ok(c)
}

/// `base` for a connection from a client whose path is known to carry datagrams of `mtu`
/// bytes ([`crate::known_paths`]): it starts at that size, and searches only above it.
/// quinn-proto has one starting size per connection: a path it migrates to (another
/// address) starts there too, and its black-hole detection brings that path down to 1,200
/// if the size does not hold there.
pub fn known_path_config(base: &ServerConfig, limits: &Limits, mtu: u16) -> ServerConfig {
    let mut c = base.clone();
    c.transport_config(Arc::new(transport(limits, Some(mtu))));
    c
}

/// The transport parameters and behaviour of a connection: `limits`, and the datagram size
/// it starts at (`None`: 1,200 bytes, QUIC's minimum). Path MTU discovery searches up to
/// [`FULL`] either way, and black-hole detection falls back to 1,200.
fn transport(limits: &Limits, start_mtu: Option<u16>) -> TransportConfig {
    let mut t = TransportConfig::default();
    t.max_concurrent_bidi_streams(VarInt::from_u32(limits.max_streams))
        .max_concurrent_uni_streams(VarInt::from_u32(limits.max_uni_streams))
        .max_idle_timeout(IdleTimeout::try_from(limits.idle_timeout).ok())
        .stream_receive_window(VarInt::from_u32(limits.stream_window))
        .receive_window(VarInt::from_u32(limits.conn_window));
    let mut mtud = MtuDiscoveryConfig::default();
    mtud.upper_bound(FULL);
    t.mtu_discovery_config(Some(mtud));
    if let Some(mtu) = start_mtu {
        t.initial_mtu(mtu);
    }
    t
}

/// `tls` made fit for QUIC: the HTTP/3 ALPN only, and early data as `early_data` says.
///
/// Without it, no early data (a replayed request must not reach an upstream), and tickets
/// are `tls`'s own: stateless, sealed with the keys every zone (and, with `[cluster]`, every
/// host) shares. With it, and tickets on (`send_tls13_tickets`), 0-RTT is accepted on a
/// ticket used for the first time: tickets are stateful, their sessions in the process's
/// single-use store (`keys`, `early.rs`), as rustls requires for early data (RFC 8446 §8.1),
/// and `max_early_data_size` is `u32::MAX`, the one value QUIC allows besides 0 (RFC 9001
/// §4.6.1). What a request in 0-RTT may do is the HTTP/3 role's to decide (RFC 8470).
pub fn for_quic(
    mut tls: rustls::ServerConfig,
    keys: &Keys,
    early_data: bool,
) -> rustls::ServerConfig {
    tls.alpn_protocols = vec![ALPN_H3.to_vec()];
    tls.max_early_data_size = 0;
    if early_data && tls.send_tls13_tickets > 0 {
        tls.ticketer = Arc::new(StatefulOnly);
        tls.session_storage = keys.tickets.clone();
        tls.max_early_data_size = u32::MAX;
        // Answers to requests that came in 0-RTT go before the client's Finished (0.5-RTT)
        // without `send_half_rtt_data`, which is rustls's switch for its own TCP records:
        // over QUIC it hands the 1-RTT secrets to quinn-proto with the server's Finished.
    }
    tls
}
