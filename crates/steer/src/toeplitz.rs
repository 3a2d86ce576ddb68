//! The Toeplitz hash, bit for bit as RSS NICs compute it.
//!
//! For every bit of the input that is set (most significant bit of the first byte first), the
//! hash is XORed with the 32-bit window of the key that starts at that bit's position. The key
//! must be at least `input.len() + 4` bytes long; NICs use 40 bytes (52 on some), enough for the
//! longest input, an IPv6 4-tuple of 36 bytes.
//!
//! The input is built in the order the NIC reads the packet: source address, destination
//! address, source port, destination port, all in network byte order. The hash of an *inbound*
//! packet therefore has the remote end first. [`HashInput`] builds these inputs.
//!
//! Two implementations: [`toeplitz`], the bitwise reference, and [`ToeplitzTable`], which
//! precomputes for every input byte position a 256-entry table of partial hashes so that a
//! hash costs one lookup and one XOR per input byte. The port tables use the latter to
//! evaluate only the two bytes that change (the local port) on top of a precomputed partial
//! hash of the fixed part of the tuple ([`ToeplitzTable::partial`]).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The 40-byte key of Microsoft's "Verifying the RSS Hash Calculation" suite, also printed in
/// the Intel 82599 datasheet (section 7.1.2.8.3) and the default of many drivers.
pub const DEFAULT_KEY: [u8; 40] = [
    0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3, 0x8f, 0xb0,
    0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30, 0xf2, 0x0c,
    0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa,
];

/// The longest input an RSS NIC hashes: an IPv6 address pair and a port pair.
pub const MAX_INPUT: usize = 36;

/// Bit `i` of `key` (bit 0 is the most significant bit of byte 0); bits past the end read as 0.
#[inline]
fn key_bit(key: &[u8], i: usize) -> u32 {
    key.get(i / 8)
        .map_or(0, |b| u32::from(b >> (7 - i % 8)) & 1)
}

/// The 32-bit window of `key` starting at bit `start`.
fn key_window(key: &[u8], start: usize) -> u32 {
    (0..32).fold(0u32, |w, i| (w << 1) | key_bit(key, start + i))
}

/// The Toeplitz hash of `input` under `key`: the bitwise reference implementation.
///
/// Key bits past the end of `key` read as zero, so a key shorter than `input.len() + 4` gives
/// a hash no NIC would compute; callers that take keys from users should check the length.
pub fn toeplitz(key: &[u8], input: &[u8]) -> u32 {
    let mut hash = 0u32;
    // The window of key bits [n, n + 32) for the input bit n being looked at.
    let mut window = key_window(key, 0);
    for (byte_idx, &byte) in input.iter().enumerate() {
        for bit in 0..8 {
            if byte & (0x80 >> bit) != 0 {
                hash ^= window;
            }
            window = (window << 1) | key_bit(key, byte_idx * 8 + bit + 32);
        }
    }
    hash
}

/// A hash input in NIC order; at most [`MAX_INPUT`] bytes, kept inline.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct HashInput {
    buf: [u8; MAX_INPUT],
    len: u8,
}

impl HashInput {
    fn from_parts(parts: &[&[u8]]) -> Self {
        let mut buf = [0u8; MAX_INPUT];
        let mut len = 0;
        for p in parts {
            buf[len..len + p.len()].copy_from_slice(p);
            len += p.len();
        }
        HashInput {
            buf,
            len: len as u8,
        }
    }

    /// IPv4 addresses only (8 bytes).
    pub fn v4(src: Ipv4Addr, dst: Ipv4Addr) -> Self {
        Self::from_parts(&[&src.octets(), &dst.octets()])
    }

    /// IPv4 4-tuple: source address, destination address, source port, destination port.
    pub fn v4_ports(src: Ipv4Addr, sport: u16, dst: Ipv4Addr, dport: u16) -> Self {
        Self::from_parts(&[
            &src.octets(),
            &dst.octets(),
            &sport.to_be_bytes(),
            &dport.to_be_bytes(),
        ])
    }

    /// IPv6 addresses only (32 bytes).
    pub fn v6(src: Ipv6Addr, dst: Ipv6Addr) -> Self {
        Self::from_parts(&[&src.octets(), &dst.octets()])
    }

    /// IPv6 4-tuple (36 bytes).
    pub fn v6_ports(src: Ipv6Addr, sport: u16, dst: Ipv6Addr, dport: u16) -> Self {
        Self::from_parts(&[
            &src.octets(),
            &dst.octets(),
            &sport.to_be_bytes(),
            &dport.to_be_bytes(),
        ])
    }

    /// Addresses only, either family; `None` when the families differ.
    pub fn ip_only(src: IpAddr, dst: IpAddr) -> Option<Self> {
        match (src, dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => Some(Self::v4(s, d)),
            (IpAddr::V6(s), IpAddr::V6(d)) => Some(Self::v6(s, d)),
            _ => None,
        }
    }

