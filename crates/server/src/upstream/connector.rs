//! The one place upstream connections are opened. A zone connects only for its own
//! downstream connections, and when connection steering is on it binds the source port its
//! [`PortTable`] hands out, so the upstream's replies arrive on this zone's CPU (F-Stack's
//! `ff_rss_check`, Fastsocket's active-side locality). Without a table the kernel chooses.
//!
//! Per connect: the destination's handle comes from a small map filled once per upstream
//! address (the route's source address is looked up then), the port from the table in O(1)
//! without hashing; a port the kernel refuses to bind (`EADDRINUSE`: a socket of another
//! program, or one the kernel gave a connect of its own, holds it) rests and the next is
//! tried, a few times, before the kernel chooses. At close the port goes back: behind a
//! TIME_WAIT quarantine when this side closed first, at once when the upstream did (then
//! the upstream holds TIME_WAIT, not us; the socket's TCP state when the upstream's FIN
//! arrives tells which: CLOSE_WAIT means we had not closed).
//!
//! Locality is measured, not assumed: when an upstream connection's first bytes arrive the
//! zone reads the socket's `SO_INCOMING_CPU` (the CPU that last processed its packets) and
//! counts it as home (its own CPU) or away; with `RUST_LOG=ringx::locality=debug` it logs
//! one line per connection.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use ringx_engine::locality::LOCALITY_LOG;
use ringx_engine::{ConnId, ConnectTo, Io};
use ringx_steer::ports::{Dest, DestId, PortTable};

use crate::metrics::ZoneCounters;

/// Ports a connect tries after `EADDRINUSE` before the kernel chooses.
const BUSY_RETRIES: u32 = 8;

/// Connection counts, per zone.
#[derive(Default, Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectCounters {
    pub connects: u64,
    /// Source port from the steering table (or its dynamic search).
    pub steered: u64,
    /// The kernel chose the source port (steering off, or no port fits).
    pub kernel_choice: u64,
    pub failures: u64,
    /// Table ports the kernel refused to bind (`EADDRINUSE`), each followed by another try.
    pub port_busy: u64,
    /// Port table: ports served from the precomputed table (no hashing).
    pub table_hits: u64,
    /// Port table: dynamic searches (table exhausted, or destination not in it).
    pub dynamic_searches: u64,
    /// Port table: steering-function evaluations at run time (all in dynamic searches).
    pub hash_evals: u64,
    /// Port table: requests that found no port (the kernel chose).
    pub table_fallbacks: u64,
    /// Upstream connections whose replies arrived on this zone's CPU (`SO_INCOMING_CPU`).
    pub locality_home: u64,
    /// ... on another CPU.
    pub locality_away: u64,
}

impl ConnectCounters {
    const FIELDS: usize = 11;
    /// Field names, in `to_array` order (log lines).
    const NAMES: [&'static str; Self::FIELDS] = [
        "connects",
        "steered",
        "kernel_choice",
        "failures",
        "port_busy",
        "table_hits",
        "dynamic_searches",
        "hash_evals",
        "table_fallbacks",
        "locality_home",
        "locality_away",
    ];

    fn to_array(self) -> [u64; Self::FIELDS] {
        [
            self.connects,
            self.steered,
            self.kernel_choice,
            self.failures,
            self.port_busy,
            self.table_hits,
            self.dynamic_searches,
            self.hash_evals,
            self.table_fallbacks,
            self.locality_home,
            self.locality_away,
        ]
    }

    fn from_array(a: [u64; Self::FIELDS]) -> Self {
        ConnectCounters {
            connects: a[0],
            steered: a[1],
            kernel_choice: a[2],
            failures: a[3],
            port_busy: a[4],
            table_hits: a[5],
            dynamic_searches: a[6],
            hash_evals: a[7],
            table_fallbacks: a[8],
            locality_home: a[9],
            locality_away: a[10],
        }
    }

