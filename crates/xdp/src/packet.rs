//! Building test packets: Ethernet (with VLAN tags), IPv4 (with options, fragments) or IPv6
//! (with extension headers), TCP/UDP/ICMP, with correct lengths and checksums, so that a
//! packet the filter passes is one the kernel's stack accepts too. Used by the
//! BPF_PROG_TEST_RUN tests and by the benchmark's generator.
//!
//! ```
//! use ringx_xdp::packet::PacketBuilder;
//! let syn = PacketBuilder::tcp("192.0.2.1:40000".parse().unwrap(), "192.0.2.2:80".parse().unwrap())
//!     .syn()
//!     .vlan(0x8100, 42)
//!     .build();
//! assert_eq!(syn.len(), 14 + 4 + 20 + 20);
//! ```

use std::net::{IpAddr, SocketAddr};

pub const ETH_P_IP: u16 = 0x0800;
pub const ETH_P_IPV6: u16 = 0x86dd;
pub const ETH_P_ARP: u16 = 0x0806;
pub const ETH_P_8021Q: u16 = 0x8100;
pub const ETH_P_8021AD: u16 = 0x88a8;

pub const TCP_FIN: u8 = 0x01;
pub const TCP_SYN: u8 = 0x02;
pub const TCP_RST: u8 = 0x04;
pub const TCP_PSH: u8 = 0x08;
pub const TCP_ACK: u8 = 0x10;

/// The transport of a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    Tcp {
        flags: u8,
    },
    Udp,
    /// ICMP echo request (ICMPv6 for IPv6).
    Icmp,
    /// Any other protocol number, with the payload as its body.
    Other(u8),
}

/// An IPv6 extension header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ext {
    /// Hop-by-hop options, `len8` 8-octet units beyond the first (padded with PadN).
    HopByHop { len8: u8 },
    /// Destination options.
    DestOpts { len8: u8 },
    /// A type-0-free routing header (segments left 0).
    Routing { len8: u8 },
    /// A fragment header: offset in 8-octet units and the M flag.
    Fragment { offset: u16, more: bool },
    /// An authentication header, `len4` 4-octet units beyond the first two.
    Ah { len4: u8 },
}

impl Ext {
    fn proto(self) -> u8 {
        match self {
            Ext::HopByHop { .. } => 0,
            Ext::Routing { .. } => 43,
            Ext::Fragment { .. } => 44,
            Ext::Ah { .. } => 51,
            Ext::DestOpts { .. } => 60,
        }
    }

    fn bytes(self, next: u8) -> Vec<u8> {
        match self {
            Ext::HopByHop { len8 } | Ext::DestOpts { len8 } | Ext::Routing { len8 } => {
                let total = (len8 as usize + 1) * 8;
                let mut b = vec![0u8; total];
                b[0] = next;
                b[1] = len8;
                if matches!(self, Ext::Routing { .. }) {
                    b[2] = 4; // routing type 4 (segment routing), segments left 0
                } else {
                    b[2] = 1; // PadN covering the rest
                    b[3] = (total - 4) as u8;
                }
                b
            }
            Ext::Fragment { offset, more } => {
                let mut b = vec![0u8; 8];
                b[0] = next;
                let fo = (offset << 3) | more as u16;
                b[2..4].copy_from_slice(&fo.to_be_bytes());
                b[4..8].copy_from_slice(&0x1234_5678u32.to_be_bytes());
                b
            }
            Ext::Ah { len4 } => {
                let total = (len4 as usize + 2) * 4;
                let mut b = vec![0u8; total];
                b[0] = next;
                b[1] = len4;
                b
            }
        }
    }
}

/// A packet under construction; `build` lays it out.
#[derive(Clone, Debug)]
pub struct PacketBuilder {
    pub src: SocketAddr,
    pub dst: SocketAddr,
    pub transport: Transport,
    pub vlans: Vec<(u16, u16)>,
    pub ip_options: Vec<u8>,
    pub ext: Vec<Ext>,
    /// IPv4 fragment offset (8-octet units) and MF flag.
    pub frag: Option<(u16, bool)>,
    pub payload: Vec<u8>,
    pub src_mac: [u8; 6],
    pub dst_mac: [u8; 6],
}

