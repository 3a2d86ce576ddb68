//! The request pipeline: what ringx does with a request, whatever protocol carried it.
//! Each stage decides and returns a [`Step`] (sans-I/O, in the manner of the guards'
//! `Verdict` and the cache's `Decision` it is built from); the roles (HTTP/1, HTTP/2 and
//! HTTP/3 under `role/`) carry the steps out in their own framing: holding a
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
//! The location's `add_header` lines on what the access and cache stages answer themselves
//! (a refusal, an answer from the cache) are expanded by them into the step (`added.rs`).
//!
//! A request between the stages' looks at it is a [`pending::Pending`], whichever protocol
//! carries it.

pub mod access;
pub mod added;
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
    /// Refuse it with `status` and these header lines, or the error page configured for that
    /// status (which carries the refusal's own lines only).
    Refuse { status: u16, headers: RefusalLines },
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
    /// Open its gRPC call (a `grpc://` location, over HTTP/2 or HTTP/3).
    Grpc,
    /// Answer it here: its location returns, serves files, or routing decided already (a
    /// redirect, an error).
    Local,
}

/// The header lines of a guard's refusal, CRLF-terminated: its own (`WWW-Authenticate`,
/// `Retry-After`), which ride on its error page too, then the `add_header` lines of the
/// refusing location, which only the plain refusal gets: an error page takes the lines of the
/// location serving it, as after nginx's internal redirect.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct RefusalLines {
    text: String,
    /// The length of the refusal's own lines, at the start of `text`.
    own: usize,
}

impl RefusalLines {
    /// The refusal's own lines, none added yet.
    pub fn own(text: String) -> RefusalLines {
        RefusalLines {
            own: text.len(),
            text,
        }
    }

    /// Adds the location's `add_header` lines (`added`), for the plain refusal.
    pub fn add(&mut self, added: &str) {
        self.text.push_str(added);
    }

    /// The refusal's own lines: those its error page carries.
    pub fn for_page(&self) -> &str {
        &self.text[..self.own]
    }

    /// Every line: the plain refusal's.
    pub fn plain(&self) -> &str {
        &self.text
    }
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
