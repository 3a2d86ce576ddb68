//! The proxy's side of HTTP/1.1: parsing an upstream's response head (with the framing rules
//! of RFC 9112 §6.3 for responses), and rewriting heads as they cross the proxy: hop-by-hop
//! fields removed (RFC 9110 §7.6.1), `X-Forwarded-*`/`Forwarded` added, framing re-declared
//! for the receiving side.

use std::fmt::Write as _;
use std::mem::MaybeUninit;
use std::net::IpAddr;

use httparse::Header;

use crate::ascii::eq_lower;
use crate::body::BodyKind;
use crate::fields::{list_elements, parse_content_length, parse_transfer_codings, Codings};
use crate::head_sink::HeadSink;
use crate::request::{Parsed, Request};
use crate::version::Version;

/// How an upstream response's body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResponseBody {
    /// No body (HEAD, 1xx, 204, 304).
    None,
    /// `Content-Length`.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
    /// Until the upstream closes the connection.
    UntilClose,
}

/// A parsed response head; everything borrows the receive buffer.
#[derive(Debug)]
pub struct ResponseHead<'h, 'b> {
    /// Protocol version of the response.
    pub version: Version,
    /// Status code.
    pub status: u16,
    /// Reason phrase.
    pub reason: &'b str,
    /// Header fields in order.
    pub headers: &'h [Header<'b>],
    /// Body framing.
    pub body: ResponseBody,
    /// Whether the upstream connection may carry another request afterwards.
    pub keep_alive: bool,
    /// Bytes of the head, including the final CRLF.
    pub head_len: usize,
    /// Whether a `Connection` field lists an option other than `keep-alive`: only then can
    /// it name a field that is not hop-by-hop anyway, for the writers to drop.
    pub connection_options: bool,
    /// The head as received (the status line to the empty line), which [`Self::headers`]
    /// borrow: lines passed on unchanged are copied from it.
    pub raw: &'b [u8],
}

/// Why an upstream response could not be used (the proxy answers 502).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UpstreamError(pub &'static str);

impl std::fmt::Display for UpstreamError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

impl std::error::Error for UpstreamError {}

/// Parses a response head from the start of `buf`. `head_request`: the request was HEAD (so
/// the response has no body whatever its fields say). Heads larger than `max_head` fail.
pub fn parse_response<'h, 'b>(
    buf: &'b [u8],
    headers: &'h mut [Header<'b>],
    max_head: usize,
    head_request: bool,
) -> Result<Parsed<ResponseHead<'h, 'b>>, UpstreamError> {
    let window = &buf[..buf.len().min(max_head)];
    let mut raw = httparse::Response::new(headers);
    let r = raw.parse(window);
    finish_response(window, max_head, head_request, r, raw)
}

/// [`parse_response`] with uninitialised header storage: the proxy's hot path, which spares
/// initialising a few kilobytes of headers for every response (128 fields: 4 KiB).
pub fn parse_response_uninit<'h, 'b>(
    buf: &'b [u8],
    headers: &'h mut [MaybeUninit<Header<'b>>],
    max_head: usize,
    head_request: bool,
) -> Result<Parsed<ResponseHead<'h, 'b>>, UpstreamError> {
    let window = &buf[..buf.len().min(max_head)];
    let mut raw = httparse::Response::new(&mut []);
    let r = httparse::ParserConfig::default()
        .parse_response_with_uninit_headers(&mut raw, window, headers);
    finish_response(window, max_head, head_request, r, raw)
}

