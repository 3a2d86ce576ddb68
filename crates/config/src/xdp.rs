//! `[xdp]`: the XDP filter `ringx serve` attaches at start (crate ringx-xdp).
//!
//! ```toml
//! [xdp]
//! dev = "eth0"                 # required
//! mode = "native"              # or "generic" for drivers without XDP
//! syn_rate = 100               # SYNs/s per source (IPv4 address, IPv6 /64); 0: off
//! syn_burst = 200              # default: syn_rate
//! port_filter = true           # drop TCP/UDP to unserved ports below the ephemeral range
//! ports = [22, "53/udp"]       # served besides the listeners (TCP unless /udp or /both)
//! block = ["203.0.113.0/24"]   # sources to drop
//! allow = ["192.0.2.10"]       # sources to pass before any other rule
//! detach_on_exit = false       # default: the filter stays attached after ringx exits
//! chain = false                # true: what it passes goes on to software steering on dev
//! pin_dir = "/sys/fs/bpf/ringx"
//! ```
//!
//! Every value is checked while it is parsed, so a bad prefix or port is reported at its
//! `FILE:LINE:COL`.

use std::fmt;
use std::path::PathBuf;

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Xdp {
    /// The network device to filter.
    pub dev: DevName,
    #[serde(default)]
    pub mode: XdpMode,
    #[serde(default = "default_pin_dir")]
    pub pin_dir: PathBuf,
    #[serde(default)]
    pub syn_rate: u64,
    #[serde(default)]
    pub syn_burst: u64,
    #[serde(default)]
    pub port_filter: bool,
    #[serde(default)]
    pub ports: Vec<Port>,
    #[serde(default)]
    pub block: Vec<CidrValue>,
    #[serde(default)]
    pub allow: Vec<CidrValue>,
    /// Detach when ringx exits. By default the link stays pinned and keeps filtering, so a
    /// restart (which replaces the program atomically) leaves no unprotected moment.
    #[serde(default)]
    pub detach_on_exit: bool,
    /// Hand what the filter passes on to a next stage on the same device (software
    /// steering, or `ringx lb attach --behind-filter`): filter -> stage -> pass.
    #[serde(default)]
    pub chain: bool,
}

fn default_pin_dir() -> PathBuf {
    PathBuf::from(ringx_xdp::DEFAULT_PIN_DIR)
}

/// A device name as the kernel accepts it (1 to 15 bytes, no '/' or whitespace).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DevName(pub String);

impl<'de> Deserialize<'de> for DevName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        if s.is_empty() || s.len() > 15 || s.contains(['/', ' ', '\t', ':']) {
            return Err(de::Error::custom(format!(
                "invalid device name {s:?}: 1 to 15 characters, no '/', ':' or spaces"
            )));
        }
        Ok(DevName(s))
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct XdpMode(pub ringx_xdp::Mode);

impl<'de> Deserialize<'de> for XdpMode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map(XdpMode).map_err(de::Error::custom)
    }
}

/// An address prefix (`203.0.113.0/24`, `2001:db8::/32`, or one address).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CidrValue(pub ringx_xdp::Cidr);

impl<'de> Deserialize<'de> for CidrValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map(CidrValue).map_err(de::Error::custom)
    }
}

/// A served port: `22` or `"22"` (TCP), `"53/udp"`, `"443/both"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Port {
    pub port: u16,
    pub tcp: bool,
    pub udp: bool,
}

impl<'de> Deserialize<'de> for Port {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Port;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a port number, or \"PORT/tcp\", \"PORT/udp\", \"PORT/both\"")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Port, E> {
                let port = u16::try_from(v)
                    .map_err(|_| E::custom(format!("port {v} is not between 0 and 65535")))?;
                Ok(Port {
                    port,
                    tcp: true,
                    udp: false,
                })
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Port, E> {
                let p: ringx_xdp::ServedPort = v.parse().map_err(E::custom)?;
                Ok(Port {
                    port: p.port,
                    tcp: p.tcp,
                    udp: p.udp,
                })
            }
        }
        d.deserialize_any(V)
    }
}

impl Xdp {
    /// The loader's settings.
    pub fn settings(&self) -> ringx_xdp::Settings {
        ringx_xdp::Settings {
            syn_rate: self.syn_rate,
            syn_burst: self.syn_burst,
            port_filter: self.port_filter,
            chain: self.chain,
            ..ringx_xdp::Settings::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(t: &str) -> Result<Xdp, String> {
        #[derive(Deserialize)]
        struct W {
            xdp: Xdp,
        }
        toml::from_str::<W>(t)
            .map(|w| w.xdp)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn full_section() {
        let x = parse(
            r#"[xdp]
dev = "eth0"
mode = "generic"
syn_rate = 100
syn_burst = 200
port_filter = true
ports = [22, "53/udp", "443/both"]
block = ["203.0.113.0/24", "2001:db8::/32"]
allow = ["192.0.2.10"]
detach_on_exit = true
pin_dir = "/sys/fs/bpf/other"
"#,
        )
        .unwrap();
        assert_eq!(x.dev.0, "eth0");
        assert_eq!(x.mode.0, ringx_xdp::Mode::Generic);
        assert_eq!(x.ports.len(), 3);
        assert_eq!(
            x.ports[1],
            Port {
                port: 53,
                tcp: false,
                udp: true
            }
        );
        assert_eq!(x.block[1].0.to_string(), "2001:db8::/32");
        assert!(x.detach_on_exit);
        let s = x.settings();
        assert_eq!((s.syn_rate, s.syn_burst, s.port_filter), (100, 200, true));
    }

    #[test]
    fn defaults() {
        let x = parse("[xdp]\ndev = \"veth0\"\n").unwrap();
        assert_eq!(x.mode.0, ringx_xdp::Mode::Native);
        assert_eq!(x.pin_dir, PathBuf::from(ringx_xdp::DEFAULT_PIN_DIR));
        assert!(!x.port_filter && !x.detach_on_exit && x.block.is_empty());
    }

    #[test]
    fn errors() {
        for (t, want) in [
            ("[xdp]\n", "missing field `dev`"),
            ("[xdp]\ndev = \"a/b\"\n", "invalid device name"),
            (
                "[xdp]\ndev = \"eth0\"\nmode = \"hw\"\n",
                "use \"native\" or \"generic\"",
            ),
            ("[xdp]\ndev = \"eth0\"\nblock = [\"10.0.0.0/33\"]\n", "/33"),
            ("[xdp]\ndev = \"eth0\"\nports = [70000]\n", "not between"),
            (
                "[xdp]\ndev = \"eth0\"\nports = [\"80/sctp\"]\n",
                "tcp, udp or both",
            ),
            ("[xdp]\ndev = \"eth0\"\nsyn_rat = 1\n", "unknown field"),
        ] {
            let e = parse(t).unwrap_err();
            assert!(e.contains(want), "{t:?}: {e}");
        }
    }
}
