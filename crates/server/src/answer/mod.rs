//! Responses the zone makes itself, as a location configures them: `add_header` lines,
//! `error_page` replacing an error, redirects decided by `rewrite`, a `return` with
//! variables, compressed `return` bodies, and static files (`files.rs`: precompressed
//! variants and compression on the fly).
//!
//! [`Answer`] gathers what these need of one request; the pipeline's routing stage builds one
//! per request answered locally (`pipeline/routing.rs`).

pub mod fallback;
mod files;

use std::borrow::Cow;
use std::cell::Cell;

use ringx_http::Request;

use crate::compress::{status_compressible, Accept};
use crate::response::{ConnHdr, ErrorPage, HeadOut, Reply, Responder};
use crate::rewrite::flow::RouteExt;
use crate::rewrite::headers::{AddHeaders, ErrTarget};
use crate::rewrite::vars::{field_safe, ConnInfo, Vars};
use crate::rewrite::ReturnT;
use crate::route::{Action, Canned, Loc, LocId, Routes, VServer};

/// What the response writers need of a request beyond its head: its connection, its
/// `$request_id` once one is made, and how its role sends a body compressed as it streams.
pub struct ReqCtx {
    pub conn: ConnInfo,
    pub request_id: Cell<Option<[u8; 32]>>,
    pub unsized_body: UnsizedBody,
}

/// How a role takes a body compressed as it streams (`Reply::encoder`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum UnsizedBody {
    /// It does not: a file too large to compress whole goes as it is.
    No,
    /// HTTP/1: chunked for HTTP/1.1, delimited by the close for HTTP/1.0.
    Http1,
    /// HTTP/2: the bytes as they are, in DATA frames as the peer's window allows.
    Frames,
}

impl ReqCtx {
    pub fn new(conn: ConnInfo) -> ReqCtx {
        ReqCtx {
            conn,
            request_id: Cell::new(None),
            unsized_body: UnsizedBody::No,
        }
    }
}

/// One request answered locally.
pub struct Answer<'a> {
    pub r: Responder<'a>,
    pub routes: &'a Routes,
    pub server: &'a VServer,
    /// The index of `server` in `routes`.
    pub si: usize,
    pub loc: Option<&'a Loc>,
    pub req: &'a Request<'a, 'a>,
    /// The path now (decoded, normalised, after rewrites).
    pub path: &'a str,
    pub ext: Option<&'a RouteExt>,
    pub rq: &'a ReqCtx,
    pub ch: ConnHdr,
    pub head_only: bool,
}

