//! Header fields that affect framing and connection handling (RFC 9112 §6,
//! §9.3; RFC 9110 §7.2, §7.6.1, §10.1.1).

use crate::ascii::eq_lower;
use crate::body::BodyKind;
use crate::bytes::{is_qdtext, is_tchar};
use crate::error::RequestError;
use crate::version::Version;
use httparse::Header;

/// What the header fields say about the message.
#[derive(Debug)]
pub(crate) struct Fields<'b> {
    /// The `Host` header value, validated (so ASCII).
    pub host: Option<&'b [u8]>,
    pub body: BodyKind,
    pub keep_alive: bool,
    pub expect_continue: bool,
}

/// Running state of the combined `Transfer-Encoding` list.
#[derive(Default)]
pub(crate) struct Codings {
    pub present: bool,
    pub count: usize,
    pub last_is_chunked: bool,
}

/// Interprets the fields listed above and validates the `Host` value. (`httparse` has already
/// checked the bytes of every value: see the loop.)
pub(crate) fn analyze<'b>(
    headers: &[Header<'b>],
    version: Version,
) -> Result<Fields<'b>, RequestError> {
    let mut host: Option<&'b [u8]> = None;
    let mut content_length: Option<&'b [u8]> = None;
    let mut codings = Codings::default();
    let (mut close, mut keep_alive_token) = (false, false);
    let mut expect: Option<bool> = None; // Some(all elements are 100-continue)

    for header in headers {
        let value = header.value;
        // `httparse` admits only field-vchar / SP / HTAB in a value (its HEADER_VALUE_MAP is
        // this same set); the property tests of tests/head_bytes_prop.rs and the parse_request
        // fuzz target hold it to that, so release builds do not scan every value twice.
        debug_assert!(value.iter().all(|&b| is_field_vchar(b)));
        let name = header.name;
        // The length picks the one name worth comparing: most fields are none of these.
        match name.len() {
            4 if eq_lower(name.as_bytes(), b"host") => {
                if host.is_some() {
                    return Err(RequestError::bad("multiple Host headers"));
                }
                host = Some(value);
            }
            14 if eq_lower(name.as_bytes(), b"content-length") => {
                if content_length.is_some() {
                    return Err(RequestError::bad("multiple Content-Length headers"));
                }
                content_length = Some(value);
            }
            17 if eq_lower(name.as_bytes(), b"transfer-encoding") => {
                codings.present = true;
                let before = codings.count;
                parse_transfer_codings(value, &mut codings)?;
                if codings.count == before {
                    return Err(RequestError::bad("empty Transfer-Encoding"));
                }
            }
            10 if eq_lower(name.as_bytes(), b"connection") => {
                for token in list_elements(value) {
                    close |= eq_lower(token, b"close");
                    keep_alive_token |= eq_lower(token, b"keep-alive");
                }
            }
            6 if eq_lower(name.as_bytes(), b"expect") => {
                let mut all_continue = expect.unwrap_or(true);
                let mut any = false;
                for element in list_elements(value) {
                    any = true;
                    all_continue &= eq_lower(element, b"100-continue");
                }
                expect = Some(all_continue && any);
            }
            _ => {}
        }
    }

    let host = match host {
        Some(value) if crate::host::is_valid_host(value) => Some(value),
        Some(_) => return Err(RequestError::bad("invalid Host header")),
        None if version == Version::Http11 => {
            return Err(RequestError::bad("missing Host header"));
        }
        None => None,
    };

    let body = if codings.present {
        if version == Version::Http10 {
            return Err(RequestError::bad("Transfer-Encoding in HTTP/1.0 request"));
        }
        if content_length.is_some() {
            return Err(RequestError::bad(
                "both Transfer-Encoding and Content-Length",
            ));
        }
        if !codings.last_is_chunked {
            return Err(RequestError::bad("final transfer coding is not chunked"));
        }
        if codings.count > 1 {
            return Err(RequestError::new(501, "unsupported transfer coding"));
        }
        BodyKind::Chunked
    } else if let Some(value) = content_length {
        BodyKind::Length(parse_content_length(value)?)
    } else {
        BodyKind::None
    };

    let keep_alive = match version {
        Version::Http11 => !close,
        Version::Http10 => keep_alive_token && !close,
    };

    let expect_continue = match (version, expect) {
        (Version::Http10, _) | (_, None) => false,
        (Version::Http11, Some(true)) => true,
        (Version::Http11, Some(false)) => {
            return Err(RequestError::new(417, "unsupported expectation"));
        }
    };

    Ok(Fields {
        host,
        body,
        keep_alive,
        expect_continue,
    })
}

/// `field-vchar / SP / HTAB`, i.e. any byte but CTLs (other than HTAB) and DEL.
fn is_field_vchar(b: u8) -> bool {
    b == b'\t' || (b' '..=b'~').contains(&b) || b >= 0x80
}