impl PacketBuilder {
    fn new(src: SocketAddr, dst: SocketAddr, transport: Transport) -> PacketBuilder {
        assert_eq!(
            src.is_ipv4(),
            dst.is_ipv4(),
            "source and destination of one family"
        );
        PacketBuilder {
            src,
            dst,
            transport,
            vlans: Vec::new(),
            ip_options: Vec::new(),
            ext: Vec::new(),
            frag: None,
            payload: Vec::new(),
            src_mac: [0x02, 0, 0, 0, 0, 0x01],
            dst_mac: [0x02, 0, 0, 0, 0, 0x02],
        }
    }

    /// A TCP segment with ACK set (an established connection's); see [`Self::syn`].
    pub fn tcp(src: SocketAddr, dst: SocketAddr) -> PacketBuilder {
        Self::new(src, dst, Transport::Tcp { flags: TCP_ACK })
    }

    pub fn udp(src: SocketAddr, dst: SocketAddr) -> PacketBuilder {
        Self::new(src, dst, Transport::Udp)
    }

    pub fn icmp(src: IpAddr, dst: IpAddr) -> PacketBuilder {
        Self::new(
            SocketAddr::new(src, 0),
            SocketAddr::new(dst, 0),
            Transport::Icmp,
        )
    }

    pub fn other(src: IpAddr, dst: IpAddr, proto: u8) -> PacketBuilder {
        Self::new(
            SocketAddr::new(src, 0),
            SocketAddr::new(dst, 0),
            Transport::Other(proto),
        )
    }

    /// A connection-opening SYN (SYN without ACK).
    pub fn syn(mut self) -> Self {
        self.transport = Transport::Tcp { flags: TCP_SYN };
        self
    }

    pub fn tcp_flags(mut self, flags: u8) -> Self {
        self.transport = Transport::Tcp { flags };
        self
    }

    /// Adds a VLAN tag (outermost first): `tpid` 0x8100 (802.1Q) or 0x88a8 (802.1ad).
    pub fn vlan(mut self, tpid: u16, vid: u16) -> Self {
        self.vlans.push((tpid, vid));
        self
    }

    /// IPv4 options (padded with EOL to a multiple of 4).
    pub fn ip_options(mut self, opts: &[u8]) -> Self {
        self.ip_options = opts.to_vec();
        while self.ip_options.len() & 3 != 0 {
            self.ip_options.push(0);
        }
        self
    }

    /// Appends an IPv6 extension header.
    pub fn ext(mut self, e: Ext) -> Self {
        self.ext.push(e);
        self
    }

    /// Makes an IPv4 packet a fragment.
    pub fn fragment(mut self, offset8: u16, more: bool) -> Self {
        self.frag = Some((offset8, more));
        self
    }

    pub fn payload(mut self, p: &[u8]) -> Self {
        self.payload = p.to_vec();
        self
    }

    pub fn macs(mut self, src: [u8; 6], dst: [u8; 6]) -> Self {
        self.src_mac = src;
        self.dst_mac = dst;
        self
    }

    fn proto(&self) -> u8 {
        match self.transport {
            Transport::Tcp { .. } => 6,
            Transport::Udp => 17,
            Transport::Icmp if self.src.is_ipv4() => 1,
            Transport::Icmp => 58,
            Transport::Other(p) => p,
        }
    }