impl<'a> Answer<'a> {
    pub fn vars(&self) -> Vars<'_> {
        Vars {
            req: self.req,
            uri: self.path,
            args: match self.ext {
                Some(e) => e.args.as_deref(),
                None => self.req.query,
            },
            caps: self.ext.and_then(|e| e.caps.as_ref()),
            conn: &self.rq.conn,
            server_name: &self.server.name,
            request_id: &self.rq.request_id,
        }
    }

    /// The `add_header` in force: the location's (inherited from the server when it sets
    /// none), or the server's for a request no location took.
    fn add_header(&self) -> Option<&'a AddHeaders> {
        match self.loc {
            Some(l) => l.rw.as_ref().and_then(|rw| rw.add_header.as_deref()),
            None => self.server.add_header.as_deref(),
        }
    }

    /// `extra` followed by the lines `add_header` gives a response with `status`.
    pub fn with_added<'e>(&self, status: u16, extra: &'e str) -> Cow<'e, str> {
        let Some(a) = self.add_header() else {
            return Cow::Borrowed(extra);
        };
        let mut s = extra.to_string();
        if a.has_vars() {
            a.write(status, Some(&self.vars()), &mut s);
        } else {
            a.write(status, None, &mut s);
        }
        Cow::Owned(s)
    }

    fn error_target(&self, status: u16) -> Option<&'a ErrTarget> {
        let pages = match self.loc {
            Some(l) => l.rw.as_ref().and_then(|rw| rw.error_pages.as_deref()),
            None => self.server.error_pages.as_deref(),
        };
        pages?.get(status)
    }

    /// An error response: the `error_page` configured for `status`, else ringx's page.
    /// `extra`: header lines the error carries (`Allow`, `Content-Range`).
    pub fn error<O: HeadOut + ?Sized>(&self, out: &mut O, status: u16, extra: &str) -> Reply {
        if let Some(t) = self.error_target(status) {
            if let Some(r) = self.custom_page(out, status, t) {
                return r;
            }
        }
        let extra = self.with_added(status, extra);
        let page = ErrorPage::new(status, self.ch, self.head_only).extra(&extra);
        Reply::bytes(self.r.error(out, page))
    }

    /// A redirect to `location` (escaped by whoever made it).
    pub fn redirect<O: HeadOut + ?Sized>(&self, out: &mut O, status: u16, location: &str) -> Reply {
        let extra = format!("Location: {}\r\n", field_safe(location));
        let extra = self.with_added(status, &extra);
        let page = ErrorPage::new(status, self.ch, self.head_only).extra(&extra);
        Reply::bytes(self.r.error(out, page))
    }

    /// An `error_page` target; None when it cannot be served (the file is gone), and the
    /// plain error page goes out instead.
    fn custom_page<O: HeadOut + ?Sized>(
        &self,
        out: &mut O,
        status: u16,
        t: &ErrTarget,
    ) -> Option<Reply> {
        let page = Page {
            r: self.r,
            server: self.server,
            si: self.si,
            ch: self.ch,
            head_only: self.head_only,
            may_proxy: fallback::may_fall_back(self.req),
            extra: "",
            guarded: false,
            hops: self.ext.map_or(0, |e| e.changes),
            recursive: match self.loc {
                Some(l) => crate::rewrite::recursive_pages(l.rw.as_deref()),
                None => self.server.recursive_pages,
            },
            new_uri: self.ext.and_then(|e| e.new_uri(self.path)),
        };
        page.write(out, status, t, Some(&self.vars()))
    }

    /// A pre-serialised `return`: its compressed variant when the client takes one, the
    /// location's added headers, or its error page.
    pub fn canned<O: HeadOut + ?Sized>(&self, out: &mut O, c: &Canned) -> Reply {
        if c.status >= 400 {
            if let Some(t) = self.error_target(c.status) {
                if let Some(r) = self.custom_page(out, c.status, t) {
                    return r;
                }
            }
        }
        let mut c = c;
        if !c.variants.is_empty() && !self.head_only {
            let accept = Accept::of(self.req);
            let best = self
                .routes
                .compress
                .as_ref()
                .and_then(|p| p.choose(&accept, &c.ctype, Some(c.body.len() as u64)));
            if let Some(v) = best.and_then(|b| c.variants.iter().find(|v| v.0 == b.coding)) {
                c = &v.1;
            }
        }
        match self.add_header() {
            None => Reply::bytes(self.r.canned(out, c, self.ch, self.head_only)),
            Some(_) => {
                let extra = self.with_added(c.status, "");
                Reply::bytes(self.r.canned_extra(out, c, &extra, self.ch, self.head_only))
            }
        }
    }

    /// A `return` with variables.
    pub fn return_t<O: HeadOut + ?Sized>(&self, out: &mut O, t: &ReturnT) -> Reply {
        if t.status >= 400 {
            if let Some(target) = self.error_target(t.status) {
                if let Some(r) = self.custom_page(out, t.status, target) {
                    return r;
                }
            }
        }
        let vars = self.vars();
        let mut extra = format!("Content-Type: {}\r\n", t.content_type);
        if let Some(l) = &t.location {
            let mut loc = String::new();
            vars.expand_into(l, &mut loc);
            extra.push_str("Location: ");
            extra.push_str(&field_safe(&loc));
            extra.push_str("\r\n");
        }
        extra.push_str(&t.headers);
        let body = vars.expand(&t.body);
        let extra = self.with_added(t.status, &extra);
        let written = self
            .r
            .head(out, t.status, &extra, body.len() as u64, self.ch);
        if !self.head_only && t.status != 204 && t.status != 304 {
            out.body().extend_from_slice(body.as_bytes());
        }
        Reply::bytes(written)
    }
}

/// What answering a failed proxied request with its location's error page needs: the routes
/// it was routed by (a reload may have replaced the zone's since), and its location.
pub struct PageCtx {
    pub routes: std::sync::Arc<Routes>,
    pub at: LocId,
    pub head_only: bool,
    /// The request's head, kept where an error page may send it to another proxying
    /// location (`fallback.rs`).
    pub head: Option<Vec<u8>>,
    /// The request's redirects by error pages so far (it reached this location by them).
    pub hops: u8,
    /// The URI routing changed the request's to (path decoded, query): a named location an
    /// error page sends it to gets it (`Page::now`).
    pub uri: Option<(String, Option<String>)>,
}

impl PageCtx {
    /// The request was re-served here by `fb` (its error pages apply: `fb.open`): its
    /// redirects so far. Its kept head stays as it came (`$request_uri`, as in nginx); the
    /// URI it is at here is `uri`, from its route.
    pub fn reached_by(&mut self, fb: &fallback::Fallback) {
        self.hops = fb.hops;
    }

