//! Passive-side connection locality: hand each new connection to the zone running on the CPU
//! that processed its SYN.
//!
//! Every zone has its own `SO_REUSEPORT` listener on each address, so the kernel chooses
//! the listener — by default by a hash of the 4-tuple, which sends most connections to a
//! zone on *another* core than the one the NIC delivers their packets to (1 − 1/zones of
//! them). [`CpuSteering::attach`] replaces that choice, per reuseport group (one group per
//! address), with the receiving CPU's own zone:
//!
//! * **eBPF** (preferred; root, or `CAP_BPF` + `CAP_NET_ADMIN`): a
//!   `BPF_PROG_TYPE_SK_REUSEPORT` program, ten hand-assembled instructions, looks up the
//!   current CPU in a `BPF_MAP_TYPE_REUSEPORT_SOCKARRAY` that maps CPU → listener and selects
//!   that listener with `bpf_sk_select_reuseport`. When the CPU has no listener (no zone
//!   there, or the zone's listener was closed: closing a socket removes it from the array)
//!   the program returns `SK_PASS` without a selection and the kernel falls back to its own
//!   hash over the listeners that remain — Fastsocket's slow path. No connection is refused
//!   because a zone died.
//! * **`SO_INCOMING_CPU`** (fallback, unprivileged, Linux 6.2+): each listener is tagged with
//!   its zone's CPU; the kernel's reuseport selection then prefers, among the listeners its
//!   hash walk visits, one tagged with the current CPU, and otherwise takes the first live
//!   one. O(listeners) per SYN instead of O(1), same fallback behaviour.
//!
//! A classic-BPF program (`SO_ATTACH_REUSEPORT_CBPF` returning `cpu → index`) is not used:
//! it returns an index into the group's socket array, whose order changes when a listener
//! closes (the last socket moves into the hole), so after a zone dies it would steer the CPU's
//! connections to the wrong zone rather than fall back.
//!
//! Locality needs two things from the deployment: one zone per CPU that receives packets
//! (zones pinned to distinct CPUs), and the NIC's queues (RSS) or RPS delivering each flow to
//! one CPU. Where nothing else decides, the CPU that processes a SYN is the one the packet
//! arrived on: on loopback and veth, the sender's.
//!
//! The program and its map go through `ringx_xdp::sys`, the workspace's one raw `bpf(2)`
//! layer: aya cannot load `SK_REUSEPORT` programs (see that module for why it exists).

use std::io;
use std::net::TcpListener;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};

use ringx_xdp::sys::{self, map_type, prog_type, Insn, MapFd, BPF_ANY};

use crate::reuseport_prog::*;

/// How listeners are steered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// The `SK_REUSEPORT` eBPF program and its CPU → listener array.
    Ebpf,
    /// `SO_INCOMING_CPU` on each listener (Linux 6.2+ reuseport selection).
    IncomingCpu,
}

impl Method {
    /// A short description for logs.
    pub fn describe(self) -> &'static str {
        match self {
            Method::Ebpf => {
                "eBPF reuseport program (CPU -> zone listener, kernel hash when the CPU has none)"
            }
            Method::IncomingCpu => {
                "SO_INCOMING_CPU on the listeners (kernel prefers the receiving CPU's listener)"
            }
        }
    }
}

/// CPU steering of one reuseport group (the listeners of one address, one per zone).
///
/// The eBPF program stays attached to the group after this value is dropped (the kernel holds
/// it); keep the value to change the CPU → listener map later ([`CpuSteering::set`]).
#[derive(Debug)]
pub struct CpuSteering {
    method: Method,
    /// The sockarray (eBPF only).
    map: Option<MapFd>,
    /// The loaded program (eBPF only); kept so it can be attached to a re-created group.
    prog: Option<OwnedFd>,
    max_entries: u32,
    /// Why eBPF was not used, when it was not.
    fallback_reason: Option<String>,
}