    /// The transport header and payload, checksummed over `pseudo`.
    fn l4(&self, pseudo: &[u8]) -> Vec<u8> {
        let mut b = match self.transport {
            Transport::Tcp { flags } => {
                let mut h = vec![0u8; 20];
                h[0..2].copy_from_slice(&self.src.port().to_be_bytes());
                h[2..4].copy_from_slice(&self.dst.port().to_be_bytes());
                h[4..8].copy_from_slice(&1000u32.to_be_bytes());
                if flags & TCP_ACK != 0 {
                    h[8..12].copy_from_slice(&2000u32.to_be_bytes());
                }
                h[12] = 5 << 4;
                h[13] = flags;
                h[14..16].copy_from_slice(&64240u16.to_be_bytes());
                h
            }
            Transport::Udp => {
                let mut h = vec![0u8; 8];
                h[0..2].copy_from_slice(&self.src.port().to_be_bytes());
                h[2..4].copy_from_slice(&self.dst.port().to_be_bytes());
                h[4..6].copy_from_slice(&((8 + self.payload.len()) as u16).to_be_bytes());
                h
            }
            Transport::Icmp => {
                let t = if self.src.is_ipv4() { 8 } else { 128 };
                vec![t, 0, 0, 0, 0, 1, 0, 1]
            }
            Transport::Other(_) => Vec::new(),
        };
        b.extend_from_slice(&self.payload);
        let csum_at = match self.transport {
            Transport::Tcp { .. } => Some(16),
            Transport::Udp => Some(6),
            Transport::Icmp => Some(2),
            Transport::Other(_) => None,
        };
        if let Some(at) = csum_at {
            // ICMPv4 has no pseudo-header; TCP, UDP and ICMPv6 do.
            let with_pseudo = !(self.transport == Transport::Icmp && self.src.is_ipv4());
            let mut sum = if with_pseudo { sum16(pseudo) } else { 0 };
            sum += sum16(&b);
            let mut c = fold(sum);
            if c == 0 && self.transport == Transport::Udp {
                c = 0xffff;
            }
            b[at..at + 2].copy_from_slice(&c.to_be_bytes());
        }
        b
    }

    /// Lays the packet out.
    pub fn build(&self) -> Vec<u8> {
        let mut p = Vec::with_capacity(128);
        p.extend_from_slice(&self.dst_mac);
        p.extend_from_slice(&self.src_mac);
        let ethertype = if self.src.is_ipv4() {
            ETH_P_IP
        } else {
            ETH_P_IPV6
        };
        for &(tpid, vid) in &self.vlans {
            p.extend_from_slice(&tpid.to_be_bytes());
            p.extend_from_slice(&[0, 0]); // patched below: each TCI follows its TPID
            let at = p.len() - 2;
            p[at..at + 2].copy_from_slice(&(vid & 0x0fff).to_be_bytes());
        }
        p.extend_from_slice(&ethertype.to_be_bytes());
        let proto = self.proto();
        match (self.src.ip(), self.dst.ip()) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                let mut pseudo = Vec::with_capacity(12);
                pseudo.extend_from_slice(&s.octets());
                pseudo.extend_from_slice(&d.octets());
                let l4len = self.l4(&[]).len();
                pseudo.extend_from_slice(&[0, proto]);
                pseudo.extend_from_slice(&(l4len as u16).to_be_bytes());
                let l4 = self.l4(&pseudo);
                let hlen = 20 + self.ip_options.len();
                let mut h = vec![0u8; 20];
                h[0] = 0x40 | (hlen / 4) as u8;
                h[2..4].copy_from_slice(&((hlen + l4.len()) as u16).to_be_bytes());
                h[4..6].copy_from_slice(&0x4242u16.to_be_bytes());
                let fo = match self.frag {
                    Some((off, more)) => (off & 0x1fff) | if more { 0x2000 } else { 0 },
                    None => 0x4000, // DF
                };
                h[6..8].copy_from_slice(&fo.to_be_bytes());
                h[8] = 64;
                h[9] = proto;
                h[12..16].copy_from_slice(&s.octets());
                h[16..20].copy_from_slice(&d.octets());
                h.extend_from_slice(&self.ip_options);
                let c = fold(sum16(&h));
                h[10..12].copy_from_slice(&c.to_be_bytes());
                p.extend_from_slice(&h);
                p.extend_from_slice(&l4);
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                let l4len = self.l4(&[]).len();
                let mut pseudo = Vec::with_capacity(40);
                pseudo.extend_from_slice(&s.octets());
                pseudo.extend_from_slice(&d.octets());
                pseudo.extend_from_slice(&(l4len as u32).to_be_bytes());
                pseudo.extend_from_slice(&[0, 0, 0, proto]);
                let l4 = self.l4(&pseudo);
                let mut exts = Vec::new();
                for (i, e) in self.ext.iter().enumerate() {
                    let next = self.ext.get(i + 1).map_or(proto, |n| n.proto());
                    exts.extend_from_slice(&e.bytes(next));
                }
                let first = self.ext.first().map_or(proto, |e| e.proto());
                let mut h = vec![0u8; 40];
                h[0] = 0x60;
                h[4..6].copy_from_slice(&((exts.len() + l4.len()) as u16).to_be_bytes());
                h[6] = first;
                h[7] = 64;
                h[8..24].copy_from_slice(&s.octets());
                h[24..40].copy_from_slice(&d.octets());
                p.extend_from_slice(&h);
                p.extend_from_slice(&exts);
                p.extend_from_slice(&l4);
            }
            _ => unreachable!("checked in new()"),
        }
        p
    }
}

