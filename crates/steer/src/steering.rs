//! Steering functions: which receive queue, and so which zone, a packet lands on.
//!
//! With RSS the NIC hashes the inbound tuple ([`crate::toeplitz`]) and looks the low bits of
//! the hash up in its indirection table ([`Reta`]); each queue's interrupt is served by one
//! CPU, and the zone pinned there owns the queue ([`ZoneMap`]). Without RSS (loopback, veth,
//! single-queue virtio) ringx steers in software the way Fastsocket's Receive Flow Deliver
//! does: the local port of an active connection encodes its zone, `hash(p) = p & (2^k − 1)`
//! ([`PortMask`]), and the receive path (an XDP/cpumap program or `SO_INCOMING_CPU` logic)
//! applies the same function.
//!
//! [`FlowSteering`] combines the two into "which zone gets the packets of this flow", with a
//! [`PortProbe`] that answers it for many candidate local ports at the cost of two table
//! lookups each.

use std::net::{IpAddr, SocketAddr};

use crate::toeplitz::{HashInput, ToeplitzTable, MAX_INPUT};

/// A steering function: the receive queue of a packet whose steering hash is `hash`.
pub trait Steering {
    /// The queue index.
    fn queue_of(&self, hash: u32) -> u16;
}

/// Why an indirection table was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RetaError {
    /// NICs index with the low bits of the hash, so the size must be a power of two.
    NotPowerOfTwo(usize),
    /// A queue index does not fit the 16 bits ringx uses for queues.
    QueueTooLarge(u32),
}

impl std::fmt::Display for RetaError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RetaError::NotPowerOfTwo(n) => {
                write!(
                    f,
                    "indirection table of {n} entries: the size must be a power of two"
                )
            }
            RetaError::QueueTooLarge(q) => write!(f, "indirection table names queue {q} (> 65535)"),
        }
    }
}

impl std::error::Error for RetaError {}

/// An RSS indirection table (RETA): queue = `table[hash & (len − 1)]`, as NICs do it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reta {
    /// Queue index per entry; the length is a power of two.
    pub table: Vec<u16>,
}

impl Reta {
    /// A table with the given entries; the length must be a non-zero power of two.
    pub fn new(table: Vec<u16>) -> Result<Self, RetaError> {
        if !table.len().is_power_of_two() {
            return Err(RetaError::NotPowerOfTwo(table.len()));
        }
        Ok(Reta { table })
    }

    /// The table the Linux core gives a device by default (`ethtool_rxfh_indir_default`):
    /// entry `i` is queue `i % queues`.
    pub fn round_robin(size: usize, queues: u16) -> Result<Self, RetaError> {
        let queues = queues.max(1);
        Self::new(
            (0..size)
                .map(|i| (i % usize::from(queues)) as u16)
                .collect(),
        )
    }

    /// The table as the ethtool ioctl returns it (`u32` queue indices).
    pub fn from_indir(indir: &[u32]) -> Result<Self, RetaError> {
        let table = indir
            .iter()
            .map(|&q| u16::try_from(q).map_err(|_| RetaError::QueueTooLarge(q)))
            .collect::<Result<Vec<_>, _>>()?;
        Self::new(table)
    }
}

impl Steering for Reta {
    #[inline]
    fn queue_of(&self, hash: u32) -> u16 {
        self.table[hash as usize & (self.table.len() - 1)]
    }
}

/// Fastsocket's software steering for devices without RSS: the "hash" is the local port and
/// the queue is its low `k` bits, `p & (2^k − 1)`, with `2^k` the number of zones rounded up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortMask {
    mask: u16,
}

impl PortMask {
    /// The mask for `zones` zones: `ROUND_UP_POWER_OF_2(zones) − 1`.
    pub fn for_zones(zones: u16) -> Self {
        let n = zones.max(1).next_power_of_two();
        PortMask { mask: n - 1 }
    }

    /// The mask itself.
    pub fn mask(&self) -> u16 {
        self.mask
    }
}

impl Steering for PortMask {
    #[inline]
    fn queue_of(&self, port: u32) -> u16 {
        port as u16 & self.mask
    }
}

/// Which zone serves each receive queue (`None`: no zone; packets there cross cores).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZoneMap {
    by_queue: Vec<Option<u16>>,
}

impl ZoneMap {
    /// Queue `q` is served by zone `by_queue[q]`.
    pub fn new(by_queue: Vec<Option<u16>>) -> Self {
        ZoneMap { by_queue }
    }

    /// Queue `i` belongs to zone `i`, for `n` queues.
    pub fn identity(n: u16) -> Self {
        ZoneMap::new((0..n).map(Some).collect())
    }

