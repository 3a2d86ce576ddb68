//! Loading the balancer and the backends' decapsulation program (aya), attaching them through
//! pinned bpf_links (ringx-xdp's [`attach_program`]: a second attach swaps the program in
//! place), and test-running them.
//!
//! ```text
//! /sys/fs/bpf/ringx-lb/lb_*          the balancer's maps, shared by every program version
//! /sys/fs/bpf/ringx-lb/link_<dev>    the balancer's link on each device
//! /sys/fs/bpf/ringx-lbd/lbd_stats    a backend's decapsulation counters
//! /sys/fs/bpf/ringx-lbd/link_<dev>   its link
//! ```

use std::net::{Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsFd, BorrowedFd};
use std::path::{Path, PathBuf};

use aya::programs::Xdp;
use aya::{Ebpf, EbpfLoader};
use ringx_xdp::sys::{self, map_type, MapFd, TestRun};
use ringx_xdp::{attach_program, ensure_pin_dir, Attachment, ChainSlot, Error, Mode, Result};

use crate::abi::{
    self, map_names, ENCAP_GUE, ENCAP_IPIP, MAX_BACKENDS, MAX_VIPS, QUIC_HOSTS, RING_SIZE,
};
use crate::maps::LbMaps;

static LB_OBJ: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/ringx_lb.o"));
static DECAP_OBJ: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/ringx_lb_decap.o"));

/// The default pin directory of a backend's decapsulation program.
pub const DEFAULT_DECAP_PIN_DIR: &str = "/sys/fs/bpf/ringx-lbd";

/// How packets travel from the balancer to a backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encap {
    /// Outer IP + UDP to `port` + the client's IP packet (GUE variant 1, "direct IP"):
    /// works wherever UDP does, and the UDP source port gives the fabric's ECMP and the
    /// backend's RSS the flow's entropy. Decapsulated by `ringx lb backend` or a fou device.
    Gue { port: u16 },
    /// Outer IP + the client's IP packet (protocol 4 or 41), as Katran sends: decapsulated
    /// by `ringx lb backend` or the kernel's ipip/ip6tnl devices.
    Ipip,
}

impl Default for Encap {
    fn default() -> Encap {
        Encap::Gue { port: 6080 }
    }
}

impl std::fmt::Display for Encap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Encap::Gue { port } => write!(f, "gue (udp port {port})"),
            Encap::Ipip => f.write_str("ipip"),
        }
    }
}

/// The balancer's load-time settings (`const volatile` globals and the table size).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LbSettings {
    pub encap: Encap,
    /// The outer source address towards IPv4 backends (this balancer's address).
    pub source_v4: Ipv4Addr,
    /// The outer source address towards IPv6 backends.
    pub source_v6: Ipv6Addr,
    /// Flows each family's connection table holds (least recently used go first). Applies
    /// when the tables are first created; pinned tables keep their size.
    pub conn_table_size: u32,
    /// Hand what the balancer passes to the program in its chain slot
    /// ([`Balancer::chain_slot`]): the third stage of filter -> balancer -> steering.
    pub chain: bool,
    /// ICMP too-big answers each CPU sends per second at most, on average (0: no limit).
    pub too_big_rate: u32,
    /// How many of them may go back to back after a quiet spell (at least 1).
    pub too_big_burst: u32,
}

impl LbSettings {
    /// The limiter's (interval, burst) in ns, as the program takes them.
    fn too_big_limit(&self) -> (u64, u64) {
        if self.too_big_rate == 0 {
            return (0, 0);
        }
        let interval = 1_000_000_000 / u64::from(self.too_big_rate);
        (
            interval,
            interval * u64::from(self.too_big_burst.max(1) - 1),
        )
    }
}

impl Default for LbSettings {
    fn default() -> LbSettings {
        LbSettings {
            encap: Encap::default(),
            source_v4: Ipv4Addr::UNSPECIFIED,
            source_v6: Ipv6Addr::UNSPECIFIED,
            conn_table_size: 262_144,
            chain: false,
            too_big_rate: 1000,
            too_big_burst: 50,
        }
    }
}

