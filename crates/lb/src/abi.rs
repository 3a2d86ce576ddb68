//! The layouts shared with `bpf/ringx_lb.h`: the generated reasons and constants, and the
//! `#[repr(C)]` mirrors of the map keys and values, checked against the header's sizes at
//! compile time.

use std::net::IpAddr;

include!(concat!(env!("OUT_DIR"), "/abi_gen.rs"));

/// What the balancer does with the packets counted under a reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Pass,
    Drop,
    /// XDP_TX or XDP_REDIRECT, encapsulated for a backend.
    Forward,
}

impl Verdict {
    /// The verdict of an `xdp_action` (`XDP_DROP` 1, `XDP_PASS` 2, `XDP_TX` 3,
    /// `XDP_REDIRECT` 4).
    pub fn from_xdp_action(a: u32) -> Option<Verdict> {
        match a {
            1 => Some(Verdict::Drop),
            2 => Some(Verdict::Pass),
            3 | 4 => Some(Verdict::Forward),
            _ => None,
        }
    }
}

/// `IPPROTO_TCP` and `IPPROTO_UDP`.
pub const PROTO_TCP: u8 = 6;
pub const PROTO_UDP: u8 = 17;

/// An address as the maps hold it: 16 bytes (IPv4 in the first four) and the family.
pub fn addr_bytes(a: IpAddr) -> ([u8; 16], u8) {
    let mut b = [0u8; 16];
    match a {
        IpAddr::V4(v4) => {
            b[..4].copy_from_slice(&v4.octets());
            (b, 4)
        }
        IpAddr::V6(v6) => (v6.octets(), 6),
    }
}

/// The inverse of [`addr_bytes`].
pub fn addr_from(b: &[u8; 16], family: u8) -> IpAddr {
    if family == 4 {
        IpAddr::from([b[0], b[1], b[2], b[3]])
    } else {
        IpAddr::from(*b)
    }
}

/// Plain old data the maps copy in and out.
///
/// # Safety
///
/// Implementors are `#[repr(C)]` structs of integers and byte arrays without padding
/// (every byte is a field), so their bytes may be read as `[u8]` and any bytes are a value.
pub unsafe trait Pod: Copy + Default {
    fn as_bytes(&self) -> &[u8] {
        // SAFETY: Pod types have no padding, so all size_of::<Self>() bytes are initialised.
        unsafe {
            std::slice::from_raw_parts(
                self as *const Self as *const u8,
                std::mem::size_of::<Self>(),
            )
        }
    }

    fn from_bytes(b: &[u8]) -> Self {
        let mut v = Self::default();
        let n = std::mem::size_of::<Self>().min(b.len());
        // SAFETY: any bytes are a valid Pod value; at most size_of::<Self>() bytes are
        // written into `v`, and `b` has at least `n`.
        unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), &mut v as *mut Self as *mut u8, n) };
        v
    }
}

/// `struct lb_vip_key`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct VipKey {
    pub addr: [u8; 16],
    /// Network order.
    pub port: u16,
    pub proto: u8,
    pub family: u8,
}

/// `struct lb_vip`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VipValue {
    pub id: u32,
    pub flags: u32,
}

/// `struct lb_addr`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct AddrKey {
    pub addr: [u8; 16],
    pub family: u8,
    pub pad: [u8; 3],
}

/// `struct lb_backend`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BackendValue {
    pub addr: [u8; 16],
    pub family: u8,
    pub pad: u8,
    pub mtu: u16,
    pub flags: u32,
    pub ifindex: u32,
    pub dmac: [u8; 6],
    pub smac: [u8; 6],
}

/// `struct lb_flow_key`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FlowKey {
    pub src: [u8; 16],
    pub dst: [u8; 16],
    /// Network order.
    pub sport: u16,
    pub dport: u16,
    pub proto: u8,
    pub family: u8,
    pub pad: [u8; 2],
}

/// `struct lb_flow_key4`: an IPv4 flow as its table keys it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FlowKey4 {
    pub src: [u8; 4],
    pub dst: [u8; 4],
    /// Network order.
    pub sport: u16,
    pub dport: u16,
    pub proto: u8,
    pub pad: [u8; 3],
}

impl FlowKey {
    /// The IPv4 table's key of this flow, None for an IPv6 flow.
    pub fn v4(&self) -> Option<FlowKey4> {
        (self.family == 4).then(|| FlowKey4 {
            src: self.src[..4].try_into().unwrap(),
            dst: self.dst[..4].try_into().unwrap(),
            sport: self.sport,
            dport: self.dport,
            proto: self.proto,
            pad: [0; 3],
        })
    }
}

