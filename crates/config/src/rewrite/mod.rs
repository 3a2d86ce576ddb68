//! Rewriting, in nginx's names and order: location paths with nginx's modifiers (`= /x`,
//! `^~ /x`, `~ regex`, `~* regex`, `@name`), `rewrite` rules, `add_header`,
//! `proxy_set_header`, `proxy_hide_header`, `error_page` and `try_files`. Every value with
//! variables is parsed into a [`Template`] and every regex compiled here, at load, with size
//! limits, so `ringx check` reports a bad one at its `FILE:LINE:COL`.
//!
//! ```toml
//! [[server]]
//! rewrite = ["^/old/(.*)$ /new/$1 permanent"]        # before a location is chosen
//! add_header = { "X-Frame-Options" = "DENY" }        # locations without add_header inherit it
//! error_page = { "404" = "/404.html", "500 502 503 504" = "/50x.html" }
//!
//!   [[server.location]]
//!   path = "~ ^/api/v[0-9]+/"                          # regex (~* caseless); captures: $1...
//!   proxy_pass = "http://app/v2/"                      # URI part: the prefix replaced
//!   proxy_set_header = { "X-Request-Id" = "$request_id", "Accept-Encoding" = "" }
//!   proxy_hide_header = ["X-Powered-By"]
//!   add_header = { "Cache-Control" = { value = "no-store", always = true } }
//!
//!   [[server.location]]
//!   path = "/"
//!   root = "/srv/app"
//!   try_files = ["$uri", "$uri/", "/index.html"]      # the last: a URI, @name or =CODE
//! ```

use std::collections::BTreeMap;

use serde::Deserialize;
use toml::Spanned;

use crate::error::{ConfigError, Source};
use crate::template::{Template, Var};

pub mod check;

/// The compiled size a regex may reach (the `regex` crate's NFA program). Matching is linear in
/// the input whatever the pattern; this bounds the memory and the time a pattern such as
/// `(a{1000}){1000}` would take to build.
pub const REGEX_SIZE_LIMIT: usize = 1 << 20;
/// The lazy DFA's cache per regex.
pub const REGEX_DFA_LIMIT: usize = 2 << 20;
/// Rewrite rules per server or location.
pub const MAX_REWRITES: usize = 64;

/// How a location's `path` matches, nginx's modifiers parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathMatch {
    /// `/x`: the longest matching prefix, unless a regex location matches too.
    Prefix(String),
    /// `^~ /x`: a prefix that, when it is the longest, stops the regex search.
    PrefixStop(String),
    /// `= /x` (or `exact = true`).
    Exact(String),
    /// `~ re` / `~* re` (caseless): checked in the order written, the first one wins.
    Regex { pattern: String, caseless: bool },
    /// `@name`: never matched by a request, only reached by `try_files` or `error_page`.
    Named(String),
}

impl PathMatch {
    /// Parses a location's `path`; `exact`: the location's `exact = true`.
    pub fn parse(path: &str, exact: bool) -> Result<PathMatch, String> {
        let modifier = |m: &str| path.strip_prefix(m).map(str::trim_start);
        let pm = if let Some(re) = modifier("~*") {
            PathMatch::Regex {
                pattern: re.to_string(),
                caseless: true,
            }
        } else if let Some(re) = modifier("~") {
            PathMatch::Regex {
                pattern: re.to_string(),
                caseless: false,
            }
        } else if let Some(p) = modifier("^~") {
            PathMatch::PrefixStop(p.to_string())
        } else if let Some(p) = modifier("=") {
            PathMatch::Exact(p.to_string())
        } else if let Some(n) = path.strip_prefix('@') {
            if n.is_empty() || n.contains(char::is_whitespace) {
                return Err(format!("named location {path:?} needs a name after '@'"));
            }
            PathMatch::Named(path.to_string())
        } else {
            PathMatch::Prefix(path.to_string())
        };
        match &pm {
            PathMatch::Regex { pattern, caseless } => {
                if exact {
                    return Err("`exact` does not apply to a regex location".into());
                }
                compile_regex(pattern, *caseless)?;
            }
            PathMatch::Named(_) if exact => {
                return Err("`exact` does not apply to a named location".into())
            }
            PathMatch::Prefix(p) | PathMatch::PrefixStop(p) | PathMatch::Exact(p) => {
                if !p.starts_with('/') {
                    return Err(format!(
                        "location path {path:?} must start with '/' (or be \"~ regex\", \
                         \"~* regex\", \"^~ /prefix\", \"= /exact\" or \"@name\")"
                    ));
                }
                if exact && matches!(pm, PathMatch::PrefixStop(_)) {
                    return Err("`exact` and `^~` contradict each other".into());
                }
            }
            PathMatch::Named(_) => {}
        }
        Ok(match pm {
            PathMatch::Prefix(p) if exact => PathMatch::Exact(p),
            pm => pm,
        })
    }
}