    /// What a zone published to its metrics block.
    pub fn from_metrics(z: &ZoneCounters) -> ConnectCounters {
        let r = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        ConnectCounters {
            connects: r(&z.connects_steered) + r(&z.connects_kernel) + r(&z.connect_failures),
            steered: r(&z.connects_steered),
            kernel_choice: r(&z.connects_kernel),
            failures: r(&z.connect_failures),
            port_busy: r(&z.port_busy),
            table_hits: r(&z.port_table_hits),
            dynamic_searches: r(&z.port_searches),
            hash_evals: r(&z.port_hash_evals),
            table_fallbacks: r(&z.port_fallbacks),
            locality_home: r(&z.locality_home),
            locality_away: r(&z.locality_away),
        }
    }

    /// Publishes to the zone's metrics block (`/metrics`; the zone is its only writer).
    fn publish(&self, z: &ZoneCounters) {
        let w = |a: &std::sync::atomic::AtomicU64, v: u64| a.store(v, Ordering::Relaxed);
        w(&z.connects_steered, self.steered);
        w(&z.connects_kernel, self.kernel_choice);
        w(&z.connect_failures, self.failures);
        w(&z.port_busy, self.port_busy);
        w(&z.port_table_hits, self.table_hits);
        w(&z.port_searches, self.dynamic_searches);
        w(&z.port_hash_evals, self.hash_evals);
        w(&z.port_fallbacks, self.table_fallbacks);
        w(&z.locality_home, self.locality_home);
        w(&z.locality_away, self.locality_away);
    }

    /// The sum of several zones' counters.
    pub fn sum<'a>(all: impl IntoIterator<Item = &'a ConnectCounters>) -> ConnectCounters {
        let mut acc = [0u64; Self::FIELDS];
        for c in all {
            for (a, v) in acc.iter_mut().zip(c.to_array()) {
                *a += v;
            }
        }
        Self::from_array(acc)
    }
}

impl std::fmt::Display for ConnectCounters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, (name, v)) in Self::NAMES.iter().zip(self.to_array()).enumerate() {
            let sep = if i == 0 { "" } else { " " };
            write!(f, "{sep}{name}={v}")?;
        }
        Ok(())
    }
}

/// FxHash-style hasher for the destination map (keys come from the configuration).
#[derive(Default)]
struct Fx(u64);

impl Hasher for Fx {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }
    fn write_u8(&mut self, v: u8) {
        self.write_u64(u64::from(v));
    }
    fn write_u16(&mut self, v: u16) {
        self.write_u64(u64::from(v));
    }
    fn write_u32(&mut self, v: u32) {
        self.write_u64(u64::from(v));
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

/// What the connector remembers about one outbound connection, by connection index.
#[derive(Clone, Copy, Default)]
struct OutConn {
    /// The table port it was bound to, to give back at close.
    taken: Option<(DestId, u16)>,
    /// Its locality is read when its first bytes arrive.
    probe: bool,
    /// The upstream's FIN arrived before this side closed: no TIME_WAIT here.
    peer_closed_first: bool,
}

/// Where a connect's local address came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pick {
    /// A port from the zone's table (or its dynamic search).
    Table(DestId, SocketAddr),
    /// The kernel chooses.
    Kernel,
}

pub struct Connector {
    ports: Option<PortTable>,
    /// Per upstream address: its destination handle and our source address (looked up once);
    /// `None` when the route has no source address we can bind.
    dests: HashMap<SocketAddr, Option<(DestId, IpAddr)>, BuildHasherDefault<Fx>>,
    out: Vec<OutConn>,
    /// The CPU this zone runs on, for the locality probe.
    zone_cpu: Option<usize>,
    /// The zone's metrics block, updated after every connect and locality reading.
    metrics: Option<Arc<ZoneCounters>>,
    pub counters: ConnectCounters,
}