fn finish_response<'h, 'b>(
    window: &'b [u8],
    max_head: usize,
    head_request: bool,
    r: httparse::Result<usize>,
    raw: httparse::Response<'h, 'b>,
) -> Result<Parsed<ResponseHead<'h, 'b>>, UpstreamError> {
    let head_len = match r {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if window.len() < max_head => return Ok(Parsed::Partial),
        Ok(httparse::Status::Partial) => return Err(UpstreamError("response head too large")),
        Err(httparse::Error::TooManyHeaders) => {
            return Err(UpstreamError("too many response header fields"))
        }
        Err(_) => return Err(UpstreamError("malformed response head")),
    };
    let httparse::Response {
        version,
        code,
        reason,
        headers,
    } = raw;
    let (Some(version), Some(status)) = (version, code) else {
        return Err(UpstreamError("incomplete status line"));
    };
    if status < 100 {
        // Three digits, but no such class ("011"): it cannot be passed on faithfully.
        return Err(UpstreamError("invalid status code in response"));
    }
    let version = if version == 0 {
        Version::Http10
    } else {
        Version::Http11
    };
    let headers: &'h [Header<'b>] = headers;
    let mut content_length: Option<u64> = None;
    let mut codings = Codings::default();
    let (mut close, mut keep_token, mut options) = (false, false, false);
    // No value holds NUL, CR or LF: httparse (without obsolete line folding, which is never
    // enabled here) ends a value at CR or LF and refuses any other control byte but HTAB
    // (`value_bytes_are_checked_by_httparse` in the tests keeps to that).
    for h in headers {
        let name = h.name.as_bytes();
        match name.len() {
            14 if eq_lower(name, b"content-length") => {
                let n = parse_content_length(h.value)
                    .map_err(|_| UpstreamError("invalid Content-Length in response"))?;
                if content_length.is_some_and(|m| m != n) {
                    return Err(UpstreamError("conflicting Content-Length in response"));
                }
                content_length = Some(n);
            }
            17 if eq_lower(name, b"transfer-encoding") => {
                codings.present = true;
                parse_transfer_codings(h.value, &mut codings)
                    .map_err(|_| UpstreamError("invalid Transfer-Encoding in response"))?;
            }
            10 if eq_lower(name, b"connection") => {
                for t in list_elements(h.value) {
                    let keep = eq_lower(t, b"keep-alive");
                    close |= eq_lower(t, b"close");
                    keep_token |= keep;
                    options |= !keep;
                }
            }
            _ => {}
        }
    }
    let no_body = head_request || (100..200).contains(&status) || status == 204 || status == 304;
    let body = if no_body {
        ResponseBody::None
    } else if codings.present {
        // RFC 9112 §6.3: Transfer-Encoding overrides Content-Length; a final coding other
        // than chunked means the body runs until close.
        if codings.last_is_chunked && codings.count == 1 {
            ResponseBody::Chunked
        } else if codings.last_is_chunked {
            return Err(UpstreamError("unsupported transfer coding in response"));
        } else {
            ResponseBody::UntilClose
        }
    } else if let Some(n) = content_length {
        ResponseBody::Length(n)
    } else {
        ResponseBody::UntilClose
    };
    let keep_alive = match version {
        Version::Http11 => !close,
        Version::Http10 => keep_token && !close,
    } && body != ResponseBody::UntilClose
        && !(codings.present && content_length.is_some());
    Ok(Parsed::Complete(ResponseHead {
        version,
        status,
        reason: reason.unwrap_or(""),
        headers,
        body,
        keep_alive,
        head_len,
        connection_options: options,
        raw: &window[..head_len],
    }))
}

/// Whether the proxy never copies `name` from one side to the other:
///
/// - a field that describes one connection (RFC 9110 §7.6.1): `Connection`, `Keep-Alive`,
///   `Proxy-Connection`, `TE`, `Trailer`, `Upgrade`, `Expect`;
/// - a field that delimits the body (`Content-Length`, `Transfer-Encoding`): the proxy
///   declares the framing it will actually send, from what it parsed, so the next hop reads
///   exactly the body the proxy relays. A `Connection` option naming one of them therefore
///   changes nothing (it used to remove the length and let the body be read as a second
///   request).
///
/// By length first: most fields are none of them, and are told so by one comparison.
#[inline]
fn is_proxy_owned(name: &str) -> bool {
    let n = name.as_bytes();
    match n.len() {
        2 => eq_lower(n, b"te"),
        6 => eq_lower(n, b"expect"),
        7 => eq_lower(n, b"trailer") || eq_lower(n, b"upgrade"),
        10 => eq_lower(n, b"connection") || eq_lower(n, b"keep-alive"),
        14 => eq_lower(n, b"content-length"),
        16 => eq_lower(n, b"proxy-connection"),
        17 => eq_lower(n, b"transfer-encoding"),
        _ => false,
    }
}

/// Whether a field is one the proxy alone writes about the client's certificate
/// (`X-SSL-Client-Verify`, `X-SSL-Client-S-DN`, and any other `X-SSL-Client-*` an upstream
/// may read): a client's own are dropped whatever else the location says, so no client can
/// pose as verified.
pub fn is_client_cert_field(name: &str) -> bool {
    const PREFIX: &str = "x-ssl-client-";
    name.len() >= PREFIX.len() && eq_lower(&name.as_bytes()[..PREFIX.len()], PREFIX.as_bytes())
}

