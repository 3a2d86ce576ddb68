//! Virtual servers and locations, compiled once from the configuration and shared read-only
//! by every zone. Responses of `return` locations are serialised here, once.

use std::net::SocketAddr;
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::Path;

use std::sync::Arc;

use crate::compress::{Coding, Policy};
use crate::error::Error;
use crate::rewrite::flow::{FallbackC, TryFilesC};
use crate::rewrite::{AddHeaders, ErrorPages, LocKind, LocRw, ProxyEdit, ReturnT, ServerRw};
use crate::upstream::Upstreams;
use ringx_config::{Config, Location, Return, Server};

pub struct Routes {
    /// Unique listen addresses; a zone's `ListenerId(i)` is `listen[i]`.
    pub listen: Vec<SocketAddr>,
    /// Servers on each listen address; the first is the default one.
    pub by_listener: Vec<Vec<usize>>,
    pub servers: Vec<VServer>,
    /// `Server:` header line, with CRLF.
    pub server_header: Vec<u8>,
    /// Server name for error pages.
    pub server_token: Vec<u8>,
    /// What each listener serves (HTTP listeners first, then streams).
    pub listener_kind: Vec<ListenerKind>,
    /// `[[stream]]` proxies.
    pub streams: Vec<StreamDef>,
    /// Some location proxies (the zones then need client addresses).
    pub has_proxy: bool,
    /// Compression (`[http] gzip`, `brotli`, `zstd`, `*_static`); None: off.
    pub compress: Option<Arc<Policy>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListenerKind {
    /// HTTP; `true`: a PROXY protocol header comes first.
    Http { proxy_protocol: bool },
    /// `streams[i]`.
    Stream(usize),
}

pub struct StreamDef {
    pub upstream: usize,
    pub idle_timeout: std::time::Duration,
    pub proxy_protocol: bool,
    /// Routing by the ClientHello's SNI name (to upstream indices; `upstream` for none).
    pub sni: Option<ringx_tls::sni::SniMap>,
}

/// A `proxy_pass` location.
pub struct ProxyLoc {
    pub upstream: usize,
    pub host: HostMode,
    pub forwarded_headers: bool,
    /// The URI part of `proxy_pass` (`http://app/v2/`): it replaces the location's prefix.
    pub uri: Option<String>,
    /// `proxy_set_header`, `proxy_hide_header`, `proxy_intercept_errors`.
    pub edit: Option<Arc<ProxyEdit>>,
}

pub enum HostMode {
    /// The client's `Host`.
    Pass,
    /// The chosen server's `host:port` as configured.
    Upstream,
    Fixed(String),
}

pub struct VServer {
    /// Exact names, lowercase.
    pub names: Vec<String>,
    /// `*.example.com` names, stored as `.example.com`.
    pub suffixes: Vec<String>,
    /// Exact locations, then prefixes longest first, then regexes in the order written, then
    /// named ones (`LocKind::class`).
    pub locations: Vec<Loc>,
    /// The server's rewriting (None: it has none, and its requests route by
    /// `location_index` alone).
    pub rw: Option<Box<ServerRw>>,
    /// The first server_name (`$server_name`, and `$host` without a Host).
    pub name: String,
    /// The server's `add_header` and `error_page`, for requests no location takes.
    pub add_header: Option<Arc<AddHeaders>>,
    pub error_pages: Option<Arc<ErrorPages>>,
}

pub struct Loc {
    /// The prefix or exact path, the regex, or the `@name`.
    pub path: String,
    pub exact: bool,
    pub action: Action,
    pub kind: LocKind,
    /// Rewrite rules, added headers, error pages, try_files (None: none of them).
    pub rw: Option<Box<LocRw>>,
    /// On-the-fly compression applies here.
    pub compress: bool,
}

pub enum Action {
    Return(Canned),
    /// A `return` with variables.
    ReturnT(Box<ReturnT>),
    Files(FileRoot),
    Proxy(ProxyLoc),
    /// A location with `rewrite` rules only: what they do not redirect is a 404.
    None,
}

/// A fixed response, serialised at load time.
pub struct Canned {
    pub status: u16,
    /// Status line and headers, each with CRLF; Date and Connection are added per response.
    pub head: Vec<u8>,
    pub body: Vec<u8>,
    /// The whole HTTP/1.1 keep-alive response (the common case): `head`, a Date line to be
    /// overwritten, the empty line, `body`. One copy instead of five appends.
    pub keep11: Vec<u8>,
    /// The body's `Content-Type` (for an error page served from this response).
    pub ctype: String,
    /// The same response compressed, one per coding that applies (made when the
    /// configuration is compiled: a `return` body never changes).
    pub variants: Vec<(Coding, Canned)>,
}

impl Canned {
    pub fn new(status: u16, head: Vec<u8>, body: Vec<u8>) -> Canned {
        let mut keep11 = head.clone();
        keep11.extend_from_slice(&[b'-'; ringx_http::DATE_HEADER_LEN]);
        keep11.extend_from_slice(b"\r\n");
        keep11.extend_from_slice(&body);
        Canned {
            status,
            head,
            body,
            keep11,
            ctype: "text/plain".into(),
            variants: Vec::new(),
        }
    }
}

pub struct FileRoot {
    /// The directory, opened `O_PATH`: files are opened beneath it with `RESOLVE_BENEATH`.
    pub dir: OwnedFd,
    /// For `alias`: the location prefix replaced by the directory.
    pub strip_prefix: Option<String>,
    pub index: Vec<String>,
}

impl Routes {
    pub fn compile(cfg: &Config, ups: &mut Upstreams) -> Result<Routes, Error> {
        let version = env!("CARGO_PKG_VERSION");
        let token = if cfg.http.server_tokens {
            format!("ringx/{version}")
        } else {
            "ringx".to_string()
        };
        let server_header = format!("Server: {token}\r\n").into_bytes();
        let compress = Policy::compile(&cfg.http);
        let mut listen: Vec<SocketAddr> = Vec::new();
        let mut by_listener: Vec<Vec<usize>> = Vec::new();
        let mut servers = Vec::new();
        for (si, s) in cfg.server.iter().enumerate() {
            let s = s.get_ref();
            for a in &s.listen {
                let a = *a.get_ref();
                let li = match listen.iter().position(|x| *x == a) {
                    Some(i) => i,
                    None => {
                        listen.push(a);
                        by_listener.push(Vec::new());
                        listen.len() - 1
                    }
                };
                if *s.default.get_ref() {
                    by_listener[li].insert(0, si);
                } else {
                    by_listener[li].push(si);
                }
            }
            let mut names = Vec::new();
            let mut suffixes = Vec::new();
            for n in &s.server_name {
                let n = n.get_ref().to_ascii_lowercase();
                match n.strip_prefix('*') {
                    Some(rest) => suffixes.push(rest.to_string()),
                    None => names.push(n),
                }
            }
            let mut locations = Vec::new();
            let mut order = Vec::new();
            for (i, l) in s.location.iter().enumerate() {
                locations.push(compile_location(
                    l.get_ref(),
                    &server_header,
                    compress.as_deref(),
                    ups,
                )?);
                order.push(i);
            }
            // Stable: regexes keep the order they were written in.
            let mut paired: Vec<(Loc, usize)> = locations.into_iter().zip(order).collect();
            paired.sort_by(|(a, _), (b, _)| {
                a.kind
                    .class()
                    .cmp(&b.kind.class())
                    .then(match a.kind.class() {
                        1 => b.path.len().cmp(&a.path.len()),
                        _ => std::cmp::Ordering::Equal,
                    })
            });
            let (locations, order): (Vec<Loc>, Vec<usize>) = paired.into_iter().unzip();
            let rw = ServerRw::compile(s)?;
            let mut vs = VServer {
                names,
                suffixes,
                locations,
                rw: (rw.full_route || !rw.rules.is_empty()).then(|| Box::new(rw)),
                name: s
                    .server_name
                    .first()
                    .map_or(String::new(), |n| n.get_ref().clone()),
                add_header: None,
                error_pages: None,
            };
            finish_rewriting(&mut vs, s, &order)?;
            servers.push(vs);
        }
        let mut listener_kind: Vec<ListenerKind> = listen
            .iter()
            .map(|a| ListenerKind::Http {
                proxy_protocol: cfg.server.iter().any(|s| {
                    s.get_ref().proxy_protocol
                        && s.get_ref().listen.iter().any(|b| b.get_ref() == a)
                }),
            })
            .collect();
        let mut streams = Vec::new();
        for st in &cfg.stream {
            let st = st.get_ref();
            let upstream = ups.resolve_target(st.proxy_pass.get_ref())?;
            for a in &st.listen {
                listen.push(*a.get_ref());
                by_listener.push(Vec::new());
                listener_kind.push(ListenerKind::Stream(streams.len()));
            }
            let mut by_name: Vec<(usize, Vec<String>)> = Vec::new();
            for (name, target) in &st.sni {
                by_name.push((
                    ups.resolve_target(target.get_ref())?,
                    vec![name.get_ref().clone()],
                ));
            }
            let sni = (!by_name.is_empty()).then(|| {
                ringx_tls::sni::SniMap::new(by_name.iter().map(|(i, n)| (*i, &n[..])), upstream)
            });
            streams.push(StreamDef {
                upstream,
                idle_timeout: st.idle_timeout.0,
                proxy_protocol: st.proxy_protocol,
                sni,
            });
        }
        let has_proxy = servers.iter().any(|s: &VServer| {
            s.locations
                .iter()
                .any(|l| matches!(l.action, Action::Proxy(_)))
        });
        Ok(Routes {
            listen,
            by_listener,
            servers,
            server_header,
            server_token: token.into_bytes(),
            listener_kind,
            streams,
            has_proxy,
            compress,
        })
    }

