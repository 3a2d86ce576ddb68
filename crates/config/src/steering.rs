//! `[steering]`: connection locality (issue #5).
//!
//! ```toml
//! [steering]
//! listen = "cpu"              # or "hash"
//! mode = "software"           # active side: "auto" | "rss" | "software" | "off" (default)
//! device = "eth0"             # or a list; where replies arrive (rss: one device)
//! xdp_mode = "generic"        # software: "native" | "generic" (default: generic on veth)
//! rss_table = ["10.0.0.1 10.0.0.5 8080"]   # more destinations to precompute (F-Stack's
//!                             # [ff_rss_check_tbl]: LOCAL_ADDR REMOTE_ADDR REMOTE_PORT)
//! port_range = "32768-60999"  # local ports to use; default: ip_local_port_range
//! time_wait = "60s"           # a port this side closed first rests this long (default:
//!                             # 60 s, the kernel's TIME_WAIT; 1 s with tcp_tw_reuse = 1)
//! table_ports = 16384         # most precomputed ports per zone and destination
//! ```
//!
//! `listen` is the passive side: how the kernel hands new connections to the zones' listeners
//! on each address. `"cpu"` (the default) gives each connection to the zone pinned to the CPU
//! that processed its SYN — an eBPF reuseport program, or `SO_INCOMING_CPU` on the listeners
//! where eBPF is refused; a CPU without a (live) zone listener falls back to the kernel's
//! hash, so no connection is refused when a zone is gone. `"hash"` leaves the choice to the
//! kernel's 4-tuple hash (plain `SO_REUSEPORT`). See `ringx_steer::reuseport`.
//!
//! `mode` is the active side: the source port of each upstream connection is chosen so that
//! the upstream's replies arrive on the connecting zone's CPU (see `ringx_steer::active`).
//! `"rss"`: the device's RSS (Toeplitz key, indirection table, queue IRQ CPUs) decides, and
//! per-zone port tables are computed from it. `"software"`: ringx attaches an XDP program to
//! each device that sends every TCP packet to its zone's CPU (replies by local port
//! `& (2^k − 1)`, client packets by a hash of the client's address and port). `"auto"`: rss
//! where the device has RSS over more than one RX queue, else software, else off, with one
//! log line saying which and why; the device defaults to the one the upstreams are routed
//! through.

use std::fmt;
use std::ops::RangeInclusive;

/// `steering.mode`: the active side (its vocabulary is the steering crate's).
pub use ringx_steer::active::Mode;
use ringx_steer::ports::{parse_dest_list, Dest};
use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::Deserialize;
use toml::Spanned;

use crate::error::{ConfigError, Source};
use crate::units::Dur;
use crate::xdp::{DevName, Xdp, XdpMode};

/// The `[steering]` section.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Steering {
    /// How new connections are spread over the zones' listeners.
    #[serde(default)]
    pub listen: ListenSteering,
    /// Active side: how upstream source ports are chosen (default: off).
    pub mode: Option<Spanned<Mode>>,
    /// The device(s) replies arrive on.
    pub device: Option<Spanned<Devices>>,
    /// XDP attach mode for software steering; default: generic on veth, native elsewhere.
    pub xdp_mode: Option<XdpMode>,
    /// More destinations to precompute, besides the upstream servers.
    #[serde(default)]
    pub rss_table: DestList,
    /// Local ports to use; default: this namespace's `ip_local_port_range`.
    pub port_range: Option<Spanned<PortRange>>,
    /// How long a port rests after a connection this side closed first (TIME_WAIT);
    /// default: see `ringx_steer::active::default_time_wait`.
    pub time_wait: Option<Dur>,
    /// Most precomputed ports per zone and destination (memory: about 24 bytes each).
    pub table_ports: Option<usize>,
}

impl Steering {
    /// The active-side mode (off unless configured).
    pub fn mode(&self) -> Mode {
        self.mode.as_ref().map_or(Mode::Off, |m| *m.get_ref())
    }

    /// The configured devices (none: not given).
    pub fn devices(&self) -> &[DevName] {
        self.device.as_ref().map_or(&[], |d| &d.get_ref().0)
    }
}

/// `steering.listen`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ListenSteering {
    /// The zone on the CPU that processed the SYN (eBPF or `SO_INCOMING_CPU`).
    #[default]
    Cpu,
    /// The kernel's reuseport hash of the 4-tuple.
    Hash,
}

/// `steering.device`: one name or a list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Devices(pub Vec<DevName>);

impl<'de> Deserialize<'de> for Devices {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum OneOrMany {
            One(String),
            Many(Vec<String>),
        }
        let names = match OneOrMany::deserialize(d)
            .map_err(|_| de::Error::custom("device: a name (\"eth0\") or a list of names"))?
        {
            OneOrMany::One(s) => vec![s],
            OneOrMany::Many(v) => v,
        };
        if names.is_empty() {
            return Err(de::Error::custom("device: the list is empty"));
        }
        names
            .into_iter()
            .map(|n| DevName::deserialize(de::value::StrDeserializer::<D::Error>::new(&n)))
            .collect::<Result<Vec<_>, _>>()
            .map(Devices)
    }
}

