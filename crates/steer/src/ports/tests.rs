use super::*;
use crate::steering::{PortMask, Reta, ZoneMap};
use crate::toeplitz::{toeplitz, HashInput, DEFAULT_KEY};

fn rss(queues: u16) -> Arc<FlowSteering> {
    Arc::new(FlowSteering::rss(
        &DEFAULT_KEY,
        Reta::round_robin(128, queues).unwrap(),
        ZoneMap::identity(queues),
        true,
    ))
}

fn dest(s: &str) -> Dest {
    s.parse().unwrap()
}

fn config(range: RangeInclusive<u16>) -> PortTableConfig {
    PortTableConfig {
        range,
        time_wait: Duration::from_secs(60),
        max_attempts: 1024,
        max_table_ports: usize::MAX,
        seed: None,
    }
}

/// The reference: the NIC's queue for a reply to `local_port`, by the bitwise hash.
fn reference_queue(d: &Dest, local_port: u16, queues: u16) -> u16 {
    let input = HashInput::with_ports(d.remote, SocketAddr::new(d.local, local_port)).unwrap();
    let reta = Reta::round_robin(128, queues).unwrap();
    reta.table[toeplitz(&DEFAULT_KEY, input.as_bytes()) as usize & 127]
}

#[test]
fn every_table_port_maps_to_its_zone() {
    let dests = [
        dest("192.168.1.10 192.168.2.10 80"),
        dest("192.168.1.10 192.168.2.11 8080"),
        dest("2001:db8::1 2001:db8::2 443"),
    ];
    let cfg = PortTableConfig {
        seed: Some(7),
        ..PortTableConfig::default()
    };
    let tables = PortTableBuilder::new(rss(4), cfg)
        .dests(dests)
        .build_all()
        .unwrap();
    assert_eq!(tables.len(), 4);
    for d in &dests {
        let mut total = 0;
        for t in &tables {
            let id = t.dest_id(d).unwrap();
            let ports: Vec<u16> = t.idle_ports(id).collect();
            assert_eq!(ports.len(), t.table_len(id));
            assert!(
                ports.len() > 28232 / 4 / 2,
                "zone {} has only {}",
                t.zone(),
                ports.len()
            );
            for &p in &ports {
                assert!((32768..=60999).contains(&p));
                assert_eq!(reference_queue(d, p, 4), t.zone(), "{d} port {p}");
            }
            total += ports.len();
        }
        // The zones partition the range.
        assert_eq!(total, 28232);
    }
    // One zone built alone equals its slice of build_all.
    let one = PortTableBuilder::new(rss(4), config(32768..=60999))
        .dests(dests)
        .build(2)
        .unwrap();
    let id = one.dest_id(&dests[0]).unwrap();
    let all = &tables[2];
    let mut a: Vec<u16> = one.idle_ports(id).collect();
    let mut b: Vec<u16> = all.idle_ports(all.dest_id(&dests[0]).unwrap()).collect();
    a.sort_unstable();
    b.sort_unstable();
    assert_eq!(a, b);
}

/// A table for zone `zone` of a 2-queue NIC with one destination: (table, the
/// destination, its id, its number of ports).
fn one_dest_table(zone: u16) -> (PortTable, Dest, DestId, usize) {
    let d = dest("10.0.0.1 10.0.0.2 80");
    let t = PortTableBuilder::new(rss(2), config(40000..=40999))
        .dest(d)
        .build(zone)
        .unwrap();
    let id = t.dest_id(&d).unwrap();
    let n = t.table_len(id);
    (t, d, id, n)
}

#[test]
fn take_and_release_without_hashing() {
    let (mut t, d, id, n) = one_dest_table(1);
    let now = Instant::now();
    let mut got = Vec::new();
    for _ in 0..n {
        got.push(t.take_id(id, now).unwrap());
    }
    assert_eq!(t.in_use(id), n);
    assert_eq!(t.counters.table_hits, n as u64);
    assert_eq!(t.counters.hash_evals, 0);
    let mut sorted = got.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), n, "no port handed out twice");
    for &p in &got {
        assert_eq!(reference_queue(&d, p, 2), 1);
        t.release_id(id, p, now).unwrap();
    }
    assert_eq!(t.in_use(id), 0);
    assert_eq!(
        t.release_id(id, got[0], now),
        Err(ReleaseError::NotInUse(got[0]))
    );
    assert_eq!(
        t.release_id(id, 39999, now),
        Err(ReleaseError::OutOfRange(39999))
    );
    assert_eq!(
        t.release_id(id, 41000, now),
        Err(ReleaseError::OutOfRange(41000))
    );
    let other = dest("10.0.0.1 10.0.0.3 80");
    assert_eq!(
        t.release(&other, 40000, now),
        Err(ReleaseError::UnknownDest)
    );
}

