//! Transparent proxying: listeners that accept connections (and datagrams) for addresses that
//! are not this host's (`transparent = true` on a `[[server]]` or `[[stream]]`: `IP_TRANSPARENT`),
//! upstream connections from the client's own address (`bind = "client"` on an `[[upstream]]`
//! or a `[[stream]]`), and `[tproxy]`, what `ringx tproxy rules` turns into the packet
//! filter's TPROXY rules and the policy routing that brings the traffic to those listeners.
//!
//! ```toml
//! [[server]]
//! listen = ["0.0.0.0:8080"]
//! transparent = true            # accepts connections TPROXY steers here, for any address
//!   [[server.location]]
//!   path = "/"
//!   proxy_pass = "web"
//!
//! [[upstream]]
//! name = "web"
//! servers = ["10.0.2.2:80"]
//! bind = "client"               # the servers see the client's address, not this host's
//!
//! [tproxy]
//! mark = 1                      # fwmark of diverted packets (default 1)
//! table = 100                   # routing table that delivers them locally (default 100)
//! backend = "auto"              # "nft", "iptables", or "auto": nft when installed
//!   [[tproxy.divert]]
//!   protocol = "tcp"
//!   ports = [80]                # destination ports steered to the listener
//!   destinations = ["10.0.2.0/24"]   # default: any address
//!   interfaces = ["eth1"]       # default: any interface
//!   to = "0.0.0.0:8080"         # a transparent listen address of this configuration
//! ```
//!
//! Replies from the servers to the client's address come back to this host only if routing
//! sends them here (this host is their gateway); the rules then deliver them to ringx's
//! socket (`-m socket` / `socket transparent 1`).

use std::net::{IpAddr, SocketAddr};

use serde::Deserialize;
use toml::Spanned;

use crate::error::{ConfigError, Source};
use crate::upstream::{Stream, StreamProtocol, Upstream};
use crate::vhost::Server;

/// `[tproxy]`.
#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct Tproxy {
    /// The fwmark bit (and mask) set on diverted packets.
    #[serde(default = "default_mark")]
    pub mark: Spanned<u32>,
    /// The routing table that delivers marked packets locally (`local 0.0.0.0/0 dev lo`).
    #[serde(default = "default_table")]
    pub table: Spanned<u32>,
    #[serde(default)]
    pub backend: Backend,
    #[serde(default)]
    pub divert: Vec<Spanned<Divert>>,
}

/// Which packet filter the rules are written for.
#[derive(Debug, Deserialize, Clone, Copy, Default, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// nft when it is installed, else iptables.
    #[default]
    Auto,
    Nft,
    Iptables,
}

/// One `[[tproxy.divert]]`: traffic to steer into a transparent listener.
#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct Divert {
    #[serde(default)]
    pub protocol: StreamProtocol,
    pub ports: Spanned<Vec<u16>>,
    /// Destination prefixes (`addr/len`); empty: any destination.
    #[serde(default)]
    pub destinations: Vec<Spanned<String>>,
    /// Incoming interfaces; empty: any.
    #[serde(default)]
    pub interfaces: Vec<Spanned<String>>,
    /// The transparent listener that gets the traffic.
    pub to: Spanned<SocketAddr>,
}

/// A destination prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prefix {
    pub addr: IpAddr,
    pub len: u8,
}

impl std::fmt::Display for Prefix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

/// `addr/len` (or a bare address: all its bits).
pub fn parse_prefix(s: &str) -> Result<Prefix, String> {
    let (a, l) = s.split_once('/').unwrap_or((s, ""));
    let addr: IpAddr = a
        .parse()
        .map_err(|_| format!("{s:?}: write an address prefix such as 10.0.0.0/8"))?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    let len = match l {
        "" => max,
        l => l
            .parse::<u8>()
            .ok()
            .filter(|&n| n <= max)
            .ok_or_else(|| format!("{s:?}: the prefix length must be 0..={max}"))?,
    };
    Ok(Prefix { addr, len })
}

fn default_mark() -> Spanned<u32> {
    Spanned::new(0..0, 1)
}
fn default_table() -> Spanned<u32> {
    Spanned::new(0..0, 100)
}

/// What `bind` may say: "client" (the only value so far: nginx's `proxy_bind $remote_addr
/// transparent`).
fn check_bind(b: &Spanned<String>, src: &Source) -> Result<(), ConfigError> {
    if b.get_ref() != "client" {
        return Err(src.err(
            b.span(),
            format!(
                "bind {:?}: the only value is \"client\" (connect from the client's address)",
                b.get_ref()
            ),
        ));
    }
    Ok(())
}

/// The transparent listen addresses of the configuration, with their protocol.
pub fn transparent_listeners(
    servers: &[Spanned<Server>],
    streams: &[Spanned<Stream>],
) -> Vec<(SocketAddr, StreamProtocol)> {
    let mut out: Vec<(SocketAddr, StreamProtocol)> = Vec::new();
    let tcp = servers
        .iter()
        .map(Spanned::get_ref)
        .filter(|s| s.transparent)
        .flat_map(|s| s.listen.iter().map(|a| (*a.get_ref(), StreamProtocol::Tcp)));
    let streams = streams
        .iter()
        .map(Spanned::get_ref)
        .filter(|s| s.transparent)
        .flat_map(|s| s.listen.iter().map(|a| (*a.get_ref(), s.protocol)));
    for l in tcp.chain(streams) {
        if !out.contains(&l) {
            out.push(l);
        }
    }
    out
}

