//! A stored response: what a hit is written from, and its form on disk.
//!
//! On disk an object is one file: a magic, a length-prefixed binary record of its metadata
//! (the full key, status, times, `Vary` names, validators), the header lines, then the body.
//! Every length is checked when a file is read back, so a truncated or foreign file is a
//! miss (and removed), never a panic; keys are stored by length, so a key holding CR or LF
//! cannot be confused with anything else in the file.

use std::time::{Duration, SystemTime};

const MAGIC: &[u8; 4] = b"RXC1";

/// A response in the cache.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Object {
    /// The full key (checked on every hit: the table is keyed by its hash).
    pub key: Box<[u8]>,
    pub status: u16,
    /// The header lines as relayed to the client (no status line, no framing or hop-by-hop
    /// fields), each with CRLF.
    pub head: Box<[u8]>,
    /// The body, when it is kept in memory (empty for a body kept on disk only, and for a
    /// marker).
    pub body: Box<[u8]>,
    pub body_len: u64,
    /// Unix times in milliseconds: stored, fresh until, and how long a stale copy may serve
    /// while it is refreshed or instead of an error.
    pub stored: u64,
    pub fresh_until: u64,
    pub swr_until: u64,
    pub sie_until: u64,
    /// A marker: the response varies on these request fields (lowercase), and its variants
    /// are stored under keys that add their values ([`variant_key`]).
    pub vary: Vec<String>,
    pub marker: bool,
    pub etag: Option<Box<str>>,
    pub last_modified: Option<Box<str>>,
}

/// Milliseconds since the Unix epoch.
pub fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// How an object stands at `now` (Unix ms).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Age {
    Fresh,
    /// Stale, but within its stale-while-revalidate time.
    StaleRevalidate,
    /// Stale, within its stale-if-error time only.
    StaleIfError,
    /// Stale beyond both.
    Expired,
}

impl Object {
    pub fn age(&self, now: u64) -> Age {
        if now < self.fresh_until {
            Age::Fresh
        } else if now < self.swr_until {
            Age::StaleRevalidate
        } else if now < self.sie_until {
            Age::StaleIfError
        } else {
            Age::Expired
        }
    }

    /// Bytes it takes in memory (for the memory tier's bound).
    pub fn weight(&self) -> u32 {
        (self.key.len() + self.head.len() + self.body.len() + 128).min(u32::MAX as usize) as u32
    }

    /// Whether the client's `If-None-Match` matches this object's validator (weak
    /// comparison, as for GET; `*` matches any).
    pub fn matches_etag(&self, inm: &[u8]) -> bool {
        let Some(tag) = &self.etag else {
            return false;
        };
        let strip = |t: &[u8]| t.strip_prefix(b"W/").unwrap_or(t).to_vec();
        let ours = strip(tag.as_bytes());
        inm.split(|&b| b == b',').any(|t| {
            let t = t.trim_ascii();
            t == b"*" || strip(t) == ours
        })
    }

    /// The file form: metadata and head; the body follows at the returned length.
    pub fn encode_head(&self) -> Vec<u8> {
        let mut m = Vec::with_capacity(128 + self.key.len() + self.head.len());
        m.extend_from_slice(&self.status.to_le_bytes());
        for t in [
            self.stored,
            self.fresh_until,
            self.swr_until,
            self.sie_until,
        ] {
            m.extend_from_slice(&t.to_le_bytes());
        }
        m.push(u8::from(self.marker));
        put(&mut m, &self.key);
        m.extend_from_slice(&(self.vary.len() as u16).to_le_bytes());
        for v in &self.vary {
            put(&mut m, v.as_bytes());
        }
        put(&mut m, self.etag.as_deref().unwrap_or("").as_bytes());
        put(
            &mut m,
            self.last_modified.as_deref().unwrap_or("").as_bytes(),
        );
        put(&mut m, &self.head);
        m.extend_from_slice(&self.body_len.to_le_bytes());
        let mut out = Vec::with_capacity(8 + m.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&(m.len() as u32).to_le_bytes());
        out.extend_from_slice(&m);
        out
    }