    /// The 4-tuple of a packet from `src` to `dst`; `None` when the families differ.
    pub fn with_ports(src: SocketAddr, dst: SocketAddr) -> Option<Self> {
        match (src.ip(), dst.ip()) {
            (IpAddr::V4(s), IpAddr::V4(d)) => Some(Self::v4_ports(s, src.port(), d, dst.port())),
            (IpAddr::V6(s), IpAddr::V6(d)) => Some(Self::v6_ports(s, src.port(), d, dst.port())),
            _ => None,
        }
    }

    /// The bytes to hash.
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..usize::from(self.len)]
    }
}

impl std::fmt::Debug for HashInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HashInput(")?;
        for b in self.as_bytes() {
            write!(f, "{b:02x}")?;
        }
        write!(f, ")")
    }
}

/// Table-driven Toeplitz: for each input byte position, the partial hash of each byte value.
///
/// Equal to [`toeplitz`] for inputs up to the length given to [`ToeplitzTable::new`]
/// (property-tested). 256 × 4 bytes per position: 36 KiB for IPv6 4-tuples.
#[derive(Clone)]
pub struct ToeplitzTable {
    tables: Box<[[u32; 256]]>,
}

impl ToeplitzTable {
    /// Precompute the tables of `key` for inputs of up to `max_input` bytes.
    pub fn new(key: &[u8], max_input: usize) -> Self {
        let tables = (0..max_input)
            .map(|pos| {
                // Windows for the 8 bits of this byte, most significant first.
                let windows: [u32; 8] = std::array::from_fn(|bit| key_window(key, pos * 8 + bit));
                std::array::from_fn(|value| {
                    (0..8)
                        .filter(|bit| value & (0x80 >> bit) != 0)
                        .fold(0u32, |h, bit| h ^ windows[bit])
                })
            })
            .collect();
        ToeplitzTable { tables }
    }

    /// The longest input this table can hash.
    pub fn max_input(&self) -> usize {
        self.tables.len()
    }

    /// The hash of `input`.
    ///
    /// # Panics
    /// If `input` is longer than [`ToeplitzTable::max_input`].
    #[inline]
    pub fn hash(&self, input: &[u8]) -> u32 {
        self.partial(0, input)
    }

    /// The contribution of `bytes` placed at byte offset `offset` of the input. Toeplitz is
    /// linear over XOR, so the hash of an input is the XOR of the partials of its pieces.
    ///
    /// # Panics
    /// If `offset + bytes.len()` exceeds [`ToeplitzTable::max_input`].
    #[inline]
    pub fn partial(&self, offset: usize, bytes: &[u8]) -> u32 {
        self.tables[offset..offset + bytes.len()]
            .iter()
            .zip(bytes)
            .fold(0u32, |h, (t, &b)| h ^ t[usize::from(b)])
    }

    /// The contribution of a big-endian `u16` at byte offset `offset` (two lookups).
    ///
    /// # Panics
    /// If `offset + 2` exceeds [`ToeplitzTable::max_input`].
    #[inline]
    pub fn partial_u16(&self, offset: usize, value: u16) -> u32 {
        let [hi, lo] = value.to_be_bytes();
        self.tables[offset][usize::from(hi)] ^ self.tables[offset + 1][usize::from(lo)]
    }
}

impl std::fmt::Debug for ToeplitzTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToeplitzTable")
            .field("max_input", &self.max_input())
            .finish()
    }
}

