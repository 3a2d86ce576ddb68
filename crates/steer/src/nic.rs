//! NIC discovery: the RSS key, hash function and indirection table a device uses, its RX
//! queues, and which CPUs serve each queue's interrupt.
//!
//! * RSS: the `SIOCETHTOOL` ioctl with `ETHTOOL_GRSSH` (Linux 3.19; what `ethtool -x IF`
//!   runs). A first call with `indir_size = key_size = 0` returns the sizes; a second one with
//!   room for them returns the table and the key.
//! * RX queues: `ETHTOOL_GCHANNELS` (Linux 3.7; `ethtool -l IF`), else the number of
//!   `/sys/class/net/IF/queues/rx-*` directories.
//! * IRQs: the lines of `/proc/interrupts` whose action name names the device
//!   (`eth0-TxRx-3`, `i40e-eth0-TxRx-3`) or its virtio input queues (`virtio2-input.0`), and
//!   `/proc/irq/N/smp_affinity_list` for each.
//!
//! Loopback, veth and single-queue virtio have no RSS: the ioctl fails with `EOPNOTSUPP` or
//! reports sizes of 0. [`NicReport`] then says so and recommends software steering
//! ([`crate::steering::PortMask`]).

use std::ffi::c_void;
use std::fmt;
use std::fs;
use std::io;
use std::mem::{offset_of, size_of};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

use crate::steering::{Reta, RetaError};

const ETHTOOL_GCHANNELS: u32 = 0x0000_003c;
const ETHTOOL_GRSSH: u32 = 0x0000_0046;

/// `struct ethtool_rxfh` from `<linux/ethtool.h>`, without its flexible `rss_config[]` tail
/// (the indirection table as `u32`s, then the key bytes).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct EthtoolRxfh {
    cmd: u32,
    rss_context: u32,
    indir_size: u32,
    key_size: u32,
    hfunc: u8,
    /// `rsvd8[0]` before Linux 6.8.
    input_xfrm: u8,
    rsvd8: [u8; 2],
    rsvd32: u32,
}

const _: () = assert!(size_of::<EthtoolRxfh>() == 24);
const _: () = assert!(offset_of!(EthtoolRxfh, hfunc) == 16);
const _: () = assert!(offset_of!(EthtoolRxfh, rsvd32) == 20);

/// Room for the tail: 4096 words hold a 2048-entry table (the largest in-tree drivers use)
/// and a key of up to 8 KiB.
const RXFH_TAIL_WORDS: usize = 4096;

/// `struct ethtool_rxfh` with its tail, as one buffer the kernel writes into.
#[repr(C)]
struct RxfhBuf {
    hdr: EthtoolRxfh,
    rss_config: [u32; RXFH_TAIL_WORDS],
}

const _: () = assert!(offset_of!(RxfhBuf, rss_config) == size_of::<EthtoolRxfh>());

/// `struct ethtool_channels`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct EthtoolChannels {
    cmd: u32,
    max_rx: u32,
    max_tx: u32,
    max_other: u32,
    max_combined: u32,
    rx_count: u32,
    tx_count: u32,
    other_count: u32,
    combined_count: u32,
}

const _: () = assert!(size_of::<EthtoolChannels>() == 36);

/// `struct ifreq` with the `ifr_data` member of its union, padded to the full union.
#[repr(C)]
struct IfReq {
    name: [u8; libc::IFNAMSIZ],
    data: *mut c_void,
    _pad: [u8; size_of::<libc::ifreq>() - libc::IFNAMSIZ - size_of::<*mut c_void>()],
}

const _: () = assert!(size_of::<IfReq>() == size_of::<libc::ifreq>());
const _: () = assert!(offset_of!(IfReq, data) == libc::IFNAMSIZ);

