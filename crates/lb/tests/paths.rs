//! The balancer's two paths through BPF_PROG_TEST_RUN: the short one an established IPv4
//! flow takes (`fast4` in bpf/ringx_lb.bpf.c) gives the same frame and counters as the
//! general one, and hands every case it does not decide to it; and the answers to packets too
//! big once encapsulated, ICMPv6 packet-too-big beside IPv4's fragmentation-needed, and their
//! rate limit. Needs root; skips otherwise (`ringx_kerneltest`).

mod common;

use std::net::SocketAddr;

use common::frames::{check_sent, flow, parse_sent, patch, run};
use common::{csum, ipa, mac_of, resolve, sa};
use ringx_lb::control::{self, Out};
use ringx_lb::{vip_key, BackendSpec, Balancer, Encap, NextHop, Proto, Reason, Service};
use ringx_xdp::packet::PacketBuilder;

const VIP4: &str = "198.51.100.1:80";
const VIP4_UDP: &str = "198.51.100.1:53";
const VIP4_X: &str = "198.51.100.2:80"; // an IPv6 backend
const VIP6: &str = "[2001:db8:100::1]:443";
const VIP6_X: &str = "[2001:db8:100::2]:443"; // an IPv4 backend

fn b(a: &str) -> BackendSpec {
    BackendSpec {
        addr: ipa(a),
        weight: 1,
        quic_host: None,
    }
}

fn services() -> Vec<Service> {
    let s = |vip: &str, proto, backends| Service {
        addr: sa(vip),
        proto,
        backends,
    };
    vec![
        s(VIP4, Proto::Tcp, vec![b("10.0.0.11")]),
        s(VIP4_UDP, Proto::Udp, vec![b("10.0.0.12")]),
        s(VIP4_X, Proto::Tcp, vec![b("fd00::21")]),
        s(VIP6, Proto::Tcp, vec![b("fd00::22")]),
        s(VIP6_X, Proto::Tcp, vec![b("10.0.0.13")]),
    ]
}

fn vip_id(lb: &Balancer, vip: &str, proto: Proto) -> u32 {
    let key = vip_key(sa(vip), proto);
    lb.maps()
        .vips()
        .unwrap()
        .into_iter()
        .find(|(k, _)| *k == key)
        .unwrap()
        .1
        .id
}

/// Next hops as `resolve`, with `mtu` towards every backend.
fn with_mtu(mtu: u16) -> impl Fn(std::net::IpAddr) -> Option<NextHop> {
    move |a| {
        Some(NextHop {
            mtu,
            ..resolve(a).unwrap()
        })
    }
}

