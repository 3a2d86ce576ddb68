//! The balancer and the decapsulation program through BPF_PROG_TEST_RUN: a frame in, the
//! verdict, the counters and the frame out, for every branch (IPv4/IPv6, TCP/UDP, services
//! and not, connection-table hits and misses, ICMP errors, fragments, truncated and
//! malformed headers), both encapsulations, and the round trip through the backend's half.
//! Needs root; skips otherwise (`ringx_kerneltest`).

mod common;

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};

use common::frames::{check_sent, flow, icmp_error, parse_sent, patch, run};
use common::{csum, ipa, mac_of, resolve, sa};
use ringx_lb::abi::{FlowKey, VipKey};
use ringx_lb::control::{self, Out};
use ringx_lb::{hash, vip_key, BackendSpec, Balancer, DecapReason, Encap, Proto, Reason, Service};
use ringx_xdp::packet::{Ext, PacketBuilder};

const GUE: u16 = 6080;
const VIP4: &str = "198.51.100.1:80";
const VIP6: &str = "[2001:db8:100::1]:443";
const VIP4_UDP: &str = "198.51.100.1:53";
const VIP4_X: &str = "198.51.100.2:80"; // an IPv4 service with an IPv6 backend

fn services() -> Vec<Service> {
    let b = |a: &str, w: u32| BackendSpec {
        addr: ipa(a),
        weight: w,
        quic_host: None,
    };
    vec![
        Service {
            addr: sa(VIP4),
            proto: Proto::Tcp,
            backends: vec![b("10.0.0.11", 1), b("10.0.0.12", 2), b("10.0.0.13", 1)],
        },
        Service {
            addr: sa(VIP4_UDP),
            proto: Proto::Udp,
            backends: vec![b("10.0.0.11", 1), b("10.0.0.13", 1)],
        },
        Service {
            addr: sa(VIP6),
            proto: Proto::Tcp,
            backends: vec![b("fd00::21", 1), b("fd00::22", 1)],
        },
        Service {
            addr: sa(VIP4_X),
            proto: Proto::Tcp,
            backends: vec![b("fd00::21", 1)],
        },
    ]
}

/// Where a new flow goes, from the ring in the map and the user-space copy of the hash.
struct Rings<'a> {
    lb: &'a Balancer,
    cache: HashMap<VipKey, Vec<u32>>,
}

impl Rings<'_> {
    fn backend_of(&mut self, svc: SocketAddr, proto: Proto, f: &FlowKey) -> IpAddr {
        let key = vip_key(svc, proto);
        let maps = self.lb.maps();
        let ring = self.cache.entry(key).or_insert_with(|| {
            let id = maps
                .vips()
                .unwrap()
                .into_iter()
                .find(|(k, _)| *k == key)
                .unwrap()
                .1
                .id;
            maps.read_ring(id).unwrap()
        });
        let idx = ring[hash::slot(f)];
        let b = maps.backend(idx).unwrap();
        ringx_lb::abi::addr_from(&b.addr, b.family)
    }
}