/// (type, key size, value size, entries) of each map, to refuse incompatible pins before
/// aya reuses them.
fn expected(name: &str) -> (u32, usize, usize, u32) {
    use std::mem::size_of;
    match name {
        map_names::VIPS => (
            map_type::HASH,
            size_of::<abi::VipKey>(),
            size_of::<abi::VipValue>(),
            MAX_VIPS as u32,
        ),
        map_names::VIP_KEYS => (
            map_type::ARRAY,
            4,
            size_of::<abi::VipKey>(),
            MAX_VIPS as u32,
        ),
        map_names::VIP_ADDRS => (
            map_type::HASH,
            size_of::<abi::AddrKey>(),
            4,
            MAX_VIPS as u32,
        ),
        map_names::BACKENDS => (
            map_type::ARRAY,
            4,
            size_of::<abi::BackendValue>(),
            MAX_BACKENDS as u32,
        ),
        map_names::RING => (map_type::ARRAY, 4, 4, (MAX_VIPS * RING_SIZE) as u32),
        map_names::QUIC_HOSTS => (map_type::ARRAY, 4, 4, (MAX_VIPS * QUIC_HOSTS) as u32),
        map_names::MEMBERS => (
            map_type::HASH,
            size_of::<abi::MemberKey>(),
            4,
            MAX_BACKENDS as u32 * 4,
        ),
        map_names::VIP_STATS => (
            map_type::PERCPU_ARRAY,
            4,
            size_of::<abi::Counter>(),
            MAX_VIPS as u32,
        ),
        map_names::BACKEND_STATS => (
            map_type::PERCPU_ARRAY,
            4,
            size_of::<abi::Counter>(),
            MAX_BACKENDS as u32,
        ),
        map_names::STATS | map_names::DECAP_STATS => (
            map_type::PERCPU_ARRAY,
            4,
            size_of::<abi::ReasonCounter>(),
            64,
        ),
        map_names::CONNS => (
            map_type::LRU_HASH,
            size_of::<abi::FlowKey>(),
            size_of::<abi::FlowValue>(),
            1,
        ),
        map_names::CONNS4 => (
            map_type::LRU_HASH,
            size_of::<abi::FlowKey4>(),
            size_of::<abi::FlowValue>(),
            1,
        ),
        map_names::CHAIN => (map_type::PROG_ARRAY, 4, 4, 1),
        _ => unreachable!("unknown map {name}"),
    }
}

fn check_pins(dir: &Path, names: &[&str]) -> Result<()> {
    for name in names {
        let path = dir.join(name);
        if !path.exists() {
            continue;
        }
        let m = MapFd::open_pinned(&path)
            .map_err(|e| Error::io(format!("open {}", path.display()), e))?;
        let i = m.info();
        let (t, k, v, n) = expected(name);
        let entries_ok = if *name == map_names::CONNS || *name == map_names::CONNS4 {
            i.max_entries >= n
        } else {
            i.max_entries == n
        };
        if i.map_type != t || i.key_size as usize != k || i.value_size as usize != v || !entries_ok
        {
            return Err(Error::IncompatibleMap {
                path,
                why: format!(
                    "type {}, key {} bytes, value {} bytes, {} entries; this version needs type \
                     {t}, key {k}, value {v}, {n} entries",
                    i.map_type, i.key_size, i.value_size, i.max_entries
                ),
            });
        }
    }
    Ok(())
}

/// One loaded XDP program of this crate.
pub(crate) struct Loaded {
    pub(crate) ebpf: Ebpf,
    prog: &'static str,
}

impl Loaded {
    pub(crate) fn load(
        obj: &[u8],
        prog: &'static str,
        mut loader: EbpfLoader<'_>,
    ) -> Result<Loaded> {
        let ebpf = loader
            .load(obj)
            .map_err(|e| Error::from_aya(&format!("load the XDP object of {prog}"), &e))?;
        let mut l = Loaded { ebpf, prog };
        l.xdp()?
            .load()
            .map_err(|e| Error::from_aya(&format!("load {prog} (verifier)"), &e))?;
        Ok(l)
    }

    pub(crate) fn xdp(&mut self) -> Result<&mut Xdp> {
        let name = self.prog;
        self.ebpf
            .program_mut(name)
            .ok_or_else(|| Error::Load(format!("no program {name} in the object")))?
            .try_into()
            .map_err(|e| Error::from_aya(name, &e))
    }

