//! `[lb]`: the XDP L4 load balancer (crate ringx-lb), run by `ringx lb run` (or by `ringx
//! serve`, beside [[server]]s, when it lists devices) and edited by the other `ringx lb`
//! commands. A file may hold only `[lb]` (a balancer host serves nothing itself), or `[lb]`
//! beside the rest of a configuration.
//!
//! ```toml
//! [lb]
//! devices = ["eth0"]           # where `ringx lb run` (or `ringx serve`) attaches it
//! mode = "native"              # or "generic"
//! encap = "gue"                # or "ipip" (backends: `ringx lb backend`, or ipip/fou devices)
//! gue_port = 6080
//! source_v4 = "10.0.0.1"       # outer source; default: the route's source to a backend
//! source_v6 = "fd00::1"
//! conn_table_size = 262144
//! too_big_rate = 1000          # ICMP too-big answers per second per CPU (0: no limit)
//! too_big_burst = 50
//! pin_dir = "/sys/fs/bpf/ringx-lb"
//! detach_on_exit = false
//! behind_filter = "/sys/fs/bpf/ringx"   # instead of devices: in the [xdp] filter's chain slot
//! chain = false                # true: what it passes goes on to software steering on its device
//!
//! [[lb.service]]
//! vip = "198.51.100.1:80"
//! proto = "tcp"                # or "udp"
//! backends = ["10.0.0.11", { addr = "10.0.0.12", weight = 2 }]
//! health = { check = "http", path = "/", interval = "1s", timeout = "500ms", rise = 2, fall = 2 }
//!
//! [[lb.service]]               # HTTP/3: QUIC routed by the host its connection ID names
//! vip = "198.51.100.1:443"
//! proto = "udp"
//! backends = [{ addr = "10.0.0.11", quic_host = 1 }, { addr = "10.0.0.12", quic_host = 2 }]
//! ```
//!
//! `quic_host` is the id the backend's ringx puts in every QUIC connection ID it issues
//! (`[http] quic_host` there, the same number): the balancer sends a packet that names it to
//! that backend, whatever address or port the client now has (connection migration).

use std::collections::BTreeSet;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use toml::Spanned;

use crate::error::{ConfigError, Source};
use crate::units::Dur;
use crate::xdp::{DevName, XdpMode};

/// Most services and most backends per service (the program's map sizes; see ringx-lb).
pub const MAX_SERVICES: usize = 64;
pub const MAX_BACKENDS_PER_SERVICE: usize = 655;
pub const MAX_WEIGHT: u32 = 100;
/// QUIC host ids: 1..=255 (0 is a ringx host alone, behind no balancer).
pub const MAX_QUIC_HOST: i64 = 255;

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Lb {
    #[serde(default)]
    pub devices: Vec<Spanned<DevName>>,
    #[serde(default)]
    pub mode: XdpMode,
    #[serde(default)]
    pub encap: Encap,
    #[serde(default = "default_gue_port")]
    pub gue_port: Spanned<u16>,
    pub source_v4: Option<Ipv4Addr>,
    pub source_v6: Option<Ipv6Addr>,
    #[serde(default = "default_conns")]
    pub conn_table_size: Spanned<u32>,
    /// ICMP too-big answers per second per CPU at most (0: no limit), as the kernel's
    /// net.ipv4.icmp_msgs_per_sec, and the burst allowed after a quiet spell.
    #[serde(default = "default_too_big_rate")]
    pub too_big_rate: Spanned<u32>,
    #[serde(default = "default_too_big_burst")]
    pub too_big_burst: Spanned<u32>,
    #[serde(default = "default_pin_dir")]
    pub pin_dir: PathBuf,
    #[serde(default)]
    pub detach_on_exit: bool,
    /// Run behind the XDP filter pinned in this directory (loaded with `chain`: `[xdp]
    /// chain = true`, or `ringx xdp attach --chain`), in its chain slot, on the filter's
    /// device: filter -> balancer -> pass.
    pub behind_filter: Option<Spanned<PathBuf>>,
    /// Hand what the balancer passes (traffic for no service) to the next stage in its chain
    /// slot: `[steering] mode = "software"` on the balancer's device goes there, making
    /// filter -> balancer -> steering on one device.
    #[serde(default)]
    pub chain: bool,
    #[serde(default, rename = "service")]
    pub services: Vec<Spanned<Service>>,
}

