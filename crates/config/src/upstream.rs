//! `[[upstream]]` pools and `[[stream]]` (L4) proxies.
//!
//! ```toml
//! [[upstream]]
//! name = "app"
//! servers = ["127.0.0.1:9000", { addr = "127.0.0.1:9001", weight = 2, max_fails = 3, fail_timeout = "10s" },
//!            { addr = "127.0.0.1:9002", backup = true }]
//! balance = "round_robin"    # least_conn | random_two | hash
//! hash_key = "client"        # for balance = "hash": client | uri | "header:X-User"
//! keepalive = 32             # idle connections kept per zone
//! connect_timeout = "5s"
//! read_timeout = "60s"
//! send_timeout = "60s"
//! retries = 2                # further servers tried for idempotent requests
//! proxy_protocol = "off"     # v1 | v2: announce the client to the servers
//!   [upstream.health]
//!   interval = "2s"
//!   path = "/healthz"
//!   expect = 200             # default: any 2xx or 3xx
//!   rise = 2
//!   fall = 3
//!   timeout = "1s"
//!
//! [[stream]]
//! listen = ["0.0.0.0:5432"]
//! proxy_pass = "db"          # an upstream's name or "host:port"
//! idle_timeout = "10m"
//! proxy_protocol = false     # expect a PROXY header from a load balancer in front
//!
//! [[stream]]                  # UDP (DNS, syslog, QUIC): a session per client address and port
//! listen = ["0.0.0.0:53"]
//! protocol = "udp"
//! proxy_pass = "dns"          # the client's address picks the server (hash): one client, one server
//! idle_timeout = "30s"        # a session ends after this long without a datagram either way
//! responses = 1               # answers per client datagram; the session ends once they came
//! max_sessions = 8192         # per zone; a new client beyond that is dropped and counted
//! max_datagram_size = "16k"   # larger datagrams are dropped and counted
//! rcvbuf = "4m"               # the listener's receive buffer: absorbs bursts of new clients
//!
//! [[stream]]                  # TLS passed through, routed by the ClientHello's SNI name
//! listen = ["0.0.0.0:443"]
//! proxy_pass = "default_tls"  # SNI absent or matching no name
//! sni = { "a.example.com" = "site_a", "*.b.example.com" = "site_b" }
//! ```

use std::net::{SocketAddr, ToSocketAddrs};

use serde::Deserialize;
use toml::Spanned;

use crate::error::{ConfigError, Source};
use crate::units::Dur;
use crate::vhost::Server;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Upstream {
    pub name: Spanned<String>,
    pub servers: Vec<Spanned<ServerEntry>>,
    #[serde(default)]
    pub balance: Balance,
    /// `client`, `uri` or `header:NAME` (balance = "hash").
    #[serde(default = "default_hash_key")]
    pub hash_key: Spanned<String>,
    #[serde(default = "default_keepalive")]
    pub keepalive: u32,
    /// How long an idle upstream connection is kept.
    #[serde(default = "d60")]
    pub keepalive_timeout: Dur,
    #[serde(default = "d5")]
    pub connect_timeout: Dur,
    #[serde(default = "d60")]
    pub read_timeout: Dur,
    #[serde(default = "d60")]
    pub send_timeout: Dur,
    #[serde(default = "default_retries")]
    pub retries: u32,
    #[serde(default)]
    pub proxy_protocol: ProxyProtocol,
    pub health: Option<Health>,
    /// TLS to the servers (`proxy_pass = "https://..."` turns it on with the defaults).
    pub tls: Option<Spanned<crate::tls::UpstreamTls>>,
    /// `"client"`: connect to the servers from the client's own address (nginx's
    /// `proxy_bind $remote_addr transparent`), so they see the real client. Needs
    /// CAP_NET_ADMIN and routing that brings the servers' replies back (`crate::tproxy`).
    /// Connections bound to one client are not pooled for another.
    pub bind: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize, Clone, Copy, Default, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Balance {
    #[default]
    RoundRobin,
    LeastConn,
    RandomTwo,
    Hash,
}

#[derive(Debug, Deserialize, Clone, Copy, Default, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ProxyProtocol {
    #[default]
    Off,
    V1,
    V2,
}

