//! The full route of a request in a server that rewrites: the server's `rewrite` rules, the
//! location search, the location's rules (`last` searches again, `break` stays), `try_files`
//! and its fallback (an internal redirect), with nginx's limit of 10 changes of the URI
//! before a 500.

use std::borrow::Cow;
use std::cell::Cell;

use ringx_config::rewrite::{is_redirect_target, Flag, RewriteRule};
use ringx_config::template::Part;
use ringx_http::Request;

use super::locate::locate;
use super::vars::{escape_args, escape_path, Caps, ConnInfo, Vars};
use super::{FallbackC, TryFilesC};
use crate::route::{Action, LocId, Routes, VServer};

/// nginx's `NGX_HTTP_MAX_URI_CHANGES`.
const MAX_URI_CHANGES: usize = 10;

/// What the full route found beyond the location.
#[derive(Default)]
pub struct RouteExt {
    /// The query string now (None: none).
    pub args: Option<String>,
    pub caps: Option<Caps>,
    /// The path or the query differs from the request's.
    pub changed: bool,
    /// The final location rewrote the path with `break`: a proxy sends it as it is now.
    pub broke: bool,
    /// A response decided while routing.
    pub early: Option<Early>,
    /// A rewrite or an internal redirect (a `try_files` fallback, an error page's URI)
    /// changed the URI; a file `try_files` found does not count.
    pub moved: bool,
    /// The URI before `try_files` took a file it found (None: it took none, or the URI).
    pub found_from: Option<String>,
    /// Changes of the URI while routing (a rewrite that searched the locations again, a
    /// `try_files` fallback): nginx counts them with the redirects of error pages toward one
    /// limit (`answer::fallback::MAX_REDIRECTS`), so a page's redirects start from here.
    pub changes: u8,
}

impl RouteExt {
    /// The URI a request routed to `path` is at, where a rewrite or an internal redirect
    /// changed it (None: the one it came with): its decoded path, as before a file
    /// `try_files` found (nginx's access phase runs before `try_files`), and its query. A
    /// named location an error page sends it to gets this URI.
    pub fn new_uri<'a>(&'a self, path: &'a str) -> crate::answer::fallback::NewUri<'a> {
        self.moved.then(|| {
            (
                self.found_from.as_deref().unwrap_or(path),
                self.args.as_deref(),
            )
        })
    }
}

/// A response decided while routing.
pub enum Early {
    Redirect {
        status: u16,
        location: String,
    },
    /// An error: 404 (a rewrite-only location no rule matched), 500 (a redirect cycle),
    /// 400 (a rewrite climbed above the root), `try_files =CODE`.
    Status(u16),
    /// An ACME http-01 request (`/.well-known/acme-challenge/TOKEN`), answered before any
    /// location: the key authorization of a token ringx issued, else 404.
    Acme(Option<std::sync::Arc<str>>),
}

/// Where a request goes, when its server rewrites.
pub struct Routed<'r> {
    pub path: Option<Cow<'r, str>>,
    pub at: Option<LocId>,
    pub ext: Option<Box<RouteExt>>,
}

/// How a run of rewrite rules ended.
enum RuleEnd {
    /// No rule changed the URI.
    Same,
    /// Rules without a flag changed it: search the location again.
    Changed,
    Last,
    Break,
    Redirect(u16, String),
    /// The new path climbs above the root.
    Bad,
}

/// What a request's routing reads.
pub struct Ctx<'a> {
    pub req: &'a Request<'a, 'a>,
    pub conn: &'a ConnInfo,
    pub server_name: &'a str,
    pub request_id: &'a Cell<Option<[u8; 32]>>,
}

