//! Request fields as HTTP/2 and HTTP/3 decode them (RFC 9113 §8.2, §8.3; RFC 9114 §4.2,
//! §4.3.1, which refer to RFC 9113's rules): pseudo-headers, regular fields checked one by
//! one, and the HTTP/1.1 head a request becomes when it is served or proxied. `ringx-h2proto`
//! (HPACK) and `ringx-h3proto` (QPACK) both build a [`RequestHead`] here, so the server makes
//! its request from either the same way; HTTP/3's one rule of its own (an `http` or `https`
//! request names its host) is checked by `ringx-h3proto`.
//!
//! Everything that could let such a request say something else once written as HTTP/1.1
//! (request smuggling through the downgrade) is malformed here: CR, LF or NUL in a value,
//! field names outside lowercase token characters, connection-specific fields,
//! `Transfer-Encoding`, a `content-length` that is not one number, a `:path` that is not an
//! origin-form path (or `*`), an `:authority` with userinfo or bytes a host cannot hold,
//! `Host` disagreeing with `:authority`. The HTTP/1.1 head built from what passes is parsed
//! again by this crate's strict parser before anything uses it.

use crate::bytes::is_tchar;

/// A request's head as decoded.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RequestHead {
    /// `:method`.
    pub method: Vec<u8>,
    /// `:scheme` (None for CONNECT).
    pub scheme: Option<Vec<u8>>,
    /// `:authority`.
    pub authority: Option<Vec<u8>>,
    /// `:path` (None for CONNECT).
    pub path: Option<Vec<u8>>,
    /// The regular fields as HTTP/1.1 lines (`name: value\r\n`), without `host`,
    /// `content-length` and `cookie` (which are in their own places).
    pub lines: Vec<u8>,
    /// `cookie` fields joined with "; " (RFC 9113 §8.2.3).
    pub cookie: Vec<u8>,
    /// The `host` field, if any.
    pub host: Option<Vec<u8>>,
    /// The `content-length` field, checked to be one number.
    pub content_length: Option<u64>,
}

/// How a request body is framed in the HTTP/1.1 head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No body (the HEADERS frame ended the stream).
    None,
    /// `Content-Length` (given by the request).
    Length(u64),
    /// A body of unknown length: chunked.
    Chunked,
}

impl RequestHead {
    /// Whether the request is `CONNECT` (refused: RFC 8441 is not offered).
    pub fn is_connect(&self) -> bool {
        self.method == b"CONNECT"
    }

    /// The request's fields in the order its HTTP/1.1 head has them: `host` (`:authority`,
    /// else `host`), the regular fields, then `cookie` joined; the framing fields are the
    /// caller's ([`Framing`]).
    pub fn fields(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        let host = self.authority.as_deref().or(self.host.as_deref());
        let host = host.map(|h| (&b"host"[..], h));
        let lines = self.lines.split(|&b| b == b'\n').filter_map(|line| {
            // "name: value\r" (the lines were written by `push_line`).
            let line = line.strip_suffix(b"\r")?;
            let colon = line.iter().position(|&b| b == b':')?;
            Some((&line[..colon], &line[colon + 2..]))
        });
        let cookie = (!self.cookie.is_empty()).then(|| (&b"cookie"[..], &self.cookie[..]));
        host.into_iter().chain(lines).chain(cookie)
    }