/// Whether `name` is listed in any `Connection` field of `headers`.
fn named_by_connection(headers: &[Header<'_>], name: &str) -> bool {
    headers
        .iter()
        .filter(|h| eq_lower(h.name.as_bytes(), b"connection"))
        .flat_map(|h| list_elements(h.value))
        .any(|t| t.eq_ignore_ascii_case(name.as_bytes()))
}

/// The names a head's `Connection` fields list (RFC 9110 §7.6.1), gathered once per head, so
/// that each field is checked against them rather than against every field again (the scan
/// per field was 7% of a proxied request's instructions). Past [`ConnectionNames::MAX`]
/// names the fields are scanned as before.
struct ConnectionNames<'h, 's> {
    names: [&'h [u8]; ConnectionNames::MAX],
    len: usize,
    /// Too many names to keep: the fields, to scan for each name asked.
    many: Option<&'s [Header<'h>]>,
}

impl ConnectionNames<'_, '_> {
    const MAX: usize = 8;
}

impl<'h, 's> ConnectionNames<'h, 's> {
    /// The names, or `None` if the fields list none (most heads).
    fn of(headers: &'s [Header<'h>]) -> Option<ConnectionNames<'h, 's>> {
        let mut listed = headers
            .iter()
            .filter(|h| eq_lower(h.name.as_bytes(), b"connection"))
            .flat_map(|h| list_elements(h.value));
        let first = listed.next()?;
        let mut c = ConnectionNames {
            names: [&[]; ConnectionNames::MAX],
            len: 1,
            many: None,
        };
        c.names[0] = first;
        for t in listed {
            if c.len == ConnectionNames::MAX {
                c.many = Some(headers);
                break;
            }
            c.names[c.len] = t;
            c.len += 1;
        }
        Some(c)
    }

    /// Whether `name` is one of them.
    fn names(&self, name: &str) -> bool {
        match self.many {
            Some(headers) => named_by_connection(headers, name),
            None => self.names[..self.len]
                .iter()
                .any(|t| t.eq_ignore_ascii_case(name.as_bytes())),
        }
    }
}

/// The `Upgrade` value of a request that asks for a protocol switch (`Connection: upgrade`
/// and `Upgrade: x`), e.g. a WebSocket handshake.
pub fn upgrade_request<'b>(req: &Request<'_, 'b>) -> Option<&'b [u8]> {
    let asked = req
        .headers
        .iter()
        .filter(|h| eq_lower(h.name.as_bytes(), b"connection"))
        .flat_map(|h| list_elements(h.value))
        .any(|t| eq_lower(t, b"upgrade"));
    if !asked || req.version != Version::Http11 {
        return None;
    }
    req.header("upgrade")
}

/// What the proxy adds to a request it forwards.
#[derive(Debug, Clone)]
pub struct Forward<'a> {
    /// The client's address, for `X-Forwarded-For`, `X-Real-IP` and `Forwarded`.
    pub client: Option<IpAddr>,
    /// `http` or `https`: the scheme the client used (`X-Forwarded-Proto`).
    pub proto: &'a str,
    /// The `Host` to send; `None` passes the client's.
    pub host: Option<&'a str>,
    /// Add `X-Forwarded-For`, `X-Real-IP`, `X-Forwarded-Proto` and `Forwarded`.
    pub forwarded_headers: bool,
    /// `Connection: close` to the upstream (the connection will not be reused).
    pub close: bool,
    /// Forward this `Upgrade` (a protocol switch was asked for).
    pub upgrade: Option<&'a [u8]>,
    /// The client came over TLS: `Some(Some(subject))` with a verified client certificate
    /// (`X-SSL-Client-Verify: SUCCESS` and `X-SSL-Client-S-DN`), `Some(None)` without one
    /// (`X-SSL-Client-Verify: NONE`), written with `forwarded_headers`. The client's own
    /// `X-SSL-Client-*` fields are always dropped ([`is_client_cert_field`]), so an upstream
    /// can trust them. The subject must be printable ASCII (the server escapes the rest).
    pub tls_client: Option<Option<&'a str>>,
}