    /// Whether the location's error page for `status` re-serves the request at a location
    /// that proxies or serves files behind a guard (`fallback.rs`).
    pub fn falls_back(&self, status: u16) -> bool {
        let server = &self.routes.servers[self.at.server];
        let t = server.locations[self.at.loc]
            .rw
            .as_ref()
            .and_then(|rw| rw.error_pages.as_ref())
            .and_then(|pages| pages.get(status));
        match t {
            Some(ErrTarget::Local { loc, .. }) => {
                server.locations.get(*loc).is_some_and(|l| match &l.action {
                    Action::Proxy(p) => !p.grpc,
                    Action::Files(_) => l.guard.is_some(),
                    _ => false,
                })
            }
            _ => false,
        }
    }

    /// The location's error page for `status`, written into `out`; None when it has none for
    /// that status or it cannot be served (the plain error page goes out instead).
    pub fn write<O: HeadOut + ?Sized>(
        &self,
        r: Responder<'_>,
        out: &mut O,
        status: u16,
        ch: ConnHdr,
    ) -> Option<Reply> {
        let server = &self.routes.servers[self.at.server];
        let t = server.locations[self.at.loc]
            .rw
            .as_ref()
            .and_then(|rw| rw.error_pages.as_ref())
            .and_then(|pages| pages.get(status))?;
        let loc = &server.locations[self.at.loc];
        let page = Page {
            r,
            server,
            si: self.at.server,
            ch,
            head_only: self.head_only,
            may_proxy: self.head.is_some(),
            extra: "",
            guarded: false,
            hops: self.hops,
            recursive: crate::rewrite::recursive_pages(loc.rw.as_deref()),
            new_uri: self.uri.as_ref().map(|(p, a)| (p.as_str(), a.as_deref())),
        };
        page.write(out, status, t, None)
    }
}

/// An error page served for an `error_page` target, where the request itself may be gone (a
/// proxied request that failed): what it needs beyond the target.
pub struct Page<'a> {
    pub r: Responder<'a>,
    pub server: &'a VServer,
    /// The index of `server` (where a fallback the page starts is).
    pub si: usize,
    pub ch: ConnHdr,
    pub head_only: bool,
    /// The request can be re-served by a location that proxies (it has no body; see
    /// `fallback.rs`).
    pub may_proxy: bool,
    /// Header lines the error carries onto a page served here (a refusal's
    /// `WWW-Authenticate` or `Retry-After`).
    pub extra: &'a str,
    /// The target location's guard passed already (the page is written after it).
    pub guarded: bool,
    /// The request's redirects by error pages before this page's (`fallback::MAX_REDIRECTS`).
    pub hops: u8,
    /// The location whose error page this is has `recursive_error_pages`: the target's own
    /// error pages apply to what fails there (its missing file, the fallback it starts).
    pub recursive: bool,
    /// The request's URI where routing changed it: a named location it is sent to gets it.
    pub new_uri: fallback::NewUri<'a>,
}