#[test]
fn verdicts_and_frames() {
    let Some((lb, _dir)) = common::load("table", Encap::Gue { port: GUE }) else {
        return;
    };
    control::apply(lb.maps(), &services(), &resolve).unwrap();
    let mut rings = Rings {
        lb: &lb,
        cache: HashMap::new(),
    };
    let enc = Encap::Gue { port: GUE };
    let c4 = sa("192.0.2.7:40000");
    let c6 = sa("[2001:db8:c::7]:40000");

    // -- forwarded: IPv4 TCP (new flow, then the table), UDP, IPv6, IPv4 over IPv6
    let syn = PacketBuilder::tcp(c4, sa(VIP4)).syn().build();
    let f = flow(c4, sa(VIP4), Proto::Tcp);
    let want = rings.backend_of(sa(VIP4), Proto::Tcp, &f);
    let (act, out) = run(&lb, "v4 syn", &syn, Reason::Fwd);
    assert_eq!(act, 3, "XDP_TX");
    check_sent("v4 syn", &out, &syn, want, enc);
    let entry = lb
        .maps()
        .flow(&f)
        .unwrap()
        .expect("the flow was remembered");
    assert_eq!(
        ringx_lb::abi::addr_from(&lb.maps().backend(entry.backend).unwrap().addr, 4),
        want
    );

    let udp = PacketBuilder::udp(c4, sa(VIP4_UDP))
        .payload(b"query")
        .build();
    let fu = flow(c4, sa(VIP4_UDP), Proto::Udp);
    let (_, out) = run(&lb, "v4 udp", &udp, Reason::Fwd);
    check_sent(
        "v4 udp",
        &out,
        &udp,
        rings.backend_of(sa(VIP4_UDP), Proto::Udp, &fu),
        enc,
    );

    let syn6 = PacketBuilder::tcp(c6, sa(VIP6)).syn().build();
    let f6 = flow(c6, sa(VIP6), Proto::Tcp);
    let (_, out) = run(&lb, "v6 syn", &syn6, Reason::Fwd);
    let s = check_sent(
        "v6 syn",
        &out,
        &syn6,
        rings.backend_of(sa(VIP6), Proto::Tcp, &f6),
        enc,
    );
    assert_eq!(out[12..14], [0x86, 0xdd]);
    assert!(s.udp.is_some());

    let x = PacketBuilder::tcp(c4, sa(VIP4_X)).syn().build();
    let (_, out) = run(&lb, "v4 service, v6 backend", &x, Reason::Fwd);
    check_sent("v4 service, v6 backend", &out, &x, ipa("fd00::21"), enc);

    // Ethernet padding after a short packet stays outside the outer lengths.
    let mut padded = PacketBuilder::tcp(sa("192.0.2.8:1"), sa(VIP4)).build();
    padded.resize(60, 0);
    let fp = flow(sa("192.0.2.8:1"), sa(VIP4), Proto::Tcp);
    let (_, out) = run(&lb, "padded", &padded, Reason::Fwd);
    check_sent(
        "padded",
        &out,
        &padded,
        rings.backend_of(sa(VIP4), Proto::Tcp, &fp),
        enc,
    );

    // IPv4 options travel inside, whole.
    let opts = PacketBuilder::tcp(sa("192.0.2.9:5"), sa(VIP4))
        .syn()
        .ip_options(&[1, 1, 1, 1])
        .build();
    let fo4 = flow(sa("192.0.2.9:5"), sa(VIP4), Proto::Tcp);
    let (_, out) = run(&lb, "v4 options", &opts, Reason::Fwd);
    check_sent(
        "v4 options",
        &out,
        &opts,
        rings.backend_of(sa(VIP4), Proto::Tcp, &fo4),
        enc,
    );

    // -- ICMP: errors about a service's flow go to the flow's backend, without a table entry
    let err = icmp_error(ipa("203.0.113.1"), sa(VIP4), c4);
    let (_, out) = run(&lb, "frag needed", &err, Reason::FwdIcmp);
    check_sent("frag needed", &out, &err, want, enc);
    let other_client = sa("192.0.2.99:5555");
    let fo = flow(other_client, sa(VIP4), Proto::Tcp);
    let err = icmp_error(ipa("203.0.113.1"), sa(VIP4), other_client);
    let (_, out) = run(
        &lb,
        "frag needed, flow not in the table",
        &err,
        Reason::FwdIcmp,
    );
    check_sent(
        "frag needed (ring)",
        &out,
        &err,
        rings.backend_of(sa(VIP4), Proto::Tcp, &fo),
        enc,
    );
    assert_eq!(
        lb.maps().flow(&fo).unwrap(),
        None,
        "an ICMP error adds no flow"
    );
    let err6 = icmp_error(ipa("2001:db8:ff::1"), sa(VIP6), c6);
    let (_, out) = run(&lb, "packet too big", &err6, Reason::FwdIcmp);
    check_sent(
        "packet too big",
        &out,
        &err6,
        rings.backend_of(sa(VIP6), Proto::Tcp, &f6),
        enc,
    );

    // -- passed untouched
    let mut arp = vec![0xff; 6];
    arp.extend_from_slice(&[2, 0, 0, 0, 0, 1, 0x08, 0x06]);
    arp.extend_from_slice(&[0, 1, 8, 0, 6, 4, 0, 1]);
    arp.extend_from_slice(&[0u8; 20]);
    let pass: Vec<(&str, Vec<u8>, Reason)> = vec![
        ("arp", arp, Reason::PassNotIp),
        (
            "vlan-tagged (not balanced: the outer frame could not keep the tag)",
            PacketBuilder::tcp(c4, sa(VIP4))
                .syn()
                .vlan(ringx_xdp::packet::ETH_P_8021Q, 7)
                .build(),
            Reason::PassNotIp,
        ),
        (
            "v4 not a service address",
            PacketBuilder::tcp(c4, sa("198.51.100.9:80")).syn().build(),
            Reason::PassNotVip,
        ),
        (
            "v4 service address, other port",
            PacketBuilder::tcp(c4, sa("198.51.100.1:81")).syn().build(),
            Reason::PassNotVip,
        ),
        (
            "v4 tcp to a udp service",
            PacketBuilder::tcp(c4, sa(VIP4_UDP)).syn().build(),
            Reason::PassNotVip,
        ),
        (
            "v4 udp to a tcp service",
            PacketBuilder::udp(c4, sa(VIP4)).build(),
            Reason::PassNotVip,
        ),
        (
            "v6 not a service",
            PacketBuilder::tcp(c6, sa("[2001:db8:100::2]:443")).build(),
            Reason::PassNotVip,
        ),
        (
            "v4 other protocol to a service address",
            PacketBuilder::other(c4.ip(), ipa("198.51.100.1"), 47)
                .payload(&[0; 8])
                .build(),
            Reason::PassNotVip,
        ),
        (
            "v4 echo request to a service address",
            PacketBuilder::icmp(c4.ip(), ipa("198.51.100.1")).build(),
            Reason::PassIcmp,
        ),
        (
            "v6 echo request to a service address",
            PacketBuilder::icmp(c6.ip(), ipa("2001:db8:100::1")).build(),
            Reason::PassIcmp,
        ),
        (
            "frag needed about a flow of no service",
            icmp_error(ipa("203.0.113.1"), sa("198.51.100.9:80"), c4),
            Reason::PassIcmp,
        ),
        (
            "v4 fragment to another address",
            PacketBuilder::udp(c4, sa("198.51.100.9:53"))
                .fragment(0, true)
                .build(),
            Reason::PassNotVip,
        ),
        (
            "v6 hop-by-hop to a service",
            PacketBuilder::tcp(c6, sa(VIP6))
                .ext(Ext::HopByHop { len8: 0 })
                .build(),
            Reason::PassIpv6Ext,
        ),
    ];
    for (name, pkt, want) in pass {
        let (_, out) = run(&lb, name, &pkt, want);
        assert_eq!(out, pkt, "{name}: passed untouched");
    }

    // -- dropped
    let syn_len = syn.len();
    let v4 = 14;
    let drop: Vec<(&str, Vec<u8>, Reason)> = vec![
        (
            "v4 first fragment to a service address",
            PacketBuilder::udp(c4, sa(VIP4_UDP))
                .fragment(0, true)
                .build(),
            Reason::DropFragment,
        ),
        (
            "v4 later fragment to a service address",
            PacketBuilder::other(c4.ip(), ipa("198.51.100.1"), 17)
                .fragment(100, false)
                .payload(&[0; 16])
                .build(),
            Reason::DropFragment,
        ),
        (
            "v6 fragment to a service address",
            PacketBuilder::udp(c6, sa("[2001:db8:100::1]:53"))
                .ext(Ext::Fragment {
                    offset: 0,
                    more: true,
                })
                .build(),
            Reason::DropFragment,
        ),
        (
            "v4 ihl 4",
            patch(syn.clone(), v4, &[0x44]),
            Reason::DropMalformed,
        ),
        (
            "v4 version 5",
            patch(syn.clone(), v4, &[0x55]),
            Reason::DropMalformed,
        ),
        (
            "v4 total length below the header",
            patch(syn.clone(), v4 + 2, &[0, 19]),
            Reason::DropMalformed,
        ),
        (
            "v4 total length beyond the frame",
            patch(
                syn.clone(),
                v4 + 2,
                &((syn_len - 14 + 1) as u16).to_be_bytes(),
            ),
            Reason::DropMalformed,
        ),
        (
            "tcp data offset 4",
            patch(syn.clone(), v4 + 20 + 12, &[4 << 4]),
            Reason::DropMalformed,
        ),
        (
            "tcp data offset beyond the segment",
            patch(syn.clone(), v4 + 20 + 12, &[6 << 4]),
            Reason::DropMalformed,
        ),
        (
            "v6 payload length beyond the frame",
            patch(syn6.clone(), 14 + 4, &[0xff, 0xff]),
            Reason::DropMalformed,
        ),
        (
            "v6 payload length 0",
            patch(syn6.clone(), 14 + 4, &[0, 0]),
            Reason::DropMalformed,
        ),
        (
            "v6 version 4",
            patch(syn6.clone(), 14, &[0x45]),
            Reason::DropMalformed,
        ),
        (
            "udp header cut by the IP length",
            {
                let p = PacketBuilder::udp(c4, sa(VIP4_UDP)).build();
                let p = patch(p, v4 + 2, &[0, 24]); // 20 + 4: half a UDP header
                patch(p.clone(), v4 + 10, &[0, 0])
            },
            Reason::DropMalformed,
        ),
        (
            "frag needed quoting a cut packet",
            {
                let e = icmp_error(ipa("203.0.113.1"), sa(VIP4), c4);
                let cut = e.len() - 6; // the quoted ports are cut
                let mut p = e[..cut].to_vec();
                let tot = (cut - 14) as u16;
                p[v4 + 2..v4 + 4].copy_from_slice(&tot.to_be_bytes());
                p
            },
            Reason::DropMalformed,
        ),
    ];
    for (name, pkt, want) in drop {
        run(&lb, name, &pkt, want);
    }
    // Every truncation of a SYN, IPv4 and IPv6, cut anywhere: never read past the end (the
    // verifier's guarantee), never forwarded, always counted as malformed.
    for (name, full) in [("v4", &syn), ("v6", &syn6)] {
        for len in 0..full.len() {
            let r = lb.test_run(&full[..len], 1);
            match r {
                // The kernel refuses frames shorter than an Ethernet header to test runs.
                Err(_) if len < 14 => continue,
                Err(e) => panic!("{name} cut at {len}: {e}"),
                Ok(r) => assert_eq!(r.retval, 1, "{name} cut at {len}: XDP_DROP"),
            }
        }
    }
}

