//! The client addresses whose path has carried larger datagrams lately, so that a new
//! connection from one starts at the size found rather than probing for it again.
//!
//! quinn-proto starts every connection at 1,200 bytes (the size QUIC guarantees) and, once
//! the handshake is confirmed, searches upwards to [`FULL`] with padded PING probes (DPLPMTUD,
//! RFC 8899), a binary search in which each probe waits for the acknowledgement of the one
//! before: 1,326, 1,389, 1,420, then 1,452 bytes ([`STEPS`]). A short connection (one page, one
//! API call) ends while still searching: on loopback, a connection per request, its two
//! probes were a third of the datagrams the server sent (6.45 per connection; 4.35 once
//! they stop) and 3 to 7% of its CPU. nginx delays its first probe (`NGX_QUIC_PATH_MTU_DELAY`,
//! 100 ms) and quic-go waits five round trips, so neither probes on such connections; but
//! neither then learns the path's size from them either.
//!
//! This is what the kernel does for TCP: the path MTU it learns is kept per destination
//! address, in the route cache, for ten minutes (`net.ipv4.route.mtu_expires`), and the next
//! connection to that address starts with it. Here the largest probe a connection had
//! acknowledged is kept for its client's address for ten minutes ([`KEPT_FOR`]), and a new
//! connection from that address starts at that size and searches only above it: short
//! connections from one client reach [`FULL`] within two or three of them, and those after
//! send no probe at all. If the path was not what it seemed (another host behind the same
//! NAT address, a route that changed), quinn-proto's black-hole detection sees the large
//! packets lost and falls back to 1,200 bytes; the role then forgets the address
//! ([`KnownPaths::forget`]).
//!
//! Bounded: a direct-mapped table of [`SLOTS`] entries (96 KiB per zone, allocated on the
//! first address learned), the slot picked by a keyed hash. A new address takes its slot
//! from whatever was there: a client with many addresses can only make others probe again.
//! Only the address a connection was accepted from, and a size its probes had acknowledged
//! there, is recorded: a client that moves (a migration) records nothing for its new
//! address. Tables are per zone: with several zones a client's connections may reach
//! others, which learn it for themselves.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// The largest UDP payload size the endpoints search for: quinn-proto's default upper bound
/// (an Ethernet MTU of 1,500 less IPv6 and UDP headers), which ringx's endpoints keep.
pub const FULL: u16 = 1452;

/// The sizes a known path starts at: the ones quinn-proto's search from 1,200 to [`FULL`]
/// (steps of at least 20 bytes) has acknowledged on its way. A search that starts at one of
/// them goes on through the next ones, so a size learned is rounded down to one of them,
/// and a connection that starts there has the same search ahead as one that got there.
pub const STEPS: [u16; 4] = [1326, 1389, 1420, FULL];

/// How long a path is known after a connection found its size: the kernel's `mtu_expires`.
pub const KEPT_FOR: Duration = Duration::from_secs(600);

/// Entries of a zone's table.
pub const SLOTS: usize = 4096;

/// One known address (24 bytes): as IPv6 (IPv4 mapped), the largest size found (0: the slot
/// is empty), and when it was found, in seconds from the table's `base`.
#[derive(Clone, Copy, Default)]
struct Known {
    addr: [u64; 2],
    secs: u32,
    mtu: u16,
}

/// A zone's known client addresses.
pub struct KnownPaths {
    /// Empty until the first address is learned.
    slots: Vec<Known>,
    /// What the entries' times count from: when the first address was learned.
    base: Option<Instant>,
    hasher: RandomState,
}

impl Default for KnownPaths {
    fn default() -> KnownPaths {
        KnownPaths {
            slots: Vec::new(),
            base: None,
            hasher: RandomState::new(),
        }
    }
}

/// `ip` as one IPv6 address: an IPv4 address and its mapped form are the same client.
fn key(ip: IpAddr) -> [u64; 2] {
    let v6 = match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(v6, |v4| v4.to_ipv6_mapped()),
    };
    let n = u128::from(v6);
    [(n >> 64) as u64, n as u64]
}

impl KnownPaths {
    fn slot(&self, k: [u64; 2]) -> usize {
        (self.hasher.hash_one(k) % SLOTS as u64) as usize
    }

    /// `now` in seconds from the table's base.
    fn secs(&self, now: Instant) -> u32 {
        self.base.map_or(0, |b| {
            u32::try_from(now.saturating_duration_since(b).as_secs()).unwrap_or(u32::MAX)
        })
    }

    /// `ip`'s entry, if one was learned within [`KEPT_FOR`] before `now`.
    fn get(&self, ip: IpAddr, now: Instant) -> Option<Known> {
        if self.slots.is_empty() {
            return None;
        }
        let k = key(ip);
        let e = self.slots[self.slot(k)];
        let age = u64::from(self.secs(now).saturating_sub(e.secs));
        (e.mtu != 0 && e.addr == k && age < KEPT_FOR.as_secs()).then_some(e)
    }