fn default_gue_port() -> Spanned<u16> {
    Spanned::new(0..0, 6080)
}
fn default_conns() -> Spanned<u32> {
    Spanned::new(0..0, 262_144)
}
fn default_too_big_rate() -> Spanned<u32> {
    Spanned::new(0..0, 1000)
}
fn default_too_big_burst() -> Spanned<u32> {
    Spanned::new(0..0, 50)
}
fn default_pin_dir() -> PathBuf {
    PathBuf::from("/sys/fs/bpf/ringx-lb")
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Encap {
    #[default]
    Gue,
    Ipip,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Proto {
    #[default]
    Tcp,
    Udp,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Service {
    pub vip: Spanned<SocketAddr>,
    #[serde(default)]
    pub proto: Proto,
    pub backends: Vec<Spanned<Backend>>,
    pub health: Option<Spanned<Health>>,
}

/// A backend: `"10.0.0.11"` or `{ addr = "10.0.0.11", weight = 2, quic_host = 7 }`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backend {
    pub addr: IpAddr,
    pub weight: u32,
    /// The host id its QUIC connection IDs carry (its `[http] quic_host`); UDP services only.
    pub quic_host: Option<u8>,
}

impl<'de> Deserialize<'de> for Backend {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct BackendVisitor;
        impl<'de> Visitor<'de> for BackendVisitor {
            type Value = Backend;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an address (\"10.0.0.11\") or { addr = \"10.0.0.11\", weight = 2 }")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Backend, E> {
                Ok(Backend {
                    addr: parse_addr(v)?,
                    weight: 1,
                    quic_host: None,
                })
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Backend, A::Error> {
                let mut addr = None;
                let mut weight = 1;
                let mut quic_host = None;
                while let Some(k) = m.next_key::<String>()? {
                    match k.as_str() {
                        "addr" => {
                            let s: String = m.next_value()?;
                            addr = Some(parse_addr::<A::Error>(&s)?);
                        }
                        "weight" => {
                            let w: i64 = m.next_value()?;
                            if !(1..=i64::from(MAX_WEIGHT)).contains(&w) {
                                return Err(de::Error::custom(format!(
                                    "weight {w}: between 1 and {MAX_WEIGHT}"
                                )));
                            }
                            weight = w as u32;
                        }
                        "quic_host" => {
                            let h: i64 = m.next_value()?;
                            if !(1..=MAX_QUIC_HOST).contains(&h) {
                                return Err(de::Error::custom(format!(
                                    "quic_host {h}: between 1 and {MAX_QUIC_HOST} (the host byte \
                                     of the backend's QUIC connection IDs: its [http] quic_host)"
                                )));
                            }
                            quic_host = Some(h as u8);
                        }
                        other => {
                            return Err(de::Error::unknown_field(
                                other,
                                &["addr", "weight", "quic_host"],
                            ))
                        }
                    }
                }
                let addr = addr.ok_or_else(|| de::Error::missing_field("addr"))?;
                Ok(Backend {
                    addr,
                    weight,
                    quic_host,
                })
            }
        }
        d.deserialize_any(BackendVisitor)
    }
}

fn x_pin(xdp: Option<&crate::xdp::Xdp>) -> String {
    xdp.map_or(String::new(), |x| x.pin_dir.display().to_string())
}

fn parse_addr<E: de::Error>(v: &str) -> Result<IpAddr, E> {
    v.parse().map_err(|_| {
        E::custom(format!(
            "backend {v:?} is not an IP address (no port: the service's port is used)"
        ))
    })
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Check {
    /// A TCP connection to the backend's address.
    #[default]
    Tcp,
    /// `GET path` on a new connection; 2xx or 3xx (or `expect`) is healthy.
    Http,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Health {
    #[serde(default)]
    pub check: Check,
    /// The port checked on each backend; default: the service's.
    pub port: Option<u16>,
    #[serde(default = "default_path")]
    pub path: String,
    pub expect: Option<u16>,
    #[serde(default = "default_interval")]
    pub interval: Dur,
    #[serde(default = "default_timeout")]
    pub timeout: Dur,
    #[serde(default = "two")]
    pub rise: u32,
    #[serde(default = "two")]
    pub fall: u32,
}

fn default_path() -> String {
    "/".into()
}
fn default_interval() -> Dur {
    Dur(std::time::Duration::from_secs(1))
}
fn default_timeout() -> Dur {
    Dur(std::time::Duration::from_millis(500))
}
fn two() -> u32 {
    2
}

/// The checks across values, each error at the value it concerns.
pub(crate) fn validate(
    lb: &Lb,
    xdp: Option<&crate::xdp::Xdp>,
    steering: &crate::steering::Steering,
    src: &Source,
) -> Result<(), ConfigError> {
    if lb.services.is_empty() {
        return Err(src.err(0..0, "[lb] has no [[lb.service]]: define at least one"));
    }
    if lb.services.len() > MAX_SERVICES {
        return Err(src.err(
            lb.services[MAX_SERVICES].span(),
            format!("more than {MAX_SERVICES} services in [lb]"),
        ));
    }
    if lb.encap == Encap::Gue && *lb.gue_port.get_ref() == 0 {
        return Err(src.err(lb.gue_port.span(), "gue_port must not be 0"));
    }
    if *lb.conn_table_size.get_ref() < 1024 {
        return Err(src.err(
            lb.conn_table_size.span(),
            "conn_table_size must be at least 1024 flows",
        ));
    }
    if *lb.too_big_burst.get_ref() == 0 {
        return Err(src.err(
            lb.too_big_burst.span(),
            "too_big_burst must be at least 1 (the answers a CPU may send back to back)",
        ));
    }
    if *lb.too_big_rate.get_ref() > 1_000_000_000 {
        return Err(src.err(
            lb.too_big_rate.span(),
            "too_big_rate is answers per second per CPU: at most 1000000000 (0: no limit)",
        ));
    }
    let mut devs = BTreeSet::new();
    for d in &lb.devices {
        if !devs.insert(&d.get_ref().0) {
            return Err(src.err(
                d.span(),
                format!("device {} is listed twice", d.get_ref().0),
            ));
        }
        if xdp.is_some_and(|x| x.dev.0 == d.get_ref().0) {
            return Err(src.err(
                d.span(),
                format!(
                    "{} already runs the [xdp] filter: to balance behind it on the same device, \
                     set chain = true in [xdp] and behind_filter = \"{}\" here instead of \
                     listing the device",
                    d.get_ref().0,
                    x_pin(xdp)
                ),
            ));
        }
    }
    if let Some(bf) = &lb.behind_filter {
        if let Some(x) = xdp.filter(|x| x.pin_dir == *bf.get_ref()) {
            if !x.chain {
                return Err(src.err(
                    bf.span(),
                    "behind_filter names the [xdp] filter, which has no chain slot: set \
                     chain = true in [xdp]",
                ));
            }
        }
    }
    // Software steering on a device the balancer ends (its own, or the filter's it stands
    // behind) goes in the balancer's chain slot.
    if steering.mode() == crate::steering::Mode::Software && !lb.chain {
        let behind_xdp = lb
            .behind_filter
            .as_ref()
            .and_then(|bf| xdp.filter(|x| x.pin_dir == *bf.get_ref()));
        let shared = steering.devices().iter().find(|d| {
            lb.devices.iter().any(|l| l.get_ref() == *d) || behind_xdp.is_some_and(|x| x.dev == **d)
        });
        if let Some(d) = shared {
            return Err(src.err(
                steering.mode.as_ref().map_or(0..0, |m| m.span()),
                format!(
                    "[steering] mode = \"software\" on {}, where the [lb] balancer runs: set \
                     chain = true in [lb] to steer what it passes behind it",
                    d.0
                ),
            ));
        }
    }
    let mut seen = BTreeSet::new();
    for s in &lb.services {
        let svc = s.get_ref();
        let vip = *svc.vip.get_ref();
        if vip.port() == 0 || vip.ip().is_unspecified() {
            return Err(src.err(
                svc.vip.span(),
                format!("vip {vip}: an address and a port other than 0"),
            ));
        }
        if !seen.insert((vip, svc.proto as u8)) {
            return Err(src.err(svc.vip.span(), format!("service {vip} is defined twice")));
        }
        if svc.backends.is_empty() {
            return Err(src.err(s.span(), format!("service {vip} has no backends")));
        }
        if svc.backends.len() > MAX_BACKENDS_PER_SERVICE {
            return Err(src.err(
                svc.backends[MAX_BACKENDS_PER_SERVICE].span(),
                format!("service {vip}: more than {MAX_BACKENDS_PER_SERVICE} backends"),
            ));
        }
        let mut addrs = BTreeSet::new();
        let mut hosts = std::collections::BTreeMap::new();
        for b in &svc.backends {
            let bb = b.get_ref();
            if !addrs.insert(bb.addr) {
                return Err(src.err(
                    b.span(),
                    format!("backend {} is listed twice in {vip}", bb.addr),
                ));
            }
            let Some(h) = bb.quic_host else { continue };
            if svc.proto != Proto::Udp {
                return Err(src.err(
                    b.span(),
                    format!(
                        "backend {}: quic_host is for a UDP service (QUIC); {vip} is TCP: \
                         add proto = \"udp\" to the service, or remove quic_host",
                        bb.addr
                    ),
                ));
            }
            if let Some(other) = hosts.insert(h, bb.addr) {
                return Err(src.err(
                    b.span(),
                    format!(
                        "backend {}: quic_host {h} is also {other}'s in {vip}; each backend \
                         needs its own (the balancer could not tell their connections apart)",
                        bb.addr
                    ),
                ));
            }
        }
        if let Some(h) = &svc.health {
            let hh = h.get_ref();
            if hh.interval.0.is_zero() || hh.timeout.0.is_zero() || hh.rise == 0 || hh.fall == 0 {
                return Err(src.err(
                    h.span(),
                    "health: interval and timeout above 0, rise and fall at least 1",
                ));
            }
            if hh.check == Check::Tcp && svc.proto == Proto::Udp && hh.port.is_none() {
                return Err(src.err(
                    h.span(),
                    format!(
                        "service {vip} is UDP: a TCP health check needs the port to check \
                         (health.port)"
                    ),
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::parse;

    fn err(text: &str) -> String {
        parse("lb.toml", text).unwrap_err().to_string()
    }

    const OK: &str = r#"
[lb]
devices = ["eth0"]
encap = "ipip"
source_v4 = "10.0.0.1"

[[lb.service]]
vip = "198.51.100.1:80"
backends = ["10.0.0.11", { addr = "10.0.0.12", weight = 2 }]
health = { check = "http", path = "/healthz", interval = "200ms" }

[[lb.service]]
vip = "[2001:db8::1]:53"
proto = "udp"
backends = ["fd00::11"]

[[lb.service]]
vip = "198.51.100.1:443"
proto = "udp"
backends = [{ addr = "10.0.0.11", quic_host = 1 }, { addr = "10.0.0.12", quic_host = 2 }]
"#;

    #[test]
    fn an_lb_only_file_is_valid() {
        let c = parse("lb.toml", OK).unwrap();
        let lb = c.lb.unwrap();
        assert_eq!(lb.services.len(), 3);
        let s = lb.services[0].get_ref();
        assert_eq!(s.backends[1].get_ref().weight, 2);
        assert_eq!(s.backends[1].get_ref().quic_host, None);
        let q = lb.services[2].get_ref();
        let hosts: Vec<_> = q.backends.iter().map(|b| b.get_ref().quic_host).collect();
        assert_eq!(hosts, [Some(1), Some(2)]);
        assert_eq!(
            s.health.as_ref().unwrap().get_ref().check,
            super::Check::Http
        );
        assert_eq!(lb.encap, super::Encap::Ipip);
        assert_eq!(
            (*lb.too_big_rate.get_ref(), *lb.too_big_burst.get_ref()),
            (1000, 50),
            "the kernel's own ICMP limits by default"
        );
        let c = parse(
            "lb.toml",
            &OK.replace("encap = \"ipip\"", "too_big_rate = 0\ntoo_big_burst = 5"),
        )
        .unwrap();
        let lb = c.lb.unwrap();
        assert_eq!(
            (*lb.too_big_rate.get_ref(), *lb.too_big_burst.get_ref()),
            (0, 5)
        );
    }

    #[test]
    fn behind_the_filter() {
        let text = format!(
            "{}\n[xdp]\ndev = \"eth1\"\npin_dir = \"/sys/fs/bpf/f\"\nchain = true\n",
            OK.replace("source_v4", "behind_filter = \"/sys/fs/bpf/f\"\nsource_v4")
        );
        let c = parse("lb.toml", &text).unwrap();
        assert_eq!(
            c.lb.unwrap().behind_filter.unwrap().get_ref(),
            &std::path::PathBuf::from("/sys/fs/bpf/f")
        );
        // Software steering on the filter's device goes behind the balancer, the last stage
        // there: only when the balancer hands on what it passes.
        let steer = |dev: &str| {
            format!(
                "[steering]\nmode = \"software\"\ndevice = \"{dev}\"\n[[server]]\n\
                 listen = [\"127.0.0.1:80\"]\n[[server.location]]\npath = \"/\"\n\
                 return = {{ status = 200 }}\n"
            )
        };
        let e = err(&format!("{text}{}", steer("eth1")));
        assert!(
            e.contains("where the [lb] balancer runs: set chain = true in [lb]"),
            "{e}"
        );
        let three = format!(
            "{}{}",
            text.replace("[lb]\n", "[lb]\nchain = true\n"),
            steer("eth1")
        );
        assert!(parse("lb.toml", &three).unwrap().lb.unwrap().chain);
        // On the balancer's own device, the same.
        let e = err(&format!("{OK}{}", steer("eth0")));
        assert!(e.contains("set chain = true in [lb]"), "{e}");
        parse(
            "lb.toml",
            &format!(
                "{}{}",
                OK.replace("[lb]\n", "[lb]\nchain = true\n"),
                steer("eth0")
            ),
        )
        .unwrap();
        // Elsewhere, nothing to chain.
        parse("lb.toml", &format!("{OK}{}", steer("eth7"))).unwrap();
    }

    #[test]
    fn errors_point_at_the_value() {
        let cases = [
            (
                OK.replace("\"10.0.0.11\", {", "\"10.0.0.11:80\", {"),
                "lb.toml:9:13: backend \"10.0.0.11:80\" is not an IP address",
            ),
            (
                OK.replace("weight = 2", "weight = 0"),
                "lb.toml:9:26: weight 0: between 1 and 100",
            ),
            (
                OK.replace("weight = 2", "wait = 2"),
                "lb.toml:9:26: unknown field `wait`",
            ),
            (
                OK.replace("\"fd00::11\"", "\"fd00::11\", \"fd00::11\""),
                "lb.toml:15:25: backend fd00::11 is listed twice",
            ),
            (
                OK.replace("[2001:db8::1]:53", "198.51.100.1:80")
                    .replace("proto = \"udp\"\n", ""),
                "lb.toml:13:7: service 198.51.100.1:80 is defined twice",
            ),
            (
                OK.replace("198.51.100.1:80", "198.51.100.1:0"),
                "lb.toml:8:7: vip 198.51.100.1:0",
            ),
            (
                OK.replace("backends = [\"fd00::11\"]", "backends = []"),
                "lb.toml:12:1: service [2001:db8::1]:53 has no backends",
            ),
            (
                OK.replace("encap = \"ipip\"", "encap = \"gre\""),
                "lb.toml:4:9: unknown variant `gre`",
            ),
            (
                OK.replace("devices = [\"eth0\"]", "devices = [\"eth0\", \"eth0\"]"),
                "lb.toml:3:20: device eth0 is listed twice",
            ),
            (
                OK.replace("interval = \"200ms\"", "interval = \"0s\""),
                "lb.toml:10:10: health: interval and timeout",
            ),
            (
                format!("{OK}\n[xdp]\ndev = \"eth0\"\n"),
                "lb.toml:3:12: eth0 already runs the [xdp] filter",
            ),
            (
                "[lb]\n".to_string(),
                "lb.toml:1:1: [lb] has no [[lb.service]]",
            ),
            (
                OK.replace("encap = \"ipip\"", "too_big_burst = 0"),
                "lb.toml:4:17: too_big_burst must be at least 1",
            ),
            (
                OK.replace("quic_host = 2", "quic_host = 1"),
                "lb.toml:20:52: backend 10.0.0.12: quic_host 1 is also 10.0.0.11's in \
                 198.51.100.1:443",
            ),
            (
                OK.replace("quic_host = 2", "quic_host = 256"),
                "lb.toml:20:52: quic_host 256: between 1 and 255",
            ),
            (
                OK.replace("quic_host = 2", "quic_host = 0"),
                "lb.toml:20:52: quic_host 0: between 1 and 255",
            ),
            (
                OK.replace("weight = 2", "weight = 2, quic_host = 3"),
                "lb.toml:9:26: backend 10.0.0.12: quic_host is for a UDP service (QUIC); \
                 198.51.100.1:80 is TCP",
            ),
            (
                OK.replace("encap = \"ipip\"", "too_big_rate = 2000000000"),
                "lb.toml:4:16: too_big_rate is answers per second per CPU",
            ),
        ];
        for (text, want) in cases {
            let got = err(&text);
            assert!(got.starts_with(want), "got {got:?}\nwanted {want:?}");
        }
    }
}
