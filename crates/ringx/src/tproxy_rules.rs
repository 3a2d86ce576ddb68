//! The rules transparent proxying needs, from a configuration's `[tproxy]` (seed 004's
//! recipe, generalised):
//!
//! - policy routing: packets with the fwmark go to a table whose one route delivers every
//!   address locally (`ip rule add fwmark M/M lookup T`, `ip route add local 0.0.0.0/0 dev lo
//!   table T`; the same with `-6` for IPv6);
//! - in the mangle table's PREROUTING: packets of a transparent socket ringx holds (the
//!   replies of servers to a client's address, the rest of a diverted connection) get the
//!   mark (`-m socket --transparent` / `socket transparent 1`), and traffic to the diverted
//!   ports gets the TPROXY target to its listener, with the mark.
//!
//! Each rule is a [`Step`]: the command that adds it and the one that takes exactly it away,
//! so `ringx tproxy rules --remove` undoes what `--apply` did and nothing else.

use std::net::{IpAddr, SocketAddr};

use ringx_config::tproxy::{parse_prefix, Backend, Tproxy};
use ringx_config::upstream::StreamProtocol;
use ringx_config::Config;

/// One rule: how to add it and how to remove exactly it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    pub add: Vec<String>,
    pub del: Vec<String>,
    /// Text fed to the command's standard input (`nft -f -`).
    pub stdin: Option<String>,
}

/// The rules for one configuration and backend, in the order they are added.
#[derive(Debug, PartialEq, Eq)]
pub struct Plan {
    pub backend: Backend,
    pub steps: Vec<Step>,
}

fn argv(s: &str) -> Vec<String> {
    s.split(' ').map(str::to_string).collect()
}

fn step(add: &str, del: &str) -> Step {
    Step {
        add: argv(add),
        del: argv(del),
        stdin: None,
    }
}

fn proto(p: StreamProtocol) -> &'static str {
    match p {
        StreamProtocol::Tcp => "tcp",
        StreamProtocol::Udp => "udp",
    }
}

/// The address families the rules must cover: those of the diverted listeners and of the
/// servers reached from the client's address.
fn families(cfg: &Config, tp: &Tproxy) -> (bool, bool) {
    let mut v4 = false;
    let mut v6 = false;
    let mut see = |ip: IpAddr| match ip {
        IpAddr::V4(_) => v4 = true,
        IpAddr::V6(_) => v6 = true,
    };
    for d in &tp.divert {
        see(d.get_ref().to.get_ref().ip());
    }
    let bound: Vec<&str> = cfg
        .upstream
        .iter()
        .map(|u| u.get_ref())
        .filter(|u| u.bind.is_some())
        .map(|u| u.name.get_ref().as_str())
        .chain(
            cfg.stream
                .iter()
                .map(|s| s.get_ref())
                .filter(|s| s.bind.is_some())
                .map(|s| s.proxy_pass.get_ref().as_str()),
        )
        .collect();
    for u in &cfg.upstream {
        let u = u.get_ref();
        if bound.contains(&u.name.get_ref().as_str()) {
            for s in &u.servers {
                if let Ok(r) = ringx_config::upstream::ServerEntry::resolve(
                    s,
                    &ringx_config::Source { name: "", text: "" },
                ) {
                    see(r.addr.ip());
                }
            }
        }
    }
    if !v4 && !v6 {
        v4 = true;
    }
    (v4, v6)
}

/// The protocols whose transparent sockets need the mark: those diverted, and those of
/// `bind = "client"` connections (TCP for upstreams and TCP streams, UDP for UDP streams).
fn protocols(cfg: &Config, tp: &Tproxy) -> Vec<StreamProtocol> {
    let mut out = Vec::new();
    let mut add = |p| {
        if !out.contains(&p) {
            out.push(p);
        }
    };
    for d in &tp.divert {
        add(d.get_ref().protocol);
    }
    if cfg.upstream.iter().any(|u| u.get_ref().bind.is_some()) {
        add(StreamProtocol::Tcp);
        for s in &cfg.stream {
            add(s.get_ref().protocol);
        }
    }
    for s in &cfg.stream {
        if s.get_ref().bind.is_some() {
            add(s.get_ref().protocol);
        }
    }
    if out.is_empty() {
        out.push(StreamProtocol::Tcp);
    }
    out
}