/// Compiles a regex with the size limits; the message says what is wrong with it.
pub fn compile_regex(pattern: &str, caseless: bool) -> Result<regex::Regex, String> {
    regex::RegexBuilder::new(pattern)
        .case_insensitive(caseless)
        .size_limit(REGEX_SIZE_LIMIT)
        .dfa_size_limit(REGEX_DFA_LIMIT)
        .nest_limit(64)
        .build()
        .map_err(|e| match e {
            regex::Error::CompiledTooBig(limit) => format!(
                "regex {pattern:?} is too large once compiled (over {limit} bytes): nested or \
                 large counted repetitions multiply; simplify it"
            ),
            regex::Error::Syntax(s) => format!("invalid regex {pattern:?}: {s}"),
            e => format!("invalid regex {pattern:?}: {e}"),
        })
}

/// What a `rewrite` does after replacing the URI (nginx's flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flag {
    /// No flag: the next rules run on the new URI, then the location is searched again.
    Continue,
    /// `last`: stop rewriting here and search the location again for the new URI.
    Last,
    /// `break`: stop rewriting and serve the new URI in this location.
    Break,
    /// `redirect`: 302 to the new URI (also without a flag when it starts with a scheme).
    Redirect,
    /// `permanent`: 301.
    Permanent,
}

/// A parsed `rewrite = ["REGEX REPLACEMENT [FLAG]"]` entry.
#[derive(Debug, Clone)]
pub struct RewriteRule {
    pub regex: regex::Regex,
    pub replacement: Template,
    pub flag: Flag,
}

impl RewriteRule {
    pub fn parse(s: &str) -> Result<RewriteRule, String> {
        let words: Vec<&str> = s.split_whitespace().collect();
        let (re, repl, flag) = match words.as_slice() {
            [re, repl] => (*re, *repl, Flag::Continue),
            [re, repl, f] => {
                let flag = match *f {
                    "last" => Flag::Last,
                    "break" => Flag::Break,
                    "redirect" => Flag::Redirect,
                    "permanent" => Flag::Permanent,
                    other => {
                        return Err(format!(
                            "rewrite {s:?}: unknown flag {other:?} (last, break, redirect or \
                             permanent)"
                        ))
                    }
                };
                (*re, *repl, flag)
            }
            _ => {
                return Err(format!(
                    "rewrite {s:?} must be \"REGEX REPLACEMENT [last|break|redirect|permanent]\" \
                     (a space inside the regex is written \\s or \\x20)"
                ))
            }
        };
        let regex = compile_regex(re, false)?;
        let replacement = Template::parse(repl)?;
        let groups = regex.captures_len() - 1;
        if let Some(n) = replacement.max_capture().filter(|&n| n as usize > groups) {
            return Err(format!(
                "rewrite {s:?}: ${n} refers to a capture the regex does not have ({groups} \
                 group(s))"
            ));
        }
        if !(repl.starts_with('/') || is_redirect_target(repl) || repl.starts_with('$')) {
            return Err(format!(
                "rewrite {s:?}: the replacement must be a path starting with '/' or a URL \
                 (http://, https://, $scheme://)"
            ));
        }
        Ok(RewriteRule {
            regex,
            replacement,
            flag,
        })
    }
}

/// A replacement that makes a rewrite a redirect whatever its flag (nginx's rule).
pub fn is_redirect_target(repl: &str) -> bool {
    repl.starts_with("http://") || repl.starts_with("https://") || repl.starts_with("$scheme")
}

