//! The balancer's pinned maps, opened by path so that every process (`ringx serve`,
//! `ringx lb`, tests) works on the same state: services, backends, members, rings, counters
//! and the connection table.

use std::net::{IpAddr, SocketAddr};
use std::path::Path;

use ringx_xdp::sys::{MapFd, BPF_ANY};
use ringx_xdp::{Error, Result};

use crate::abi::{
    addr_bytes, map_names, AddrKey, BackendValue, Counter, FlowKey, FlowKey4, FlowValue, MemberKey,
    Pod, Reason, ReasonCounter, VipKey, VipValue, QUIC_HOSTS, RING_SIZE,
};

/// The default pin directory of the balancer's maps and links (one per network namespace).
pub const DEFAULT_LB_PIN_DIR: &str = "/sys/fs/bpf/ringx-lb";

/// A virtual service's protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Proto {
    Tcp,
    Udp,
}

impl Proto {
    pub fn number(self) -> u8 {
        match self {
            Proto::Tcp => crate::abi::PROTO_TCP,
            Proto::Udp => crate::abi::PROTO_UDP,
        }
    }

    pub fn from_number(n: u8) -> Option<Proto> {
        match n {
            crate::abi::PROTO_TCP => Some(Proto::Tcp),
            crate::abi::PROTO_UDP => Some(Proto::Udp),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Proto::Tcp => "tcp",
            Proto::Udp => "udp",
        }
    }
}

impl std::str::FromStr for Proto {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Proto, String> {
        match s {
            "tcp" => Ok(Proto::Tcp),
            "udp" => Ok(Proto::Udp),
            _ => Err(format!("protocol {s:?}: use \"tcp\" or \"udp\"")),
        }
    }
}

/// A service's key as the program looks it up.
pub fn vip_key(addr: SocketAddr, proto: Proto) -> VipKey {
    let (a, family) = addr_bytes(addr.ip());
    VipKey {
        addr: a,
        port: addr.port().to_be(),
        proto: proto.number(),
        family,
    }
}

pub fn addr_key(ip: IpAddr) -> AddrKey {
    let (addr, family) = addr_bytes(ip);
    AddrKey {
        addr,
        family,
        pad: [0; 3],
    }
}

fn es(op: &str, name: &str) -> impl FnOnce(std::io::Error) -> Error {
    let op = format!("{op} {name}");
    move |e| Error::io(op, e)
}

/// Handles on the pinned maps.
#[derive(Debug)]
pub struct LbMaps {
    pub(crate) vips: MapFd,
    pub(crate) vip_addrs: MapFd,
    vip_keys: MapFd,
    pub(crate) backends: MapFd,
    pub(crate) ring: MapFd,
    pub(crate) members: MapFd,
    quic_hosts: MapFd,
    vip_stats: MapFd,
    backend_stats: MapFd,
    stats: MapFd,
    conns: MapFd,
    conns4: MapFd,
}

impl LbMaps {
    /// Opens the maps pinned under `dir` (by a loaded balancer).
    pub fn open_pinned(dir: &Path) -> Result<LbMaps> {
        let open = |name: &str| {
            let p = dir.join(name);
            MapFd::open_pinned(&p).map_err(|e| match e.raw_os_error() {
                Some(libc::ENOENT) => Error::NotPinned { path: p.clone() },
                _ => Error::io(format!("open {}", p.display()), e),
            })
        };
        Ok(LbMaps {
            vips: open(map_names::VIPS)?,
            vip_addrs: open(map_names::VIP_ADDRS)?,
            vip_keys: open(map_names::VIP_KEYS)?,
            backends: open(map_names::BACKENDS)?,
            ring: open(map_names::RING)?,
            members: open(map_names::MEMBERS)?,
            quic_hosts: open(map_names::QUIC_HOSTS)?,
            vip_stats: open(map_names::VIP_STATS)?,
            backend_stats: open(map_names::BACKEND_STATS)?,
            stats: open(map_names::STATS)?,
            conns: open(map_names::CONNS)?,
            conns4: open(map_names::CONNS4)?,
        })
    }

