//! One zone's UDP stream counters (written by the zone only, summed by `/metrics`), and why a
//! datagram was dropped.

use std::sync::atomic::AtomicU64;

/// Why a datagram was not passed on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub enum Drop {
    /// From a client: larger than the stream's `max_datagram_size` (or than the zone's
    /// datagram buffers).
    Oversized = 0,
    /// From a client: empty, or from an address no answer can go to (port 0, a multicast,
    /// broadcast or unspecified source).
    Malformed = 1,
    /// A new client while the zone holds the stream's `max_sessions`.
    SessionsFull = 2,
    /// The zone's queue of datagram sends was full.
    SendQueueFull = 3,
    /// Too many datagrams held for a session whose socket was not connected yet.
    ConnectBacklog = 4,
    /// No server of the upstream could be given a socket (every one failed to open).
    NoServer = 5,
    /// From a server: larger than `max_datagram_size` (or than the zone's datagram buffers).
    UpstreamOversized = 6,
    /// The zone is draining, or the listener is no longer configured.
    NotServed = 7,
}

/// Label values of [`Drop`], in its order.
pub const DROP_REASONS: [&str; 8] = [
    "oversized",
    "malformed",
    "sessions_full",
    "send_queue_full",
    "connect_backlog",
    "no_server",
    "upstream_oversized",
    "not_served",
];

/// A zone's UDP stream counters.
#[derive(Default)]
pub struct UdpCounters {
    /// Sessions open now (a gauge the zone sets).
    pub sessions: AtomicU64,
    /// Sessions opened.
    pub sessions_total: AtomicU64,
    /// Datagrams and bytes from clients, and passed on to servers.
    pub from_clients: AtomicU64,
    pub from_clients_bytes: AtomicU64,
    pub to_servers: AtomicU64,
    /// Datagrams and bytes from servers, and passed on to clients.
    pub from_servers: AtomicU64,
    pub to_clients: AtomicU64,
    pub to_clients_bytes: AtomicU64,
    /// Dropped datagrams by [`Drop`].
    pub dropped: [AtomicU64; 8],
    /// Sessions ended by an error from their server's socket (ICMP port or host unreachable:
    /// `ECONNREFUSED`, `EHOSTUNREACH`...), or whose socket could not be opened.
    pub upstream_errors: AtomicU64,
    /// Sends the kernel refused after they were queued (the engine's count).
    pub send_errors: AtomicU64,
}