/// What went wrong, and on which device.
#[derive(Debug)]
pub enum NicError {
    /// No network device of that name.
    NoDevice(String),
    /// The name cannot be a device name (empty, too long, contains `/` or NUL).
    BadName(String),
    /// A system call or file read failed.
    Io {
        /// The device.
        dev: String,
        /// What was being done (`ETHTOOL_GRSSH`, `read /proc/interrupts`, ...).
        op: String,
        /// The error.
        source: io::Error,
    },
}

impl fmt::Display for NicError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NicError::NoDevice(d) => write!(f, "no network device named {d:?}"),
            NicError::BadName(d) => write!(f, "{d:?} is not a valid network device name"),
            NicError::Io { dev, op, source } => write!(f, "{dev}: {op}: {source}"),
        }
    }
}

impl std::error::Error for NicError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            NicError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

fn io_err(dev: &str, op: impl Into<String>, source: io::Error) -> NicError {
    NicError::Io {
        dev: dev.to_string(),
        op: op.into(),
        source,
    }
}

/// A device's RSS configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RssConfig {
    /// The hash key.
    pub key: Vec<u8>,
    /// `ETH_RSS_HASH_*` bits: 1 Toeplitz, 2 XOR, 4 CRC32.
    pub hfunc: u8,
    /// The indirection table: a queue per entry.
    pub indir: Vec<u32>,
}

impl RssConfig {
    /// The hash functions enabled, by name (`toeplitz`, `xor`, `crc32`).
    pub fn hash_functions(&self) -> Vec<String> {
        let names = ["toeplitz", "xor", "crc32"];
        (0..8)
            .filter(|bit| self.hfunc & (1 << bit) != 0)
            .map(|bit| {
                names
                    .get(bit)
                    .map_or(format!("bit{bit}"), |n| n.to_string())
            })
            .collect()
    }

    /// Whether the device hashes with Toeplitz (which [`crate::toeplitz`] reproduces).
    pub fn is_toeplitz(&self) -> bool {
        self.hfunc & 1 != 0
    }

    /// The indirection table as a [`Reta`].
    pub fn reta(&self) -> Result<Reta, RetaError> {
        Reta::from_indir(&self.indir)
    }
}

/// Whether the device does RSS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RssState {
    /// It does, like this.
    Available(RssConfig),
    /// It does not; why, in words.
    Unavailable(String),
}

/// How many RX queues, and where that came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RxQueues {
    /// The count (combined + RX-only channels, or sysfs queue directories).
    pub count: u32,
    /// `ETHTOOL_GCHANNELS` or `sysfs`.
    pub source: &'static str,
}

/// An interrupt of the device's receive path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueIrq {
    /// The IRQ number.
    pub irq: u32,
    /// Its action name in `/proc/interrupts`.
    pub name: String,
    /// The queue index read from the name's trailing digits.
    pub queue: Option<u16>,
    /// `smp_affinity_list`: the CPUs allowed to serve it.
    pub cpus: Vec<usize>,
}

/// Everything [`discover`] learnt about one device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NicReport {
    /// The device name.
    pub dev: String,
    /// RSS configuration, or why there is none.
    pub rss: RssState,
    /// RX queues.
    pub rx_queues: RxQueues,
    /// Receive interrupts and their CPUs.
    pub irqs: Vec<QueueIrq>,
}

impl NicReport {
    /// Whether the NIC can steer connections by itself (Toeplitz RSS over more than one
    /// queue); if not, ringx should steer in software.
    pub fn hardware_steering(&self) -> bool {
        matches!(&self.rss, RssState::Available(c) if c.is_toeplitz() && !c.indir.is_empty())
            && self.rx_queues.count > 1
    }