/// Whether anything needs `IP_TRANSPARENT` (a transparent listener, or `bind = "client"`).
pub fn needs_transparent(
    servers: &[Spanned<Server>],
    streams: &[Spanned<Stream>],
    upstreams: &[Spanned<Upstream>],
) -> bool {
    !transparent_listeners(servers, streams).is_empty()
        || streams.iter().any(|s| s.get_ref().bind.is_some())
        || upstreams.iter().any(|u| u.get_ref().bind.is_some())
}

/// The parts of the configuration [`validate`] reads.
pub(crate) struct Parts<'a> {
    pub server: &'a [Spanned<Server>],
    pub stream: &'a [Spanned<Stream>],
    pub upstream: &'a [Spanned<Upstream>],
    /// `[runtime] user`.
    pub user: Option<&'a Spanned<String>>,
}

/// Checks `bind` values, servers sharing an address that disagree about `transparent`,
/// `bind = "client"` with `[runtime] user`, and every `[[tproxy.divert]]`.
pub(crate) fn validate(
    tp: Option<&Tproxy>,
    cfg: Parts<'_>,
    src: &Source,
) -> Result<(), ConfigError> {
    for u in cfg.upstream {
        if let Some(b) = &u.get_ref().bind {
            check_bind(b, src)?;
        }
    }
    for s in cfg.stream {
        if let Some(b) = &s.get_ref().bind {
            check_bind(b, src)?;
        }
    }
    let binds = cfg
        .upstream
        .iter()
        .filter_map(|u| u.get_ref().bind.as_ref())
        .chain(cfg.stream.iter().filter_map(|s| s.get_ref().bind.as_ref()))
        .next();
    if let (Some(b), Some(user)) = (binds, cfg.user) {
        return Err(src.err(
            b.span(),
            format!(
                "bind = \"client\" sets IP_TRANSPARENT on every upstream socket, which needs \
                 CAP_NET_ADMIN after privileges are dropped to {:?}: remove [runtime] user or \
                 the bind",
                user.get_ref()
            ),
        ));
    }
    for s in cfg.stream {
        let st = s.get_ref();
        if st.transparent && st.protocol == StreamProtocol::Udp {
            return Err(src.err(
                st.listen[0].span(),
                "transparent is for TCP listeners: an intercepted datagram's answer would have \
                 to leave from its original destination address and port, which one UDP \
                 socket cannot do; send clients to the UDP stream's own address (bind = \
                 \"client\" still shows the servers the client's address)",
            ));
        }
    }
    for (i, s) in cfg.server.iter().enumerate() {
        for a in &s.get_ref().listen {
            let other = cfg.server[..i].iter().find(|o| {
                o.get_ref().transparent != s.get_ref().transparent
                    && o.get_ref()
                        .listen
                        .iter()
                        .any(|b| b.get_ref() == a.get_ref())
            });
            if other.is_some() {
                return Err(src.err(
                    a.span(),
                    format!(
                        "{} is transparent for one server and not for another: one socket \
                         serves the address, so set transparent alike on both",
                        a.get_ref()
                    ),
                ));
            }
        }
    }
    let Some(tp) = tp else {
        return Ok(());
    };
    if tp.mark.get_ref().count_ones() == 0 {
        return Err(src.err(tp.mark.span(), "mark must not be 0"));
    }
    let table = *tp.table.get_ref();
    if table == 0 || (253..=255).contains(&table) {
        return Err(src.err(
            tp.table.span(),
            "table must be a free routing table: not 0, 253 (default), 254 (main) or 255 (local)",
        ));
    }
    let listeners = transparent_listeners(cfg.server, cfg.stream);
    for d in &tp.divert {
        let dv = d.get_ref();
        if dv.ports.get_ref().is_empty() || dv.ports.get_ref().contains(&0) {
            return Err(src.err(
                dv.ports.span(),
                "ports: list the destination ports, 1..65535",
            ));
        }
        let to = *dv.to.get_ref();
        if !listeners.contains(&(to, dv.protocol)) {
            let proto = match dv.protocol {
                StreamProtocol::Tcp => "tcp",
                StreamProtocol::Udp => "udp",
            };
            return Err(src.err(
                dv.to.span(),
                format!(
                    "{to} ({proto}) is not a transparent listen address here: divert to a \
                     [[server]] or [[stream]] listen address with transparent = true"
                ),
            ));
        }
        for p in &dv.destinations {
            let pf = parse_prefix(p.get_ref()).map_err(|m| src.err(p.span(), m))?;
            if pf.addr.is_ipv4() != to.is_ipv4() {
                return Err(src.err(
                    p.span(),
                    format!("{pf} and the listener {to} are of different address families"),
                ));
            }
        }
        for i in &dv.interfaces {
            let n = i.get_ref();
            if n.is_empty() || n.len() > 15 || n.contains(['/', ' ', '"']) {
                return Err(src.err(i.span(), format!("{n:?} is not an interface name")));
            }
        }
    }
    Ok(())
}