    /// The HTTP/1.1 head of this request, for the HTTP/1 parser and the upstreams.
    pub fn write_http1(&self, out: &mut Vec<u8>, framing: Framing) {
        out.extend_from_slice(&self.method);
        out.push(b' ');
        out.extend_from_slice(self.path.as_deref().unwrap_or(b"/"));
        out.extend_from_slice(b" HTTP/1.1\r\n");
        if let Some(h) = self.authority.as_deref().or(self.host.as_deref()) {
            out.extend_from_slice(b"host: ");
            out.extend_from_slice(h);
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(&self.lines);
        if !self.cookie.is_empty() {
            out.extend_from_slice(b"cookie: ");
            out.extend_from_slice(&self.cookie);
            out.extend_from_slice(b"\r\n");
        }
        match framing {
            Framing::None => {}
            Framing::Length(n) => {
                out.extend_from_slice(b"content-length: ");
                out.extend_from_slice(n.to_string().as_bytes());
                out.extend_from_slice(b"\r\n");
            }
            Framing::Chunked => out.extend_from_slice(b"transfer-encoding: chunked\r\n"),
        }
        out.extend_from_slice(b"\r\n");
    }
}

/// Collects a request's fields as they are decoded; the first fault is kept.
#[derive(Default)]
pub struct HeadBuilder {
    /// The head so far.
    pub head: RequestHead,
    regular_seen: bool,
    /// The first fault found: the request is malformed.
    pub fault: Option<&'static str>,
}

impl HeadBuilder {
    /// Takes one decoded field (a pseudo-header or a regular field), in the order sent.
    pub fn field(&mut self, name: &[u8], value: &[u8]) {
        if self.fault.is_some() {
            return;
        }
        if let Err(why) = self.take(name, value) {
            self.fault = Some(why);
        }
    }

    fn take(&mut self, name: &[u8], value: &[u8]) -> Result<(), &'static str> {
        check_value(value)?;
        if let Some(pseudo) = name.strip_prefix(b":") {
            if self.regular_seen {
                return Err("a pseudo-header after a regular field");
            }
            let h = &mut self.head;
            let slot = match pseudo {
                b"method" => {
                    if !value.iter().all(|&b| is_tchar(b)) || value.is_empty() {
                        return Err("an invalid :method");
                    }
                    if !h.method.is_empty() {
                        return Err("a second :method");
                    }
                    h.method = value.to_vec();
                    return Ok(());
                }
                b"scheme" => &mut h.scheme,
                b"authority" => {
                    check_authority(value)?;
                    &mut h.authority
                }
                b"path" => {
                    if value.iter().any(|&b| b <= b' ' || b == 0x7f) {
                        return Err("a :path with spaces or control bytes");
                    }
                    &mut h.path
                }
                b"protocol" => return Err(":protocol without extended CONNECT"),
                _ => return Err("an unknown pseudo-header"),
            };
            if slot.is_some() {
                return Err("a repeated pseudo-header");
            }
            *slot = Some(value.to_vec());
            return Ok(());
        }
        self.regular_seen = true;
        check_name(name)?;
        let h = &mut self.head;
        match name {
            b"cookie" => {
                if !h.cookie.is_empty() {
                    h.cookie.extend_from_slice(b"; ");
                }
                h.cookie.extend_from_slice(value);
            }
            b"host" => {
                check_authority(value)?;
                if h.host.replace(value.to_vec()).is_some() {
                    return Err("a repeated host");
                }
            }
            b"content-length" => {
                let n = parse_length(value)?;
                if h.content_length.is_some_and(|x| x != n) {
                    return Err("content-length values that disagree");
                }
                h.content_length = Some(n);
            }
            b"te" if value != b"trailers" => return Err("te other than \"trailers\""),
            _ => push_line(&mut h.lines, name, value),
        }
        Ok(())
    }

    /// The head once the block is decoded, or why the request is malformed.
    pub fn finish(self) -> Result<RequestHead, &'static str> {
        if let Some(f) = self.fault {
            return Err(f);
        }
        let h = self.head;
        if h.method.is_empty() {
            return Err("no :method");
        }
        if h.is_connect() {
            if h.scheme.is_some() || h.path.is_some() {
                return Err("CONNECT with :scheme or :path");
            }
            if h.authority.is_none() {
                return Err("CONNECT without :authority");
            }
        } else {
            let (Some(_), Some(path)) = (&h.scheme, &h.path) else {
                return Err("no :scheme or :path");
            };
            let asterisk = path == b"*" && h.method == b"OPTIONS";
            if !path.starts_with(b"/") && !asterisk {
                return Err("a :path that is not an absolute path");
            }
        }
        if let (Some(a), Some(host)) = (&h.authority, &h.host) {
            if !a.eq_ignore_ascii_case(host) {
                return Err("host differs from :authority");
            }
        }
        Ok(h)
    }
}