    /// The advice, in words.
    pub fn recommendation(&self) -> String {
        match &self.rss {
            RssState::Unavailable(_) => "no RSS: use software steering (replies steered by \
                 local port, Fastsocket-style: zone = port & (2^k - 1))"
                .to_string(),
            RssState::Available(c) if !c.is_toeplitz() => format!(
                "RSS hash function is {}, not Toeplitz: ringx cannot predict queues; use \
                 software steering or set it with `ethtool -X {} hfunc toeplitz`",
                c.hash_functions().join("+"),
                self.dev
            ),
            RssState::Available(_) if self.rx_queues.count <= 1 => {
                "RSS over a single RX queue spreads nothing: use software steering".to_string()
            }
            RssState::Available(_) => format!(
                "RSS over {} RX queues: use hardware steering (Toeplitz port tables)",
                self.rx_queues.count
            ),
        }
    }
}

impl fmt::Display for NicReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "device: {}", self.dev)?;
        match &self.rss {
            RssState::Available(c) => {
                writeln!(f, "hash function: {}", c.hash_functions().join(", "))?;
                let key: Vec<String> = c.key.iter().map(|b| format!("{b:02x}")).collect();
                writeln!(f, "key ({} bytes): {}", c.key.len(), key.join(":"))?;
                writeln!(f, "indirection table ({} entries):", c.indir.len())?;
                for (row, chunk) in c.indir.chunks(8).enumerate() {
                    write!(f, "  {:5}:", row * 8)?;
                    for q in chunk {
                        write!(f, " {q:5}")?;
                    }
                    writeln!(f)?;
                }
            }
            RssState::Unavailable(why) => writeln!(f, "rss: not available ({why})")?,
        }
        writeln!(
            f,
            "rx queues: {} ({})",
            self.rx_queues.count, self.rx_queues.source
        )?;
        if self.irqs.is_empty() {
            writeln!(f, "irqs: none found in /proc/interrupts")?;
        } else {
            writeln!(f, "irqs:")?;
            for irq in &self.irqs {
                let queue = irq.queue.map_or("-".to_string(), |q| q.to_string());
                writeln!(
                    f,
                    "  queue {queue:>3}  irq {:>4}  cpus {:<8} {}",
                    irq.irq,
                    format_cpu_list(&irq.cpus),
                    irq.name
                )?;
            }
        }
        writeln!(f, "{}", self.recommendation())
    }
}

fn check_name(dev: &str) -> Result<[u8; libc::IFNAMSIZ], NicError> {
    let bytes = dev.as_bytes();
    if bytes.is_empty()
        || bytes.len() >= libc::IFNAMSIZ
        || bytes
            .iter()
            .any(|&b| b == b'/' || b == 0 || b.is_ascii_whitespace())
        || dev == "."
        || dev == ".."
    {
        return Err(NicError::BadName(dev.to_string()));
    }
    let mut name = [0u8; libc::IFNAMSIZ];
    name[..bytes.len()].copy_from_slice(bytes);
    // The calling thread's network namespace, which /sys/class/net need not show (a process
    // that entered a namespace with setns keeps the sysfs mounted for its old one).
    // SAFETY: `name` is NUL-terminated (at most IFNAMSIZ - 1 bytes were copied).
    if unsafe { libc::if_nametoindex(name.as_ptr().cast()) } == 0 {
        return Err(NicError::NoDevice(dev.to_string()));
    }
    Ok(name)
}

fn control_socket(dev: &str) -> Result<OwnedFd, NicError> {
    // SAFETY: socket(2) takes no pointers; any return value is handled below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io_err(
            dev,
            "socket(AF_INET, SOCK_DGRAM)",
            io::Error::last_os_error(),
        ));
    }
    // SAFETY: `fd` was just returned by socket(2), is open, and is owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Issue `SIOCETHTOOL` for `dev` with `cmd` pointing at `T`, whose first field is the