    /// How many services and backends the maps can hold.
    pub fn capacity(&self) -> (u32, u32) {
        (
            self.vip_stats.info().max_entries,
            self.backends.info().max_entries,
        )
    }

    /// Every service: key and value.
    pub fn vips(&self) -> Result<Vec<(VipKey, VipValue)>> {
        let mut out = Vec::new();
        for k in self.vips.keys().map_err(es("list", map_names::VIPS))? {
            let mut v = [0u8; std::mem::size_of::<VipValue>()];
            if self
                .vips
                .lookup(&k, &mut v)
                .map_err(es("read", map_names::VIPS))?
            {
                out.push((VipKey::from_bytes(&k), VipValue::from_bytes(&v)));
            }
        }
        out.sort_by_key(|(_, v)| v.id);
        Ok(out)
    }

    pub fn set_vip(&self, k: &VipKey, v: &VipValue) -> Result<()> {
        self.vip_keys
            .update(&v.id.to_ne_bytes(), k.as_bytes(), BPF_ANY)
            .map_err(es("write", map_names::VIP_KEYS))?;
        self.vips
            .update(k.as_bytes(), v.as_bytes(), BPF_ANY)
            .map_err(es("write", map_names::VIPS))?;
        let a = AddrKey {
            addr: k.addr,
            family: k.family,
            pad: [0; 3],
        };
        self.vip_addrs
            .update(a.as_bytes(), &1u32.to_ne_bytes(), BPF_ANY)
            .map_err(es("write", map_names::VIP_ADDRS))
    }

    /// Removes a service, and its address from the fragment list when no other service
    /// has it.
    pub fn remove_vip(&self, k: &VipKey) -> Result<()> {
        let id = self
            .vips()
            .ok()
            .and_then(|all| all.into_iter().find(|(key, _)| key == k).map(|(_, v)| v.id));
        self.vips
            .delete(k.as_bytes())
            .map_err(es("delete from", map_names::VIPS))?;
        // Its connection-table entries no longer match a service.
        if let Some(id) = id {
            self.vip_keys
                .update(&id.to_ne_bytes(), VipKey::default().as_bytes(), BPF_ANY)
                .map_err(es("write", map_names::VIP_KEYS))?;
        }
        let still = self
            .vips()?
            .iter()
            .any(|(o, _)| o.addr == k.addr && o.family == k.family);
        if !still {
            let a = AddrKey {
                addr: k.addr,
                family: k.family,
                pad: [0; 3],
            };
            self.vip_addrs
                .delete(a.as_bytes())
                .map_err(es("delete from", map_names::VIP_ADDRS))?;
        }
        Ok(())
    }

    pub fn backend(&self, index: u32) -> Result<BackendValue> {
        let mut v = [0u8; std::mem::size_of::<BackendValue>()];
        self.backends
            .lookup(&index.to_ne_bytes(), &mut v)
            .map_err(es("read", map_names::BACKENDS))?;
        Ok(BackendValue::from_bytes(&v))
    }

    pub fn set_backend(&self, index: u32, b: &BackendValue) -> Result<()> {
        self.backends
            .update(&index.to_ne_bytes(), b.as_bytes(), BPF_ANY)
            .map_err(es("write", map_names::BACKENDS))
    }

    /// Every present backend: (index, value).
    pub fn backends(&self) -> Result<Vec<(u32, BackendValue)>> {
        let mut out = Vec::new();
        for i in 0..self.backends.info().max_entries {
            let b = self.backend(i)?;
            if b.flags & crate::abi::BACKEND_PRESENT as u32 != 0 {
                out.push((i, b));
            }
        }
        Ok(out)
    }

