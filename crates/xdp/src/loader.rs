//! Loading the filter, attaching it through a pinned bpf_link, replacing it atomically, and
//! detaching it.
//!
//! Pins (all under one directory, [`DEFAULT_PIN_DIR`](crate::maps::DEFAULT_PIN_DIR) unless told
//! otherwise):
//!
//! ```text
//! /sys/fs/bpf/ringx/rx_block_v4 ... rx_stats   the maps, shared by every program version,
//!                                               `ringx serve` and `ringx xdp`
//! /sys/fs/bpf/ringx/link_<dev>                  the bpf_link of each device
//! ```
//!
//! Attaching where a link is already pinned does not detach anything: the new program goes in
//! with `BPF_LINK_UPDATE`, which swaps the program pointer of the hook in one step, so every
//! packet meets either the old program or the new one, never none. The link keeps its attach
//! mode; changing native to generic needs a detach first. The maps are reused from their
//! pins, so lists and counters survive the swap.
//!
//! One pin directory serves one network namespace (link pins are named by device).

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::str::FromStr;

use aya::programs::links::{FdLink, PinnedLink};
use aya::programs::{Xdp, XdpFlags};
use aya::Ebpf;

use crate::abi::{map_names, Reason, SIZEOF_RX_BUCKET, SIZEOF_RX_COUNTER, SIZEOF_RX_LPM_V4};
use crate::abi::{SIZEOF_RX_LPM_V6, SIZEOF_RX_RATE_KEY, TOKEN};
use crate::chain::ChainSlot;
use crate::error::{Error, Result};
use crate::maps::Maps;
use crate::sys::{self, map_type, MapFd, TestRun};

/// The compiled filter (bpf/ringx_xdp.bpf.c).
static FILTER_OBJ: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/ringx_xdp.o"));

const PROG_NAME: &str = "ringx_xdp";

/// Where the program runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    /// In the driver, before any allocation (`XDP_FLAGS_DRV_MODE`).
    #[default]
    Native,
    /// After the kernel built an skb, for drivers without XDP (`XDP_FLAGS_SKB_MODE`).
    Generic,
}

impl Mode {
    fn flags(self) -> XdpFlags {
        match self {
            Mode::Native => XdpFlags::DRV_MODE,
            Mode::Generic => XdpFlags::SKB_MODE,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Native => "native",
            Mode::Generic => "generic",
        }
    }
}

impl FromStr for Mode {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Mode, String> {
        match s {
            "native" | "drv" => Ok(Mode::Native),
            "generic" | "skb" => Ok(Mode::Generic),
            _ => Err(format!("XDP mode {s:?}: use \"native\" or \"generic\"")),
        }
    }
}

/// The filter's load-time settings (the program's `const volatile` globals and map sizes).
/// Changing one means loading a new program and swapping it in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// TCP SYNs per second one source (IPv4 address, IPv6 /64) may send; 0: no limit.
    pub syn_rate: u64,
    /// How many SYNs a quiet source may send at once; 0: the same as `syn_rate`.
    pub syn_burst: u64,
    /// Drop TCP and UDP to ports below the ephemeral range that are not marked served.
    pub port_filter: bool,
    /// Lowest ephemeral port (never filtered); None: this namespace's ip_local_port_range.
    pub ephemeral_low: Option<u16>,
    /// Capacity of each block list (IPv4 and IPv6), of each allow list, and of the SYN
    /// bucket table. They apply when the maps are first created; pinned maps keep their size.
    pub block_entries: u32,
    pub allow_entries: u32,
    pub syn_table_size: u32,
    /// Send what the filter passes on to the next stage in the pinned `rx_chain` program
    /// array ([`chain_next`]): filter -> load balancer -> pass on one device.
    pub chain: bool,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            syn_rate: 0,
            syn_burst: 0,
            port_filter: false,
            ephemeral_low: None,
            block_entries: 65536,
            allow_entries: 4096,
            syn_table_size: 65536,
            chain: false,
        }
    }
}

