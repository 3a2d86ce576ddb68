//! The control plane: makes the pinned maps say what a configuration says (services, their
//! backends and weights), and takes backends out of and back into the rings (drain, health).
//!
//! The maps are the whole state: a service's ring is rebuilt from its members and its
//! backends' flags alone ([`rebuild`]), so `ringx serve`, `ringx lb drain` and a health
//! checker can each change one thing and leave a consistent ring, and every balancer with
//! the same maps forwards a flow to the same backend.
//!
//! Ordering keeps the program consistent at every step: a new backend is written before any
//! ring names it, a new service's ring before the service, a removed service goes before its
//! ring, members and QUIC hosts, and a removed backend is cleared only once no ring names it (the
//! program then treats its connection-table entries as misses).

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};

use ringx_xdp::{Error, Result};

use crate::abi::{
    addr_bytes, addr_from, BackendValue, MemberKey, VipValue, BACKEND_DOWN, BACKEND_DRAIN,
    BACKEND_PRESENT, QUIC_HOSTS, VIP_PRESENT,
};
use crate::maps::{vip_key, LbMaps, Proto};
use crate::ring::{self, Member};

/// A virtual service as configured.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Service {
    pub addr: SocketAddr,
    pub proto: Proto,
    pub backends: Vec<BackendSpec>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackendSpec {
    pub addr: IpAddr,
    /// Relative share of new flows (1 or more).
    pub weight: u32,
    /// UDP services: the host byte of the QUIC connection IDs the backend issues (its
    /// `[http] quic_host`, 1..=255, one per backend of a service). A packet whose ID names
    /// it goes to this backend whatever its addresses and ports (a client that moved), unless
    /// the backend is down.
    pub quic_host: Option<u8>,
}

/// How to reach a backend: the device and next hop's MAC (see `nexthop.rs`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NextHop {
    /// 0: out of the device the packet came in on (XDP_TX).
    pub ifindex: u32,
    pub mtu: u16,
    pub dmac: [u8; 6],
    /// All zero: the arriving frame's destination MAC (the receiving device's own).
    pub smac: [u8; 6],
}

/// What [`apply`] changed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Applied {
    pub services: usize,
    pub backends: usize,
    pub added_services: usize,
    pub removed_services: usize,
    pub removed_backends: usize,
    /// Backends whose next hop could not be resolved (their traffic is dropped as
    /// `drop_no_route` until it is).
    pub unresolved: Vec<IpAddr>,
}

fn name(a: IpAddr) -> String {
    a.to_string()
}