/// An established flow's packets, both encapsulations: the frame the short path sends is
/// the one the general path sent for the flow's first packet (same outer headers, source
/// port from the hash the entry keeps), the counters the same.
fn same_frames(encap: Encap, tag: &str) {
    let Some((lb, _dir)) = common::load(tag, encap) else {
        return;
    };
    control::apply(lb.maps(), &services(), &resolve).unwrap();
    let maps = lb.maps();
    let id = vip_id(&lb, VIP4, Proto::Tcp);
    for (i, payload) in [&b""[..], b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"]
        .iter()
        .enumerate()
    {
        let c = sa(&format!("192.0.2.40:{}", 2000 + i));
        let syn = PacketBuilder::tcp(c, sa(VIP4)).syn().build();
        let ack = PacketBuilder::tcp(c, sa(VIP4)).payload(payload).build();
        let v0 = maps.vip_counter(id).unwrap();
        let (_, first) = run(&lb, "syn (general path: a miss)", &syn, Reason::Fwd);
        let entry = maps.flow(&flow(c, sa(VIP4), Proto::Tcp)).unwrap().unwrap();
        let bc0 = maps.backend_counter(entry.backend).unwrap();
        let (act, out) = run(&lb, "ack (an established flow)", &ack, Reason::Fwd);
        assert_eq!(act, 3, "XDP_TX");
        let v1 = maps.vip_counter(id).unwrap();
        let bc1 = maps.backend_counter(entry.backend).unwrap();
        assert_eq!(
            (v1.packets - v0.packets, v1.bytes - v0.bytes),
            (2, (syn.len() + ack.len()) as u64)
        );
        assert_eq!(
            (v1.new_flows - v0.new_flows, v1.lru_misses - v0.lru_misses),
            (1, 1),
            "the hit is neither a new flow nor a miss"
        );
        assert_eq!(
            (bc1.packets - bc0.packets, bc1.bytes - bc0.bytes),
            (1, ack.len() as u64)
        );
        let s1 = check_sent("syn", &first, &syn, ipa("10.0.0.11"), encap);
        let s2 = check_sent("ack", &out, &ack, ipa("10.0.0.11"), encap);
        assert_eq!(s2.udp, s1.udp, "the same GUE source port (the kept hash)");
        // Outer headers byte for byte, but for the lengths and the checksum.
        let hdr = 14 + 20 + if s1.udp.is_some() { 8 } else { 0 };
        let mask = |f: &[u8]| {
            let mut h = f[..hdr].to_vec();
            for at in [16, 17, 24, 25, 38, 39] {
                if at < hdr {
                    h[at] = 0;
                }
            }
            h
        };
        assert_eq!(mask(&out), mask(&first));
        // The IPv4 ToS travels to the outer header on both paths.
        let tos = patch(ack.clone(), 15, &[0xb8]);
        let tos = {
            let mut t = tos;
            let c = csum(&{
                let mut h = t[14..34].to_vec();
                h[10] = 0;
                h[11] = 0;
                h
            });
            t[24..26].copy_from_slice(&c.to_be_bytes());
            t
        };
        let (_, out) = run(&lb, "ack with a ToS", &tos, Reason::Fwd);
        assert_eq!(out[15], 0xb8, "outer ToS");
        check_sent("ack with a ToS", &out, &tos, ipa("10.0.0.11"), encap);
    }
    // UDP: a flow's second datagram.
    let c = sa("192.0.2.41:5353");
    let q = PacketBuilder::udp(c, sa(VIP4_UDP))
        .payload(&[7u8; 40])
        .build();
    let (_, a) = run(&lb, "udp first", &q, Reason::Fwd);
    let (_, b2) = run(&lb, "udp second", &q, Reason::Fwd);
    assert_eq!(a, b2);
    check_sent("udp second", &b2, &q, ipa("10.0.0.12"), encap);
}

#[test]
fn established_frames_match_the_general_path_gue() {
    same_frames(Encap::Gue { port: 6080 }, "same-gue");
}

#[test]
fn established_frames_match_the_general_path_ipip() {
    same_frames(Encap::Ipip, "same-ipip");
}

/// Every case the short path leaves to the general one gets the general path's verdict.
#[test]
fn established_flows_the_general_path_decides() {
    let Some((lb, _dir)) = common::load("handoff", Encap::Gue { port: 6080 }) else {
        return;
    };
    let maps = lb.maps();
    control::apply(maps, &services(), &resolve).unwrap();
    let c = sa("192.0.2.60:3000");
    let syn = PacketBuilder::tcp(c, sa(VIP4)).syn().build();
    let ack = PacketBuilder::tcp(c, sa(VIP4)).payload(b"x").build();
    run(&lb, "syn", &syn, Reason::Fwd);
    run(&lb, "ack", &ack, Reason::Fwd);

    // An IPv6 backend for an IPv4 service: the general path's outer IPv6.
    let cx = sa("192.0.2.61:3000");
    let syn_x = PacketBuilder::tcp(cx, sa(VIP4_X)).syn().build();
    let ack_x = PacketBuilder::tcp(cx, sa(VIP4_X)).payload(b"x").build();
    run(&lb, "syn, v6 backend", &syn_x, Reason::Fwd);
    let (_, out) = run(&lb, "ack, v6 backend", &ack_x, Reason::Fwd);
    check_sent(
        "ack, v6 backend",
        &out,
        &ack_x,
        ipa("fd00::21"),
        Encap::Gue { port: 6080 },
    );

    // Malformed headers of an established flow: dropped, as on the general path.
    let v4 = 14;
    for (name, p) in [
        (
            "tcp data offset 4",
            patch(ack.clone(), v4 + 20 + 12, &[4 << 4]),
        ),
        (
            "tcp data offset beyond the segment",
            patch(ack.clone(), v4 + 20 + 12, &[15 << 4]),
        ),
        (
            "total length beyond the frame",
            patch(
                ack.clone(),
                v4 + 2,
                &((ack.len() - 14 + 1) as u16).to_be_bytes(),
            ),
        ),
    ] {
        run(&lb, name, &p, Reason::DropMalformed);
    }
    // A fragment of an established flow: the general path drops it.
    let frag = PacketBuilder::tcp(c, sa(VIP4))
        .payload(b"x")
        .fragment(0, true)
        .build();
    run(&lb, "fragment", &frag, Reason::DropFragment);
    // IP options: the general path forwards it whole.
    let opts = PacketBuilder::tcp(c, sa(VIP4))
        .payload(b"x")
        .ip_options(&[1, 1, 1, 1])
        .build();
    let (_, out) = run(&lb, "options", &opts, Reason::Fwd);
    check_sent(
        "options",
        &out,
        &opts,
        ipa("10.0.0.11"),
        Encap::Gue { port: 6080 },
    );
    // A UDP datagram without payload (42 bytes: the shortest the short path takes).
    let cu = sa("192.0.2.62:53");
    let tiny = PacketBuilder::udp(cu, sa(VIP4_UDP)).build();
    run(&lb, "tiny udp, first", &tiny, Reason::Fwd);
    let (_, out) = run(&lb, "tiny udp, again", &tiny, Reason::Fwd);
    check_sent(
        "tiny udp",
        &out,
        &tiny,
        ipa("10.0.0.12"),
        Encap::Gue { port: 6080 },
    );

    // Over the MTU once encapsulated, with DF: fragmentation-needed from the balancer.
    let big = PacketBuilder::tcp(c, sa(VIP4))
        .payload(&[0u8; 1000])
        .build();
    let small = (big.len() - 14 + 28 - 1) as u16;
    control::apply(maps, &services(), &with_mtu(small)).unwrap();
    let (act, out) = run(&lb, "established, too big", &big, Reason::TxIcmpTooBig);
    assert_eq!(act, 3);
    assert_eq!((out[34], out[35]), (3, 4), "fragmentation needed");
    assert_eq!(u16::from_be_bytes([out[40], out[41]]), small - 28);
    control::apply(maps, &services(), &resolve).unwrap();

    // The next hop unresolved: dropped as the general path drops it.
    control::apply(maps, &services(), &|_| None).unwrap();
    run(&lb, "established, no next hop", &ack, Reason::DropNoRoute);
    control::apply(maps, &services(), &resolve).unwrap();

    // Its backend taken out of the configuration: a miss, the ring's backend.
    let mut two = services();
    two[0].backends = vec![b("10.0.0.14")];
    control::apply(maps, &two, &resolve).unwrap();
    let id = vip_id(&lb, VIP4, Proto::Tcp);
    let m0 = maps.vip_counter(id).unwrap().lru_misses;
    let (_, out) = run(&lb, "backend removed", &ack, Reason::Fwd);
    assert_eq!(parse_sent(&out).dst, ipa("10.0.0.14"));
    assert_eq!(maps.vip_counter(id).unwrap().lru_misses - m0, 1);

    // Drained or down: established flows keep their backend on the short path too.
    control::set_out(maps, ipa("10.0.0.14"), Out::Drain, true).unwrap();
    let (_, out) = run(&lb, "drained", &ack, Reason::Fwd);
    assert_eq!(parse_sent(&out).dst, ipa("10.0.0.14"));
    control::set_out(maps, ipa("10.0.0.14"), Out::Drain, false).unwrap();

    // Its service removed (its backend stays, serving another): the table's entry no longer
    // applies, the packet passes.
    let mut rest: Vec<Service> = services().into_iter().skip(1).collect();
    rest[0].backends.push(b("10.0.0.14"));
    control::apply(maps, &rest, &resolve).unwrap();
    let (act, out) = run(&lb, "service removed", &ack, Reason::PassNotVip);
    assert_eq!((act, out), (2, ack.clone()));

    // Its service id given to another service with the same port and backend: the old
    // entry is still not that service's (the address differs).
    let other = Service {
        addr: sa("198.51.100.9:80"),
        proto: Proto::Tcp,
        backends: vec![b("10.0.0.14")],
    };
    let mut again = vec![other];
    again.extend(rest);
    control::apply(maps, &again, &resolve).unwrap();
    assert_eq!(
        vip_id(&lb, "198.51.100.9:80", Proto::Tcp),
        id,
        "the id was reused"
    );
    run(&lb, "id reused", &ack, Reason::PassNotVip);
}

/// The ICMPv6 packet-too-big a client gets for an IPv6 packet too big once encapsulated.
fn check_ptb6(out: &[u8], orig: &[u8], vip: SocketAddr, client: SocketAddr, mtu: u32, q: usize) {
    assert_eq!(
        out.len(),
        14 + 40 + 8 + q,
        "the frame: headers and a {q}-byte quote"
    );
    assert_eq!(out[0..6], orig[6..12], "back to where the frame came from");
    assert_eq!(out[6..12], orig[0..6]);
    assert_eq!(out[12..14], [0x86, 0xdd]);
    let ip = &out[14..54];
    assert_eq!(ip[0] >> 4, 6);
    assert_eq!(
        u16::from_be_bytes([ip[4], ip[5]]) as usize,
        8 + q,
        "payload length"
    );
    assert_eq!((ip[6], ip[7]), (58, 64), "ICMPv6, hop limit 64");
    let (src, dst) = match (vip.ip(), client.ip()) {
        (std::net::IpAddr::V6(v), std::net::IpAddr::V6(c)) => (v.octets(), c.octets()),
        _ => unreachable!(),
    };
    assert_eq!(ip[8..24], src, "from the address the client sent to");
    assert_eq!(ip[24..40], dst, "to the client");
    let icmp = &out[54..];
    assert_eq!((icmp[0], icmp[1]), (2, 0), "packet too big");
    assert_eq!(
        u32::from_be_bytes(icmp[4..8].try_into().unwrap()),
        mtu,
        "the MTU left for the inner packet"
    );
    assert_eq!(
        icmp[8..],
        orig[14..14 + q],
        "the quote: the client's packet"
    );
    // The checksum over the pseudo-header and the message.
    let mut pseudo = Vec::new();
    pseudo.extend_from_slice(&ip[8..40]);
    pseudo.extend_from_slice(&((8 + q) as u32).to_be_bytes());
    pseudo.extend_from_slice(&[0, 0, 0, 58]);
    pseudo.extend_from_slice(icmp);
    assert_eq!(csum(&pseudo), 0, "ICMPv6 checksum");
}

#[test]
fn ipv6_too_big_gets_packet_too_big() {
    for (encap, olen, tag) in [
        (Encap::Gue { port: 6080 }, 48u32, "ptb6-gue"),
        (Encap::Ipip, 40, "ptb6-ipip"),
    ] {
        let Some((lb, _dir)) = common::load(tag, encap) else {
            return;
        };
        let maps = lb.maps();
        let c = sa("[2001:db8:c::9]:50000");
        let big = PacketBuilder::tcp(c, sa(VIP6))
            .payload(&[0x5a; 1400])
            .build();
        // IPv6 backend link at 1400: the client's 1460-byte packet does not fit.
        control::apply(maps, &services(), &with_mtu(1400)).unwrap();
        let (act, out) = run(&lb, "v6 too big", &big, Reason::TxIcmpTooBig);
        assert_eq!(act, 3, "XDP_TX");
        check_ptb6(&out, &big, sa(VIP6), c, 1400 - olen, 1232);
        // It adds no flow, and a packet that fits is forwarded.
        let fits = PacketBuilder::tcp(c, sa(VIP6)).payload(&[1; 100]).build();
        let (_, out) = run(&lb, "v6 fits", &fits, Reason::Fwd);
        check_sent("v6 fits", &out, &fits, ipa("fd00::22"), encap);
        // An IPv6 service behind an IPv4 link narrower than IPv6's minimum MTU: a packet
        // shorter than the full quote gets its header and 8 bytes quoted.
        let cx = sa("[2001:db8:c::a]:50001");
        let mid = PacketBuilder::tcp(cx, sa(VIP6_X))
            .payload(&[0x33; 700])
            .build();
        let outer4 = olen - 20; // the IPv4 outer header instead of IPv6's
        control::apply(maps, &services(), &with_mtu(600)).unwrap();
        let (_, out) = run(&lb, "v6 too big, short quote", &mid, Reason::TxIcmpTooBig);
        check_ptb6(&out, &mid, sa(VIP6_X), cx, 600 - outer4, 48);
        // The frame never grows past what was read: a cut packet is malformed, not answered.
        let cut = patch(big.clone(), 14 + 4, &[0x05, 0xdd]); // payload length 1501
        run(
            &lb,
            "v6 too big, length past the frame",
            &cut,
            Reason::DropMalformed,
        );
        // ICMPv6 errors themselves are never answered with one (they are not the flow's).
        let err = {
            let reply = PacketBuilder::tcp(sa(VIP6), c).payload(&[0; 1300]).build();
            let mut body = vec![2, 0, 0, 0, 0, 0, 0x05, 0xdc];
            body.extend_from_slice(&reply[14..]);
            PacketBuilder::other(ipa("2001:db8:ff::1"), sa(VIP6).ip(), 58)
                .payload(&body)
                .build()
        };
        run(&lb, "an ICMPv6 error too big", &err, Reason::DropTooBig);
        assert_eq!(mac_of(ipa("fd00::22"))[5], 0x22);
    }
}

/// Keeps the calling thread on one CPU while it lives, so that BPF_PROG_TEST_RUN always meets
/// the same per-CPU limiter; restores the thread's CPU set after.
struct OnOneCpu(libc::cpu_set_t);

impl OnOneCpu {
    fn new() -> OnOneCpu {
        // SAFETY: cpu_set_t is plain data (an all-zero set is valid); both calls get a pointer
        // to a live set of the size passed and act on the calling thread only (pid 0).
        unsafe {
            let mut old: libc::cpu_set_t = std::mem::zeroed();
            let size = std::mem::size_of::<libc::cpu_set_t>();
            assert_eq!(libc::sched_getaffinity(0, size, &mut old), 0);
            let cpu = (0..libc::CPU_SETSIZE as usize)
                .find(|&c| libc::CPU_ISSET(c, &old))
                .expect("some CPU is allowed");
            let mut one: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut one);
            assert_eq!(libc::sched_setaffinity(0, size, &one), 0);
            OnOneCpu(old)
        }
    }
}

