//! Active-side source port selection: pick local ports whose replies land on this zone.
//!
//! When a zone opens an upstream connection, the replies come back on whichever queue the NIC
//! (or software steering) picks for the *inbound* tuple `remote:rport → local:lport`. Only
//! `lport` is ours to choose. F-Stack's `ff_rss_check` tries ports and hashes each until one
//! maps to the right queue (about as many hashes as there are queues, each ~300 cycles); its
//! static table (`[ff_rss_check_tbl]`) precomputes, at start-up, the good ports for each
//! configured (local addr, remote addr, remote port). This module does the same per zone:
//!
//! * [`PortTableBuilder`] takes the steering function and the list of destinations (F-Stack's
//!   `rss_tbl`, parsed by [`parse_dest_list`]) and computes, for each zone, every port of the
//!   configured range that maps to it (optionally capped, to bound memory).
//! * [`PortTable`] belongs to one zone (no atomics, no locks). [`PortTable::take_id`] is a
//!   FIFO pop, no hashing; [`PortTable::release`] puts the port back behind a TIME_WAIT
//!   quarantine (the caller passes `now`; the table never reads the clock).
//! * When the table has no ready port, or the destination was not configured, a bounded
//!   dynamic search hashes candidates like `ff_rss_check`. When that finds nothing the answer
//!   is `None`: bind without a port and let the kernel choose (locality lost, nothing else).
//!
//! Ports are unique per destination, not globally: the kernel allows one local port towards
//! many remotes (bind with `SO_REUSEADDR`, or `IP_BIND_ADDRESS_NO_PORT` plus connect), so the
//! table tracks use per destination. If the kernel refuses a port (`EADDRINUSE`: another
//! program holds it), release it and take another.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::net::{IpAddr, SocketAddr};
use std::ops::RangeInclusive;
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::steering::{FlowSteering, PortProbe};

/// A destination: our local address, and the remote address and port we connect to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Dest {
    /// The local address the connection binds to.
    pub local: IpAddr,
    /// The upstream.
    pub remote: SocketAddr,
}

impl Dest {
    /// A destination; `local` and `remote` should be the same address family.
    pub fn new(local: IpAddr, remote: SocketAddr) -> Self {
        Dest { local, remote }
    }
}

impl std::fmt::Display for Dest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} -> {}", self.local, self.remote)
    }
}

impl FromStr for Dest {
    type Err = String;

    /// F-Stack's rule syntax without the NIC port id: `LOCAL_ADDR REMOTE_ADDR REMOTE_PORT`,
    /// separated by white space (`192.168.1.10 192.168.2.10 80`).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let fields: Vec<&str> = s.split_whitespace().collect();
        let [local, remote, port] = fields[..] else {
            return Err(format!(
                "{s:?}: expected `LOCAL_ADDR REMOTE_ADDR REMOTE_PORT`"
            ));
        };
        let local: IpAddr = local
            .parse()
            .map_err(|_| format!("{s:?}: {local:?} is not an IP address"))?;
        let remote: IpAddr = remote
            .parse()
            .map_err(|_| format!("{s:?}: {remote:?} is not an IP address"))?;
        let port: u16 = port
            .parse()
            .map_err(|_| format!("{s:?}: {port:?} is not a port"))?;
        if local.is_ipv4() != remote.is_ipv4() {
            return Err(format!("{s:?}: local and remote address families differ"));
        }
        Ok(Dest::new(local, SocketAddr::new(remote, port)))
    }
}

/// Parse a list of destinations separated by `;` (F-Stack's `rss_tbl` value, less the port id).
pub fn parse_dest_list(s: &str) -> Result<Vec<Dest>, String> {
    s.split(';')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(str::parse)
        .collect()
}

/// Port table settings.
#[derive(Debug, Clone)]
pub struct PortTableConfig {
    /// Local ports to use, inclusive (Linux's `ip_local_port_range` default: 32768–60999).
    pub range: RangeInclusive<u16>,
    /// How long a released port rests before reuse (TIME_WAIT; Linux holds it 60 s).
    pub time_wait: Duration,
    /// Most candidates one dynamic search looks at before giving up.
    pub max_attempts: u32,
    /// Most precomputed ports per destination and zone (memory bound); ports past the cap
    /// are found by dynamic search.
    pub max_table_ports: usize,
    /// Order of the precomputed ports: `None` ascending, `Some(seed)` shuffled (source ports
    /// harder to guess, as RFC 6056 asks). [`Default`] draws a seed from std's `RandomState`.
    pub seed: Option<u64>,
}