/// Collects trailers as HTTP/1.1 lines (`name: value\r\n`), for a chunked body's end.
#[derive(Default)]
pub struct TrailerBuilder {
    /// The trailers as HTTP/1.1 lines.
    pub lines: Vec<u8>,
    /// The first fault found: the trailer section is malformed.
    pub fault: Option<&'static str>,
}

impl TrailerBuilder {
    /// Takes one decoded trailer field.
    pub fn field(&mut self, name: &[u8], value: &[u8]) {
        if self.fault.is_some() {
            return;
        }
        let r = check_value(value).and_then(|()| {
            if name.starts_with(b":") {
                return Err("a pseudo-header in trailers");
            }
            check_name(name)
        });
        match r {
            Err(f) => self.fault = Some(f),
            Ok(()) => push_line(&mut self.lines, name, value),
        }
    }
}

fn push_line(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// A byte of `:authority` or `host`: RFC 3986's unreserved, sub-delims, `:`, `[`, `]`, `%`.
#[inline]
fn is_authority_byte(b: u8) -> bool {
    AUTHORITY[b as usize]
}

/// The bytes of `:authority` and `host`, as a table (every byte is looked up).
const AUTHORITY: [bool; 256] = {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 256 {
        let b = i as u8;
        let alnum = b.is_ascii_alphanumeric();
        if alnum
            || matches!(
                b,
                b'-' | b'.'
                    | b'_'
                    | b'~'
                    | b'!'
                    | b'$'
                    | b'&'
                    | b'\''
                    | b'('
                    | b')'
                    | b'*'
                    | b'+'
                    | b','
                    | b';'
                    | b'='
                    | b':'
                    | b'['
                    | b']'
                    | b'%'
            )
        {
            t[i] = true;
        }
        i += 1;
    }
    t
};

/// A regular field's name: lowercase token characters, and not one that belongs to a
/// connection (RFC 9113 §8.2.2).
pub fn check_name(name: &[u8]) -> Result<(), &'static str> {
    if name.is_empty() || !name.iter().all(|&b| is_tchar(b) && !b.is_ascii_uppercase()) {
        return Err("a field name that is not a lowercase token");
    }
    match name {
        b"connection" | b"keep-alive" | b"proxy-connection" | b"transfer-encoding" | b"upgrade" => {
            Err("a connection-specific field")
        }
        _ => Ok(()),
    }
}

/// A field value: no NUL, CR or LF, and no whitespace at either end (RFC 9113 §8.2.1).
pub fn check_value(v: &[u8]) -> Result<(), &'static str> {
    if v.iter().any(|&b| b == 0 || b == b'\r' || b == b'\n') {
        return Err("NUL, CR or LF in a field value");
    }
    if matches!(v.first(), Some(b' ' | b'\t')) || matches!(v.last(), Some(b' ' | b'\t')) {
        return Err("whitespace around a field value");
    }
    Ok(())
}

/// `:authority` or `host`: host[:port] in the characters RFC 3986 allows there, no userinfo.
fn check_authority(v: &[u8]) -> Result<(), &'static str> {
    if v.is_empty() || !v.iter().all(|&b| is_authority_byte(b)) {
        return Err("an invalid :authority or host");
    }
    Ok(())
}

