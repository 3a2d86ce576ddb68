//! `ringx import`: an nginx configuration (nginx.conf and what it includes) becomes a ringx
//! configuration, with a [`Report`] of every directive that was not carried over exactly:
//! approximated, refused or irrelevant, each at its `FILE:LINE` with the reason.
//!
//! * [`main_ctx`]: the main context (`worker_processes` → `zones`, `worker_cpu_affinity` →
//!   `cpus`, `user`, `pid`, `error_log`, `events`), and the driver;
//! * `http` and `server`: the `http` context and its servers; `inherit`: the directives a
//!   location inherits from its server and `http` (nginx's merge: a list directive such as
//!   `add_header` is inherited only by a level that sets none); `location`: locations, flat
//!   in ringx, nested in nginx;
//! * `upstream`: `upstream` blocks; `stream`: the stream module (`ssl_preread` SNI routing
//!   through a `map`, UDP).
//!
//! Nothing is dropped silently: every directive gets a note. The output is TOML text with
//! the `FILE:LINE` of each table's nginx block in a comment; it names only keys that ringx's
//! configuration has.

mod cx;
mod directives;
mod emit;
mod http;
mod inherit;
mod location;
pub mod main_ctx;
pub mod report;
mod server;
mod stream;
mod upstream;
pub mod values;

pub use cx::{Options, Outcome};
pub use main_ctx::import;
pub use report::{Fate, Report};

#[cfg(test)]
mod tests;
