//! The software steering program (bpf/ringx_steer.bpf.c) through BPF_PROG_TEST_RUN: the zone
//! each packet is given, active (by destination port & mask) and passive (by a hash of the
//! client's address and port), IPv4 and IPv6, VLAN tags, and every pass-through reason; then
//! attach and detach on a veth. Needs root; skips otherwise (`ringx_kerneltest`).

use std::net::SocketAddr;

use ringx_kerneltest::{in_netns, ip};
use ringx_steer::xdp::{fold_addr, passive_zone, Steer, SteerSettings, SteerStats};
use ringx_xdp::packet::{PacketBuilder, ETH_P_8021Q, TCP_ACK};
use ringx_xdp::{Error, Mode};

const XDP_PASS: u32 = 2;
const XDP_REDIRECT: u32 = 4;
const LISTEN: u16 = 8080;

fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

/// The CPUs this test may run on; zone i is pinned to cpus[i % len].
fn cpus() -> Vec<u32> {
    let mut v = Vec::new();
    // SAFETY: sched_getaffinity writes into a live, zeroed cpu_set_t of the size passed.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) == 0 {
            for c in 0..libc::CPU_SETSIZE as usize {
                if libc::CPU_ISSET(c, &set) {
                    v.push(c as u32);
                }
            }
        }
    }
    v
}

fn pin_to(cpu: u32) {
    // SAFETY: sched_setaffinity reads a live cpu_set_t; it affects the calling thread only.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu as usize, &mut set);
        assert_eq!(
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set),
            0
        );
    }
}

fn settings(zone_cpus: Vec<u32>) -> SteerSettings {
    let zones = zone_cpus.len() as u16;
    SteerSettings {
        zone_cpus,
        mask: zones.next_power_of_two() - 1,
        port_range: (32768, 60999),
        listen_ports: vec![LISTEN],
        qsize: 256,
    }
}

/// Whether BPF can be used here; if not, the test skips ([`ringx_kerneltest::require`]).
fn bpf() -> bool {
    ringx_kerneltest::require(ringx_xdp::bpf_unavailable())
}

/// Loads the steering program, or skips and returns None.
fn load(s: &SteerSettings) -> Option<Steer> {
    if !bpf() {
        return None;
    }
    match Steer::load(s) {
        Ok(st) => Some(st),
        Err(e @ Error::Permission { .. }) => {
            ringx_kerneltest::skip(e);
            None
        }
        Err(e) => panic!("loading the steering program failed: {e}"),
    }
}

/// Runs `pkt` and returns (verdict, counter deltas).
fn run(st: &Steer, pkt: &[u8]) -> (u32, SteerStats) {
    let before = st.stats().unwrap();
    let r = st.test_run(pkt, 1).unwrap();
    let after = st.stats().unwrap();
    let d = SteerStats {
        not_tcp: after.not_tcp - before.not_tcp,
        malformed: after.malformed - before.malformed,
        other_port: after.other_port - before.other_port,
        no_zone: after.no_zone - before.no_zone,
        active: after.active - before.active,
        passive: after.passive - before.passive,
        local: after.local - before.local,
        redirected: after.redirected - before.redirected,
        per_zone: after
            .per_zone
            .iter()
            .zip(&before.per_zone)
            .map(|(a, b)| a - b)
            .collect(),
    };
    (r.retval, d)
}

/// Expects the packet steered to `zone` (`active` or passive), redirected unless the zone's
/// CPU is `here`.
fn expect_zone(st: &Steer, name: &str, pkt: &[u8], zone: usize, active: bool, cpus: &[u32]) {
    let here = cpus[0];
    let (verdict, d) = run(st, pkt);
    let local = cpus[zone] == here;
    let mut per_zone = vec![0; cpus.len()];
    per_zone[zone] = 1;
    let want = SteerStats {
        active: active as u64,
        passive: !active as u64,
        local: local as u64,
        redirected: !local as u64,
        per_zone,
        ..SteerStats::default()
    };
    assert_eq!(d, want, "{name}");
    let want_verdict = if local { XDP_PASS } else { XDP_REDIRECT };
    assert_eq!(verdict, want_verdict, "{name}: verdict");
}