impl Settings {
    /// (rate, burst, fill_ns) as the program wants them.
    fn syn_params(&self) -> Result<(u64, u64, u64)> {
        if self.syn_rate == 0 {
            return Ok((0, 1, 0));
        }
        let burst = if self.syn_burst == 0 {
            self.syn_rate
        } else {
            self.syn_burst
        };
        const MAX: u64 = 1_000_000_000;
        if self.syn_rate > MAX || burst > MAX {
            return Err(Error::Invalid(format!(
                "syn_rate and syn_burst must be at most {MAX} (got {} and {burst})",
                self.syn_rate
            )));
        }
        let fill = (burst as u128 * TOKEN as u128).div_ceil(self.syn_rate as u128) as u64;
        Ok((self.syn_rate, burst, fill.max(1)))
    }
}

/// The lowest ephemeral port of this network namespace (what the port filter leaves alone).
pub fn ephemeral_low() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(32768)
}

/// The lock file around mounting a bpffs at /sys/fs/bpf (see [`ensure_pin_dir`]). Outside
/// /sys/fs/bpf, which is not writable before the mount.
pub const BPFFS_LOCK: &str = "/run/ringx-bpffs.lock";

/// Makes sure `dir` exists on a bpffs, mounting one at /sys/fs/bpf when none is (as bpftool
/// does); true when this call mounted it.
///
/// Safe against concurrent callers, threads and processes alike (parallel tests, `ringx serve`
/// next to `ringx xdp`): the check and the mount happen under an exclusive `flock` of
/// [`BPFFS_LOCK`], and a bpffs already there counts as success. Without it two loaders starting
/// together each found none and each mounted one, stacking two bpffs on /sys/fs/bpf; the second
/// hid the pin directory the first had just made.
///
/// Such a mount belongs to the caller's mount namespace. `ip netns exec` gives every command a
/// mount namespace of its own with a fresh /sys, so pins made under it vanish with the
/// command: enter a network namespace with `nsenter --net=/run/netns/NAME` instead, which
/// keeps the host's /sys/fs/bpf.
pub fn ensure_pin_dir(dir: &Path) -> Result<bool> {
    let root = Path::new("/sys/fs/bpf");
    let mut mounted = false;
    if dir.starts_with(root) && root.is_dir() && !sys::is_bpffs(root).unwrap_or(false) {
        mounted = mount_bpffs_once(root)?;
    }
    std::fs::create_dir_all(dir).map_err(|e| Error::io(format!("create {}", dir.display()), e))?;
    if !sys::is_bpffs(dir).map_err(|e| Error::io(format!("statfs {}", dir.display()), e))? {
        return Err(Error::Invalid(format!(
            "{} is not on a BPF file system: pins must live under a bpffs (mount -t bpf bpf \
             /sys/fs/bpf)",
            dir.display()
        )));
    }
    Ok(mounted)
}

/// Mounts a bpffs at `root` unless one is there by the time the lock is held; true when it did.
fn mount_bpffs_once(root: &Path) -> Result<bool> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(BPFFS_LOCK)
        .map_err(|e| {
            Error::io(
                format!("open {BPFFS_LOCK} (the lock around mounting a bpffs at /sys/fs/bpf)"),
                e,
            )
        })?;
    sys::flock_exclusive(&lock).map_err(|e| Error::io(format!("flock {BPFFS_LOCK}"), e))?;
    // Again, under the lock: another loader may have mounted it since the first look.
    if sys::is_bpffs(root).map_err(|e| Error::io(format!("statfs {}", root.display()), e))? {
        return Ok(false);
    }
    sys::mount_bpffs(root).map_err(|e| Error::io("mount a bpffs at /sys/fs/bpf", e))?;
    // Dropping `lock` releases the flock: the next holder sees this mount.
    Ok(true)
}

