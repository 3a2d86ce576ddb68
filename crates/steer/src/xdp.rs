//! Software connection steering (issue #5) for devices without RSS: `bpf/ringx_steer.bpf.c`
//! sends every TCP packet to the CPU of the zone that owns its connection through a cpumap,
//! before the kernel's TCP code runs, so that the connection's socket is always processed on
//! its zone's core (Fastsocket's Receive Flow Deliver).
//!
//! * Replies to ringx's own (upstream) connections: zone = destination port `& mask`, the
//!   function the zones' port tables choose source ports by
//!   (`ringx_steer::steering::PortMask`), for destination ports in the tables' range.
//! * Packets to a listening port (downstream clients): zone = a hash of the client's address
//!   and port, [`passive_zone`], fixed for the connection; `[steering] listen = "cpu"` then
//!   has the zone on that CPU accept it.
//! * Anything else passes untouched.
//!
//! Unlike the DDoS filter (`ringx_xdp::Filter`) nothing here is pinned: the program, its maps and
//! its bpf_link belong to the process that loaded it and vanish with it (steering without the
//! zones that own the ports would only move packets around). A device runs one XDP program
//! at a time: to share one with the filter or the load balancer, that stage is loaded with
//! `chain` and this goes in its chain slot ([`Steer::chain_behind`], emptied again when this is
//! dropped).
//!
//! The program is loaded through aya, as the filter is; its test runs go through
//! `ringx_xdp::sys`, the one raw `bpf(2)` layer. `build.rs` compiles the C with the clang and
//! headers `ringx-xdp`'s build found.
//!
//! ```no_run
//! use ringx_steer::xdp::{Steer, SteerSettings};
//! use ringx_xdp::Mode;
//! let settings = SteerSettings {
//!     zone_cpus: vec![0, 1],
//!     mask: 1,
//!     port_range: (32768, 60999),
//!     listen_ports: vec![8080],
//!     qsize: 2048,
//! };
//! let mut steer = Steer::load(&settings)?;
//! steer.attach("veth0", Mode::Native)?; // detached when `steer` is dropped
//! # Ok::<(), ringx_xdp::Error>(())
//! ```

use std::os::fd::AsFd;

use aya::maps::{Array, CpuMap, PerCpuArray};
use aya::programs::{Xdp, XdpFlags};
use aya::Ebpf;

use ringx_xdp::sys::{self, TestRun};
use ringx_xdp::{Error, Mode, Result};

/// The compiled program (bpf/ringx_steer.bpf.c).
static STEER_OBJ: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/ringx_steer.o"));

const PROG_NAME: &str = "ringx_steer";

/// Most zones the program knows (`RS_MAX_ZONES`).
pub const MAX_ZONES: usize = 240;

/// Counter slots (`RS_STAT_*` in the C source).
mod slot {
    pub const NOT_TCP: u32 = 0;
    pub const MALFORMED: u32 = 1;
    pub const OTHER_PORT: u32 = 2;
    pub const NO_ZONE: u32 = 3;
    pub const ACTIVE: u32 = 4;
    pub const PASSIVE: u32 = 5;
    pub const LOCAL: u32 = 6;
    pub const REDIRECT: u32 = 7;
    pub const ZONE: u32 = 16;
}

/// What the program is loaded with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SteerSettings {
    /// The CPU of each zone, by zone index.
    pub zone_cpus: Vec<u32>,
    /// Active side: zone = destination port & `mask` (`2^k − 1`, `2^k` ≥ zones).
    pub mask: u16,
    /// The zones' port-table range (inclusive): destination ports here are active.
    pub port_range: (u16, u16),
    /// Listening ports: destination ports here are passive.
    pub listen_ports: Vec<u16>,
    /// Packets each CPU's cpumap queue holds (the kernel's default in samples: 2048).
    pub qsize: u32,
}

/// The zone the program gives a passive connection from `src` port `sport` (IPv4 address
/// as a host-order integer, IPv6 as the XOR of its four host-order words): the same
/// function as `passive_zone()` in the C source.
pub fn passive_zone(src_fold: u32, sport: u16, zones: u32) -> u32 {
    let h = (src_fold ^ u32::from(sport)).wrapping_mul(0x9E37_79B1);
    ((u64::from(h) * u64::from(zones)) >> 32) as u32
}

/// `src_fold` of [`passive_zone`] for an address.
pub fn fold_addr(ip: std::net::IpAddr) -> u32 {
    match ip {
        std::net::IpAddr::V4(a) => u32::from(a),
        std::net::IpAddr::V6(a) => a
            .octets()
            .chunks_exact(4)
            .map(|w| u32::from_be_bytes([w[0], w[1], w[2], w[3]]))
            .fold(0, |x, w| x ^ w),
    }
}

