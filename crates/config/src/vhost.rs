//! `[[server]]` sections, their locations and `return` responses, with the checks across
//! them: what would make a request's server or location ambiguous, or a canned response
//! malformed.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;
use toml::Spanned;

use crate::error::{ConfigError, Source};
use crate::fields::{is_field_value, is_token};
use crate::rewrite::{HeaderValue, PathMatch};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Server {
    pub listen: Vec<Spanned<SocketAddr>>,
    #[serde(default)]
    pub server_name: Vec<Spanned<String>>,
    /// The server for requests whose Host matches no server_name on its addresses
    /// (otherwise the first server listed for the address).
    #[serde(default = "not_default")]
    pub default: Spanned<bool>,
    #[serde(default)]
    pub location: Vec<Spanned<Location>>,
    /// Expect a PROXY protocol header (v1 or v2) from a load balancer in front, on every
    /// connection to this server's listen addresses.
    #[serde(default)]
    pub proxy_protocol: bool,
    /// TLS on every listen address of this server: its certificates, and client
    /// certificates to ask for (`crate::tls`).
    pub tls: Option<Spanned<crate::tls::TlsValue>>,
    /// Offer HTTP/2 by ALPN on this server's TLS (nginx's `http2 on|off`); unset: as
    /// `[http2] enable` says.
    pub http2: Option<bool>,
    /// HTTP/3: QUIC on UDP at each of this server's listen addresses (the same ports as its
    /// TCP listeners), which needs `tls`; its responses over TCP then carry `Alt-Svc` naming
    /// those ports (`crate::quic`). Servers on the same address agree about it.
    #[serde(default = "not_quic")]
    pub quic: Spanned<bool>,
    /// Accept connections for addresses that are not this host's, which TPROXY rules steer
    /// to the listen addresses (`IP_TRANSPARENT`; needs CAP_NET_ADMIN; `crate::tproxy`).
    #[serde(default)]
    pub transparent: bool,
    // Rewriting (`crate::rewrite`).
    /// `rewrite` rules run before a location is chosen.
    #[serde(default)]
    pub rewrite: Vec<Spanned<String>>,
    /// Headers added to responses of locations that set none themselves (nginx's inheritance).
    #[serde(default)]
    pub add_header: BTreeMap<Spanned<String>, HeaderValue>,
    /// `"404" = "/404.html"`, `"500 502 503 504" = "/50x.html"`: for locations that set none.
    #[serde(default)]
    pub error_page: BTreeMap<Spanned<String>, Spanned<String>>,
    /// Let a request an `error_page` re-served be re-served again by the error pages of the
    /// location it reached (nginx's `recursive_error_pages`; off: one redirect), for
    /// locations that do not set it. At most 10 redirects: then a plain 500.
    pub recursive_error_pages: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Location {
    pub path: Spanned<String>,
    /// Match the path exactly instead of as a prefix (nginx `location = /x`).
    #[serde(default)]
    pub exact: bool,
    #[serde(rename = "return")]
    pub ret: Option<Return>,
    /// Static files: the request path is appended to this directory (nginx `root`).
    pub root: Option<Spanned<PathBuf>>,
    /// Static files: the location's prefix is replaced by this directory (nginx `alias`).
    pub alias: Option<Spanned<PathBuf>>,
    #[serde(default = "default_index")]
    pub index: Vec<String>,
    /// Reverse proxy: an `[[upstream]]` name or `http://host:port`.
    pub proxy_pass: Option<Spanned<String>>,
    /// The `Host` sent upstream: `"pass"` (the client's, default), `"upstream"` (the server's
    /// address) or a literal value.
    pub proxy_host: Option<String>,
    /// Add `X-Forwarded-For`, `X-Real-IP`, `X-Forwarded-Proto` and `Forwarded`.
    #[serde(default = "yes")]
    pub forwarded_headers: bool,
    // Rewriting (`crate::rewrite`).
    /// `"REGEX REPLACEMENT [last|break|redirect|permanent]"`, in order.
    #[serde(default)]
    pub rewrite: Vec<Spanned<String>>,
    /// Headers added to responses: `"Name" = "value"` (2xx and 3xx responses) or
    /// `"Name" = { value = "...", always = true }` (every response).
    #[serde(default)]
    pub add_header: BTreeMap<Spanned<String>, HeaderValue>,
    /// Request headers sent upstream, replacing the client's (an empty value removes it).
    #[serde(default)]
    pub proxy_set_header: BTreeMap<Spanned<String>, String>,
    /// Response headers of the upstream not passed to the client.
    #[serde(default)]
    pub proxy_hide_header: Vec<Spanned<String>>,
    /// Upstream responses with a status that `error_page` lists are replaced by the error page.
    #[serde(default)]
    pub proxy_intercept_errors: bool,
    #[serde(default)]
    pub error_page: BTreeMap<Spanned<String>, Spanned<String>>,
    /// As the server's `recursive_error_pages`, for this location's error pages.
    pub recursive_error_pages: Option<bool>,
    /// `["$uri", "$uri/", "/index.html"]`: the first file that exists, else the last entry.
    pub try_files: Option<Spanned<Vec<Spanned<String>>>>,
    /// On-the-fly compression (`[http] gzip`, `brotli`, `zstd`) in this location; false: off.
    #[serde(default = "yes")]
    pub compress: bool,
    // Access control, limits and the cache: `crate::guard` and `crate::cache`.
    /// `"allow CIDR"` / `"deny CIDR"` / `"deny all"`, first match wins.
    #[serde(default)]
    pub access: Vec<Spanned<crate::guard::AccessRule>>,
    pub auth_basic: Option<Spanned<crate::guard::AuthBasic>>,
    pub auth_request: Option<Spanned<crate::guard::AuthRequest>>,
    pub limit_req: Option<Spanned<crate::guard::LimitReq>>,
    pub limit_conn: Option<Spanned<crate::guard::LimitConn>>,
    pub proxy_cache: Option<Spanned<crate::cache::ProxyCache>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Return {
    pub status: Spanned<u16>,
    #[serde(default)]
    pub body: String,
    pub content_type: Option<Spanned<String>>,
    /// For redirects: the Location header (nginx `return 301 URL`).
    pub location: Option<Spanned<String>>,
    #[serde(default)]
    pub headers: BTreeMap<Spanned<String>, String>,
}

fn not_default() -> Spanned<bool> {
    Spanned::new(0..0, false)
}
fn not_quic() -> Spanned<bool> {
    Spanned::new(0..0, false)
}
fn yes() -> bool {
    true
}
fn default_index() -> Vec<String> {
    vec!["index.html".into()]
}

/// Fields a `return`'s `headers` may not set: ringx writes the framing (`Content-Length`) and
/// the connection handling of every response itself, and a second copy would contradict it.
const RESERVED: [&str; 8] = [
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "upgrade",
];

pub(crate) fn validate_return(r: &Return, src: &Source) -> Result<(), ConfigError> {
    let st = *r.status.get_ref();
    // 1xx are interim responses: a `return` is the final one.
    if !(200..=599).contains(&st) {
        return Err(src.err(
            r.status.span(),
            format!("return status {st} must be between 200 and 599"),
        ));
    }
    if (300..400).contains(&st) && r.location.is_none() && r.body.is_empty() {
        return Err(src.err(
            r.status.span(),
            format!("return {st} is a redirect: give it a `location`"),
        ));
    }
    for (what, v) in [("location", &r.location), ("content_type", &r.content_type)] {
        if let Some(v) = v.as_ref().filter(|v| !is_field_value(v.get_ref())) {
            return Err(src.err(
                v.span(),
                format!(
                    "return {what} {:?} contains a control character (CR, LF, ...): it would \
                     end the header line and inject others",
                    v.get_ref()
                ),
            ));
        }
    }
    for (k, v) in &r.headers {
        let name = k.get_ref();
        if !is_token(name) || !is_field_value(v) {
            return Err(src.err(k.span(), format!("invalid header {name:?}: {v:?}")));
        }
        if RESERVED.iter().any(|n| name.eq_ignore_ascii_case(n)) {
            return Err(src.err(
                k.span(),
                format!(
                    "header {name:?} cannot be set in `headers`: ringx declares the length and \
                     the connection handling of a response itself"
                ),
            ));
        }
    }
    Ok(())
}

/// Line of a span, for messages that point at an earlier definition.
fn line_of(src: &Source, span: std::ops::Range<usize>) -> usize {
    src.err(span, "").line
}

/// Within a server, no two locations with the same path and exactness (the second could never
/// be chosen); on a listen address, no two servers claiming the same name or both `default`
/// (which one answers would depend on the order of the file).
pub(crate) fn validate_servers(
    servers: &[Spanned<Server>],
    src: &Source,
) -> Result<(), ConfigError> {
    for (i, s) in servers.iter().enumerate() {
        for a in &s.get_ref().listen {
            let other = servers[..i].iter().find(|o| {
                o.get_ref()
                    .listen
                    .iter()
                    .any(|b| b.get_ref() == a.get_ref())
                    && o.get_ref().proxy_protocol != s.get_ref().proxy_protocol
            });
            if other.is_some() {
                return Err(src.err(
                    a.span(),
                    format!("servers on {} disagree about proxy_protocol", a.get_ref()),
                ));
            }
        }
    }
    // A listen address is TLS or plain, whichever server names it.
    for (i, s) in servers.iter().enumerate() {
        for a in &s.get_ref().listen {
            let other = servers[..i].iter().find(|o| {
                o.get_ref()
                    .listen
                    .iter()
                    .any(|b| b.get_ref() == a.get_ref())
                    && o.get_ref().tls.is_some() != s.get_ref().tls.is_some()
            });
            if let Some(o) = other {
                let line = src.err(o.span(), "").line;
                let (theirs, ours) = if s.get_ref().tls.is_some() {
                    ("none", "has tls")
                } else {
                    ("tls", "has none")
                };
                return Err(src.err(
                    a.span(),
                    format!(
                        "servers on {} disagree about TLS: the server at line {line} has {theirs} \
                         and this one {ours}; a listen address is either TLS or plain (a site on \
                         ports 80 and 443 is two [[server]] blocks)",
                        a.get_ref()
                    ),
                ));
            }
        }
    }
    for s in servers {
        let sv = s.get_ref();
        if sv.listen.is_empty() {
            return Err(src.err(s.span(), "server has an empty listen list"));
        }
        if sv.location.is_empty() {
            return Err(src.err(s.span(), "server has no [[server.location]]"));
        }
        for l in &sv.location {
            validate_location(l, src)?;
        }
    }
    for s in servers {
        let mut seen: HashMap<(&str, bool), &Spanned<String>> = HashMap::new();
        for l in &s.get_ref().location {
            let l = l.get_ref();
            if let Some(first) = seen.insert((l.path.get_ref(), l.exact), &l.path) {
                return Err(src.err(
                    l.path.span(),
                    format!(
                        "duplicate location {:?}{} in this server: already defined at line {}",
                        l.path.get_ref(),
                        if l.exact { " (exact)" } else { "" },
                        line_of(src, first.span())
                    ),
                ));
            }
        }
    }
    let mut names: HashMap<(SocketAddr, String), &Spanned<String>> = HashMap::new();
    let mut defaults: HashMap<SocketAddr, &Spanned<bool>> = HashMap::new();
    for s in servers {
        let sv = s.get_ref();
        let mut addrs: Vec<SocketAddr> = sv.listen.iter().map(|a| *a.get_ref()).collect();
        addrs.sort();
        addrs.dedup();
        for a in addrs {
            for n in &sv.server_name {
                let key = (a, n.get_ref().to_ascii_lowercase());
                if let Some(first) = names.insert(key, n) {
                    return Err(src.err(
                        n.span(),
                        format!(
                            "server_name {:?} on {a} is already claimed by the server at line {}",
                            n.get_ref(),
                            line_of(src, first.span())
                        ),
                    ));
                }
            }
            if *sv.default.get_ref() {
                if let Some(first) = defaults.insert(a, &sv.default) {
                    return Err(src.err(
                        sv.default.span(),
                        format!(
                            "a second default server on {a}: the server at line {} is already \
                             its default",
                            line_of(src, first.span())
                        ),
                    ));
                }
            }
        }
    }
    Ok(())
}

fn validate_location(l: &Spanned<Location>, src: &Source) -> Result<(), ConfigError> {
    let loc = l.get_ref();
    PathMatch::parse(loc.path.get_ref(), loc.exact).map_err(|m| src.err(loc.path.span(), m))?;
    let actions = [
        loc.ret.is_some(),
        loc.root.is_some(),
        loc.alias.is_some(),
        loc.proxy_pass.is_some(),
    ];
    match actions.iter().filter(|&&x| x).count() {
        1 => {}
        // A location that only rewrites (what no rule matches gets 404).
        0 if !loc.rewrite.is_empty() => {}
        0 => return Err(src.err(
            l.span(),
            "location needs one of `return`, `root`, `alias` or `proxy_pass` (or `rewrite` rules)",
        )),
        _ => {
            return Err(src.err(
                l.span(),
                "location has more than one of `return`, `root`, `alias`, `proxy_pass`",
            ))
        }
    }
    if let Some(r) = &loc.ret {
        validate_return(r, src)?;
    }
    for dir in [&loc.root, &loc.alias].into_iter().flatten() {
        let p = dir.get_ref();
        if !p.is_absolute() {
            return Err(src.err(
                dir.span(),
                format!("{} must be an absolute path", p.display()),
            ));
        }
        match std::fs::metadata(p) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => return Err(src.err(dir.span(), format!("{} is not a directory", p.display()))),
            Err(e) => return Err(src.err(dir.span(), format!("{}: {e}", p.display()))),
        }
    }
    Ok(())
}