impl Default for PortTableConfig {
    fn default() -> Self {
        use std::hash::{BuildHasher, RandomState};
        PortTableConfig {
            range: 32768..=60999,
            time_wait: Duration::from_secs(60),
            max_attempts: 1024,
            max_table_ports: usize::MAX,
            seed: Some(RandomState::new().build_hasher().finish()),
        }
    }
}

/// Why a table could not be built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BuildError {
    /// The destination's local and remote addresses are of different families.
    MixedFamilies(Dest),
    /// The port range is empty.
    EmptyRange,
}

impl std::fmt::Display for BuildError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BuildError::MixedFamilies(d) => {
                write!(
                    f,
                    "destination {d}: local and remote address families differ"
                )
            }
            BuildError::EmptyRange => write!(f, "the local port range is empty"),
        }
    }
}

impl std::error::Error for BuildError {}

/// Why a release was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReleaseError {
    /// This table never handed out anything for that destination.
    UnknownDest,
    /// The port is outside the table's range (the kernel chose it: nothing to release).
    OutOfRange(u16),
    /// The port is not in use (double release).
    NotInUse(u16),
}

impl std::fmt::Display for ReleaseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReleaseError::UnknownDest => write!(f, "release for a destination never used"),
            ReleaseError::OutOfRange(p) => write!(f, "port {p} is outside the port range"),
            ReleaseError::NotInUse(p) => write!(f, "port {p} is not in use"),
        }
    }
}

impl std::error::Error for ReleaseError {}

/// What one zone's port selection did. Plain integers: a table belongs to one zone.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PortCounters {
    /// Ports served from the precomputed table (no hashing).
    pub table_hits: u64,
    /// Dynamic searches started (table exhausted, or destination not in the table).
    pub dynamic_searches: u64,
    /// Dynamic searches that found a port.
    pub dynamic_hits: u64,
    /// Steering function evaluations at run time (all in dynamic searches).
    pub hash_evals: u64,
    /// Requests answered `None`: the kernel picks the port.
    pub kernel_fallbacks: u64,
}

/// A destination's handle in one [`PortTable`], for lookups done once (at upstream set-up).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DestId(u32);

/// A fixed-size bit set over the port range.
#[derive(Debug, Clone)]
struct Bits(Vec<u64>);

impl Bits {
    fn new(len: usize) -> Self {
        Bits(vec![0; len.div_ceil(64)])
    }
    #[inline]
    fn get(&self, i: usize) -> bool {
        self.0[i / 64] & (1 << (i % 64)) != 0
    }
    #[inline]
    fn set(&mut self, i: usize) {
        self.0[i / 64] |= 1 << (i % 64);
    }
    #[inline]
    fn clear(&mut self, i: usize) {
        self.0[i / 64] &= !(1 << (i % 64));
    }
}

/// One destination's ports in one zone.
#[derive(Debug, Clone)]
struct DestState {
    /// `None`: families differ, nothing can be steered.
    probe: Option<PortProbe>,
    /// Table ports not in use, oldest release first; `Some(t)`: in TIME_WAIT until `t`.
    /// Release times only grow, so when the front is not ready nothing behind it is.
    idle: VecDeque<(u16, Option<Instant>)>,
    /// Table ports released after the peer closed first (no TIME_WAIT on this side): ready
    /// at once, handed out oldest first when no `idle` port is ready.
    recycled: VecDeque<u16>,
    /// Ports (offsets in the range) that belong to the table.
    in_table: Bits,
    /// Ports handed out and not yet released.
    in_use: Bits,
    /// Dynamic ports in TIME_WAIT.
    cooling: Bits,
    cooling_fifo: VecDeque<(u16, Instant)>,
    /// The table holds every port of the range that maps to this zone, so a dynamic search
    /// in the same range cannot find one: skip it.
    complete: bool,
    table_len: usize,
    in_use_count: usize,
    /// Next candidate offset of the dynamic search.
    cursor: u32,
}

