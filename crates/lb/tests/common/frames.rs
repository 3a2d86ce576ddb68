//! Frames in and out of the balancer: the flow key of an address pair, running one frame
//! with its counters checked, and taking a forwarded frame apart.

use std::net::{IpAddr, SocketAddr};

use ringx_lb::abi::{addr_bytes, FlowKey};
use ringx_lb::{Balancer, Encap, Proto, Reason};
use ringx_xdp::packet::PacketBuilder;

use super::{csum, ipa, mac_of};

/// PacketBuilder's destination MAC: the balancer's device.
pub const LB_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];

pub fn flow(src: SocketAddr, dst: SocketAddr, proto: Proto) -> FlowKey {
    let (s, family) = addr_bytes(src.ip());
    let (d, _) = addr_bytes(dst.ip());
    FlowKey {
        src: s,
        dst: d,
        sport: src.port().to_be(),
        dport: dst.port().to_be(),
        proto: proto.number(),
        family,
        pad: [0; 2],
    }
}

/// The frame the balancer sent, taken apart.
#[derive(Debug)]
pub struct Sent {
    pub dmac: [u8; 6],
    pub smac: [u8; 6],
    pub src: IpAddr,
    pub dst: IpAddr,
    /// Outer IP protocol / next header.
    pub proto: u8,
    pub udp: Option<(u16, u16)>,
    /// The inner IP packet, as long as the outer headers say.
    pub inner: Vec<u8>,
}

pub fn parse_sent(f: &[u8]) -> Sent {
    let mut dmac = [0; 6];
    let mut smac = [0; 6];
    dmac.copy_from_slice(&f[0..6]);
    smac.copy_from_slice(&f[6..12]);
    let et = u16::from_be_bytes([f[12], f[13]]);
    let ip = &f[14..];
    let (src, dst, proto, hlen, total) = if et == 0x0800 {
        assert_eq!(ip[0], 0x45, "outer IPv4 header without options");
        assert_eq!(csum(&ip[..20]), 0, "outer IPv4 checksum");
        assert_eq!(ip[6] & 0x40, 0x40, "DF set");
        let s: [u8; 4] = ip[12..16].try_into().unwrap();
        let d: [u8; 4] = ip[16..20].try_into().unwrap();
        let tot = u16::from_be_bytes([ip[2], ip[3]]) as usize;
        (IpAddr::from(s), IpAddr::from(d), ip[9], 20, tot)
    } else {
        assert_eq!(et, 0x86dd, "outer ethertype");
        assert_eq!(ip[0] >> 4, 6);
        let s: [u8; 16] = ip[8..24].try_into().unwrap();
        let d: [u8; 16] = ip[24..40].try_into().unwrap();
        let plen = u16::from_be_bytes([ip[4], ip[5]]) as usize;
        (IpAddr::from(s), IpAddr::from(d), ip[6], 40, 40 + plen)
    };
    let (udp, inner_at) = if proto == 17 {
        let u = &ip[hlen..];
        let len = u16::from_be_bytes([u[4], u[5]]) as usize;
        assert_eq!(len, total - hlen, "UDP length");
        (
            Some((
                u16::from_be_bytes([u[0], u[1]]),
                u16::from_be_bytes([u[2], u[3]]),
            )),
            hlen + 8,
        )
    } else {
        (None, hlen)
    };
    Sent {
        dmac,
        smac,
        src,
        dst,
        proto,
        udp,
        inner: ip[inner_at..total].to_vec(),
    }
}

/// Runs one frame; checks that exactly one packet was counted, under `want`, and returns the
/// XDP action and the frame out.
pub fn run(lb: &Balancer, name: &str, pkt: &[u8], want: Reason) -> (u32, Vec<u8>) {
    let before = lb.maps().reasons().unwrap();
    let r = lb
        .test_run(pkt, 1)
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    let after = lb.maps().reasons().unwrap();
    let counted: Vec<(Reason, u64)> = after
        .iter()
        .zip(&before)
        .filter(|(a, b)| a.1.packets != b.1.packets)
        .map(|(a, b)| (a.0, a.1.packets - b.1.packets))
        .collect();
    assert_eq!(
        counted,
        vec![(want, 1)],
        "{name}: counted {counted:?} (action {}), wanted {want:?}",
        r.retval
    );
    let bytes = after[want as usize].1.bytes - before[want as usize].1.bytes;
    assert_eq!(bytes, pkt.len() as u64, "{name}: bytes counted");
    assert_eq!(
        ringx_lb::Verdict::from_xdp_action(r.retval),
        Some(want.verdict()),
        "{name}: action {}",
        r.retval
    );
    (r.retval, r.data_out)
}

pub fn ip_packet(frame: &[u8]) -> &[u8] {
    &frame[14..]
}

/// Checks a forwarded frame: to `backend`'s next hop, from the balancer's source, carrying
/// the original IP packet whole.
pub fn check_sent(name: &str, out: &[u8], orig: &[u8], backend: IpAddr, encap: Encap) -> Sent {
    let s = parse_sent(out);
    assert_eq!(s.dst, backend, "{name}: outer destination");
    assert_eq!(s.dmac, mac_of(backend), "{name}: next hop MAC");
    assert_eq!(s.smac, LB_MAC, "{name}: source MAC (the device's own)");
    let want_src = if backend.is_ipv4() {
        ipa("10.255.0.1")
    } else {
        ipa("fd00:ff::1")
    };
    assert_eq!(s.src, want_src, "{name}: outer source");
    let orig_ip = ip_packet(orig);
    let inner_len = if orig_ip[0] >> 4 == 4 {
        u16::from_be_bytes([orig_ip[2], orig_ip[3]]) as usize
    } else {
        40 + u16::from_be_bytes([orig_ip[4], orig_ip[5]]) as usize
    };
    assert_eq!(s.inner, &orig_ip[..inner_len], "{name}: inner packet");
    match encap {
        Encap::Gue { port } => {
            assert_eq!(s.proto, 17, "{name}: outer protocol");
            let (sport, dport) = s.udp.unwrap();
            assert_eq!(dport, port, "{name}: GUE port");
            assert!(sport >= 0xc000, "{name}: source port {sport} in 49152..");
        }
        Encap::Ipip => {
            let want = if orig_ip[0] >> 4 == 4 { 4 } else { 41 };
            assert_eq!(s.proto, want, "{name}: outer protocol");
        }
    }
    s
}

/// An ICMP error about the answer `vip -> client` (frag-needed, or packet-too-big).
pub fn icmp_error(router: IpAddr, vip: SocketAddr, client: SocketAddr) -> Vec<u8> {
    let reply = PacketBuilder::tcp(vip, client).build();
    let inner_len = if vip.is_ipv4() { 20 + 8 } else { 40 + 8 };
    let mut body = if vip.is_ipv4() {
        vec![3, 4, 0, 0, 0, 0, 0x05, 0xdc] // dest unreachable, frag needed, MTU 1500
    } else {
        vec![2, 0, 0, 0, 0, 0, 0x05, 0xdc] // packet too big, MTU 1500
    };
    body.extend_from_slice(&reply[14..14 + inner_len]);
    let proto = if vip.is_ipv4() { 1 } else { 58 };
    PacketBuilder::other(router, vip.ip(), proto)
        .payload(&body)
        .build()
}

pub fn patch(mut p: Vec<u8>, at: usize, bytes: &[u8]) -> Vec<u8> {
    p[at..at + bytes.len()].copy_from_slice(bytes);
    p
}
