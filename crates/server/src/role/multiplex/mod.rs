//! What a request on one stream of a multiplexed client connection needs whichever protocol
//! frames the stream: HTTP/2 (`role/h2`) now, HTTP/3 next. The protocol's role keeps its
//! framing, flow control and the turns its streams take; what a stream carries is here:
//!
//! | | file |
//! |---|---|
//! | a proxied stream: an [`Exchange`](crate::role::exchange::Exchange) whose output is held in memory, sent as the window allows, and the budget the connection's proxied streams share | `proxied.rs` |
//! | a locally made body waiting for the window (bytes, a file part, a file compressed as it goes) | `body.rs` |
//! | the refreshes after stale answers, which outlive the connection | `refresh.rs` |
//! | what the access log keeps of the request | `log.rs` |
//!
//! The request itself is made from its decoded fields by the pipeline
//! (`pipeline::fields`), and what waits between its looks is a `pipeline::Pending`.

pub mod body;
pub mod log;
pub mod proxied;
pub mod refresh;