/// (type, key size, value size, minimum entries) of each map, to check pins against.
fn expected(name: &str) -> (u32, usize, usize, u32) {
    match name {
        map_names::ALLOW_V4 | map_names::BLOCK_V4 => (map_type::LPM_TRIE, SIZEOF_RX_LPM_V4, 4, 1),
        map_names::ALLOW_V6 | map_names::BLOCK_V6 => (map_type::LPM_TRIE, SIZEOF_RX_LPM_V6, 4, 1),
        map_names::SYN_BUCKETS => (map_type::LRU_HASH, SIZEOF_RX_RATE_KEY, SIZEOF_RX_BUCKET, 1),
        map_names::PORTS => (map_type::ARRAY, 4, 1, 65536),
        map_names::CHAIN => (map_type::PROG_ARRAY, 4, 4, 1),
        map_names::STATS => (
            map_type::PERCPU_ARRAY,
            4,
            SIZEOF_RX_COUNTER,
            Reason::COUNT as u32,
        ),
        _ => unreachable!("unknown map {name}"),
    }
}

/// Refuses pins this program version cannot use (aya would reuse them blindly).
fn check_pinned_maps(dir: &Path) -> Result<()> {
    for name in map_names::ALL {
        let path = dir.join(name);
        if !path.exists() {
            continue;
        }
        let m = MapFd::open_pinned(&path)
            .map_err(|e| Error::io(format!("open {}", path.display()), e))?;
        let i = m.info();
        let (t, k, v, min) = expected(name);
        if i.map_type != t
            || i.key_size as usize != k
            || i.value_size as usize != v
            || i.max_entries < min
        {
            return Err(Error::IncompatibleMap {
                path,
                why: format!(
                    "type {}, key {} bytes, value {} bytes, {} entries; this version needs type \
                     {t}, key {k}, value {v}, at least {min} entries",
                    i.map_type, i.key_size, i.value_size, i.max_entries
                ),
            });
        }
    }
    Ok(())
}

/// The filter, loaded (verified) with its maps pinned, ready to attach or to test-run.
pub struct Filter {
    ebpf: Ebpf,
    maps: Maps,
    pin_dir: PathBuf,
    mounted_bpffs: bool,
}

impl std::fmt::Debug for Filter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Filter")
            .field("pin_dir", &self.pin_dir)
            .finish_non_exhaustive()
    }
}

/// What [`Filter::attach`] did.
#[derive(Debug)]
pub struct Attachment {
    pub dev: String,
    pub ifindex: u32,
    /// True when an existing link got the new program (BPF_LINK_UPDATE), false when a new
    /// link was created.
    pub replaced: bool,
    pub link_id: u32,
    pub prog_id: u32,
    link: OwnedFd,
    pin: PathBuf,
}

impl Attachment {
    /// Detaches now (BPF_LINK_DETACH) and removes the link's pin. Without this the link stays
    /// pinned, and the filter keeps running after the process exits.
    pub fn detach(self) -> Result<()> {
        detach_fd(self.link.as_fd(), &self.pin)
    }
}

fn detach_fd(link: BorrowedFd<'_>, pin: &Path) -> Result<()> {
    match sys::link_detach(link) {
        Ok(()) => {}
        // Already defunct (its device is gone): only the pin is left to remove.
        Err(e) if e.raw_os_error() == Some(libc::ENOLINK) => {}
        Err(e) => return Err(Error::io("BPF_LINK_DETACH", e)),
    }
    match std::fs::remove_file(pin) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(Error::io(format!("unpin {}", pin.display()), e))
        }
        _ => Ok(()),
    }
}

fn link_pin(dir: &Path, dev: &str) -> PathBuf {
    dir.join(format!("link_{dev}"))
}