#[test]
fn connection_table_hits_misses_and_counters() {
    let Some((lb, _dir)) = common::load("lru", Encap::Gue { port: GUE }) else {
        return;
    };
    control::apply(lb.maps(), &services(), &resolve).unwrap();
    let maps = lb.maps();
    let id = maps
        .vips()
        .unwrap()
        .into_iter()
        .find(|(k, _)| *k == vip_key(sa(VIP4), Proto::Tcp))
        .unwrap()
        .1
        .id;
    let c = sa("192.0.2.50:33333");
    let syn = PacketBuilder::tcp(c, sa(VIP4)).syn().build();
    let ack = PacketBuilder::tcp(c, sa(VIP4))
        .payload(b"GET / HTTP/1.1\r\n\r\n")
        .build();

    // A SYN: a miss and a new flow; then the flow's ACK: a hit.
    let v0 = maps.vip_counter(id).unwrap();
    let (_, out1) = run(&lb, "syn", &syn, Reason::Fwd);
    let (_, out2) = run(&lb, "ack", &ack, Reason::Fwd);
    let v1 = maps.vip_counter(id).unwrap();
    assert_eq!(v1.packets - v0.packets, 2);
    assert_eq!(v1.bytes - v0.bytes, (syn.len() + ack.len()) as u64);
    assert_eq!(
        (v1.new_flows - v0.new_flows, v1.lru_misses - v0.lru_misses),
        (1, 1)
    );
    let b1 = parse_sent(&out1).dst;
    assert_eq!(parse_sent(&out2).dst, b1);
    let idx = maps
        .flow(&flow(c, sa(VIP4), Proto::Tcp))
        .unwrap()
        .unwrap()
        .backend;
    let bc = maps.backend_counter(idx).unwrap();
    assert!(bc.packets >= 2 && bc.new_flows >= 1);

    // Drain the flow's backend: the flow stays (a hit), new flows avoid it.
    assert!(control::set_out(maps, b1, Out::Drain, true).unwrap());
    let (_, out) = run(&lb, "ack after drain", &ack, Reason::Fwd);
    assert_eq!(
        parse_sent(&out).dst,
        b1,
        "an established flow keeps its drained backend"
    );
    for port in 1000..1300u16 {
        let p = PacketBuilder::tcp(sa(&format!("192.0.2.51:{port}")), sa(VIP4))
            .syn()
            .build();
        let (_, out) = run(&lb, "new flow while drained", &p, Reason::Fwd);
        assert_ne!(
            parse_sent(&out).dst,
            b1,
            "a new flow went to a drained backend"
        );
    }
    assert!(control::set_out(maps, b1, Out::Drain, false).unwrap());

    // A mid-flow packet the table does not know: a miss, not a new flow, then remembered.
    let c2 = sa("192.0.2.52:44444");
    let mid = PacketBuilder::tcp(c2, sa(VIP4)).build();
    let v2 = maps.vip_counter(id).unwrap();
    run(&lb, "mid-flow miss", &mid, Reason::Fwd);
    run(&lb, "mid-flow hit", &mid, Reason::Fwd);
    let v3 = maps.vip_counter(id).unwrap();
    assert_eq!(
        (v3.new_flows - v2.new_flows, v3.lru_misses - v2.lru_misses),
        (0, 1)
    );

    // A backend removed from the configuration: its flows are misses and move.
    let mut svcs = services();
    let gone = b1;
    svcs[0].backends.retain(|b| b.addr != gone);
    svcs[1].backends.retain(|b| b.addr != gone);
    control::apply(maps, &svcs, &resolve).unwrap();
    let v4 = maps.vip_counter(id).unwrap();
    let (_, out) = run(&lb, "flow of a removed backend", &ack, Reason::Fwd);
    assert_ne!(parse_sent(&out).dst, gone);
    assert_eq!(maps.vip_counter(id).unwrap().lru_misses - v4.lru_misses, 1);

    // Every backend out: no backend.
    for b in &svcs[0].backends {
        control::set_out(maps, b.addr, Out::Down, true).unwrap();
    }
    let fresh = PacketBuilder::tcp(sa("192.0.2.53:1"), sa(VIP4))
        .syn()
        .build();
    run(&lb, "all down", &fresh, Reason::DropNoBackend);
}