    /// The server (an index into `servers`) for a request on `listener` with the Host that
    /// `host_name` gives (port stripped). A listener with one server needs no Host, and
    /// `host_name` is not called.
    pub fn server_index<'h>(
        &self,
        listener: usize,
        host_name: impl FnOnce() -> Option<&'h [u8]>,
    ) -> usize {
        let cands = &self.by_listener[listener];
        if cands.len() == 1 {
            return cands[0];
        }
        if let Some(h) = host_name() {
            let mut h = h;
            while let Some(rest) = h.strip_suffix(b".") {
                h = rest;
            }
            for &i in cands {
                if self.servers[i]
                    .names
                    .iter()
                    .any(|n| n.as_bytes().eq_ignore_ascii_case(h))
                {
                    return i;
                }
            }
            for &i in cands {
                if self.servers[i].suffixes.iter().any(|suf| {
                    h.len() > suf.len()
                        && h[h.len() - suf.len()..].eq_ignore_ascii_case(suf.as_bytes())
                }) {
                    return i;
                }
            }
        }
        cands[0]
    }
}

impl VServer {
    /// The location (an index into `locations`) for `path`: exact match first, then the
    /// longest prefix. For servers without regex or named locations (those route through
    /// `rewrite::flow`).
    pub fn location_index(&self, path: &str) -> Option<usize> {
        self.locations.iter().position(|l| {
            if l.exact {
                l.path == path
            } else {
                path.starts_with(&l.path)
            }
        })
    }