fn expect_pass(st: &Steer, name: &str, pkt: &[u8], field: fn(&SteerStats) -> u64) {
    let (verdict, d) = run(st, pkt);
    assert_eq!(verdict, XDP_PASS, "{name}: verdict");
    assert_eq!(field(&d), 1, "{name}: {d:?}");
    assert_eq!(d.active + d.passive, 0, "{name}: steered: {d:?}");
}

#[test]
fn zones_of_active_and_passive_packets() {
    let all = cpus();
    if all.len() < 2 {
        ringx_kerneltest::skip(format!("needs 2 CPUs, this process may use {all:?}"));
        return;
    }
    // Zone i on CPU all[i % 2]: 4 zones, so the mask is 3 and zones 0 and 2 share a CPU.
    let cpus: Vec<u32> = (0..4).map(|i| all[i % 2]).collect();
    let Some(st) = load(&settings(cpus.clone())) else {
        return;
    };
    let handle = std::thread::spawn(move || {
        pin_to(cpus[0]);
        let upstream = sa("10.0.0.2:8080");
        // Active: the reply from the upstream to our port p goes to zone p & 3.
        for p in [40000u16, 40001, 40002, 40003, 32768, 60999] {
            let pkt = PacketBuilder::tcp(upstream, SocketAddr::new("10.0.0.1".parse().unwrap(), p))
                .tcp_flags(TCP_ACK)
                .build();
            expect_zone(
                &st,
                &format!("v4 reply to {p}"),
                &pkt,
                usize::from(p & 3),
                true,
                &cpus,
            );
        }
        let v6_up = sa("[2001:db8::2]:443");
        for p in [50001u16, 50002] {
            let pkt = PacketBuilder::tcp(v6_up, SocketAddr::new("2001:db8::1".parse().unwrap(), p))
                .build();
            expect_zone(
                &st,
                &format!("v6 reply to {p}"),
                &pkt,
                usize::from(p & 3),
                true,
                &cpus,
            );
        }
        let tagged = PacketBuilder::tcp(upstream, sa("10.0.0.1:40001"))
            .vlan(ETH_P_8021Q, 7)
            .build();
        expect_zone(&st, "VLAN-tagged reply", &tagged, 1, true, &cpus);
        // Passive: a client to the listening port, by the hash of its address and port
        // (even ports included), the same as the Rust function.
        let mut seen = [false; 4];
        for sport in (41000u16..41040).step_by(2) {
            let client = sa(&format!("10.9.0.7:{sport}"));
            let pkt = PacketBuilder::tcp(client, sa("10.0.0.1:8080"))
                .syn()
                .build();
            let z = passive_zone(fold_addr(client.ip()), sport, 4) as usize;
            seen[z] = true;
            expect_zone(&st, &format!("client port {sport}"), &pkt, z, false, &cpus);
        }
        assert_eq!(seen, [true; 4], "even client ports use every zone");
        let client6 = sa("[2001:db8:9::7]:41001");
        let pkt = PacketBuilder::tcp(client6, sa("[2001:db8::1]:8080")).build();
        let z = passive_zone(fold_addr(client6.ip()), 41001, 4) as usize;
        expect_zone(&st, "v6 client", &pkt, z, false, &cpus);

        // Everything else passes, counted under its reason.
        let other = PacketBuilder::tcp(upstream, sa("10.0.0.1:22")).build();
        expect_pass(&st, "port 22", &other, |d| d.other_port);
        let udp = PacketBuilder::udp(upstream, sa("10.0.0.1:40001")).build();
        expect_pass(&st, "UDP", &udp, |d| d.not_tcp);
        let icmp =
            PacketBuilder::icmp("10.0.0.2".parse().unwrap(), "10.0.0.1".parse().unwrap()).build();
        expect_pass(&st, "ICMP", &icmp, |d| d.not_tcp);
        let frag = PacketBuilder::tcp(upstream, sa("10.0.0.1:40001"))
            .fragment(8, false)
            .build();
        expect_pass(&st, "later fragment", &frag, |d| d.not_tcp);
        let mut arp = PacketBuilder::tcp(upstream, sa("10.0.0.1:40001")).build();
        arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        expect_pass(&st, "ARP", &arp, |d| d.not_tcp);
        let full = PacketBuilder::tcp(upstream, sa("10.0.0.1:40001")).build();
        expect_pass(&st, "TCP header cut", &full[..14 + 20 + 10], |d| {
            d.malformed
        });
        expect_pass(&st, "IP header cut", &full[..14 + 12], |d| d.malformed);
        // (Shorter than an Ethernet header: BPF_PROG_TEST_RUN refuses such input.)
    });
    handle.join().expect("test thread");
}