impl CpuSteering {
    /// Steers the group `listeners` — `(cpu, listener)` pairs, every listener bound to the same
    /// address with `SO_REUSEPORT` and listening — by CPU: eBPF if the kernel lets us, else
    /// `SO_INCOMING_CPU` ([`CpuSteering::fallback_reason`] says why). Errors when two listeners
    /// name the same CPU, or when neither method can be set up.
    pub fn attach(listeners: &[(usize, &TcpListener)]) -> io::Result<CpuSteering> {
        check_distinct(listeners)?;
        match Self::attach_ebpf(listeners) {
            Ok(s) => Ok(s),
            Err(e) => {
                let mut s = Self::attach_incoming_cpu(listeners).map_err(|e2| {
                    io::Error::new(
                        e2.kind(),
                        format!("eBPF steering: {e}; SO_INCOMING_CPU steering: {e2}"),
                    )
                })?;
                s.fallback_reason = Some(e.to_string());
                Ok(s)
            }
        }
    }

    /// eBPF steering only: loads the program, fills the CPU → listener array and attaches the
    /// program to the group (through the first listener).
    pub fn attach_ebpf(listeners: &[(usize, &TcpListener)]) -> io::Result<CpuSteering> {
        check_distinct(listeners)?;
        let Some(first) = listeners.first() else {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "no listeners"));
        };
        let max_cpu = listeners.iter().map(|&(c, _)| c).max().unwrap_or(0);
        let max_entries = u32::try_from(max_cpu + 1)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "CPU number too large"))?
            .max(possible_cpus());
        let map = map_create(max_entries)?;
        let prog = prog_load(map.as_fd().as_raw_fd())?;
        let s = CpuSteering {
            method: Method::Ebpf,
            map: Some(map),
            prog: Some(prog),
            max_entries,
            fallback_reason: None,
        };
        for &(cpu, l) in listeners {
            s.set(cpu, l)?;
        }
        s.attach_group(first.1.as_fd())?;
        Ok(s)
    }

    /// `SO_INCOMING_CPU` steering only: tags each listener with its CPU. Refused before
    /// Linux 6.2, whose reuseport selection ignores the tag.
    pub fn attach_incoming_cpu(listeners: &[(usize, &TcpListener)]) -> io::Result<CpuSteering> {
        check_distinct(listeners)?;
        if kernel_version() < (6, 2) {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "the kernel's reuseport selection honours SO_INCOMING_CPU from Linux 6.2",
            ));
        }
        for &(cpu, l) in listeners {
            let cpu = libc::c_int::try_from(cpu)
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "CPU number too large"))?;
            setsockopt_int(l.as_raw_fd(), libc::SO_INCOMING_CPU, cpu)
                .map_err(|e| ctx("setsockopt(SO_INCOMING_CPU)", e))?;
        }
        Ok(CpuSteering {
            method: Method::IncomingCpu,
            map: None,
            prog: None,
            max_entries: 0,
            fallback_reason: None,
        })
    }

    /// The method in use.
    pub fn method(&self) -> Method {
        self.method
    }

    /// Why eBPF is not in use (`None` when it is, or when SO_INCOMING_CPU was asked for).
    pub fn fallback_reason(&self) -> Option<&str> {
        self.fallback_reason.as_deref()
    }

    /// Makes `listener` the one for `cpu` (a zone that re-created its listener). A listener
    /// holds one CPU's slot at most (the kernel answers `EBUSY` otherwise).
    pub fn set(&self, cpu: usize, listener: &TcpListener) -> io::Result<()> {
        self.set_fd(cpu, listener.as_fd())
    }

    /// [`CpuSteering::set`] for a listener known by a descriptor (a duplicate the caller
    /// holds).
    pub fn set_fd(&self, cpu: usize, listener: std::os::fd::BorrowedFd<'_>) -> io::Result<()> {
        match &self.map {
            Some(map) => {
                let key = self.key(cpu)?;
                // A socket descriptor in (the kernel stores the socket, not the number).
                let fd = listener.as_raw_fd() as u64;
                map.update(&key.to_ne_bytes(), &fd.to_ne_bytes(), BPF_ANY)
                    .map_err(|e| ctx(&format!("bpf(BPF_MAP_UPDATE_ELEM) for CPU {cpu}"), e))
            }
            None => {
                let cpu = libc::c_int::try_from(cpu).map_err(|_| {
                    io::Error::new(io::ErrorKind::InvalidInput, "CPU number too large")
                })?;
                setsockopt_int(listener.as_raw_fd(), libc::SO_INCOMING_CPU, cpu)
                    .map_err(|e| ctx("setsockopt(SO_INCOMING_CPU)", e))
            }
        }
    }

    /// Forgets the listener of `cpu`, so its connections take the kernel's hash (eBPF only;
    /// closing the listener does the same by itself).
    pub fn clear(&self, cpu: usize) -> io::Result<()> {
        let Some(map) = &self.map else {
            return Ok(());
        };
        let key = self.key(cpu)?;
        map.delete(&key.to_ne_bytes())
            .map(drop)
            .map_err(|e| ctx("bpf(BPF_MAP_DELETE_ELEM)", e))
    }

    /// eBPF steering for listeners another program creates (`libringx_preload.so`): the
    /// program and an empty CPU → listener map covering every possible CPU, attached to no
    /// group yet ([`CpuSteering::attach_group`] attaches it, [`CpuSteering::set_fd`] and
    /// [`CpuSteering::set_fd_if_empty`] fill it).
    pub fn ebpf_detached() -> io::Result<CpuSteering> {
        let max_entries = possible_cpus();
        let map = map_create(max_entries)?;
        let prog = prog_load(map.as_fd().as_raw_fd())?;
        Ok(CpuSteering {
            method: Method::Ebpf,
            map: Some(map),
            prog: Some(prog),
            max_entries,
            fallback_reason: None,
        })
    }

    /// The eBPF steering another process created, by the ids [`CpuSteering::ids`] gave
    /// there (`BPF_*_GET_FD_BY_ID`: needs `CAP_SYS_ADMIN`).
    pub fn ebpf_by_ids(prog_id: u32, map_id: u32) -> io::Result<CpuSteering> {
        let prog = sys::prog_fd_by_id(prog_id).map_err(|e| ctx("bpf(BPF_PROG_GET_FD_BY_ID)", e))?;
        let map = sys::map_fd_by_id(map_id).map_err(|e| ctx("bpf(BPF_MAP_GET_FD_BY_ID)", e))?;
        let map = MapFd::new(map).map_err(|e| ctx("bpf(BPF_OBJ_GET_INFO_BY_FD)", e))?;
        let max_entries = map.info().max_entries;
        Ok(CpuSteering {
            method: Method::Ebpf,
            map: Some(map),
            prog: Some(prog),
            max_entries,
            fallback_reason: None,
        })
    }

    /// (program id, map id) of eBPF steering, which another process can open
    /// ([`CpuSteering::ebpf_by_ids`]).
    pub fn ids(&self) -> Option<(u32, u32)> {
        let prog = sys::prog_info(self.prog.as_ref()?.as_fd()).ok()?.id;
        Some((prog, self.map.as_ref()?.info().id))
    }

    /// The CPUs the map has a slot for (eBPF only; 0 otherwise).
    pub fn cpus(&self) -> usize {
        self.max_entries as usize
    }

    /// Attaches the program to the reuseport group of `listener` (any of its members): new
    /// connections to that group are steered by this value's map from now on (eBPF only).
    pub fn attach_group(&self, listener: std::os::fd::BorrowedFd<'_>) -> io::Result<()> {
        let Some(prog) = &self.prog else {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "SO_INCOMING_CPU steering has no program to attach",
            ));
        };
        crate::reuseport_prog::attach_group(listener, prog.as_fd())
    }

    /// The socket cookie (`SO_COOKIE`) of the listener in `cpu`'s slot; `None` when the slot
    /// is empty (eBPF only).
    pub fn cookie_at(&self, cpu: usize) -> io::Result<Option<u64>> {
        let Some(map) = &self.map else {
            return Ok(None);
        };
        let key = self.key(cpu)?;
        let mut v = [0u8; 8];
        let found = map
            .lookup(&key.to_ne_bytes(), &mut v)
            .map_err(|e| ctx("bpf(BPF_MAP_LOOKUP_ELEM)", e))?;
        Ok(found.then(|| u64::from_ne_bytes(v)))
    }

    /// [`CpuSteering::set_fd`] only if `cpu`'s slot is empty: false when another listener
    /// holds it (two processes choosing a CPU at once: one wins). eBPF only.
    pub fn set_fd_if_empty(
        &self,
        cpu: usize,
        listener: std::os::fd::BorrowedFd<'_>,
    ) -> io::Result<bool> {
        let Some(map) = &self.map else {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "SO_INCOMING_CPU steering has no map",
            ));
        };
        let key = self.key(cpu)?;
        let fd = listener.as_raw_fd() as u64;
        match map.update(&key.to_ne_bytes(), &fd.to_ne_bytes(), sys::BPF_NOEXIST) {
            Ok(()) => Ok(true),
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => Ok(false),
            Err(e) => Err(ctx(&format!("bpf(BPF_MAP_UPDATE_ELEM) for CPU {cpu}"), e)),
        }
    }

    fn key(&self, cpu: usize) -> io::Result<u32> {
        u32::try_from(cpu)
            .ok()
            .filter(|&k| k < self.max_entries)
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("CPU {cpu} is beyond the steering map"),
                )
            })
    }
}