/// Writes the head of `req` as forwarded to an upstream (HTTP/1.1 always).
///
/// The proxy owns four things about the forwarded message, and no field sent by the client can
/// change them: its framing (`Content-Length: n` or `Transfer-Encoding: chunked`, from
/// [`Request::body`], which is how the proxy relays the body), `Host` ([`Forward::host`] or the
/// client's validated one), `Upgrade` ([`Forward::upgrade`]) and `Connection`. So a request that
/// lists one of them in `Connection` (`Connection: Content-Length`) is forwarded with its
/// framing re-declared, not refused: the upstream reads exactly one request with exactly the
/// body the proxy sends, which is what refusing (RFC 9110 §7.6.1 allows it) would protect, and
/// clients that name such fields by mistake keep working, as they do through nginx, which
/// ignores `Connection` options altogether. Other fields named by `Connection` are dropped.
pub fn write_request_head(out: &mut Vec<u8>, req: &Request<'_, '_>, f: &Forward<'_>) {
    request_head(out, req, f, &RequestEdit::default());
}

/// [`write_request_head`] with the request-target replaced (a `proxy_pass` URI part, a
/// rewritten path) and nothing else edited.
pub fn write_request_head_target(
    out: &mut Vec<u8>,
    req: &Request<'_, '_>,
    f: &Forward<'_>,
    target: Option<&str>,
) {
    let edit = RequestEdit {
        target,
        ..RequestEdit::default()
    };
    request_head(out, req, f, &edit);
}

/// What a proxy location changes in a request it forwards, beyond [`Forward`] (nginx's
/// `proxy_pass` URI part and `proxy_set_header`).
#[derive(Debug, Clone, Copy, Default)]
pub struct RequestEdit<'a> {
    /// The request-target to send instead of the client's (origin-form, already escaped).
    pub target: Option<&'a str>,
    /// Lowercase names of the client's fields not forwarded. A field the proxy would add
    /// itself (`X-Forwarded-For`, `X-Real-IP`, `X-Forwarded-Proto`, `Forwarded`) and that is
    /// named here is not added either: the configuration sets it.
    pub drop: &'a [String],
    /// Field lines added (each with CRLF).
    pub add: &'a [u8],
}

/// [`write_request_head`] with a location's changes.
pub fn write_request_head_edit(
    out: &mut Vec<u8>,
    req: &Request<'_, '_>,
    f: &Forward<'_>,
    edit: &RequestEdit<'_>,
) {
    request_head(out, req, f, edit);
}