/// ethtool command word.
fn ethtool<T>(sock: &OwnedFd, name: [u8; libc::IFNAMSIZ], cmd: &mut T) -> io::Result<()> {
    let mut req = IfReq {
        name,
        data: (cmd as *mut T).cast(),
        _pad: [0; size_of::<libc::ifreq>() - libc::IFNAMSIZ - size_of::<*mut c_void>()],
    };
    // SAFETY: `req` is a valid `struct ifreq` (size asserted above) with a NUL-terminated name
    // and `ifr_data` pointing at `cmd`, which is exclusively borrowed for this call and is a
    // `#[repr(C)]` ethtool struct (size asserted above) whose command word selects a GET
    // command: the kernel reads the header and writes at most `size_of::<T>()` bytes, since
    // for ETHTOOL_GRSSH we pass sizes that fit `RxfhBuf`. No memory ordering concern: the
    // ioctl is synchronous and the buffer is not shared.
    let rc = unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCETHTOOL, &mut req as *mut IfReq) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn is_unsupported(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EOPNOTSUPP) | Some(libc::EINVAL) | Some(libc::ENOTTY)
    )
}

/// The device's RSS key, hash function and indirection table (`ethtool -x IF`).
pub fn rss_config(dev: &str) -> Result<RssState, NicError> {
    let name = check_name(dev)?;
    let sock = control_socket(dev)?;
    let mut buf = Box::new(RxfhBuf {
        hdr: EthtoolRxfh {
            cmd: ETHTOOL_GRSSH,
            ..EthtoolRxfh::default()
        },
        rss_config: [0; RXFH_TAIL_WORDS],
    });
    // First call: sizes only.
    if let Err(e) = ethtool(&sock, name, &mut buf.hdr) {
        if e.raw_os_error() == Some(libc::ENODEV) {
            return Err(NicError::NoDevice(dev.to_string()));
        }
        if is_unsupported(&e) {
            return Ok(RssState::Unavailable(format!(
                "the driver does not report RSS: ETHTOOL_GRSSH failed with {e}"
            )));
        }
        return Err(io_err(dev, "ioctl(SIOCETHTOOL, ETHTOOL_GRSSH)", e));
    }
    let indir_size = buf.hdr.indir_size as usize;
    let key_size = buf.hdr.key_size as usize;
    if indir_size == 0 && key_size == 0 {
        return Ok(RssState::Unavailable(
            "the driver reports no RSS indirection table and no key".to_string(),
        ));
    }
    let key_words = key_size.div_ceil(4);
    if indir_size + key_words > RXFH_TAIL_WORDS {
        return Err(io_err(
            dev,
            "ETHTOOL_GRSSH",
            io::Error::other(format!(
                "indirection table of {indir_size} entries and key of {key_size} bytes exceed \
                 the {RXFH_TAIL_WORDS}-word buffer"
            )),
        ));
    }
    // Second call: the table and the key, sizes as the kernel reported them.
    buf.hdr = EthtoolRxfh {
        cmd: ETHTOOL_GRSSH,
        indir_size: indir_size as u32,
        key_size: key_size as u32,
        ..EthtoolRxfh::default()
    };
    ethtool(&sock, name, &mut *buf)
        .map_err(|e| io_err(dev, "ioctl(SIOCETHTOOL, ETHTOOL_GRSSH) with buffers", e))?;
    let indir = buf.rss_config[..indir_size].to_vec();
    let key: Vec<u8> = buf.rss_config[indir_size..indir_size + key_words]
        .iter()
        .flat_map(|w| w.to_ne_bytes())
        .take(key_size)
        .collect();
    Ok(RssState::Available(RssConfig {
        key,
        hfunc: buf.hdr.hfunc,
        indir,
    }))
}

/// `struct ethtool_drvinfo`.
#[repr(C)]
struct EthtoolDrvinfo {
    cmd: u32,
    driver: [u8; 32],
    version: [u8; 32],
    fw_version: [u8; 32],
    bus_info: [u8; 32],
    erom_version: [u8; 32],
    reserved2: [u8; 12],
    n_priv_flags: u32,
    n_stats: u32,
    testinfo_len: u32,
    eedump_len: u32,
    regdump_len: u32,
}

const _: () = assert!(size_of::<EthtoolDrvinfo>() == 196);