/// Which backend `Auto` means here: nft when it is installed.
pub fn resolve_backend(b: Backend) -> Backend {
    match b {
        Backend::Auto => {
            let found = ["/usr/sbin/nft", "/sbin/nft", "/usr/bin/nft"]
                .iter()
                .any(|p| std::path::Path::new(p).exists());
            if found {
                Backend::Nft
            } else {
                Backend::Iptables
            }
        }
        b => b,
    }
}

/// The rules for `cfg`'s `[tproxy]` (the defaults when it has none) with `backend` (not
/// `Auto`: see [`resolve_backend`]).
pub fn plan(cfg: &Config, backend: Backend) -> Plan {
    let default = Tproxy {
        mark: toml::Spanned::new(0..0, 1),
        table: toml::Spanned::new(0..0, 100),
        backend: Backend::Auto,
        divert: Vec::new(),
    };
    let tp = cfg.tproxy.as_ref().unwrap_or(&default);
    let mark = format!("{:#x}", tp.mark.get_ref());
    let table = *tp.table.get_ref();
    let (v4, v6) = families(cfg, tp);
    let mut steps = Vec::new();
    for (on, fam, any) in [(v4, "-4", "0.0.0.0/0"), (v6, "-6", "::/0")] {
        if !on {
            continue;
        }
        steps.push(step(
            &format!("ip {fam} rule add fwmark {mark}/{mark} lookup {table}"),
            &format!("ip {fam} rule del fwmark {mark}/{mark} lookup {table}"),
        ));
        steps.push(step(
            &format!("ip {fam} route add local {any} dev lo table {table}"),
            &format!("ip {fam} route del local {any} dev lo table {table}"),
        ));
    }
    let protos = protocols(cfg, tp);
    match backend {
        Backend::Nft | Backend::Auto => steps.push(nft_step(tp, &mark, table, &protos, v4, v6)),
        Backend::Iptables => {
            for (on, cmd) in [(v4, "iptables"), (v6, "ip6tables")] {
                if on {
                    iptables_steps(&mut steps, cmd, tp, &mark, table, &protos);
                }
            }
        }
    }
    Plan { backend, steps }
}

/// The TPROXY target's `--on-ip`/`to` address of listener `to` (none for a wildcard).
fn on_ip(to: SocketAddr) -> Option<IpAddr> {
    (!to.ip().is_unspecified()).then_some(to.ip())
}

fn iptables_steps(
    steps: &mut Vec<Step>,
    cmd: &str,
    tp: &Tproxy,
    mark: &str,
    table: u32,
    protos: &[StreamProtocol],
) {
    let v6 = cmd == "ip6tables";
    let divert = format!("RINGX_DIVERT_{table}");
    let chain = format!("RINGX_TPROXY_{table}");
    let ipt = |verb: &str, rest: &str| format!("{cmd} -w -t mangle {verb} {rest}");
    steps.push(step(&ipt("-N", &divert), &ipt("-X", &divert)));
    for rule in [
        format!("-j MARK --set-xmark {mark}/{mark}"),
        "-j ACCEPT".into(),
    ] {
        let r = format!("{divert} {rule}");
        steps.push(step(&ipt("-A", &r), &ipt("-D", &r)));
    }
    steps.push(step(&ipt("-N", &chain), &ipt("-X", &chain)));
    for p in protos {
        let r = format!(
            "{chain} -p {} -m socket --transparent -j {divert}",
            proto(*p)
        );
        steps.push(step(&ipt("-A", &r), &ipt("-D", &r)));
    }
    for d in &tp.divert {
        let d = d.get_ref();
        let to = *d.to.get_ref();
        if to.is_ipv6() != v6 {
            continue;
        }
        let ifaces: Vec<Option<&str>> = match d.interfaces.is_empty() {
            true => vec![None],
            false => d
                .interfaces
                .iter()
                .map(|i| Some(i.get_ref().as_str()))
                .collect(),
        };
        let dests: Vec<Option<String>> = match d.destinations.is_empty() {
            true => vec![None],
            false => d
                .destinations
                .iter()
                .filter_map(|p| parse_prefix(p.get_ref()).ok())
                .map(|p| Some(p.to_string()))
                .collect(),
        };
        let ports: Vec<String> = d.ports.get_ref().iter().map(u16::to_string).collect();
        for i in &ifaces {
            for dst in &dests {
                let mut r = format!("{chain} -p {}", proto(d.protocol));
                if let Some(i) = i {
                    r += &format!(" -i {i}");
                }
                if let Some(dst) = dst {
                    r += &format!(" -d {dst}");
                }
                r += &format!(" -m multiport --dports {}", ports.join(","));
                r += &format!(" -j TPROXY --on-port {}", to.port());
                if let Some(ip) = on_ip(to) {
                    r += &format!(" --on-ip {ip}");
                }
                r += &format!(" --tproxy-mark {mark}/{mark}");
                steps.push(step(&ipt("-A", &r), &ipt("-D", &r)));
            }
        }
    }
    let jump = format!("PREROUTING -j {chain}");
    steps.push(step(
        &ipt("-I", &format!("PREROUTING 1 -j {chain}")),
        &ipt("-D", &jump),
    ));
}