/// The one body of the request-head writers, inlined into each so that the ones without
/// edits (every proxied request of a location with no `proxy_set_header`, hidden field or
/// cache) compile without the per-field tests of the edits.
#[inline(always)]
fn request_head(out: &mut Vec<u8>, req: &Request<'_, '_>, f: &Forward<'_>, edit: &RequestEdit<'_>) {
    let dropped = |n: &str| edit.drop.iter().any(|d| n.eq_ignore_ascii_case(d));
    out.extend_from_slice(req.method_str.as_bytes());
    out.push(b' ');
    if let Some(t) = edit.target {
        out.extend_from_slice(t.as_bytes());
    } else if req.target.starts_with('/') || req.target == "*" {
        out.extend_from_slice(req.target.as_bytes());
    } else {
        // absolute-form: origin-form to the upstream.
        out.extend_from_slice(req.path.as_bytes());
        if let Some(q) = req.query {
            out.push(b'?');
            out.extend_from_slice(q.as_bytes());
        }
    }
    out.extend_from_slice(b" HTTP/1.1\r\n");
    let host = f.host.map(str::as_bytes).or(req.host);
    if let Some(h) = host {
        put(out, "Host", h);
    }
    let mut xff: Option<&[u8]> = None;
    let named = ConnectionNames::of(req.headers);
    for h in req.headers {
        let n = h.name;
        // The proxy's own fields first, so that `Connection` cannot name them away.
        if is_proxy_owned(n) || eq_lower(n.as_bytes(), b"host") {
            continue;
        }
        if named.as_ref().is_some_and(|c| c.names(n)) || dropped(n) || is_client_cert_field(n) {
            continue;
        }
        if f.forwarded_headers {
            if eq_lower(n.as_bytes(), b"x-forwarded-for") {
                xff = Some(h.value); // extended below (several fields: the last one wins)
                continue;
            }
            if eq_lower(n.as_bytes(), b"x-real-ip") || eq_lower(n.as_bytes(), b"x-forwarded-proto")
            {
                continue; // replaced below
            }
        }
        put(out, n, h.value);
    }
    match req.body {
        BodyKind::Chunked => out.extend_from_slice(b"Transfer-Encoding: chunked\r\n"),
        BodyKind::Length(n) => {
            let _ = write!(Bytes(out), "Content-Length: {n}\r\n");
        }
        BodyKind::None => {}
    }
    if f.forwarded_headers {
        if let Some(ip) = f.client {
            if !dropped("x-forwarded-for") {
                out.extend_from_slice(b"X-Forwarded-For: ");
                if let Some(prev) = xff.filter(|v| !v.is_empty()) {
                    out.extend_from_slice(prev);
                    out.extend_from_slice(b", ");
                }
                let _ = write!(Bytes(out), "{ip}\r\n");
            }
            if !dropped("x-real-ip") {
                let _ = write!(Bytes(out), "X-Real-IP: {ip}\r\n");
            }
            if !dropped("x-forwarded-proto") {
                let _ = write!(Bytes(out), "X-Forwarded-Proto: {}\r\n", f.proto);
            }
            if !dropped("forwarded") {
                let node = match ip {
                    IpAddr::V4(a) => a.to_string(),
                    IpAddr::V6(a) => format!("\"[{a}]\""),
                };
                let _ = write!(Bytes(out), "Forwarded: for={node};proto={}", f.proto);
                if let Some(h) = req.host.filter(|h| is_token(h)) {
                    out.extend_from_slice(b";host=");
                    out.extend_from_slice(h);
                }
                out.extend_from_slice(b"\r\n");
            }
        }
        match f.tls_client {
            None => {}
            Some(None) => out.extend_from_slice(b"X-SSL-Client-Verify: NONE\r\n"),
            Some(Some(dn)) => {
                out.extend_from_slice(b"X-SSL-Client-Verify: SUCCESS\r\n");
                // The subject was made printable ASCII when the handshake finished; a byte
                // that could end the field is never written, whoever forgot that.
                out.extend_from_slice(b"X-SSL-Client-S-DN: ");
                out.extend(
                    dn.bytes()
                        .map(|c| if c < 0x20 || c == 0x7f { b'?' } else { c }),
                );
                out.extend_from_slice(b"\r\n");
            }
        }
    }
    out.extend_from_slice(edit.add);
    match (f.upgrade, f.close) {
        (Some(u), _) => {
            put(out, "Upgrade", u);
            out.extend_from_slice(b"Connection: upgrade\r\n");
        }
        (None, true) => out.extend_from_slice(b"Connection: close\r\n"),
        (None, false) => {}
    }
    out.extend_from_slice(b"\r\n");
}

/// How the response travels to the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientFraming {
    /// As the upstream framed it: the body's bytes (chunked framing included) pass through
    /// unchanged, and the head declares the same `Content-Length` or chunked coding.
    Same,
    /// Delimited by closing the client's connection, which must not carry another response:
    /// a chunked body de-chunked for an HTTP/1.0 client, or a body the upstream itself
    /// delimits by closing ([`ResponseBody::UntilClose`]), passed through as it comes.
    Close,
}

/// Writes the response head for the client: the upstream's fields without hop-by-hop ones,
/// framing declared for the client, then `conn` (a `Connection: ...\r\n` line or nothing), or
/// `Connection: close` instead where the body is delimited by closing ([`ClientFraming::Close`]).
/// Returns how the body must be passed on.
///
/// As for requests ([`write_request_head`]), the framing the head declares is the proxy's, from
/// [`ResponseHead::body`] and the returned [`ClientFraming`], never a copy of the upstream's
/// fields, so a `Connection` option naming `Content-Length` cannot leave a kept-alive client
/// without the body's length. The one length copied is that of a response without a body
/// (HEAD, 304): there it describes the representation, not this message.
pub fn write_response_head<O: HeadSink + ?Sized>(
    out: &mut O,
    resp: &ResponseHead<'_, '_>,
    client: Version,
    conn: &[u8],
) -> ClientFraming {
    response_head(out, resp, client, conn, &ResponseEdit::default())
}