    /// Whether requests need the full route (`rewrite::flow::route`).
    #[inline]
    pub fn full_route(&self) -> bool {
        self.rw.as_ref().is_some_and(|r| r.full_route)
    }
}

/// What needs the whole server compiled first: error pages and try_files fallbacks resolved
/// to locations, and what locations inherit from the server (nginx's rule: a location with
/// none of its own takes the server's add_header and error_page).
fn finish_rewriting(vs: &mut VServer, s: &Server, order: &[usize]) -> Result<(), Error> {
    let srv_add = AddHeaders::compile(&s.add_header)?;
    let srv_pages = ErrorPages::compile(&s.error_page, vs)?;
    vs.add_header = srv_add.clone();
    vs.error_pages = srv_pages.clone();
    for (li, &ci) in order.iter().enumerate() {
        let l = s.location[ci].get_ref();
        let mut rw = LocRw {
            rules: crate::rewrite::compile_rules(&l.rewrite)?,
            add_header: AddHeaders::compile(&l.add_header)?.or_else(|| srv_add.clone()),
            error_pages: ErrorPages::compile(&l.error_page, vs)?.or_else(|| srv_pages.clone()),
            try_files: None,
        };
        if let Some(tf) = &l.try_files {
            let src = ringx_config::Source {
                name: "(config)",
                text: "",
            };
            let parsed = ringx_config::rewrite::parse_try_files(tf, &src)
                .map_err(|e| Error::config(e.message))?;
            let fallback = match parsed.fallback {
                ringx_config::rewrite::Fallback::Uri(t) => FallbackC::Uri(t),
                ringx_config::rewrite::Fallback::Status(c) => FallbackC::Status(c),
                ringx_config::rewrite::Fallback::Named(n) => FallbackC::Named(
                    crate::rewrite::flow::named(vs, &n)
                        .ok_or_else(|| Error::config(format!("try_files: no location {n:?}")))?,
                ),
            };
            rw.try_files = Some(TryFilesC {
                candidates: parsed.candidates,
                fallback,
            });
        }
        vs.locations[li].rw = (!rw.is_empty()).then(|| Box::new(rw));
    }
    Ok(())
}

