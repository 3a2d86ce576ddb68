//! Virtual servers and locations, compiled once from the configuration (`route_build.rs`) and
//! shared read-only by every zone; the choice of a request's server and (for servers that do
//! not rewrite) its location.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::sync::Arc;

use crate::compress::{Coding, Policy};
use crate::rewrite::headers::{AddHeaders, ErrorPages, ProxyEdit};
use crate::rewrite::{LocKind, LocRw, ReturnT, ServerRw};

pub struct Routes {
    /// Unique listen addresses; a zone's `ListenerId(i)` is `listen[i]`.
    pub listen: Vec<SocketAddr>,
    /// Servers on each listen address; the first is the default one.
    pub by_listener: Vec<Vec<usize>>,
    /// Each listen address's servers by name: the one matcher of `Host` and of SNI
    /// (`crate::tls` hands a TLS listener's map to its handshakes), so the two pick one
    /// server for the same name.
    pub by_name: Vec<ringx_tls::sni::SniMap>,
    pub servers: Vec<VServer>,
    /// `Server:` header line, with CRLF.
    pub server_header: Vec<u8>,
    /// Server name for error pages.
    pub server_token: Vec<u8>,
    /// What each listener serves (HTTP listeners first, then streams).
    pub listener_kind: Vec<ListenerKind>,
    /// `[[stream]]` proxies.
    pub streams: Vec<StreamDef>,
    /// UDP listen addresses (of `protocol = "udp"` streams, and HTTP/3's on the addresses
    /// of `quic = true` servers), apart from the TCP ones in `listen`: a zone's UDP listener
    /// for `udp_listen[i]` serves what `udp_serves[i]` says.
    pub udp_listen: Vec<SocketAddr>,
    pub udp_serves: Vec<UdpServes>,
    /// Listen addresses bound `IP_TRANSPARENT` (`transparent = true`), and whether each is
    /// UDP.
    pub transparent: Vec<(SocketAddr, bool)>,
    /// Some location proxies (the zones then need client addresses).
    pub has_proxy: bool,
    /// Some server's certificate comes from ACME: `/.well-known/acme-challenge/` is answered
    /// before any location (`pipeline::routing::route`).
    pub acme_http01: bool,
    /// Compression (`[http] gzip`, `brotli`, `zstd`, `*_static`); None: off.
    pub compress: Option<Arc<Policy>>,
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
    /// A UDP stream's settings (`None`: TCP).
    pub udp: Option<UdpDef>,
    /// Connect from the client's address (`bind = "client"` on the stream or its upstream).
    pub bind_client: bool,
}

/// What a `protocol = "udp"` stream adds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdpDef {
    /// Datagrams expected from the server per client datagram (`None`: no count).
    pub responses: Option<u32>,
    /// Sessions one zone holds at most.
    pub max_sessions: u32,
    /// The largest datagram passed on, either way.
    pub max_datagram: u32,
    /// The listening socket's receive buffer in bytes.
    pub rcvbuf: u32,
}

/// Defaults of a UDP stream's settings.
pub const UDP_MAX_SESSIONS: u32 = 8192;
pub const UDP_MAX_DATAGRAM: u32 = 16 * 1024;
pub const UDP_RCVBUF: u32 = 4 << 20;

/// A `proxy_pass` location.
pub struct ProxyLoc {
    pub upstream: usize,
    pub host: HostMode,
    pub forwarded_headers: bool,
    /// The URI part of `proxy_pass` (`http://app/v2/`): it replaces the location's prefix.
    pub uri: Option<String>,
    /// `proxy_set_header`, `proxy_hide_header`, `proxy_intercept_errors`.
    pub edit: Option<Arc<ProxyEdit>>,
    /// `grpc://` or `grpcs://`: calls go over multiplexed HTTP/2 connections
    /// (`role::grpc`), from HTTP/2 clients only.
    pub grpc: bool,
}

pub enum HostMode {
    /// The client's `Host`.
    Pass,
    /// The chosen server's `host:port` as configured.
    Upstream,
    Fixed(String),
}