/// Steers the listeners of a set of zones by CPU and logs what it did, one line per outcome:
/// `zones[i]` holds zone `i`'s listeners (one per address, the same addresses in the same
/// order in every zone), and zone `i` runs on `cpus[i]`. Returns the steering of each address
/// that got one; an address that got none keeps the kernel's hash (logged with the reason).
/// With fewer than two zones there is nothing to steer.
pub fn steer_zones(cpus: &[usize], zones: &[Vec<TcpListener>]) -> Vec<CpuSteering> {
    steer_zones_by_address(cpus, zones)
        .into_iter()
        .map(|(_, s)| s)
        .collect()
}

/// [`steer_zones`], each steering with the index of its address in the zones' listener lists
/// (for a caller that changes the CPU → listener map later, as a full zone's hand-off does).
pub fn steer_zones_by_address(
    cpus: &[usize],
    zones: &[Vec<TcpListener>],
) -> Vec<(usize, CpuSteering)> {
    let n = zones.first().map_or(0, Vec::len);
    if zones.len() < 2 || cpus.len() < zones.len() {
        return Vec::new();
    }
    let mut out = Vec::new();
    // (what happened, whether connections are steered by CPU, the addresses), in order.
    let mut outcomes: Vec<(String, bool, Vec<String>)> = Vec::new();
    for a in 0..n {
        let group: Vec<(usize, &TcpListener)> = zones
            .iter()
            .zip(cpus)
            .filter_map(|(ls, &cpu)| ls.get(a).map(|l| (cpu, l)))
            .collect();
        let addr = group
            .first()
            .and_then(|(_, l)| l.local_addr().ok())
            .map_or_else(|| format!("address #{a}"), |x| x.to_string());
        let (what, ok) = match CpuSteering::attach(&group) {
            Ok(s) => {
                let what = match s.fallback_reason() {
                    None => format!("by CPU with the {}", s.method().describe()),
                    Some(why) => format!(
                        "by CPU with {} because eBPF is unavailable: {why}",
                        s.method().describe()
                    ),
                };
                out.push((a, s));
                (what, true)
            }
            Err(e) => (
                format!("by the kernel's reuseport hash: steering by CPU failed: {e}"),
                false,
            ),
        };
        match outcomes.iter_mut().find(|o| o.0 == what) {
            Some(o) => o.2.push(addr),
            None => outcomes.push((what, ok, vec![addr])),
        }
    }
    for (what, ok, addrs) in outcomes {
        if ok {
            tracing::info!("new connections on {} are steered {what}", addrs.join(", "));
        } else {
            tracing::warn!("new connections on {} are steered {what}", addrs.join(", "));
        }
    }
    out
}

