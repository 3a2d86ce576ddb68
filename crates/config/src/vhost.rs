//! Checks on `[[server]]` sections across each other, and on `return` responses: what would
//! make a request's server or location ambiguous, or a canned response malformed.

use std::collections::HashMap;
use std::net::SocketAddr;

use toml::Spanned;

use super::{Config, ConfigError, Return, Source};

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

/// `field-vchar / SP / HTAB`: a CR or LF would end the field and start another (header
/// injection), other control bytes are invalid in a field value (RFC 9110 §5.5).
fn is_field_value(v: &str) -> bool {
    v.bytes().all(|b| b == b'\t' || (b >= 0x20 && b != 0x7f))
}

fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

pub(super) fn validate_return(r: &Return, src: &Source) -> Result<(), ConfigError> {
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
pub(super) fn validate_servers(cfg: &Config, src: &Source) -> Result<(), ConfigError> {
    for s in &cfg.server {
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
    for s in &cfg.server {
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
