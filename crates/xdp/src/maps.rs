//! The filter's maps as the control channel: block and allow lists, served ports and
//! counters, opened from their pins (or from a freshly loaded program) and updated while the
//! program runs. Every method takes `&self`: an update is one bpf(2) call, which the kernel
//! serialises, so one handle can be shared by every zone of the proxy.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::abi::{map_names, Counter, LpmV4, LpmV6, Reason, Verdict, PORT_TCP, PORT_UDP};
use crate::abi::{ORIGIN_API, ORIGIN_CLI, ORIGIN_CONFIG, SIZEOF_RX_COUNTER};
use crate::abi::{SIZEOF_RX_LPM_V4, SIZEOF_RX_LPM_V6};
use crate::cidr::Cidr;
use crate::error::{Error, Result};
use crate::sys::{MapFd, BPF_ANY, BPF_NOEXIST};

/// Where `ringx serve` and `ringx xdp` pin the maps and links unless told otherwise.
pub const DEFAULT_PIN_DIR: &str = "/sys/fs/bpf/ringx";

/// Who put an entry on a list (the value stored with it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// `ringx xdp block|allow`.
    Cli,
    /// The proxy, through [`BlockList`].
    Api,
    /// The `[xdp]` section of the configuration.
    Config,
    /// A value this version does not know.
    Other(u32),
}

impl Origin {
    fn value(self) -> u32 {
        match self {
            Origin::Cli => ORIGIN_CLI as u32,
            Origin::Api => ORIGIN_API as u32,
            Origin::Config => ORIGIN_CONFIG as u32,
            Origin::Other(v) => v,
        }
    }

    fn from_value(v: u32) -> Origin {
        match v as u64 {
            ORIGIN_CLI => Origin::Cli,
            ORIGIN_API => Origin::Api,
            ORIGIN_CONFIG => Origin::Config,
            _ => Origin::Other(v),
        }
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Cli => f.write_str("cli"),
            Origin::Api => f.write_str("api"),
            Origin::Config => f.write_str("config"),
            Origin::Other(v) => write!(f, "origin {v}"),
        }
    }
}

/// Which list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum List {
    Block,
    Allow,
}

/// A pair of LPM tries, one per address family.
#[derive(Debug)]
struct Tries {
    v4: MapFd,
    v6: MapFd,
}

impl Tries {
    /// Adds `cidr`; false (and the entry left as it was, origin included) when exactly this
    /// prefix is there already.
    fn insert(&self, cidr: Cidr, origin: Origin) -> Result<bool> {
        let value = origin.value().to_ne_bytes();
        // LPM tries honour BPF_NOEXIST for the exact prefix (a lookup would match longer
        // or shorter ones too).
        let r = match (cidr.lpm_v4(), cidr.lpm_v6()) {
            (Some(k), _) => self.v4.update(&k.to_bytes(), &value, BPF_NOEXIST),
            (_, Some(k)) => self.v6.update(&k.to_bytes(), &value, BPF_NOEXIST),
            _ => unreachable!("a prefix is IPv4 or IPv6"),
        };
        match r {
            Ok(()) => Ok(true),
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => Ok(false),
            Err(e) => Err(match e.raw_os_error() {
                Some(libc::ENOSPC) | Some(libc::E2BIG) => Error::Invalid(format!(
                    "cannot add {cidr}: the list is full ({} entries)",
                    if cidr.addr().is_ipv4() {
                        &self.v4
                    } else {
                        &self.v6
                    }
                    .info()
                    .max_entries
                )),
                _ => Error::io(format!("add {cidr}"), e),
            }),
        }
    }

    fn remove(&self, cidr: Cidr) -> Result<bool> {
        let r = match (cidr.lpm_v4(), cidr.lpm_v6()) {
            (Some(k), _) => self.v4.delete(&k.to_bytes()),
            (_, Some(k)) => self.v6.delete(&k.to_bytes()),
            _ => unreachable!("a prefix is IPv4 or IPv6"),
        };
        r.map_err(|e| Error::io(format!("remove {cidr}"), e))
    }