    /// Reads back what [`Object::encode_head`] wrote, from the start of a file (`buf` may
    /// hold more). Returns the object (body empty) and where its body starts; None for
    /// anything that is not a whole, valid record.
    pub fn decode_head(buf: &[u8]) -> Option<(Object, u64)> {
        let rest = buf.strip_prefix(MAGIC)?;
        let len = u32::from_le_bytes(rest.get(..4)?.try_into().ok()?) as usize;
        let mut r = Reader(rest.get(4..4 + len)?);
        let status = r.u16()?;
        let (stored, fresh_until, swr_until, sie_until) = (r.u64()?, r.u64()?, r.u64()?, r.u64()?);
        let marker = r.take(1)?[0] != 0;
        let key = r.field()?.into();
        let n = r.u16()?;
        let mut vary = Vec::with_capacity(usize::from(n).min(64));
        for _ in 0..n {
            vary.push(String::from_utf8(r.field()?.to_vec()).ok()?);
        }
        let text = |b: &[u8]| -> Option<Option<Box<str>>> {
            let s = std::str::from_utf8(b).ok()?;
            Some((!s.is_empty()).then(|| s.into()))
        };
        let etag = text(r.field()?)?;
        let last_modified = text(r.field()?)?;
        let head = r.field()?.into();
        let body_len = r.u64()?;
        if !r.0.is_empty() {
            return None;
        }
        let obj = Object {
            key,
            status,
            head,
            body: Box::default(),
            body_len,
            stored,
            fresh_until,
            swr_until,
            sie_until,
            vary,
            marker,
            etag,
            last_modified,
        };
        Some((obj, (8 + len) as u64))
    }

    /// Freshness refreshed by a revalidation (a 304): the same body, new times.
    pub fn refreshed(&self, now: u64, fresh: Duration, swr: Duration, sie: Duration) -> Object {
        let fresh_until = now + fresh.as_millis() as u64;
        Object {
            stored: now,
            fresh_until,
            swr_until: fresh_until + swr.as_millis() as u64,
            sie_until: fresh_until + sie.as_millis() as u64,
            ..self.clone()
        }
    }
}

/// The key a variant of `key` is stored under: the key, then each `Vary` field's value.
pub fn variant_key(
    key: &[u8],
    vary: &[String],
    value: impl Fn(&str) -> Option<Vec<u8>>,
) -> Vec<u8> {
    let mut k = key.to_vec();
    for name in vary {
        // A NUL separates: it cannot occur in a key's text or a field value.
        k.push(0);
        k.extend_from_slice(name.as_bytes());
        k.push(0);
        if let Some(v) = value(name) {
            k.extend_from_slice(&v);
        }
    }
    k
}

/// The values of one field, joined as a list (`a, b`); None when there is none.
pub fn joined<'a>(values: impl Iterator<Item = &'a [u8]>) -> Option<Vec<u8>> {
    values.fold(None, |acc: Option<Vec<u8>>, v| {
        Some(match acc {
            None => v.to_vec(),
            Some(mut a) => {
                a.extend_from_slice(b", ");
                a.extend_from_slice(v);
                a
            }
        })
    })
}

fn put(m: &mut Vec<u8>, b: &[u8]) {
    m.extend_from_slice(&(b.len() as u32).to_le_bytes());
    m.extend_from_slice(b);
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Some(a)
    }
    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes(self.take(2)?.try_into().ok()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    fn field(&mut self) -> Option<&'a [u8]> {
        let n = u32::from_le_bytes(self.take(4)?.try_into().ok()?) as usize;
        self.take(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj() -> Object {
        Object {
            key: b"http://h/a\r\nb".to_vec().into(),
            status: 200,
            head: b"Content-Type: text/plain\r\nETag: W/\"v1\"\r\n"
                .to_vec()
                .into(),
            body: b"hello".to_vec().into(),
            body_len: 5,
            stored: 1_000_000,
            fresh_until: 1_060_000,
            swr_until: 1_090_000,
            sie_until: 2_000_000,
            vary: vec!["accept-encoding".into()],
            marker: false,
            etag: Some("W/\"v1\"".into()),
            last_modified: None,
        }
    }

    /// The file form reads back whole; every truncation and a foreign file are refused.
    #[test]
    fn the_disk_form_round_trips_and_refuses_damage() {
        let o = obj();
        let head = o.encode_head();
        let mut file = head.clone();
        file.extend_from_slice(&o.body);
        let (back, off) = Object::decode_head(&file).unwrap();
        assert_eq!(off as usize, head.len());
        assert_eq!(&file[off as usize..], b"hello");
        assert_eq!(
            back,
            Object {
                body: Box::default(),
                ..o
            }
        );
        for cut in 0..head.len() {
            assert!(Object::decode_head(&head[..cut]).is_none(), "cut at {cut}");
        }
        assert!(Object::decode_head(b"GET / HTTP/1.1\r\n\r\n").is_none());
    }

    #[test]
    fn ages_and_validators() {
        let o = obj();
        assert_eq!(o.age(1_000_500), Age::Fresh);
        assert_eq!(o.age(1_060_000), Age::StaleRevalidate);
        assert_eq!(o.age(1_500_000), Age::StaleIfError);
        assert_eq!(o.age(2_000_000), Age::Expired);
        assert!(o.matches_etag(b"\"v0\", \"v1\""));
        assert!(o.matches_etag(b"*"));
        assert!(!o.matches_etag(b"\"v2\""));
    }
}
