//! The served-port syntax of the port filter, shared by `ringx xdp attach --port` and the
//! `[xdp] ports` configuration key.

use std::str::FromStr;

/// A port the port filter lets through: `80` or `80/tcp` (TCP), `53/udp`, `443/both`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServedPort {
    pub port: u16,
    pub tcp: bool,
    pub udp: bool,
}

impl FromStr for ServedPort {
    type Err = String;

    fn from_str(s: &str) -> Result<ServedPort, String> {
        let (p, proto) = s.split_once('/').unwrap_or((s, "tcp"));
        let port: u16 = p
            .parse()
            .map_err(|_| format!("port {s:?}: expected PORT[/tcp|/udp|/both]"))?;
        let (tcp, udp) = match proto {
            "tcp" => (true, false),
            "udp" => (false, true),
            "both" => (true, true),
            _ => return Err(format!("port {s:?}: the protocol is tcp, udp or both")),
        };
        Ok(ServedPort { port, tcp, udp })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<(u16, bool, bool), String> {
        s.parse::<ServedPort>().map(|p| (p.port, p.tcp, p.udp))
    }

    #[test]
    fn ports() {
        assert_eq!(parse("80"), Ok((80, true, false)));
        assert_eq!(parse("80/tcp"), Ok((80, true, false)));
        assert_eq!(parse("53/udp"), Ok((53, false, true)));
        assert_eq!(parse("443/both"), Ok((443, true, true)));
        assert!(parse("x").is_err());
        assert!(parse("80/sctp").unwrap_err().contains("tcp, udp or both"));
        assert!(parse("70000").is_err());
    }
}