/// `Content-Length = 1*DIGIT`, a single value that fits in a u64.
pub(crate) fn parse_content_length(value: &[u8]) -> Result<u64, RequestError> {
    if value.is_empty() || !value.iter().all(u8::is_ascii_digit) {
        return Err(RequestError::bad("invalid Content-Length"));
    }
    value.iter().try_fold(0u64, |n, &d| {
        n.checked_mul(10)
            .and_then(|n| n.checked_add(u64::from(d - b'0')))
            .ok_or(RequestError::bad("Content-Length overflow"))
    })
}

/// Elements of a `#list` value: comma-separated, OWS-trimmed, empty elements
/// skipped (RFC 9110 §5.6.1). Only for lists whose elements are plain tokens.
pub(crate) fn list_elements(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value
        .split(|&b| b == b',')
        .map(trim_ows)
        .filter(|e| !e.is_empty())
}

fn trim_ows(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}

/// Parses one `Transfer-Encoding` field value into `acc`:
///
/// ```text
/// Transfer-Encoding   = #transfer-coding
/// transfer-coding     = token *( OWS ";" OWS transfer-parameter )
/// transfer-parameter  = token BWS "=" BWS ( token / quoted-string )
/// ```
pub(crate) fn parse_transfer_codings(value: &[u8], acc: &mut Codings) -> Result<(), RequestError> {
    const BAD: RequestError = RequestError::bad("invalid Transfer-Encoding");
    let mut p = Cursor { s: value, i: 0 };
    loop {
        p.skip_ows();
        match p.peek() {
            None => return Ok(()),
            Some(b',') => {
                p.i += 1;
                continue;
            }
            Some(_) => {}
        }
        let name = p.token().ok_or(BAD)?;
        let mut has_params = false;
        loop {
            p.skip_ows();
            match p.peek() {
                Some(b';') => {
                    p.i += 1;
                    p.skip_ows();
                    p.token().ok_or(BAD)?;
                    p.skip_ows();
                    if p.peek() != Some(b'=') {
                        return Err(BAD);
                    }
                    p.i += 1;
                    p.skip_ows();
                    if p.peek() == Some(b'"') {
                        p.quoted_string().ok_or(BAD)?;
                    } else {
                        p.token().ok_or(BAD)?;
                    }
                    has_params = true;
                }
                Some(b',') | None => break,
                Some(_) => return Err(BAD),
            }
        }
        acc.count += 1;
        acc.last_is_chunked = !has_params && name.eq_ignore_ascii_case(b"chunked");
    }
}

struct Cursor<'a> {
    s: &'a [u8],
    i: usize,
}

impl<'a> Cursor<'a> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn skip_ows(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t')) {
            self.i += 1;
        }
    }

    fn token(&mut self) -> Option<&'a [u8]> {
        let start = self.i;
        while self.peek().is_some_and(is_tchar) {
            self.i += 1;
        }
        (self.i > start).then(|| &self.s[start..self.i])
    }

    /// `quoted-string = DQUOTE *( qdtext / quoted-pair ) DQUOTE`
    fn quoted_string(&mut self) -> Option<()> {
        self.i += 1; // opening DQUOTE
        loop {
            let b = self.peek()?;
            self.i += 1;
            match b {
                b'"' => return Some(()),
                b'\\' => {
                    let escaped = self.peek()?;
                    if !is_field_vchar(escaped) {
                        return None;
                    }
                    self.i += 1;
                }
                b if is_qdtext(b) => {}
                _ => return None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn codings(values: &[&str]) -> Result<(usize, bool), RequestError> {
        let mut acc = Codings::default();
        for v in values {
            parse_transfer_codings(v.as_bytes(), &mut acc)?;
        }
        Ok((acc.count, acc.last_is_chunked))
    }

    #[test]
    fn transfer_coding_lists() {
        assert_eq!(codings(&["chunked"]), Ok((1, true)));
        assert_eq!(codings(&["CHUNKED"]), Ok((1, true)));
        assert_eq!(codings(&[" , chunked ,"]), Ok((1, true)));
        assert_eq!(codings(&["gzip", "chunked"]), Ok((2, true)));
        assert_eq!(codings(&["gzip;q=\"a,b\", chunked"]), Ok((2, true)));
        assert_eq!(codings(&["chunked;x=\"1, chunked\""]), Ok((1, false)));
        assert_eq!(codings(&["chunked ; a = b"]), Ok((1, false)));
        assert_eq!(codings(&[""]), Ok((0, false)));
        assert!(codings(&["chunked;"]).is_err());
        assert!(codings(&["chunked x"]).is_err());
        assert!(codings(&["chunked;a=\"x"]).is_err());
        assert!(codings(&["\"chunked\""]).is_err());
    }

    #[test]
    fn content_length_values() {
        assert_eq!(parse_content_length(b"0"), Ok(0));
        assert_eq!(parse_content_length(b"0042"), Ok(42));
        assert_eq!(parse_content_length(b"18446744073709551615"), Ok(u64::MAX));
        for bad in [
            &b""[..],
            b"18446744073709551616",
            b"+1",
            b"-1",
            b"1 2",
            b"0x1",
            b"1,1",
        ] {
            assert!(parse_content_length(bad).is_err());
        }
    }
}