fn nft_step(
    tp: &Tproxy,
    mark: &str,
    table: u32,
    protos: &[StreamProtocol],
    v4: bool,
    v6: bool,
) -> Step {
    let name = format!("ringx_tproxy_{table}");
    let set_mark = format!("meta mark set meta mark | {mark} accept");
    let mut rules = Vec::new();
    let ps: Vec<&str> = protos.iter().map(|p| proto(*p)).collect();
    rules.push(format!(
        "meta l4proto {{ {} }} socket transparent 1 {set_mark}",
        ps.join(", ")
    ));
    for d in &tp.divert {
        let d = d.get_ref();
        let to = *d.to.get_ref();
        let fam = if to.is_ipv4() { "ip" } else { "ip6" };
        if (to.is_ipv4() && !v4) || (to.is_ipv6() && !v6) {
            continue;
        }
        let mut m = String::new();
        if !d.interfaces.is_empty() {
            let names: Vec<String> = d
                .interfaces
                .iter()
                .map(|i| format!("\"{}\"", i.get_ref()))
                .collect();
            m += &format!("iifname {{ {} }} ", names.join(", "));
        }
        let dests: Vec<String> = d
            .destinations
            .iter()
            .filter_map(|p| parse_prefix(p.get_ref()).ok())
            .map(|p| p.to_string())
            .collect();
        if dests.is_empty() {
            m += &format!(
                "meta nfproto {} ",
                if to.is_ipv4() { "ipv4" } else { "ipv6" }
            );
        } else {
            m += &format!("{fam} daddr {{ {} }} ", dests.join(", "));
        }
        let ports: Vec<String> = d.ports.get_ref().iter().map(u16::to_string).collect();
        m += &format!(
            "meta l4proto {p} th dport {{ {} }} ",
            ports.join(", "),
            p = proto(d.protocol)
        );
        let target = match (on_ip(to), to) {
            (Some(IpAddr::V6(ip)), _) => format!("[{ip}]:{}", to.port()),
            (Some(ip), _) => format!("{ip}:{}", to.port()),
            (None, _) => format!(":{}", to.port()),
        };
        m += &format!("tproxy {fam} to {target} {set_mark}");
        rules.push(m);
    }
    let mut script = format!(
        "table inet {name} {{\n  chain prerouting {{\n    type filter hook prerouting priority mangle; policy accept;\n"
    );
    for r in rules {
        script += &format!("    {r}\n");
    }
    script += "  }\n}\n";
    Step {
        add: argv("nft -f -"),
        del: argv(&format!("nft delete table inet {name}")),
        stdin: Some(script),
    }
}

/// A command as a shell would take it (arguments with anything but `[A-Za-z0-9_./:,=+-]`
/// quoted).
pub fn shell(args: &[String]) -> String {
    args.iter()
        .map(|a| {
            let plain = !a.is_empty()
                && a.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"_./:,=+-".contains(&b));
            if plain {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', "'\\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
#[path = "tproxy_rules_tests.rs"]
mod tests;
