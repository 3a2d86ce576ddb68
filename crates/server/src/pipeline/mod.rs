//! The request pipeline: what ringx does with a request, whatever protocol carried it.
//! Each stage decides and returns a [`Step`] (sans-I/O, in the manner of the guards'
//! `Verdict` and the cache's `Decision` it is built from); the roles (HTTP/1 and HTTP/2
//! under `role/`, and HTTP/3 next) carry the steps out in their own framing: holding a
//! request, sending a subrequest, writing a reply, proxying. Nothing here imports those roles
//! (only what they share: the proxied `Exchange`'s capture, `role::proxy_start`).
//!
//! | stage | file | decides |
//! |---|---|---|
//! | routing | `routing.rs` | the server and location (nginx's order, rewrites), a refusal before them, the local answer |
//! | access | `access.rs` | the location's guards: pass, refuse, delay, verify, ask `auth_request` |
//! | cache | `cache.rs` | the location's proxy cache: hit, pass, fill, wait for another's fill |
//! | all of them | `serve.rs` | the stages in order, and where the request goes: proxy, gRPC, local answer |
//!
//! A request between the stages' looks at it is a [`pending::Pending`], whichever protocol
//! carries it.

pub mod access;
pub mod cache;
pub mod failure;
pub mod fields;
pub mod pending;
pub mod routing;
pub mod serve;

use std::time::Instant;

use crate::cache::fill::{Asked, Fill};
use crate::cache::Found;
use crate::role::exchange::capture::Capture;

/// What a stage decided for a request: the role carries it out.
pub enum Step {
    /// It goes on: to the next stage, and to the proxy with this capture (the cache's: the
    /// fill, or the cache status it passes with; None from the guard).
    Go(Option<Capture>),
    /// Refuse it with `status` and these header lines (CRLF-terminated), or the error page
    /// configured for that status.
    Refuse { status: u16, headers: String },
    /// Answer it from the cache.
    Hit(Box<Hit>),
    /// Look at it again at this instant (a `limit_req` delay, or another request fills the
    /// cache entry it wants).
    WaitUntil(Instant),
    /// Look at it again when the auth pool has verified its password.
    WaitVerify,
    /// Send the `auth_request` subrequest, `head` to `upstream`, and look at the request
    /// again with its answer.
    Ask { upstream: usize, head: Vec<u8> },
    /// Proxy it, with the cache's capture (its fill, or the cache status it passes with).
    Proxy(Option<Capture>),
    /// Open its gRPC call (a `grpc://` location, over HTTP/2).
    Grpc,
    /// Answer it here: its location returns, serves files, or routing decided already (a
    /// redirect, an error).
    Local,
}

/// An answer from the cache.
pub struct Hit {
    /// The entry (its body in memory or on disk).
    pub found: Found,
    /// The cache status (`HIT`, `STALE`, ...) and its header line (may be empty).
    pub status: &'static str,
    pub line: Vec<u8>,
    /// What the request asked (validators, HEAD, the status an error page tells).
    pub asked: Asked,
    /// A stale answer's refresh, to send once the client has its answer.
    pub refresh: Option<Refresh>,
}

/// A cache entry's refresh: the fill, its upstream and the request head.
pub type Refresh = (Box<Fill>, usize, Vec<u8>);

#[cfg(test)]
mod tests;
