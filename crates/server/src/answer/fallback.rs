//! `error_page` leading to a location that proxies (nginx's `error_page 502 = @fallback`,
//! or a URI routed to a `proxy_pass` location): the failed request is re-served there as an
//! internal redirect instead of getting a page written here. A location serving files
//! behind a guard (`error_page 403 /denied.html` with `location = /denied.html { deny all;
//! }`) goes the same way: its access phase runs on the request, then its page is written
//! (a refusal there gets the plain page for the refusal's status).
//!
//! nginx's rules, kept:
//! - a named location (`@name`) gets the request with its method, at its URI as routing
//!   left it (a `rewrite`, a `try_files` fallback, an earlier error page's URI);
//! - a URI target gets `GET` (a `HEAD` stays `HEAD`) of that URI, with the URI's own query
//!   (none if it has none);
//! - the client sees the original error's status unless the entry says `=` (the fallback's
//!   own status) or `=CODE`;
//! - one redirect per request (nginx's default, `recursive_error_pages off`): a fallback
//!   that fails itself is answered with the plain error page. `ringx check` refuses chains
//!   that lead back where they began (`route_build.rs`);
//! - with `recursive_error_pages on` in the location whose error page sent it, the request
//!   may be sent on by the error pages of the location it reached (a fallback's own failure
//!   or refusal, an error page's missing file), whose own flag decides about the next step;
//!   at most [`MAX_REDIRECTS`] redirects, the URI changes of routing included, then a plain
//!   500 and nginx's "rewrite or internal redirection cycle" line in the error log.
//!
//! Only a request without a body falls back this way: its body was streamed to the first
//! upstream and is not kept. One with a body gets the plain error page for the status.

use ringx_http::{Method, Request};

use crate::route::LocId;

/// Where a failed request is re-served.
#[derive(Clone)]
pub struct Fallback {
    /// The location.
    pub at: LocId,
    /// A URI target: the path and query the request now has (None: a named location, which
    /// keeps the request's own).
    pub uri: Option<(String, Option<String>)>,
    /// The status the client is told (None: the fallback's own, `=`).
    pub status: Option<u16>,
    /// The error being replaced (the plain page for it is sent if the fallback cannot
    /// start).
    pub error: u16,
    /// Header lines the error carries onto the fallback's response: a refusal's
    /// `WWW-Authenticate` (nginx keeps the challenge through the redirect).
    pub extra: String,
    /// A location serving files behind a guard: the page to write once the guard passes
    /// (None: the location proxies).
    pub page: Option<Box<crate::rewrite::headers::ErrTarget>>,
    /// The request's redirects by error pages so far, this one included.
    pub hops: u8,
    /// The error pages of the fallback location apply to its own failures (the location
    /// whose error page sent the request here has `recursive_error_pages`).
    pub open: bool,
    /// A named location reached by a request whose URI routing changed (a rewrite, a
    /// `try_files` fallback, an earlier error page's URI): `uri` is that URI (its path
    /// decoded, as routing holds it; sent escaped again, as any rewritten path), and the
    /// method stays, as nginx's named location keeps the request as it is now.
    pub named_at_uri: bool,
}

/// A request's URI as routing left it, where it differs from the one it came with: its
/// decoded path and its query.
pub type NewUri<'a> = Option<(&'a str, Option<&'a str>)>;

/// An `error_page` URI target as the request gets it: its path, and its query if any.
pub fn split_uri(uri: &str) -> (String, Option<String>) {
    match uri.split_once('?') {
        Some((p, a)) => (p.to_string(), (!a.is_empty()).then(|| a.to_string())),
        None => (uri.to_string(), None),
    }
}

/// Redirects by error pages one request may have (nginx's `NGX_HTTP_MAX_URI_CHANGES`); one
/// more is a cycle.
pub const MAX_REDIRECTS: u8 = 10;

/// The error line for a request that would be redirected once too often (to `uri`, a path
/// or an `@name`), in nginx's words.
pub fn log_cycle(uri: &str) {
    if uri.starts_with('@') {
        tracing::error!(
            "rewrite or internal redirection cycle while redirect to named location {uri:?}"
        );
    } else {
        tracing::error!(
            "rewrite or internal redirection cycle while internally redirecting to {uri:?}"
        );
    }
}

/// [`NewUri`] as [`Fallback::uri`] holds it.
pub fn owned(now: NewUri<'_>) -> Option<(String, Option<String>)> {
    now.map(|(path, args)| (path.to_string(), args.map(str::to_string)))
}

impl Fallback {
    /// The request as the fallback location gets it: `GET` for a URI target (HEAD kept).
    pub fn request<'h, 'b>(&self, req: &Request<'h, 'b>) -> Request<'h, 'b> {
        let mut r = *req;
        if self.uri.is_some() && !self.named_at_uri && r.method != Method::Head {
            r.method = Method::Get;
            r.method_str = "GET";
        }
        r
    }
}

/// Whether a request can be re-served by a proxying `error_page`: it has no body.
pub fn may_fall_back(req: &Request) -> bool {
    matches!(
        req.body,
        ringx_http::BodyKind::None | ringx_http::BodyKind::Length(0)
    )
}

/// A copy of a request's head, kept while it is proxied from a location whose error pages
/// can send it to another proxying location; parsed again (as it was) if they do.
pub fn save_head(req: &Request) -> Vec<u8> {
    let mut h = Vec::with_capacity(256);
    h.extend_from_slice(req.method_str.as_bytes());
    h.push(b' ');
    h.extend_from_slice(req.target.as_bytes());
    h.extend_from_slice(match req.version {
        ringx_http::Version::Http10 => b" HTTP/1.0\r\n",
        _ => b" HTTP/1.1\r\n",
    });
    for f in req.headers {
        h.extend_from_slice(f.name.as_bytes());
        h.extend_from_slice(b": ");
        h.extend_from_slice(f.value);
        h.extend_from_slice(b"\r\n");
    }
    h.extend_from_slice(b"\r\n");
    h
}

/// The header storage a saved head is parsed with.
pub const MAX_SAVED_HEADERS: usize = 128;

/// Parses a head kept by [`save_head`] (it parsed before, so it parses again). Through
/// `parse_request_uninit`, the parser the roles use: a second parser entry called from this
/// crate changed how the HTTP/1 hot path's parse was inlined (+~50 instructions a request).
pub fn parse_saved<'h, 'b>(
    head: &'b [u8],
    storage: &'h mut [std::mem::MaybeUninit<httparse::Header<'b>>],
    limits: &ringx_http::Limits,
) -> Option<Request<'h, 'b>> {
    let limits = ringx_http::Limits {
        max_head: head.len().max(limits.max_head),
        max_headers: storage.len(),
        ..*limits
    };
    match ringx_http::parse_request_uninit(head, storage, &limits) {
        Ok(ringx_http::Parsed::Complete(r)) => Some(r),
        _ => None,
    }
}