fn compile_location(
    l: &Location,
    server_header: &[u8],
    compress: Option<&Policy>,
    ups: &mut Upstreams,
) -> Result<Loc, Error> {
    let (kind, path) = crate::rewrite::compile_path(l)?;
    let action = if let Some(target) = &l.proxy_pass {
        let (server_part, uri) = ringx_config::upstream::split_uri(target.get_ref());
        let upstream = ups.resolve_target(server_part)?;
        let host = match l.proxy_host.as_deref() {
            None | Some("pass") => HostMode::Pass,
            Some("upstream") => HostMode::Upstream,
            Some(h) => HostMode::Fixed(h.to_string()),
        };
        Action::Proxy(ProxyLoc {
            upstream,
            host,
            forwarded_headers: l.forwarded_headers,
            uri: uri.map(str::to_string),
            edit: ProxyEdit::compile(
                &l.proxy_set_header,
                &l.proxy_hide_header,
                l.proxy_intercept_errors,
            )?,
        })
    } else if let Some(r) = &l.ret {
        match ReturnT::compile(r)? {
            Some(t) => Action::ReturnT(Box::new(t)),
            None => Action::Return(canned(r, server_header, compress.filter(|_| l.compress))),
        }
    } else if l.root.is_none() && l.alias.is_none() {
        Action::None
    } else {
        let (dir, strip) = match (&l.root, &l.alias) {
            (Some(root), _) => (root.get_ref().as_path(), None),
            (None, Some(alias)) => (alias.get_ref().as_path(), Some(path.clone())),
            (None, None) => unreachable!("validated: a location has an action"),
        };
        Action::Files(FileRoot {
            dir: open_dir(dir)?,
            strip_prefix: strip,
            index: l.index.clone(),
        })
    };
    Ok(Loc {
        exact: matches!(kind, LocKind::Exact),
        path,
        action,
        kind,
        rw: None,
        compress: l.compress,
    })
}