pub struct VServer {
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
    /// The server's `recursive_error_pages`.
    pub recursive_pages: bool,
    /// The server asks TLS clients for a certificate (`client_ca`, required or optional).
    pub verifies_clients: bool,
    /// The server offers HTTP/2 (ALPN `h2`).
    pub http2: bool,
    /// The `Alt-Svc` value compiled into its responses (`quic = true`): HTTP/3 leaves it out
    /// (its client is on QUIC already).
    pub alt_svc: Option<Arc<str>>,
    /// The paths redirected to their location with a slash ([`VServer::slash_redirect`]),
    /// found once at compile time ([`VServer::slashless_paths`]): routing looks one up.
    pub slashless: HashMap<Box<str>, usize>,
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
    /// Limits, access rules and authentication (`crate::guard`); None: none.
    pub guard: Option<Box<crate::guard::Guard>>,
    /// The proxy cache of a `proxy_pass` location (`crate::cache`); None: none.
    pub cache: Option<Box<crate::cache::loc::CacheLoc>>,
}

impl Loc {
    /// An exact or prefix location (not a regex or named one).
    fn is_static(&self) -> bool {
        matches!(
            self.kind,
            LocKind::Exact | LocKind::Prefix | LocKind::PrefixStop
        )
    }

    /// An exact or prefix location ending in '/' that proxies: its path without the slash is
    /// redirected to it ([`VServer::slash_redirect`]).
    fn redirects_slashless(&self) -> bool {
        self.is_static()
            && self.path.len() > 1
            && self.path.ends_with('/')
            && matches!(self.action, Action::Proxy(_))
    }
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
    /// `head` as fields, for HTTP/2 and HTTP/3 (`response::Fields`).
    pub fields: ringx_h2proto::response::FieldList,
    /// The body's `Content-Type` (for an error page served from this response).
    pub ctype: String,
    /// The same response compressed, one per coding that applies (made when the
    /// configuration is compiled: a `return` body never changes).
    pub variants: Vec<(Coding, Canned)>,
    /// The last line of `head` (and the last of `fields`) is the server's `Alt-Svc`, for
    /// `quic = true` (`crate::alt_svc`): a response over QUIC leaves it out.
    pub alt_svc: bool,
}

impl Canned {
    pub fn new(status: u16, head: Vec<u8>, body: Vec<u8>) -> Canned {
        // The same head as fields (HTTP/2, HTTP/3), split once here.
        let mut fields = ringx_h2proto::response::FieldList::default();
        let lines = head
            .iter()
            .position(|&b| b == b'\n')
            .map_or(&[][..], |i| &head[i + 1..]);
        fields.push_lines(lines);
        let mut keep11 = head.clone();
        keep11.extend_from_slice(&[b'-'; ringx_http::DATE_HEADER_LEN]);
        keep11.extend_from_slice(b"\r\n");
        keep11.extend_from_slice(&body);
        Canned {
            status,
            head,
            body,
            keep11,
            fields,
            ctype: "text/plain".into(),
            variants: Vec::new(),
            alt_svc: false,
        }
    }

    /// Adds the server's `Alt-Svc` header `line` (with CRLF) at the end of the head, and of
    /// each compressed variant's (`crate::alt_svc`).
    pub fn add_alt_svc(&mut self, line: &str) {
        let mut head = std::mem::take(&mut self.head);
        head.extend_from_slice(line.as_bytes());
        let mut c = Canned::new(self.status, head, std::mem::take(&mut self.body));
        c.ctype = std::mem::take(&mut self.ctype);
        c.variants = std::mem::take(&mut self.variants);
        for (_, v) in &mut c.variants {
            v.add_alt_svc(line);
        }
        c.alt_svc = true;
        *self = c;
    }
}

pub struct FileRoot {
    /// The directory, opened `O_PATH`: files are opened beneath it with `RESOLVE_BENEATH`.
    pub dir: OwnedFd,
    /// For `alias`: the location prefix replaced by the directory.
    pub strip_prefix: Option<String>,
    pub index: Vec<String>,
}

/// A location of the routes: the index of its server in `Routes::servers` and its own in
/// that server's `locations`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LocId {
    pub server: usize,
    pub loc: usize,
}

/// What a UDP listener serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UdpServes {
    /// `streams[i]`, a `protocol = "udp"` stream.
    Stream(usize),
    /// HTTP/3 for the servers of TCP listener `routes.listen[listen]`, on its address.
    Quic { listen: u32 },
}

/// The largest QUIC datagram a zone receives whole: clients send at most their path's MTU
/// (1,200 to 1,500 bytes on the Internet; loopback allows more, which quinn-proto's path MTU
/// discovery finds, up to this).
pub const QUIC_MAX_DATAGRAM: u32 = 1500;