impl Page<'_> {
    /// Writes the page for `status` as `t` says, with the `add_header` lines of the location
    /// that serves it (nginx's rule: an error page is an internal redirect); `vars`: the
    /// request, when it is still there (a value with variables is left out otherwise).
    /// None: the target cannot be served (its file is gone, or it proxies or is guarded and
    /// the request cannot go there). A target that proxies, or serves files behind a guard
    /// (`access`, `auth_basic`, `auth_request`, `limit_req`: nginx runs the access phase of
    /// the location an internal redirect reaches), writes nothing: the reply carries the
    /// [`Fallback`](fallback::Fallback) for the role to start, and a page is written after
    /// the guard passes. (A `return` answers before the access phase, as in nginx.)
    pub fn write<O: HeadOut + ?Sized>(
        &self,
        out: &mut O,
        status: u16,
        t: &ErrTarget,
        vars: Option<&Vars>,
    ) -> Option<Reply> {
        let (want, uri, loc) = match t {
            ErrTarget::Redirect(url) => {
                let mut extra = format!("Location: {}\r\n", field_safe(url));
                if let Some(a) = self.server.add_header.as_deref() {
                    a.write(302, vars, &mut extra);
                }
                let page = ErrorPage::new(302, self.ch, self.head_only).extra(&extra);
                return Some(Reply::bytes(self.r.error(out, page)));
            }
            ErrTarget::Local { status, uri, loc } => (*status, uri, *loc),
        };
        if self.hops > fallback::MAX_REDIRECTS {
            // Routing spent the count (a rewrite cycle, logged there): no error page
            // applies, as nginx's `uri_changes` at 0.
            return None;
        }
        if self.hops == fallback::MAX_REDIRECTS {
            // nginx's plain 500, which closes the connection.
            fallback::log_cycle(uri);
            let page = ErrorPage::new(500, ConnHdr::Close, self.head_only);
            return Some(Reply {
                close: true,
                ..Reply::bytes(self.r.error(out, page))
            });
        }
        let target = self.server.locations.get(loc)?;
        let add = target.rw.as_ref().and_then(|rw| rw.add_header.as_deref());
        let added = |code: u16, extra: String| {
            let mut extra = extra;
            if let Some(a) = add {
                a.write(code, vars, &mut extra);
            }
            extra
        };
        let code = |own: u16| match want {
            None => status,
            Some(None) => own,
            Some(Some(c)) => c,
        };
        let guard_first = match &target.action {
            Action::Files(_) => target.guard.is_some() && !self.guarded,
            Action::Proxy(p) => !p.grpc,
            _ => false,
        };
        if guard_first {
            if !self.may_proxy {
                return None;
            }
            // A named location gets the URI the request is at (`now`), with its method.
            let (uri, named_at_uri) = if uri.starts_with('@') {
                (fallback::owned(self.new_uri), self.new_uri.is_some())
            } else {
                (Some(fallback::split_uri(uri)), false)
            };
            let fb = fallback::Fallback {
                at: LocId {
                    server: self.si,
                    loc,
                },
                uri,
                status: match want {
                    None => Some(status),
                    Some(c) => c,
                },
                error: status,
                extra: self.extra.to_string(),
                page: matches!(target.action, Action::Files(_)).then(|| Box::new(t.clone())),
                hops: self.hops + 1,
                open: self.recursive,
                named_at_uri,
            };
            return Some(Reply {
                fallback: Some(Box::new(fb)),
                ..Reply::bytes(crate::response::Written {
                    status,
                    head_len: 0,
                })
            });
        }
        match &target.action {
            Action::Files(root) => {
                let path = uri.split_once('?').map_or(&uri[..], |(p, _)| p);
                let Some((file, len, ctype)) = crate::static_files::page(root, path) else {
                    return Some(self.missing(out, uri, target, vars));
                };
                let code = code(200);
                let extra = added(code, format!("Content-Type: {ctype}\r\n{}", self.extra));
                let written = self.r.head(out, code, &extra, len, self.ch);
                Some(Reply {
                    file: (!self.head_only && len > 0).then_some((file, 0, len)),
                    ..Reply::bytes(written)
                })
            }
            Action::Return(c) => {
                let code = code(c.status);
                let extra = added(code, format!("Content-Type: {}\r\n{}", c.ctype, self.extra));
                let written = self.r.head(out, code, &extra, c.body.len() as u64, self.ch);
                if !self.head_only {
                    out.body().extend_from_slice(&c.body);
                }
                Some(Reply::bytes(written))
            }
            _ => None,
        }
    }

    /// The page's file is not there: as in nginx, the redirected request is a 404 at the
    /// target location, answered with that location's error page for 404 where this page's
    /// location is recursive, else with the plain 404 (not the original error's status).
    /// A named location it leads to gets the page's URI (the request is there now).
    fn missing<O: HeadOut + ?Sized>(
        &self,
        out: &mut O,
        uri: &str,
        target: &Loc,
        vars: Option<&Vars>,
    ) -> Reply {
        if self.recursive {
            if let Some(t) = crate::rewrite::error_page(target.rw.as_deref(), 404) {
                let next = Page {
                    r: self.r,
                    server: self.server,
                    si: self.si,
                    ch: self.ch,
                    head_only: self.head_only,
                    may_proxy: self.may_proxy,
                    extra: "",
                    guarded: false,
                    hops: self.hops + 1,
                    recursive: crate::rewrite::recursive_pages(target.rw.as_deref()),
                    // A named location further on gets the page's URI (set below).
                    new_uri: None,
                };
                if let Some(mut r) = next.write(out, 404, t, vars) {
                    if let Some(fb) = r.fallback.as_mut().filter(|fb| fb.uri.is_none()) {
                        fb.uri = Some(fallback::split_uri(uri));
                    }
                    return r;
                }
            }
        }
        Reply::bytes(
            self.r
                .error(out, ErrorPage::new(404, self.ch, self.head_only)),
        )
    }
}

/// Whether a body of this status and type gets `Vary: Accept-Encoding`: a coding could
/// compress it on the fly. (A precompressed file served says so itself; where none exists,
/// the response does not vary.)
pub fn varies(routes: &Routes, loc: Option<&Loc>, status: u16, ctype: &str) -> bool {
    loc.is_some_and(|l| l.compress)
        && status_compressible(status)
        && routes.compress.as_ref().is_some_and(|p| p.varies(ctype))
}