/// Parse a key written as hex, with or without `:` separators (`6d5a56da...` or
/// `6d:5a:56:da:...`, the form `ethtool -x` prints).
pub fn parse_key(text: &str) -> Result<Vec<u8>, String> {
    let digits: String = text
        .trim()
        .trim_start_matches("0x")
        .chars()
        .filter(|c| *c != ':')
        .collect();
    if digits.is_empty() || digits.len() & 1 == 1 {
        return Err(format!(
            "key {text:?}: expected an even number of hex digits"
        ));
    }
    (0..digits.len())
        .step_by(2)
        .map(|i| {
            u8::from_str_radix(&digits[i..i + 2], 16)
                .map_err(|_| format!("key {text:?}: {:?} is not a hex byte", &digits[i..i + 2]))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// One row of the published verification suite. The suite's table lists the destination
    /// first; the hash input is source first, which is what [`HashInput`] builds.
    struct Row {
        dst: (&'static str, u16),
        src: (&'static str, u16),
        ip_only: u32,
        with_ports: u32,
    }

    /// Microsoft, "Verifying the RSS Hash Calculation", IPv4 table (= Intel 82599 datasheet
    /// 7.1.2.8.3, = DPDK `app/test/test_thash.c` `v4_tbl`).
    #[rustfmt::skip]
    const V4: [Row; 5] = [
        Row { dst: ("161.142.100.80", 1766), src: ("66.9.149.187", 2794), ip_only: 0x323e8fc2, with_ports: 0x51ccc178 },
        Row { dst: ("65.69.140.83", 4739), src: ("199.92.111.2", 14230), ip_only: 0xd718262a, with_ports: 0xc626b0ea },
        Row { dst: ("12.22.207.184", 38024), src: ("24.19.198.95", 12898), ip_only: 0xd2d0a5de, with_ports: 0x5c2b394a },
        Row { dst: ("209.142.163.6", 2217), src: ("38.27.205.30", 48228), ip_only: 0x82989176, with_ports: 0xafc7327f },
        Row { dst: ("202.188.127.2", 1303), src: ("153.39.163.191", 44251), ip_only: 0x5d1809c5, with_ports: 0x10e828a2 },
    ];

    /// The same suite's IPv6 table.
    #[rustfmt::skip]
    const V6: [Row; 3] = [
        Row { dst: ("3ffe:2501:200:3::1", 1766), src: ("3ffe:2501:200:1fff::7", 2794), ip_only: 0x2cc18cd5, with_ports: 0x40207d3d },
        Row { dst: ("ff02::1", 4739), src: ("3ffe:501:8::260:97ff:fe40:efab", 14230), ip_only: 0x0f0c461c, with_ports: 0xdde51bbf },
        Row { dst: ("fe80::200:f8ff:fe21:67cf", 38024), src: ("3ffe:1900:4545:3:200:f8ff:fe21:67cf", 44251), ip_only: 0x4b61e985, with_ports: 0x02d1feef },
    ];

    fn check(rows: &[Row]) {
        let table = ToeplitzTable::new(&DEFAULT_KEY, MAX_INPUT);
        for r in rows {
            let src: IpAddr = r.src.0.parse().unwrap();
            let dst: IpAddr = r.dst.0.parse().unwrap();
            let ip = HashInput::ip_only(src, dst).unwrap();
            let l4 =
                HashInput::with_ports(SocketAddr::new(src, r.src.1), SocketAddr::new(dst, r.dst.1))
                    .unwrap();
            for (input, want, what) in
                [(ip, r.ip_only, "ip-only"), (l4, r.with_ports, "with ports")]
            {
                let got = toeplitz(&DEFAULT_KEY, input.as_bytes());
                assert_eq!(
                    got, want,
                    "{} -> {} {what}: got {got:#010x}",
                    r.src.0, r.dst.0
                );
                assert_eq!(
                    table.hash(input.as_bytes()),
                    want,
                    "table {} {what}",
                    r.src.0
                );
            }
        }
    }

    #[test]
    fn microsoft_suite_ipv4() {
        check(&V4);
    }

    #[test]
    fn microsoft_suite_ipv6() {
        check(&V6);
    }

    #[test]
    fn destination_first_order_does_not_match() {
        // Guards the argument order: the suite's first column is the destination.
        let r = &V4[0];
        let wrong = HashInput::v4_ports(
            r.dst.0.parse().unwrap(),
            r.dst.1,
            r.src.0.parse().unwrap(),
            r.src.1,
        );
        assert_ne!(toeplitz(&DEFAULT_KEY, wrong.as_bytes()), r.with_ports);
    }

    #[test]
    fn input_lengths() {
        let a4 = Ipv4Addr::LOCALHOST;
        let a6 = Ipv6Addr::LOCALHOST;
        assert_eq!(HashInput::v4(a4, a4).as_bytes().len(), 8);
        assert_eq!(HashInput::v4_ports(a4, 1, a4, 2).as_bytes().len(), 12);
        assert_eq!(HashInput::v6(a6, a6).as_bytes().len(), 32);
        assert_eq!(HashInput::v6_ports(a6, 1, a6, 2).as_bytes().len(), 36);
        assert!(HashInput::ip_only(a4.into(), a6.into()).is_none());
        assert_eq!(
            HashInput::v4_ports(a4, 0x1234, a4, 0xabcd).as_bytes()[8..],
            [0x12, 0x34, 0xab, 0xcd]
        );
    }

    #[test]
    fn parse_key_forms() {
        let hex =
            "6d5a56da255b0ec24167253d43a38fb0d0ca2bcbae7b30b477cb2da38030f20c6a42b73bbeac01fa";
        assert_eq!(parse_key(hex).unwrap(), DEFAULT_KEY);
        let colons: Vec<String> = DEFAULT_KEY.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(parse_key(&colons.join(":")).unwrap(), DEFAULT_KEY);
        assert!(parse_key("abc").is_err());
        assert!(parse_key("zz").is_err());
        assert!(parse_key("").is_err());
    }

    proptest! {
        #[test]
        fn table_equals_reference(
            key in proptest::collection::vec(any::<u8>(), 40),
            input in proptest::collection::vec(any::<u8>(), 0..=MAX_INPUT),
        ) {
            let table = ToeplitzTable::new(&key, MAX_INPUT);
            prop_assert_eq!(table.hash(&input), toeplitz(&key, &input));
        }

        #[test]
        fn partials_compose(
            input in proptest::collection::vec(any::<u8>(), 2..=MAX_INPUT),
            split in 0usize..MAX_INPUT,
        ) {
            let table = ToeplitzTable::new(&DEFAULT_KEY, MAX_INPUT);
            let split = split.min(input.len() - 2);
            let port = u16::from_be_bytes([input[split], input[split + 1]]);
            let h = table.partial(0, &input[..split])
                ^ table.partial_u16(split, port)
                ^ table.partial(split + 2, &input[split + 2..]);
            prop_assert_eq!(h, toeplitz(&DEFAULT_KEY, &input));
        }
    }
}
