//! Connection roles. A connection is a [transport](crate::transport) plus a role; the zone
//! (`zone/`) keeps one record per connection and only dispatches the engine's
//! events to the role the connection plays.
//!
//! | role | a connection that… | file |
//! |---|---|---|
//! | [`Http1`] | speaks HTTP/1.x to a client: requests answered locally, or proxied through an [`Exchange`] | `http1/` |
//! | [`H2`] | speaks HTTP/2 to a client: each stream's request served as over HTTP/1.1, or proxied through an [`Exchange`] (what a stream carries is in `multiplex/`, for HTTP/3 too) | `h2/` |
//! | [`UpConn`] | goes out to an upstream server; carries one exchange at a time or waits in the keep-alive pool | `upstream.rs` |
//! | [`Tunnel`] | relays bytes both ways (WebSocket after 101, a stream once connected) | `tunnel.rs` |
//! | [`Stream`] | was accepted on a `[[stream]]` listener and is being connected | `stream.rs` |
//! | [`Echo`] | echoes length-prefixed messages (the engine-as-a-library example) | `echo.rs` |
//! | [`UdpProxy`](udp::UdpProxy) | not a connection: a zone's UDP stream sessions, each a client address and port with its own connected UDP socket to a server | `udp/` |
//!
//! Client connections (accepted ones) play one of [`ClientRole`]; upstream connections are
//! [`UpConn`]s in the zone's [`UpTable`](upstream::UpTable). Events on an upstream connection
//! go to the client role that owns it ([`upstream::UpEvent`]), which is how an exchange or a
//! tunnel sees both of its sides; a role can hand its connection over to another role by
//! returning it (an HTTP/1 connection upgraded by a 101 becomes a [`Tunnel`], and so does a
//! stream once its upstream answered).
//!
//! **Where a new protocol goes.** HTTP/2 is a new client role, `role/h2/`, beside [`Http1`]:
//! a variant of [`ClientRole`] and one match arm per event in the zone's dispatch. It reuses
//! the response writer, the pipeline's stages (`crate::pipeline`), [`Exchange`]s for proxied streams
//! and the upstream pools unchanged. A connection becomes one when ALPN says `h2` (the TLS
//! transport tells the zone at the end of the handshake) or when its first bytes are the h2c
//! preface.

pub mod echo;
pub mod exchange;
pub mod grpc;
pub mod h2;
pub mod h3;
pub mod http1;
pub mod multiplex;
pub mod proxy_header;
pub mod proxy_start;
pub mod stream;
pub mod tunnel;
pub mod udp;
pub mod upstream;

pub use echo::Echo;
pub use exchange::Exchange;
pub use h2::H2;
pub use http1::Http1;
pub use stream::Stream;
pub use tunnel::Tunnel;
pub use upstream::UpConn;

/// The role of an accepted connection.
pub enum ClientRole {
    /// No connection in this slot.
    Free,
    Http1(Http1),
    /// An HTTP/2 connection (boxed: its stream tables are large).
    H2(Box<H2>),
    Tunnel(Tunnel),
    Stream(Stream),
}