impl Connector {
    /// A connector that binds ports from `ports` (none: the kernel chooses), measures
    /// locality against `zone_cpu`, and publishes its counters to `metrics`.
    pub fn new(
        ports: Option<PortTable>,
        zone_cpu: Option<usize>,
        metrics: Option<Arc<ZoneCounters>>,
    ) -> Connector {
        Connector {
            ports,
            dests: HashMap::default(),
            out: Vec::new(),
            zone_cpu,
            metrics,
            counters: ConnectCounters::default(),
        }
    }

    /// The counters, the port table's included.
    pub fn snapshot(&self) -> ConnectCounters {
        let mut c = self.counters;
        if let Some(t) = &self.ports {
            c.table_hits = t.counters.table_hits;
            c.dynamic_searches = t.counters.dynamic_searches;
            c.hash_evals = t.counters.hash_evals;
            c.table_fallbacks = t.counters.kernel_fallbacks;
        }
        c
    }

    fn publish(&self) {
        if let Some(z) = &self.metrics {
            self.snapshot().publish(z);
        }
    }

    /// The local address for a connection to `addr`: a table port, or the kernel's choice.
    pub fn pick(&mut self, addr: SocketAddr, now: Instant) -> Pick {
        let Some(table) = self.ports.as_mut() else {
            return Pick::Kernel;
        };
        let entry = match self.dests.get(&addr) {
            Some(e) => *e,
            None => {
                let e = route_source(addr)
                    .map(|ip| (table.dest_id_or_insert(&Dest::new(ip, addr)), ip));
                self.dests.insert(addr, e);
                e
            }
        };
        let Some((id, ip)) = entry else {
            return Pick::Kernel;
        };
        match table.take_id(id, now) {
            Some(port) => Pick::Table(id, SocketAddr::new(ip, port)),
            None => Pick::Kernel,
        }
    }

    /// Opens a connection to `addr` (completion arrives as `on_connected`/`on_closed`), from
    /// address `from` when given (`bind = "client"`: transparent, the kernel's port).
    pub fn connect(
        &mut self,
        io: &mut Io,
        addr: SocketAddr,
        from: Option<std::net::IpAddr>,
    ) -> io::Result<ConnId> {
        self.counters.connects += 1;
        if let Some(ip) = from {
            return self.connect_from(io, addr, ip);
        }
        let now = io.now();
        let mut busy = 0;
        let r = loop {
            let pick = if busy < BUSY_RETRIES {
                self.pick(addr, now)
            } else {
                Pick::Kernel
            };
            let to = ConnectTo {
                addr,
                local: match pick {
                    Pick::Table(_, local) => Some(local),
                    Pick::Kernel => None,
                },
                ..ConnectTo::new(addr)
            };
            match (io.connect(&to), pick) {
                (Ok(c), _) => {
                    let taken = match pick {
                        Pick::Table(id, local) => {
                            self.counters.steered += 1;
                            Some((id, local.port()))
                        }
                        Pick::Kernel => {
                            self.counters.kernel_choice += 1;
                            None
                        }
                    };
                    if self.out.len() <= c.index() {
                        self.out.resize(c.index() + 1, OutConn::default());
                    }
                    self.out[c.index()] = OutConn {
                        taken,
                        probe: self.zone_cpu.is_some(),
                        peer_closed_first: false,
                    };
                    break Ok(c);
                }
                (Err(e), Pick::Table(id, local)) if e.kind() == io::ErrorKind::AddrInUse => {
                    // Held by a socket we did not bind: let it rest, take the next.
                    self.counters.port_busy += 1;
                    busy += 1;
                    if let Some(t) = self.ports.as_mut() {
                        let _ = t.release_id(id, local.port(), now);
                    }
                }
                (Err(e), pick) => {
                    self.counters.failures += 1;
                    if let (Pick::Table(id, local), Some(t)) = (pick, self.ports.as_mut()) {
                        // Never connected: nothing in TIME_WAIT.
                        let _ = t.release_id_peer_closed(id, local.port());
                    }
                    break Err(e);
                }
            }
        };
        self.publish();
        r
    }