/// Routes a request in server `si`, whose `rw.full_route` is set. `path` is the cleaned path.
pub fn route<'r>(routes: &Routes, si: usize, path: Cow<'r, str>, cx: &Ctx<'_>) -> Routed<'r> {
    let server = &routes.servers[si];
    let mut ext = RouteExt {
        args: cx.req.query.map(str::to_string),
        ..RouteExt::default()
    };
    let mut uri = path.into_owned();
    let early = |ext: &mut RouteExt, e: Early| ext.early = Some(e);
    let srv_rules = server.rw.as_ref().map_or(&[][..], |r| &r.rules[..]);
    match run_rules(srv_rules, &mut uri, &mut ext, cx) {
        RuleEnd::Redirect(s, l) => early(
            &mut ext,
            Early::Redirect {
                status: s,
                location: l,
            },
        ),
        RuleEnd::Bad => early(&mut ext, Early::Status(400)),
        // In a server block, `last` and `break` both end the rules; the location search follows.
        _ => {}
    }
    let mut at = None;
    let mut changes = 0;
    while ext.early.is_none() {
        if changes > MAX_URI_CHANGES {
            tracing::error!(
                "rewrite or internal redirection cycle while processing {:?}",
                cx.req.target
            );
            early(&mut ext, Early::Status(500));
            break;
        }
        if let Some(e) = slash_redirect(server, &uri, ext.args.as_deref(), cx) {
            at = None;
            early(&mut ext, e);
            break;
        }
        let Some((li, caps)) = locate(server, &uri) else {
            break;
        };
        at = Some(LocId {
            server: si,
            loc: li,
        });
        if caps.is_some() {
            ext.caps = caps;
        }
        let loc = &server.locations[li];
        let Some(rw) = loc.rw.as_deref() else { break };
        match run_rules(&rw.rules, &mut uri, &mut ext, cx) {
            RuleEnd::Redirect(s, l) => {
                early(
                    &mut ext,
                    Early::Redirect {
                        status: s,
                        location: l,
                    },
                );
                break;
            }
            RuleEnd::Bad => {
                early(&mut ext, Early::Status(400));
                break;
            }
            RuleEnd::Changed | RuleEnd::Last => {
                changes += 1;
                continue;
            }
            RuleEnd::Break => ext.broke = true,
            RuleEnd::Same => {}
        }
        if let (Some(tf), Action::Files(root)) = (&rw.try_files, &loc.action) {
            match try_files(tf, root, &uri, &ext, cx) {
                Tried::Found(p) => {
                    if p != uri {
                        ext.found_from = Some(std::mem::replace(&mut uri, p));
                        ext.changed = true;
                    }
                }
                Tried::Redirect(p, args) => {
                    uri = p;
                    if let Some(a) = args {
                        ext.args = a;
                    }
                    ext.changed = true;
                    ext.moved = true;
                    ext.broke = false;
                    changes += 1;
                    continue;
                }
                Tried::Named(n) => {
                    at = Some(LocId { server: si, loc: n });
                    ext.broke = false;
                    changes += 1;
                    if changes > MAX_URI_CHANGES {
                        // nginx's named redirect counts too: the 11th change is a cycle.
                        let name = &server.locations[n].path;
                        crate::answer::fallback::log_cycle(name);
                        early(&mut ext, Early::Status(500));
                    }
                }
                Tried::Status(s) => early(&mut ext, Early::Status(s)),
                Tried::Bad => early(&mut ext, Early::Status(400)),
            }
        }
        if matches!(loc.action, Action::None) && ext.early.is_none() {
            // A location that only rewrites, and no rule matched.
            early(&mut ext, Early::Status(404));
        }
        break;
    }
    ext.changes = u8::try_from(changes).unwrap_or(u8::MAX);
    Routed {
        path: Some(Cow::Owned(uri)),
        at,
        ext: Some(Box::new(ext)),
    }
}

/// nginx's 301 for a proxied directory requested without its slash
/// ([`VServer::slash_redirect`]), when `uri` is one. Decided before the location's steps
/// (its access rules answer the redirected request).
pub fn slash_redirect(
    server: &VServer,
    uri: &str,
    args: Option<&str>,
    cx: &Ctx<'_>,
) -> Option<Early> {
    server.slash_redirect(uri)?;
    Some(slash_answer(uri, args, cx))
}

