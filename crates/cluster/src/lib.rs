//! Several ringx hosts sharing state through Redis (`[cluster]`, issue 42).
//!
//! One [`Client`] per process runs a thread of its own ([`worker`]) that holds the one
//! connection to the Redis master: found among fixed servers or through Sentinel
//! ([`discover`]), over TLS and with AUTH where configured ([`conn`]), spoken to in RESP2
//! ([`resp`], sans-I/O). Callers queue commands ([`Client::submit`]) and take the reply
//! within a budget ([`Client::call`], [`Pending::try_get`]): Redis slow or gone costs a
//! caller its budget at most, never a wait on a socket. Lost connections are made anew with
//! backoff and a failover is followed; [`Counters`] says so on `/metrics`.
//!
//! Purges and drains reach every host through pub/sub: [`broadcast::broadcast`] publishes
//! an [`Event`] ([`events`]: the message, its codec and keys) and collects the hosts'
//! confirmations; each host's [`Subscriber`] (a thread and a connection of its own) applies
//! what it receives through the binary's [`Handler`], confirms, and says every 2 s that the
//! host is alive ([`broadcast::heartbeat`]).
//!
//! TLS session ticket keys are shared the same way ([`tickets`]): a [`TicketSync`] thread
//! per host reads them from Redis and rotates them under a lock, so that a ticket one host
//! issued resumes on every other.
//!
//! ```no_run
//! use std::time::Duration;
//! use ringx_cluster::{Client, Settings, Target};
//! let c = Client::start(Settings {
//!     target: Target::Servers(vec!["127.0.0.1:6379".into()]),
//!     username: None,
//!     password: None,
//!     tls: None,
//!     prefix: "ringx:".into(),
//!     connect_timeout: Duration::from_secs(1),
//!     timeout: Duration::from_millis(500),
//!     events_secret: None,
//! })
//! .unwrap();
//! let key = c.key("hello");
//! match c.call(&[b"GET", key.as_bytes()], c.timeout()) {
//!     Ok(v) => println!("{v:?}"),
//!     Err(e) => println!("going on without Redis: {e}"),
//! }
//! ```
//!
//! Why not the `redis` crate: its TLS builds rustls's configuration from the process's
//! default crypto provider, which ringx (two providers compiled in, chosen per listener)
//! does not install, and it brings `url`/`idna` and about thirty crates for what is here a
//! few hundred lines.

pub mod broadcast;
pub mod client;
pub mod conn;
pub mod discover;
pub mod error;
pub mod events;
pub mod metrics;
pub mod resp;
pub mod settings;
pub mod subscriber;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod tickets;
pub mod tickets_metrics;
pub mod worker;

pub use client::{Client, Pending};
pub use conn::TlsSpec;
pub use discover::Target;
pub use error::Error;
pub use events::Event;
pub use metrics::Counters;
pub use resp::Value;
pub use settings::Settings;
pub use subscriber::{Applied, Handler, Subscriber};
pub use tickets::{TicketSettings, TicketSync};

#[cfg(test)]
mod client_tests;
#[cfg(test)]
mod subscriber_tests;
#[cfg(test)]
mod tickets_tests;
