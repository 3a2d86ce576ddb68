//! The layouts shared with the BPF program, generated from `bpf/ringx_xdp.h` (reasons,
//! constants, asserted sizes) plus the Rust mirrors of its structs, checked against those
//! sizes at compile time.

include!(concat!(env!("OUT_DIR"), "/abi_gen.rs"));

/// What the filter does with a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Verdict {
    /// `XDP_PASS`: on to the kernel's stack.
    Pass,
    /// `XDP_DROP`: discarded in the driver.
    Drop,
}

impl Verdict {
    /// The `enum xdp_action` value a program returns for this verdict.
    pub const fn xdp_action(self) -> u32 {
        match self {
            Verdict::Pass => 2,
            Verdict::Drop => 1,
        }
    }

    /// The verdict of an XDP return value (`None` for ABORTED, TX, REDIRECT).
    pub const fn from_xdp_action(action: u32) -> Option<Verdict> {
        match action {
            1 => Some(Verdict::Drop),
            2 => Some(Verdict::Pass),
            _ => None,
        }
    }
}

/// `struct rx_lpm_v4`: an IPv4 LPM trie key.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LpmV4 {
    pub prefixlen: u32,
    pub addr: [u8; 4],
}

/// `struct rx_lpm_v6`: an IPv6 LPM trie key.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LpmV6 {
    pub prefixlen: u32,
    pub addr: [u8; 16],
}

/// `struct rx_counter`: one reason's packets and bytes (on one CPU, in the map).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counter {
    pub packets: u64,
    pub bytes: u64,
}

/// `struct rx_rate_key`: a SYN bucket's key (IPv4 address or IPv6 /64).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateKey {
    pub family: u8,
    pub pad: [u8; 3],
    pub addr: [u8; 16],
}

/// `struct rx_bucket`: a SYN token bucket, tokens in `TOKEN` units.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bucket {
    pub tokens: u64,
    pub last_ns: u64,
}

const _: () = assert!(std::mem::size_of::<LpmV4>() == SIZEOF_RX_LPM_V4);
const _: () = assert!(std::mem::size_of::<LpmV6>() == SIZEOF_RX_LPM_V6);
const _: () = assert!(std::mem::size_of::<Counter>() == SIZEOF_RX_COUNTER);
const _: () = assert!(std::mem::size_of::<RateKey>() == SIZEOF_RX_RATE_KEY);
const _: () = assert!(std::mem::size_of::<Bucket>() == SIZEOF_RX_BUCKET);

impl LpmV4 {
    /// The key's bytes as the kernel reads them (host-order length, network-order address).
    pub fn to_bytes(self) -> [u8; SIZEOF_RX_LPM_V4] {
        let mut b = [0u8; SIZEOF_RX_LPM_V4];
        b[..4].copy_from_slice(&self.prefixlen.to_ne_bytes());
        b[4..].copy_from_slice(&self.addr);
        b
    }

    pub fn from_bytes(b: &[u8; SIZEOF_RX_LPM_V4]) -> Self {
        LpmV4 {
            prefixlen: u32::from_ne_bytes([b[0], b[1], b[2], b[3]]),
            addr: [b[4], b[5], b[6], b[7]],
        }
    }
}

impl LpmV6 {
    /// The key's bytes as the kernel reads them (host-order length, network-order address).
    pub fn to_bytes(self) -> [u8; SIZEOF_RX_LPM_V6] {
        let mut b = [0u8; SIZEOF_RX_LPM_V6];
        b[..4].copy_from_slice(&self.prefixlen.to_ne_bytes());
        b[4..].copy_from_slice(&self.addr);
        b
    }

    pub fn from_bytes(b: &[u8; SIZEOF_RX_LPM_V6]) -> Self {
        let mut addr = [0u8; 16];
        addr.copy_from_slice(&b[4..]);
        LpmV6 {
            prefixlen: u32::from_ne_bytes([b[0], b[1], b[2], b[3]]),
            addr,
        }
    }
}

impl Counter {
    pub fn from_bytes(b: &[u8; SIZEOF_RX_COUNTER]) -> Self {
        let (p, by) = b.split_at(8);
        Counter {
            packets: u64::from_ne_bytes(p.try_into().expect("8 bytes")),
            bytes: u64::from_ne_bytes(by.try_into().expect("8 bytes")),
        }
    }
}

/// Names of the maps in the object; each is pinned under the pin directory by this name.
pub mod map_names {
    pub const ALLOW_V4: &str = "rx_allow_v4";
    pub const ALLOW_V6: &str = "rx_allow_v6";
    pub const BLOCK_V4: &str = "rx_block_v4";
    pub const BLOCK_V6: &str = "rx_block_v6";
    pub const SYN_BUCKETS: &str = "rx_syn_buckets";
    pub const PORTS: &str = "rx_ports";
    pub const STATS: &str = "rx_stats";
    /// The next stage of the chain (a program array of one slot).
    pub const CHAIN: &str = "rx_chain";
    /// Every map, in the order `ringx xdp stats` checks them.
    pub const ALL: [&str; 8] = [
        ALLOW_V4,
        ALLOW_V6,
        BLOCK_V4,
        BLOCK_V6,
        SYN_BUCKETS,
        PORTS,
        STATS,
        CHAIN,
    ];
}