impl Drop for OnOneCpu {
    fn drop(&mut self) {
        // SAFETY: as in new: a live set of the size passed, the calling thread only.
        unsafe {
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &self.0);
        }
    }
}

/// The ICMP too-big answers are rate limited per CPU (too_big_rate / too_big_burst): a burst
/// goes out, the rest are dropped and counted as DROP_TOO_BIG_LIMITED, for IPv4 and IPv6
/// alike; packets that fit are still forwarded; with no limit every one is answered.
#[test]
fn too_big_answers_are_rate_limited() {
    let limited = ringx_lb::LbSettings {
        too_big_rate: 1, // one a second: none comes back during the test
        too_big_burst: 3,
        ..common::settings(Encap::Gue { port: 6080 })
    };
    let Some((lb, _dir)) = common::load_with("tbrate", &limited) else {
        return;
    };
    let _cpu = OnOneCpu::new();
    let c = sa("192.0.2.70:40000");
    let c6 = sa("[2001:db8:1::70]:40000");
    let big = PacketBuilder::tcp(c, sa(VIP4))
        .payload(&[0u8; 1000])
        .build();
    let big6 = PacketBuilder::tcp(c6, sa(VIP6))
        .payload(&[0u8; 1000])
        .build();
    let small = PacketBuilder::tcp(c, sa(VIP4)).payload(b"x").build();
    control::apply(lb.maps(), &services(), &with_mtu(1000)).unwrap();
    for i in 0..3 {
        let frame = if i == 1 { &big6 } else { &big };
        let (act, _) = run(&lb, &format!("answer {i}"), frame, Reason::TxIcmpTooBig);
        assert_eq!(act, 3, "XDP_TX");
    }
    for i in 0..5 {
        let frame = if i % 2 == 0 { &big } else { &big6 };
        run(
            &lb,
            &format!("over the limit {i}"),
            frame,
            Reason::DropTooBigLimited,
        );
    }
    run(&lb, "a packet that fits", &small, Reason::Fwd);

    let unlimited = ringx_lb::LbSettings {
        too_big_rate: 0,
        ..limited
    };
    let Some((lb, _dir)) = common::load_with("tbnolimit", &unlimited) else {
        return;
    };
    control::apply(lb.maps(), &services(), &with_mtu(1000)).unwrap();
    for i in 0..20 {
        run(&lb, &format!("no limit {i}"), &big, Reason::TxIcmpTooBig);
    }
}