#[test]
fn ports_without_a_zone_pass() {
    let all = cpus();
    // 3 zones: the mask is 3, and ports ending in binary 11 name no zone.
    let cpus: Vec<u32> = (0..3).map(|i| all[i % all.len()]).collect();
    let Some(st) = load(&settings(cpus)) else {
        return;
    };
    let pkt = PacketBuilder::tcp(sa("10.0.0.2:80"), sa("10.0.0.1:40003")).build();
    expect_pass(&st, "port & 3 == 3", &pkt, |d| d.no_zone);
    let below = PacketBuilder::tcp(sa("10.0.0.2:80"), sa("10.0.0.1:32767")).build();
    expect_pass(&st, "below the range", &below, |d| d.other_port);
}

#[test]
fn bad_settings_are_refused() {
    if !bpf() {
        return;
    }
    let mut s = settings(vec![0, 0, 0]);
    s.mask = 1;
    let e = Steer::load(&s).unwrap_err().to_string();
    assert!(e.contains("cannot encode 3 zones"), "{e}");
    let e = Steer::load(&settings(vec![])).unwrap_err().to_string();
    assert!(e.contains("1 to 240 zones"), "{e}");
    let e = Steer::load(&settings(vec![100_000]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("not a possible CPU"), "{e}");
}

#[test]
fn attach_to_veth_and_detach_on_drop() {
    if !bpf() {
        return;
    }
    let zone_cpus = vec![cpus()[0]];
    in_netns(move || {
        ip("link add rxst0 type veth peer name rxst1");
        ip("link set rxst0 up");
        ip("link set rxst1 up");
        let show = || {
            let out = std::process::Command::new("ip")
                .args(["-d", "link", "show", "dev", "rxst0"])
                .output()
                .unwrap();
            String::from_utf8_lossy(&out.stdout).into_owned()
        };
        let mut st = Steer::load(&settings(zone_cpus.clone())).unwrap();
        st.attach("rxst0", Mode::Native).unwrap();
        assert_eq!(st.attached(), Some(("rxst0", Mode::Native)));
        assert!(show().contains("xdp"), "{}", show());
        // One XDP program per device: a second one is refused with a clear error.
        let mut second = Steer::load(&settings(zone_cpus.clone())).unwrap();
        let e = second.attach("rxst0", Mode::Native).unwrap_err();
        assert!(matches!(e, Error::Busy { .. }), "{e}");
        drop(second);
        drop(st);
        assert!(!show().contains("prog/xdp"), "{}", show());
        let e = Steer::load(&settings(zone_cpus))
            .unwrap()
            .attach("nosuchdev0", Mode::Native)
            .unwrap_err();
        assert!(matches!(e, Error::NoDevice(_)), "{e}");
    });
}
