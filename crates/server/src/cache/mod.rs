//! The proxy cache (being built).

/// A cache entry being filled from a response.
pub struct Fill {}
