//! Maglev consistent hashing (Eisenbud et al., "Maglev: A Fast and Reliable
//! Software Network Load Balancer", NSDI 2016, section 3.4).

use std::fmt;

use crate::hash::xxh64;

/// Smallest lookup table: with few servers a larger table costs little
/// (4 bytes an entry, shared by every zone) and keeps each server's share
/// within a few thousandths of its weight.
const MIN_TABLE: usize = 65_537;

/// Table entries per server at least: the paper's M >= 100 N bound keeps the
/// imbalance between servers around 1%.
const ENTRIES_PER_SERVER: usize = 100;

/// Seeds of the two hashes that give each server its permutation.
const OFFSET_SEED: u64 = 0x6d61_676c_6576_306f; // "maglev0o"
const SKIP_SEED: u64 = 0x6d61_676c_6576_3173; // "maglev1s"

/// Consistent-hash lookup table (Maglev, Eisenbud et al. NSDI'16), built once
/// and shared (read-only) by all zones.
///
/// Every server has a pseudo-random permutation of the table's slots derived
/// from its name alone; servers take turns claiming their next free preferred
/// slot until the table is full. Hence:
///
/// * **balance**: with equal weights every server owns the same number of
///   slots, give or take one; a server of weight `w` takes `w` turns per
///   round, so it owns about `w` times the slots of a weight-1 server;
/// * **stability**: the table depends on the servers' names and weights, not
///   on their order in the configuration, so every process with the same
///   server set builds the same table (indices follow the order of `names`);
/// * **minimal disruption**: adding or removing a server moves few of the
///   other servers' keys (the paper measures a few percent; in practice
///   well under 5% of the keys of the servers that stay).
///
/// A server that is down but still configured is handled without a rebuild
/// by [`Maglev::lookup_usable`].
#[derive(Clone)]
pub struct Maglev {
    /// Slot -> server index (into `names`).
    table: Vec<u32>,
    servers: usize,
}

impl fmt::Debug for Maglev {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Maglev")
            .field("servers", &self.servers)
            .field("table_size", &self.table.len())
            .finish()
    }
}