    fn entries(&self) -> Result<Vec<(Cidr, Origin)>> {
        let mut out = Vec::new();
        let mut val = [0u8; 4];
        for k in self
            .v4
            .keys()
            .map_err(|e| Error::io("list IPv4 entries", e))?
        {
            let Ok(kb) = <[u8; SIZEOF_RX_LPM_V4]>::try_from(k.as_slice()) else {
                continue;
            };
            if self
                .v4
                .lookup(&kb, &mut val)
                .map_err(|e| Error::io("lookup", e))?
            {
                if let Some(c) = Cidr::from_v4(LpmV4::from_bytes(&kb)) {
                    out.push((c, Origin::from_value(u32::from_ne_bytes(val))));
                }
            }
        }
        for k in self
            .v6
            .keys()
            .map_err(|e| Error::io("list IPv6 entries", e))?
        {
            let Ok(kb) = <[u8; SIZEOF_RX_LPM_V6]>::try_from(k.as_slice()) else {
                continue;
            };
            if self
                .v6
                .lookup(&kb, &mut val)
                .map_err(|e| Error::io("lookup", e))?
            {
                if let Some(c) = Cidr::from_v6(LpmV6::from_bytes(&kb)) {
                    out.push((c, Origin::from_value(u32::from_ne_bytes(val))));
                }
            }
        }
        out.sort_by_key(|(c, _)| *c);
        Ok(out)
    }
}

fn open(dir: &Path, name: &str) -> Result<MapFd> {
    let path = dir.join(name);
    MapFd::open_pinned(&path).map_err(|e| match e.raw_os_error() {
        Some(libc::ENOENT) | Some(libc::ENOTDIR) => Error::NotPinned { path },
        _ => Error::io(format!("open {}", path.display()), e),
    })
}

/// All of the filter's lists and counters.
#[derive(Debug)]
pub struct Maps {
    block: Tries,
    allow: Tries,
    ports: MapFd,
    stats: MapFd,
    dir: Option<PathBuf>,
}

impl Maps {
    /// Opens the maps pinned under `dir` (the loader's pin directory).
    pub fn open_pinned(dir: &Path) -> Result<Maps> {
        Ok(Maps {
            block: Tries {
                v4: open(dir, map_names::BLOCK_V4)?,
                v6: open(dir, map_names::BLOCK_V6)?,
            },
            allow: Tries {
                v4: open(dir, map_names::ALLOW_V4)?,
                v6: open(dir, map_names::ALLOW_V6)?,
            },
            ports: open(dir, map_names::PORTS)?,
            stats: open(dir, map_names::STATS)?,
            dir: Some(dir.to_path_buf()),
        })
    }

    pub(crate) fn from_fds(mut get: impl FnMut(&str) -> Result<MapFd>) -> Result<Maps> {
        Ok(Maps {
            block: Tries {
                v4: get(map_names::BLOCK_V4)?,
                v6: get(map_names::BLOCK_V6)?,
            },
            allow: Tries {
                v4: get(map_names::ALLOW_V4)?,
                v6: get(map_names::ALLOW_V6)?,
            },
            ports: get(map_names::PORTS)?,
            stats: get(map_names::STATS)?,
            dir: None,
        })
    }

    /// Where the maps are pinned, when they were opened from pins.
    pub fn pin_dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    fn tries(&self, list: List) -> &Tries {
        match list {
            List::Block => &self.block,
            List::Allow => &self.allow,
        }
    }

    /// Adds `cidr` to `list`; true when it was not there before. Takes effect for the next
    /// packet, with no reload.
    pub fn add(&self, list: List, cidr: Cidr, origin: Origin) -> Result<bool> {
        self.tries(list).insert(cidr, origin)
    }

    /// Removes exactly `cidr` (not the prefixes inside it) from `list`; false when it was
    /// not there.
    pub fn remove(&self, list: List, cidr: Cidr) -> Result<bool> {
        self.tries(list).remove(cidr)
    }

    /// Every entry of `list`, sorted.
    pub fn entries(&self, list: List) -> Result<Vec<(Cidr, Origin)>> {
        self.tries(list).entries()
    }

