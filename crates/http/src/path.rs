//! Request path normalisation for mapping URLs onto a file tree.

use std::fmt;

/// Why [`normalize_path`] rejected a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathError {
    /// A `%` not followed by two hex digits, or decoded bytes that are not
    /// UTF-8.
    BadEncoding,
    /// A NUL byte, raw or as `%00`.
    NulByte,
    /// A `..` segment that would climb above the root.
    Traversal,
    /// The path does not start with `/`.
    NotAbsolute,
}

impl fmt::Display for PathError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PathError::BadEncoding => "bad percent-encoding or non-UTF-8 path",
            PathError::NulByte => "NUL byte in path",
            PathError::Traversal => "path climbs above the root",
            PathError::NotAbsolute => "path is not absolute",
        })
    }
}

impl std::error::Error for PathError {}

/// Percent-decodes and normalises a raw request path (without the query).
///
/// * the raw path must start with `/`;
/// * `%XX` is decoded (a decoded `/` is a separator, a decoded `\` is an
///   ordinary byte); bad escapes or non-UTF-8 results are
///   [`PathError::BadEncoding`]; NUL (raw or `%00`) is [`PathError::NulByte`];
/// * repeated slashes are merged, `.` segments removed, `..` segments remove
///   the previous segment, and a `..` at the root is [`PathError::Traversal`];
/// * a trailing slash is kept (`/dir/` and `/dir/.` both give `/dir/`).
///
/// ```
/// use ringx_http::{normalize_path, PathError};
/// assert_eq!(normalize_path("/a//b/./c/../d%20e").unwrap(), "/a/b/d e");
/// assert_eq!(normalize_path("/%2e%2e/etc/passwd"), Err(PathError::Traversal));
/// ```
pub fn normalize_path(raw: &str) -> Result<String, PathError> {
    if !raw.starts_with('/') {
        return Err(PathError::NotAbsolute);
    }
    let decoded = percent_decode(raw.as_bytes())?;
    let decoded = String::from_utf8(decoded).map_err(|_| PathError::BadEncoding)?;

    let mut segments: Vec<&str> = Vec::new();
    let mut trailing_slash = false;
    for segment in decoded.split('/') {
        trailing_slash = true;
        match segment {
            "" | "." => {}
            ".." => {
                if segments.pop().is_none() {
                    return Err(PathError::Traversal);
                }
            }
            name => {
                segments.push(name);
                trailing_slash = false;
            }
        }
    }

    let mut out = String::with_capacity(decoded.len());
    for segment in &segments {
        out.push('/');
        out.push_str(segment);
    }
    if out.is_empty() || trailing_slash {
        out.push('/');
    }
    Ok(out)
}

fn percent_decode(raw: &[u8]) -> Result<Vec<u8>, PathError> {
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        let byte = match raw[i] {
            b'%' => {
                let hi = raw.get(i + 1).and_then(|&b| hex_value(b));
                let lo = raw.get(i + 2).and_then(|&b| hex_value(b));
                match (hi, lo) {
                    (Some(hi), Some(lo)) => {
                        i += 3;
                        (hi << 4) | lo
                    }
                    _ => return Err(PathError::BadEncoding),
                }
            }
            other => {
                i += 1;
                other
            }
        };
        if byte == 0 {
            return Err(PathError::NulByte);
        }
        out.push(byte);
    }
    Ok(out)
}

fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}