/// The 301 of [`slash_redirect`]: to `uri` with the slash, the query `args` kept, made
/// absolute as nginx's `absolute_redirect` makes it.
pub fn slash_answer(uri: &str, args: Option<&str>, cx: &Ctx<'_>) -> Early {
    Early::Redirect {
        status: 301,
        location: redirect_url(&format!("{uri}/"), args, cx),
    }
}

fn run_rules(rules: &[RewriteRule], uri: &mut String, ext: &mut RouteExt, cx: &Ctx<'_>) -> RuleEnd {
    let mut changed = false;
    for rule in rules {
        let Some(m) = rule.regex.captures(uri) else {
            continue;
        };
        let caps = Caps::from_match(uri, &m);
        let repl = {
            let vars = Vars {
                req: cx.req,
                uri,
                args: ext.args.as_deref(),
                caps: Some(&caps),
                conn: cx.conn,
                server_name: cx.server_name,
                request_id: cx.request_id,
            };
            vars.expand(&rule.replacement)
        };
        ext.caps = Some(caps);
        // "/new?a=1": the new arguments, the old ones appended; a trailing '?' drops them.
        let (new_path, new_args) = match repl.split_once('?') {
            None => (repl.as_str(), None),
            Some((p, a)) => (p, Some(a)),
        };
        let args = match new_args {
            None => ext.args.clone(),
            Some(a) if a.ends_with('?') || repl.ends_with('?') => {
                let a = a.trim_end_matches('?');
                (!a.is_empty()).then(|| a.to_string())
            }
            Some(a) => match &ext.args {
                Some(old) if !a.is_empty() => Some(format!("{a}&{old}")),
                Some(old) => Some(old.clone()),
                None => (!a.is_empty()).then(|| a.to_string()),
            },
        };
        let redirect = match rule.flag {
            Flag::Permanent => Some(301),
            Flag::Redirect => Some(302),
            _ if is_redirect_target(&repl) => Some(302),
            _ => None,
        };
        if let Some(status) = redirect {
            return RuleEnd::Redirect(status, redirect_url(new_path, args.as_deref(), cx));
        }
        let Some(clean) = normalize_decoded(new_path) else {
            return RuleEnd::Bad;
        };
        *uri = clean;
        ext.args = args;
        ext.changed = true;
        ext.moved = true;
        changed = true;
        match rule.flag {
            Flag::Last => return RuleEnd::Last,
            Flag::Break => return RuleEnd::Break,
            _ => {}
        }
    }
    if changed {
        RuleEnd::Changed
    } else {
        RuleEnd::Same
    }
}

/// A redirect's `Location`: a URL as written, or a path made absolute with the request's
/// scheme and Host as nginx does; what came from the decoded path is escaped again.
fn redirect_url(path: &str, args: Option<&str>, cx: &Ctx<'_>) -> String {
    let mut out = String::new();
    if let Some(rest) = path
        .strip_prefix("http://")
        .map(|r| ("http://", r))
        .or_else(|| path.strip_prefix("https://").map(|r| ("https://", r)))
    {
        out.push_str(rest.0);
        escape_args(rest.1, &mut out);
    } else {
        origin(cx.req, cx.conn, cx.server_name, &mut out);
        escape_path(path, &mut out);
    }
    if let Some(a) = args {
        out.push('?');
        escape_args(a, &mut out);
    }
    out
}