/// `steering.rss_table`: a list of `"LOCAL_ADDR REMOTE_ADDR REMOTE_PORT"`, or one string of
/// them separated by `;` (F-Stack's `rss_tbl`, less the port id).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DestList(pub Vec<Dest>);

impl<'de> Deserialize<'de> for DestList {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = DestList;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a list of \"LOCAL_ADDR REMOTE_ADDR REMOTE_PORT\" strings")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<DestList, E> {
                parse_dest_list(v).map(DestList).map_err(E::custom)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<DestList, A::Error> {
                let mut out = Vec::new();
                while let Some(s) = seq.next_element::<String>()? {
                    out.extend(parse_dest_list(&s).map_err(de::Error::custom)?);
                }
                Ok(DestList(out))
            }
        }
        d.deserialize_any(V)
    }
}

/// `steering.port_range`: `"LOW-HIGH"` or `[LOW, HIGH]`, inclusive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortRange(pub RangeInclusive<u16>);

impl<'de> Deserialize<'de> for PortRange {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Text(String),
            Pair(Vec<i64>),
        }
        let bad = || de::Error::custom("port_range: \"LOW-HIGH\" or [LOW, HIGH], 1 to 65535");
        let (lo, hi) = match Raw::deserialize(d).map_err(|_| bad())? {
            Raw::Text(s) => {
                let (a, b) = s.split_once('-').ok_or_else(bad)?;
                (
                    a.trim().parse::<i64>().map_err(|_| bad())?,
                    b.trim().parse::<i64>().map_err(|_| bad())?,
                )
            }
            Raw::Pair(v) if v.len() == 2 => (v[0], v[1]),
            Raw::Pair(_) => return Err(bad()),
        };
        match (u16::try_from(lo), u16::try_from(hi)) {
            (Ok(lo), Ok(hi)) if lo >= 1 && lo <= hi => Ok(PortRange(lo..=hi)),
            _ => Err(bad()),
        }
    }
}

