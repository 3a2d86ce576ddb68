//! QUIC routed by the host its connection ID names (`lb_quic_hosts`), through
//! BPF_PROG_TEST_RUN: a short-header packet (or a client's Handshake) that names a backend's
//! `quic_host` goes to that backend whatever its addresses and ports, on the general path and
//! the short one (fast4) alike; unknown hosts, IDs of another layout, Initials, plain UDP
//! services and down backends go by the connection table and the ring. Needs root; skips
//! otherwise (`ringx_kerneltest`).

mod common;

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};

use common::frames::{check_sent, flow, parse_sent, run};
use common::{ipa, resolve, sa};
use ringx_lb::control::{self, Out};
use ringx_lb::{hash, vip_key, BackendSpec, Balancer, Encap, Proto, Reason, Service};
use ringx_xdp::packet::PacketBuilder;

const GUE: u16 = 6080;
const VIP_Q: &str = "198.51.100.1:443";
const VIP_Q6: &str = "[2001:db8:100::1]:443";
const VIP_DNS: &str = "198.51.100.1:53"; // UDP without QUIC hosts

/// The backends of the QUIC services: (address, quic_host).
const HOSTS4: [(&str, u8); 3] = [("10.0.0.11", 1), ("10.0.0.12", 7), ("10.0.0.13", 9)];
const HOSTS6: [(&str, u8); 2] = [("fd00::21", 7), ("fd00::22", 8)];

fn services(with_hosts: bool) -> Vec<Service> {
    let backends = |list: &[(&str, u8)]| {
        list.iter()
            .map(|(a, h)| BackendSpec {
                addr: ipa(a),
                weight: 1,
                quic_host: with_hosts.then_some(*h),
            })
            .collect()
    };
    vec![
        Service {
            addr: sa(VIP_Q),
            proto: Proto::Udp,
            backends: backends(&HOSTS4),
        },
        Service {
            addr: sa(VIP_Q6),
            proto: Proto::Udp,
            backends: backends(&HOSTS6),
        },
        Service {
            addr: sa(VIP_DNS),
            proto: Proto::Udp,
            backends: vec![
                BackendSpec {
                    addr: ipa("10.0.0.11"),
                    weight: 1,
                    quic_host: None,
                },
                BackendSpec {
                    addr: ipa("10.0.0.12"),
                    weight: 1,
                    quic_host: None,
                },
            ],
        },
    ]
}

/// A ringx connection ID (cid.rs): config rotation `rot` in the top bits of byte 0, the
/// host in byte 1, zone 3 in byte 2, a nonce.
fn cid(rot: u8, host: u8) -> [u8; 12] {
    [
        rot << 5 | 0x0a,
        host,
        3,
        0x5e,
        0xa1,
        0x77,
        0x10,
        0x42,
        0x99,
        0x3c,
        0xd0,
        0x01,
    ]
}

/// A short-header (1-RTT) packet to the ID `dcid`, with some protected payload.
fn short(dcid: &[u8]) -> Vec<u8> {
    let mut p = vec![0x40 | 0x01];
    p.extend_from_slice(dcid);
    p.extend_from_slice(&[0xab; 40]);
    p
}

/// A long-header packet of `ty` (0 Initial, 1 0-RTT, 2 Handshake) to `dcid`.
fn long(ty: u8, dcid: &[u8]) -> Vec<u8> {
    let mut p = vec![0xc0 | ty << 4, 0, 0, 0, 1, dcid.len() as u8];
    p.extend_from_slice(dcid);
    p.push(8);
    p.extend_from_slice(&[0x77; 8]);
    p.extend_from_slice(&[0xcd; 60]);
    p
}

fn udp(client: SocketAddr, vip: &str, payload: &[u8]) -> Vec<u8> {
    PacketBuilder::udp(client, sa(vip)).payload(payload).build()
}

/// Where the ring sends `client`'s flow to `vip` (the user-space copy of the hash), the
/// rings read once per state of the backends.
struct Rings<'a> {
    lb: &'a Balancer,
    cache: HashMap<String, Vec<u32>>,
}

impl Rings<'_> {
    fn new(lb: &Balancer) -> Rings<'_> {
        Rings {
            lb,
            cache: HashMap::new(),
        }
    }

    fn backend(&mut self, client: SocketAddr, vip: &str) -> IpAddr {
        let maps = self.lb.maps();
        let ring = self.cache.entry(vip.to_string()).or_insert_with(|| {
            let key = vip_key(sa(vip), Proto::Udp);
            let (_, v) = maps
                .vips()
                .unwrap()
                .into_iter()
                .find(|(k, _)| *k == key)
                .unwrap();
            maps.read_ring(v.id).unwrap()
        });
        let b = maps
            .backend(ring[hash::slot(&flow(client, sa(vip), Proto::Udp))])
            .unwrap();
        ringx_lb::abi::addr_from(&b.addr, b.family)
    }
}