/// Makes the maps hold exactly `services`. `resolve` gives each backend's next hop (None:
/// unresolved). Backends keep their index and their drain/down flags across calls; services
/// keep their id (and so their counters and the connection table's entries).
pub fn apply(
    maps: &LbMaps,
    services: &[Service],
    resolve: &dyn Fn(IpAddr) -> Option<NextHop>,
) -> Result<Applied> {
    let (max_vips, max_backends) = maps.capacity();
    let mut seen = BTreeSet::new();
    for s in services {
        if !seen.insert((s.addr, s.proto)) {
            return Err(Error::Invalid(format!(
                "service {}/{} is listed twice",
                s.addr,
                s.proto.as_str()
            )));
        }
        let mut hosts = BTreeMap::new();
        for b in &s.backends {
            let Some(h) = b.quic_host else { continue };
            if h == 0 || s.proto != Proto::Udp {
                return Err(Error::Invalid(format!(
                    "service {}/{}: backend {} has QUIC host {h}: hosts are 1..=255, on UDP \
                     services",
                    s.addr,
                    s.proto.as_str(),
                    b.addr
                )));
            }
            if let Some(o) = hosts.insert(h, b.addr) {
                return Err(Error::Invalid(format!(
                    "service {}: backends {o} and {} both have QUIC host {h}",
                    s.addr, b.addr
                )));
            }
        }
        if s.backends.len() > ring::MAX_MEMBERS {
            return Err(Error::Invalid(format!(
                "service {}: {} backends, at most {}",
                s.addr,
                s.backends.len(),
                ring::MAX_MEMBERS
            )));
        }
    }
    let mut out = Applied {
        services: services.len(),
        ..Applied::default()
    };

    // Backends: keep the indices of those present, give free ones to the new.
    let present = maps.backends()?;
    let mut index: BTreeMap<IpAddr, u32> = present
        .iter()
        .map(|(i, b)| (addr_from(&b.addr, b.family), *i))
        .collect();
    let wanted: BTreeSet<IpAddr> = services
        .iter()
        .flat_map(|s| s.backends.iter().map(|b| b.addr))
        .collect();
    let mut used: BTreeSet<u32> = index.values().copied().collect();
    for a in &wanted {
        let old = index.get(a).copied();
        let i = match old {
            Some(i) => i,
            None => {
                let i = (0..max_backends)
                    .find(|i| !used.contains(i))
                    .ok_or_else(|| Error::Invalid(format!("more than {max_backends} backends")))?;
                used.insert(i);
                index.insert(*a, i);
                maps.reset_counters(None, Some(i))?;
                i
            }
        };
        let prev = old.map(|i| maps.backend(i)).transpose()?;
        let (addr, family) = addr_bytes(*a);
        let hop = resolve(*a);
        if hop.is_none() {
            out.unresolved.push(*a);
        }
        let hop = hop.unwrap_or_default();
        let keep = prev.map_or(0, |p| p.flags & (BACKEND_DRAIN | BACKEND_DOWN) as u32);
        maps.set_backend(
            i,
            &BackendValue {
                addr,
                family,
                pad: 0,
                mtu: hop.mtu,
                flags: BACKEND_PRESENT as u32 | keep,
                ifindex: hop.ifindex,
                dmac: hop.dmac,
                smac: hop.smac,
            },
        )?;
    }
    out.backends = wanted.len();

    // Services: keep ids, give free ones to the new.
    let current = maps.vips()?;
    let mut ids: BTreeMap<_, u32> = current.iter().map(|(k, v)| (*k, v.id)).collect();
    let wanted_keys: Vec<_> = services.iter().map(|s| vip_key(s.addr, s.proto)).collect();
    // Gone first, so that their ids can be reused.
    for (k, v) in &current {
        if !wanted_keys.contains(k) {
            maps.remove_vip(k)?;
            maps.set_quic_hosts(v.id, &[None; QUIC_HOSTS as usize])?;
            for (m, _) in maps.members()?.iter().filter(|(m, _)| m.vip == v.id) {
                maps.remove_member(m)?;
            }
            ids.remove(k);
            out.removed_services += 1;
        }
    }
    for (s, k) in services.iter().zip(&wanted_keys) {
        let (id, new) = match ids.get(k) {
            Some(id) => (*id, false),
            None => {
                let taken: BTreeSet<u32> = ids.values().copied().collect();
                let id = (0..max_vips)
                    .find(|i| !taken.contains(i))
                    .ok_or_else(|| Error::Invalid(format!("more than {max_vips} services")))?;
                ids.insert(*k, id);
                maps.reset_counters(Some(id), None)?;
                (id, true)
            }
        };
        let members: BTreeMap<u32, u32> = s
            .backends
            .iter()
            .map(|b| (index[&b.addr], b.weight.max(1)))
            .collect();
        for (m, _) in maps.members()?.iter().filter(|(m, _)| m.vip == id) {
            if !members.contains_key(&m.backend) {
                maps.remove_member(m)?;
            }
        }
        for (b, w) in &members {
            maps.set_member(
                &MemberKey {
                    vip: id,
                    backend: *b,
                },
                *w,
            )?;
        }
        rebuild(maps, id, !new)?;
        let mut hosts = [None; QUIC_HOSTS as usize];
        for b in &s.backends {
            if let Some(h) = b.quic_host {
                hosts[usize::from(h)] = Some(index[&b.addr]);
            }
        }
        maps.set_quic_hosts(id, &hosts)?;
        if new {
            maps.set_vip(
                k,
                &VipValue {
                    id,
                    flags: VIP_PRESENT as u32,
                },
            )?;
            out.added_services += 1;
        }
    }

    // Backends no service names any more.
    for (a, i) in &index {
        if !wanted.contains(a) {
            maps.set_backend(*i, &BackendValue::default())?;
            out.removed_backends += 1;
        }
    }
    Ok(out)
}