    /// Marks TCP and/or UDP `port` as served (for the port filter), keeping other bits.
    pub fn serve_port(&self, port: u16, tcp: bool, udp: bool) -> Result<()> {
        let key = (port as u32).to_ne_bytes();
        let mut cur = [0u8; 1];
        self.ports
            .lookup(&key, &mut cur)
            .map_err(|e| Error::io("read rx_ports", e))?;
        let bits =
            cur[0] | if tcp { PORT_TCP as u8 } else { 0 } | if udp { PORT_UDP as u8 } else { 0 };
        self.ports
            .update(&key, &[bits], BPF_ANY)
            .map_err(|e| Error::io(format!("mark port {port} served"), e))
    }

    /// The served ports and their protocol bits (`PORT_TCP | PORT_UDP`).
    pub fn served_ports(&self) -> Result<Vec<(u16, u8)>> {
        let mut out = Vec::new();
        let mut v = [0u8; 1];
        for port in 0..=u16::MAX {
            let key = (port as u32).to_ne_bytes();
            if self
                .ports
                .lookup(&key, &mut v)
                .map_err(|e| Error::io("read rx_ports", e))?
                && v[0] != 0
            {
                out.push((port, v[0]));
            }
        }
        Ok(out)
    }

    /// Clears every served-port bit.
    pub fn clear_ports(&self) -> Result<()> {
        for (port, _) in self.served_ports()? {
            let key = (port as u32).to_ne_bytes();
            self.ports
                .update(&key, &[0], BPF_ANY)
                .map_err(|e| Error::io("clear rx_ports", e))?;
        }
        Ok(())
    }

    /// The counters, summed over CPUs.
    pub fn stats(&self) -> Result<Stats> {
        read_stats(&self.stats)
    }
}

fn read_stats(map: &MapFd) -> Result<Stats> {
    let mut buf = vec![0u8; map.value_buf_len()];
    let stride = SIZEOF_RX_COUNTER.div_ceil(8) * 8;
    let mut by_reason = [Counter::default(); Reason::COUNT];
    for (i, slot) in by_reason.iter_mut().enumerate() {
        let key = (i as u32).to_ne_bytes();
        map.lookup(&key, &mut buf)
            .map_err(|e| Error::io("read rx_stats", e))?;
        for cpu in buf.chunks_exact(stride) {
            let c = Counter::from_bytes(cpu[..SIZEOF_RX_COUNTER].try_into().expect("size"));
            slot.packets += c.packets;
            slot.bytes += c.bytes;
        }
    }
    Ok(Stats { by_reason })
}

/// The block list, for the proxy: add or remove a source at run time (rate-limiting rules
/// use it). Opened from the pins that `ringx serve`'s `[xdp]` section or `ringx xdp attach`
/// created; cheap to share (`&self` methods, `Send + Sync`).
///
/// ```no_run
/// use ringx_xdp::BlockList;
/// let bl = BlockList::open_pinned()?;
/// bl.block("203.0.113.7".parse()?)?;
/// bl.unblock("203.0.113.7".parse()?)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct BlockList {
    tries: Tries,
}

impl BlockList {
    /// Opens the block list pinned under the default directory ([`DEFAULT_PIN_DIR`]).
    pub fn open_pinned() -> Result<BlockList> {
        BlockList::open_pinned_at(Path::new(DEFAULT_PIN_DIR))
    }

    /// Opens the block list pinned under `dir`.
    pub fn open_pinned_at(dir: &Path) -> Result<BlockList> {
        Ok(BlockList {
            tries: Tries {
                v4: open(dir, map_names::BLOCK_V4)?,
                v6: open(dir, map_names::BLOCK_V6)?,
            },
        })
    }

    /// Drops every packet from `cidr` from the next packet on; true when it was not
    /// blocked before. The entry is marked as the API's (`ringx xdp list` shows it).
    pub fn block(&self, cidr: Cidr) -> Result<bool> {
        self.tries.insert(cidr, Origin::Api)
    }

    /// Removes exactly `cidr` from the block list; false when it was not there.
    pub fn unblock(&self, cidr: Cidr) -> Result<bool> {
        self.tries.remove(cidr)
    }

