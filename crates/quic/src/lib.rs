//! QUIC for ringx's zones (issue 38's transport): quinn-proto's sans-I/O endpoint and
//! connections, driven by the zone's own loop on its own UDP socket, made with:
//!
//! | | file |
//! |---|---|
//! | connection IDs that name the zone (and host) owning each connection, which the steering programs read | `cid.rs` |
//! | the keys the zones share, TLS over ringx's certificates, the limits | `config.rs` |
//! | 0-RTT's anti-replay: single-use tickets the zones share | `early.rs` |
//! | what a server handshake did that quinn-proto does not say (resumed, early data refused) | `handshake.rs` |
//! | a new connection's Initial keys, derived once for its first packet and itself | `initial.rs` |
//! | the client addresses whose path carried larger datagrams lately: new connections from them start at that size | `known_paths.rs` |
//! | a decrypted packet's trailing PADDING, left off before quinn-proto reads it a byte at a time | `padding.rs` |
//!
//! quinn-proto rather than quiche: it is Rust over rustls 0.23, the TLS stack ringx-tls
//! already builds, so a QUIC listener serves the same certificates with the same SNI
//! selection and provider as the TCP ones, and no second TLS library (BoringSSL) enters the
//! binary.

#![forbid(unsafe_code)]

pub mod cid;
pub mod config;
pub mod early;
pub mod handshake;
pub mod initial;
pub mod known_paths;
pub mod padding;

pub use cid::{Owner, ZoneCids, CID_LEN, EPOCH_BIT, ROTATION, ZONE_BYTE};
pub use config::{
    endpoint_config, for_quic, known_path_config, server_config, Error, Keys, Limits, ALPN_H3,
};
pub use handshake::{Handshake, HandshakeSeen};
pub use known_paths::KnownPaths;