/// A server: `"host:port"` or a table.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum ServerEntry {
    Addr(String),
    Full(ServerTable),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerTable {
    pub addr: String,
    #[serde(default = "one")]
    pub weight: u32,
    /// Failures within `fail_timeout` that mark the server down for `fail_timeout` (0: never).
    #[serde(default = "one")]
    pub max_fails: u32,
    #[serde(default = "d10")]
    pub fail_timeout: Dur,
    /// Used only when every other server is down.
    #[serde(default)]
    pub backup: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Health {
    #[serde(default = "d2")]
    pub interval: Dur,
    #[serde(default = "default_health_path")]
    pub path: String,
    /// The status a healthy server answers; default: any 2xx or 3xx.
    pub expect: Option<u16>,
    #[serde(default = "two")]
    pub rise: u32,
    #[serde(default = "three")]
    pub fall: u32,
    #[serde(default = "d1")]
    pub timeout: Dur,
}

/// What a `[[stream]]` carries.
#[derive(Debug, Deserialize, Clone, Copy, Default, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum StreamProtocol {
    /// A TCP connection relayed to a TCP connection.
    #[default]
    Tcp,
    /// Datagrams: a session per client address and port, over its own UDP socket to a server.
    Udp,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Stream {
    pub listen: Vec<Spanned<SocketAddr>>,
    pub proxy_pass: Spanned<String>,
    /// `tcp` (default) or `udp`.
    #[serde(default)]
    pub protocol: StreamProtocol,
    /// How long a tunnel (or a UDP session) may stay silent; default 10m for TCP (nginx's
    /// `proxy_timeout`), 30s for UDP.
    pub idle_timeout: Option<Dur>,
    /// UDP: datagrams expected from the server per client datagram (nginx's
    /// `proxy_responses`); once they came the session ends. 0: none expected (syslog).
    /// Default: no count, the session ends when idle.
    pub responses: Option<Spanned<u32>>,
    /// UDP: sessions one zone holds at most; a datagram from a new client beyond that is
    /// dropped and counted. Default 8192.
    pub max_sessions: Option<Spanned<u32>>,
    /// UDP: the largest datagram passed on, either way; larger ones are dropped and counted.
    /// Default 16k (nginx's `proxy_buffer_size`), at most 65507.
    pub max_datagram_size: Option<Spanned<crate::units::Size>>,
    /// UDP: the listening socket's receive buffer (`SO_RCVBUF`, nginx's `listen ...
    /// rcvbuf=`): datagrams that arrive while the zone is busy wait there, and a burst of new
    /// clients, each of whom costs a socket to the server, is absorbed instead of dropped by
    /// the kernel. Default 4m; set with `SO_RCVBUFFORCE` where ringx may (root,
    /// CAP_NET_ADMIN), else capped by `net.core.rmem_max` (logged).
    pub rcvbuf: Option<Spanned<crate::units::Size>>,
    /// Expect a PROXY protocol header (v1 or v2) at the start of each connection.
    #[serde(default)]
    pub proxy_protocol: bool,
    /// Route by the TLS ClientHello's server name without terminating TLS (nginx's
    /// `ssl_preread`, HAProxy's `req.ssl_sni`): name (exact or `*.suffix`) → upstream;
    /// `proxy_pass` takes what matches none. The bytes are forwarded untouched.
    #[serde(default)]
    pub sni: std::collections::BTreeMap<Spanned<String>, Spanned<String>>,
    /// Terminate TLS and forward the plain bytes (same forms as `[[server]] tls`).
    pub tls: Option<Spanned<crate::tls::TlsValue>>,
    /// Accept connections (datagrams) for addresses that are not this host's
    /// (`IP_TRANSPARENT`; `crate::tproxy`).
    #[serde(default)]
    pub transparent: bool,
    /// `"client"`: connect to the server from the client's own address (as `[[upstream]]
    /// bind`, for this stream only).
    pub bind: Option<Spanned<String>>,
    /// Refused (`crate::quic`): HTTP/3 is a `[[server]]`'s; a stream passes QUIC on as UDP.
    pub quic: Option<Spanned<bool>>,
}

/// A server with its address resolved.
#[derive(Debug, Clone)]
pub struct ResolvedServer {
    pub name: String,
    pub addr: SocketAddr,
    pub weight: u32,
    pub max_fails: u32,
    pub fail_timeout: std::time::Duration,
    pub backup: bool,
}

impl ServerEntry {
    fn table(&self) -> ServerTable {
        match self {
            ServerEntry::Addr(a) => ServerTable {
                addr: a.clone(),
                weight: 1,
                max_fails: 1,
                fail_timeout: d10(),
                backup: false,
            },
            ServerEntry::Full(t) => ServerTable {
                addr: t.addr.clone(),
                weight: t.weight,
                max_fails: t.max_fails,
                fail_timeout: Dur(t.fail_timeout.0),
                backup: t.backup,
            },
        }
    }

    /// Resolves the address (once, at load, like nginx) and checks the values.
    pub fn resolve(s: &Spanned<ServerEntry>, src: &Source) -> Result<ResolvedServer, ConfigError> {
        let t = s.get_ref().table();
        if t.weight == 0 || t.weight > 1000 {
            return Err(src.err(
                s.span(),
                format!("server {}: weight must be 1..1000", t.addr),
            ));
        }
        let addr = resolve_addr(&t.addr).map_err(|m| src.err(s.span(), m))?;
        Ok(ResolvedServer {
            name: t.addr,
            addr,
            weight: t.weight,
            max_fails: t.max_fails,
            fail_timeout: t.fail_timeout.0,
            backup: t.backup,
        })
    }
}

/// `host:port` to the first address it resolves to.
pub fn resolve_addr(a: &str) -> Result<SocketAddr, String> {
    if let Ok(sa) = a.parse::<SocketAddr>() {
        return Ok(sa);
    }
    if !a.contains(':') {
        return Err(format!("server address {a:?} needs a port (host:port)"));
    }
    match a.to_socket_addrs() {
        Ok(mut it) => it
            .next()
            .ok_or_else(|| format!("server address {a:?} resolves to nothing")),
        Err(e) => Err(format!("cannot resolve server address {a:?}: {e}")),
    }
}

/// Checks a target that names an upstream or `http://host:port` (`auth_request`'s
/// `proxy_pass`): the upstream exists, or the address resolves.
pub(crate) fn check_target(
    upstreams: &[Spanned<Upstream>],
    target: &Spanned<String>,
    src: &Source,
) -> Result<(), ConfigError> {
    let t = target.get_ref();
    if upstreams.iter().any(|u| u.get_ref().name.get_ref() == t) {
        return Ok(());
    }
    let Some(addr) = https_addr(t).or_else(|| t.strip_prefix("http://").map(str::to_string)) else {
        return Err(src.err(
            target.span(),
            format!("no [[upstream]] named {t:?} (or write \"http://host:port\")"),
        ));
    };
    resolve_addr(addr.trim_end_matches('/'))
        .map(drop)
        .map_err(|m| src.err(target.span(), m))
}

/// Checks across the upstreams, the streams and the servers' `proxy_pass` targets.
pub(crate) fn validate(
    upstreams: &[Spanned<Upstream>],
    streams: &[Spanned<Stream>],
    servers: &[Spanned<Server>],
    src: &Source,
) -> Result<(), ConfigError> {
    let mut names: Vec<&str> = Vec::new();
    for u in upstreams {
        let up = u.get_ref();
        let name = up.name.get_ref();
        if name.is_empty() || name.contains("://") || name.contains(':') {
            return Err(src.err(
                up.name.span(),
                format!("upstream name {name:?} must be a plain name (no ':' or scheme)"),
            ));
        }
        if names.contains(&name.as_str()) {
            return Err(src.err(
                up.name.span(),
                format!("upstream {name:?} is defined twice"),
            ));
        }
        names.push(name);
        if up.servers.is_empty() {
            return Err(src.err(u.span(), format!("upstream {name:?} has no servers")));
        }
        let mut primaries = 0;
        for s in &up.servers {
            let r = ServerEntry::resolve(s, src)?;
            primaries += usize::from(!r.backup);
        }
        if primaries == 0 {
            return Err(src.err(
                u.span(),
                format!("upstream {name:?} has only backup servers"),
            ));
        }
        let key = up.hash_key.get_ref();
        let key_ok = key == "client"
            || key == "uri"
            || key.strip_prefix("header:").is_some_and(|h| !h.is_empty());
        if !key_ok {
            return Err(src.err(
                up.hash_key.span(),
                format!("hash_key {key:?}: use \"client\", \"uri\" or \"header:NAME\""),
            ));
        }
        if let Some(h) = &up.health {
            if !h.path.starts_with('/') {
                return Err(src.err(
                    u.span(),
                    format!("upstream {name:?}: health.path must start with '/'"),
                ));
            }
            if h.rise == 0 || h.fall == 0 {
                return Err(src.err(
                    u.span(),
                    format!("upstream {name:?}: health.rise and health.fall must be at least 1"),
                ));
            }
        }
    }
    let known = |target: &Spanned<String>, what: &str| -> Result<(), ConfigError> {
        let (t, uri) = split_uri(target.get_ref());
        if let Some(uri) = uri {
            if what != "proxy_pass" {
                return Err(src.err(target.span(), "a stream forwards bytes: it has no URI part"));
            }
            if uri.contains('$') {
                return Err(src.err(
                    target.span(),
                    "proxy_pass with variables is not supported (use rewrite ... break)",
                ));
            }
            if !uri.bytes().all(|b| b.is_ascii_graphic()) || uri.contains('#') {
                return Err(src.err(
                    target.span(),
                    format!("proxy_pass URI part {uri:?} must be a path of printable characters without '#'"),
                ));
            }
        }
        let grpc = is_grpc(t);
        if grpc {
            if what != "proxy_pass" {
                return Err(src.err(target.span(), "grpc:// and grpcs:// are for proxy_pass"));
            }
            if uri.is_some() {
                return Err(src.err(
                    target.span(),
                    "grpc:// has no URI part: a call goes to the path of its method (rewrite the \
                     path with `rewrite ... break` instead)",
                ));
            }
            let named = upstreams
                .iter()
                .find(|u| u.get_ref().name.get_ref() == scheme_less(t));
            if let Some(u) = named.filter(|u| u.get_ref().proxy_protocol != ProxyProtocol::Off) {
                return Err(src.err(
                    target.span(),
                    format!(
                        "upstream {:?} sends a PROXY header, which a multiplexed gRPC connection \
                         (shared by many clients) cannot: set proxy_protocol = \"off\" or use \
                         another upstream",
                        u.get_ref().name.get_ref()
                    ),
                ));
            }
        }
        // A scheme that says TLS names an upstream that has none: the traffic would go in
        // clear text, which the operator did not write.
        if what == "proxy_pass" && (t.starts_with("https://") || t.starts_with("grpcs://")) {
            let named = upstreams
                .iter()
                .find(|u| u.get_ref().name.get_ref() == scheme_less(t));
            if let Some(u) = named.filter(|u| u.get_ref().tls.is_none()) {
                let name = u.get_ref().name.get_ref();
                let plain = if grpc { "grpc" } else { "http" };
                return Err(src.err(
                    target.span(),
                    format!(
                        "{t:?} asks for TLS but [[upstream]] {name:?} has no tls: add \
                         `tls = {{}}` (or a CA with `tls = {{ ca = \"...\" }}`) to the upstream, \
                         or write \"{plain}://{name}\""
                    ),
                ));
            }
        }
        if names.contains(&t) || names.contains(&scheme_less(t)) {
            return Ok(());
        }
        let addr =
            https_addr(t).unwrap_or_else(|| t.strip_prefix("http://").unwrap_or(t).to_string());
        let addr = if grpc { grpc_addr(t) } else { addr };
        if what == "proxy_pass"
            && !t.starts_with("http://")
            && !t.starts_with("https://")
            && !grpc
            && !t.contains(':')
        {
            return Err(src.err(
                target.span(),
                format!("no [[upstream]] named {t:?} (or write \"http://host:port\")"),
            ));
        }
        if grpc && t.starts_with("grpc://") && !scheme_less(t).contains(':') {
            return Err(src.err(
                target.span(),
                format!(
                    "no [[upstream]] named {:?} (or write \"grpc://host:port\")",
                    scheme_less(t)
                ),
            ));
        }
        if t.starts_with("https://") && what != "proxy_pass" {
            return Err(src.err(
                target.span(),
                "https:// is for proxy_pass; a stream to a TLS upstream names an [[upstream]] with tls",
            ));
        }
        resolve_addr(addr.trim_end_matches('/'))
            .map(drop)
            .map_err(|m| src.err(target.span(), m))
    };
    for s in servers {
        for l in &s.get_ref().location {
            if let Some(p) = &l.get_ref().proxy_pass {
                known(p, "proxy_pass")?;
            }
        }
    }
    for (i, st) in streams.iter().enumerate() {
        let s = st.get_ref();
        if s.listen.is_empty() {
            return Err(src.err(st.span(), "stream has an empty listen list"));
        }
        known(&s.proxy_pass, "stream")?;
        validate_protocol(s, &streams[..i], src)?;
        if s.protocol == StreamProtocol::Udp {
            continue; // a UDP port is no TCP server's
        }
        if let (Some(t), false) = (&s.tls, s.sni.is_empty()) {
            return Err(src.err(
                t.span(),
                "a stream with sni passes TLS through and cannot also terminate it (tls): \
                 drop one",
            ));
        }
        for (name, target) in &s.sni {
            let n = name.get_ref();
            let bare = n.strip_prefix("*.").unwrap_or(n);
            if bare.is_empty()
                || bare.contains('*')
                || !bare
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
            {
                return Err(src.err(
                    name.span(),
                    format!("sni name {n:?}: write a host name or *.suffix"),
                ));
            }
            known(target, "sni")?;
        }
        for a in &s.listen {
            let clash = servers.iter().any(|sv| {
                sv.get_ref()
                    .listen
                    .iter()
                    .any(|b| b.get_ref() == a.get_ref())
            });
            if clash {
                return Err(src.err(
                    a.span(),
                    format!("{} is also an HTTP server's listen address", a.get_ref()),
                ));
            }
        }
    }
    Ok(())
}

/// What only one protocol has: UDP streams take no TLS, SNI routing or PROXY header;
/// `responses`, `max_sessions`, `max_datagram_size` and `rcvbuf` are for UDP. Two UDP streams cannot
/// share an address (`earlier`: the streams before this one).
fn validate_protocol(
    s: &Stream,
    earlier: &[Spanned<Stream>],
    src: &Source,
) -> Result<(), ConfigError> {
    if s.protocol == StreamProtocol::Tcp {
        let udp_only = [
            s.responses.as_ref().map(|v| ("responses", v.span())),
            s.max_sessions.as_ref().map(|v| ("max_sessions", v.span())),
            s.max_datagram_size
                .as_ref()
                .map(|v| ("max_datagram_size", v.span())),
            s.rcvbuf.as_ref().map(|v| ("rcvbuf", v.span())),
        ];
        if let Some((key, span)) = udp_only.into_iter().flatten().next() {
            return Err(src.err(
                span,
                format!("{key} is for UDP streams: add protocol = \"udp\" or drop it"),
            ));
        }
        return Ok(());
    }
    if let Some(t) = &s.tls {
        return Err(src.err(t.span(), "tls is for TCP streams (DTLS is not supported)"));
    }
    if let Some((name, _)) = s.sni.iter().next() {
        return Err(src.err(
            name.span(),
            "sni routing reads a TLS ClientHello on TCP: not for UDP streams",
        ));
    }
    if s.proxy_protocol {
        return Err(src.err(
            s.listen[0].span(),
            "proxy_protocol (a PROXY header before the data) is for TCP streams",
        ));
    }
    if let Some(m) = &s.max_sessions {
        if *m.get_ref() == 0 || *m.get_ref() > 1_000_000 {
            return Err(src.err(m.span(), "max_sessions must be between 1 and 1000000"));
        }
    }
    if let Some(m) = &s.max_datagram_size {
        if m.get_ref().0 == 0 || m.get_ref().0 > 65507 {
            return Err(src.err(
                m.span(),
                "max_datagram_size must be between 1 and 65507 bytes (the largest UDP payload)",
            ));
        }
    }
    for a in &s.listen {
        let twice = earlier.iter().any(|e| {
            let e = e.get_ref();
            e.protocol == StreamProtocol::Udp && e.listen.iter().any(|b| b.get_ref() == a.get_ref())
        });
        if twice {
            return Err(src.err(
                a.span(),
                format!(
                    "udp {} is already another UDP stream's address",
                    a.get_ref()
                ),
            ));
        }
    }
    Ok(())
}

impl Stream {
    /// `idle_timeout`, or its default for the protocol.
    pub fn idle(&self) -> std::time::Duration {
        match (self.idle_timeout, self.protocol) {
            (Some(d), _) => d.0,
            (None, StreamProtocol::Tcp) => d600().0,
            (None, StreamProtocol::Udp) => std::time::Duration::from_secs(30),
        }
    }
}

fn default_hash_key() -> Spanned<String> {
    Spanned::new(0..0, "client".to_string())
}
fn default_keepalive() -> u32 {
    32
}
fn default_retries() -> u32 {
    2
}
fn default_health_path() -> String {
    "/".into()
}
fn one() -> u32 {
    1
}
fn two() -> u32 {
    2
}
fn three() -> u32 {
    3
}
fn secs(n: u64) -> Dur {
    Dur(std::time::Duration::from_secs(n))
}
fn d1() -> Dur {
    secs(1)
}
fn d2() -> Dur {
    secs(2)
}
fn d5() -> Dur {
    secs(5)
}
fn d10() -> Dur {
    secs(10)
}
fn d60() -> Dur {
    secs(60)
}
fn d600() -> Dur {
    secs(600)
}

/// Splits a `proxy_pass` value into the server part and its URI part, as nginx reads
/// `http://app/v2/`: only a value with a scheme has one, and a lone `/` is one too (a location
/// `/api/` proxied to `http://app/` sends `/api/x` as `/x`).
pub fn split_uri(target: &str) -> (&str, Option<&str>) {
    let Some(start) = target.find("://").map(|i| i + 3) else {
        return (target, None);
    };
    match target[start..].find('/') {
        Some(i) => (&target[..start + i], Some(&target[start + i..])),
        None => (target, None),
    }
}

/// `http://name`, `https://name`, `grpc://name` or `grpcs://name` without the scheme (to
/// find an `[[upstream]]` by name).
pub fn scheme_less(target: &str) -> &str {
    ["http://", "https://", "grpc://", "grpcs://"]
        .iter()
        .find_map(|p| target.strip_prefix(p))
        .unwrap_or(target)
}

/// Whether a `proxy_pass` value proxies gRPC (HTTP/2 to the upstream).
pub fn is_grpc(target: &str) -> bool {
    target.starts_with("grpc://") || target.starts_with("grpcs://")
}

/// The address of a `grpc://host:port` or `grpcs://host[:port]` target (443 for grpcs
/// without a port).
pub fn grpc_addr(target: &str) -> String {
    match target.strip_prefix("grpcs://") {
        Some(rest) => https_addr(&format!("https://{rest}")).unwrap_or_default(),
        None => scheme_less(target).trim_end_matches('/').to_string(),
    }
}

/// `https://host[:port][/]` (or `grpcs://`) → `host:port` (443 when none is written).
pub fn https_addr(target: &str) -> Option<String> {
    let rest = target
        .strip_prefix("https://")
        .or_else(|| target.strip_prefix("grpcs://"))?
        .trim_end_matches('/');
    let has_port = match rest.strip_prefix('[') {
        Some(v6) => v6.contains("]:"),
        None => rest.contains(':'),
    };
    Some(if has_port {
        rest.to_string()
    } else {
        format!("{rest}:443")
    })
}
