//! Rewriting, compiled: nginx's location search (`locate.rs`: exact, longest prefix, `^~`,
//! regexes in order), `rewrite` rules, `try_files` and internal redirects (`flow.rs`),
//! headers added to responses and sent upstream (`headers.rs`), and variables expanded per
//! request from templates parsed at load (`vars.rs`).
//!
//! A server that uses none of the request-time parts (regex or named locations, `rewrite`,
//! `try_files`, a `return` with variables) routes as before, by [`VServer::location_index`]
//! alone: these features cost nothing where they are not configured.
//!
//! [`VServer::location_index`]: crate::route::VServer::location_index

pub mod flow;
pub mod headers;
pub mod locate;
pub mod vars;

use std::sync::Arc;

use ringx_config::rewrite::{compile_regex, PathMatch, RewriteRule};
use ringx_config::template::Template;
use ringx_config::{Location, Return, Server};

use crate::error::Error;
pub use headers::{add_header_applies, AddHeaders, Added, ErrorPages, ProxyEdit};

/// How a location is matched.
pub enum LocKind {
    Exact,
    Prefix,
    /// `^~`: the longest prefix stops the regex search.
    PrefixStop,
    Regex(regex::Regex),
    /// `@name`: reached only by `try_files` or `error_page`.
    Named,
}

impl LocKind {
    /// Sort key: exact locations, then prefixes longest first, then regexes in the order
    /// written (the sort is stable), then named ones.
    pub fn class(&self) -> u8 {
        match self {
            LocKind::Exact => 0,
            LocKind::Prefix | LocKind::PrefixStop => 1,
            LocKind::Regex(_) => 2,
            LocKind::Named => 3,
        }
    }
}

/// A location's path compiled: what it matches, and the string kept in `Loc::path`.
pub fn compile_path(l: &Location) -> Result<(LocKind, String), Error> {
    let pm = PathMatch::parse(l.path.get_ref(), l.exact).map_err(Error::config)?;
    Ok(match pm {
        PathMatch::Exact(p) => (LocKind::Exact, p),
        PathMatch::Prefix(p) => (LocKind::Prefix, p),
        PathMatch::PrefixStop(p) => (LocKind::PrefixStop, p),
        PathMatch::Regex { pattern, caseless } => (
            LocKind::Regex(compile_regex(&pattern, caseless).map_err(Error::config)?),
            pattern,
        ),
        PathMatch::Named(n) => (LocKind::Named, n),
    })
}

/// A `return` whose status line, Location or body has variables.
pub struct ReturnT {
    pub status: u16,
    pub location: Option<Template>,
    pub body: Template,
    pub content_type: String,
    /// The return's own `headers`, as header lines.
    pub headers: String,
}

impl ReturnT {
    /// None when nothing in the return has a variable (it is pre-serialised instead).
    pub fn compile(r: &Return) -> Result<Option<ReturnT>, Error> {
        let location = r
            .location
            .as_ref()
            .map(|l| Template::parse(l.get_ref()))
            .transpose()
            .map_err(Error::config)?;
        let body = Template::parse(&r.body).map_err(Error::config)?;
        if location.as_ref().is_none_or(|l| l.literal().is_some()) && body.literal().is_some() {
            return Ok(None);
        }
        let mut headers = String::new();
        for (k, v) in &r.headers {
            headers.push_str(&format!("{}: {v}\r\n", k.get_ref()));
        }
        Ok(Some(ReturnT {
            status: *r.status.get_ref(),
            location,
            body,
            content_type: r
                .content_type
                .as_ref()
                .map_or("text/plain".to_string(), |c| c.get_ref().clone()),
            headers,
        }))
    }
}

/// A server's rewriting: rules run before a location is chosen, and what its locations
/// inherit.
#[derive(Default)]
pub struct ServerRw {
    pub rules: Vec<RewriteRule>,
    /// Requests need the full route (`flow::route`): a regex or named location, rewrite
    /// rules, try_files or a return with variables somewhere in the server.
    pub full_route: bool,
}

impl ServerRw {
    pub fn compile(s: &Server) -> Result<ServerRw, Error> {
        let rules = compile_rules(&s.rewrite)?;
        let full_route = !rules.is_empty()
            || s.location.iter().any(|l| {
                let l = l.get_ref();
                let p = l.path.get_ref();
                p.starts_with('~')
                    || p.starts_with('@')
                    || !l.rewrite.is_empty()
                    || l.try_files.is_some()
            });
        Ok(ServerRw { rules, full_route })
    }
}

/// A location's rewriting, response headers and error pages.
#[derive(Default)]
pub struct LocRw {
    pub rules: Vec<RewriteRule>,
    /// The headers added to its responses (its own, or the server's when it sets none).
    pub add_header: Option<Arc<AddHeaders>>,
    /// Its error pages (its own, or the server's when it sets none).
    pub error_pages: Option<Arc<ErrorPages>>,
    /// `recursive_error_pages` (its own, or the server's): a request its error pages
    /// re-serve elsewhere may be re-served again by the error pages there.
    pub recursive: bool,
    pub try_files: Option<TryFilesC>,
}

impl LocRw {
    /// Whether there is anything to do for this location.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
            && self.add_header.is_none()
            && self.error_pages.is_none()
            && self.try_files.is_none()
    }
}

/// `try_files`, compiled.
pub struct TryFilesC {
    pub candidates: Vec<Template>,
    pub fallback: FallbackC,
}

pub enum FallbackC {
    Uri(Template),
    /// A named location, by index.
    Named(usize),
    Status(u16),
}

/// A block's `rewrite` rules.
pub fn compile_rules(rules: &[toml::Spanned<String>]) -> Result<Vec<RewriteRule>, Error> {
    rules
        .iter()
        .map(|r| RewriteRule::parse(r.get_ref()).map_err(Error::config))
        .collect()
}

/// The error page for `status` of a location's rewriting, if any.
pub fn error_page(rw: Option<&LocRw>, status: u16) -> Option<&headers::ErrTarget> {
    rw?.error_pages.as_ref()?.get(status)
}

/// Whether the error pages of a location (its `rw`) are recursive (`recursive_error_pages`).
pub fn recursive_pages(rw: Option<&LocRw>) -> bool {
    rw.is_some_and(|rw| rw.recursive)
}