/// What a QUIC listener that takes coalesced datagrams (UDP GRO) receives at most at once:
/// the kernel coalesces up to 64 KiB.
pub const QUIC_MAX_COALESCED: u32 = 65535;

/// The receive buffer a QUIC listener asks for.
pub const QUIC_RCVBUF: u32 = 4 << 20;

/// The send buffer a QUIC listener asks for: room for 64 segmented sends of up to 64 KiB
/// (the kernel's default, ~208 KiB, holds three; the epoll driver drops a send that finds
/// it full, and with it up to 44 packets at once).
pub const QUIC_SNDBUF: u32 = 4 << 20;

impl Routes {
    /// The location `id` names.
    pub fn location(&self, id: LocId) -> &Loc {
        &self.servers[id.server].locations[id.loc]
    }

    /// The receive buffer a UDP listener on `addr` asks for (0: the kernel's default).
    pub fn udp_rcvbuf(&self, addr: SocketAddr) -> u32 {
        let i = self.udp_listen.iter().position(|a| *a == addr);
        match i.map(|i| self.udp_serves[i]) {
            Some(UdpServes::Stream(s)) => self.streams[s].udp.map_or(0, |u| u.rcvbuf),
            // A burst of a fast download's acknowledgements, or of new clients' Initials.
            Some(UdpServes::Quic { .. }) => QUIC_RCVBUF,
            None => 0,
        }
    }

    /// Whether the UDP listener on `addr` serves HTTP/3.
    pub fn serves_quic(&self, addr: SocketAddr) -> bool {
        let i = self.udp_listen.iter().position(|a| *a == addr);
        matches!(i.map(|i| self.udp_serves[i]), Some(UdpServes::Quic { .. }))
    }

    /// How the UDP listener on `addr` is bound: `base` (the process's options; its `gro`
    /// says whether QUIC listeners take coalesced datagrams) with this address's
    /// transparency and receive buffer; QUIC listeners also ask for a send buffer that
    /// holds many segmented sends, and report ECN marks (QUIC
    /// acknowledges them, RFC 9000 §13.4). A stream's datagrams are passed on one by one,
    /// never coalesced.
    pub fn udp_listen_options(
        &self,
        addr: SocketAddr,
        base: &ringx_engine::ListenOptions,
    ) -> ringx_engine::ListenOptions {
        let quic = self.serves_quic(addr);
        ringx_engine::ListenOptions {
            transparent: self.is_transparent(addr, true),
            rcvbuf: self.udp_rcvbuf(addr),
            sndbuf: if quic { QUIC_SNDBUF } else { 0 },
            gro: quic && base.gro,
            ecn: quic,
            ..base.clone()
        }
    }

    /// Whether the listener for `addr` (a UDP one when `udp`) is bound `IP_TRANSPARENT`.
    pub fn is_transparent(&self, addr: SocketAddr, udp: bool) -> bool {
        self.transparent.contains(&(addr, udp))
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
        match host_name() {
            Some(h) => self.by_name[listener].pick_name(h),
            None => cands[0],
        }
    }