/// Removes any reuseport program from the group of `listener` (back to the kernel's hash).
pub fn detach(listener: &TcpListener) -> io::Result<()> {
    setsockopt_int(listener.as_raw_fd(), SO_DETACH_REUSEPORT_BPF, 0)
        .map_err(|e| ctx("setsockopt(SO_DETACH_REUSEPORT_BPF)", e))
}

fn check_distinct(listeners: &[(usize, &TcpListener)]) -> io::Result<()> {
    for (i, &(cpu, _)) in listeners.iter().enumerate() {
        if listeners[..i].iter().any(|&(c, _)| c == cpu) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("two zones on CPU {cpu}: steering by CPU needs one zone per CPU"),
            ));
        }
    }
    Ok(())
}

fn map_create(max_entries: u32) -> io::Result<MapFd> {
    // Key: the CPU. Value: a socket descriptor in, its cookie out (a u64 value lets lookups
    // read the cookie).
    let fd = sys::map_create(
        map_type::REUSEPORT_SOCKARRAY,
        4,
        8,
        max_entries,
        "ringx_cpu_lsn",
    )
    .map_err(|e| ctx("bpf(BPF_MAP_CREATE, REUSEPORT_SOCKARRAY)", e))?;
    MapFd::new(fd).map_err(|e| ctx("bpf(BPF_OBJ_GET_INFO_BY_FD) of the steering map", e))
}