#[test]
fn time_wait_quarantine() {
    let (mut t, _, id, n) = one_dest_table(0);
    let t0 = Instant::now();
    let first = t.take_id(id, t0).unwrap();
    t.release_id(id, first, t0).unwrap();
    // The released port goes behind every idle one and is not handed out again while
    // others are idle.
    let rest: Vec<u16> = (1..n).map(|_| t.take_id(id, t0).unwrap()).collect();
    assert!(!rest.contains(&first));
    // Everything is in use or cooling: the table is complete, so no search, kernel.
    assert_eq!(t.take_id(id, t0 + Duration::from_secs(59)), None);
    assert_eq!(t.counters.kernel_fallbacks, 1);
    assert_eq!(t.counters.dynamic_searches, 0);
    assert_eq!(t.counters.hash_evals, 0);
    // After TIME_WAIT it is back.
    assert_eq!(t.take_id(id, t0 + Duration::from_secs(60)), Some(first));
}

#[test]
fn peer_closed_ports_need_no_quarantine() {
    let (mut t, d, id, n) = one_dest_table(0);
    let t0 = Instant::now();
    let all: Vec<u16> = (0..n).map(|_| t.take_id(id, t0).unwrap()).collect();
    // Two closed by us (TIME_WAIT here), two by the peer (none here).
    t.release_id(id, all[0], t0).unwrap();
    t.release_id(id, all[1], t0).unwrap();
    t.release_id_peer_closed(id, all[2]).unwrap();
    t.release_id_peer_closed(id, all[3]).unwrap();
    assert_eq!(
        t.release_id_peer_closed(id, all[3]),
        Err(ReleaseError::NotInUse(all[3]))
    );
    // The peer-closed ones come back at once, oldest first, from the table.
    assert_eq!(t.take_id(id, t0), Some(all[2]));
    assert_eq!(t.take_id(id, t0), Some(all[3]));
    assert_eq!(t.take_id(id, t0), None);
    assert_eq!(t.counters.table_hits, n as u64 + 2);
    assert_eq!(t.counters.hash_evals, 0);
    // TIME_WAIT ones after the quarantine, before recycled ones released later.
    t.release_id_peer_closed(id, all[2]).unwrap();
    let later = t0 + Duration::from_secs(60);
    assert_eq!(t.take_id(id, later), Some(all[0]));
    assert_eq!(t.take_id(id, later), Some(all[1]));
    assert_eq!(t.take_id(id, later), Some(all[2]));
    // A dynamic port closed by the peer is free for the next search at once.
    let cfg = PortTableConfig {
        max_table_ports: 0,
        ..config(40000..=40003)
    };
    let mut t = PortTableBuilder::new(rss(2), cfg).dest(d).build(0).unwrap();
    let id = t.dest_id(&d).unwrap();
    let got: Vec<u16> = std::iter::from_fn(|| t.take_id(id, t0)).collect();
    assert!(!got.is_empty());
    t.release_id_peer_closed(id, got[0]).unwrap();
    assert_eq!(t.take_id(id, t0), Some(got[0]));
}

#[test]
fn exhausted_capped_table_falls_back_to_dynamic_search() {
    let d = dest("10.0.0.1 10.0.0.2 80");
    let cfg = PortTableConfig {
        max_table_ports: 3,
        ..config(40000..=40999)
    };
    let mut t = PortTableBuilder::new(rss(2), cfg).dest(d).build(1).unwrap();
    let id = t.dest_id(&d).unwrap();
    assert_eq!(t.table_len(id), 3);
    let now = Instant::now();
    let table_ports: Vec<u16> = (0..3).map(|_| t.take_id(id, now).unwrap()).collect();
    let p = t.take_id(id, now).unwrap();
    assert!(!table_ports.contains(&p));
    assert_eq!(reference_queue(&d, p, 2), 1);
    assert_eq!(t.counters.table_hits, 3);
    assert_eq!(t.counters.dynamic_searches, 1);
    assert_eq!(t.counters.dynamic_hits, 1);
    assert!(t.counters.hash_evals >= 1);
    // A dynamic port released also waits out TIME_WAIT before a search finds it again.
    t.release_id(id, p, now).unwrap();
    let mut seen = Vec::new();
    while let Some(q) = t.take_id(id, now) {
        assert_ne!(q, p);
        assert_eq!(reference_queue(&d, q, 2), 1);
        seen.push(q);
    }
    assert_eq!(t.counters.kernel_fallbacks, 1);
    let later = now + Duration::from_secs(60);
    assert_eq!(t.take_id(id, later), Some(p));
}

#[test]
fn unknown_destination_uses_dynamic_search() {
    let mut t = PortTableBuilder::new(rss(4), config(32768..=60999))
        .dest(dest("10.0.0.1 10.0.0.2 80"))
        .build(3)
        .unwrap();
    let unknown = dest("10.0.0.1 10.0.0.9 5432");
    assert!(t.dest_id(&unknown).is_none());
    let now = Instant::now();
    let p = t.take(&unknown, now).unwrap();
    assert_eq!(reference_queue(&unknown, p, 4), 3);
    assert_eq!(t.counters.table_hits, 0);
    assert_eq!(t.counters.dynamic_searches, 1);
    assert_eq!(t.counters.dynamic_hits, 1);
    assert!(t.counters.hash_evals >= 1);
    let id = t.dest_id(&unknown).unwrap();
    assert_eq!(t.table_len(id), 0);
    assert_eq!(t.in_use(id), 1);
    t.release(&unknown, p, now).unwrap();
    assert_eq!(t.in_use(id), 0);
}