    /// A transparent connect from the client's address `ip` (no source-port steering: the
    /// port is the kernel's, chosen for the client's 4-tuple).
    fn connect_from(
        &mut self,
        io: &mut Io,
        addr: SocketAddr,
        ip: std::net::IpAddr,
    ) -> io::Result<ConnId> {
        let r = transparent_to(addr, ip).and_then(|to| io.connect(&to));
        match &r {
            Ok(c) => {
                self.counters.kernel_choice += 1;
                if self.out.len() <= c.index() {
                    self.out.resize(c.index() + 1, OutConn::default());
                }
                self.out[c.index()] = OutConn::default();
            }
            Err(_) => self.counters.failures += 1,
        }
        self.publish();
        r
    }

    /// The upstream's FIN arrived on outbound connection `c` (`on_eof`), or this side is
    /// about to close it: if the socket is in CLOSE_WAIT (the upstream's FIN came first,
    /// this side has not closed) it will not go through TIME_WAIT, and its port needs no
    /// quarantine. One `getsockopt` per steered connection.
    pub fn eof(&mut self, io: &Io, c: ConnId) {
        if let Some(o) = self.out.get_mut(c.index()) {
            if o.taken.is_some() && !o.peer_closed_first {
                o.peer_closed_first = io.raw_fd(c).and_then(tcp_state) == Some(TCP_CLOSE_WAIT);
            }
        }
    }

    /// This side closes outbound connection `c` now (see [`Connector::eof`]).
    #[inline]
    pub fn closing(&mut self, io: &Io, c: ConnId) {
        self.eof(io, c);
    }

    /// The connection closed: its source port goes back to the table, at once when the
    /// upstream closed first (see [`Connector::eof`]), else after TIME_WAIT.
    pub fn closed(&mut self, c: ConnId, now: Instant) {
        let Some(o) = self.out.get_mut(c.index()) else {
            return;
        };
        o.probe = false;
        let peer_closed_first = std::mem::take(&mut o.peer_closed_first);
        if let (Some((id, port)), Some(t)) = (o.taken.take(), self.ports.as_mut()) {
            let _ = if peer_closed_first {
                t.release_id_peer_closed(id, port)
            } else {
                t.release_id(id, port, now)
            };
        }
    }

    /// Bytes arrived on outbound connection `c`: the first time, read where its packets are
    /// processed. One branch on every later call.
    #[inline]
    pub fn observe(&mut self, io: &Io, c: ConnId) {
        if let Some(o) = self.out.get_mut(c.index()) {
            if o.probe {
                o.probe = false;
                self.probe_locality(io, c);
            }
        }
    }

    #[cold]
    fn probe_locality(&mut self, io: &Io, c: ConnId) {
        let (Some(zone_cpu), Some(fd)) = (self.zone_cpu, io.raw_fd(c)) else {
            return;
        };
        let Some(incoming) = incoming_cpu(fd) else {
            return;
        };
        let home = incoming == zone_cpu as i32;
        if home {
            self.counters.locality_home += 1;
        } else {
            self.counters.locality_away += 1;
        }
        if tracing::enabled!(target: LOCALITY_LOG, tracing::Level::DEBUG) {
            let steered = self.out.get(c.index()).is_some_and(|o| o.taken.is_some());
            tracing::debug!(
                target: LOCALITY_LOG,
                "upstream zone_cpu={zone_cpu} incoming_cpu={incoming} local={} peer={} steered={steered}",
                local_addr(fd).map_or("?".into(), |a| a.to_string()),
                io.peer_addr(c).map_or("?".into(), |a| a.to_string()),
            );
        }
        self.publish();
    }
}

