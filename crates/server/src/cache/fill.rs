//! An entry being filled: the key and its lock (released when the fill is dropped, however
//! the exchange ends), the stale copy it may replace or fall back to, and what the request
//! asked (kept because the request's own bytes are gone by the time the response is done).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use ringx_config::cache::StatusSet;

use super::object::{joined, variant_key, Object};
use super::{policy, CacheZone};
use crate::rewrite::Added;

/// Why the entry is being fetched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// A miss (or an expired entry): the response goes to the client and into the cache.
    Fetch,
    /// An expired entry with validators: a conditional request; a 304 refreshes the entry
    /// and the client is answered from it.
    Revalidate,
    /// A stale entry was served; this refreshes it after the client has its answer.
    Background,
}

/// When a stale copy may stand in for the upstream's answer.
#[derive(Clone, Debug, Default)]
pub struct UseStale {
    pub error: bool,
    pub timeout: bool,
    pub updating: bool,
    pub statuses: Vec<u16>,
}

/// What the client's request asked, for answering it from the cache later.
#[derive(Clone, Debug)]
pub struct Asked {
    pub head_only: bool,
    pub version11: bool,
    pub keep: bool,
    /// The request's fields, for the variant key when the response varies (name lowercase).
    pub fields: Vec<(String, Vec<u8>)>,
    pub if_none_match: Option<Vec<u8>>,
    /// The status the client is told instead of the stored one (an `error_page` without
    /// `=` re-served the request here: nginx answers with the original error's status).
    pub status_as: Option<u16>,
    /// The `add_header` lines of the location it came to, expanded for it
    /// (`pipeline::added`): an answer from the cache gets them as any response does.
    pub added: Added,
}

/// An entry ready to store: its hash and object, and the marker under the key's hash when
/// it varies.
pub struct Built(pub u128, pub Object, pub Option<(u128, Object)>);

pub struct Fill {
    pub zone: &'static CacheZone,
    pub key: Vec<u8>,
    pub hash: u128,
    /// This fill holds the key's lock.
    pub locked: bool,
    pub mode: Mode,
    pub stale: Option<Arc<Object>>,
    pub valid: Vec<(StatusSet, Duration)>,
    pub use_stale: UseStale,
    pub asked: Asked,
    /// The cache status line the client's response carries (`X-Cache-Status: MISS\r\n`),
    /// and that status.
    pub status_line: Vec<u8>,
    pub status: &'static str,
    /// The upstream answered with a status `use_stale` covers: the stale copy answers.
    pub stale_for_status: bool,
    /// The cache status header's name (empty: none).
    pub status_name: String,
}

impl Drop for Fill {
    fn drop(&mut self) {
        if self.locked {
            self.zone.unlock(self.hash);
        }
    }
}

impl Fill {
    /// The cache status line for `status`.
    pub fn line(&self, status: &str) -> Vec<u8> {
        if self.status_name.is_empty() {
            return Vec::new();
        }
        format!("{}: {status}\r\n", self.status_name).into_bytes()
    }

    /// Whether the stale copy may answer instead of a failure that gave the client `status`
    /// (502: no server or a bad answer; 504: a timeout), or instead of the upstream's own
    /// answer of `status`.
    /// The response's own `stale-if-error` covers what RFC 5861 calls an error: no answer,
    /// or a 500, 502, 503 or 504.
    pub fn stale_for(&self, status: u16, from_upstream: bool, now_ms: u64) -> Option<&Arc<Object>> {
        let s = self.stale.as_ref()?;
        let u = &self.use_stale;
        let configured = if from_upstream {
            u.statuses.contains(&status)
        } else {
            (status == 504 && u.timeout) || (status != 504 && u.error)
        };
        let error = !from_upstream || matches!(status, 500 | 502 | 503 | 504);
        (configured || (error && now_ms < s.sie_until)).then_some(s)
    }

    /// The entry to store from a complete response: the object under its hash, and a marker
    /// under the key's when it varies. None: the response may not be stored.
    pub fn object(&self, head: &[u8], body: &[u8], now: u64) -> Option<Built> {
        if body.len() as u64 > self.zone.max_object {
            return None;
        }
        let mut hs = [httparse::EMPTY_HEADER; 128];
        let mut r = httparse::Response::new(&mut hs);
        r.parse(head).ok()?.is_complete().then_some(())?;
        let status = r.code?;
        let fields: Vec<(&str, &[u8])> = r.headers.iter().map(|h| (h.name, h.value)).collect();
        let f = policy::storable(status, &fields, &self.valid, wall(now))?;
        let head = stored_head(&fields);
        Some(self.build(status, head, body.to_vec(), f, now))
    }

