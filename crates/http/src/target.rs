//! Request-target forms (RFC 9112 §3.2).

use crate::error::RequestError;
use crate::host::is_valid_host;
use crate::method::Method;

/// The pieces of a request-target that [`Request`](crate::Request) exposes.
#[derive(Debug)]
pub(crate) struct Target<'b> {
    pub path: &'b str,
    pub query: Option<&'b str>,
    /// The authority from absolute-form or authority-form (without userinfo).
    pub authority: Option<&'b str>,
}

/// Classifies and validates `target`:
///
/// * `CONNECT` requires authority-form (`host:port`) and nothing else uses it;
/// * `*` (asterisk-form) is only allowed with `OPTIONS`;
/// * origin-form starts with `/`;
/// * otherwise it must be absolute-form with an `http` or `https` scheme, an
///   authority without userinfo, and an optional path and query.
///
/// Fragments (`#`), non-ASCII bytes and controls are rejected in every form.
#[inline(always)]
pub(crate) fn parse_target(method: Method, target: &str) -> Result<Target<'_>, RequestError> {
    if !target.bytes().all(|b| b.is_ascii_graphic() && b != b'#') {
        return Err(RequestError::bad("invalid character in request-target"));
    }
    if method == Method::Connect {
        return authority_form(target);
    }
    if target == "*" {
        if method != Method::Options {
            return Err(RequestError::bad(
                "asterisk-form is only allowed with OPTIONS",
            ));
        }
        return Ok(Target {
            path: target,
            query: None,
            authority: None,
        });
    }
    if target.starts_with('/') {
        let (path, query) = split_query(target);
        return Ok(Target {
            path,
            query,
            authority: None,
        });
    }
    absolute_form(target)
}

#[inline(always)]
fn split_query(s: &str) -> (&str, Option<&str>) {
    // Every request's target goes through here.
    match crate::bytes::find_byte(b'?', s.as_bytes()) {
        Some(i) => (&s[..i], Some(&s[i + 1..])),
        None => (s, None),
    }
}

fn authority_form(target: &str) -> Result<Target<'_>, RequestError> {
    if target.contains('@') {
        return Err(RequestError::bad("userinfo in request-target"));
    }
    // authority-form = uri-host ":" port, and CONNECT requires the port.
    let has_port = crate::host::split_port(target.as_bytes())
        .1
        .is_some_and(|p| !p.is_empty());
    if !has_port || !is_valid_host(target.as_bytes()) {
        return Err(RequestError::bad("invalid authority-form request-target"));
    }
    Ok(Target {
        path: target,
        query: None,
        authority: Some(target),
    })
}

fn absolute_form(target: &str) -> Result<Target<'_>, RequestError> {
    let Some((scheme, rest)) = target.split_once(':') else {
        return Err(RequestError::bad("invalid request-target"));
    };
    if !is_scheme(scheme) {
        return Err(RequestError::bad("invalid request-target"));
    }
    if !scheme.eq_ignore_ascii_case("http") && !scheme.eq_ignore_ascii_case("https") {
        return Err(RequestError::bad("unsupported URI scheme"));
    }
    let Some(rest) = rest.strip_prefix("//") else {
        return Err(RequestError::bad("absolute-form without authority"));
    };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, path_and_query) = rest.split_at(authority_end);
    if authority.contains('@') {
        return Err(RequestError::bad("userinfo in request-target"));
    }
    if !is_valid_host(authority.as_bytes()) {
        return Err(RequestError::bad("invalid authority in request-target"));
    }
    let (path, query) = split_query(path_and_query);
    let path = if path.is_empty() { "/" } else { path };
    Ok(Target {
        path,
        query,
        authority: Some(authority),
    })
}

/// `scheme = ALPHA *( ALPHA / DIGIT / "+" / "-" / "." )`
fn is_scheme(s: &str) -> bool {
    let mut bytes = s.bytes();
    bytes.next().is_some_and(|b| b.is_ascii_alphabetic())
        && bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'))
}