#[test]
fn next_hops_redirect_mtu_and_unresolved() {
    let Some((lb, _dir)) = common::load("hop", Encap::Gue { port: GUE }) else {
        return;
    };
    let svc = |b: &str| Service {
        addr: sa(VIP4),
        proto: Proto::Tcp,
        backends: vec![BackendSpec {
            addr: ipa(b),
            weight: 1,
            quic_host: None,
        }],
    };
    let syn = PacketBuilder::tcp(sa("192.0.2.1:1234"), sa(VIP4))
        .syn()
        .build();
    // Another device: XDP_REDIRECT, with that device's MAC as the source.
    control::apply(lb.maps(), &[svc("10.0.0.11")], &|a| {
        Some(ringx_lb::NextHop {
            ifindex: 4242,
            mtu: 1500,
            dmac: mac_of(a),
            smac: [0x02, 0xaa, 0, 0, 0, 1],
        })
    })
    .unwrap();
    let (act, out) = run(&lb, "redirect", &syn, Reason::Fwd);
    assert_eq!(act, 4, "XDP_REDIRECT");
    assert_eq!(out[6..12], [0x02, 0xaa, 0, 0, 0, 1]);
    // The encapsulated frame would exceed the device's MTU.
    let small = (syn.len() - 14 + 28 - 1) as u16;
    control::apply(lb.maps(), &[svc("10.0.0.11")], &|a| {
        Some(ringx_lb::NextHop {
            ifindex: 0,
            mtu: small,
            dmac: mac_of(a),
            smac: [0; 6],
        })
    })
    .unwrap();
    lb.maps().clear_flows().unwrap();
    // With DF (PacketBuilder sets it): fragmentation needed goes back to the client.
    let (act, out) = run(&lb, "too big, DF", &syn, Reason::TxIcmpTooBig);
    assert_eq!(act, 3, "XDP_TX");
    assert_eq!(out.len(), 14 + 20 + 8 + 28);
    assert_eq!(out[0..6], syn[6..12], "back to where the frame came from");
    assert_eq!(out[6..12], syn[0..6]);
    assert_eq!(out[12..14], [0x08, 0x00]);
    let ip = &out[14..34];
    assert_eq!((ip[0], ip[9]), (0x45, 1), "IPv4, ICMP");
    assert_eq!(csum(ip), 0, "IP checksum");
    assert_eq!(u16::from_be_bytes([ip[2], ip[3]]), 56);
    assert_eq!(
        ip[12..16],
        syn[30..34],
        "from the address the client sent to"
    );
    assert_eq!(ip[16..20], syn[26..30], "to the client");
    let icmp = &out[34..];
    assert_eq!(
        (icmp[0], icmp[1]),
        (3, 4),
        "destination unreachable, fragmentation needed"
    );
    assert_eq!(csum(icmp), 0, "ICMP checksum");
    let mtu = u16::from_be_bytes([icmp[6], icmp[7]]);
    assert_eq!(mtu, small - 28, "the MTU left for the inner packet");
    assert_eq!(
        icmp[8..],
        syn[14..14 + 28],
        "quotes the client's header and 8 bytes"
    );
    // Without DF: dropped (counted), nothing to tell the client.
    let no_df = patch(syn.clone(), 14 + 6, &[0, 0]);
    run(&lb, "too big, no DF", &no_df, Reason::DropTooBig);
    // With IP options the quote would not fit the fixed reply: dropped.
    let opts = PacketBuilder::tcp(sa("192.0.2.1:1234"), sa(VIP4))
        .syn()
        .ip_options(&[1, 1, 1, 1])
        .build();
    run(&lb, "too big, options", &opts, Reason::DropTooBig);
    // No neighbour for the next hop.
    let a = control::apply(lb.maps(), &[svc("10.0.0.11")], &|_| None).unwrap();
    assert_eq!(a.unresolved, vec![ipa("10.0.0.11")]);
    run(&lb, "unresolved", &syn, Reason::DropNoRoute);
}