const ETHTOOL_GDRVINFO: u32 = 0x0000_0003;

/// The device's driver name (`ethtool -i IF`: `veth`, `virtio_net`, `ixgbe`...).
pub fn driver(dev: &str) -> Result<String, NicError> {
    let name = check_name(dev)?;
    let sock = control_socket(dev)?;
    let mut info = EthtoolDrvinfo {
        cmd: ETHTOOL_GDRVINFO,
        driver: [0; 32],
        version: [0; 32],
        fw_version: [0; 32],
        bus_info: [0; 32],
        erom_version: [0; 32],
        reserved2: [0; 12],
        n_priv_flags: 0,
        n_stats: 0,
        testinfo_len: 0,
        eedump_len: 0,
        regdump_len: 0,
    };
    ethtool(&sock, name, &mut info).map_err(|e| {
        if e.raw_os_error() == Some(libc::ENODEV) {
            NicError::NoDevice(dev.to_string())
        } else {
            io_err(dev, "ioctl(SIOCETHTOOL, ETHTOOL_GDRVINFO)", e)
        }
    })?;
    let end = info.driver.iter().position(|&b| b == 0).unwrap_or(32);
    Ok(String::from_utf8_lossy(&info.driver[..end]).into_owned())
}

/// The number of RX queues: `ETHTOOL_GCHANNELS` (combined + RX), else sysfs.
pub fn rx_queues(dev: &str) -> Result<RxQueues, NicError> {
    let name = check_name(dev)?;
    let sock = control_socket(dev)?;
    let mut ch = EthtoolChannels {
        cmd: ETHTOOL_GCHANNELS,
        ..EthtoolChannels::default()
    };
    if ethtool(&sock, name, &mut ch).is_ok() && ch.combined_count + ch.rx_count > 0 {
        return Ok(RxQueues {
            count: ch.combined_count + ch.rx_count,
            source: "ETHTOOL_GCHANNELS",
        });
    }
    let dir = Path::new("/sys/class/net").join(dev).join("queues");
    let entries =
        fs::read_dir(&dir).map_err(|e| io_err(dev, format!("read {}", dir.display()), e))?;
    let count = entries
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("rx-"))
        .count() as u32;
    Ok(RxQueues {
        count,
        source: "sysfs",
    })
}

/// The virtio device behind `dev` (`virtio2`), if it is one.
fn virtio_name(dev: &str) -> Option<String> {
    let link = fs::read_link(Path::new("/sys/class/net").join(dev).join("device")).ok()?;
    let base = link.file_name()?.to_string_lossy().into_owned();
    base.starts_with("virtio").then_some(base)
}

/// Whether an action name of `/proc/interrupts` is a receive interrupt of `dev` (or of the
/// virtio device `virtio`).
fn is_rx_irq(name: &str, dev: &str, virtio: Option<&str>) -> bool {
    let parts: Vec<&str> = name.split('-').collect();
    if let Some(v) = virtio {
        if parts.len() == 2 && parts[0] == v && parts[1].starts_with("input.") {
            return true;
        }
    }
    if !parts.contains(&dev) {
        return false;
    }
    let lower = name.to_ascii_lowercase();
    // Skip TX-only vectors (`eth0-tx-3`); `eth0` alone is kept: single-vector NICs name
    // their one interrupt so.
    !lower.contains("tx") || lower.contains("rx")
}

/// The receive interrupts of `dev` listed in `/proc/interrupts` text: (IRQ, action name).
pub fn parse_interrupts(text: &str, dev: &str, virtio: Option<&str>) -> Vec<(u32, String)> {
    let mut out = Vec::new();
    for line in text.lines() {
        let mut fields = line.split_whitespace();
        let Some(irq) = fields.next().and_then(|f| f.strip_suffix(':')) else {
            continue;
        };
        let Ok(irq) = irq.parse::<u32>() else {
            continue; // NMI, LOC, ... are not device interrupts.
        };
        let Some(name) = fields.next_back() else {
            continue;
        };
        if is_rx_irq(name, dev, virtio) && !out.iter().any(|(i, _)| *i == irq) {
            out.push((irq, name.to_string()));
        }
    }
    out
}