#[test]
fn nothing_fits_is_a_counted_kernel_fallback() {
    // Two ports, software steering over four zones: neither port maps to zone 3.
    let fs = Arc::new(FlowSteering::software(
        PortMask::for_zones(4),
        ZoneMap::identity(4),
    ));
    let mut t = PortTableBuilder::new(fs, config(40000..=40001))
        .build(3)
        .unwrap();
    let d = dest("10.0.0.1 10.0.0.2 80");
    assert_eq!(t.take(&d, Instant::now()), None);
    assert_eq!(t.counters.dynamic_searches, 1);
    assert_eq!(t.counters.hash_evals, 2);
    assert_eq!(t.counters.kernel_fallbacks, 1);
    // Bounded: a search looks at no more than max_attempts candidates.
    let cfg = PortTableConfig {
        max_attempts: 5,
        ..config(32768..=60999)
    };
    let unsteerable = Arc::new(FlowSteering::software(
        PortMask::for_zones(4),
        ZoneMap::identity(2),
    ));
    let mut t = PortTableBuilder::new(unsteerable, cfg).build(3).unwrap();
    assert_eq!(t.take(&d, Instant::now()), None);
    assert_eq!(t.counters.hash_evals, 5);
    assert_eq!(t.counters.kernel_fallbacks, 1);
    // Mixed families cannot be hashed at all.
    let mut t = PortTableBuilder::new(rss(2), config(40000..=40999))
        .build(0)
        .unwrap();
    let mixed = Dest::new("::1".parse().unwrap(), "10.0.0.2:80".parse().unwrap());
    assert_eq!(t.take(&mixed, Instant::now()), None);
    assert_eq!(t.counters.kernel_fallbacks, 1);
    assert_eq!(t.counters.hash_evals, 0);
}

#[test]
fn software_steering_table() {
    let fs = Arc::new(FlowSteering::software(
        PortMask::for_zones(2),
        ZoneMap::identity(2),
    ));
    let d = dest("10.0.0.1 10.0.0.2 80");
    let t = PortTableBuilder::new(fs, config(40000..=40009))
        .dest(d)
        .build(1)
        .unwrap();
    let id = t.dest_id(&d).unwrap();
    let ports: Vec<u16> = t.idle_ports(id).collect();
    assert_eq!(ports, vec![40001, 40003, 40005, 40007, 40009]);
}

#[test]
fn builder_errors_and_parsing() {
    let mixed = Dest::new("::1".parse().unwrap(), "10.0.0.2:80".parse().unwrap());
    assert_eq!(
        PortTableBuilder::new(rss(2), config(40000..=40009))
            .dest(mixed)
            .build(0)
            .unwrap_err(),
        BuildError::MixedFamilies(mixed)
    );
    #[allow(clippy::reversed_empty_ranges)]
    let empty = config(2..=1);
    assert_eq!(
        PortTableBuilder::new(rss(2), empty)
            .build_all()
            .unwrap_err(),
        BuildError::EmptyRange
    );
    let list = parse_dest_list(
        "192.168.1.10 192.168.2.10 80;192.168.1.10 192.168.2.11 80; 192.168.1.10 192.168.2.12 80",
    )
    .unwrap();
    assert_eq!(list.len(), 3);
    assert_eq!(list[1].remote, "192.168.2.11:80".parse().unwrap());
    assert!("1.2.3.4 5.6.7.8".parse::<Dest>().is_err());
    assert!("1.2.3.4 ::1 80".parse::<Dest>().is_err());
    assert!("1.2.3.4 5.6.7.8 http".parse::<Dest>().is_err());
}

#[test]
fn shuffled_order_is_a_permutation() {
    let d = dest("10.0.0.1 10.0.0.2 80");
    let sorted_t = PortTableBuilder::new(rss(2), config(40000..=40999))
        .dest(d)
        .build(0)
        .unwrap();
    let cfg = PortTableConfig {
        seed: Some(42),
        ..config(40000..=40999)
    };
    let shuffled_t = PortTableBuilder::new(rss(2), cfg).dest(d).build(0).unwrap();
    let a: Vec<u16> = sorted_t.idle_ports(sorted_t.dest_id(&d).unwrap()).collect();
    let mut b: Vec<u16> = shuffled_t
        .idle_ports(shuffled_t.dest_id(&d).unwrap())
        .collect();
    assert_ne!(a, b);
    b.sort_unstable();
    assert_eq!(a, b);
}
