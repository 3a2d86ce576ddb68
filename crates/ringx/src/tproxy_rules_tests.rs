//! The rules written for a configuration: what each backend gets, and that every removal
//! takes back exactly its addition.

use super::*;

const CONF: &str = r#"
[[server]]
listen = ["0.0.0.0:8080"]
transparent = true
  [[server.location]]
  path = "/"
  proxy_pass = "web"

[[upstream]]
name = "web"
servers = ["10.0.2.2:80"]
bind = "client"

[[stream]]
listen = ["127.0.0.1:5353"]
proxy_pass = "10.0.2.2:53"
transparent = true

[[stream]]
listen = ["127.0.0.1:5354"]
protocol = "udp"
proxy_pass = "10.0.2.2:53"
bind = "client"

[tproxy]
mark = 2
table = 123
  [[tproxy.divert]]
  ports = [80, 443]
  destinations = ["10.0.2.0/24"]
  interfaces = ["veth1"]
  to = "0.0.0.0:8080"
  [[tproxy.divert]]
  ports = [53]
  to = "127.0.0.1:5353"
"#;

fn cfg(text: &str) -> Config {
    ringx_config::parse("t.toml", text).unwrap_or_else(|e| panic!("{e}"))
}

fn lines(p: &Plan) -> Vec<String> {
    p.steps.iter().map(|s| shell(&s.add)).collect()
}

#[test]
fn iptables_rules_follow_the_configuration() {
    let p = plan(&cfg(CONF), Backend::Iptables);
    let l = lines(&p);
    let want = [
        "ip -4 rule add fwmark 0x2/0x2 lookup 123",
        "ip -4 route add local 0.0.0.0/0 dev lo table 123",
        "iptables -w -t mangle -N RINGX_DIVERT_123",
        "iptables -w -t mangle -A RINGX_DIVERT_123 -j MARK --set-xmark 0x2/0x2",
        "iptables -w -t mangle -A RINGX_DIVERT_123 -j ACCEPT",
        "iptables -w -t mangle -N RINGX_TPROXY_123",
        "iptables -w -t mangle -A RINGX_TPROXY_123 -p tcp -m socket --transparent -j RINGX_DIVERT_123",
        "iptables -w -t mangle -A RINGX_TPROXY_123 -p udp -m socket --transparent -j RINGX_DIVERT_123",
        "iptables -w -t mangle -A RINGX_TPROXY_123 -p tcp -i veth1 -d 10.0.2.0/24 -m multiport \
         --dports 80,443 -j TPROXY --on-port 8080 --tproxy-mark 0x2/0x2",
        "iptables -w -t mangle -A RINGX_TPROXY_123 -p tcp -m multiport --dports 53 -j TPROXY \
         --on-port 5353 --on-ip 127.0.0.1 --tproxy-mark 0x2/0x2",
        "iptables -w -t mangle -I PREROUTING 1 -j RINGX_TPROXY_123",
    ];
    assert_eq!(l, want);
    assert!(!l
        .iter()
        .any(|x| x.contains("ip6tables") || x.contains("-6")));
}

/// Every removal is its addition with the verb turned around, and nothing else.
#[test]
fn each_removal_undoes_its_addition() {
    for backend in [Backend::Iptables, Backend::Nft] {
        for s in plan(&cfg(CONF), backend).steps {
            let (a, d) = (shell(&s.add), shell(&s.del));
            let inverse = a
                .replace(" rule add ", " rule del ")
                .replace(" route add ", " route del ")
                .replace(" -N ", " -X ")
                .replace(" -A ", " -D ")
                .replace(" -I PREROUTING 1 ", " -D PREROUTING ");
            if backend == Backend::Nft && s.stdin.is_some() {
                assert_eq!(d, "nft delete table inet ringx_tproxy_123");
                continue;
            }
            assert_eq!(d, inverse, "{a}");
        }
    }
}

#[test]
fn nft_rules_follow_the_configuration() {
    let p = plan(&cfg(CONF), Backend::Nft);
    let script = p
        .steps
        .last()
        .and_then(|s| s.stdin.clone())
        .expect("an nft script");
    for want in [
        "table inet ringx_tproxy_123 {",
        "type filter hook prerouting priority mangle; policy accept;",
        "meta l4proto { tcp, udp } socket transparent 1 meta mark set meta mark | 0x2 accept",
        "iifname { \"veth1\" } ip daddr { 10.0.2.0/24 } meta l4proto tcp th dport { 80, 443 } \
         tproxy ip to :8080 meta mark set meta mark | 0x2 accept",
        "meta nfproto ipv4 meta l4proto tcp th dport { 53 } tproxy ip to 127.0.0.1:5353 meta \
         mark set meta mark | 0x2 accept",
    ] {
        assert!(script.contains(want), "missing {want:?} in\n{script}");
    }
    assert_eq!(
        lines(&p)[..2],
        [
            "ip -4 rule add fwmark 0x2/0x2 lookup 123",
            "ip -4 route add local 0.0.0.0/0 dev lo table 123"
        ]
    );
}

/// An IPv6 listener brings the IPv6 routing and ip6tables; bind = "client" alone (no
/// divert) still marks replies to transparent sockets, with the defaults (mark 1, table 100).
#[test]
fn families_and_defaults() {
    let v6 = CONF
        .replace("\"0.0.0.0:8080\"", "\"[::]:8080\"")
        .replace("\"10.0.2.0/24\"", "\"2001:db8::/64\"");
    let l = lines(&plan(&cfg(&v6), Backend::Iptables));
    assert!(l.contains(&"ip -6 route add local ::/0 dev lo table 123".to_string()));
    assert!(l.iter().any(|x| x.starts_with(
        "ip6tables -w -t mangle -A RINGX_TPROXY_123 -p tcp -i veth1 -d 2001:db8::/64"
    )));
    let bind_only = r#"
[[server]]
listen = ["127.0.0.1:8080"]
  [[server.location]]
  path = "/"
  proxy_pass = "web"
[[upstream]]
name = "web"
servers = ["10.0.2.2:80"]
bind = "client"
"#;
    let l = lines(&plan(&cfg(bind_only), Backend::Iptables));
    assert_eq!(l[0], "ip -4 rule add fwmark 0x1/0x1 lookup 100");
    assert!(l.contains(&"iptables -w -t mangle -A RINGX_TPROXY_100 -p tcp -m socket --transparent -j RINGX_DIVERT_100".to_string()));
    assert!(!l.iter().any(|x| x.contains("TPROXY --on-port")));
}

#[test]
fn shell_quotes_what_needs_it() {
    let a: Vec<String> = ["nft", "-f", "-", "a b", "it's"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(shell(&a), "nft -f - 'a b' 'it'\\''s'");
}