/// The queue index in an action name: its trailing digits (`eth0-TxRx-3`, `virtio2-input.0`).
fn queue_of_name(name: &str) -> Option<u16> {
    let digits = name.len() - name.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    if digits == 0 || digits == name.len() {
        return None;
    }
    let sep = name[..name.len() - digits].chars().last()?;
    if sep != '-' && sep != '.' && sep != '_' {
        return None;
    }
    name[name.len() - digits..].parse().ok()
}

/// Parse a CPU list (`0-3,8,10-11`).
pub fn parse_cpu_list(s: &str) -> Option<Vec<usize>> {
    let mut cpus = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.parse().ok()?, b.parse().ok()?);
                if b < a {
                    return None;
                }
                cpus.extend(a..=b);
            }
            None => cpus.push(part.parse().ok()?),
        }
    }
    Some(cpus)
}

/// Write a CPU list compactly (`0-3,8`).
pub fn format_cpu_list(cpus: &[usize]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            cpus[i].to_string()
        } else {
            format!("{}-{}", cpus[i], cpus[j])
        });
        i = j + 1;
    }
    if out.is_empty() {
        "-".to_string()
    } else {
        out.join(",")
    }
}

/// The receive interrupts of `dev` and their CPU affinity.
pub fn queue_irqs(dev: &str) -> Result<Vec<QueueIrq>, NicError> {
    check_name(dev)?;
    let text = fs::read_to_string("/proc/interrupts")
        .map_err(|e| io_err(dev, "read /proc/interrupts", e))?;
    let virtio = virtio_name(dev);
    let mut irqs: Vec<QueueIrq> = parse_interrupts(&text, dev, virtio.as_deref())
        .into_iter()
        .map(|(irq, name)| {
            let cpus = fs::read_to_string(format!("/proc/irq/{irq}/smp_affinity_list"))
                .ok()
                .and_then(|s| parse_cpu_list(&s))
                .unwrap_or_default();
            QueueIrq {
                irq,
                queue: queue_of_name(&name),
                name,
                cpus,
            }
        })
        .collect();
    irqs.sort_by_key(|q| (q.queue, q.irq));
    Ok(irqs)
}