fn canned(r: &Return, server_header: &[u8], compress: Option<&Policy>) -> Canned {
    let status = *r.status.get_ref();
    let body = r.body.clone().into_bytes();
    let ctype = r
        .content_type
        .as_ref()
        .map_or("text/plain", |c| c.get_ref());
    // `Vary` on every variant, identity included, when the body could be compressed.
    let varies = compress.is_some_and(|p| p.varies(ctype))
        && crate::compress::status_compressible(status)
        && !body.is_empty();
    let head_for = |coding: Option<Coding>, len: usize| {
        let mut head = Vec::new();
        ringx_http::write_status_line(&mut head, status);
        head.extend_from_slice(server_header);
        if status != 204 && status != 304 {
            head.extend_from_slice(
                format!("Content-Type: {ctype}\r\nContent-Length: {len}\r\n").as_bytes(),
            );
        }
        if let Some(c) = coding {
            head.extend_from_slice(format!("Content-Encoding: {}\r\n", c.token()).as_bytes());
        }
        if varies {
            head.extend_from_slice(b"Vary: Accept-Encoding\r\n");
        }
        if let Some(loc) = &r.location {
            head.extend_from_slice(format!("Location: {}\r\n", loc.get_ref()).as_bytes());
        }
        for (k, v) in &r.headers {
            head.extend_from_slice(format!("{}: {v}\r\n", k.get_ref()).as_bytes());
        }
        head
    };
    let mut c = Canned::new(status, head_for(None, body.len()), body.clone());
    c.ctype = ctype.to_string();
    if varies {
        for codec in compress.map_or(&[][..], |p| &p.codecs[..]) {
            if !codec.takes(ctype) || (body.len() as u64) < codec.min_length {
                continue;
            }
            if let Ok(z) = crate::compress::encoder::compress(codec.coding, codec.level, &body) {
                let mut v = Canned::new(status, head_for(Some(codec.coding), z.len()), z);
                v.ctype = ctype.to_string();
                c.variants.push((codec.coding, v));
            }
        }
    }
    c
}

fn open_dir(p: &Path) -> Result<OwnedFd, Error> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(p.as_os_str().as_bytes())
        .map_err(|_| Error::config(format!("{}: NUL in path", p.display())))?;
    // SAFETY: open with a valid NUL-terminated path; a non-negative result is a new
    // descriptor we own.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        let e = std::io::Error::last_os_error();
        return Err(Error::io(format!("open {}", p.display()), e));
    }
    // SAFETY: `fd` is new and owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Routes for `servers`, each given one `return` location.
    fn routes(servers: &str) -> Routes {
        let loc = "\n  [[server.location]]\n  path = \"/\"\n  return = { status = 204 }\n";
        let toml: String = servers
            .split("[[server]]")
            .filter(|body| !body.trim().is_empty())
            .map(|body| format!("[[server]]{body}{loc}"))
            .collect();
        let cfg = ringx_config::parse("test.toml", &toml).expect("test config parses");
        let mut ups = Upstreams::compile(&cfg).expect("no upstreams to resolve");
        Routes::compile(&cfg, &mut ups).expect("routes compile")
    }

    /// nginx's choice of server by Host: exact names (any case, trailing dots ignored), then
    /// `*.suffix` names, then the listener's default server; a listener with one server never
    /// asks for the Host.
    #[test]
    fn server_by_host() {
        let r = routes(
            r#"
[[server]]
listen = ["127.0.0.1:18901"]
server_name = ["Example.com"]
[[server]]
listen = ["127.0.0.1:18901"]
server_name = ["*.example.org"]
[[server]]
listen = ["127.0.0.1:18901"]
server_name = ["other.test"]
default = true
[[server]]
listen = ["127.0.0.1:18902"]
"#,
        );
        let pick = |host: &'static str| r.server_index(0, || Some(host.as_bytes()));
        assert_eq!(pick("example.com"), 0);
        assert_eq!(pick("EXAMPLE.COM"), 0);
        assert_eq!(pick("example.com."), 0);
        assert_eq!(pick("example.com.."), 0);
        assert_eq!(pick("www.Example.ORG"), 1);
        assert_eq!(
            pick("example.org"),
            2,
            "a wildcard needs a label before its suffix"
        );
        assert_eq!(pick("unknown.test"), 2, "the listener's default server");
        assert_eq!(r.server_index(0, || None), 2);
        let asked = std::cell::Cell::new(false);
        let one = r.server_index(1, || {
            asked.set(true);
            Some(&b"example.com"[..])
        });
        assert_eq!(one, 3);
        assert!(
            !asked.get(),
            "a listener with one server does not read the Host"
        );
    }
}
