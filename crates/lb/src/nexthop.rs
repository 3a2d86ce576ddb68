//! Where a backend's packets go: the device, the next hop's MAC and the device's MTU, read
//! from the kernel's routing and neighbour tables with iproute2 (`ip route get`, `ip neigh`),
//! as an operator would check them. The balancer program then needs no route lookup per
//! packet (and no GPL-only helper). A next hop whose neighbour entry is missing is provoked
//! (one UDP datagram to the discard port) and looked up again for up to a second.

use std::io;
use std::net::{IpAddr, UdpSocket};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::control::NextHop;

/// A route as `ip route get` tells it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    pub dev: String,
    /// The gateway, or None when the address is on the link.
    pub via: Option<IpAddr>,
    /// The source address the kernel would use.
    pub src: Option<IpAddr>,
}

fn ip(args: &[&str]) -> io::Result<String> {
    let out = Command::new("ip").args(args).output().map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("run ip (iproute2) {}: {e}", args.join(" ")),
        )
    })?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Parses one line of `ip -o route get` (pure, for tests).
pub fn parse_route(line: &str) -> Option<Route> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let after = |key: &str| {
        words
            .iter()
            .position(|w| *w == key)
            .and_then(|i| words.get(i + 1).copied())
    };
    Some(Route {
        dev: after("dev")?.to_string(),
        via: after("via").and_then(|v| v.parse().ok()),
        src: after("src").and_then(|v| v.parse().ok()),
    })
}

/// Parses `ip -o neigh show` output for the MAC of a usable entry (pure, for tests).
pub fn parse_neigh(out: &str) -> Option<[u8; 6]> {
    for line in out.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.iter().any(|w| *w == "FAILED" || *w == "INCOMPLETE") {
            continue;
        }
        if let Some(i) = words.iter().position(|w| *w == "lladdr") {
            if let Some(mac) = words.get(i + 1).and_then(|m| parse_mac(m)) {
                return Some(mac);
            }
        }
    }
    None
}

pub fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut mac = [0u8; 6];
    let mut parts = s.split(':');
    for b in &mut mac {
        *b = u8::from_str_radix(parts.next()?, 16).ok()?;
    }
    parts.next().is_none().then_some(mac)
}

/// The route the kernel would take to `addr`.
pub fn route(addr: IpAddr) -> io::Result<Route> {
    let a = addr.to_string();
    let out = ip(&["-o", "route", "get", &a])?;
    parse_route(&out)
        .ok_or_else(|| io::Error::other(format!("no device in `ip route get {a}`: {out}")))
}

/// The MTU and MAC address of a device from one line of `ip -o link show` (pure, for tests).
/// Read through netlink rather than /sys/class/net, which shows the network namespace /sys
/// was mounted in, not necessarily the caller's (`nsenter --net` keeps the host's /sys).
pub fn parse_link(line: &str) -> (Option<u32>, Option<[u8; 6]>) {
    let words: Vec<&str> = line.split_whitespace().collect();
    let after = |key: &str| {
        words
            .iter()
            .position(|w| *w == key)
            .and_then(|i| words.get(i + 1).copied())
    };
    (
        after("mtu").and_then(|m| m.parse().ok()),
        after("link/ether").and_then(parse_mac),
    )
}

/// The next hop towards `addr`: device, MACs, MTU. Errors when the route or the neighbour
/// cannot be found.
pub fn resolve(addr: IpAddr) -> io::Result<NextHop> {
    let r = route(addr)?;
    let hop = r.via.unwrap_or(addr);
    let hop_s = hop.to_string();
    let deadline = Instant::now() + Duration::from_secs(1);
    let mut provoked = false;
    let dmac = loop {
        let out = ip(&["-o", "neigh", "show", "to", &hop_s, "dev", &r.dev])?;
        if let Some(mac) = parse_neigh(&out) {
            break mac;
        }
        if Instant::now() >= deadline {
            return Err(io::Error::other(format!(
                "no neighbour entry for {hop} on {} (the next hop towards {addr})",
                r.dev
            )));
        }
        if !provoked {
            // Any datagram makes the kernel resolve the next hop.
            let bind = if addr.is_ipv4() {
                "0.0.0.0:0"
            } else {
                "[::]:0"
            };
            if let Ok(s) = UdpSocket::bind(bind) {
                let _ = s.send_to(b"", (addr, 9));
            }
            provoked = true;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let (mtu, smac) = parse_link(&ip(&["-o", "link", "show", "dev", &r.dev])?);
    let smac = smac.unwrap_or_default();
    let mtu = mtu.map_or(0, |m| m.min(u32::from(u16::MAX)) as u16);
    let ifindex = ringx_xdp::sys::ifindex(&r.dev)
        .ok_or_else(|| io::Error::other(format!("device {} vanished", r.dev)))?;
    Ok(NextHop {
        ifindex,
        mtu,
        dmac,
        smac,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_routes() {
        let r =
            parse_route("10.0.0.2 via 10.0.1.1 dev veth0 src 10.0.1.2 uid 0 \\    cache").unwrap();
        assert_eq!(r.dev, "veth0");
        assert_eq!(r.via, Some("10.0.1.1".parse().unwrap()));
        assert_eq!(r.src, Some("10.0.1.2".parse().unwrap()));
        let r =
            parse_route("fd00::2 from :: dev lb0 proto kernel src fd00::1 metric 256 pref medium")
                .unwrap();
        assert_eq!((r.dev.as_str(), r.via), ("lb0", None));
        assert_eq!(r.src, Some("fd00::1".parse().unwrap()));
        assert_eq!(parse_route("unreachable"), None);
    }

    #[test]
    fn parses_links() {
        let l = "84: l0@if83: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1600 qdisc noqueue state UP \
                 mode DEFAULT group default qlen 1000\\    link/ether 4e:53:b5:79:0d:4a brd \
                 ff:ff:ff:ff:ff:ff link-netns lbr1";
        assert_eq!(
            parse_link(l),
            (Some(1600), Some([0x4e, 0x53, 0xb5, 0x79, 0x0d, 0x4a]))
        );
        assert_eq!(
            parse_link("1: lo: <LOOPBACK> mtu 65536 link/loopback 00:00:00:00:00:00"),
            (Some(65536), None)
        );
    }

    #[test]
    fn parses_neighbours() {
        assert_eq!(
            parse_neigh("10.0.1.1 lladdr 02:00:00:00:00:0a STALE\n"),
            Some([2, 0, 0, 0, 0, 10])
        );
        assert_eq!(parse_neigh("10.0.1.1  INCOMPLETE\n"), None);
        assert_eq!(
            parse_neigh("10.0.1.1 lladdr 02:00:00:00:00:0a FAILED\n"),
            None
        );
        assert_eq!(parse_neigh(""), None);
        assert_eq!(parse_mac("02:00:00:00:00"), None);
        assert_eq!(parse_mac("02:00:00:00:00:0a:0b"), None);
    }
}
