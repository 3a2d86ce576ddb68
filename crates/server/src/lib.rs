//! # ringx-server: what serves
//!
//! Routing, responses, static files, the reverse proxy, the stream (L4) proxy, metrics and
//! the access log, run as zone handlers on [`ringx_engine`].
//!
//! A connection is a [transport](transport) plus a [role](role): the zone ([`zone::Zone`])
//! keeps one record per connection and dispatches the engine's events to its role; the roles
//! share a [`ctx::ZoneCtx`]. See `ARCHITECTURE.md` at the repository's root.
//!
//! | module | holds |
//! |---|---|
//! | [`compiled`] | the one compile step from a configuration, for start-up and reload |
//! | [`route`], [`settings`] | virtual servers and locations; the HTTP limits and timeouts |
//! | [`response`] | the response writer, which reports what it wrote |
//! | [`answer`] | local responses as a location configures them: added headers, error pages, redirects, files compressed |
//! | [`compress`] | Accept-Encoding negotiation, the streaming encoders, precompressed files |
//! | [`rewrite`] | nginx's location order, rewrite rules, try_files, error pages, added headers, variables |
//! | [`static_files`], [`mime`] | files beneath a root, validators, ranges |
//! | [`pipeline`] | the request policy whatever the protocol: each stage decides a [`pipeline::Step`], the roles carry it out |
//! | [`role`] | HTTP/1, upstream, tunnel, stream and echo connections; the proxied exchange |
//! | [`transport`] | the byte layer under a role (plain TCP or TLS) |
//! | [`upstream`] | upstream definitions, balancing and pools per zone, health checks, the connector |
//! | [`ctx`] | what the roles share with their zone: [`ctx::Cx`], a connection's [`ctx::base::Base`], the request log, the memory trim |
//! | [`zone`] | the zone handler: dispatch, timers, control (drain, reload) |
//! | [`metrics`], [`udp_counters`], [`accesslog`] | counters and their exposition; the access log writer |
//! | [`error`] | typed errors: what failed, on which side, whether to retry |
//! | [`guard`] | access rules, authentication, request and connection limits, escalation to XDP |

pub mod accesslog;
mod alt_svc;
pub mod answer;
pub mod cache;
pub mod compiled;
pub mod compress;
pub mod ctx;
pub mod error;
pub mod guard;
pub mod metrics;
pub mod mime;
pub mod pipeline;
pub mod response;
pub mod rewrite;
pub mod role;
pub mod route;
mod route_build;
pub mod settings;
pub mod static_files;
pub mod tls;
pub mod transport;
pub mod udp_counters;
pub mod upstream;
pub mod zone;

#[cfg(test)]
mod alt_svc_tests;
#[cfg(test)]
mod testkit;

pub use compiled::Compiled;
pub use error::{Error, Result};