/// A client (port `port` of 192.0.2.x, or of 2001:db8:c::x for the IPv6 service).
fn client(vip: &str, port: u16) -> SocketAddr {
    if sa(vip).is_ipv4() {
        sa(&format!("192.0.2.{}:{port}", port % 200 + 1))
    } else {
        sa(&format!("[2001:db8:c::{:x}]:{port}", port % 200 + 1))
    }
}

/// Runs `pkt` from `c` and returns the backend it went to (checking the frame sent).
fn sent_to(lb: &Balancer, name: &str, c: SocketAddr, vip: &str, pl: &[u8], r: Reason) -> IpAddr {
    let pkt = udp(c, vip, pl);
    let (_, out) = run(lb, name, &pkt, r);
    let to = parse_sent(&out).dst;
    check_sent(name, &out, &pkt, to, Encap::Gue { port: GUE });
    to
}

#[test]
fn a_short_header_goes_to_the_host_its_id_names_whatever_the_addresses() {
    let Some((lb, _dir)) = common::load("quic-host", Encap::Gue { port: GUE }) else {
        return;
    };
    control::apply(lb.maps(), &services(true), &resolve).unwrap();
    let mut rings = Rings::new(&lb);
    for (vip, host7) in [(VIP_Q, ipa("10.0.0.12")), (VIP_Q6, ipa("fd00::21"))] {
        let mut elsewhere = 0;
        for port in 2000..2100u16 {
            let c = client(vip, port);
            if rings.backend(c, vip) != host7 {
                elsewhere += 1;
            }
            // A new path: the general path, counted as routed by the ID; then the same
            // path again from the connection table (fast4 for IPv4), to the same backend.
            let pl = short(&cid(0, 7));
            let name = format!("{vip} host 7 from {c}");
            assert_eq!(sent_to(&lb, &name, c, vip, &pl, Reason::FwdQuic), host7);
            assert_eq!(sent_to(&lb, &name, c, vip, &pl, Reason::Fwd), host7);
        }
        assert!(
            elsewhere > 30,
            "{vip}: the ring would have sent only {elsewhere} of 100 paths elsewhere"
        );
    }
    // The counters: routed by the ID, not new flows from the ring.
    let vips = lb.maps().vips().unwrap();
    let id = vips
        .iter()
        .find(|(k, _)| *k == vip_key(sa(VIP_Q), Proto::Udp))
        .unwrap()
        .1
        .id;
    let v = lb.maps().vip_counter(id).unwrap();
    assert_eq!((v.packets, v.lru_misses, v.new_flows), (200, 100, 0));
}

#[test]
fn the_id_wins_over_a_table_entry_with_another_backend() {
    let Some((lb, _dir)) = common::load("quic-table", Encap::Gue { port: GUE }) else {
        return;
    };
    control::apply(lb.maps(), &services(true), &resolve).unwrap();
    let mut rings = Rings::new(&lb);
    let host7 = ipa("10.0.0.12");
    // A path the ring gives another backend: a connection's Initial from it goes there.
    let c = (3000..3200u16)
        .map(|p| client(VIP_Q, p))
        .find(|c| rings.backend(*c, VIP_Q) != host7)
        .expect("a path the ring sends elsewhere");
    let first = rings.backend(c, VIP_Q);
    let initial = long(0, &cid(0, 7)); // a client-chosen ID that happens to look like ours
    assert_eq!(
        sent_to(&lb, "initial", c, VIP_Q, &initial, Reason::Fwd),
        first,
        "an Initial's ID is the client's: it goes by the ring"
    );
    assert_eq!(
        sent_to(&lb, "0-rtt", c, VIP_Q, &long(1, &cid(0, 7)), Reason::Fwd),
        first,
        "so does 0-RTT's"
    );
    // Another connection now has the path (a client that moved onto it): its packets name
    // host 7, and fast4 hands them to the general path, where the ID wins.
    let pl = short(&cid(0, 7));
    assert_eq!(
        sent_to(&lb, "moved in", c, VIP_Q, &pl, Reason::FwdQuic),
        host7
    );
    let e = lb.maps().flow(&flow(c, sa(VIP_Q), Proto::Udp)).unwrap();
    let b = lb.maps().backend(e.expect("remembered").backend).unwrap();
    assert_eq!(ringx_lb::abi::addr_from(&b.addr, b.family), host7);
    assert_eq!(
        sent_to(&lb, "then fast4", c, VIP_Q, &pl, Reason::Fwd),
        host7
    );
    // A Handshake packet carries the ID the server chose: routed by it too.
    let c2 = (3200..3400u16)
        .map(|p| client(VIP_Q, p))
        .find(|c| rings.backend(*c, VIP_Q) != host7)
        .unwrap();
    let hs = long(2, &cid(0, 7));
    assert_eq!(
        sent_to(&lb, "handshake", c2, VIP_Q, &hs, Reason::FwdQuic),
        host7
    );
}

