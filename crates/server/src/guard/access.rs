//! `access` rules (nginx's `allow`/`deny`) and the real client address behind trusted proxies
//! (nginx's realip module: `real_ip_from`, `real_ip_header`, `real_ip_recursive`).

use std::net::IpAddr;

use ringx_config::guard::AccessRule;
use ringx_http::Request;
use ringx_xdp::Cidr;

/// Whether `ip` may pass `rules`: the first rule that matches decides; none matching allows
/// (as nginx). IPv4-mapped IPv6 addresses (a dual-stack listener's IPv4 clients) match IPv4
/// rules.
pub fn allowed(rules: &[AccessRule], ip: Option<IpAddr>) -> bool {
    let ip = ip.map(|i| i.to_canonical());
    for r in rules {
        let hit = match (r.from, ip) {
            (None, _) => true,
            (Some(c), Some(ip)) => c.contains(ip),
            (Some(_), None) => false,
        };
        if hit {
            return r.allow;
        }
    }
    true
}

/// The real-address rule, compiled.
pub struct RealIp {
    pub from: Vec<Cidr>,
    /// The header, lowercase.
    pub header: String,
    pub recursive: bool,
}

impl RealIp {
    fn trusted(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.from.iter().any(|c| c.contains(ip))
    }

    /// The client's address for a request that came from `peer`: `peer` unless it is a
    /// trusted proxy and the header names another. With `recursive`, the header's addresses
    /// are read from the right and trusted ones skipped (the first untrusted one is the
    /// client; all trusted: the leftmost); without, the rightmost one is taken. An address
    /// that does not parse leaves `peer` (as nginx ignores it).
    pub fn client(&self, peer: IpAddr, req: &Request) -> IpAddr {
        if !self.trusted(peer) {
            return peer;
        }
        let mut found: Option<IpAddr> = None;
        // Every copy of the header, in order, as one list.
        let values = req
            .headers
            .iter()
            .filter(|h| h.name.eq_ignore_ascii_case(&self.header))
            .flat_map(|h| h.value.split(|&b| b == b','))
            .collect::<Vec<_>>();
        for v in values.iter().rev() {
            let Some(ip) = parse_ip(v) else {
                return found.unwrap_or(peer);
            };
            found = Some(ip);
            if !self.recursive || !self.trusted(ip) {
                break;
            }
        }
        found.unwrap_or(peer)
    }
}

/// One address of a client-address header: `1.2.3.4`, `2001:db8::1`, `[2001:db8::1]`, maybe
/// with spaces around.
fn parse_ip(v: &[u8]) -> Option<IpAddr> {
    let s = std::str::from_utf8(v.trim_ascii()).ok()?;
    let s = s
        .strip_prefix('[')
        .and_then(|x| x.strip_suffix(']'))
        .unwrap_or(s);
    s.parse().ok().map(|ip: IpAddr| ip.to_canonical())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(r: &[&str]) -> Vec<AccessRule> {
        r.iter().map(|s| AccessRule::parse(s).unwrap()).collect()
    }

    #[test]
    fn the_first_matching_rule_decides() {
        let r = rules(&[
            "deny 10.1.0.0/16",
            "allow 10.0.0.0/8",
            "allow ::1",
            "deny all",
        ]);
        let ok = |ip: &str| allowed(&r, Some(ip.parse().unwrap()));
        assert!(!ok("10.1.2.3"), "denied before the wider allow");
        assert!(ok("10.2.3.4"));
        assert!(ok("::1"));
        assert!(ok("::ffff:10.2.3.4"), "an IPv4-mapped address is IPv4");
        assert!(!ok("192.0.2.1"));
        assert!(!ok("2001:db8::1"));
        assert!(allowed(
            &rules(&["deny 192.0.2.0/24"]),
            Some("10.0.0.1".parse().unwrap())
        ));
        assert!(!allowed(&r, None), "no address: only `all` rules match");
    }

    fn client(rule: &RealIp, peer: &str, raw: &str) -> String {
        let mut hs = [httparse::EMPTY_HEADER; 16];
        let req = match ringx_http::parse_request(raw.as_bytes(), &mut hs, &Default::default()) {
            Ok(ringx_http::Parsed::Complete(r)) => r,
            _ => panic!("parses"),
        };
        rule.client(peer.parse().unwrap(), &req).to_string()
    }

    /// nginx's realip: only a trusted peer's header counts; the rightmost address, or with
    /// recursion the rightmost untrusted one.
    #[test]
    fn real_ip_follows_nginx() {
        let mut r = RealIp {
            from: vec!["10.0.0.0/8".parse().unwrap()],
            header: "x-forwarded-for".into(),
            recursive: false,
        };
        let h = "GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: 203.0.113.9, 10.0.0.7\r\n\
                 X-Forwarded-For: 10.0.0.8\r\n\r\n";
        assert_eq!(client(&r, "192.0.2.1", h), "192.0.2.1", "untrusted peer");
        assert_eq!(client(&r, "10.0.0.1", h), "10.0.0.8", "rightmost");
        r.recursive = true;
        assert_eq!(
            client(&r, "10.0.0.1", h),
            "203.0.113.9",
            "skips trusted ones"
        );
        let all = "GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: 10.0.0.9, 10.0.0.7\r\n\r\n";
        assert_eq!(
            client(&r, "10.0.0.1", all),
            "10.0.0.9",
            "all trusted: leftmost"
        );
        let bad = "GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: junk\r\n\r\n";
        assert_eq!(client(&r, "10.0.0.1", bad), "10.0.0.1");
        let v6 = "GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: [2001:db8::5]\r\n\r\n";
        assert_eq!(client(&r, "10.0.0.1", v6), "2001:db8::5");
        let none = "GET / HTTP/1.1\r\nHost: a\r\n\r\n";
        assert_eq!(client(&r, "10.0.0.1", none), "10.0.0.1");
    }
}