    /// Whether a request on a TLS connection routed to server `si` must be refused with
    /// 421 Misdirected Request, as nginx refuses it: the handshake chose another server
    /// (SNI, or the listener's default without SNI) and `si` verifies client certificates,
    /// which that handshake did not ask for under `si`'s CA. Without it, any client could
    /// reach a client-certificate server by naming an open one in SNI and the protected
    /// one in `Host`. Also refused: an HTTP/2 request for a server that does not offer
    /// HTTP/2 (its operator turned it off). A server that differs only in its certificate
    /// serves the request: a client coalescing names under one certificate (RFC 9113
    /// §9.1.1) has verified that certificate for this name, and 421 is its signal to open a
    /// new connection only where the answer would differ.
    pub fn misdirected(&self, handshake_server: usize, si: usize, h2: bool) -> bool {
        if handshake_server == si {
            return false;
        }
        let s = &self.servers[si];
        s.verifies_clients || (h2 && !s.http2)
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

    /// nginx's redirect of a proxied directory requested without its slash: the location
    /// (an index into `locations`) whose path is `path` with a '/' appended, when it is an
    /// exact or prefix location (not a regex or named one) that proxies (`proxy_pass`, HTTP
    /// or gRPC), and no exact or prefix location has `path` itself. nginx answers such a
    /// request with 301 to the path with the slash (the query kept) before any location's
    /// steps, and before the regexes are tried (`ngx_http_core_find_static_location`, its
    /// `auto_redirect`); so `GET /admin` cannot reach `location /` past a protected
    /// `location /admin/`. An exact `= /admin` (or a prefix `/admin`) is the way out, as in
    /// nginx.
    #[inline]
    pub fn slash_redirect(&self, path: &str) -> Option<usize> {
        if self.slashless.is_empty() {
            return None;
        }
        self.slashless.get(path).copied()
    }

    /// The table of [`VServer::slash_redirect`] for `locations` (in their routing order):
    /// each path it redirects, with the location it redirects to.
    pub fn slashless_paths(locations: &[Loc]) -> HashMap<Box<str>, usize> {
        let mut out = HashMap::new();
        for (i, l) in locations.iter().enumerate() {
            if l.redirects_slashless() {
                let bare = &l.path[..l.path.len() - 1];
                if !locations.iter().any(|o| o.is_static() && o.path == bare) {
                    out.entry(bare.into()).or_insert(i);
                }
            }
        }
        out
    }

    /// Whether requests need the full route (`rewrite::flow::route`).
    #[inline]
    pub fn full_route(&self) -> bool {
        self.rw.as_ref().is_some_and(|r| r.full_route)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upstream::Upstreams;

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
    /// nginx's `auto_redirect`: a path without the slash of an exact or prefix location that
    /// proxies (HTTP or gRPC) is redirected there, unless an exact or prefix location has the
    /// path itself; regex locations and locations that do not proxy never redirect. Checked
    /// beside nginx 1.22 (tests/test_vhosts.py).
    #[test]
    fn slashless_proxied_directory_redirects() {
        let cfg = r#"
[[server]]
listen = ["127.0.0.1:18903"]
  [[server.location]]
  path = "/"
  proxy_pass = "http://127.0.0.1:9"
  [[server.location]]
  path = "/admin/"
  proxy_pass = "http://127.0.0.1:9"
  access = ["deny all"]
  [[server.location]]
  path = "= /eq/"
  proxy_pass = "http://127.0.0.1:9"
  [[server.location]]
  path = "^~ /stop/"
  proxy_pass = "http://127.0.0.1:9"
  [[server.location]]
  path = "/rpc/"
  proxy_pass = "grpc://127.0.0.1:9"
  [[server.location]]
  path = "/ret/"
  return = { status = 204 }
  [[server.location]]
  path = "~ ^/re/$"
  proxy_pass = "http://127.0.0.1:9"
  [[server.location]]
  path = "/ov/"
  proxy_pass = "http://127.0.0.1:9"
  [[server.location]]
  path = "= /ov"
  return = { status = 204 }
  [[server.location]]
  path = "/pv/"
  proxy_pass = "http://127.0.0.1:9"
  [[server.location]]
  path = "/pv"
  return = { status = 204 }
[[server]]
listen = ["127.0.0.1:18904"]
  [[server.location]]
  path = "/files/"
  return = { status = 204 }
"#;
        let cfg = ringx_config::parse("test.toml", cfg).expect("test config parses");
        let mut ups = Upstreams::compile(&cfg).expect("upstreams");
        let r = Routes::compile(&cfg, &mut ups).expect("routes compile");
        let s = &r.servers[0];
        let to = |p: &str| s.slash_redirect(p).map(|li| s.locations[li].path.as_str());
        assert_eq!(to("/admin"), Some("/admin/"));
        assert_eq!(
            to("/eq"),
            Some("/eq/"),
            "nginx redirects to an exact location too"
        );
        assert_eq!(to("/stop"), Some("/stop/"));
        assert_eq!(
            to("/rpc"),
            Some("/rpc/"),
            "grpc_pass sets it as proxy_pass does"
        );
        for p in [
            "/admin/", "/admin/x", "/adm", "/ADMIN", "/admin.", "/ret", "/re", "/ov", "/pv", "/",
        ] {
            assert_eq!(to(p), None, "{p}");
        }
        assert!(r.servers[1].slashless.is_empty(), "nothing proxies there");
        assert_eq!(r.servers[1].slash_redirect("/files"), None);
    }
}
