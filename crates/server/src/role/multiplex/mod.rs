//! What a request on one stream of a multiplexed client connection needs whichever protocol
//! frames the stream: HTTP/2 (`role/h2`) and HTTP/3 (`role/h3`). The protocol's role keeps its
//! framing, flow control and the turns its streams take; what a stream carries is here:
//!
//! | | file |
//! |---|---|
//! | a proxied stream: an [`Exchange`](crate::role::exchange::Exchange) whose output is held in memory, sent as the window allows, and the budget the connection's proxied streams share | `proxied.rs` |
//! | a gRPC call: its upstream stream on the zone's pooled HTTP/2 connections, and what its events mean for the client's stream | `grpc.rs` |
//! | a locally made body waiting for the window (bytes, a file part, a file compressed as it goes) | `body.rs` |
//! | the refreshes after stale answers, which outlive the connection | `refresh.rs` |
//! | what the access log keeps of the request | `log.rs` |
//! | the request made from its decoded fields and routed | `routed.rs` |
//! | a request answered here: its location's answer, a cache hit | `local.rs` |
//! | what the stream answers with in place of a refused or failed request's response: a page, the cache's answer, or the request made again for an `error_page` location | `failed.rs` |
//!
//! What waits between a request's looks is a `pipeline::Pending`.

pub mod body;
pub mod failed;
pub mod grpc;
pub mod local;
pub mod log;
pub mod proxied;
pub mod refresh;
pub mod routed;
