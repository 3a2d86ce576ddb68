//! A service's ring: the Maglev table of its backends (crates/balance), with the slots of
//! backends that take no new flows (drained, or down) given to the next usable backend in
//! table order, as [`Maglev::lookup_usable`] walks. Taking a backend out this way moves only
//! the flows that were on it; putting it back restores the same table.

use ringx_balance::Maglev;

use crate::abi::{NO_BACKEND, RING_SIZE};

/// One backend of a service, as the ring needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    /// The stable name Maglev permutes by: the backend's address as text.
    pub name: String,
    /// Its index in the backends map (what the ring holds).
    pub index: u32,
    pub weight: u32,
    /// Takes new flows (not drained, not down).
    pub usable: bool,
}

/// Most backends one service can have: the ring's size is the Maglev table's smallest, which
/// keeps 100 slots per backend up to this many.
pub const MAX_MEMBERS: usize = (RING_SIZE / 100) as usize;

/// The ring of `members` (any order: Maglev orders by name): `RING_SIZE` backend indices,
/// or [`NO_BACKEND`] everywhere when none is usable.
pub fn build(members: &[Member]) -> Result<Vec<u32>, String> {
    let m = RING_SIZE as usize;
    if members.len() > MAX_MEMBERS {
        return Err(format!(
            "{} backends in one service: at most {MAX_MEMBERS}",
            members.len()
        ));
    }
    if !members.iter().any(|b| b.usable) {
        return Ok(vec![NO_BACKEND as u32; m]);
    }
    let names: Vec<String> = members.iter().map(|b| b.name.clone()).collect();
    let weights: Vec<u32> = members.iter().map(|b| b.weight).collect();
    let table = Maglev::new(&names, &weights);
    let slots = table.slots();
    assert_eq!(
        slots.len(),
        m,
        "Maglev table size for {} backends",
        members.len()
    );
    let mut ring = vec![NO_BACKEND as u32; m];
    // Backwards twice round: `next` is the nearest usable owner after each slot.
    let mut next = NO_BACKEND as u32;
    for i in (0..2 * m).rev() {
        let owner = &members[slots[i % m] as usize];
        if owner.usable {
            next = owner.index;
        }
        if i < m {
            ring[i] = next;
        }
    }
    Ok(ring)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn members(spec: &[(&str, u32, bool)]) -> Vec<Member> {
        spec.iter()
            .enumerate()
            .map(|(i, (n, w, u))| Member {
                name: n.to_string(),
                index: 10 + i as u32,
                weight: *w,
                usable: *u,
            })
            .collect()
    }

    fn share(ring: &[u32], index: u32) -> f64 {
        ring.iter().filter(|&&b| b == index).count() as f64 / ring.len() as f64
    }

    #[test]
    fn weights_give_shares() {
        let ring = build(&members(&[
            ("10.0.0.1", 1, true),
            ("10.0.0.2", 2, true),
            ("10.0.0.3", 1, true),
        ]))
        .unwrap();
        assert!(
            (share(&ring, 10) - 0.25).abs() < 0.01,
            "{}",
            share(&ring, 10)
        );
        assert!(
            (share(&ring, 11) - 0.50).abs() < 0.01,
            "{}",
            share(&ring, 11)
        );
        assert!(
            (share(&ring, 12) - 0.25).abs() < 0.01,
            "{}",
            share(&ring, 12)
        );
    }

    #[test]
    fn taking_one_out_moves_only_its_slots_and_back_restores() {
        let all = members(&[
            ("10.0.0.1", 1, true),
            ("10.0.0.2", 1, true),
            ("10.0.0.3", 1, true),
        ]);
        let before = build(&all).unwrap();
        let mut out = all.clone();
        out[1].usable = false;
        let after = build(&out).unwrap();
        for (a, b) in before.iter().zip(&after) {
            if *a != 11 {
                assert_eq!(a, b, "a slot of a backend that stayed moved");
            } else {
                assert_ne!(*b, 11);
            }
        }
        // Its slots are shared by the two others, about evenly.
        assert!(
            (share(&after, 10) - 0.5).abs() < 0.03,
            "{}",
            share(&after, 10)
        );
        assert_eq!(build(&all).unwrap(), before);
    }

    #[test]
    fn order_does_not_matter_and_none_usable_is_empty() {
        let a = members(&[("10.0.0.1", 1, true), ("10.0.0.2", 1, true)]);
        let mut b = a.clone();
        b.reverse();
        assert_eq!(build(&a).unwrap(), build(&b).unwrap());
        let down = members(&[("10.0.0.1", 1, false)]);
        assert!(build(&down)
            .unwrap()
            .iter()
            .all(|&x| x == NO_BACKEND as u32));
        assert!(build(&[]).unwrap().iter().all(|&x| x == NO_BACKEND as u32));
    }
}