impl Filter {
    /// Loads and verifies the program with `settings`, reusing the maps pinned under
    /// `pin_dir` (creating and pinning them the first time).
    pub fn load(settings: &Settings, pin_dir: &Path) -> Result<Filter> {
        let mounted_bpffs = ensure_pin_dir(pin_dir)?;
        check_pinned_maps(pin_dir)?;
        let (rate, burst, fill) = settings.syn_params()?;
        let eph: u32 = settings.ephemeral_low.unwrap_or_else(ephemeral_low).into();
        let port_filter: u32 = settings.port_filter.into();
        let chain: u32 = settings.chain.into();
        let mut loader = crate::loader()?;
        // No CO-RE relocations in the program: skip parsing the kernel's BTF (megabytes).
        loader
            .btf(None)
            .map_pin_path(pin_dir)
            .set_global("rx_syn_rate", &rate, true)
            .set_global("rx_syn_burst", &burst, true)
            .set_global("rx_syn_fill_ns", &fill, true)
            .set_global("rx_port_filter", &port_filter, true)
            .set_global("rx_chain_on", &chain, true)
            .set_global("rx_ephemeral_low", &eph, true)
            .set_max_entries(map_names::BLOCK_V4, settings.block_entries)
            .set_max_entries(map_names::BLOCK_V6, settings.block_entries)
            .set_max_entries(map_names::ALLOW_V4, settings.allow_entries)
            .set_max_entries(map_names::ALLOW_V6, settings.allow_entries)
            .set_max_entries(map_names::SYN_BUCKETS, settings.syn_table_size);
        let mut ebpf = loader
            .load(FILTER_OBJ)
            .map_err(|e| Error::from_aya("load the XDP object", &e))?;
        let prog = xdp_prog(&mut ebpf)?;
        prog.load()
            .map_err(|e| Error::from_aya("load the XDP program (verifier)", &e))?;
        let maps = Maps::from_fds(|name| {
            let path = pin_dir.join(name);
            MapFd::open_pinned(&path).map_err(|e| Error::io(format!("open {}", path.display()), e))
        })?;
        Ok(Filter {
            ebpf,
            maps,
            pin_dir: pin_dir.to_path_buf(),
            mounted_bpffs,
        })
    }

    /// True when loading had to mount the bpffs at /sys/fs/bpf (see [`ensure_pin_dir`] for
    /// why a caller may want to warn about it).
    pub fn mounted_bpffs(&self) -> bool {
        self.mounted_bpffs
    }

    pub fn maps(&self) -> &Maps {
        &self.maps
    }

    pub fn pin_dir(&self) -> &Path {
        &self.pin_dir
    }

    /// The loaded program (for BPF_PROG_TEST_RUN).
    pub fn prog_fd(&self) -> Result<BorrowedFd<'_>> {
        let prog: &Xdp = self
            .ebpf
            .program(PROG_NAME)
            .ok_or_else(|| Error::Load(format!("no program {PROG_NAME} in the object")))?
            .try_into()
            .map_err(|e| Error::from_aya("the filter program", &e))?;
        Ok(prog
            .fd()
            .map_err(|e| Error::from_aya("the filter program", &e))?
            .as_fd())
    }

    /// Runs the program on `packet` in the kernel (BPF_PROG_TEST_RUN), `repeat` times; the
    /// counters count every run.
    pub fn test_run(&self, packet: &[u8], repeat: u32) -> Result<TestRun> {
        sys::prog_test_run(self.prog_fd()?, packet, repeat, 0, 0)
            .map_err(|e| Error::io("BPF_PROG_TEST_RUN", e))
    }

    /// Attaches to `dev`: replaces the program of ringx's link on it atomically when there is
    /// one (BPF_LINK_UPDATE; the link's mode stays), otherwise creates a link in `mode` and
    /// pins it. The link outlives this process (it is pinned); see [`Attachment::detach`] and
    /// [`detach`].
    pub fn attach(&mut self, dev: &str, mode: Mode) -> Result<Attachment> {
        let pin = link_pin(&self.pin_dir, dev);
        attach_program(xdp_prog(&mut self.ebpf)?, &pin, dev, mode)
    }
}