/// What the proxy changes in a response head it relays, beyond the framing (nginx's
/// `proxy_hide_header`, `add_header`, and compression).
#[derive(Debug, Clone, Copy, Default)]
pub struct ResponseEdit<'a> {
    /// Lowercase names of fields not passed on.
    pub hide: &'a [String],
    /// The body is re-encoded with this content-coding as it is relayed. Its length is then
    /// unknown: it goes chunked to an HTTP/1.1 client ([`ClientFraming::Same`], the proxy
    /// writing the chunks) and delimited by the close to HTTP/1.0. `Content-Encoding` says so,
    /// a strong `ETag` becomes weak (the bytes differ) and `Accept-Ranges` goes.
    pub encode: Option<&'a str>,
    /// Add `Accept-Encoding` to `Vary` (unless a `Vary` field already covers it).
    pub vary: bool,
    /// Field lines added at the end (each with CRLF).
    pub add: &'a [u8],
}

/// Whether a comma-separated field value lists `token` (any case).
pub fn list_has(v: &[u8], token: &[u8]) -> bool {
    list_elements(v).any(|t| t.eq_ignore_ascii_case(token))
}

/// Whether a `Vary` value covers `Accept-Encoding` (it names it, or is `*`).
pub fn vary_covers_accept_encoding(v: &[u8]) -> bool {
    list_elements(v).any(|t| t == b"*" || t.eq_ignore_ascii_case(b"accept-encoding"))
}

/// [`write_response_head`] with a location's changes.
pub fn write_response_head_edit<O: HeadSink + ?Sized>(
    out: &mut O,
    resp: &ResponseHead<'_, '_>,
    client: Version,
    conn: &[u8],
    edit: &ResponseEdit<'_>,
) -> ClientFraming {
    response_head(out, resp, client, conn, edit)
}

/// The one body of the response-head writers, inlined into each so that the one without
/// edits (a location with no `add_header`, hidden field or compression) compiles without
/// their per-field tests.
#[inline(always)]
fn response_head<O: HeadSink + ?Sized>(
    out: &mut O,
    resp: &ResponseHead<'_, '_>,
    client: Version,
    conn: &[u8],
    edit: &ResponseEdit<'_>,
) -> ClientFraming {
    let encode = edit.encode.filter(|_| resp.body != ResponseBody::None);
    let framing = match (resp.body, client) {
        _ if encode.is_some() && client == Version::Http10 => ClientFraming::Close,
        _ if encode.is_some() => ClientFraming::Same,
        (ResponseBody::Chunked, Version::Http10) | (ResponseBody::UntilClose, _) => {
            ClientFraming::Close
        }
        _ => ClientFraming::Same,
    };
    // Lines passed on as they came, in the form the sink's own writers give them (the status
    // line, then consecutive fields `put` as they are): copied at once from the received head
    // into a text sink, when another line is to be written or at the end of the fields.
    let verbatim = out.verbatim();
    let mut run = 0..0;
    match status_span(resp).filter(|_| verbatim) {
        Some(line) => run = line,
        None => out.status(resp.status, resp.reason),
    }
    let switching = resp.status == 101;
    let mut vary = edit.vary;
    let named = resp
        .connection_options
        .then(|| ConnectionNames::of(resp.headers))
        .flatten();
    for h in resp.headers {
        let n = h.name;
        if switching && eq_lower(n.as_bytes(), b"upgrade") {
            flush_run(out, resp.raw, &mut run);
            out.put(n.as_bytes(), h.value);
            continue;
        }
        if is_proxy_owned(n) || named.as_ref().is_some_and(|c| c.names(n)) {
            continue;
        }
        if edit.hide.iter().any(|x| n.eq_ignore_ascii_case(x)) {
            continue;
        }
        if vary && n.eq_ignore_ascii_case("vary") && vary_covers_accept_encoding(h.value) {
            vary = false;
        }
        if encode.is_some() {
            if n.eq_ignore_ascii_case("accept-ranges") || n.eq_ignore_ascii_case("content-encoding")
            {
                continue;
            }
            if n.eq_ignore_ascii_case("etag") && !h.value.starts_with(b"W/") {
                flush_run(out, resp.raw, &mut run);
                out.put(b"ETag", &[&b"W/"[..], h.value].concat());
                continue;
            }
        }
        match line_span(resp.raw, h).filter(|_| verbatim) {
            Some(line) if run.start < run.end && run.end == line.start => run.end = line.end,
            Some(line) => {
                flush_run(out, resp.raw, &mut run);
                run = line;
            }
            None => {
                flush_run(out, resp.raw, &mut run);
                out.put(n.as_bytes(), h.value);
            }
        }
    }
    flush_run(out, resp.raw, &mut run);
    if switching {
        out.lines(edit.add);
        out.lines(b"Connection: upgrade\r\n\r\n");
        return framing;
    }
    if vary {
        out.lines(b"Vary: Accept-Encoding\r\n");
    }
    out.lines(edit.add);
    if let Some(c) = encode {
        out.put(b"Content-Encoding", c.as_bytes());
        if framing == ClientFraming::Same {
            out.lines(b"Transfer-Encoding: chunked\r\n");
        }
        out.lines(match framing {
            ClientFraming::Same => conn,
            ClientFraming::Close => b"Connection: close\r\n",
        });
        out.lines(b"\r\n");
        return framing;
    }
    match (resp.body, framing) {
        (ResponseBody::Length(n), _) => {
            out.length(n);
        }
        (ResponseBody::Chunked, ClientFraming::Same) => {
            out.lines(b"Transfer-Encoding: chunked\r\n");
        }
        // RFC 9110 §8.6: never a Content-Length in a 1xx or 204 response.
        (ResponseBody::None, _) if resp.status >= 200 && resp.status != 204 => {
            if let Some(n) = declared_length(resp.headers) {
                out.length(n);
            }
        }
        _ => {}
    }
    out.lines(match framing {
        ClientFraming::Same => conn,
        ClientFraming::Close => b"Connection: close\r\n",
    });
    out.lines(b"\r\n");
    framing
}