/// The program's counters, summed over CPUs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SteerStats {
    /// Not TCP over IPv4/IPv6 (or a later fragment, or TCP behind IPv6 extension headers).
    pub not_tcp: u64,
    /// Truncated or inconsistent headers (passed; the kernel drops them).
    pub malformed: u64,
    /// TCP to a port neither listening nor in the port range.
    pub other_port: u64,
    /// Active packets whose port names no zone.
    pub no_zone: u64,
    /// Active (upstream reply) packets steered.
    pub active: u64,
    /// Passive (client) packets steered.
    pub passive: u64,
    /// Steered packets that were already on their zone's CPU.
    pub local: u64,
    /// Steered packets sent to another CPU's queue.
    pub redirected: u64,
    /// Steered packets per zone.
    pub per_zone: Vec<u64>,
}

impl std::fmt::Display for SteerStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "active={} passive={} local={} redirected={} per_zone={:?} no_zone={} other_port={} \
             not_tcp={} malformed={}",
            self.active,
            self.passive,
            self.local,
            self.redirected,
            self.per_zone,
            self.no_zone,
            self.other_port,
            self.not_tcp,
            self.malformed
        )
    }
}

/// The loaded steering program; dropping it detaches it and frees its maps.
pub struct Steer {
    ebpf: Ebpf,
    zones: usize,
    attached: Option<(String, Mode)>,
    /// The chain slot the program is in, if any.
    chained: Option<ringx_xdp::ChainSlot>,
}

impl Drop for Steer {
    fn drop(&mut self) {
        // The program array keeps the program alive: leave no steering behind the stage in
        // front once the zones it steers to are gone (unless another program took the slot).
        let Some(slot) = self.chained.take() else {
            return;
        };
        let mine = prog(&mut self.ebpf)
            .ok()
            .and_then(|p| p.fd().ok())
            .and_then(|fd| sys::prog_info(fd.as_fd()).ok())
            .map(|i| i.id);
        if mine.is_some() && slot.prog_id().ok().flatten() == mine {
            let _ = slot.clear();
        }
    }
}

impl std::fmt::Debug for Steer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Steer")
            .field("zones", &self.zones)
            .field("attached", &self.attached)
            .finish_non_exhaustive()
    }
}

impl Steer {
    /// Loads (verifies) the program and fills its maps: zone → CPU, a cpumap queue for each
    /// zone's CPU, the listening ports.
    pub fn load(s: &SteerSettings) -> Result<Steer> {
        let zones = s.zone_cpus.len();
        if zones == 0 || zones > MAX_ZONES {
            return Err(Error::Invalid(format!(
                "software steering needs 1 to {MAX_ZONES} zones, not {zones}"
            )));
        }
        if usize::from(s.mask) + 1 < zones || !(u32::from(s.mask) + 1).is_power_of_two() {
            return Err(Error::Invalid(format!(
                "port mask {:#x} cannot encode {zones} zones",
                s.mask
            )));
        }
        let ncpus = sys::possible_cpus().map_err(|e| Error::io("read the possible CPUs", e))?;
        if let Some(c) = s.zone_cpus.iter().find(|&&c| c as usize >= ncpus) {
            return Err(Error::Invalid(format!(
                "zone CPU {c} is not a possible CPU (0..{ncpus})"
            )));
        }
        let zones_u32 = zones as u32;
        let mask = u32::from(s.mask);
        let (lo, hi) = (u32::from(s.port_range.0), u32::from(s.port_range.1));
        let mut ebpf = ringx_xdp::loader()?
            .btf(None)
            .set_global("rs_zones", &zones_u32, true)
            .set_global("rs_mask", &mask, true)
            .set_global("rs_port_lo", &lo, true)
            .set_global("rs_port_hi", &hi, true)
            .set_max_entries("rs_cpumap", ncpus as u32)
            .load(STEER_OBJ)
            .map_err(|e| Error::from_aya("load the steering object", &e))?;
        prog(&mut ebpf)?
            .load()
            .map_err(|e| Error::from_aya("load the steering program (verifier)", &e))?;
        {
            let mut zc: Array<_, u32> = Array::try_from(map(&mut ebpf, "rs_zone_cpu")?)
                .map_err(|e| Error::from_aya("rs_zone_cpu", &e))?;
            for (z, &cpu) in s.zone_cpus.iter().enumerate() {
                zc.set(z as u32, cpu, 0)
                    .map_err(|e| Error::from_aya("fill rs_zone_cpu", &e))?;
            }
        }
        {
            let mut cm = CpuMap::try_from(map(&mut ebpf, "rs_cpumap")?)
                .map_err(|e| Error::from_aya("rs_cpumap", &e))?;
            let mut done = Vec::new();
            for &cpu in &s.zone_cpus {
                if !done.contains(&cpu) {
                    cm.set(cpu, s.qsize.max(1), None, 0)
                        .map_err(|e| Error::from_aya(&format!("cpumap entry of CPU {cpu}"), &e))?;
                    done.push(cpu);
                }
            }
        }
        {
            let mut lp: Array<_, u8> = Array::try_from(map(&mut ebpf, "rs_listen")?)
                .map_err(|e| Error::from_aya("rs_listen", &e))?;
            for &p in &s.listen_ports {
                lp.set(u32::from(p), 1, 0)
                    .map_err(|e| Error::from_aya("fill rs_listen", &e))?;
            }
        }
        Ok(Steer {
            ebpf,
            zones,
            attached: None,
            chained: None,
        })
    }