/// An `add_header` value: `"text"` or `{ value = "text", always = true }`.
#[derive(Debug, Clone, Deserialize)]
#[serde(
    untagged,
    expecting = "a header value: a string, or { value = \"...\", always = true }"
)]
pub enum HeaderValue {
    Plain(String),
    Full {
        value: String,
        #[serde(default)]
        always: bool,
    },
}

impl HeaderValue {
    pub fn value(&self) -> &str {
        match self {
            HeaderValue::Plain(v) | HeaderValue::Full { value: v, .. } => v,
        }
    }

    /// Added to every response, errors included (otherwise only to 2xx and 3xx ones, as nginx).
    pub fn always(&self) -> bool {
        matches!(self, HeaderValue::Full { always: true, .. })
    }
}

/// What an `error_page` status leads to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorTarget {
    /// `=CODE`: answer with this status instead of the error's (`=` alone: nginx's "the
    /// status of what the URI answers"; here the target's own status, 200 for a file).
    pub status: Option<Option<u16>>,
    /// A path (`/50x.html`), a named location (`@fallback`) or a URL (a 302 redirect).
    pub uri: String,
}

/// Parses `error_page` entries: keys are statuses separated by spaces, values `[=CODE] URI`.
pub fn parse_error_pages(
    pages: &BTreeMap<Spanned<String>, Spanned<String>>,
    src: &Source,
) -> Result<Vec<(u16, ErrorTarget)>, ConfigError> {
    let mut out: Vec<(u16, ErrorTarget)> = Vec::new();
    for (codes, target) in pages {
        let t = target.get_ref().trim();
        let (status, uri) = match t.strip_prefix('=') {
            Some(rest) => {
                let (code, uri) = rest.split_once(char::is_whitespace).unwrap_or(("", rest));
                let code = match code {
                    "" => None,
                    c => Some(
                        c.parse::<u16>()
                            .ok()
                            .filter(|c| (200..=599).contains(c))
                            .ok_or_else(|| {
                                src.err(
                                    target.span(),
                                    format!("error_page {t:?}: {c:?} is not a status (200-599)"),
                                )
                            })?,
                    ),
                };
                (Some(code), uri.trim())
            }
            None => (None, t),
        };
        if !(uri.starts_with('/') || uri.starts_with('@') || is_redirect_target(uri)) {
            return Err(src.err(
                target.span(),
                format!(
                    "error_page {t:?}: the target must be a path (/50x.html), a named location \
                     (@name) or a URL"
                ),
            ));
        }
        if uri.contains('$') {
            return Err(src.err(
                target.span(),
                format!("error_page {t:?}: variables are not supported in error_page targets"),
            ));
        }
        if uri.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(src.err(
                target.span(),
                format!(
                    "error_page {t:?}: the target has a space or a control character; \
                     percent-encode it (%20)"
                ),
            ));
        }
        for code in codes.get_ref().split_whitespace() {
            let c = code
                .parse::<u16>()
                .ok()
                .filter(|c| (300..=599).contains(c))
                .ok_or_else(|| {
                    src.err(
                        codes.span(),
                        format!("error_page: {code:?} is not an error status (300-599)"),
                    )
                })?;
            if out.iter().any(|(x, _)| *x == c) {
                return Err(src.err(
                    codes.span(),
                    format!("error_page: status {c} is listed twice"),
                ));
            }
            out.push((
                c,
                ErrorTarget {
                    status,
                    uri: uri.to_string(),
                },
            ));
        }
        if codes.get_ref().split_whitespace().next().is_none() {
            return Err(src.err(codes.span(), "error_page: no status listed"));
        }
    }
    Ok(out)
}

