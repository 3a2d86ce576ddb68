//! Response compression: which coding a client gets (`Accept-Encoding` with q-values against
//! the configured codings, `negotiate`), which responses qualify (type, length, status, not
//! already encoded), the streaming [`Encoder`], and precompressed files (`gzip_static`).
//!
//! The settings are `[http] gzip`, `brotli` and `zstd` (`ringx_config::compress`); a location
//! with `compress = false` is left alone. When the client accepts several configured codings
//! with the same q-value, brotli is preferred, then zstd, then gzip.

pub mod encoder;
pub mod file_encoder;
pub mod relay;

use std::sync::Arc;

use ringx_config::compress::{DEFAULT_BROTLI_LEVEL, DEFAULT_GZIP_LEVEL, DEFAULT_ZSTD_LEVEL};
use ringx_config::Http;
use ringx_http::Request;

/// A content coding ringx produces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Coding {
    Gzip,
    Brotli,
    Zstd,
}

impl Coding {
    /// The `Content-Encoding` token.
    pub fn token(self) -> &'static str {
        match self {
            Coding::Gzip => "gzip",
            Coding::Brotli => "br",
            Coding::Zstd => "zstd",
        }
    }

    /// The suffix of a precompressed file.
    pub fn ext(self) -> &'static str {
        match self {
            Coding::Gzip => ".gz",
            Coding::Brotli => ".br",
            Coding::Zstd => ".zst",
        }
    }
}

/// One configured coding.
pub struct Codec {
    pub coding: Coding,
    pub level: u32,
    pub min_length: u64,
    /// Lowercase MIME types; `*` or `type/*` patterns.
    types: Vec<String>,
}

impl Codec {
    pub fn takes(&self, ctype: &str) -> bool {
        let t = media_type(ctype);
        self.types.iter().any(|p| {
            p == "*"
                || p.eq_ignore_ascii_case(t)
                || p.strip_suffix("/*").is_some_and(|major| {
                    t.len() > major.len()
                        && t[..major.len()].eq_ignore_ascii_case(major)
                        && t.as_bytes()[major.len()] == b'/'
                })
        })
    }
}

/// The type without its parameters (`text/html; charset=utf-8` is `text/html`).
fn media_type(ctype: &str) -> &str {
    ctype.split(';').next().unwrap_or("").trim()
}

/// The compression settings, compiled.
pub struct Policy {
    /// In the server's order of preference: brotli, zstd, gzip.
    pub codecs: Vec<Codec>,
    /// Codings whose precompressed files are looked for, in the same order.
    pub statics: Vec<Coding>,
}

impl Policy {
    pub fn compile(h: &Http) -> Option<Arc<Policy>> {
        let mut codecs = Vec::new();
        for (coding, c, level) in [
            (Coding::Brotli, &h.brotli, DEFAULT_BROTLI_LEVEL),
            (Coding::Zstd, &h.zstd, DEFAULT_ZSTD_LEVEL),
            (Coding::Gzip, &h.gzip, DEFAULT_GZIP_LEVEL),
        ] {
            if let Some(c) = c {
                codecs.push(Codec {
                    coding,
                    level: c.level_or(level),
                    min_length: c.min_length,
                    types: c.type_list(),
                });
            }
        }
        let statics: Vec<Coding> = [
            (Coding::Brotli, h.brotli_static),
            (Coding::Zstd, h.zstd_static),
            (Coding::Gzip, h.gzip_static),
        ]
        .into_iter()
        .filter_map(|(c, on)| on.then_some(c))
        .collect();
        (!codecs.is_empty() || !statics.is_empty()).then(|| Arc::new(Policy { codecs, statics }))
    }

    /// Whether a response of this type may be compressed by some coding (so it varies with
    /// `Accept-Encoding`).
    pub fn varies(&self, ctype: &str) -> bool {
        self.codecs.iter().any(|c| c.takes(ctype))
    }

    /// The coding to compress a response with: accepted by the client (the highest q, ties by
    /// the server's order), configured for its type, and its length (when known) at least the
    /// coding's `min_length`.
    pub fn choose(&self, accept: &Accept, ctype: &str, len: Option<u64>) -> Option<&Codec> {
        let mut best: Option<(&Codec, u16)> = None;
        for c in &self.codecs {
            let q = accept.q(c.coding);
            if q == 0 || !c.takes(ctype) || len.is_some_and(|n| n < c.min_length) {
                continue;
            }
            if best.is_none_or(|(_, bq)| q > bq) {
                best = Some((c, q));
            }
        }
        best.map(|(c, _)| c)
    }