/// RSS, RX queues and IRQ affinity of `dev`.
pub fn discover(dev: &str) -> Result<NicReport, NicError> {
    Ok(NicReport {
        dev: dev.to_string(),
        rss: rss_config(dev)?,
        rx_queues: rx_queues(dev)?,
        irqs: queue_irqs(dev)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const INTERRUPTS: &str = "           CPU0       CPU1
  24:          1          0  IO-APIC   5-edge      ACPI:Ged
  37:          0          0 PCI-MSIX-0000:00:03.0   0-edge      virtio2-config
  38:          0       3567 PCI-MSIX-0000:00:03.0   1-edge      virtio2-input.0
  39:       3180          0 PCI-MSIX-0000:00:03.0   2-edge      virtio2-output.0
  40:          0          0 PCI-MSIX-0000:00:03.0   3-edge      virtio2-input.1
  41:          5          0  IR-PCI-MSI 1048576-edge      eth1
  42:       1000          0  IR-PCI-MSI 1048577-edge      eth1-TxRx-0
  43:          0       1000  IR-PCI-MSI 1048578-edge      eth1-TxRx-1
  44:          0          0  IR-PCI-MSI 1048579-edge      eth1-tx-2
  45:          0          0  IR-PCI-MSI 1048580-edge      i40e-eth10-TxRx-0
 NMI:          0          0   Non-maskable interrupts
 LOC:     123456     654321   Local timer interrupts
";

    #[test]
    fn interrupts_of_virtio_device() {
        let got = parse_interrupts(INTERRUPTS, "eth0", Some("virtio2"));
        assert_eq!(
            got,
            vec![
                (38, "virtio2-input.0".to_string()),
                (40, "virtio2-input.1".to_string())
            ]
        );
    }

    #[test]
    fn interrupts_named_after_device() {
        let got: Vec<u32> = parse_interrupts(INTERRUPTS, "eth1", None)
            .into_iter()
            .map(|x| x.0)
            .collect();
        assert_eq!(got, vec![41, 42, 43]);
        let got: Vec<u32> = parse_interrupts(INTERRUPTS, "eth10", None)
            .into_iter()
            .map(|x| x.0)
            .collect();
        assert_eq!(got, vec![45]);
        assert!(parse_interrupts(INTERRUPTS, "lo", None).is_empty());
    }

    #[test]
    fn queue_index_from_name() {
        assert_eq!(queue_of_name("eth1-TxRx-3"), Some(3));
        assert_eq!(queue_of_name("virtio2-input.12"), Some(12));
        assert_eq!(queue_of_name("eth1"), None);
        assert_eq!(queue_of_name("12"), None);
        assert_eq!(queue_of_name("mlx5_comp7"), None);
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(
            parse_cpu_list("0-3,8,10-11\n"),
            Some(vec![0, 1, 2, 3, 8, 10, 11])
        );
        assert_eq!(parse_cpu_list("1"), Some(vec![1]));
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("x"), None);
        assert_eq!(format_cpu_list(&[0, 1, 2, 3, 8, 10, 11]), "0-3,8,10-11");
        assert_eq!(format_cpu_list(&[]), "-");
    }

    #[test]
    fn names_checked() {
        assert!(matches!(check_name(""), Err(NicError::BadName(_))));
        assert!(matches!(check_name("a/b"), Err(NicError::BadName(_))));
        assert!(matches!(
            check_name("0123456789abcdef"),
            Err(NicError::BadName(_))
        ));
        assert!(matches!(
            check_name("ringxnosuchdev0"),
            Err(NicError::NoDevice(_))
        ));
    }

    #[test]
    fn loopback_has_no_rss() {
        if !Path::new("/sys/class/net/lo").exists() {
            ringx_kerneltest::skip("no /sys/class/net/lo (no sysfs in this environment)");
            return;
        }
        let report = discover("lo").expect("discover lo");
        assert!(matches!(report.rss, RssState::Unavailable(_)), "{report:?}");
        assert!(!report.hardware_steering());
        assert!(report
            .recommendation()
            .starts_with("no RSS: use software steering"));
        assert!(report.rx_queues.count >= 1);
    }

    #[test]
    fn report_text() {
        let report = NicReport {
            dev: "eth9".into(),
            rss: RssState::Available(RssConfig {
                key: crate::toeplitz::DEFAULT_KEY.to_vec(),
                hfunc: 1,
                indir: (0..16).map(|i| i % 2).collect(),
            }),
            rx_queues: RxQueues {
                count: 2,
                source: "ETHTOOL_GCHANNELS",
            },
            irqs: vec![QueueIrq {
                irq: 42,
                name: "eth9-TxRx-0".into(),
                queue: Some(0),
                cpus: vec![0],
            }],
        };
        assert!(report.hardware_steering());
        let text = report.to_string();
        assert!(text.contains("hash function: toeplitz"), "{text}");
        assert!(text.contains("key (40 bytes): 6d:5a:56:da"), "{text}");
        assert!(text.contains("indirection table (16 entries):"), "{text}");
        assert!(text.contains("irq   42"), "{text}");
        assert!(text.contains("use hardware steering"), "{text}");
        let reta = match &report.rss {
            RssState::Available(c) => c.reta().unwrap(),
            RssState::Unavailable(_) => unreachable!(),
        };
        assert_eq!(reta.table.len(), 16);
    }
}
