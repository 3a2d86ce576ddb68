//! What a caller of the cluster client gets instead of a reply. None of these is the
//! caller's to retry at once: Redis is down or slow, and the request path goes on without it.

use std::time::Duration;

/// Why a command got no reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// No connection to Redis now: it is down, or being reconnected to (with backoff).
    Down(String),
    /// No reply within the caller's budget.
    Timeout(Duration),
    /// The queue to the cluster thread is full (Redis much slower than callers ask).
    Busy,
    /// Redis answered with an error (`-ERR ...`, `-READONLY ...`, `-NOPERM ...`).
    Reply(String),
    /// The connection failed under the command (it is dropped and made anew).
    Io(String),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            Error::Down(why) => write!(f, "Redis is unreachable ({why}); reconnecting"),
            Error::Timeout(d) => write!(f, "no reply from Redis within {d:?}"),
            Error::Busy => f.write_str("too many Redis commands queued; Redis is too slow"),
            Error::Reply(e) => write!(f, "Redis refused the command: {e}"),
            Error::Io(e) => write!(f, "Redis connection failed: {e}"),
        }
    }
}

impl std::error::Error for Error {}

impl Error {
    /// The label of `ringx_cluster_redis_errors_total{kind}`.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::Down(_) => "down",
            Error::Timeout(_) => "timeout",
            Error::Busy => "busy",
            Error::Reply(_) => "reply",
            Error::Io(_) => "io",
        }
    }
}