    /// Where in [`STEPS`] a new connection from `ip` starts, if its path is known at `now`:
    /// the largest step no larger than the size found.
    pub fn start(&self, ip: IpAddr, now: Instant) -> Option<usize> {
        let e = self.get(ip, now)?;
        STEPS.iter().rposition(|&s| s <= e.mtu)
    }

    /// A connection from `ip` had a datagram of `mtu` bytes acknowledged at `now`. A smaller
    /// size than the one known (a connection that started lower, still searching) leaves it.
    pub fn learned(&mut self, ip: IpAddr, mtu: u16, now: Instant) {
        if mtu < STEPS[0] {
            return;
        }
        let mtu = self.get(ip, now).map_or(mtu, |e| e.mtu.max(mtu));
        if self.slots.is_empty() {
            self.slots = vec![Known::default(); SLOTS];
            self.base = Some(now);
        }
        let addr = key(ip);
        let s = self.slot(addr);
        let secs = self.secs(now);
        self.slots[s] = Known { addr, secs, mtu };
    }

    /// A connection from `ip` fell back from the size it had (its large packets were lost).
    pub fn forget(&mut self, ip: IpAddr) {
        if self.slots.is_empty() {
            return;
        }
        let k = key(ip);
        let s = self.slot(k);
        if self.slots[s].addr == k {
            self.slots[s] = Known::default();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    /// The size a new connection from `a` starts at.
    fn size(k: &KnownPaths, a: IpAddr, now: Instant) -> Option<u16> {
        k.start(a, now).map(|i| STEPS[i])
    }

    #[test]
    fn an_address_is_known_for_ten_minutes_after_it_is_learned() {
        let mut k = KnownPaths::default();
        let t0 = Instant::now();
        assert_eq!(size(&k, ip("192.0.2.1"), t0), None);
        k.learned(ip("192.0.2.1"), FULL, t0);
        let later = t0 + KEPT_FOR - Duration::from_secs(1);
        assert_eq!(size(&k, ip("192.0.2.1"), later), Some(FULL));
        assert_eq!(size(&k, ip("192.0.2.1"), t0 + KEPT_FOR), None);
        assert_eq!(
            size(&k, ip("192.0.2.2"), t0),
            None,
            "another address is not known"
        );
    }

    #[test]
    fn a_size_learned_starts_at_the_step_below_it_and_only_grows() {
        let mut k = KnownPaths::default();
        let t0 = Instant::now();
        let a = ip("192.0.2.1");
        k.learned(a, 1200, t0);
        assert_eq!(
            size(&k, a, t0),
            None,
            "1,200 is where every connection starts"
        );
        k.learned(a, 1400, t0);
        assert_eq!(size(&k, a, t0), Some(1389));
        // A connection that started below it and is still searching does not lower it.
        k.learned(a, 1326, t0);
        assert_eq!(size(&k, a, t0), Some(1389));
        k.learned(a, FULL, t0);
        assert_eq!(size(&k, a, t0), Some(FULL));
    }

    #[test]
    fn an_ipv4_address_and_its_mapped_form_are_one_client() {
        let mut k = KnownPaths::default();
        let t0 = Instant::now();
        k.learned(ip("::ffff:192.0.2.7"), FULL, t0);
        assert_eq!(size(&k, ip("192.0.2.7"), t0), Some(FULL));
        k.forget(ip("192.0.2.7"));
        assert_eq!(size(&k, ip("::ffff:192.0.2.7"), t0), None);
    }

    #[test]
    fn forgetting_an_address_leaves_another_in_its_slot() {
        let mut k = KnownPaths::default();
        let t0 = Instant::now();
        k.learned(ip("2001:db8::1"), FULL, t0);
        k.forget(ip("2001:db8::2"));
        assert_eq!(size(&k, ip("2001:db8::1"), t0), Some(FULL));
        k.forget(ip("2001:db8::1"));
        assert_eq!(size(&k, ip("2001:db8::1"), t0), None);
    }

    #[test]
    fn the_table_stays_its_size_whatever_the_addresses() {
        let mut k = KnownPaths::default();
        let t0 = Instant::now();
        for i in 0..(4 * SLOTS as u32) {
            k.learned(IpAddr::V4(i.into()), FULL, t0);
        }
        assert_eq!(k.slots.len(), SLOTS);
        assert!(std::mem::size_of::<Known>() * SLOTS <= 96 << 10);
        // The latest addresses are mostly kept: each took its slot from an older one.
        let last = (4 * SLOTS as u32 - 64..4 * SLOTS as u32)
            .filter(|&i| size(&k, IpAddr::V4(i.into()), t0).is_some())
            .count();
        assert!(last > 48, "{last} of the last 64 addresses known");
    }
}