/// Writes the lines of `raw` in `run` (if any) and empties it.
#[inline]
fn flush_run<O: HeadSink + ?Sized>(out: &mut O, raw: &[u8], run: &mut std::ops::Range<usize>) {
    if run.start < run.end {
        out.lines(&raw[run.clone()]);
        *run = 0..0;
    }
}

/// Where the status line lies in the received head, if it is exactly what
/// [`HeadSink::status`] writes for a text sink (`write_status_line_reason`): `HTTP/1.1`, the
/// code, the reason as received (not empty) and CRLF.
#[inline]
fn status_span(resp: &ResponseHead<'_, '_>) -> Option<std::ops::Range<usize>> {
    let reason = resp.reason.as_bytes();
    let end = 13 + reason.len() + 2;
    let line = resp.raw.get(..end)?;
    let digit = |i: usize| u16::from(line[i].wrapping_sub(b'0'));
    let same = !reason.is_empty()
        && line[..8] == *b"HTTP/1.1"
        && line[8] == b' '
        && line[9..12].iter().all(u8::is_ascii_digit)
        && digit(9) * 100 + digit(10) * 10 + digit(11) == resp.status
        && line[12] == b' '
        && std::ptr::eq(line[13..].as_ptr(), reason.as_ptr())
        && line[end - 2] == b'\r'
        && line[end - 1] == b'\n';
    same.then_some(0..end)
}

/// Where field `h` lies in `raw`, the head it was parsed from, if its line there is exactly
/// what [`HeadSink::put`] writes for it: the name, `: `, the value and CRLF (no other white
/// space, no bare LF). `None` for any other line, or a field not borrowed from `raw`.
#[inline]
fn line_span(raw: &[u8], h: &Header<'_>) -> Option<std::ops::Range<usize>> {
    let start = (h.name.as_ptr() as usize).checked_sub(raw.as_ptr() as usize)?;
    let colon = start + h.name.len();
    let end = colon + 2 + h.value.len() + 2;
    let line = raw.get(start..end)?;
    let (name, rest) = line.split_at(h.name.len());
    let (sep, rest) = rest.split_at(2);
    let (value, crlf) = rest.split_at(h.value.len());
    let same = std::ptr::eq(name.as_ptr(), h.name.as_ptr())
        && std::ptr::eq(value.as_ptr(), h.value.as_ptr());
    (same && sep == b": " && crlf == b"\r\n").then_some(start..end)
}

/// The `Content-Length` of a parsed head (already validated: every copy has the same value).
fn declared_length(headers: &[Header<'_>]) -> Option<u64> {
    headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("content-length"))
        .and_then(|h| parse_content_length(h.value).ok())
}

fn put(out: &mut Vec<u8>, name: &str, value: &[u8]) {
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

fn is_token(s: &[u8]) -> bool {
    !s.is_empty()
        && s.iter()
            .all(|&b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~:".contains(&b))
}

/// `fmt::Write` into a byte vector.
struct Bytes<'a>(&'a mut Vec<u8>);

impl std::fmt::Write for Bytes<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

#[cfg(test)]
mod tests;
