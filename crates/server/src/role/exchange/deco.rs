//! What a location does to a proxied response beyond relaying it: headers added
//! (`add_header`, expanded when the request was routed), hidden (`proxy_hide_header`),
//! compression, and upstream errors replaced by error pages (`proxy_intercept_errors`).

use std::sync::Arc;

use ringx_http::upstream::{ResponseBody, ResponseHead};

use crate::compress::relay::Relay;
use crate::compress::{status_compressible, Accept, Codec, Policy};
use crate::rewrite::{add_header_applies, ErrorPages, ProxyEdit};

/// A proxied response's decoration (None on the exchange: the location has none of it).
#[derive(Default)]
pub struct Deco {
    /// `add_header` lines for 2xx/3xx responses, and for every response (`always`).
    pub add_ok: String,
    pub add_always: String,
    pub edit: Option<Arc<ProxyEdit>>,
    /// The compression settings and what the client accepts (None: no compression here).
    pub compress: Option<(Arc<Policy>, Accept)>,
    /// Error pages that replace upstream errors (with `proxy_intercept_errors`).
    pub intercept: Option<Arc<ErrorPages>>,
    /// The body being compressed.
    pub relay: Option<Relay>,
    /// The status the client is told instead of the upstream's: a request re-served here by
    /// an `error_page` without `=` (the original error) or with `=CODE`.
    pub status_as: Option<u16>,
}

impl Deco {
    /// Whether this upstream status is replaced by an error page.
    pub fn intercepts(&self, status: u16) -> bool {
        status >= 300
            && self
                .intercept
                .as_ref()
                .is_some_and(|p| p.get(status).is_some())
    }

    /// The `add_header` lines a response with `status` gets.
    pub fn added(&self, status: u16) -> std::borrow::Cow<'_, str> {
        if !add_header_applies(status) || self.add_ok.is_empty() {
            return std::borrow::Cow::Borrowed(&self.add_always);
        }
        if self.add_always.is_empty() {
            return std::borrow::Cow::Borrowed(&self.add_ok);
        }
        std::borrow::Cow::Owned(format!("{}{}", self.add_ok, self.add_always))
    }

    pub fn hide(&self) -> &[String] {
        self.edit.as_ref().map_or(&[], |e| &e.hide[..])
    }

    /// Whether to compress this response, and whether it varies with `Accept-Encoding`:
    /// a status that qualifies, a body, no coding already, no `Cache-Control: no-transform`,
    /// a type and length the chosen coding takes.
    pub fn decide(&self, h: &ResponseHead<'_, '_>) -> (Option<&Codec>, bool) {
        let Some((policy, accept)) = &self.compress else {
            return (None, false);
        };
        let field = |name: &str| {
            h.headers
                .iter()
                .find(|f| f.name.eq_ignore_ascii_case(name))
                .map(|f| f.value)
        };
        let Some(ctype) = field("content-type").and_then(|v| std::str::from_utf8(v).ok()) else {
            return (None, false);
        };
        if !status_compressible(h.status) || !policy.varies(ctype) {
            return (None, false);
        }
        let encoded = h.headers.iter().any(|f| {
            f.name.eq_ignore_ascii_case("content-encoding")
                && !f.value.trim_ascii().eq_ignore_ascii_case(b"identity")
        });
        let no_transform = h.headers.iter().any(|f| {
            f.name.eq_ignore_ascii_case("cache-control")
                && ringx_http::upstream::list_has(f.value, b"no-transform")
        });
        if encoded || no_transform {
            return (None, false);
        }
        let len = match h.body {
            ResponseBody::Length(n) => Some(n),
            ResponseBody::None => return (None, true),
            _ => None,
        };
        (policy.choose(accept, ctype, len), true)
    }
}
