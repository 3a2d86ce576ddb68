//! Response fields as a client receives them (RFC 9113 §8.3.2): `:status` and nothing else
//! pseudo, regular fields checked as a request's are (lowercase token names, no CR, LF or
//! NUL, nothing connection-specific), trailers without pseudo-headers. What passes is kept
//! in a [`FieldList`], one buffer for every name and value.

use ringx_http::decoded::{check_name, check_value, parse_length};

/// Decoded fields: names and values in one buffer, in the order received.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct FieldList {
    buf: Vec<u8>,
    /// (name start, value start, value end) in `buf`.
    spans: Vec<(u32, u32, u32)>,
}

impl FieldList {
    /// Room for `bytes` of names and values and `fields` fields, so that a head built field by
    /// field does not grow its buffers step by step.
    pub fn with_capacity(bytes: usize, fields: usize) -> FieldList {
        FieldList {
            buf: Vec::with_capacity(bytes),
            spans: Vec::with_capacity(fields),
        }
    }

    /// Appends every field of `other`, in order.
    pub fn extend_from(&mut self, other: &FieldList) {
        let base = self.buf.len() as u32;
        self.buf.extend_from_slice(&other.buf);
        self.spans.extend(
            other
                .spans
                .iter()
                .map(|&(a, b, e)| (a + base, b + base, e + base)),
        );
    }

    pub fn push(&mut self, name: &[u8], value: &[u8]) {
        let a = self.buf.len() as u32;
        self.buf.extend_from_slice(name);
        let b = self.buf.len() as u32;
        self.buf.extend_from_slice(value);
        self.spans.push((a, b, self.buf.len() as u32));
    }

    /// A field whose name may be in any case, lowercased; one that belongs to a connection
    /// (RFC 9113 §8.2.2) is left out. Returns whether it was kept.
    pub fn push_any_case(&mut self, name: &[u8], value: &[u8]) -> bool {
        if connection_specific(name) {
            return false;
        }
        let a = self.buf.len() as u32;
        self.buf.extend(name.iter().map(u8::to_ascii_lowercase));
        let b = self.buf.len() as u32;
        self.buf.extend_from_slice(value);
        self.spans.push((a, b, self.buf.len() as u32));
        true
    }

    /// Header lines in HTTP/1's form as a server makes them (`Name: value`, each ending in
    /// CRLF; a line without a colon is skipped), each as [`FieldList::push_any_case`] takes
    /// it, the value without the blanks around it.
    pub fn push_lines(&mut self, lines: &[u8]) {
        for l in lines.split(|&b| b == b'\n') {
            let l = l.strip_suffix(b"\r").unwrap_or(l);
            if let Some(colon) = l.iter().position(|&b| b == b':') {
                self.push_any_case(&l[..colon], l[colon + 1..].trim_ascii());
            }
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> + '_ {
        self.spans.iter().map(|&(a, b, e)| {
            (
                &self.buf[a as usize..b as usize],
                &self.buf[b as usize..e as usize],
            )
        })
    }

    /// The first value of `name` (lowercase).
    pub fn get(&self, name: &[u8]) -> Option<&[u8]> {
        self.iter().find(|(n, _)| *n == name).map(|(_, v)| v)
    }

    pub fn len(&self) -> usize {
        self.spans.len()
    }

    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }
}

/// Whether a field belongs to a connection, which HTTP/2 does not carry (RFC 9113 §8.2.2).
pub fn connection_specific(name: &[u8]) -> bool {
    [
        &b"connection"[..],
        b"keep-alive",
        b"proxy-connection",
        b"transfer-encoding",
        b"upgrade",
    ]
    .iter()
    .any(|n| name.eq_ignore_ascii_case(n))
}