/// `scheme://host[:port]` of a redirect made absolute as nginx makes it: the Host's name
/// (lowercase) or the server's, and the port the request came in on unless it is the
/// scheme's own.
pub fn origin(req: &Request, conn: &ConnInfo, server_name: &str, out: &mut String) {
    out.push_str(conn.scheme());
    out.push_str("://");
    match req.host_name() {
        Some(h) if !h.is_empty() => out.push_str(&String::from_utf8_lossy(h).to_ascii_lowercase()),
        _ => out.push_str(server_name),
    }
    let default_port = if conn.tls { 443 } else { 80 };
    if let Some(port) = conn.local.map(|a| a.port()).filter(|&p| p != default_port) {
        out.push(':');
        out.push_str(&port.to_string());
    }
}

/// Resolves `.` and `..` and repeated slashes of a path that is already decoded (a rewrite's
/// result: decoding it again would turn `%2e` written in the request into a `.`). None: it
/// climbs above the root, or does not start with '/'.
pub fn normalize_decoded(p: &str) -> Option<String> {
    if !p.starts_with('/') {
        return None;
    }
    let mut parts: Vec<&str> = Vec::new();
    for seg in p.split('/').skip(1) {
        match seg {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            s => parts.push(s),
        }
    }
    let mut out = String::with_capacity(p.len());
    for s in &parts {
        out.push('/');
        out.push_str(s);
    }
    let trailing = p.ends_with('/') || p.ends_with("/.") || p.ends_with("/..");
    if out.is_empty() || (trailing && !out.ends_with('/')) {
        out.push('/');
    }
    Some(out)
}

enum Tried {
    Found(String),
    Redirect(String, Option<Option<String>>),
    Named(usize),
    Status(u16),
    Bad,
}

fn try_files(
    tf: &TryFilesC,
    root: &crate::route::FileRoot,
    uri: &str,
    ext: &RouteExt,
    cx: &Ctx<'_>,
) -> Tried {
    let vars = Vars {
        req: cx.req,
        uri,
        args: ext.args.as_deref(),
        caps: ext.caps.as_ref(),
        conn: cx.conn,
        server_name: cx.server_name,
        request_id: cx.request_id,
    };
    for t in &tf.candidates {
        let p = vars.expand(t);
        let Some(clean) = normalize_decoded(&p) else {
            continue;
        };
        // nginx: an entry written with a trailing '/' looks for a directory.
        let want_dir = matches!(t.parts.last(), Some(Part::Lit(l)) if l.ends_with('/'));
        if crate::static_files::exists(root, &clean, want_dir) {
            // nginx: a directory found by `$uri/` is served at the entry less its last '/'
            // (so `/docs` is redirected to `/docs/`, and `/docs/` gets its index).
            let served = if want_dir { &p[..p.len() - 1] } else { &p[..] };
            if let Some(u) = normalize_decoded(served) {
                return Tried::Found(u);
            }
        }
    }
    match &tf.fallback {
        FallbackC::Status(s) => Tried::Status(*s),
        FallbackC::Named(n) => Tried::Named(*n),
        FallbackC::Uri(t) => {
            let target = vars.expand(t);
            let (p, a) = match target.split_once('?') {
                Some((p, a)) => (p, Some((!a.is_empty()).then(|| a.to_string()))),
                None => (target.as_str(), None),
            };
            match normalize_decoded(p) {
                Some(clean) => Tried::Redirect(clean, a),
                None => Tried::Bad,
            }
        }
    }
}

/// The location `@name` of a server.
pub fn named(server: &VServer, name: &str) -> Option<usize> {
    server.locations.iter().position(|l| l.path == name)
}

#[cfg(test)]
mod tests {
    use super::normalize_decoded;

    #[test]
    fn decoded_paths_are_normalised_without_decoding() {
        for (p, want) in [
            ("/a/b", Some("/a/b")),
            ("/a//b/", Some("/a/b/")),
            ("/a/./b/../c", Some("/a/c")),
            ("/a/..", Some("/")),
            ("/%2e%2e/x", Some("/%2e%2e/x")),
            ("/..", None),
            ("a", None),
            ("/", Some("/")),
        ] {
            assert_eq!(normalize_decoded(p).as_deref(), want, "{p}");
        }
    }
}