impl From<FlowKey4> for FlowKey {
    fn from(k: FlowKey4) -> FlowKey {
        let mut f = FlowKey {
            sport: k.sport,
            dport: k.dport,
            proto: k.proto,
            family: 4,
            ..FlowKey::default()
        };
        f.src[..4].copy_from_slice(&k.src);
        f.dst[..4].copy_from_slice(&k.dst);
        f
    }
}

/// `struct lb_flow`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlowValue {
    pub backend: u32,
    pub vip: u32,
    /// The low 32 bits of the flow's hash (the GUE source port and the IPv6 flow label come
    /// from it).
    pub hash: u32,
}

/// `struct lb_member_key`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct MemberKey {
    pub vip: u32,
    pub backend: u32,
}

/// `struct lb_counter` (one CPU's, or a sum).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counter {
    pub packets: u64,
    pub bytes: u64,
    pub new_flows: u64,
    pub lru_misses: u64,
}

impl Counter {
    pub fn add(&mut self, o: &Counter) {
        self.packets += o.packets;
        self.bytes += o.bytes;
        self.new_flows += o.new_flows;
        self.lru_misses += o.lru_misses;
    }
}

/// `struct lb_reason_counter`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReasonCounter {
    pub packets: u64,
    pub bytes: u64,
}

// SAFETY: each is repr(C) with fields laid out without padding; the size asserts below (the
// header's sizes, which equal the sum of the fields) would fail if padding crept in.
unsafe impl Pod for VipKey {}
// SAFETY: as above.
unsafe impl Pod for VipValue {}
// SAFETY: as above.
unsafe impl Pod for AddrKey {}
// SAFETY: as above.
unsafe impl Pod for BackendValue {}
// SAFETY: as above.
unsafe impl Pod for FlowKey {}
// SAFETY: as above.
unsafe impl Pod for FlowKey4 {}
// SAFETY: as above.
unsafe impl Pod for FlowValue {}
// SAFETY: as above.
unsafe impl Pod for MemberKey {}
// SAFETY: as above.
unsafe impl Pod for Counter {}
// SAFETY: as above.
unsafe impl Pod for ReasonCounter {}

const _: () = {
    use std::mem::size_of;
    assert!(size_of::<VipKey>() == SIZEOF_LB_VIP_KEY);
    assert!(size_of::<VipValue>() == SIZEOF_LB_VIP);
    assert!(size_of::<AddrKey>() == SIZEOF_LB_ADDR);
    assert!(size_of::<BackendValue>() == SIZEOF_LB_BACKEND);
    assert!(size_of::<FlowKey>() == SIZEOF_LB_FLOW_KEY);
    assert!(size_of::<FlowKey4>() == SIZEOF_LB_FLOW_KEY4);
    assert!(size_of::<FlowValue>() == SIZEOF_LB_FLOW);
    assert!(size_of::<MemberKey>() == SIZEOF_LB_MEMBER_KEY);
    assert!(size_of::<Counter>() == SIZEOF_LB_COUNTER);
    assert!(size_of::<ReasonCounter>() == SIZEOF_LB_REASON_COUNTER);
};

/// The names the maps are pinned under.
pub mod map_names {
    pub const VIPS: &str = "lb_vips";
    pub const VIP_ADDRS: &str = "lb_vip_addrs";
    pub const VIP_KEYS: &str = "lb_vip_keys";
    pub const BACKENDS: &str = "lb_backends";
    pub const RING: &str = "lb_ring";
    pub const MEMBERS: &str = "lb_members";
    /// Service id × 256 + QUIC host byte → backend index + 1 (0: none).
    pub const QUIC_HOSTS: &str = "lb_quic_hosts";
    pub const VIP_STATS: &str = "lb_vip_stats";
    pub const BACKEND_STATS: &str = "lb_backend_stats";
    pub const STATS: &str = "lb_stats";
    /// The IPv6 flows; IPv4 flows are in [`CONNS4`].
    pub const CONNS: &str = "lb_conns";
    pub const CONNS4: &str = "lb_conns4";
    /// The next stage's slot (a program array of one).
    pub const CHAIN: &str = "lb_chain";
    pub const DECAP_STATS: &str = "lbd_stats";
    /// The balancer's maps (the decapsulation program has only [`DECAP_STATS`]).
    pub const ALL: [&str; 13] = [
        VIPS,
        VIP_ADDRS,
        VIP_KEYS,
        BACKENDS,
        RING,
        MEMBERS,
        QUIC_HOSTS,
        VIP_STATS,
        BACKEND_STATS,
        STATS,
        CONNS,
        CONNS4,
        CHAIN,
    ];
}