    /// Match queues to zones through CPUs: a queue whose interrupt is served by CPU `c` belongs
    /// to the zone pinned on `c`. `queue_cpu[q]` is the CPU of queue `q`'s interrupt (the first
    /// of its affinity list), `zone_cpu[z]` the CPU zone `z` is pinned to.
    pub fn from_cpus(queue_cpu: &[Option<usize>], zone_cpu: &[usize]) -> Self {
        let by_queue = queue_cpu
            .iter()
            .map(|cpu| {
                let cpu = (*cpu)?;
                zone_cpu.iter().position(|&c| c == cpu).map(|z| z as u16)
            })
            .collect();
        ZoneMap::new(by_queue)
    }

    /// The zone of `queue`.
    #[inline]
    pub fn zone_of(&self, queue: u16) -> Option<u16> {
        self.by_queue.get(usize::from(queue)).copied().flatten()
    }

    /// One more than the highest zone named (0 when none is).
    pub fn zones(&self) -> u16 {
        self.by_queue.iter().flatten().max().map_or(0, |z| z + 1)
    }
}

#[derive(Debug, Clone)]
enum Kind {
    Rss {
        hasher: Box<ToeplitzTable>,
        reta: Reta,
        ports_in_hash: bool,
    },
    Software(PortMask),
}

/// Where the packets of a flow land: the NIC's RSS (Toeplitz + RETA) or software steering by
/// local port, then the queue's zone.
#[derive(Debug, Clone)]
pub struct FlowSteering {
    kind: Kind,
    zones: ZoneMap,
}

/// A precomputed partial hash for one (local address, remote address, remote port): the zone
/// of a candidate local port then costs two table lookups ([`FlowSteering::zone_of_port`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortProbe {
    base: u32,
    port_offset: u8,
}

impl FlowSteering {
    /// NIC RSS: Toeplitz under `key`, then `reta`, then `zones`. `ports_in_hash` is whether
    /// the NIC hashes TCP ports (`ethtool -n IF rx-flow-hash tcp4` shows `sdfn`, the usual
    /// default) or addresses only (`sd`), in which case the local port cannot steer.
    pub fn rss(key: &[u8], reta: Reta, zones: ZoneMap, ports_in_hash: bool) -> Self {
        FlowSteering {
            kind: Kind::Rss {
                hasher: Box::new(ToeplitzTable::new(key, MAX_INPUT)),
                reta,
                ports_in_hash,
            },
            zones,
        }
    }

    /// Software steering by local port (Fastsocket RFD), for devices without RSS.
    pub fn software(mask: PortMask, zones: ZoneMap) -> Self {
        FlowSteering {
            kind: Kind::Software(mask),
            zones,
        }
    }

    /// The queue → zone map.
    pub fn zone_map(&self) -> &ZoneMap {
        &self.zones
    }

    /// The zone an inbound packet from `remote` to `local` lands on; `None` when its queue has
    /// no zone or the address families differ.
    pub fn zone_of_inbound(&self, remote: SocketAddr, local: SocketAddr) -> Option<u16> {
        let probe = self.probe(local.ip(), remote)?;
        self.zone_of_port(probe, local.port())
    }

    /// Precompute the fixed part of the inbound tuple (src = `remote`, dst = `local`:port).
    /// `None` when the address families differ.
    pub fn probe(&self, local: IpAddr, remote: SocketAddr) -> Option<PortProbe> {
        match &self.kind {
            Kind::Software(_) => Some(PortProbe {
                base: 0,
                port_offset: 0,
            }),
            Kind::Rss {
                hasher,
                ports_in_hash,
                ..
            } => {
                if *ports_in_hash {
                    // Hash the tuple with a local port of 0; the port's own contribution is
                    // XORed in per candidate.
                    let input = HashInput::with_ports(remote, SocketAddr::new(local, 0))?;
                    let bytes = input.as_bytes();
                    Some(PortProbe {
                        base: hasher.hash(bytes),
                        port_offset: (bytes.len() - 2) as u8,
                    })
                } else {
                    let input = HashInput::ip_only(remote.ip(), local)?;
                    Some(PortProbe {
                        base: hasher.hash(input.as_bytes()),
                        port_offset: u8::MAX,
                    })
                }
            }
        }
    }

