//! The flow hash, exactly as `flow_hash()` in `bpf/ringx_lb.bpf.c` computes it: the program
//! indexes a service's ring with it, so user space can say where a flow goes (tests, and the
//! `ringx lb` tools) without asking the kernel.

use crate::abi::{FlowKey, Pod, RING_SIZE};

fn mix64(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// The hash of a flow key (its ten 32-bit words in native order, as the program reads them).
pub fn flow_hash(k: &FlowKey) -> u64 {
    let mut h: u64 = 0x7269_6e67_786c_6230; // "ringxlb0"
    for w in k.as_bytes().chunks_exact(4) {
        h ^= u64::from(u32::from_ne_bytes([w[0], w[1], w[2], w[3]]));
        h = h.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        h ^= h >> 29;
    }
    mix64(h)
}

/// The ring slot of a flow.
pub fn slot(k: &FlowKey) -> usize {
    (flow_hash(k) % RING_SIZE) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn differs_by_every_field() {
        let base = FlowKey {
            src: [10, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
            dst: [10, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
            sport: 1000u16.to_be(),
            dport: 80u16.to_be(),
            proto: 6,
            family: 4,
            pad: [0; 2],
        };
        let h = flow_hash(&base);
        let variants = [
            FlowKey {
                sport: 1001u16.to_be(),
                ..base
            },
            FlowKey {
                dport: 81u16.to_be(),
                ..base
            },
            FlowKey { proto: 17, ..base },
            FlowKey { family: 6, ..base },
            FlowKey {
                src: [10, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
                ..base
            },
        ];
        for v in variants {
            assert_ne!(flow_hash(&v), h, "{v:?}");
        }
    }

    #[test]
    fn source_ports_spread_evenly_over_the_ring() {
        // 60,000 source ports into 3 equal thirds of the ring: each within 2% of a third.
        let mut thirds = [0u32; 3];
        for port in 1024..61024u16 {
            let k = FlowKey {
                src: [192, 0, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
                dst: [198, 51, 100, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
                sport: port.to_be(),
                dport: 80u16.to_be(),
                proto: 6,
                family: 4,
                pad: [0; 2],
            };
            thirds[slot(&k) * 3 / RING_SIZE as usize] += 1;
        }
        for t in thirds {
            assert!((19_600..=20_400).contains(&t), "{thirds:?}");
        }
    }
}