#[test]
fn what_names_no_host_goes_by_the_ring() {
    let Some((lb, _dir)) = common::load("quic-ring", Encap::Gue { port: GUE }) else {
        return;
    };
    control::apply(lb.maps(), &services(true), &resolve).unwrap();
    let mut rings = Rings::new(&lb);
    let host7 = ipa("10.0.0.12");
    let cases: [(&str, &str, Vec<u8>); 7] = [
        ("unknown host 200", VIP_Q, short(&cid(0, 200))),
        ("host 0 (a host alone)", VIP_Q, short(&cid(0, 0))),
        ("another config rotation", VIP_Q, short(&cid(0b111, 7))),
        ("an Initial", VIP_Q, long(0, &cid(0, 7))),
        (
            "a Handshake with an 8-byte ID",
            VIP_Q,
            long(2, &cid(0, 7)[..8]),
        ),
        ("a service without QUIC hosts", VIP_DNS, short(&cid(0, 7))),
        ("shorter than an ID", VIP_Q, vec![0x41, 0x0a, 7]),
    ];
    for (what, vip, pl) in &cases {
        let mut elsewhere = 0;
        for port in 4000..4060u16 {
            let c = client(vip, port);
            let want = rings.backend(c, vip);
            elsewhere += usize::from(want != host7);
            let name = format!("{what} from {c}");
            assert_eq!(sent_to(&lb, &name, c, vip, pl, Reason::Fwd), want, "{name}");
        }
        assert!(
            elsewhere > 10,
            "{what}: the ring chose host 7's backend too often"
        );
    }
}

#[test]
fn a_down_backend_goes_by_the_ring_a_drained_one_keeps_its_connections() {
    let Some((lb, _dir)) = common::load("quic-out", Encap::Gue { port: GUE }) else {
        return;
    };
    let maps = lb.maps();
    control::apply(maps, &services(true), &resolve).unwrap();
    let host7 = ipa("10.0.0.12");
    let pl = short(&cid(0, 7));

    // Drained: no new flows from the ring, but a connection it holds stays on it wherever
    // the client moves (drain keeps established flows).
    assert!(control::set_out(maps, host7, Out::Drain, true).unwrap());
    for port in 5000..5050u16 {
        let c = client(VIP_Q, port);
        assert_eq!(
            sent_to(&lb, "drained", c, VIP_Q, &pl, Reason::FwdQuic),
            host7
        );
    }
    assert!(control::set_out(maps, host7, Out::Drain, false).unwrap());

    // Down: its connections are gone; a new path goes by the ring, which avoids it.
    assert!(control::set_out(maps, host7, Out::Down, true).unwrap());
    let mut rings = Rings::new(&lb); // rebuilt without it
    for port in 5100..5200u16 {
        let c = client(VIP_Q, port);
        let to = sent_to(&lb, "down", c, VIP_Q, &pl, Reason::Fwd);
        assert_eq!(to, rings.backend(c, VIP_Q));
        assert_ne!(to, host7, "a new path went to a down backend");
    }
    // Up again: routed by the ID again, also on a path the table sent elsewhere meanwhile.
    assert!(control::set_out(maps, host7, Out::Down, false).unwrap());
    let c = client(VIP_Q, 5100);
    assert_eq!(sent_to(&lb, "up", c, VIP_Q, &pl, Reason::FwdQuic), host7);

    // The hosts taken out of the configuration: the ring again, and the map emptied.
    control::apply(maps, &services(false), &resolve).unwrap();
    let mut rings = Rings::new(&lb);
    let c = client(VIP_Q, 5300);
    let to = sent_to(&lb, "no hosts", c, VIP_Q, &pl, Reason::Fwd);
    assert_eq!(to, rings.backend(c, VIP_Q));
    for (k, v) in maps.vips().unwrap() {
        assert!(
            maps.quic_hosts(v.id).unwrap().iter().all(|h| h.is_none()),
            "{k:?}: hosts left"
        );
    }
}

#[test]
fn hosts_are_checked_before_anything_is_written() {
    let Some((lb, _dir)) = common::load("quic-check", Encap::Gue { port: GUE }) else {
        return;
    };
    let mut dup = services(true);
    dup[0].backends[1].quic_host = Some(1);
    let e = control::apply(lb.maps(), &dup, &resolve).unwrap_err();
    assert!(e.to_string().contains("both have QUIC host 1"), "{e}");
    let mut tcp = services(true);
    tcp[0].proto = Proto::Tcp;
    let e = control::apply(lb.maps(), &tcp, &resolve).unwrap_err();
    assert!(e.to_string().contains("on UDP services"), "{e}");
    assert!(lb.maps().vips().unwrap().is_empty(), "nothing applied");
}
