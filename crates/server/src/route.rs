//! Virtual servers and locations, compiled once from the configuration and shared read-only
//! by every zone. Responses of `return` locations are serialised here, once.

use std::net::SocketAddr;
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::Path;

use crate::error::Error;
use crate::upstream::Upstreams;
use ringx_config::{Config, Location, Return};

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
    /// `[http]` real client addresses and malformed-request escalation.
    pub http_guard: crate::guard::HttpGuard,
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
    /// Longest path first; exact locations are checked before prefixes.
    pub locations: Vec<Loc>,
}

pub struct Loc {
    pub path: String,
    pub exact: bool,
    pub action: Action,
    /// Limits, access rules and authentication (`crate::guard`); None: none.
    pub guard: Option<Box<crate::guard::Guard>>,
    /// The proxy cache of a `proxy_pass` location (`crate::cache`); None: none.
    pub cache: Option<Box<crate::cache::loc::CacheLoc>>,
}

pub enum Action {
    Return(Canned),
    Files(FileRoot),
    Proxy(ProxyLoc),
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
            for l in &s.location {
                locations.push(compile_location(l.get_ref(), cfg, &server_header, ups)?);
            }
            locations.sort_by(|a: &Loc, b: &Loc| {
                b.exact.cmp(&a.exact).then(b.path.len().cmp(&a.path.len()))
            });
            servers.push(VServer {
                names,
                suffixes,
                locations,
            });
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
            s.locations.iter().any(|l| {
                matches!(l.action, Action::Proxy(_))
                    || l.guard.as_ref().is_some_and(|g| g.auth_request.is_some())
            })
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
            http_guard: crate::guard::HttpGuard::compile(cfg),
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
    /// longest prefix.
    pub fn location_index(&self, path: &str) -> Option<usize> {
        self.locations.iter().position(|l| {
            if l.exact {
                l.path == path
            } else {
                path.starts_with(&l.path)
            }
        })
    }
}

fn compile_location(
    l: &Location,
    cfg: &Config,
    server_header: &[u8],
    ups: &mut Upstreams,
) -> Result<Loc, Error> {
    let path = l.path.get_ref().clone();
    let action = if let Some(target) = &l.proxy_pass {
        let upstream = ups.resolve_target(target.get_ref())?;
        let host = match l.proxy_host.as_deref() {
            None | Some("pass") => HostMode::Pass,
            Some("upstream") => HostMode::Upstream,
            Some(h) => HostMode::Fixed(h.to_string()),
        };
        Action::Proxy(ProxyLoc {
            upstream,
            host,
            forwarded_headers: l.forwarded_headers,
        })
    } else if let Some(r) = &l.ret {
        Action::Return(canned(r, server_header))
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
        path,
        exact: l.exact,
        action,
        guard: crate::guard::Guard::compile(l, cfg, ups)?.map(Box::new),
        cache: match &l.proxy_cache {
            Some(pc) => Some(Box::new(crate::cache::loc::CacheLoc::compile(
                pc.get_ref(),
                cfg,
            )?)),
            None => None,
        },
    })
}

fn canned(r: &Return, server_header: &[u8]) -> Canned {
    let status = *r.status.get_ref();
    let mut head = Vec::new();
    ringx_http::write_status_line(&mut head, status);
    head.extend_from_slice(server_header);
    let body = r.body.clone().into_bytes();
    let ctype = r
        .content_type
        .as_ref()
        .map_or("text/plain", |c| c.get_ref());
    if status != 204 && status != 304 {
        head.extend_from_slice(
            format!(
                "Content-Type: {ctype}\r\nContent-Length: {}\r\n",
                body.len()
            )
            .as_bytes(),
        );
    }
    if let Some(loc) = &r.location {
        head.extend_from_slice(format!("Location: {}\r\n", loc.get_ref()).as_bytes());
    }
    for (k, v) in &r.headers {
        head.extend_from_slice(format!("{}: {v}\r\n", k.get_ref()).as_bytes());
    }
    Canned::new(status, head, body)
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