    /// The zone that receives the replies of a connection from local port `port`, one steering
    /// function evaluation.
    #[inline]
    pub fn zone_of_port(&self, probe: PortProbe, port: u16) -> Option<u16> {
        let queue = match &self.kind {
            Kind::Software(mask) => mask.queue_of(u32::from(port)),
            Kind::Rss { hasher, reta, .. } => {
                let hash = if probe.port_offset == u8::MAX {
                    probe.base
                } else {
                    probe.base ^ hasher.partial_u16(usize::from(probe.port_offset), port)
                };
                reta.queue_of(hash)
            }
        };
        self.zones.zone_of(queue)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::toeplitz::{toeplitz, DEFAULT_KEY};

    #[test]
    fn reta_indexes_with_low_bits() {
        let reta = Reta::new(vec![0, 1, 2, 3, 3, 2, 1, 0]).unwrap();
        assert_eq!(reta.queue_of(0), 0);
        assert_eq!(reta.queue_of(5), 2);
        assert_eq!(reta.queue_of(0xffff_fff8 | 6), 1);
        assert_eq!(Reta::new(vec![0; 6]), Err(RetaError::NotPowerOfTwo(6)));
        assert_eq!(Reta::new(vec![]), Err(RetaError::NotPowerOfTwo(0)));
        assert_eq!(
            Reta::from_indir(&[0, 70000]),
            Err(RetaError::QueueTooLarge(70000))
        );
    }

    #[test]
    fn round_robin_matches_kernel_default() {
        let reta = Reta::round_robin(128, 3).unwrap();
        assert_eq!(&reta.table[..7], &[0, 1, 2, 0, 1, 2, 0]);
        // 82599 example: hash 0x51ccc178 → index 0x78 = 120 → queue 0 with 3 queues.
        assert_eq!(reta.queue_of(0x51cc_c178), 0);
    }

    #[test]
    fn port_mask_is_fastsocket_hash() {
        assert_eq!(PortMask::for_zones(1).mask(), 0);
        assert_eq!(PortMask::for_zones(2).mask(), 1);
        assert_eq!(PortMask::for_zones(3).mask(), 3);
        assert_eq!(PortMask::for_zones(8).mask(), 7);
        let m = PortMask::for_zones(4);
        assert_eq!(m.queue_of(40001), 1);
        assert_eq!(m.queue_of(40004), 0);
    }

    #[test]
    fn zone_map_from_cpus() {
        // Queue 0's IRQ on CPU 3, queue 1's on CPU 1, queue 2 unknown; zones pinned to 1 and 3.
        let zm = ZoneMap::from_cpus(&[Some(3), Some(1), None], &[1, 3]);
        assert_eq!(zm.zone_of(0), Some(1));
        assert_eq!(zm.zone_of(1), Some(0));
        assert_eq!(zm.zone_of(2), None);
        assert_eq!(zm.zone_of(9), None);
        assert_eq!(zm.zones(), 2);
    }

    #[test]
    fn probe_agrees_with_full_hash() {
        let reta = Reta::round_robin(128, 4).unwrap();
        let fs = FlowSteering::rss(&DEFAULT_KEY, reta.clone(), ZoneMap::identity(4), true);
        for (local, remote) in [
            ("10.0.0.1:0", "10.0.0.2:80"),
            ("[2001:db8::1]:0", "[2001:db8::2]:443"),
        ] {
            let local: SocketAddr = local.parse().unwrap();
            let remote: SocketAddr = remote.parse().unwrap();
            let probe = fs.probe(local.ip(), remote).unwrap();
            for port in [1u16, 80, 32768, 40000, 60999, 65535] {
                let input =
                    HashInput::with_ports(remote, SocketAddr::new(local.ip(), port)).unwrap();
                let want = reta.queue_of(toeplitz(&DEFAULT_KEY, input.as_bytes()));
                assert_eq!(fs.zone_of_port(probe, port), Some(want));
                assert_eq!(
                    fs.zone_of_inbound(remote, SocketAddr::new(local.ip(), port)),
                    Some(want)
                );
            }
        }
        let v4: SocketAddr = "10.0.0.2:80".parse().unwrap();
        assert!(fs.probe("::1".parse().unwrap(), v4).is_none());
    }

    #[test]
    fn ip_only_hash_ignores_port() {
        let fs = FlowSteering::rss(
            &DEFAULT_KEY,
            Reta::round_robin(128, 4).unwrap(),
            ZoneMap::identity(4),
            false,
        );
        let probe = fs
            .probe("10.0.0.1".parse().unwrap(), "10.0.0.2:80".parse().unwrap())
            .unwrap();
        let z = fs.zone_of_port(probe, 1);
        assert!((2..=u16::MAX)
            .step_by(997)
            .all(|p| fs.zone_of_port(probe, p) == z));
    }

    #[test]
    fn software_steering_by_local_port() {
        let fs = FlowSteering::software(PortMask::for_zones(3), ZoneMap::identity(3));
        let remote: SocketAddr = "10.0.0.2:80".parse().unwrap();
        let local: IpAddr = "10.0.0.1".parse().unwrap();
        assert_eq!(
            fs.zone_of_inbound(remote, SocketAddr::new(local, 40000)),
            Some(0)
        );
        assert_eq!(
            fs.zone_of_inbound(remote, SocketAddr::new(local, 40002)),
            Some(2)
        );
        // Queue 3 exists in the mask but no zone serves it.
        assert_eq!(
            fs.zone_of_inbound(remote, SocketAddr::new(local, 40003)),
            None
        );
    }
}