    /// Precompressed codings the client accepts, best first.
    pub fn statics_for(&self, accept: &Accept) -> Vec<Coding> {
        let mut v: Vec<(Coding, u16)> = self
            .statics
            .iter()
            .map(|&c| (c, accept.q(c)))
            .filter(|(_, q)| *q > 0)
            .collect();
        v.sort_by_key(|c| std::cmp::Reverse(c.1));
        v.into_iter().map(|(c, _)| c).collect()
    }
}

/// What `Accept-Encoding` says, as q-values in thousandths (None: not named).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Accept {
    gzip: Option<u16>,
    br: Option<u16>,
    zstd: Option<u16>,
    star: Option<u16>,
}

impl Accept {
    /// Reads every `Accept-Encoding` field of the request. Linear in the fields' length and
    /// allocation-free, whatever a client sends; an element that does not parse is skipped.
    pub fn of(req: &Request) -> Accept {
        let mut a = Accept::default();
        for h in req
            .headers
            .iter()
            .filter(|h| h.name.eq_ignore_ascii_case("accept-encoding"))
        {
            for elem in h.value.split(|&b| b == b',') {
                let mut parts = elem.split(|&b| b == b';');
                let coding = trim(parts.next().unwrap_or(b""));
                let mut q = Some(1000);
                for p in parts {
                    let p = trim(p);
                    if p.len() >= 2 && p[..2].eq_ignore_ascii_case(b"q=") {
                        q = qvalue(&p[2..]);
                    }
                }
                let Some(q) = q else { continue };
                let slot = if coding.eq_ignore_ascii_case(b"gzip")
                    || coding.eq_ignore_ascii_case(b"x-gzip")
                {
                    &mut a.gzip
                } else if coding.eq_ignore_ascii_case(b"br") {
                    &mut a.br
                } else if coding.eq_ignore_ascii_case(b"zstd") {
                    &mut a.zstd
                } else if coding == b"*" {
                    &mut a.star
                } else {
                    continue;
                };
                // Named twice: the higher counts.
                *slot = Some(slot.map_or(q, |old| old.max(q)));
            }
        }
        a
    }

    /// The q-value (thousandths) the client gives `c`; 0: not acceptable.
    pub fn q(&self, c: Coding) -> u16 {
        let named = match c {
            Coding::Gzip => self.gzip,
            Coding::Brotli => self.br,
            Coding::Zstd => self.zstd,
        };
        named.or(self.star).unwrap_or(0)
    }

    /// Whether the client accepts any coding at all.
    pub fn any(&self) -> bool {
        [Coding::Gzip, Coding::Brotli, Coding::Zstd]
            .iter()
            .any(|&c| self.q(c) > 0)
    }
}

fn trim(b: &[u8]) -> &[u8] {
    let s = b
        .iter()
        .position(|c| !c.is_ascii_whitespace())
        .unwrap_or(b.len());
    let e = b
        .iter()
        .rposition(|c| !c.is_ascii_whitespace())
        .map_or(s, |e| e + 1);
    &b[s..e]
}

/// RFC 9110 §12.4.2: `0[.ddd]` or `1[.000]`, in thousandths; None: not a qvalue.
fn qvalue(v: &[u8]) -> Option<u16> {
    let (int, frac) = match v.iter().position(|&c| c == b'.') {
        Some(i) => (&v[..i], &v[i + 1..]),
        None => (v, &b""[..]),
    };
    if int.len() != 1 || frac.len() > 3 || !frac.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut thousandths = 0u16;
    for i in 0..3 {
        thousandths = thousandths * 10 + frac.get(i).map_or(0, |d| (d - b'0') as u16);
    }
    match int[0] {
        b'0' => Some(thousandths),
        b'1' if thousandths == 0 => Some(1000),
        _ => None,
    }
}

/// Adds `Accept-Encoding` to a `Vary` value (None: there was none): unless it is there, or
/// `*` (which varies on everything already).
pub fn vary_with(existing: Option<&[u8]>) -> Option<Vec<u8>> {
    match existing {
        None => Some(b"Accept-Encoding".to_vec()),
        Some(v) => {
            let listed = v.split(|&b| b == b',').any(|t| {
                let t = trim(t);
                t == b"*" || t.eq_ignore_ascii_case(b"accept-encoding")
            });
            if listed {
                return None;
            }
            let mut out = v.to_vec();
            out.extend_from_slice(b", Accept-Encoding");
            Some(out)
        }
    }
}

/// Statuses whose bodies are compressed (nginx's: 200, 403, 404). A 206 never: its bytes are
/// a range of the identity body.
pub fn status_compressible(status: u16) -> bool {
    matches!(status, 200 | 403 | 404)
}

#[cfg(test)]
mod tests;