/// A parsed `try_files`: the candidates (templates) and the fallback.
#[derive(Debug, Clone)]
pub struct TryFiles {
    pub candidates: Vec<Template>,
    pub fallback: Fallback,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fallback {
    /// An internal redirect to this URI (a path with variables, or a named location).
    Uri(Template),
    Named(String),
    /// `=404`.
    Status(u16),
}

pub fn parse_try_files(
    list: &Spanned<Vec<Spanned<String>>>,
    src: &Source,
) -> Result<TryFiles, ConfigError> {
    let items = list.get_ref();
    let Some((last, rest)) = items.split_last().filter(|(_, r)| !r.is_empty()) else {
        return Err(src.err(
            list.span(),
            "try_files needs at least two entries: files to try, then a URI, @name or =CODE",
        ));
    };
    let mut candidates = Vec::new();
    for c in rest {
        let t = Template::parse(c.get_ref()).map_err(|m| src.err(c.span(), m))?;
        candidates.push(t);
    }
    let l = last.get_ref();
    let fallback = if let Some(code) = l.strip_prefix('=') {
        Fallback::Status(
            code.parse::<u16>()
                .ok()
                .filter(|c| (200..=599).contains(c))
                .ok_or_else(|| src.err(last.span(), format!("try_files {l:?}: not a status")))?,
        )
    } else if l.starts_with('@') {
        Fallback::Named(l.clone())
    } else if l.starts_with('/') || l.starts_with('$') {
        Fallback::Uri(Template::parse(l).map_err(|m| src.err(last.span(), m))?)
    } else {
        return Err(src.err(
            last.span(),
            format!("try_files: the last entry {l:?} must be a URI (/index.html), @name or =CODE"),
        ));
    };
    Ok(TryFiles {
        candidates,
        fallback,
    })
}

/// Checks a header name and a templated value (`add_header`, `proxy_set_header`).
pub fn check_header(
    what: &str,
    name: &Spanned<String>,
    value: &str,
    captures: Option<usize>,
    src: &Source,
) -> Result<Template, ConfigError> {
    let n = name.get_ref();
    if !crate::fields::is_token(n) {
        return Err(src.err(name.span(), format!("{what}: {n:?} is not a header name")));
    }
    if !crate::fields::is_field_value(value) {
        return Err(src.err(
            name.span(),
            format!("{what} {n:?}: the value contains a control character (CR, LF, ...)"),
        ));
    }
    let framing = n.eq_ignore_ascii_case("content-length")
        || n.eq_ignore_ascii_case("transfer-encoding")
        // Sent to an upstream, these are ringx's to manage (and ignored, so that nginx's
        // WebSocket and keep-alive idioms load); in a response they would contradict ringx.
        || (what == "add_header" && is_connection_field(n));
    if framing {
        return Err(src.err(
            name.span(),
            format!(
                "{what} cannot set {n:?}: ringx declares the framing and the connection itself"
            ),
        ));
    }
    let t =
        Template::parse(value).map_err(|m| src.err(name.span(), format!("{what} {n:?}: {m}")))?;
    check_captures(&t, captures, what, name.span(), src)?;
    Ok(t)
}

/// Fields about the connection rather than the message (RFC 9110 §7.6.1).
pub fn is_connection_field(n: &str) -> bool {
    [
        "connection",
        "keep-alive",
        "proxy-connection",
        "te",
        "trailer",
        "upgrade",
    ]
    .iter()
    .any(|f| n.eq_ignore_ascii_case(f))
}

/// A template may name `$N` only where a regex gave captures: `captures` is how many the
/// location's regex has (None: a location without one, and without rewrite rules).
pub fn check_captures(
    t: &Template,
    captures: Option<usize>,
    what: &str,
    span: std::ops::Range<usize>,
    src: &Source,
) -> Result<(), ConfigError> {
    let Some(n) = t.max_capture() else {
        return Ok(());
    };
    match captures {
        Some(c) if n as usize <= c => Ok(()),
        Some(c) => Err(src.err(
            span,
            format!("{what}: ${n} refers to a capture this location's regex does not have ({c} group(s))"),
        )),
        None => Err(src.err(
            span,
            format!("{what}: ${n} is a regex capture, but this location matches no regex (use a \"~ regex\" path or a rewrite)"),
        )),
    }
}

/// Whether a template uses a variable that `f` picks.
pub fn uses(t: &Template, f: impl Fn(&Var) -> bool) -> bool {
    t.vars().any(f)
}

#[cfg(test)]
mod tests;