    /// Every entry, sorted.
    pub fn entries(&self) -> Result<Vec<(Cidr, Origin)>> {
        self.tries.entries()
    }
}

/// The filter's counters, summed over CPUs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub by_reason: [Counter; Reason::COUNT],
}

impl Stats {
    /// Reads the counters pinned under `dir`.
    pub fn read(dir: &Path) -> Result<Stats> {
        read_stats(&open(dir, map_names::STATS)?)
    }

    pub fn get(&self, r: Reason) -> Counter {
        self.by_reason[r as usize]
    }

    /// Everything that got `v`.
    pub fn total(&self, v: Verdict) -> Counter {
        let mut t = Counter::default();
        for r in Reason::ALL.iter().filter(|r| r.verdict() == v) {
            t.packets += self.get(*r).packets;
            t.bytes += self.get(*r).bytes;
        }
        t
    }

    /// Counts since `earlier` (saturating, so a recreated map reads as zero, not wrapped).
    pub fn since(&self, earlier: &Stats) -> Stats {
        let mut d = self.clone();
        for (a, b) in d.by_reason.iter_mut().zip(earlier.by_reason.iter()) {
            a.packets = a.packets.saturating_sub(b.packets);
            a.bytes = a.bytes.saturating_sub(b.bytes);
        }
        d
    }

    /// One JSON object: `{"pass": {..}, "drop": {..}, "reasons": {"drop_block": {"packets":
    /// N, "bytes": N}, ...}}`.
    pub fn to_json(&self) -> String {
        let c = |c: Counter| format!("{{\"packets\":{},\"bytes\":{}}}", c.packets, c.bytes);
        let reasons: Vec<String> = Reason::ALL
            .iter()
            .map(|r| format!("\"{}\":{}", r.name(), c(self.get(*r))))
            .collect();
        format!(
            "{{\"pass\":{},\"drop\":{},\"reasons\":{{{}}}}}",
            c(self.total(Verdict::Pass)),
            c(self.total(Verdict::Drop)),
            reasons.join(",")
        )
    }
}

impl fmt::Display for Stats {
    /// A table: verdict, reason, packets, bytes, what it means.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{:<16} {:>14} {:>16}  meaning",
            "counter", "packets", "bytes"
        )?;
        for r in Reason::ALL {
            let c = self.get(r);
            writeln!(
                f,
                "{:<16} {:>14} {:>16}  {}",
                r.name(),
                c.packets,
                c.bytes,
                r.description()
            )?;
        }
        let (p, d) = (self.total(Verdict::Pass), self.total(Verdict::Drop));
        writeln!(f, "{:<16} {:>14} {:>16}", "total pass", p.packets, p.bytes)?;
        write!(f, "{:<16} {:>14} {:>16}", "total drop", d.packets, d.bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_totals_and_json() {
        let mut s = Stats::default();
        s.by_reason[Reason::DropBlock as usize] = Counter {
            packets: 3,
            bytes: 180,
        };
        s.by_reason[Reason::Pass as usize] = Counter {
            packets: 2,
            bytes: 100,
        };
        s.by_reason[Reason::DropSynRate as usize] = Counter {
            packets: 1,
            bytes: 60,
        };
        assert_eq!(
            s.total(Verdict::Drop),
            Counter {
                packets: 4,
                bytes: 240
            }
        );
        assert_eq!(
            s.total(Verdict::Pass),
            Counter {
                packets: 2,
                bytes: 100
            }
        );
        let j = s.to_json();
        assert!(j.starts_with("{\"pass\":{\"packets\":2,\"bytes\":100},\"drop\":{\"packets\":4"));
        assert!(j.contains("\"drop_block\":{\"packets\":3,\"bytes\":180}"));
        let d = s.since(&s);
        assert_eq!(d.total(Verdict::Drop).packets, 0);
        assert!(s.to_string().contains("drop_syn_rate"));
    }

    #[test]
    fn origins_round_trip() {
        for o in [Origin::Cli, Origin::Api, Origin::Config, Origin::Other(77)] {
            assert_eq!(Origin::from_value(o.value()), o);
        }
    }
}
