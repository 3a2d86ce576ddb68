//! Response compression (`[http] gzip`, `brotli`, `zstd`) and precompressed files
//! (`gzip_static`, `brotli_static`, `zstd_static`).
//!
//! ```toml
//! [http]
//! gzip = { types = ["text/html", "application/json"], min_length = 256, level = 5 }
//! brotli = { types = ["text/html"], level = 6 }
//! zstd = {}                  # the default types, length and level
//! gzip_static = true         # serve file.css.gz for file.css when the client takes gzip
//! brotli_static = true       # file.css.br
//! ```
//!
//! A response is compressed when the client accepts the coding (`Accept-Encoding`, q-values
//! honoured), its type is listed (`"*"`: any), its length is at least `min_length` (or
//! unknown), its status is 200, 403 or 404 (nginx's), it is not already encoded, not a range
//! and not `Cache-Control: no-transform`. `Vary: Accept-Encoding` goes on every response
//! whose type could be compressed, so caches keep the variants apart.

use serde::Deserialize;
use toml::Spanned;

use crate::error::{ConfigError, Source};

/// Types compressed when `types` is not given: text that is commonly served and compresses
/// well.
pub const DEFAULT_TYPES: [&str; 10] = [
    "text/html",
    "text/css",
    "text/plain",
    "text/xml",
    "text/javascript",
    "application/javascript",
    "application/json",
    "application/xml",
    "application/rss+xml",
    "image/svg+xml",
];

/// Default levels, chosen by measurement (`bench/compress.py`, bench/README.md
/// "Compression"). gzip 5: nearly level 9's size, at 6 the CPU per request jumps by half
/// for 1% of size. brotli 6: below 5 brotli is both larger and costlier than gzip 5 (no
/// reason to prefer it), and 7 costs two thirds more for 1%. zstd 3: gzip 5's size for a third
/// of its CPU; the levels above cost several times more for a few percent.
pub const DEFAULT_GZIP_LEVEL: u32 = 5;
pub const DEFAULT_BROTLI_LEVEL: u32 = 6;
pub const DEFAULT_ZSTD_LEVEL: u32 = 3;

/// One coding's settings.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Codec {
    /// MIME types compressed (parameters such as `charset` are ignored); `"*"`: any.
    pub types: Option<Spanned<Vec<String>>>,
    /// Responses shorter than this are sent as they are (a known length only).
    #[serde(default = "default_min_length")]
    pub min_length: u64,
    /// gzip 1-9, brotli 0-11, zstd 1-19.
    pub level: Option<Spanned<u32>>,
}

fn default_min_length() -> u64 {
    256
}

impl Codec {
    /// The types, lowercase.
    pub fn type_list(&self) -> Vec<String> {
        match &self.types {
            Some(t) => t.get_ref().iter().map(|s| s.to_ascii_lowercase()).collect(),
            None => DEFAULT_TYPES.iter().map(|s| s.to_string()).collect(),
        }
    }

    /// The level, or `default`.
    pub fn level_or(&self, default: u32) -> u32 {
        self.level.as_ref().map_or(default, |l| *l.get_ref())
    }
}

/// Checks each configured coding: its level in range, its types well formed.
pub fn validate(codecs: [(&str, Option<&Codec>, u32); 3], src: &Source) -> Result<(), ConfigError> {
    for (name, codec, max) in codecs {
        let Some(c) = codec else { continue };
        let min = u32::from(name != "brotli");
        if let Some(l) = &c.level {
            if !(min..=max).contains(l.get_ref()) {
                return Err(src.err(
                    l.span(),
                    format!(
                        "{name} level {} must be between {min} and {max}",
                        l.get_ref()
                    ),
                ));
            }
        }
        if let Some(t) = &c.types {
            if t.get_ref().is_empty() {
                return Err(src.err(
                    t.span(),
                    format!("{name} types is empty: list MIME types, or \"*\" for any"),
                ));
            }
            for ty in t.get_ref() {
                let ok = ty == "*"
                    || ty.split_once('/').is_some_and(|(a, b)| {
                        crate::fields::is_token(a) && (b == "*" || crate::fields::is_token(b))
                    });
                if !ok {
                    return Err(src.err(
                        t.span(),
                        format!("{name} types: {ty:?} is not a MIME type (type/subtype, or \"*\")"),
                    ));
                }
            }
        }
    }
    Ok(())
}