    /// Every (service, backend) pair and its weight.
    pub fn members(&self) -> Result<Vec<(MemberKey, u32)>> {
        let mut out = Vec::new();
        for k in self
            .members
            .keys()
            .map_err(es("list", map_names::MEMBERS))?
        {
            let mut v = [0u8; 4];
            if self
                .members
                .lookup(&k, &mut v)
                .map_err(es("read", map_names::MEMBERS))?
            {
                out.push((MemberKey::from_bytes(&k), u32::from_ne_bytes(v)));
            }
        }
        out.sort_by_key(|(k, _)| (k.vip, k.backend));
        Ok(out)
    }

    pub fn set_member(&self, k: &MemberKey, weight: u32) -> Result<()> {
        self.members
            .update(k.as_bytes(), &weight.to_ne_bytes(), BPF_ANY)
            .map_err(es("write", map_names::MEMBERS))
    }

    pub fn remove_member(&self, k: &MemberKey) -> Result<()> {
        self.members
            .delete(k.as_bytes())
            .map(drop)
            .map_err(es("delete from", map_names::MEMBERS))
    }

    /// Service `vip`'s QUIC hosts as the program reads them: for each host byte, the index
    /// of the backend that has it.
    pub fn quic_hosts(&self, vip: u32) -> Result<[Option<u32>; QUIC_HOSTS as usize]> {
        let mut out = [None; QUIC_HOSTS as usize];
        let mut v = [0u8; 4];
        for (h, o) in out.iter_mut().enumerate() {
            self.quic_hosts
                .lookup(&(vip * QUIC_HOSTS as u32 + h as u32).to_ne_bytes(), &mut v)
                .map_err(es("read", map_names::QUIC_HOSTS))?;
            *o = u32::from_ne_bytes(v).checked_sub(1);
        }
        Ok(out)
    }

    /// Makes service `vip`'s QUIC hosts `hosts`, writing only the slots that change (the
    /// program sees each slot old or new). Returns how many.
    pub fn set_quic_hosts(
        &self,
        vip: u32,
        hosts: &[Option<u32>; QUIC_HOSTS as usize],
    ) -> Result<usize> {
        let old = self.quic_hosts(vip)?;
        let mut n = 0;
        for (h, (new, was)) in hosts.iter().zip(&old).enumerate() {
            if new == was {
                continue;
            }
            let v = new.map_or(0, |i| i + 1);
            self.quic_hosts
                .update(
                    &(vip * QUIC_HOSTS as u32 + h as u32).to_ne_bytes(),
                    &v.to_ne_bytes(),
                    BPF_ANY,
                )
                .map_err(es("write", map_names::QUIC_HOSTS))?;
            n += 1;
        }
        Ok(n)
    }

    /// Writes the entries of service `vip`'s ring that differ from `old` (all of them
    /// without `old`). One element at a time: the program sees every slot either old or
    /// new, and a slot changes only where the backend set did.
    pub fn write_ring(&self, vip: u32, ring: &[u32], old: Option<&[u32]>) -> Result<usize> {
        assert_eq!(ring.len(), RING_SIZE as usize);
        let base = vip * RING_SIZE as u32;
        let mut written = 0;
        for (i, b) in ring.iter().enumerate() {
            if old.is_some_and(|o| o[i] == *b) {
                continue;
            }
            self.ring
                .update(&(base + i as u32).to_ne_bytes(), &b.to_ne_bytes(), BPF_ANY)
                .map_err(es("write", map_names::RING))?;
            written += 1;
        }
        Ok(written)
    }

    /// Service `vip`'s ring as the program reads it.
    pub fn read_ring(&self, vip: u32) -> Result<Vec<u32>> {
        let base = vip * RING_SIZE as u32;
        let mut out = Vec::with_capacity(RING_SIZE as usize);
        let mut v = [0u8; 4];
        for i in 0..RING_SIZE as u32 {
            self.ring
                .lookup(&(base + i).to_ne_bytes(), &mut v)
                .map_err(es("read", map_names::RING))?;
            out.push(u32::from_ne_bytes(v));
        }
        Ok(out)
    }