    pub(crate) fn fd(&self) -> Result<BorrowedFd<'_>> {
        let prog: &Xdp = self
            .ebpf
            .program(self.prog)
            .ok_or_else(|| Error::Load(format!("no program {} in the object", self.prog)))?
            .try_into()
            .map_err(|e| Error::from_aya(self.prog, &e))?;
        Ok(prog
            .fd()
            .map_err(|e| Error::from_aya(self.prog, &e))?
            .as_fd())
    }

    pub(crate) fn test_run(&self, packet: &[u8], repeat: u32) -> Result<TestRun> {
        sys::prog_test_run(self.fd()?, packet, repeat, 0, 0)
            .map_err(|e| Error::io("BPF_PROG_TEST_RUN", e))
    }
}

/// The chain slot of the balancer pinned under `pin_dir` (see [`Balancer::chain_slot`]).
pub fn chain_slot(pin_dir: &Path) -> ChainSlot {
    ChainSlot::at(pin_dir.join(map_names::CHAIN))
}

fn link_pin(dir: &Path, dev: &str) -> PathBuf {
    dir.join(format!("link_{dev}"))
}

/// The balancer, loaded (verified) with its maps pinned.
pub struct Balancer {
    prog: Loaded,
    maps: LbMaps,
    pin_dir: PathBuf,
    mounted_bpffs: bool,
}

impl std::fmt::Debug for Balancer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Balancer")
            .field("pin_dir", &self.pin_dir)
            .finish_non_exhaustive()
    }
}

impl Balancer {
    /// Loads the program with `settings`, reusing the maps pinned under `pin_dir` (creating
    /// and pinning them the first time).
    pub fn load(settings: &LbSettings, pin_dir: &Path) -> Result<Balancer> {
        let mounted_bpffs = ensure_pin_dir(pin_dir)?;
        check_pins(pin_dir, &map_names::ALL)?;
        let (encap, port): (u32, u16) = match settings.encap {
            Encap::Gue { port } => {
                if port == 0 {
                    return Err(Error::Invalid("the GUE port must not be 0".into()));
                }
                (ENCAP_GUE as u32, port.to_be())
            }
            Encap::Ipip => (ENCAP_IPIP as u32, 0),
        };
        // Network order, as the program copies them into headers.
        let src4 = u32::from_ne_bytes(settings.source_v4.octets());
        let o6 = settings.source_v6.octets();
        let src6: [u32; 4] =
            std::array::from_fn(|i| u32::from_ne_bytes(o6[4 * i..4 * i + 4].try_into().unwrap()));
        let chain = u32::from(settings.chain);
        let (too_big_interval, too_big_burst) = settings.too_big_limit();
        let mut loader = ringx_xdp::loader()?;
        loader
            .btf(None)
            .map_pin_path(pin_dir)
            .set_global("lb_encap", &encap, true)
            .set_global("lb_gue_port", &port, true)
            .set_global("lb_src_v4", &src4, true)
            .set_global("lb_src_v6", &src6, true)
            .set_global("lb_chain_on", &chain, true)
            .set_global("lb_too_big_interval_ns", &too_big_interval, true)
            .set_global("lb_too_big_burst_ns", &too_big_burst, true)
            .set_max_entries(map_names::CONNS, settings.conn_table_size.max(1))
            .set_max_entries(map_names::CONNS4, settings.conn_table_size.max(1));
        let prog = Loaded::load(LB_OBJ, "ringx_lb", loader)?;
        let maps = LbMaps::open_pinned(pin_dir)?;
        Ok(Balancer {
            prog,
            maps,
            pin_dir: pin_dir.to_path_buf(),
            mounted_bpffs,
        })
    }

    pub fn maps(&self) -> &LbMaps {
        &self.maps
    }

    pub fn pin_dir(&self) -> &Path {
        &self.pin_dir
    }

    /// True when loading mounted the bpffs at /sys/fs/bpf (see [`ensure_pin_dir`]).
    pub fn mounted_bpffs(&self) -> bool {
        self.mounted_bpffs
    }

    /// Runs the program on `packet` in the kernel (BPF_PROG_TEST_RUN), `repeat` times.
    pub fn test_run(&self, packet: &[u8], repeat: u32) -> Result<TestRun> {
        self.prog.test_run(packet, repeat)
    }