/// Collects a response head or trailers as they are decoded; the first fault is kept.
#[derive(Default)]
pub struct ResponseBuilder {
    pub fields: FieldList,
    pub status: Option<u16>,
    pub content_length: Option<u64>,
    /// Trailers: no pseudo-header at all.
    pub trailers: bool,
    regular_seen: bool,
    pub fault: Option<&'static str>,
}

impl ResponseBuilder {
    pub fn trailers() -> ResponseBuilder {
        ResponseBuilder {
            trailers: true,
            ..ResponseBuilder::default()
        }
    }

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
        if name.first() == Some(&b':') {
            if self.trailers {
                return Err("a pseudo-header in trailers");
            }
            if self.regular_seen {
                return Err("a pseudo-header after a regular field");
            }
            if name != b":status" {
                return Err("a pseudo-header other than :status in a response");
            }
            if self.status.is_some() {
                return Err("a repeated :status");
            }
            let ok = value.len() == 3 && value.iter().all(u8::is_ascii_digit);
            if !ok {
                return Err("a :status that is not three digits");
            }
            let n = value
                .iter()
                .fold(0u16, |n, &d| n * 10 + u16::from(d - b'0'));
            self.status = Some(n);
            return Ok(());
        }
        self.regular_seen = true;
        check_name(name)?;
        if name == b"content-length" {
            let n = parse_length(value)?;
            if self.content_length.is_some_and(|x| x != n) {
                return Err("content-length values that disagree");
            }
            self.content_length = Some(n);
        }
        self.fields.push(name, value);
        Ok(())
    }

    /// The status once the block is decoded (0 for trailers), or why it is malformed.
    pub fn finish(&self) -> Result<u16, &'static str> {
        if let Some(f) = self.fault {
            return Err(f);
        }
        if self.trailers {
            return Ok(0);
        }
        match self.status {
            None => Err("a response without :status"),
            Some(s) if !(100..600).contains(&s) || s == 101 => Err("an invalid :status"),
            Some(s) => Ok(s),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn build(trailers: bool, fields: &[(&str, &str)]) -> Result<u16, &'static str> {
        let mut b = if trailers {
            ResponseBuilder::trailers()
        } else {
            ResponseBuilder::default()
        };
        for (n, v) in fields {
            b.field(n.as_bytes(), v.as_bytes());
        }
        b.finish()
    }

    #[test]
    fn a_response_head_is_checked() {
        assert_eq!(
            build(
                false,
                &[(":status", "200"), ("content-type", "application/grpc")]
            ),
            Ok(200)
        );
        let bad: &[&[(&str, &str)]] = &[
            &[],
            &[("x", "1")],
            &[("x", "1"), (":status", "200")],
            &[(":status", "20")],
            &[(":status", "2x0")],
            &[(":status", "101")],
            &[(":status", "200"), (":status", "200")],
            &[(":status", "200"), (":path", "/")],
            &[(":status", "200"), ("Upper", "1")],
            &[(":status", "200"), ("connection", "close")],
            &[(":status", "200"), ("transfer-encoding", "chunked")],
            &[(":status", "200"), ("x", "a\r\nb: c")],
            &[
                (":status", "200"),
                ("content-length", "1"),
                ("content-length", "2"),
            ],
        ];
        for c in bad {
            assert!(build(false, c).is_err(), "{c:?}");
        }
        assert_eq!(build(true, &[("grpc-status", "0")]), Ok(0));
        assert!(build(true, &[(":status", "200")]).is_err());
    }

    #[test]
    fn a_field_list_keeps_order_and_finds_names() {
        let mut l = FieldList::default();
        l.push(b"a", b"1");
        l.push(b"bb", b"");
        l.push(b"a", b"3");
        let all: Vec<_> = l.iter().collect();
        assert_eq!(all, [(&b"a"[..], &b"1"[..]), (b"bb", b""), (b"a", b"3")]);
        assert_eq!(l.get(b"a"), Some(&b"1"[..]));
        assert_eq!(l.get(b"c"), None);
        assert_eq!(l.len(), 3);
    }
}
