//! Size limits for request heads and chunked bodies.

/// Limits applied by [`parse_request`](crate::parse_request).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Maximum size of the whole head in bytes: leading empty lines, request
    /// line, header lines and the final empty line. Larger heads get 431.
    pub max_head: usize,
    /// Maximum length of the request-target in bytes. Longer targets get 414.
    pub max_uri: usize,
    /// Maximum number of header field lines. More get 431.
    pub max_headers: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_head: 16384,
            max_uri: 8192,
            max_headers: 100,
        }
    }
}

/// Limits applied by [`BodyDecoder`](crate::BodyDecoder) to chunked framing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyLimits {
    /// Maximum bytes of chunk extensions on one chunk-size line (everything
    /// between the size digits and the CRLF).
    pub max_chunk_ext: usize,
    /// Maximum size of the trailer section in bytes (including its CRLFs).
    pub max_trailers: usize,
}

impl Default for BodyLimits {
    fn default() -> Self {
        BodyLimits {
            max_chunk_ext: 4096,
            max_trailers: 16384,
        }
    }
}