    fn percpu<T: Pod>(&self, map: &MapFd, name: &str, index: u32) -> Result<Vec<T>> {
        let mut buf = vec![0u8; map.value_buf_len()];
        map.lookup(&index.to_ne_bytes(), &mut buf)
            .map_err(es("read", name))?;
        let stride = (map.info().value_size as usize).div_ceil(8) * 8;
        Ok(buf.chunks_exact(stride).map(T::from_bytes).collect())
    }

    /// Service `vip`'s counters, summed over CPUs.
    pub fn vip_counter(&self, vip: u32) -> Result<Counter> {
        let mut c = Counter::default();
        for v in self.percpu::<Counter>(&self.vip_stats, map_names::VIP_STATS, vip)? {
            c.add(&v);
        }
        Ok(c)
    }

    /// Backend `index`'s counters, summed over CPUs.
    pub fn backend_counter(&self, index: u32) -> Result<Counter> {
        let mut c = Counter::default();
        for v in self.percpu::<Counter>(&self.backend_stats, map_names::BACKEND_STATS, index)? {
            c.add(&v);
        }
        Ok(c)
    }

    /// Zeroes a service's or a backend's counters (when its id is given to a new one).
    pub fn reset_counters(&self, vip: Option<u32>, backend: Option<u32>) -> Result<()> {
        for (map, name, idx) in [
            (&self.vip_stats, map_names::VIP_STATS, vip),
            (&self.backend_stats, map_names::BACKEND_STATS, backend),
        ] {
            if let Some(i) = idx {
                let zero = vec![0u8; map.value_buf_len()];
                map.update(&i.to_ne_bytes(), &zero, BPF_ANY)
                    .map_err(es("reset", name))?;
            }
        }
        Ok(())
    }

    /// The counters by reason, summed over CPUs.
    pub fn reasons(&self) -> Result<Vec<(Reason, ReasonCounter)>> {
        let mut out = Vec::new();
        for r in Reason::ALL {
            let mut sum = ReasonCounter::default();
            for v in self.percpu::<ReasonCounter>(&self.stats, map_names::STATS, r as u32)? {
                sum.packets += v.packets;
                sum.bytes += v.bytes;
            }
            out.push((r, sum));
        }
        Ok(out)
    }

    /// The connection table's entry for a flow (in its family's table).
    pub fn flow(&self, k: &FlowKey) -> Result<Option<FlowValue>> {
        let mut v = [0u8; std::mem::size_of::<FlowValue>()];
        let found = match k.v4() {
            Some(k4) => self
                .conns4
                .lookup(k4.as_bytes(), &mut v)
                .map_err(es("read", map_names::CONNS4))?,
            None => self
                .conns
                .lookup(k.as_bytes(), &mut v)
                .map_err(es("read", map_names::CONNS))?,
        };
        Ok(found.then(|| FlowValue::from_bytes(&v)))
    }

    /// Every flow in the connection tables (for `ringx lb stats` and tests; walks the
    /// maps). IPv4 flows come back in the [`FlowKey`] form.
    pub fn flows(&self) -> Result<Vec<(FlowKey, FlowValue)>> {
        let mut out = Vec::new();
        let mut keys: Vec<FlowKey> = self
            .conns4
            .keys()
            .map_err(es("list", map_names::CONNS4))?
            .iter()
            .map(|k| FlowKey::from(FlowKey4::from_bytes(k)))
            .collect();
        for k in self.conns.keys().map_err(es("list", map_names::CONNS))? {
            keys.push(FlowKey::from_bytes(&k));
        }
        for key in keys {
            if let Some(v) = self.flow(&key)? {
                out.push((key, v));
            }
        }
        Ok(out)
    }

    /// Forgets every flow (tests; an operator resetting the tables). Returns how many.
    pub fn clear_flows(&self) -> Result<usize> {
        let mut n = 0;
        for (m, name) in [
            (&self.conns4, map_names::CONNS4),
            (&self.conns, map_names::CONNS),
        ] {
            let keys = m.keys().map_err(es("list", name))?;
            for k in &keys {
                m.delete(k).map_err(es("delete from", name))?;
            }
            n += keys.len();
        }
        Ok(n)
    }
}
