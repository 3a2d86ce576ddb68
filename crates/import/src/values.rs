//! nginx's value syntax turned into ringx's: times (`1h30m`, `1d`), sizes (`4G`), listen
//! addresses (`80`, `*:80`, `[::]:443`, `localhost:8080`).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

/// Milliseconds of an nginx time (`ngx_parse_time`: units ms s m h d w M y, combinable;
/// a bare number is seconds).
pub fn time_ms(s: &str) -> Option<u64> {
    if s.is_empty() {
        return None;
    }
    let b = s.as_bytes();
    let mut total: u64 = 0;
    let mut i = 0;
    while i < b.len() {
        let start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        if start == i {
            return None;
        }
        let n: u64 = s[start..i].parse().ok()?;
        let (mul, len) = match (b.get(i), b.get(i + 1)) {
            (Some(b'm'), Some(b's')) => (1, 2),
            (Some(b's'), _) => (1000, 1),
            (Some(b'm'), _) => (60_000, 1),
            (Some(b'h'), _) => (3_600_000, 1),
            (Some(b'd'), _) => (86_400_000, 1),
            (Some(b'w'), _) => (7 * 86_400_000, 1),
            (Some(b'M'), _) => (30 * 86_400_000, 1),
            (Some(b'y'), _) => (365 * 86_400_000, 1),
            (None, _) => (1000, 0),
            _ => return None,
        };
        total = total.checked_add(n.checked_mul(mul)?)?;
        i += len;
    }
    Some(total)
}

/// An nginx time as ringx writes durations.
pub fn duration(s: &str) -> Option<String> {
    let ms = time_ms(s)?;
    Some(if ms % 1000 == 0 {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    })
}

/// An nginx size (`1024`, `16k`, `10M`, `4G`) as ringx writes sizes.
pub fn size(s: &str) -> Option<String> {
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let _: u64 = num.parse().ok()?;
    match unit {
        "" => Some(num.to_string()),
        "k" | "K" | "m" | "M" | "g" | "G" => Some(format!("{num}{}", unit.to_ascii_lowercase())),
        _ => None,
    }
}

/// Bytes of an nginx size.
pub fn size_bytes(s: &str) -> Option<u64> {
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = num.parse().ok()?;
    let mul = match unit {
        "" => 1,
        "k" | "K" => 1 << 10,
        "m" | "M" => 1 << 20,
        "g" | "G" => 1 << 30,
        _ => return None,
    };
    n.checked_mul(mul)
}

/// The socket address of a `listen` address, as nginx reads it: a port alone or `*:port` is
/// every IPv4 address; an address alone is port 80; a name is resolved (its first address).
pub fn listen_addr(spec: &str) -> Result<SocketAddr, String> {
    if spec.starts_with("unix:") {
        return Err("ringx does not listen on UNIX-domain sockets".into());
    }
    if let Ok(port) = spec.parse::<u16>() {
        return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port));
    }
    if let Ok(a) = spec.parse::<SocketAddr>() {
        return Ok(a);
    }
    if let Some(port) = spec.strip_prefix("*:") {
        let port = port
            .parse::<u16>()
            .map_err(|_| format!("bad port in {spec:?}"))?;
        return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port));
    }
    if let Ok(ip) = spec.trim_matches(['[', ']']).parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, 80));
    }
    let with_port = if spec.contains(':') {
        spec.to_string()
    } else {
        format!("{spec}:80")
    };
    use std::net::ToSocketAddrs;
    with_port
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| format!("{spec:?} does not resolve to an address"))
}

/// An upstream `server` address as ringx takes it (`host:port`; nginx's default port 80).
pub fn upstream_addr(spec: &str, default_port: Option<u16>) -> Result<String, String> {
    if spec.starts_with("unix:") {
        return Err("ringx does not connect to UNIX-domain sockets".into());
    }
    if spec.parse::<SocketAddr>().is_ok() {
        return Ok(spec.to_string());
    }
    let bare = spec.trim_matches(['[', ']']);
    if let Ok(ip) = bare.parse::<IpAddr>() {
        return match default_port {
            Some(p) => Ok(SocketAddr::new(ip, p).to_string()),
            None => Err(format!("{spec:?} has no port")),
        };
    }
    match spec.rsplit_once(':') {
        Some((_, p)) if p.parse::<u16>().is_ok() => Ok(spec.to_string()),
        _ => match default_port {
            Some(p) => Ok(format!("{spec}:{p}")),
            None => Err(format!("{spec:?} has no port")),
        },
    }
}

/// `$proxy_host` as nginx computes it for `proxy_pass http://HOSTPORT`: the port left out
/// when it is the scheme's.
pub fn proxy_host(hostport: &str, https: bool) -> String {
    let default = if https { ":443" } else { ":80" };
    hostport
        .strip_suffix(default)
        .unwrap_or(hostport)
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_as_nginx_parses_them() {
        assert_eq!(time_ms("30"), Some(30_000));
        assert_eq!(time_ms("1h30m"), Some(5_400_000));
        assert_eq!(time_ms("500ms"), Some(500));
        assert_eq!(time_ms("1d"), Some(86_400_000));
        assert_eq!(time_ms("x"), None);
        assert_eq!(duration("1h30m").as_deref(), Some("5400s"));
        assert_eq!(duration("1500ms").as_deref(), Some("1500ms"));
    }

    #[test]
    fn sizes_and_addresses() {
        assert_eq!(size("4G").as_deref(), Some("4g"));
        assert_eq!(size_bytes("10m"), Some(10 << 20));
        assert_eq!(size("1x"), None);
        assert_eq!(listen_addr("80").unwrap().to_string(), "0.0.0.0:80");
        assert_eq!(listen_addr("*:8080").unwrap().to_string(), "0.0.0.0:8080");
        assert_eq!(listen_addr("[::]:443").unwrap().to_string(), "[::]:443");
        assert_eq!(
            listen_addr("127.0.0.1").unwrap().to_string(),
            "127.0.0.1:80"
        );
        assert!(listen_addr("unix:/x").is_err());
        assert_eq!(upstream_addr("10.0.0.1", Some(80)).unwrap(), "10.0.0.1:80");
        assert_eq!(
            upstream_addr("app.local", Some(80)).unwrap(),
            "app.local:80"
        );
        assert!(upstream_addr("app.local", None).is_err());
        assert_eq!(proxy_host("127.0.0.1:80", false), "127.0.0.1");
    }
}
