//! The request head: [`parse_request`] (HTTP/1.1 text) or [`request_from_parts`] (decoded
//! fields), and the [`Request`] either produces.

use crate::body::BodyKind;
use crate::bytes::{all_field_bytes, is_tchar};
use crate::error::RequestError;
use crate::fields::analyze;
use crate::head::{
    check_method_len, check_partial, check_raw_bytes, check_target_len, classify_version_error,
    MAX_METHOD_LEN,
};
use crate::limits::Limits;
use crate::method::Method;
use crate::target::parse_target;
use crate::version::Version;
use std::mem::MaybeUninit;

use httparse::Header;

/// Result of an incremental parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parsed<T> {
    /// Parsing finished.
    Complete(T),
    /// More input is needed; call again with the same bytes plus more.
    Partial,
}

impl<T> Parsed<T> {
    /// Whether more input is needed.
    pub fn is_partial(&self) -> bool {
        matches!(self, Parsed::Partial)
    }
}

/// A parsed request head. All strings borrow from the input buffer (`'b`);
/// the header array borrows from caller-provided storage (`'h`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request<'h, 'b> {
    /// The method, mapped case-sensitively.
    pub method: Method,
    /// The method token exactly as sent.
    pub method_str: &'b str,
    /// The raw request-target as sent.
    pub target: &'b str,
    /// The raw (still percent-encoded) path: the part of an origin-form
    /// target before `?`; the path of an absolute-form target (`/` if
    /// empty); `*` for asterisk-form; the whole target for authority-form.
    pub path: &'b str,
    /// The query without the `?`, if there was a `?`.
    pub query: Option<&'b str>,
    /// The protocol version.
    pub version: Version,
    /// The authority of an absolute-form or authority-form target, otherwise
    /// the `Host` header value (validated, port not stripped). Bytes, but
    /// always ASCII: the host grammar (RFC 3986 §3.2.2) admits nothing else.
    pub host: Option<&'b [u8]>,
    /// All header fields, in order, values with surrounding whitespace
    /// trimmed.
    pub headers: &'h [Header<'b>],
    /// How the body is framed.
    pub body: BodyKind,
    /// Whether the connection may be reused after this request.
    pub keep_alive: bool,
    /// `Expect: 100-continue` on an HTTP/1.1 request.
    pub expect_continue: bool,
    /// Bytes of the head, from the start of the buffer (including skipped
    /// leading empty lines) through the empty line ending the head. The body
    /// or the next pipelined request starts here.
    pub head_len: usize,
}

impl<'h, 'b> Request<'h, 'b> {
    /// The value of the first header named `name` (ASCII case-insensitive).
    pub fn header(&self, name: &str) -> Option<&'b [u8]> {
        self.headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| h.value)
    }

    /// [`host`](Self::host) without the port. IP-literals keep their
    /// brackets (`[::1]`). Case is left as sent.
    pub fn host_name(&self) -> Option<&'b [u8]> {
        self.host.map(|h| crate::host::split_port(h).0)
    }
}

/// Parses a request head from the start of `buf`.
///
/// `headers` is storage for the header fields (at most `limits.max_headers`
/// of it is used); more fields than fit are answered with 431. Returns
/// [`Parsed::Partial`] when the head is not complete yet: call again once
/// more bytes have arrived, with the same buffer start.
///
/// Any error means the request must be answered with `err.status` and the
/// connection closed. See the crate documentation for the rules enforced.
pub fn parse_request<'h, 'b>(
    buf: &'b [u8],
    headers: &'h mut [Header<'b>],
    limits: &Limits,
) -> Result<Parsed<Request<'h, 'b>>, RequestError> {
    // Never look past max_head bytes: a head that does not end within them
    // is too large whatever follows.
    let window = &buf[..buf.len().min(limits.max_head)];
    let storage = headers.len().min(limits.max_headers);
    let mut raw = httparse::Request::new(&mut headers[..storage]);
    let r = raw.parse(window);
    finish(buf, window, r, raw, limits)
}

/// [`parse_request`] with uninitialised header storage: the server's hot path, which
/// spares initialising a few kilobytes of headers for every request.
pub fn parse_request_uninit<'h, 'b>(
    buf: &'b [u8],
    headers: &'h mut [MaybeUninit<Header<'b>>],
    limits: &Limits,
) -> Result<Parsed<Request<'h, 'b>>, RequestError> {
    let window = &buf[..buf.len().min(limits.max_head)];
    let storage = headers.len().min(limits.max_headers);
    let mut raw = httparse::Request::new(&mut []);
    let r = raw.parse_with_uninit_headers(window, &mut headers[..storage]);
    finish(buf, window, r, raw, limits)
}