/// The balancer's frame through the backend's program gives back the client's frame.
fn round_trip(encap: Encap, tag: &str) {
    let Some((lb, _dir)) = common::load(tag, encap) else {
        return;
    };
    let gue = match encap {
        Encap::Gue { port } => port,
        Encap::Ipip => 0,
    };
    let (dec, _ddir) = common::load_decap(tag, gue).unwrap();
    control::apply(lb.maps(), &services(), &resolve).unwrap();
    let mut rings = Rings {
        lb: &lb,
        cache: HashMap::new(),
    };
    let cases = [
        (
            "v4 in v4",
            PacketBuilder::tcp(sa("192.0.2.1:999"), sa(VIP4))
                .syn()
                .build(),
            sa(VIP4),
            Proto::Tcp,
        ),
        (
            "udp v4 in v4",
            PacketBuilder::udp(sa("192.0.2.1:999"), sa(VIP4_UDP))
                .payload(b"x")
                .build(),
            sa(VIP4_UDP),
            Proto::Udp,
        ),
        (
            "v6 in v6",
            PacketBuilder::tcp(sa("[2001:db8::1]:999"), sa(VIP6))
                .syn()
                .build(),
            sa(VIP6),
            Proto::Tcp,
        ),
        (
            "v4 in v6",
            PacketBuilder::tcp(sa("192.0.2.1:999"), sa(VIP4_X))
                .syn()
                .build(),
            sa(VIP4_X),
            Proto::Tcp,
        ),
    ];
    for (name, pkt, svc, proto) in cases {
        let src: SocketAddr = {
            let ip = &pkt[14..];
            if ip[0] >> 4 == 4 {
                SocketAddr::new(IpAddr::from(<[u8; 4]>::try_from(&ip[12..16]).unwrap()), 999)
            } else {
                SocketAddr::new(IpAddr::from(<[u8; 16]>::try_from(&ip[8..24]).unwrap()), 999)
            }
        };
        let want = rings.backend_of(svc, proto, &flow(src, svc, proto));
        let (_, out) = run(&lb, name, &pkt, Reason::Fwd);
        check_sent(name, &out, &pkt, want, encap);
        let before = dec.stats().unwrap();
        let r = dec.test_run(&out, 1).unwrap();
        assert_eq!(r.retval, 2, "{name}: XDP_PASS");
        assert_eq!(
            r.data_out[12..],
            pkt[12..],
            "{name}: the client's packet, whole"
        );
        assert_eq!(
            r.data_out[..6],
            mac_of(want),
            "{name}: the frame's MACs stay"
        );
        let after = dec.stats().unwrap();
        let want_reason = match encap {
            Encap::Gue { .. } => DecapReason::DecapGue,
            Encap::Ipip => DecapReason::DecapIpip,
        };
        assert_eq!(
            after[want_reason as usize].1.packets - before[want_reason as usize].1.packets,
            1,
            "{name}"
        );
    }
}