/// Attaches a loaded XDP program to `dev` through the bpf_link pinned at `pin`: replaces the
/// program of that link atomically when it exists (BPF_LINK_UPDATE; the link's mode stays),
/// otherwise creates a link in `mode` and pins it there. [`Filter::attach`] and the other
/// XDP programs of the workspace (the load balancer) attach through this.
pub fn attach_program(prog: &mut Xdp, pin: &Path, dev: &str, mode: Mode) -> Result<Attachment> {
    let ifindex = sys::ifindex(dev).ok_or_else(|| Error::NoDevice(dev.to_string()))?;
    let mut replaced = false;
    if let Ok(fd) = sys::obj_get(pin) {
        let info = sys::link_info(fd.as_fd()).map_err(|e| Error::io("link info", e))?;
        if info.link_type != sys::BPF_LINK_TYPE_XDP {
            return Err(Error::Invalid(format!(
                "{} is not an XDP link (type {})",
                pin.display(),
                info.link_type
            )));
        }
        if info.ifindex == 0 {
            // Defunct: its device was removed (or its namespace). Start afresh.
            let _ = std::fs::remove_file(pin);
        } else if info.ifindex != ifindex {
            return Err(Error::Invalid(format!(
                "{} holds the link of ifindex {} ({}), not of {dev} (ifindex {ifindex}); \
                 detach it first",
                pin.display(),
                info.ifindex,
                sys::ifname(info.ifindex).unwrap_or_else(|| "gone".into())
            )));
        } else {
            let link = PinnedLink::from_pin(pin)
                .map_err(|e| Error::from_aya(&format!("open {}", pin.display()), &e))?;
            let link = aya::programs::xdp::XdpLink::try_from(FdLink::from(link))
                .map_err(|e| Error::from_aya("XDP link", &e))?;
            prog.attach_to_link(link).map_err(|e| {
                Error::from_aya(
                    &format!("replace the program on {dev} (BPF_LINK_UPDATE)"),
                    &e,
                )
            })?;
            replaced = true;
        }
    }
    if !replaced {
        let id = prog
            .attach_to_if_index(ifindex, mode.flags())
            .map_err(|e| {
                let attach = || format!("attach XDP to {dev} in {} mode", mode.as_str());
                let errno =
                    std::iter::successors(Some(&e as &(dyn std::error::Error + 'static)), |e| {
                        e.source()
                    })
                    .find_map(|e| e.downcast_ref::<std::io::Error>()?.raw_os_error());
                match errno {
                    Some(libc::EOPNOTSUPP) if mode == Mode::Native => Error::NativeUnsupported {
                        dev: dev.to_string(),
                    },
                    Some(libc::EBUSY) | Some(libc::EEXIST) => Error::Busy {
                        dev: dev.to_string(),
                    },
                    _ => Error::from_aya(&attach(), &e),
                }
            })?;
        let link = prog
            .take_link(id)
            .map_err(|e| Error::from_aya("take the XDP link", &e))?;
        let link = FdLink::try_from(link).map_err(|e| Error::from_aya("XDP link", &e))?;
        // Dropping the PinnedLink closes this descriptor; the pin keeps the link.
        drop(
            link.pin(pin)
                .map_err(|e| Error::from_aya(&format!("pin {}", pin.display()), &e))?,
        );
    }
    let link = sys::obj_get(pin).map_err(|e| Error::io(format!("open {}", pin.display()), e))?;
    let info = sys::link_info(link.as_fd()).map_err(|e| Error::io("link info", e))?;
    Ok(Attachment {
        dev: dev.to_string(),
        ifindex,
        replaced,
        link_id: info.id,
        prog_id: info.prog_id,
        link,
        pin: pin.to_path_buf(),
    })
}

fn xdp_prog(ebpf: &mut Ebpf) -> Result<&mut Xdp> {
    ebpf.program_mut(PROG_NAME)
        .ok_or_else(|| Error::Load(format!("no program {PROG_NAME} in the object")))?
        .try_into()
        .map_err(|e| Error::from_aya("the filter program", &e))
}

/// Puts `prog` (an XDP program) in the filter's chain slot under `pin_dir`: from the next
/// packet on, what the filter passes goes to it (when the filter was loaded with
/// [`Settings::chain`]). Replaces the stage that was there in one map update, so no packet
/// meets neither.
pub fn chain_next(pin_dir: &Path, prog: BorrowedFd<'_>) -> Result<()> {
    ChainSlot::filter(pin_dir).set(prog)
}

/// Empties the filter's chain slot (passed packets pass); false when it was empty.
pub fn chain_clear(pin_dir: &Path) -> Result<bool> {
    ChainSlot::filter(pin_dir).clear()
}

/// The id of the program in the filter's chain slot, if any.
pub fn chain_prog_id(pin_dir: &Path) -> Result<Option<u32>> {
    ChainSlot::filter(pin_dir).prog_id()
}

/// Detaches ringx's filter from `dev` (BPF_LINK_DETACH, so it stops even while `ringx serve`
/// still holds the link) and removes the link's pin. The maps stay (see [`purge`]).
pub fn detach(pin_dir: &Path, dev: &str) -> Result<()> {
    let pin = link_pin(pin_dir, dev);
    let fd = sys::obj_get(&pin).map_err(|e| match e.raw_os_error() {
        Some(libc::ENOENT) => Error::NotAttached {
            dev: dev.to_string(),
        },
        _ => Error::io(format!("open {}", pin.display()), e),
    })?;
    detach_fd(fd.as_fd(), &pin)
}

/// Removes the map pins under `pin_dir` (lists and counters are gone once no program uses
/// them) and the directory when it is empty. Refuses while a link is still pinned there.
pub fn purge(pin_dir: &Path) -> Result<()> {
    let links = attachments(pin_dir)?;
    if let Some(l) = links.first() {
        return Err(Error::Invalid(format!(
            "{} is still attached (pinned in {}); detach it first",
            l.dev,
            pin_dir.display()
        )));
    }
    for name in map_names::ALL {
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

/// A link pinned under the pin directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkStatus {
    /// The device name the pin was made for.
    pub dev: String,
    /// 0 when the device is gone (the link is defunct).
    pub ifindex: u32,
    pub link_id: u32,
    pub prog_id: u32,
}

/// The links pinned under `pin_dir`.
pub fn attachments(pin_dir: &Path) -> Result<Vec<LinkStatus>> {
    let rd = match std::fs::read_dir(pin_dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io(format!("read {}", pin_dir.display()), e)),
    };
    let mut out = Vec::new();
    for ent in rd.flatten() {
        let name = ent.file_name().to_string_lossy().into_owned();
        let Some(dev) = name.strip_prefix("link_") else {
            continue;
        };
        let fd = sys::obj_get(&ent.path())
            .map_err(|e| Error::io(format!("open {}", ent.path().display()), e))?;
        let info = sys::link_info(fd.as_fd()).map_err(|e| Error::io("link info", e))?;
        out.push(LinkStatus {
            dev: dev.to_string(),
            ifindex: info.ifindex,
            link_id: info.id,
            prog_id: info.prog_id,
        });
    }
    out.sort_by(|a, b| a.dev.cmp(&b.dev));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syn_params() {
        let s = Settings::default();
        assert_eq!(s.syn_params().unwrap(), (0, 1, 0));
        let s = Settings {
            syn_rate: 100,
            ..Settings::default()
        };
        // burst defaults to the rate: a full bucket takes one second to fill.
        assert_eq!(s.syn_params().unwrap(), (100, 100, 1_000_000_000));
        let s = Settings {
            syn_rate: 3,
            syn_burst: 1,
            ..Settings::default()
        };
        assert_eq!(s.syn_params().unwrap(), (3, 1, 333_333_334));
        let s = Settings {
            syn_rate: 2_000_000_000,
            ..Settings::default()
        };
        assert!(s.syn_params().is_err());
    }

    #[test]
    fn modes() {
        assert_eq!("native".parse::<Mode>().unwrap(), Mode::Native);
        assert_eq!("skb".parse::<Mode>().unwrap(), Mode::Generic);
        assert!("hw".parse::<Mode>().is_err());
    }
}
