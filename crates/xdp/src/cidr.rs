//! IPv4 and IPv6 prefixes as the block and allow lists hold them.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use crate::abi::{LpmV4, LpmV6};

/// An address prefix, `203.0.113.0/24` or `2001:db8::/32`, with its host bits cleared. A bare
/// address is a host prefix (/32 or /128).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// The prefix of `addr` of `prefix` bits (host bits cleared); an error when `prefix` is
    /// longer than the address.
    pub fn new(addr: IpAddr, prefix: u8) -> Result<Cidr, String> {
        let max = if addr.is_ipv4() { 32 } else { 128 };
        if prefix > max {
            return Err(format!(
                "prefix length /{prefix} is longer than /{max} for {addr}"
            ));
        }
        Ok(Cidr {
            addr: mask(addr, prefix),
            prefix,
        })
    }

    /// The network address (host bits zero).
    pub fn addr(&self) -> IpAddr {
        self.addr
    }

    pub fn prefix_len(&self) -> u8 {
        self.prefix
    }

    /// Whether `ip` lies in this prefix.
    pub fn contains(&self, ip: IpAddr) -> bool {
        ip.is_ipv4() == self.addr.is_ipv4() && mask(ip, self.prefix) == self.addr
    }

    pub(crate) fn lpm_v4(&self) -> Option<LpmV4> {
        match self.addr {
            IpAddr::V4(a) => Some(LpmV4 {
                prefixlen: self.prefix as u32,
                addr: a.octets(),
            }),
            IpAddr::V6(_) => None,
        }
    }

    pub(crate) fn lpm_v6(&self) -> Option<LpmV6> {
        match self.addr {
            IpAddr::V6(a) => Some(LpmV6 {
                prefixlen: self.prefix as u32,
                addr: a.octets(),
            }),
            IpAddr::V4(_) => None,
        }
    }

    pub(crate) fn from_v4(k: LpmV4) -> Option<Cidr> {
        Cidr::new(
            IpAddr::V4(Ipv4Addr::from(k.addr)),
            u8::try_from(k.prefixlen).ok()?,
        )
        .ok()
    }

    pub(crate) fn from_v6(k: LpmV6) -> Option<Cidr> {
        Cidr::new(
            IpAddr::V6(Ipv6Addr::from(k.addr)),
            u8::try_from(k.prefixlen).ok()?,
        )
        .ok()
    }
}

fn mask(addr: IpAddr, prefix: u8) -> IpAddr {
    match addr {
        IpAddr::V4(a) => {
            let m = u32::MAX.checked_shl(32 - prefix as u32).unwrap_or(0);
            IpAddr::V4(Ipv4Addr::from(u32::from(a) & m))
        }
        IpAddr::V6(a) => {
            let m = u128::MAX.checked_shl(128 - prefix as u32).unwrap_or(0);
            IpAddr::V6(Ipv6Addr::from(u128::from(a) & m))
        }
    }
}

impl From<IpAddr> for Cidr {
    /// The host prefix of one address.
    fn from(addr: IpAddr) -> Cidr {
        let prefix = if addr.is_ipv4() { 32 } else { 128 };
        Cidr { addr, prefix }
    }
}

impl FromStr for Cidr {
    type Err = String;

    fn from_str(s: &str) -> Result<Cidr, String> {
        let (a, p) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let a = a
            .strip_prefix('[')
            .and_then(|x| x.strip_suffix(']'))
            .unwrap_or(a);
        let addr: IpAddr = a.parse().map_err(|_| {
            format!("{s:?} is not an address or prefix (like 203.0.113.0/24 or 2001:db8::/32)")
        })?;
        match p {
            None => Ok(Cidr::from(addr)),
            Some(p) => {
                let p: u8 = p
                    .parse()
                    .map_err(|_| format!("{s:?}: the prefix length after / must be a number"))?;
                Cidr::new(addr, p)
            }
        }
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_masks() {
        let c: Cidr = "203.0.113.77/24".parse().unwrap();
        assert_eq!(c.to_string(), "203.0.113.0/24");
        assert!(c.contains("203.0.113.1".parse().unwrap()));
        assert!(!c.contains("203.0.114.1".parse().unwrap()));
        assert_eq!(
            "10.1.2.3".parse::<Cidr>().unwrap().to_string(),
            "10.1.2.3/32"
        );
        assert_eq!("0.0.0.0/0".parse::<Cidr>().unwrap().prefix_len(), 0);
        let v6: Cidr = "2001:db8:1:2::5/48".parse().unwrap();
        assert_eq!(v6.to_string(), "2001:db8:1::/48");
        assert_eq!("[::1]".parse::<Cidr>().unwrap().to_string(), "::1/128");
        assert!(!v6.contains("10.0.0.1".parse().unwrap()));
    }

    #[test]
    fn rejects_garbage() {
        for bad in [
            "",
            "10.0.0.1/33",
            "::/129",
            "10.0.0/8",
            "x/8",
            "10.0.0.0/x",
            "10.0.0.0/-1",
        ] {
            assert!(bad.parse::<Cidr>().is_err(), "{bad}");
        }
    }

    #[test]
    fn lpm_keys_round_trip() {
        let c: Cidr = "198.51.100.0/24".parse().unwrap();
        let k = c.lpm_v4().unwrap();
        assert_eq!(k.prefixlen, 24);
        assert_eq!(k.addr, [198, 51, 100, 0]);
        assert_eq!(
            Cidr::from_v4(crate::abi::LpmV4::from_bytes(&k.to_bytes())),
            Some(c)
        );
        let c6: Cidr = "2001:db8::/32".parse().unwrap();
        assert!(c6.lpm_v4().is_none());
        assert_eq!(Cidr::from_v6(c6.lpm_v6().unwrap()), Some(c6));
    }
}
