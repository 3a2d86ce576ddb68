//! Automatic certificates through ACME (RFC 8555), for the servers with
//! `tls = { acme = true }`.
//!
//! | module | what |
//! |---|---|
//! | [`shared`] | what the zones read: each name set's certificate ([`Slot`]), the http-01 and tls-alpn-01 answers, swapped in without a lock |
//! | [`resolver`] | rustls's certificate resolver for an ACME server: the challenge certificate for `acme-tls/1`, else the slot's |
//! | [`storage`] | the account and certificates in a directory, behind [`Storage`] (with a lock, for a fleet sharing one) |
//! | [`storage_redis`] | the same in Redis (`[cluster]`): one host of a fleet orders under a Redis lock, the others load what it stored |
//! | [`challenges_redis`] | the challenge answers in Redis too (`[cluster]`), copied to every host before the CA validates, so any host answers |
//! | [`certs`] | keys, CSRs, self-signed and challenge certificates; PEM to rustls; validity and the ARI identifier |
//! | [`http`] | a blocking HTTPS client for instant-acme, trusting the configured CA bundle |
//! | [`order`] | one order carried out: authorizations, challenges, finalization |
//! | [`manager`] | the thread: loads from storage, orders what is missing, renews, backs off |
//!
//! Nothing here runs on a zone except [`resolver`] (a lock-free load in the handshake) and
//! [`Shared::http01`] (the same, for a request to `/.well-known/acme-challenge/`); the
//! answers another host posted are put in [`Shared`] by the subscriber's thread.

pub mod block;
pub mod certs;
pub mod challenges_redis;
pub mod http;
pub mod manager;
pub mod order;
pub mod resolver;
pub mod shared;
pub mod storage;
pub mod storage_redis;

pub use manager::{Challenge, KeyType, Settings};
pub use resolver::{Resolver, ACME_TLS_ALPN};
pub use shared::{global, Shared, Slot};
pub use storage::{DirStorage, Storage};
pub use storage_redis::RedisStorage;

/// The path prefix of http-01 (RFC 8555 §8.3).
pub const HTTP01_PREFIX: &str = "/.well-known/acme-challenge/";
