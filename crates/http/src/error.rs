//! Error types returned by the request parser and the body decoder.

use std::fmt;

/// A request head that must be rejected.
///
/// `status` is the HTTP status code the server should answer with (400, 414,
/// 417, 431, 501 or 505); `reason` is a short, static, human-readable
/// explanation meant for logs (not for the client).
///
/// After any `RequestError` the connection's framing can no longer be trusted:
/// the server should send the error response and close the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestError {
    /// HTTP status code to answer with.
    pub status: u16,
    /// Why the request was rejected (for logs).
    pub reason: &'static str,
}

impl RequestError {
    pub(crate) const fn new(status: u16, reason: &'static str) -> Self {
        Self { status, reason }
    }

    pub(crate) const fn bad(reason: &'static str) -> Self {
        Self::new(400, reason)
    }
}

impl fmt::Display for RequestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {}: {}",
            self.status,
            crate::status::reason(self.status),
            self.reason
        )
    }
}

impl std::error::Error for RequestError {}

/// A malformed message body (bad chunk framing, oversized extension or
/// trailer section). The server answers 400 and closes the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyError {
    /// Why the body was rejected (for logs).
    pub reason: &'static str,
}

impl fmt::Display for BodyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid message body: {}", self.reason)
    }
}

impl std::error::Error for BodyError {}