    /// The stale entry refreshed by a 304 (its body kept, its freshness from the 304's fields
    /// or the location's `valid`).
    pub fn refreshed(&self, head: &[u8], now: u64) -> Option<Built> {
        let s = self.stale.as_ref()?;
        let mut hs = [httparse::EMPTY_HEADER; 128];
        let mut r = httparse::Response::new(&mut hs);
        r.parse(head).ok()?.is_complete().then_some(())?;
        let fields: Vec<(&str, &[u8])> = r.headers.iter().map(|h| (h.name, h.value)).collect();
        let mut f = policy::storable(s.status, &fields, &self.valid, wall(now))?;
        if f.vary.is_empty() {
            f.vary = s.vary.clone();
        }
        f.etag = f.etag.or_else(|| s.etag.as_deref().map(str::to_string));
        f.last_modified = f
            .last_modified
            .or_else(|| s.last_modified.as_deref().map(str::to_string));
        Some(self.build(s.status, s.head.to_vec(), s.body.to_vec(), f, now))
    }

    fn build(
        &self,
        status: u16,
        head: Vec<u8>,
        body: Vec<u8>,
        f: policy::Freshness,
        now: u64,
    ) -> Built {
        let fresh_until = now + f.fresh.as_millis() as u64;
        let base = Object {
            key: self.key.clone().into(),
            status,
            head: head.into(),
            body_len: body.len() as u64,
            body: body.into(),
            stored: now,
            fresh_until,
            swr_until: fresh_until + f.stale_while_revalidate.as_millis() as u64,
            sie_until: fresh_until + f.stale_if_error.as_millis() as u64,
            vary: Vec::new(),
            marker: false,
            etag: f.etag.map(Into::into),
            last_modified: f.last_modified.map(Into::into),
        };
        if f.vary.is_empty() {
            return Built(self.hash, base, None);
        }
        let vk = variant_key(&self.key, &f.vary, |n| {
            joined(
                self.asked
                    .fields
                    .iter()
                    .filter(|(k, _)| k == n)
                    .map(|(_, v)| &v[..]),
            )
        });
        let marker = Object {
            head: Box::default(),
            body: Box::default(),
            body_len: 0,
            vary: f.vary,
            marker: true,
            etag: None,
            last_modified: None,
            ..base.clone()
        };
        let vh = crate::cache::key_hash(&vk);
        Built(
            vh,
            Object {
                key: vk.into(),
                ..base
            },
            Some((self.hash, marker)),
        )
    }

    /// Stores what `object`/`refreshed` built; the lock goes with it (released once the
    /// entry can be found). Returns the stored object.
    pub fn store(&mut self, built: Built) -> Arc<Object> {
        let Built(h, o, m) = built;
        let o = Arc::new(o);
        let unlock = std::mem::take(&mut self.locked).then_some(self.hash);
        self.zone.store(h, o.clone(), m, unlock);
        o
    }
}

/// The client's fields a fill does not forward: its own validators and ranges (the cache
/// wants the whole, current response).
pub const FILL_DROP: [&str; 6] = [
    "if-none-match",
    "if-modified-since",
    "if-match",
    "if-unmodified-since",
    "if-range",
    "range",
];

impl Fill {
    /// The cache's validators for a fill that revalidates its stale copy (field lines).
    pub fn validators(&self, out: &mut Vec<u8>) {
        let Some(s) = self.stale.as_ref().filter(|_| self.mode != Mode::Fetch) else {
            return;
        };
        for (name, v) in [
            ("If-None-Match", &s.etag),
            ("If-Modified-Since", &s.last_modified),
        ] {
            if let Some(v) = v {
                out.extend_from_slice(name.as_bytes());
                out.extend_from_slice(b": ");
                out.extend_from_slice(v.as_bytes());
                out.extend_from_slice(b"\r\n");
            }
        }
    }
}

fn wall(ms: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_millis(ms)
}

/// The fields of a response as stored: without hop-by-hop and framing fields (the hit writes
/// its own), those `Connection` names, and `Age` (recomputed on every hit).
fn stored_head(fields: &[(&str, &[u8])]) -> Vec<u8> {
    const DROP: [&str; 10] = [
        "connection",
        "keep-alive",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "content-length",
        "age",
        "proxy-authenticate",
    ];
    let named: Vec<String> = fields
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("connection"))
        .flat_map(|(_, v)| v.split(|&b| b == b','))
        .map(|t| String::from_utf8_lossy(t.trim_ascii()).to_ascii_lowercase())
        .collect();
    let mut out = Vec::new();
    for (n, v) in fields {
        let l = n.to_ascii_lowercase();
        if DROP.contains(&l.as_str()) || named.contains(&l) {
            continue;
        }
        out.extend_from_slice(n.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(v);
        out.extend_from_slice(b"\r\n");
    }
    out
}