impl Maglev {
    /// Builds the table for servers identified by `names` (stable strings
    /// such as `"10.0.0.1:80"`), with `weights[i]` turns per round for
    /// `names[i]` (a missing or zero weight counts as 1; weights are reduced
    /// by their greatest common divisor first). The table size is the
    /// smallest prime at least `max(65537, 100 * names.len())`.
    ///
    /// With no names the table is empty: [`lookup`](Self::lookup) returns 0
    /// and [`lookup_usable`](Self::lookup_usable) returns `None`.
    pub fn new(names: &[String], weights: &[u32]) -> Maglev {
        let n = names.len();
        if n == 0 {
            return Maglev {
                table: Vec::new(),
                servers: 0,
            };
        }
        let size = next_prime(MIN_TABLE.max(n.saturating_mul(ENTRIES_PER_SERVER)));
        let m = size as u64;

        let mut turns: Vec<u32> = (0..n)
            .map(|i| weights.get(i).copied().unwrap_or(1).max(1))
            .collect();
        let g = turns.iter().copied().fold(0, gcd);
        for t in &mut turns {
            *t /= g;
        }

        // Permutation of server i: offset, offset + skip, offset + 2 skip...
        // (mod m); m is prime and 0 < skip < m, so it visits every slot.
        let mut next: Vec<u64> = names
            .iter()
            .map(|name| xxh64(name.as_bytes(), OFFSET_SEED) % m)
            .collect();
        let skip: Vec<u64> = names
            .iter()
            .map(|name| xxh64(name.as_bytes(), SKIP_SEED) % (m - 1) + 1)
            .collect();

        // Turns are taken in name order, so the table does not depend on the
        // configuration's order (equal names: by index).
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by(|&a, &b| names[a].cmp(&names[b]).then(a.cmp(&b)));

        const EMPTY: u32 = u32::MAX;
        let mut table = vec![EMPTY; size];
        let mut filled = 0;
        'fill: loop {
            for &i in &order {
                for _ in 0..turns[i] {
                    let mut slot = next[i];
                    while table[slot as usize] != EMPTY {
                        slot = (slot + skip[i]) % m;
                    }
                    table[slot as usize] = i as u32; // n < u32::MAX: memory runs out first
                    next[i] = (slot + skip[i]) % m;
                    filled += 1;
                    if filled == size {
                        break 'fill;
                    }
                }
            }
        }
        Maglev { table, servers: n }
    }

    /// The number of servers the table was built for.
    pub fn servers(&self) -> usize {
        self.servers
    }

    /// The number of slots (a prime).
    pub fn table_size(&self) -> usize {
        self.table.len()
    }

    /// The table itself: slot -> server index. For users that ship it elsewhere (the XDP load
    /// balancer copies it into a BPF map and indexes it by its own hash).
    pub fn slots(&self) -> &[u32] {
        &self.table
    }

    /// The server owning `hash`'s slot (0 if the table is empty).
    pub fn lookup(&self, hash: u64) -> usize {
        match self.table.len() {
            0 => 0,
            m => self.table[(hash % m as u64) as usize] as usize,
        }
    }

    /// Walks the table from `hash`'s entry until `usable(server)` — a down
    /// server's keys spread over the others, the rest keep their server.
    ///
    /// Returns `None` when no server is usable. The common case (the owner
    /// is usable) calls `usable` once; otherwise `usable` is first asked
    /// about every server, so that a walk only starts when it will end.
    pub fn lookup_usable(&self, hash: u64, usable: impl Fn(usize) -> bool) -> Option<usize> {
        let m = self.table.len();
        if m == 0 {
            return None;
        }
        let start = (hash % m as u64) as usize;
        let owner = self.table[start] as usize;
        if usable(owner) {
            return Some(owner);
        }
        if !(0..self.servers).any(&usable) {
            return None;
        }
        self.table[start + 1..]
            .iter()
            .chain(&self.table[..start])
            .map(|&s| s as usize)
            .find(|&s| usable(s))
    }
}

fn gcd(a: u32, b: u32) -> u32 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// The smallest prime `>= n`.
fn next_prime(n: usize) -> usize {
    let mut c = n.max(2);
    while !is_prime(c) {
        c += 1;
    }
    c
}