#[test]
fn round_trip_gue() {
    round_trip(Encap::Gue { port: GUE }, "rtgue");
}

#[test]
fn round_trip_ipip() {
    round_trip(Encap::Ipip, "rtipip");
}

#[test]
fn decap_leaves_the_rest_alone() {
    let Some((dec, _d)) = common::load_decap("decap", GUE) else {
        return;
    };
    let reason = |pkt: &[u8]| {
        let before = dec.stats().unwrap();
        let r = dec.test_run(pkt, 1).unwrap();
        let after = dec.stats().unwrap();
        let got: Vec<DecapReason> = after
            .iter()
            .zip(&before)
            .filter(|(a, b)| a.1.packets != b.1.packets)
            .map(|(a, _)| a.0)
            .collect();
        assert_eq!(got.len(), 1, "{got:?}");
        (got[0], r.retval, r.data_out)
    };
    let plain = PacketBuilder::tcp(sa("192.0.2.1:1"), sa("10.0.0.11:80")).build();
    let other_udp = PacketBuilder::udp(sa("192.0.2.1:1"), sa("10.0.0.11:6081"))
        .payload(&[0x45; 20])
        .build();
    for (name, p) in [("tcp", &plain), ("udp to another port", &other_udp)] {
        let (r, act, out) = reason(p);
        assert_eq!((r, act), (DecapReason::PassOther, 2), "{name}");
        assert_eq!(&out, p, "{name}: untouched");
    }
    // GUE whose payload is not an IP packet, or is cut before its header ends.
    let junk = PacketBuilder::udp(sa("192.0.2.1:1"), sa("10.0.0.11:6080"))
        .payload(&[0x12; 40])
        .build();
    let short = PacketBuilder::udp(sa("192.0.2.1:1"), sa("10.0.0.11:6080"))
        .payload(&[0x45; 10])
        .build();
    let ipip_bad = PacketBuilder::other(ipa("10.255.0.1"), ipa("10.0.0.11"), 4)
        .payload(&[0x60; 40])
        .build();
    for (name, p) in [
        ("junk", &junk),
        ("short", &short),
        ("ipip with an IPv6 inside", &ipip_bad),
    ] {
        let (r, act, _) = reason(p);
        assert_eq!((r, act), (DecapReason::DropMalformed, 1), "{name}");
    }
}