/// The program, for the sockarray `map_fd`:
///
/// ```text
/// r6 = r1                                  ; ctx (struct sk_reuseport_md *)
/// r0 = bpf_get_smp_processor_id()
/// *(u32 *)(r10 - 4) = r0                   ; key = the CPU processing the SYN
/// r1 = r6
/// r2 = map                                 ; CPU -> listener
/// r3 = r10 - 4                             ; &key
/// r4 = 0
/// bpf_sk_select_reuseport(ctx, map, &key, 0)   ; fails if the CPU has no listener
/// return SK_PASS                           ; no selection made: the kernel's hash decides
/// ```
fn program(map_fd: RawFd) -> Vec<Insn> {
    let mut p = vec![
        insn(MOV64_REG, R6, R1, 0, 0),
        insn(CALL, 0, 0, 0, FN_GET_SMP_PROCESSOR_ID),
        insn(STX_W, R10, R0, -4, 0),
        insn(MOV64_REG, R1, R6, 0, 0),
    ];
    p.extend(ld_map(R2, map_fd));
    p.extend([
        insn(MOV64_REG, R3, R10, 0, 0),
        insn(ADD64_IMM, R3, 0, 0, -4),
        insn(MOV64_IMM, R4, 0, 0, 0),
        insn(CALL, 0, 0, 0, FN_SK_SELECT_REUSEPORT),
        insn(MOV64_IMM, R0, 0, 0, SK_PASS),
        insn(EXIT, 0, 0, 0, 0),
    ]);
    p
}

fn prog_load(map_fd: RawFd) -> io::Result<OwnedFd> {
    sys::prog_load(
        prog_type::SK_REUSEPORT,
        &program(map_fd),
        c"Apache-2.0",
        "ringx_cpu_steer",
    )
    .map_err(|e| ctx("bpf(BPF_PROG_LOAD, SK_REUSEPORT)", e))
}

/// The number of CPUs the kernel may bring online (`/sys/devices/system/cpu/possible`); 1
/// when it cannot be read (the map is then sized by the zones' CPUs alone).
fn possible_cpus() -> u32 {
    sys::possible_cpus().map_or(1, |n| u32::try_from(n).unwrap_or(u32::MAX).max(1))
}

/// The running kernel's (major, minor).
fn kernel_version() -> (u32, u32) {
    // SAFETY: utsname is plain data; uname fills the live local.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::uname(&mut u) } != 0 {
        return (0, 0);
    }
    // SAFETY: uname NUL-terminates `release` inside the array.
    let rel = unsafe { std::ffi::CStr::from_ptr(u.release.as_ptr()) }.to_string_lossy();
    let mut it = rel
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|p| p.parse::<u32>().ok());
    (it.next().unwrap_or(0), it.next().unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn program_encoding() {
        let p = program(7);
        assert_eq!(p.len(), 12);
        assert_eq!(std::mem::size_of::<Insn>(), 8);
        // r2 = map fd 7: LD_IMM64 with src_reg = BPF_PSEUDO_MAP_FD.
        assert_eq!(p[4], insn(0x18, 2, 1, 0, 7));
        assert_eq!(p[4].regs, 0x12);
        // *(u32 *)(r10 - 4) = r0
        assert_eq!(p[2].regs, 0x0a);
        assert_eq!(p[2].off, -4);
        assert_eq!(p.last().unwrap().code, 0x95);
    }

    #[test]
    fn duplicate_cpus_are_refused() {
        let opts = ringx_engine::ListenOptions::default();
        let a = ringx_engine::bind_reuseport("127.0.0.1:0".parse().unwrap(), &opts).unwrap();
        let b = ringx_engine::bind_reuseport(a.local_addr().unwrap(), &opts).unwrap();
        let e = CpuSteering::attach(&[(0, &a), (0, &b)]).unwrap_err();
        assert!(e.to_string().contains("two zones on CPU 0"), "{e}");
    }

    #[test]
    fn possible_cpus_is_at_least_online() {
        assert!(possible_cpus() as usize >= ringx_engine::sys::allowed_cpus().len());
        assert!(kernel_version() >= (3, 0));
    }
}