/// A `content-length` value: one number of at most 19 digits.
pub fn parse_length(v: &[u8]) -> Result<u64, &'static str> {
    if v.is_empty() || v.len() > 19 || !v.iter().all(u8::is_ascii_digit) {
        return Err("an invalid content-length");
    }
    v.iter()
        .try_fold(0u64, |n, &d| {
            n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
        })
        .ok_or("an invalid content-length")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn build(fields: &[(&str, &str)]) -> Result<RequestHead, &'static str> {
        let mut b = HeadBuilder::default();
        for (n, v) in fields {
            b.field(n.as_bytes(), v.as_bytes());
        }
        b.finish()
    }

    const BASE: [(&str, &str); 4] = [
        (":method", "GET"),
        (":scheme", "https"),
        (":authority", "example.com"),
        (":path", "/a?b"),
    ];

    fn with(extra: &[(&'static str, &'static str)]) -> Vec<(&'static str, &'static str)> {
        let mut v = BASE.to_vec();
        v.extend_from_slice(extra);
        v
    }

    #[test]
    fn a_request_becomes_an_http1_head() {
        let h = build(&with(&[
            ("cookie", "a=1"),
            ("accept", "*/*"),
            ("cookie", "b=2"),
            ("content-length", "5"),
        ]))
        .unwrap();
        assert_eq!(h.content_length, Some(5));
        let mut out = Vec::new();
        h.write_http1(&mut out, Framing::Length(5));
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "GET /a?b HTTP/1.1\r\nhost: example.com\r\naccept: */*\r\ncookie: a=1; b=2\r\ncontent-length: 5\r\n\r\n"
        );
        let fields: Vec<(&[u8], &[u8])> = h.fields().collect();
        let want: [(&[u8], &[u8]); 3] = [
            (b"host", b"example.com"),
            (b"accept", b"*/*"),
            (b"cookie", b"a=1; b=2"),
        ];
        assert_eq!(fields, want, "the same fields, in the same order");
    }

    #[test]
    fn malformed_requests_are_refused() {
        let cases: &[&[(&str, &str)]] = &[
            &[("x-a", "b\r\nx-smuggled: 1")],
            &[("x-a", "b\nc")],
            &[("x-a", "b\0")],
            &[("x-a", " b")],
            &[("X-A", "b")],
            &[("x a", "b")],
            &[("connection", "close")],
            &[("transfer-encoding", "chunked")],
            &[("upgrade", "websocket")],
            &[("keep-alive", "5")],
            &[("te", "gzip")],
            &[("content-length", "1,1")],
            &[("content-length", "-1")],
            &[("content-length", "1"), ("content-length", "2")],
            &[("host", "other.com")],
            &[("host", "a b")],
            &[("x", "y"), (":path", "/")],
            &[(":method", "GET")],
            &[(":unknown", "x")],
            &[(":protocol", "websocket")],
        ];
        for c in cases {
            assert!(build(&with(c)).is_err(), "{c:?}");
        }
        let bad_pseudo: &[&[(&str, &str)]] = &[
            &[(":method", "GET"), (":scheme", "http")],
            &[(":method", "GET"), (":scheme", "http"), (":path", "")],
            &[(":method", "GET"), (":scheme", "http"), (":path", "a")],
            &[(":method", "GET"), (":scheme", "http"), (":path", "/a b")],
            &[(":method", "GET"), (":scheme", "http"), (":path", "*")],
            &[(":method", "G T"), (":scheme", "http"), (":path", "/")],
            &[
                (":method", "GET"),
                (":scheme", "http"),
                (":path", "/"),
                (":authority", "u@h"),
            ],
            &[
                (":method", "CONNECT"),
                (":authority", "h:1"),
                (":path", "/"),
            ],
            &[(":method", "CONNECT")],
        ];
        for c in bad_pseudo {
            assert!(build(c).is_err(), "{c:?}");
        }
        assert!(build(&[(":method", "OPTIONS"), (":scheme", "http"), (":path", "*")]).is_ok());
        assert!(build(&[(":method", "CONNECT"), (":authority", "h:443")])
            .unwrap()
            .is_connect());
        assert!(build(&with(&[("host", "EXAMPLE.com"), ("te", "trailers")])).is_ok());
    }

    #[test]
    fn trailers_take_no_pseudo_headers() {
        let mut t = TrailerBuilder::default();
        t.field(b"grpc-status", b"0");
        assert_eq!(t.lines, b"grpc-status: 0\r\n");
        t.field(b":status", b"200");
        assert!(t.fault.is_some());
    }

    #[test]
    fn the_byte_tables_are_the_rfcs_classes() {
        for b in 0..=255u8 {
            let tchar = b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
            let auth = b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:[]%".contains(&b);
            assert_eq!(is_tchar(b), tchar, "{b:#x}");
            assert_eq!(super::is_authority_byte(b), auth, "{b:#x}");
        }
    }
}