/// Trial division: table sizes are small enough (about 100 per server).
fn is_prime(c: usize) -> bool {
    if c < 4 {
        return c >= 2;
    }
    c % 2 != 0
        && (3..)
            .step_by(2)
            .take_while(|d| d * d <= c)
            .all(|d| c % d != 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash_key;
    use std::collections::HashMap;

    fn names(n: usize) -> Vec<String> {
        (0..n)
            .map(|i| format!("10.0.{}.{}:80", i / 256, i % 256))
            .collect()
    }

    fn shares(m: &Maglev) -> Vec<usize> {
        let mut c = vec![0; m.servers()];
        for &s in &m.table {
            c[s as usize] += 1;
        }
        c
    }

    #[test]
    fn primes() {
        let small: Vec<usize> = (0..30).filter(|&c| is_prime(c)).collect();
        assert_eq!(small, [2, 3, 5, 7, 11, 13, 17, 19, 23, 29]);
        assert_eq!(next_prime(0), 2);
        assert_eq!(next_prime(2), 2);
        assert_eq!(next_prime(4), 5);
        assert_eq!(next_prime(65_537), 65_537);
        assert_eq!(next_prime(65_538), 65_539);
        assert_eq!(next_prime(100_000), 100_003);
    }

    #[test]
    fn sizes() {
        assert_eq!(Maglev::new(&names(1), &[]).table_size(), 65_537);
        assert_eq!(Maglev::new(&names(1000), &[]).table_size(), 100_003);
        let empty = Maglev::new(&[], &[]);
        assert_eq!((empty.servers(), empty.table_size()), (0, 0));
        assert_eq!(empty.lookup(7), 0);
        assert_eq!(empty.lookup_usable(7, |_| true), None);
        assert!(format!("{empty:?}").contains("table_size: 0"));
    }

    #[test]
    fn equal_weights_own_equal_slots() {
        for n in [1, 2, 3, 7, 10, 100] {
            let m = Maglev::new(&names(n), &[]);
            let s = shares(&m);
            let (lo, hi) = (s.iter().min().unwrap(), s.iter().max().unwrap());
            assert!(hi - lo <= 1, "{n} servers: {lo}..{hi}");
        }
    }

    #[test]
    fn keys_balanced_within_ten_percent() {
        let n = 10;
        let m = Maglev::new(&names(n), &[1; 10]);
        let keys = 200_000;
        let mut c = vec![0usize; n];
        for k in 0..keys {
            c[m.lookup(hash_key(format!("client-{k}").as_bytes()))] += 1;
        }
        let fair = keys / n;
        for (i, &x) in c.iter().enumerate() {
            assert!(x.abs_diff(fair) * 10 < fair, "server {i}: {x} of {keys}");
        }
    }

    #[test]
    fn weights_honoured() {
        let w = [1, 2, 3, 4];
        let m = Maglev::new(&names(4), &w);
        let s = shares(&m);
        let total: u32 = w.iter().sum();
        for i in 0..4 {
            let want = m.table_size() as f64 * f64::from(w[i]) / f64::from(total);
            assert!((s[i] as f64 - want).abs() < want * 0.01, "{s:?}");
        }
        // Only ratios matter.
        assert_eq!(Maglev::new(&names(4), &[10, 20, 30, 40]).table, m.table);
        // Missing and zero weights count as 1.
        assert_eq!(
            Maglev::new(&names(3), &[0, 1]).table,
            Maglev::new(&names(3), &[]).table
        );
    }

    #[test]
    fn independent_of_order() {
        let a = names(20);
        let mut b = a.clone();
        b.reverse();
        let (ma, mb) = (Maglev::new(&a, &[]), Maglev::new(&b, &[]));
        for (x, y) in ma.table.iter().zip(&mb.table) {
            assert_eq!(a[*x as usize], b[*y as usize]);
        }
    }

    /// Removing one server moves its keys and very few others.
    #[test]
    fn minimal_disruption() {
        let all = names(10);
        let before = Maglev::new(&all, &[]);
        let removed = 3;
        let rest: Vec<String> = all
            .iter()
            .filter(|n| **n != all[removed])
            .cloned()
            .collect();
        let after = Maglev::new(&rest, &[]);
        let (mut kept, mut others) = (0, 0);
        for k in 0..100_000u32 {
            let h = hash_key(&k.to_le_bytes());
            let old = &all[before.lookup(h)];
            if *old == all[removed] {
                continue;
            }
            others += 1;
            kept += usize::from(rest[after.lookup(h)] == *old);
        }
        assert!(kept * 100 > others * 95, "kept {kept} of {others}");
        // Adding it back restores the table exactly.
        let again = Maglev::new(&all, &[]);
        assert_eq!(again.table, before.table);
    }

    #[test]
    fn lookup_usable_skips_down_servers() {
        let m = Maglev::new(&names(5), &[]);
        let down = 2;
        let mut moved_to: HashMap<usize, usize> = HashMap::new();
        for k in 0..50_000u32 {
            let h = hash_key(&k.to_le_bytes());
            let owner = m.lookup(h);
            assert_eq!(m.lookup_usable(h, |_| true), Some(owner));
            let got = m.lookup_usable(h, |s| s != down).unwrap();
            assert_ne!(got, down);
            if owner == down {
                *moved_to.entry(got).or_default() += 1;
            } else {
                assert_eq!(got, owner, "keys of up servers stay");
            }
            assert_eq!(m.lookup_usable(h, |_| false), None);
            assert_eq!(m.lookup_usable(h, |s| s == 4), Some(4));
        }
        // The down server's keys spread over all the others, evenly enough.
        assert_eq!(moved_to.len(), 4, "{moved_to:?}");
        let total: usize = moved_to.values().sum();
        for (&s, &c) in &moved_to {
            assert!(
                c * 4 > total / 2 && c * 4 < total * 2,
                "server {s}: {c} of {total}"
            );
        }
    }
}
