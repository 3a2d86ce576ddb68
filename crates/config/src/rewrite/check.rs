//! The checks of a server's and a location's rewriting directives, each error at the
//! `FILE:LINE:COL` of the value at fault.

use std::collections::BTreeMap;

use toml::Spanned;

use super::{
    check_captures, check_header, parse_error_pages, parse_try_files, Fallback, HeaderValue,
    PathMatch, RewriteRule, MAX_REWRITES,
};
use crate::error::{ConfigError, Source};
use crate::template::Template;
use crate::vhost::{Location, Server};

/// Rewrite rules: each parses, and there are not too many.
pub fn check_rules(
    rules: &[Spanned<String>],
    src: &Source,
) -> Result<Vec<RewriteRule>, ConfigError> {
    if rules.len() > MAX_REWRITES {
        return Err(src.err(
            rules[MAX_REWRITES].span(),
            format!("more than {MAX_REWRITES} rewrite rules in one block"),
        ));
    }
    rules
        .iter()
        .map(|r| RewriteRule::parse(r.get_ref()).map_err(|m| src.err(r.span(), m)))
        .collect()
}

/// `add_header` entries.
pub fn check_add_header(
    headers: &BTreeMap<Spanned<String>, HeaderValue>,
    captures: Option<usize>,
    src: &Source,
) -> Result<(), ConfigError> {
    for (name, v) in headers {
        check_header("add_header", name, v.value(), captures, src)?;
    }
    Ok(())
}

/// Every server's and location's rewriting directives.
pub fn check_servers(servers: &[Spanned<Server>], src: &Source) -> Result<(), ConfigError> {
    for s in servers {
        let sv = s.get_ref();
        check_server(sv, src)?;
        for l in &sv.location {
            let path = PathMatch::parse(l.get_ref().path.get_ref(), l.get_ref().exact)
                .map_err(|m| src.err(l.get_ref().path.span(), m))?;
            check_location(l, &path, sv, src)?;
        }
    }
    Ok(())
}

/// The server-level directives.
pub fn check_server(s: &Server, src: &Source) -> Result<(), ConfigError> {
    check_rules(&s.rewrite, src)?;
    // A server's headers are added after its rewrites are done: no captures.
    check_add_header(&s.add_header, None, src)?;
    parse_error_pages(&s.error_page, src)?;
    for target in s.error_page.values() {
        check_named_target(target.get_ref(), s, target.span(), src)?;
    }
    Ok(())
}

/// The location-level directives; `path` is the location's parsed path.
pub fn check_location(
    l: &Spanned<Location>,
    path: &PathMatch,
    server: &Server,
    src: &Source,
) -> Result<(), ConfigError> {
    let loc = l.get_ref();
    let rules = check_rules(&loc.rewrite, src)?;
    // Captures a template of this location may name: its own regex's, or a rewrite's.
    let captures = match path {
        PathMatch::Regex { pattern, caseless } => Some(
            super::compile_regex(pattern, *caseless)
                .map_err(|m| src.err(loc.path.span(), m))?
                .captures_len()
                - 1,
        ),
        _ => None,
    };
    let captures = match (
        captures,
        rules.iter().map(|r| r.regex.captures_len() - 1).max(),
    ) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    };
    check_add_header(&loc.add_header, captures, src)?;
    for (name, v) in &loc.proxy_set_header {
        check_header("proxy_set_header", name, v, captures, src)?;
    }
    for h in &loc.proxy_hide_header {
        if !crate::fields::is_token(h.get_ref()) {
            return Err(src.err(
                h.span(),
                format!("proxy_hide_header: {:?} is not a header name", h.get_ref()),
            ));
        }
    }
    let has_proxy = loc.proxy_pass.is_some();
    if (!loc.proxy_set_header.is_empty() || !loc.proxy_hide_header.is_empty()) && !has_proxy {
        return Err(src.err(
            l.span(),
            "proxy_set_header and proxy_hide_header apply to a proxy_pass location",
        ));
    }
    if loc.proxy_intercept_errors && !has_proxy {
        return Err(src.err(
            l.span(),
            "proxy_intercept_errors applies to a proxy_pass location",
        ));
    }
    let grpc = loc
        .proxy_pass
        .as_ref()
        .is_some_and(|p| crate::upstream::is_grpc(p.get_ref()));
    if loc.proxy_intercept_errors && grpc {
        return Err(src.err(
            l.span(),
            "proxy_intercept_errors does not apply to grpc://: a failed call ends with a gRPC \
             status, not an error page",
        ));
    }
    if let Some(r) = &loc.ret {
        for (what, v) in [
            (
                "return location",
                r.location.as_ref().map(|v| (v.get_ref(), v.span())),
            ),
            ("return body", Some((&r.body, r.status.span()))),
        ] {
            if let Some((text, span)) = v {
                let t = Template::parse(text)
                    .map_err(|m| src.err(span.clone(), format!("{what}: {m}")))?;
                check_captures(&t, captures, what, span, src)?;
            }
        }
    }
    if let Some(p) = &loc.proxy_pass {
        let (_, uri) = crate::upstream::split_uri(p.get_ref());
        if uri.is_some() && matches!(path, PathMatch::Regex { .. } | PathMatch::Named(_)) {
            return Err(src.err(
                p.span(),
                "proxy_pass cannot have a URI part in a location given by a regex or a name \
                 (nginx's rule: what would the prefix be?); rewrite the path with `rewrite ... \
                 break` instead",
            ));
        }
    }
    if loc.alias.is_some() && matches!(path, PathMatch::Regex { .. }) {
        return Err(src.err(
            l.span(),
            "alias in a regex location is not supported: use root (the whole path is appended)",
        ));
    }
    parse_error_pages(&loc.error_page, src)?;
    for target in loc.error_page.values() {
        check_named_target(target.get_ref(), server, target.span(), src)?;
    }
    if let Some(tf) = &loc.try_files {
        if loc.root.is_none() && loc.alias.is_none() {
            return Err(src.err(
                tf.span(),
                "try_files looks for files under the location's directory: give it `root` or `alias`",
            ));
        }
        let parsed = parse_try_files(tf, src)?;
        for (t, item) in parsed.candidates.iter().zip(tf.get_ref()) {
            check_captures(t, captures, "try_files", item.span(), src)?;
        }
        if let Fallback::Named(n) = &parsed.fallback {
            check_named_target(n, server, tf.span(), src)?;
        }
    }
    Ok(())
}

/// A `@name` target names a named location of the server.
fn check_named_target(
    target: &str,
    server: &Server,
    span: std::ops::Range<usize>,
    src: &Source,
) -> Result<(), ConfigError> {
    let name = target
        .trim_start_matches('=')
        .split_whitespace()
        .last()
        .unwrap_or("");
    if !name.starts_with('@') {
        return Ok(());
    }
    if server
        .location
        .iter()
        .any(|l| l.get_ref().path.get_ref() == name)
    {
        return Ok(());
    }
    Err(src.err(
        span,
        format!("{name:?} names no location of this server (add one with path = \"{name}\")"),
    ))
}
