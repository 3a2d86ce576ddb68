//! TLS for ringx zones, on rustls.
//!
//! | module | what |
//! |---|---|
//! | [`material`] | certificates and keys from PEM files, and the checks `ringx check` reports |
//! | [`select`] | one server's certificates, chosen by what the client can verify (RSA / ECDSA) |
//! | [`sni`] | which server's settings a handshake gets, by SNI |
//! | [`sites`] | the rustls configurations of every TLS server; each zone's copy |
//! | [`tickets`] | session ticket keys rotated on a schedule, shared by the zones |
//! | [`ticket_keys`] | ticket keys put in from outside (`[cluster]`: shared by several hosts) |
//! | [`conn`] | one connection driven sans-I/O on the zone's buffers: the handshake |
//! | [`traffic`] | the connection after its handshake: alerts, close_notify, KeyUpdate |
//! | [`record`] | TLS records sealed and opened in place, with the keys rustls hands over |
//! | [`ktls`] | kernel TLS: the probe, the kernel's crypto structures from rustls's secrets |
//! | [`budget`] | the share of a zone's time that handshakes may take |
//! | [`client`] | TLS to upstreams: the client configuration and connection |
//! | [`provider`] | aws-lc-rs or ring |
//!
//! The server crate's `transport` puts a [`conn::TlsConn`] under a connection's role.

pub mod budget;
pub mod client;
pub mod conn;
mod hkdf;
pub mod ktls;
pub mod material;
pub mod provider;
pub mod record;
pub mod recv;
mod rsa_key;
pub mod select;
pub mod sites;
pub mod sni;
pub mod ticket_keys;
pub mod tickets;
pub mod traffic;
mod wipe;

pub use budget::Budget;
pub use conn::{Recv, TlsConn};
pub use provider::Provider;
pub use sites::Sites;
pub use traffic::{KernelOut, Session};

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_limits;
#[cfg(test)]
mod tests_tickets;
#[cfg(test)]
mod tests_traffic;
