//! gRPC proxying (`proxy_pass = "grpc://…"` / `grpcs://`): an HTTP/2 client's calls go on
//! streams of HTTP/2 connections to the upstream's servers, pooled and multiplexed per zone
//! (`pool.rs`, `mux.rs`); an upstream that fails or refuses ends the call with a gRPC status
//! in trailers (`status.rs`), as Envoy does, not with an HTTP error page.

pub mod mux;
pub mod pool;
pub mod status;

#[cfg(test)]
mod mux_tests;