/// Recomputes service `vip`'s ring from its members and their backends' flags and writes
/// it (only the slots that changed when `diff`).
pub fn rebuild(maps: &LbMaps, vip: u32, diff: bool) -> Result<usize> {
    let mut members = Vec::new();
    for (m, weight) in maps.members()?.iter().filter(|(m, _)| m.vip == vip) {
        let b = maps.backend(m.backend)?;
        members.push(Member {
            name: name(addr_from(&b.addr, b.family)),
            index: m.backend,
            weight: *weight,
            usable: b.flags & BACKEND_PRESENT as u32 != 0
                && b.flags & (BACKEND_DRAIN | BACKEND_DOWN) as u32 == 0,
        });
    }
    let ring = ring::build(&members).map_err(Error::Invalid)?;
    let old = if diff {
        Some(maps.read_ring(vip)?)
    } else {
        None
    };
    maps.write_ring(vip, &ring, old.as_deref())
}

/// Why a backend takes no new flows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Out {
    /// `ringx lb drain`: established flows stay, new ones go elsewhere.
    Drain,
    /// Failed its health check.
    Down,
}

impl Out {
    fn flag(self) -> u32 {
        match self {
            Out::Drain => BACKEND_DRAIN as u32,
            Out::Down => BACKEND_DOWN as u32,
        }
    }
}

/// Sets or clears a backend's `why` flag and rebuilds the rings of its services; false
/// when the flag already was as asked. Errors when no service has the backend.
pub fn set_out(maps: &LbMaps, addr: IpAddr, why: Out, on: bool) -> Result<bool> {
    let (i, mut b) = maps
        .backends()?
        .into_iter()
        .find(|(_, b)| addr_from(&b.addr, b.family) == addr)
        .ok_or_else(|| Error::Invalid(format!("{addr} is not a backend of any service")))?;
    let was = b.flags & why.flag() != 0;
    if was == on {
        return Ok(false);
    }
    if on {
        b.flags |= why.flag();
    } else {
        b.flags &= !why.flag();
    }
    maps.set_backend(i, &b)?;
    let vips: BTreeSet<u32> = maps
        .members()?
        .iter()
        .filter(|(m, _)| m.backend == i)
        .map(|(m, _)| m.vip)
        .collect();
    for v in vips {
        rebuild(maps, v, true)?;
    }
    Ok(true)
}

/// A backend as `ringx lb stats` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackendState {
    pub index: u32,
    pub addr: IpAddr,
    pub drained: bool,
    pub down: bool,
    pub resolved: bool,
}

/// Every present backend with its state.
pub fn backend_states(maps: &LbMaps) -> Result<Vec<BackendState>> {
    Ok(maps
        .backends()?
        .into_iter()
        .map(|(i, b)| BackendState {
            index: i,
            addr: addr_from(&b.addr, b.family),
            drained: b.flags & BACKEND_DRAIN as u32 != 0,
            down: b.flags & BACKEND_DOWN as u32 != 0,
            resolved: b.dmac != [0; 6],
        })
        .collect())
}

/// Service keys back into addresses: (id, address, protocol).
pub fn services(maps: &LbMaps) -> Result<Vec<(u32, SocketAddr, Proto)>> {
    Ok(maps
        .vips()?
        .into_iter()
        .filter_map(|(k, v)| {
            let proto = Proto::from_number(k.proto)?;
            let ip = addr_from(&k.addr, k.family);
            Some((v.id, SocketAddr::new(ip, u16::from_be(k.port)), proto))
        })
        .collect())
}

/// Looks every backend's next hop up again and writes those that changed (a neighbour's new
/// MAC, a route moved to another device). A backend that cannot be resolved now keeps what
/// it had. Returns how many changed.
pub fn refresh_next_hops(
    maps: &LbMaps,
    resolve: &dyn Fn(IpAddr) -> Option<NextHop>,
) -> Result<usize> {
    let mut changed = 0;
    for (i, mut b) in maps.backends()? {
        let Some(h) = resolve(addr_from(&b.addr, b.family)) else {
            continue;
        };
        if (b.ifindex, b.mtu, b.dmac, b.smac) != (h.ifindex, h.mtu, h.dmac, h.smac) {
            b.ifindex = h.ifindex;
            b.mtu = h.mtu;
            b.dmac = h.dmac;
            b.smac = h.smac;
            maps.set_backend(i, &b)?;
            changed += 1;
        }
    }
    Ok(changed)
}
