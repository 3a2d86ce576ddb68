//! HTTP dates (RFC 9110 §5.6.7) and a per-second cache of the `Date` header.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Latest instant `httpdate` can format: 9999-12-31T23:59:59Z.
const MAX_SECS: u64 = 253_402_300_799;

/// Formats `t` as an IMF-fixdate, e.g. `Sun, 06 Nov 1994 08:49:37 GMT`.
///
/// Times before 1970 or after 9999 are clamped into that range (so this
/// never panics).
pub fn fmt_http_date(t: SystemTime) -> String {
    httpdate::fmt_http_date(clamp(t))
}

/// Parses an IMF-fixdate, or the obsolete RFC 850 and asctime forms.
pub fn parse_http_date(s: &str) -> Option<SystemTime> {
    httpdate::parse_http_date(s).ok()
}

fn clamp(t: SystemTime) -> SystemTime {
    let secs = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    UNIX_EPOCH + Duration::from_secs(secs.min(MAX_SECS))
}

const PREFIX: &[u8] = b"Date: ";
/// `"Date: "` + 29-byte IMF-fixdate + CRLF.
const LINE_LEN: usize = PREFIX.len() + 29 + 2;

/// The length of [`DateCache::header`]'s line: the same for every date.
pub const DATE_HEADER_LEN: usize = LINE_LEN;

/// A ready-to-send `Date: ...\r\n` header line, recomputed at most once per
/// second.
#[derive(Debug, Clone)]
pub struct DateCache {
    secs: u64,
    line: [u8; LINE_LEN],
}

impl DateCache {
    /// A cache initialised with the current time.
    pub fn new() -> Self {
        let mut cache = DateCache {
            secs: u64::MAX,
            line: [0; LINE_LEN],
        };
        cache.update(SystemTime::now());
        cache
    }

    /// Sets the cached time to `now`; formats only if the second changed.
    pub fn update(&mut self, now: SystemTime) {
        let now = clamp(now);
        let secs = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        if secs == self.secs {
            return;
        }
        self.secs = secs;
        let date = httpdate::fmt_http_date(now);
        let date = date.as_bytes();
        debug_assert_eq!(date.len(), 29);
        self.line[..PREFIX.len()].copy_from_slice(PREFIX);
        self.line[PREFIX.len()..LINE_LEN - 2].copy_from_slice(date);
        self.line[LINE_LEN - 2..].copy_from_slice(b"\r\n");
    }

    /// The header line, e.g. `b"Date: Sun, 06 Nov 1994 08:49:37 GMT\r\n"`.
    pub fn header(&self) -> &[u8; DATE_HEADER_LEN] {
        &self.line
    }
}

impl Default for DateCache {
    fn default() -> Self {
        Self::new()
    }
}