    /// Attaches to `dev` through a bpf_link owned by this object (not pinned): it detaches
    /// when the object is dropped or the process exits.
    pub fn attach(&mut self, dev: &str, mode: Mode) -> Result<()> {
        let ifindex = sys::ifindex(dev).ok_or_else(|| Error::NoDevice(dev.to_string()))?;
        let flags = match mode {
            Mode::Native => XdpFlags::DRV_MODE,
            Mode::Generic => XdpFlags::SKB_MODE,
        };
        prog(&mut self.ebpf)?
            .attach_to_if_index(ifindex, flags)
            .map_err(|e| {
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
                    _ => Error::from_aya(
                        &format!("attach XDP steering to {dev} in {} mode", mode.as_str()),
                        &e,
                    ),
                }
            })?;
        self.attached = Some((dev.to_string(), mode));
        Ok(())
    }

    /// Puts the program in the chain slot of the stage in front (the XDP filter loaded with
    /// `chain`, [`ringx_xdp::ChainSlot::filter`], or the load balancer loaded with `chain`):
    /// what that stage passes is steered, on its device. The slot is emptied again when this
    /// object is dropped, if it still holds this program.
    pub fn chain_behind(&mut self, slot: &ringx_xdp::ChainSlot) -> Result<()> {
        let fd = prog(&mut self.ebpf)?
            .fd()
            .map_err(|e| Error::from_aya("the steering program", &e))?
            .as_fd()
            .try_clone_to_owned()
            .map_err(|e| Error::io("dup the steering program", e))?;
        slot.set(fd.as_fd())?;
        self.chained = Some(slot.clone());
        Ok(())
    }

    /// Where it is attached.
    pub fn attached(&self) -> Option<(&str, Mode)> {
        self.attached.as_ref().map(|(d, m)| (d.as_str(), *m))
    }

    /// Runs the program on `packet` (BPF_PROG_TEST_RUN) `repeat` times; counters count.
    pub fn test_run(&self, packet: &[u8], repeat: u32) -> Result<TestRun> {
        let p: &Xdp = self
            .ebpf
            .program(PROG_NAME)
            .ok_or_else(|| Error::Load(format!("no program {PROG_NAME} in the object")))?
            .try_into()
            .map_err(|e| Error::from_aya("the steering program", &e))?;
        let fd = p
            .fd()
            .map_err(|e| Error::from_aya("the steering program", &e))?;
        sys::prog_test_run(fd.as_fd(), packet, repeat, 0, 0)
            .map_err(|e| Error::io("BPF_PROG_TEST_RUN", e))
    }

    /// The counters, summed over CPUs.
    pub fn stats(&self) -> Result<SteerStats> {
        let m = self
            .ebpf
            .map("rs_stats")
            .ok_or_else(|| Error::Load("no map rs_stats in the object".into()))?;
        let arr: PerCpuArray<_, u64> =
            PerCpuArray::try_from(m).map_err(|e| Error::from_aya("rs_stats", &e))?;
        let get = |i: u32| -> Result<u64> {
            let v = arr
                .get(&i, 0)
                .map_err(|e| Error::from_aya("read rs_stats", &e))?;
            Ok(v.iter().sum())
        };
        Ok(SteerStats {
            not_tcp: get(slot::NOT_TCP)?,
            malformed: get(slot::MALFORMED)?,
            other_port: get(slot::OTHER_PORT)?,
            no_zone: get(slot::NO_ZONE)?,
            active: get(slot::ACTIVE)?,
            passive: get(slot::PASSIVE)?,
            local: get(slot::LOCAL)?,
            redirected: get(slot::REDIRECT)?,
            per_zone: (0..self.zones as u32)
                .map(|z| get(slot::ZONE + z))
                .collect::<Result<_>>()?,
        })
    }
}

fn prog(ebpf: &mut Ebpf) -> Result<&mut Xdp> {
    ebpf.program_mut(PROG_NAME)
        .ok_or_else(|| Error::Load(format!("no program {PROG_NAME} in the object")))?
        .try_into()
        .map_err(|e| Error::from_aya("the steering program", &e))
}

fn map<'a>(ebpf: &'a mut Ebpf, name: &str) -> Result<&'a mut aya::maps::Map> {
    ebpf.map_mut(name)
        .ok_or_else(|| Error::Load(format!("no map {name} in the steering object")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passive_zone_spreads_even_ports() {
        // Clients choose even ports first: the hash must still use every zone.
        let src = fold_addr("10.0.0.2".parse().unwrap());
        let mut per = [0u32; 4];
        for p in (40000u16..42000).step_by(2) {
            per[passive_zone(src, p, 4) as usize] += 1;
        }
        assert!(per.iter().all(|&n| n > 150), "{per:?}");
        assert!(
            (0..1000u16).all(|p| passive_zone(src, p, 3) < 3),
            "in range"
        );
        let v6 = fold_addr("2001:db8::1".parse().unwrap());
        assert_eq!(v6, 0x2001_0db8 ^ 1);
    }
}