/// Checks across keys: rss needs one device, software at least one; the XDP filter and
/// software steering cannot share a device.
pub(crate) fn validate(st: &Steering, xdp: Option<&Xdp>, src: &Source) -> Result<(), ConfigError> {
    let Some(mode) = &st.mode else {
        return Ok(());
    };
    let devs = st.devices();
    match mode.get_ref() {
        Mode::Rss if devs.len() != 1 => {
            return Err(src.err(
                st.device.as_ref().map_or(mode.span(), |d| d.span()),
                "mode = \"rss\" needs exactly one device (device = \"eth0\"): the tables \
                 are computed from its RSS key and indirection table",
            ))
        }
        Mode::Software if devs.is_empty() => {
            return Err(src.err(
                mode.span(),
                "mode = \"software\" needs the device(s) the replies arrive on \
                 (device = \"eth0\" or a list): the XDP program is attached there",
            ))
        }
        _ => {}
    }
    if let (Mode::Software, Some(x)) = (mode.get_ref(), xdp) {
        if devs.contains(&x.dev) && !x.chain {
            return Err(src.err(
                st.device.as_ref().map_or(mode.span(), |d| d.span()),
                format!(
                    "{} already runs the [xdp] filter: set chain = true in [xdp] to steer \
                     behind it, steer in software on another device, or use mode = \"rss\"",
                    x.dev.0
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const SERVER: &str =
        "[[server]]\nlisten = [\"127.0.0.1:80\"]\n[[server.location]]\npath = \"/\"\nreturn = { status = 200 }\n";

    #[test]
    fn listen_defaults_to_cpu_and_parses_both() {
        let c = crate::parse("t.toml", SERVER).unwrap();
        assert_eq!(c.steering.listen, ListenSteering::Cpu);
        let c = crate::parse(
            "t.toml",
            &format!("[steering]\nlisten = \"hash\"\n{SERVER}"),
        )
        .unwrap();
        assert_eq!(c.steering.listen, ListenSteering::Hash);
        let c = crate::parse("t.toml", &format!("[steering]\nlisten = \"cpu\"\n{SERVER}")).unwrap();
        assert_eq!(c.steering.listen, ListenSteering::Cpu);
    }

    #[test]
    fn bad_values_point_at_the_key() {
        let e = crate::parse("t.toml", &format!("[steering]\nlisten = \"rr\"\n{SERVER}"))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("t.toml:2:10: "), "{e}");
        let e = crate::parse("t.toml", &format!("[steering]\nlistne = \"cpu\"\n{SERVER}"))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("t.toml:2:1: ") && e.contains("unknown field"),
            "{e}"
        );
    }

    #[test]
    fn active_side_keys() {
        let c = crate::parse("t.toml", SERVER).unwrap();
        assert_eq!(c.steering.mode(), Mode::Off);
        assert!(c.steering.devices().is_empty());
        assert!(c.steering.time_wait.is_none());
        let c = crate::parse(
            "t.toml",
            &format!(
                "[steering]\nmode = \"software\"\ndevice = [\"veth0\", \"veth1\"]\n\
                 xdp_mode = \"generic\"\nport_range = \"40000-49999\"\ntime_wait = \"2s\"\n\
                 table_ports = 100\n\
                 rss_table = [\"10.0.0.1 10.0.0.2 80\", \"10.0.0.1 10.0.0.3 80; 10.0.0.1 10.0.0.4 81\"]\n{SERVER}"
            ),
        )
        .unwrap();
        let st = &c.steering;
        assert_eq!(st.mode(), Mode::Software);
        let devs: Vec<&str> = st.devices().iter().map(|d| d.0.as_str()).collect();
        assert_eq!(devs, ["veth0", "veth1"]);
        assert_eq!(st.xdp_mode.unwrap().0, ringx_xdp::Mode::Generic);
        assert_eq!(st.port_range.as_ref().unwrap().get_ref().0, 40000..=49999);
        assert_eq!(st.time_wait.unwrap().0, Duration::from_secs(2));
        assert_eq!(st.table_ports, Some(100));
        assert_eq!(st.rss_table.0.len(), 3);
        assert_eq!(st.rss_table.0[2].remote, "10.0.0.4:81".parse().unwrap());
        // One string, F-Stack style, and a pair for the range.
        let c = crate::parse(
            "t.toml",
            &format!(
                "[steering]\nmode = \"rss\"\ndevice = \"eth0\"\nport_range = [1024, 2047]\n\
                 rss_table = \"10.0.0.1 10.0.0.2 80;10.0.0.1 10.0.0.3 80\"\n{SERVER}"
            ),
        )
        .unwrap();
        assert_eq!(c.steering.mode(), Mode::Rss);
        assert_eq!(c.steering.rss_table.0.len(), 2);
        assert_eq!(
            c.steering.port_range.as_ref().unwrap().get_ref().0,
            1024..=2047
        );
        for m in ["auto", "off"] {
            let c =
                crate::parse("t.toml", &format!("[steering]\nmode = \"{m}\"\n{SERVER}")).unwrap();
            assert_eq!(c.steering.mode().as_str(), m);
        }
    }

    #[test]
    fn active_side_errors_point_at_the_value() {
        for (body, at, want) in [
            ("mode = \"fast\"", "t.toml:2:8: ", "unknown variant"),
            ("mode = \"rss\"", "t.toml:2:8: ", "exactly one device"),
            (
                "mode = \"rss\"\ndevice = [\"a\", \"b\"]",
                "t.toml:3:10: ",
                "exactly one device",
            ),
            ("mode = \"software\"", "t.toml:2:8: ", "needs the device"),
            ("device = \"a/b\"", "t.toml:2:10: ", "invalid device name"),
            ("device = []", "t.toml:2:10: ", "the list is empty"),
            ("port_range = \"2-1\"", "t.toml:2:14: ", "LOW-HIGH"),
            ("port_range = [0, 10]", "t.toml:2:14: ", "LOW-HIGH"),
            ("port_range = \"x\"", "t.toml:2:14: ", "LOW-HIGH"),
            (
                "rss_table = [\"10.0.0.1 10.0.0.2\"]",
                "t.toml:2:13: ",
                "REMOTE_PORT",
            ),
            (
                "rss_table = \"10.0.0.1 ::1 80\"",
                "t.toml:2:13: ",
                "families differ",
            ),
            ("xdp_mode = \"hw\"", "t.toml:2:12: ", "XDP mode"),
            ("time_wait = \"1y\"", "t.toml:2:13: ", "duration"),
        ] {
            let e = crate::parse("t.toml", &format!("[steering]\n{body}\n{SERVER}"))
                .unwrap_err()
                .to_string();
            assert!(e.starts_with(at) && e.contains(want), "{body}: {e}");
        }
        let e = crate::parse(
            "t.toml",
            &format!(
                "[steering]\nmode = \"software\"\ndevice = \"eth0\"\n[xdp]\ndev = \"eth0\"\n{SERVER}"
            ),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.starts_with("t.toml:3:10: ") && e.contains("already runs the [xdp] filter"),
            "{e}"
        );
        // Behind the filter, in its chain slot.
        crate::parse(
            "t.toml",
            &format!(
                "[steering]\nmode = \"software\"\ndevice = \"eth0\"\n[xdp]\ndev = \"eth0\"\n\
                 chain = true\n{SERVER}"
            ),
        )
        .unwrap();
    }
}