/// `SO_INCOMING_CPU` of a socket (the CPU that processed its last packet), or None.
fn incoming_cpu(fd: std::os::fd::RawFd) -> Option<i32> {
    let mut cpu: libc::c_int = -1;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt writes one c_int and its length into live locals; `fd` is the
    // connection's open descriptor (the engine owns it; we only read an option).
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_INCOMING_CPU,
            (&mut cpu as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    (r == 0).then_some(cpu)
}

/// `TCP_CLOSE_WAIT` of the kernel's TCP states (`tcpi_state`).
const TCP_CLOSE_WAIT: u8 = 8;

/// The TCP state of a socket (`tcp_info.tcpi_state`, its first byte).
fn tcp_state(fd: std::os::fd::RawFd) -> Option<u8> {
    let mut info = [0u8; 8];
    let mut len = info.len() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes of tcp_info into the live local buffer
    // and its length into another; `fd` is the connection's open descriptor (read only).
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            info.as_mut_ptr().cast(),
            &mut len,
        )
    };
    (r == 0 && len >= 1).then_some(info[0])
}

/// The socket's local address.
fn local_addr(fd: std::os::fd::RawFd) -> Option<SocketAddr> {
    // SAFETY: a borrowed view of the engine's open descriptor, never closed here
    // (ManuallyDrop), used only for getsockname.
    let sock = std::mem::ManuallyDrop::new(unsafe {
        <std::net::TcpStream as std::os::fd::FromRawFd>::from_raw_fd(fd)
    });
    sock.local_addr().ok()
}