#[test]
fn spread_follows_weights_and_removal_moves_only_its_flows() {
    let Some((lb, _dir)) = common::load("spread", Encap::Gue { port: GUE }) else {
        return;
    };
    let maps = lb.maps();
    control::apply(maps, &services()[..1], &resolve).unwrap();
    let n = 20_000u32;
    let pkt = |i: u32| {
        let src = format!("192.0.{}.{}:{}", 2 + i % 7, 1 + i % 250, 1024 + i % 60000);
        PacketBuilder::tcp(sa(&src), sa(VIP4)).syn().build()
    };
    let pass = |n: u32| -> Vec<IpAddr> {
        (0..n)
            .map(|i| {
                let r = lb.test_run(&pkt(i), 1).unwrap();
                assert_eq!(r.retval, 3);
                parse_sent(&r.data_out).dst
            })
            .collect()
    };
    let first = pass(n);
    let mut count: HashMap<IpAddr, u32> = HashMap::new();
    for b in &first {
        *count.entry(*b).or_default() += 1;
    }
    for (b, w) in [("10.0.0.11", 0.25), ("10.0.0.12", 0.5), ("10.0.0.13", 0.25)] {
        let share = f64::from(count[&ipa(b)]) / f64::from(n);
        assert!(
            (share - w).abs() < 0.05 * w,
            "{b}: {share:.4} of flows, weight share {w}"
        );
    }
    // Down (health) or drained: only its flows move, even for flows the table forgot.
    maps.clear_flows().unwrap();
    let out = ipa("10.0.0.12");
    control::set_out(maps, out, Out::Down, true).unwrap();
    let second = pass(n);
    for (a, b) in first.iter().zip(&second) {
        if *a == out {
            assert_ne!(*b, out);
        } else {
            assert_eq!(a, b, "a flow of a backend that stayed moved");
        }
    }
    // Back up: the same table as before.
    control::set_out(maps, out, Out::Down, false).unwrap();
    maps.clear_flows().unwrap();
    assert_eq!(pass(n), first);
    // Removed from the configuration: the table is rebuilt without it (Maglev): its flows
    // move, and only a few of the others' new flows (established ones keep theirs).
    let mut svc = services()[..1].to_vec();
    svc[0].backends.retain(|b| b.addr != out);
    control::apply(maps, &svc, &resolve).unwrap();
    maps.clear_flows().unwrap();
    let third = pass(n);
    let stayed: Vec<_> = first
        .iter()
        .zip(&third)
        .filter(|(a, _)| **a != out)
        .collect();
    let moved = stayed.iter().filter(|(a, b)| a != b).count();
    assert!(
        moved * 100 < stayed.len() * 5,
        "{moved} of {} flows of the remaining backends moved",
        stayed.len()
    );
    assert!(third.iter().all(|b| *b != out));
}