fn finish<'h, 'b>(
    buf: &'b [u8],
    window: &'b [u8],
    r: httparse::Result<usize>,
    raw: httparse::Request<'h, 'b>,
    limits: &Limits,
) -> Result<Parsed<Request<'h, 'b>>, RequestError> {
    let head_len = match r {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => {
            check_partial(window, limits)?;
            return Ok(Parsed::Partial);
        }
        Err(httparse::Error::Version) => {
            check_method_len(window)?;
            check_target_len(window, limits)?;
            classify_version_error(window)?;
            check_partial(window, limits)?;
            return Ok(Parsed::Partial);
        }
        Err(httparse::Error::TooManyHeaders) => {
            check_method_len(window)?;
            check_target_len(window, limits)?;
            return Err(RequestError::new(431, "too many header fields"));
        }
        Err(e) => {
            check_method_len(window)?;
            check_target_len(window, limits)?;
            return Err(RequestError::bad(httparse_reason(e)));
        }
    };

    let httparse::Request {
        method,
        path,
        version,
        headers,
    } = raw;
    let (Some(method_str), Some(target), Some(version)) = (method, path, version) else {
        return Err(RequestError::bad("incomplete request line"));
    };
    let version = match version {
        0 => Version::Http10,
        1 => Version::Http11,
        _ => return Err(RequestError::new(505, "HTTP version not supported")),
    };
    // `httparse` rejects NUL and bare CR anywhere in a head; the property test
    // `head_bytes_prop` and the parse_request fuzz target hold it to that, so release builds
    // do not scan every head a second time.
    debug_assert!(check_raw_bytes(&buf[..head_len]).is_ok());
    // `httparse` accepted the method as a token, so only its length is left to check.
    if method_str.len() > MAX_METHOD_LEN {
        return Err(RequestError::new(501, "method too long"));
    }
    if target.len() > limits.max_uri {
        return Err(RequestError::new(414, "request-target too long"));
    }
    let method = Method::from_token(method_str);
    let target_parts = parse_target(method, target)?;
    let fields = analyze(headers, version)?;
    // Built here, not through `request_from_parts`' tail: a Request returned and then wrapped
    // is moved once more on the parser's hot path (+~40 instructions a request).
    Ok(Parsed::Complete(Request {
        method,
        method_str,
        target,
        path: target_parts.path,
        query: target_parts.query,
        version,
        host: target_parts.authority.map(str::as_bytes).or(fields.host),
        headers,
        body: fields.body,
        keep_alive: fields.keep_alive,
        expect_continue: fields.expect_continue,
        head_len,
    }))
}

/// A request given by its parts rather than as HTTP/1.1 text: an HTTP/2 (or HTTP/3)
/// request's decoded fields, `headers` in order with `Host` among them. It is held to what
/// [`parse_request`] holds a head to: the method a token, the target and every field made of
/// the bytes `httparse` admits, at most `max_headers` fields, then the same checks of the
/// request line and the fields; a request either way is the same [`Request`]. Its
/// `head_len` is the size of its fields (what an HTTP/1.1 head of them would hold, roughly).
pub fn request_from_parts<'h, 'b>(
    method_str: &'b str,
    target: &'b str,
    headers: &'h [Header<'b>],
    limits: &Limits,
) -> Result<Request<'h, 'b>, RequestError> {
    // In the parser's order: the method's and the target's lengths first, then the request
    // line's bytes, then the fields one by one (too many is 431 where the parser runs out of
    // room before it meets a bad byte).
    if method_str.bytes().take_while(|&b| is_tchar(b)).count() > MAX_METHOD_LEN {
        return Err(RequestError::new(501, "method too long"));
    }
    // The target's length counts up to its first byte that cannot be part of one, and only
    // after a valid method (`head::check_target_len`).
    let method_ok = !method_str.is_empty() && method_str.bytes().all(is_tchar);
    let run = target
        .bytes()
        .take_while(|&b| b > b' ' && b != 0x7f)
        .count();
    if method_ok && run > limits.max_uri {
        return Err(RequestError::new(414, "request-target too long"));
    }
    if !method_ok {
        return Err(RequestError::bad("invalid request line"));
    }
    if target.is_empty() || !target.bytes().all(httparse_uri_byte) {
        return Err(RequestError::bad("invalid request line"));
    }
    let mut head_len = method_str.len() + target.len() + 12;
    for (i, h) in headers.iter().enumerate() {
        if i >= limits.max_headers {
            return Err(RequestError::new(431, "too many header fields"));
        }
        if h.name.is_empty() || !h.name.bytes().all(is_tchar) {
            return Err(RequestError::bad("invalid header name"));
        }
        if !all_field_bytes(h.value) {
            return Err(RequestError::bad("invalid header value"));
        }
        head_len += h.name.len() + h.value.len() + 4;
    }
    // The method's and the target's lengths were checked above, in the parser's order.
    let version = Version::Http11;
    let method = Method::from_token(method_str);
    let target_parts = parse_target(method, target)?;
    let fields = analyze(headers, version)?;

    Ok(Request {
        method,
        method_str,
        target,
        path: target_parts.path,
        query: target_parts.query,
        version,
        host: target_parts.authority.map(str::as_bytes).or(fields.host),
        headers,
        body: fields.body,
        keep_alive: fields.keep_alive,
        expect_continue: fields.expect_continue,
        head_len,
    })
}

/// A byte `httparse` admits in a request-target.
fn httparse_uri_byte(b: u8) -> bool {
    matches!(b, b'!'..=0x7e | 0x80..=0xff)
}

fn httparse_reason(e: httparse::Error) -> &'static str {
    match e {
        httparse::Error::HeaderName => "invalid header name",
        httparse::Error::HeaderValue => "invalid header value",
        httparse::Error::NewLine => "invalid line ending",
        httparse::Error::Token => "invalid request line",
        httparse::Error::Version => "invalid HTTP version",
        httparse::Error::Status => "invalid status",
        httparse::Error::TooManyHeaders => "too many header fields",
    }
}