/// The source address the kernel would use towards `addr` (a connected UDP socket sends
/// nothing and tells us the route's source).
pub fn route_source(addr: SocketAddr) -> Option<IpAddr> {
    let bind: SocketAddr = if addr.is_ipv4() {
        (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let s = UdpSocket::bind(bind).ok()?;
    s.connect(addr).ok()?;
    Some(s.local_addr().ok()?.ip())
}

/// A transparent connect to `addr` from the client's address `ip` (`bind = "client"`); an
/// error naming both when their families differ.
pub fn transparent_to(addr: SocketAddr, ip: std::net::IpAddr) -> io::Result<ConnectTo> {
    // A v4-mapped IPv6 client (a dual-stack listener) binds as the IPv4 address it is.
    let ip = match ip {
        std::net::IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, std::net::IpAddr::V4),
        v4 => v4,
    };
    if ip.is_ipv4() != addr.is_ipv4() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "bind = \"client\": the client {ip} and the server {addr} are of different \
                 address families"
            ),
        ));
    }
    Ok(ConnectTo {
        local: Some(SocketAddr::new(ip, 0)),
        transparent: true,
        ..ConnectTo::new(addr)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ringx_steer::ports::{PortTableBuilder, PortTableConfig};
    use ringx_steer::steering::{FlowSteering, PortMask, ZoneMap};
    use std::time::Duration;

    fn table(zone: u16, range: std::ops::RangeInclusive<u16>, dest: Option<Dest>) -> PortTable {
        let fs = Arc::new(FlowSteering::software(
            PortMask::for_zones(2),
            ZoneMap::identity(2),
        ));
        let cfg = PortTableConfig {
            range,
            time_wait: Duration::from_secs(60),
            max_attempts: 1024,
            max_table_ports: usize::MAX,
            seed: None,
        };
        let mut b = PortTableBuilder::new(fs, cfg);
        if let Some(d) = dest {
            b = b.dest(d);
        }
        b.build(zone).unwrap()
    }

    #[test]
    fn picks_from_the_table_then_searches_then_the_kernel() {
        let up: SocketAddr = "127.0.0.1:9".parse().unwrap();
        let local = route_source(up).unwrap();
        assert_eq!(local, "127.0.0.1".parse::<IpAddr>().unwrap());
        let d = Dest::new(local, up);
        // Zone 1 of 2 (odd ports); the table holds 41001 and 41003.
        let mut c = Connector::new(Some(table(1, 41000..=41003, Some(d))), Some(0), None);
        let now = Instant::now();
        let mut got = Vec::new();
        for _ in 0..2 {
            match c.pick(up, now) {
                Pick::Table(_, a) => got.push(a.port()),
                Pick::Kernel => panic!("table"),
            }
        }
        got.sort_unstable();
        assert_eq!(got, [41001, 41003]);
        assert_eq!(c.pick(up, now), Pick::Kernel);
        let s = c.snapshot();
        assert_eq!((s.table_hits, s.hash_evals, s.table_fallbacks), (2, 0, 1));
        // A destination not in the table: dynamic search (hashes), then nothing left.
        let other: SocketAddr = "127.0.0.1:10".parse().unwrap();
        let Pick::Table(_, a) = c.pick(other, now) else {
            panic!("dynamic search")
        };
        assert_eq!(a.port() % 2, 1);
        let s = c.snapshot();
        assert_eq!(s.dynamic_searches, 1);
        assert!(s.hash_evals >= 1);
        // No table: always the kernel, nothing counted.
        let mut plain = Connector::new(None, None, None);
        assert_eq!(plain.pick(up, now), Pick::Kernel);
        assert_eq!(plain.snapshot(), ConnectCounters::default());
    }

    /// What choosing a port costs the connector per connect (destination lookup, table
    /// take, release at close): `cargo test --release -p ringx -- --ignored pick_cost
    /// --nocapture`.
    #[test]
    #[ignore]
    fn pick_cost() {
        let up: SocketAddr = "127.0.0.1:9".parse().unwrap();
        let d = Dest::new(route_source(up).unwrap(), up);
        let cfg = PortTableConfig {
            range: 32768..=60999,
            time_wait: Duration::ZERO,
            max_attempts: 1024,
            max_table_ports: usize::MAX,
            seed: Some(1),
        };
        let fs = Arc::new(FlowSteering::software(
            PortMask::for_zones(2),
            ZoneMap::identity(2),
        ));
        let t = PortTableBuilder::new(fs, cfg).dest(d).build(1).unwrap();
        let mut c = Connector::new(Some(t), None, None);
        let now = Instant::now();
        let n = 5_000_000u32;
        let start = Instant::now();
        for _ in 0..n {
            let Pick::Table(id, a) = c.pick(std::hint::black_box(up), now) else {
                panic!("table")
            };
            let _ = c
                .ports
                .as_mut()
                .unwrap()
                .release_id_peer_closed(id, a.port());
        }
        let ns = start.elapsed().as_nanos() as f64 / f64::from(n);
        let s = c.snapshot();
        println!(
            "connector pick + release: {ns:.1} ns per connect, {} hash evaluations in {n}",
            s.hash_evals
        );
        assert_eq!(s.hash_evals, 0);
    }

    #[test]
    fn unroutable_destinations_go_to_the_kernel() {
        // No route to a link-local v6 address without a scope: no source address, no table
        // port, and the answer is cached.
        let up: SocketAddr = "[fe80::1]:80".parse().unwrap();
        let mut c = Connector::new(Some(table(0, 41000..=41003, None)), Some(0), None);
        let now = Instant::now();
        if route_source(up).is_none() {
            assert_eq!(c.pick(up, now), Pick::Kernel);
            assert_eq!(c.pick(up, now), Pick::Kernel);
            assert_eq!(c.snapshot().dynamic_searches, 0);
        }
    }

    #[test]
    fn counters_add_up_and_publish() {
        let a = ConnectCounters {
            connects: 3,
            locality_home: 2,
            ..Default::default()
        };
        let b = ConnectCounters {
            connects: 4,
            hash_evals: 5,
            ..Default::default()
        };
        let s = ConnectCounters::sum([&a, &b]);
        assert_eq!((s.connects, s.locality_home, s.hash_evals), (7, 2, 5));
        let z = ZoneCounters::default();
        let c = ConnectCounters {
            steered: 4,
            kernel_choice: 2,
            failures: 1,
            connects: 7,
            ..s
        };
        c.publish(&z);
        assert_eq!(ConnectCounters::from_metrics(&z), c);
        assert!(s.to_string().contains("connects=7 "));
    }
}