impl DestState {
    fn new(probe: Option<PortProbe>, range_len: usize, cursor: u32) -> Self {
        DestState {
            probe,
            idle: VecDeque::new(),
            recycled: VecDeque::new(),
            in_table: Bits::new(range_len),
            in_use: Bits::new(range_len),
            cooling: Bits::new(range_len),
            cooling_fifo: VecDeque::new(),
            complete: false,
            table_len: 0,
            in_use_count: 0,
            cursor,
        }
    }
}

/// FxHash-style hasher for the destination index: a few multiply-rotates instead of SipHash;
/// the keys come from configuration and upstream lists, not from clients.
#[derive(Default)]
struct FxHasher(u64);

impl FxHasher {
    #[inline]
    fn add(&mut self, w: u64) {
        self.0 = (self.0.rotate_left(5) ^ w).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

impl Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.add(u64::from_le_bytes(c.try_into().expect("8-byte chunk")));
        }
        for &b in chunks.remainder() {
            self.add(u64::from(b));
        }
    }
    fn write_u8(&mut self, v: u8) {
        self.add(u64::from(v));
    }
    fn write_u16(&mut self, v: u16) {
        self.add(u64::from(v));
    }
    fn write_u32(&mut self, v: u32) {
        self.add(u64::from(v));
    }
    fn write_u64(&mut self, v: u64) {
        self.add(v);
    }
    fn write_usize(&mut self, v: usize) {
        self.add(v as u64);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

type FxMap<K, V> = HashMap<K, V, BuildHasherDefault<FxHasher>>;

/// Builds the per-zone tables from the steering function and the destination list.
#[derive(Debug, Clone)]
pub struct PortTableBuilder {
    steering: Arc<FlowSteering>,
    config: PortTableConfig,
    dests: Vec<Dest>,
}

impl PortTableBuilder {
    /// A builder with no destinations yet.
    pub fn new(steering: Arc<FlowSteering>, config: PortTableConfig) -> Self {
        PortTableBuilder {
            steering,
            config,
            dests: Vec::new(),
        }
    }

    /// Add a destination to precompute (duplicates are ignored).
    pub fn dest(mut self, dest: Dest) -> Self {
        if !self.dests.contains(&dest) {
            self.dests.push(dest);
        }
        self
    }

    /// Add several destinations.
    pub fn dests(self, dests: impl IntoIterator<Item = Dest>) -> Self {
        dests.into_iter().fold(self, Self::dest)
    }

    /// The table of one zone (each zone can build its own at start-up, on its own core).
    pub fn build(&self, zone: u16) -> Result<PortTable, BuildError> {
        let mut tables = self.build_zones(zone..=zone)?;
        Ok(tables.pop().expect("one zone requested"))
    }

    /// The tables of every zone the steering function names, indexed by zone; one pass over
    /// the ports per destination.
    pub fn build_all(&self) -> Result<Vec<PortTable>, BuildError> {
        let zones = self.steering.zone_map().zones();
        if zones == 0 {
            return Ok(Vec::new());
        }
        self.build_zones(0..=zones - 1)
    }

    fn build_zones(&self, zones: RangeInclusive<u16>) -> Result<Vec<PortTable>, BuildError> {
        let range = self.config.range.clone();
        if range.is_empty() {
            return Err(BuildError::EmptyRange);
        }
        let range_len = usize::from(*range.end() - *range.start()) + 1;
        let first = *zones.start();
        let mut tables: Vec<PortTable> = zones
            .clone()
            .map(|zone| PortTable::empty(zone, self.steering.clone(), self.config.clone()))
            .collect();
        let mut rng = self.config.seed.map(XorShift::new);
        for dest in &self.dests {
            let probe = self
                .steering
                .probe(dest.local, dest.remote)
                .ok_or(BuildError::MixedFamilies(*dest))?;
            let mut states: Vec<DestState> = tables
                .iter()
                .map(|_| {
                    let cursor = rng.as_mut().map_or(0, |r| r.below(range_len as u32));
                    let mut st = DestState::new(Some(probe), range_len, cursor);
                    st.complete = true;
                    st
                })
                .collect();
            for port in range.clone() {
                let Some(zone) = self.steering.zone_of_port(probe, port) else {
                    continue;
                };
                if !zones.contains(&zone) {
                    continue;
                }
                let st = &mut states[usize::from(zone - first)];
                if st.table_len == self.config.max_table_ports {
                    st.complete = false;
                    continue;
                }
                st.idle.push_back((port, None));
                st.in_table.set(usize::from(port - *range.start()));
                st.table_len += 1;
            }
            for (table, mut st) in tables.iter_mut().zip(states) {
                if let Some(rng) = rng.as_mut() {
                    shuffle(st.idle.make_contiguous(), rng);
                }
                table.insert(*dest, st);
            }
        }
        Ok(tables)
    }
}

/// Xorshift64*, for shuffling tables and placing search cursors; not for secrets.
struct XorShift(u64);

impl XorShift {
    fn new(seed: u64) -> Self {
        XorShift(seed | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u32) -> u32 {
        (((self.next() >> 32) * u64::from(n)) >> 32) as u32
    }
}

fn shuffle<T>(items: &mut [T], rng: &mut XorShift) {
    for i in (1..items.len()).rev() {
        items.swap(i, rng.below(i as u32 + 1) as usize);
    }
}

/// One zone's source ports: precomputed table, TIME_WAIT quarantine, dynamic fallback.
#[derive(Debug)]
pub struct PortTable {
    zone: u16,
    steering: Arc<FlowSteering>,
    config: PortTableConfig,
    range_start: u16,
    range_len: usize,
    index: FxMap<Dest, DestId>,
    dests: Vec<DestState>,
    /// What this table did so far.
    pub counters: PortCounters,
}

impl PortTable {
    fn empty(zone: u16, steering: Arc<FlowSteering>, config: PortTableConfig) -> Self {
        let range_start = *config.range.start();
        let range_len = usize::from(*config.range.end() - range_start) + 1;
        PortTable {
            zone,
            steering,
            config,
            range_start,
            range_len,
            index: FxMap::default(),
            dests: Vec::new(),
            counters: PortCounters::default(),
        }
    }

    fn insert(&mut self, dest: Dest, state: DestState) -> DestId {
        let id = DestId(self.dests.len() as u32);
        self.dests.push(state);
        self.index.insert(dest, id);
        id
    }

    /// The zone this table serves.
    pub fn zone(&self) -> u16 {
        self.zone
    }

    /// The handle of a destination known to this table (configured, or used before).
    pub fn dest_id(&self, dest: &Dest) -> Option<DestId> {
        self.index.get(dest).copied()
    }

    /// The handle of `dest`, adding it (with no precomputed ports: dynamic search only) if
    /// it is new.
    pub fn dest_id_or_insert(&mut self, dest: &Dest) -> DestId {
        if let Some(id) = self.dest_id(dest) {
            return id;
        }
        let probe = self.steering.probe(dest.local, dest.remote);
        let cursor = (self.dests.len() * 7919 % self.range_len) as u32;
        let state = DestState::new(probe, self.range_len, cursor);
        self.insert(*dest, state)
    }

    /// Precomputed ports of `id` (in use or not).
    pub fn table_len(&self, id: DestId) -> usize {
        self.dests[id.0 as usize].table_len
    }

    /// Ports of `id` handed out and not released.
    pub fn in_use(&self, id: DestId) -> usize {
        self.dests[id.0 as usize].in_use_count
    }

    /// The precomputed ports of `id`, in hand-out order (in use ones excluded).
    pub fn idle_ports(&self, id: DestId) -> impl Iterator<Item = u16> + '_ {
        self.dests[id.0 as usize].idle.iter().map(|&(p, _)| p)
    }

    /// A local port for a connection to `dest` whose replies come to this zone; `None`: let
    /// the kernel choose.
    pub fn take(&mut self, dest: &Dest, now: Instant) -> Option<u16> {
        let id = self.dest_id_or_insert(dest);
        self.take_id(id, now)
    }

    /// [`PortTable::take`] with the destination already looked up: O(1) when the table has a
    /// ready port.
    ///
    /// # Panics
    /// If `id` was not issued by this table.
    #[inline]
    pub fn take_id(&mut self, id: DestId, now: Instant) -> Option<u16> {
        let st = &mut self.dests[id.0 as usize];
        if let Some(&(port, ready)) = st.idle.front() {
            let ready = match ready {
                None => true,
                Some(t) => t <= now,
            };
            if ready {
                st.idle.pop_front();
                st.in_use.set(usize::from(port - self.range_start));
                st.in_use_count += 1;
                self.counters.table_hits += 1;
                return Some(port);
            }
        }
        if let Some(port) = st.recycled.pop_front() {
            st.in_use.set(usize::from(port - self.range_start));
            st.in_use_count += 1;
            self.counters.table_hits += 1;
            return Some(port);
        }
        if st.complete && st.table_len > 0 {
            // Every port of the range that maps here is in the table and busy.
            self.counters.kernel_fallbacks += 1;
            return None;
        }
        let found = self.search(id, now);
        if found.is_none() {
            self.counters.kernel_fallbacks += 1;
        }
        found
    }

    /// `ff_rss_check`: hash candidates from the destination's cursor until one maps here.
    fn search(&mut self, id: DestId, now: Instant) -> Option<u16> {
        self.counters.dynamic_searches += 1;
        let st = &mut self.dests[id.0 as usize];
        while let Some(&(port, ready)) = st.cooling_fifo.front() {
            if ready > now {
                break;
            }
            st.cooling_fifo.pop_front();
            st.cooling.clear(usize::from(port - self.range_start));
        }
        let probe = st.probe?;
        let attempts = (self.config.max_attempts as usize).min(self.range_len);
        for _ in 0..attempts {
            let off = st.cursor as usize;
            st.cursor = if off + 1 == self.range_len {
                0
            } else {
                off as u32 + 1
            };
            if st.in_table.get(off) || st.in_use.get(off) || st.cooling.get(off) {
                continue;
            }
            let port = self.range_start + off as u16;
            self.counters.hash_evals += 1;
            if self.steering.zone_of_port(probe, port) == Some(self.zone) {
                st.in_use.set(off);
                st.in_use_count += 1;
                self.counters.dynamic_hits += 1;
                return Some(port);
            }
        }
        None
    }

    /// Give `port` back after the connection to `dest` closed at `now`; it rests for
    /// `time_wait` before it is handed out again.
    pub fn release(&mut self, dest: &Dest, port: u16, now: Instant) -> Result<(), ReleaseError> {
        let id = self.dest_id(dest).ok_or(ReleaseError::UnknownDest)?;
        self.release_id(id, port, now)
    }

    /// [`PortTable::release`] by handle; O(1).
    ///
    /// # Panics
    /// If `id` was not issued by this table.
    #[inline]
    pub fn release_id(&mut self, id: DestId, port: u16, now: Instant) -> Result<(), ReleaseError> {
        let off = self.unuse(id, port)?;
        let st = &mut self.dests[id.0 as usize];
        let ready = now + self.config.time_wait;
        if st.in_table.get(off) {
            st.idle.push_back((port, Some(ready)));
        } else {
            st.cooling.set(off);
            st.cooling_fifo.push_back((port, ready));
        }
        Ok(())
    }

    /// Give `port` back after a connection that the peer closed first: this side went
    /// through CLOSE_WAIT and LAST_ACK, not TIME_WAIT (the peer holds that), so the port
    /// needs no quarantine. A table port is handed out again after the other ready ones
    /// (oldest release first, which keeps the peer's TIME_WAIT entries of the same 4-tuple
    /// old); a dynamic one is free for the next search. O(1).
    ///
    /// # Panics
    /// If `id` was not issued by this table.
    #[inline]
    pub fn release_id_peer_closed(&mut self, id: DestId, port: u16) -> Result<(), ReleaseError> {
        let off = self.unuse(id, port)?;
        let st = &mut self.dests[id.0 as usize];
        if st.in_table.get(off) {
            st.recycled.push_back(port);
        }
        Ok(())
    }

    /// Marks `port` of `id` not in use; its offset in the range.
    #[inline]
    fn unuse(&mut self, id: DestId, port: u16) -> Result<usize, ReleaseError> {
        let off = usize::from(port.wrapping_sub(self.range_start));
        if port < self.range_start || off >= self.range_len {
            return Err(ReleaseError::OutOfRange(port));
        }
        let st = &mut self.dests[id.0 as usize];
        if !st.in_use.get(off) {
            return Err(ReleaseError::NotInUse(port));
        }
        st.in_use.clear(off);
        st.in_use_count -= 1;
        Ok(off)
    }
}

#[cfg(test)]
mod tests;