    /// The program's descriptor (for live-frame benchmarks).
    pub fn prog_fd(&self) -> Result<BorrowedFd<'_>> {
        self.prog.fd()
    }

    /// The balancer's chain slot (pinned as `lb_chain` in its pin directory): the program
    /// there gets what the balancer passes, when it was loaded with [`LbSettings::chain`].
    pub fn chain_slot(&self) -> ChainSlot {
        chain_slot(&self.pin_dir)
    }

    /// Attaches to `dev`, or swaps the program of the balancer's link there atomically.
    pub fn attach(&mut self, dev: &str, mode: Mode) -> Result<Attachment> {
        let pin = link_pin(&self.pin_dir, dev);
        attach_program(self.prog.xdp()?, &pin, dev, mode)
    }
}

/// The backends' decapsulation program.
pub struct Decap {
    prog: Loaded,
    pin_dir: PathBuf,
    stats: MapFd,
}

impl Decap {
    /// Loads it, taking GUE on UDP port `gue_port` (0: IP-in-IP only).
    pub fn load(gue_port: u16, pin_dir: &Path) -> Result<Decap> {
        ensure_pin_dir(pin_dir)?;
        check_pins(pin_dir, &[map_names::DECAP_STATS])?;
        let port = gue_port.to_be();
        let mut loader = ringx_xdp::loader()?;
        loader
            .btf(None)
            .map_pin_path(pin_dir)
            .set_global("lbd_gue_port", &port, true);
        let prog = Loaded::load(DECAP_OBJ, "ringx_lb_decap", loader)?;
        let path = pin_dir.join(map_names::DECAP_STATS);
        let stats = MapFd::open_pinned(&path)
            .map_err(|e| Error::io(format!("open {}", path.display()), e))?;
        Ok(Decap {
            prog,
            pin_dir: pin_dir.to_path_buf(),
            stats,
        })
    }

    pub fn test_run(&self, packet: &[u8], repeat: u32) -> Result<TestRun> {
        self.prog.test_run(packet, repeat)
    }

    pub fn attach(&mut self, dev: &str, mode: Mode) -> Result<Attachment> {
        let pin = link_pin(&self.pin_dir, dev);
        attach_program(self.prog.xdp()?, &pin, dev, mode)
    }

    /// The counters by reason, summed over CPUs.
    pub fn stats(&self) -> Result<Vec<(abi::DecapReason, abi::ReasonCounter)>> {
        decap_stats(&self.stats)
    }
}

/// A decapsulation program's counters from its pin directory.
pub fn decap_stats_pinned(pin_dir: &Path) -> Result<Vec<(abi::DecapReason, abi::ReasonCounter)>> {
    let path = pin_dir.join(map_names::DECAP_STATS);
    let m = MapFd::open_pinned(&path).map_err(|e| match e.raw_os_error() {
        Some(libc::ENOENT) => Error::NotPinned { path: path.clone() },
        _ => Error::io(format!("open {}", path.display()), e),
    })?;
    decap_stats(&m)
}

fn decap_stats(m: &MapFd) -> Result<Vec<(abi::DecapReason, abi::ReasonCounter)>> {
    use crate::abi::Pod as _;
    let stride = (m.info().value_size as usize).div_ceil(8) * 8;
    let mut out = Vec::new();
    for r in abi::DecapReason::ALL {
        let mut buf = vec![0u8; m.value_buf_len()];
        m.lookup(&(r as u32).to_ne_bytes(), &mut buf)
            .map_err(|e| Error::io("read lbd_stats", e))?;
        let mut sum = abi::ReasonCounter::default();
        for c in buf.chunks_exact(stride).map(abi::ReasonCounter::from_bytes) {
            sum.packets += c.packets;
            sum.bytes += c.bytes;
        }
        out.push((r, sum));
    }
    Ok(out)
}

/// Removes the balancer's (or a decapsulation program's) map pins under `pin_dir`, and the
/// directory when empty. Refuses while a link is pinned there.
pub fn purge(pin_dir: &Path) -> Result<()> {
    if let Some(l) = ringx_xdp::attachments(pin_dir)?.first() {
        return Err(Error::Invalid(format!(
            "{} is still attached (pinned in {}); detach it first",
            l.dev,
            pin_dir.display()
        )));
    }
    for name in map_names::ALL.iter().chain([&map_names::DECAP_STATS]) {
        let p = pin_dir.join(name);
        if let Err(e) = std::fs::remove_file(&p) {
            if e.kind() != std::io::ErrorKind::NotFound {
                return Err(Error::io(format!("unpin {}", p.display()), e));
            }
        }
    }
    let _ = std::fs::remove_dir(pin_dir);
    Ok(())
}