#[test]
fn a_removed_service_leaves_no_forwarding_behind() {
    let Some((lb, _dir)) = common::load("gone", Encap::Gue { port: GUE }) else {
        return;
    };
    let maps = lb.maps();
    let svcs = services();
    control::apply(maps, &svcs[..1], &resolve).unwrap();
    let c = sa("192.0.2.77:5000");
    let ack = PacketBuilder::tcp(c, sa(VIP4)).build();
    run(&lb, "before", &ack, Reason::Fwd);
    assert!(maps.flow(&flow(c, sa(VIP4), Proto::Tcp)).unwrap().is_some());
    // The service goes; its flow's table entry stays until evicted, and must not forward.
    control::apply(maps, &[], &resolve).unwrap();
    let (_, out) = run(&lb, "service removed", &ack, Reason::PassNotVip);
    assert_eq!(out, ack);
    // Another service takes the freed id: the old flow's entry names that id, and still
    // must not forward a packet of the old service.
    control::apply(maps, &svcs[2..3], &resolve).unwrap();
    let id = maps.vips().unwrap()[0].1.id;
    assert_eq!(
        maps.flow(&flow(c, sa(VIP4), Proto::Tcp))
            .unwrap()
            .map(|f| f.vip),
        Some(id),
        "the stale entry names the reused id"
    );
    let (_, out) = run(&lb, "id reused", &ack, Reason::PassNotVip);
    assert_eq!(out, ack);
}