fn sum16(b: &[u8]) -> u32 {
    let mut s = 0u32;
    let mut it = b.chunks_exact(2);
    for w in &mut it {
        s += u16::from_be_bytes([w[0], w[1]]) as u32;
    }
    if let [last] = it.remainder() {
        s += (*last as u32) << 8;
    }
    s
}

fn fold(mut s: u32) -> u16 {
    while s >> 16 != 0 {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_header_checksum_verifies() {
        let p = PacketBuilder::udp(
            "10.0.0.1:53".parse().unwrap(),
            "10.0.0.2:5353".parse().unwrap(),
        )
        .ip_options(&[1, 1, 1])
        .payload(b"hi")
        .build();
        let ip = &p[14..14 + 24];
        assert_eq!(ip[0], 0x46);
        assert_eq!(
            fold(sum16(ip)),
            0,
            "a header with its checksum sums to 0xffff"
        );
        assert_eq!(p.len(), 14 + 24 + 8 + 2);
    }

    #[test]
    fn tcp_checksum_verifies() {
        let p = PacketBuilder::tcp(
            "10.0.0.1:1000".parse().unwrap(),
            "10.0.0.2:80".parse().unwrap(),
        )
        .syn()
        .build();
        let mut pseudo = vec![10, 0, 0, 1, 10, 0, 0, 2, 0, 6, 0, 20];
        pseudo.extend_from_slice(&p[34..]);
        assert_eq!(fold(sum16(&pseudo)), 0);
        assert_eq!(p[34 + 13], TCP_SYN);
    }

    #[test]
    fn ipv6_with_extensions_and_vlans() {
        let p = PacketBuilder::tcp(
            "[2001:db8::1]:1000".parse().unwrap(),
            "[2001:db8::2]:80".parse().unwrap(),
        )
        .vlan(ETH_P_8021AD, 100)
        .vlan(ETH_P_8021Q, 200)
        .ext(Ext::HopByHop { len8: 0 })
        .ext(Ext::Fragment {
            offset: 0,
            more: true,
        })
        .ext(Ext::DestOpts { len8: 1 })
        .build();
        assert_eq!(&p[12..14], &ETH_P_8021AD.to_be_bytes());
        assert_eq!(&p[16..18], &ETH_P_8021Q.to_be_bytes());
        assert_eq!(&p[20..22], &ETH_P_IPV6.to_be_bytes());
        let ip = 22;
        assert_eq!(p[ip + 6], 0); // hop-by-hop first
        assert_eq!(p[ip + 40], 44); // then fragment
        assert_eq!(p[ip + 48], 60); // then destination options
        assert_eq!(p[ip + 56], 6); // then TCP
        assert_eq!(p.len(), ip + 40 + 8 + 8 + 16 + 20);
    }
}
