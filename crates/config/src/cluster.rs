//! `[cluster]`: several ringx hosts sharing state through Redis (issue 42). Today that is
//! the ACME account and certificates, ordered by one host under a Redis lock and loaded by
//! the others (`ringx_acme::storage_redis`), and purges and drains sent to every host over
//! pub/sub (docs/cluster.md); the client is `ringx_cluster`.
//!
//! ```toml
//! [cluster]
//! redis = ["10.0.0.5:6379"]          # the first that answers as a master is used
//! # or, with Sentinel following failovers:
//! # sentinel = ["10.0.0.5:26379", "10.0.0.6:26379", "10.0.0.7:26379"]
//! # master = "ringx"
//! username = "ringx"                 # a Redis 6 ACL user (needs password)
//! password = "secret"                # AUTH; without username, the default user's
//! tls = true                         # or { ca = "ca.pem", sni = "redis.internal",
//!                                    #      cert = "client.pem", key = "client.key" }
//! prefix = "ringx:"                  # every key ringx writes starts with this
//! connect_timeout = "1s"             # TCP connect and TLS handshake, per address
//! timeout = "500ms"                  # a command's budget: no caller waits longer
//! host_id = "web-1"                  # this host in purges and drains sent to every host;
//!                                    # default: HOSTNAME:ADMIN_PORT (HOSTNAME without [admin])
//! confirm_timeout = "2s"             # how long a purge or drain `?cluster=1` waits for
//!                                    # the other hosts' confirmations
//! events_secret = "..."              # the same on every host: messages between hosts are
//!                                    # authenticated (HMAC-SHA256); drains need it
//! ```
//!
//! `tls` takes the keys of `[[upstream]] tls` (`ca`, `sni`, `verify`, `cert`, `key`); the
//! files are only named here and read when the client starts.

use serde::Deserialize;
use toml::Spanned;

use crate::error::{ConfigError, Source};
use crate::tls::UpstreamTls;
use crate::units::Dur;

/// The `[cluster]` section.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cluster {
    /// Redis servers as `host:port`, tried in order.
    pub redis: Option<Spanned<Vec<Spanned<String>>>>,
    /// Sentinels as `host:port`, asked in order for `master`'s address.
    pub sentinel: Option<Spanned<Vec<Spanned<String>>>>,
    /// The master's name the sentinels monitor.
    pub master: Option<Spanned<String>>,
    pub username: Option<Spanned<String>>,
    pub password: Option<Spanned<String>>,
    pub tls: Option<Spanned<ClusterTls>>,
    #[serde(default = "default_prefix")]
    pub prefix: Spanned<String>,
    #[serde(default = "default_connect_timeout")]
    pub connect_timeout: Spanned<Dur>,
    #[serde(default = "default_timeout")]
    pub timeout: Spanned<Dur>,
    /// This host's name in the messages between hosts; default `HOSTNAME:ADMIN_PORT`.
    pub host_id: Option<Spanned<String>>,
    /// How long a purge or drain sent to every host waits for their confirmations.
    #[serde(default = "default_confirm_timeout")]
    pub confirm_timeout: Spanned<Dur>,
    /// The key of the MACs (HMAC-SHA256) of the messages between hosts; without it anyone
    /// who can publish in Redis can purge every host's cache, and drains are not sent.
    pub events_secret: Option<Spanned<String>>,
}

/// `tls = true | false | { ca, sni, verify, cert, key }`.
#[derive(Debug, Clone)]
pub enum ClusterTls {
    Off,
    On(UpstreamTls),
}

// Not `#[serde(untagged)]`, for the reason `TlsValue` gives: `Spanned` inside the table.
impl<'de> Deserialize<'de> for ClusterTls {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct ClusterTlsVisitor;
        impl<'de> serde::de::Visitor<'de> for ClusterTlsVisitor {
            type Value = ClusterTls;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("true, false or a table { ca = \"...\", sni = \"...\", cert = \"...\", key = \"...\" }")
            }
            fn visit_bool<E: serde::de::Error>(self, on: bool) -> Result<ClusterTls, E> {
                Ok(match on {
                    false => ClusterTls::Off,
                    true => ClusterTls::On(UpstreamTls {
                        sni: None,
                        ca: None,
                        verify: true,
                        cert: None,
                        key: None,
                    }),
                })
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<ClusterTls, A::Error> {
                UpstreamTls::deserialize(serde::de::value::MapAccessDeserializer::new(map))
                    .map(ClusterTls::On)
            }
        }
        d.deserialize_any(ClusterTlsVisitor)
    }
}

fn default_prefix() -> Spanned<String> {
    Spanned::new(0..0, "ringx:".into())
}
fn default_connect_timeout() -> Spanned<Dur> {
    Spanned::new(0..0, Dur(std::time::Duration::from_secs(1)))
}
fn default_timeout() -> Spanned<Dur> {
    Spanned::new(0..0, Dur(std::time::Duration::from_millis(500)))
}
fn default_confirm_timeout() -> Spanned<Dur> {
    Spanned::new(0..0, Dur(std::time::Duration::from_secs(2)))
}

/// Whether `s` can be a host id: 1 to 64 printable ASCII characters, no space.
pub fn is_host_id(s: &str) -> bool {
    !s.is_empty() && s.len() <= 64 && s.bytes().all(|b| b.is_ascii_graphic())
}

impl Cluster {
    /// The TLS settings, when on.
    pub fn tls(&self) -> Option<&UpstreamTls> {
        match self.tls.as_ref().map(|t| t.get_ref()) {
            Some(ClusterTls::On(t)) => Some(t),
            _ => None,
        }
    }
}

/// Whether `s` is `host:port` (`[v6]:port` for an IPv6 address) with a port from 1.
pub fn is_endpoint(s: &str) -> bool {
    let Some((host, port)) = s.rsplit_once(':') else {
        return false;
    };
    let host_ok = if let Some(v6) = host.strip_prefix('[') {
        v6.strip_suffix(']')
            .is_some_and(|a| a.parse::<std::net::Ipv6Addr>().is_ok())
    } else {
        !host.is_empty()
            && host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b))
    };
    host_ok && port.parse::<u16>().is_ok_and(|p| p > 0)
}

/// Checks `[cluster]`: exactly one of `redis` and `sentinel`, `master` with `sentinel`,
/// addresses, the prefix, the timeouts and the TLS files' pairing.
pub(crate) fn validate(c: &Spanned<Cluster>, src: &Source) -> Result<(), ConfigError> {
    let cl = c.get_ref();
    let list =
        match (&cl.redis, &cl.sentinel) {
            (Some(_), Some(s)) => {
                return Err(src.err(
                    s.span(),
                    "[cluster] has both redis and sentinel: give redis = [\"host:port\", ...] for \
                 fixed servers, or sentinel = [...] with master = \"NAME\" to follow failovers",
                ))
            }
            (None, None) => return Err(src.err(
                c.span(),
                "[cluster] needs redis = [\"host:port\", ...], or sentinel = [\"host:port\", ...] \
                 with master = \"NAME\"",
            )),
            (Some(r), None) => ("redis", r),
            (None, Some(s)) => ("sentinel", s),
        };
    if list.1.get_ref().is_empty() {
        return Err(src.err(
            list.1.span(),
            format!("{} is empty: list at least one \"host:port\"", list.0),
        ));
    }
    for a in list.1.get_ref() {
        if !is_endpoint(a.get_ref()) {
            return Err(src.err(
                a.span(),
                format!(
                    "{:?}: a {} address is \"host:port\" (\"[::1]:6379\" for IPv6), port 1-65535",
                    a.get_ref(),
                    list.0
                ),
            ));
        }
    }
    match (&cl.sentinel, &cl.master) {
        (Some(s), None) => {
            return Err(src.err(
                s.span(),
                "sentinel needs master = \"NAME\": the name the sentinels monitor the master by",
            ))
        }
        (None, Some(m)) => {
            return Err(src.err(
                m.span(),
                "master is for sentinel: with fixed servers (redis = [...]) leave it out",
            ))
        }
        (Some(_), Some(m)) => {
            let name = m.get_ref();
            if name.is_empty() || name.bytes().any(|b| b.is_ascii_whitespace() || b < 0x20) {
                return Err(src.err(
                    m.span(),
                    format!("master = {name:?}: a name without spaces, as in sentinel.conf"),
                ));
            }
        }
        (None, None) => {}
    }
    if let (Some(u), None) = (&cl.username, &cl.password) {
        return Err(src.err(
            u.span(),
            "username needs password: Redis authenticates an ACL user with both",
        ));
    }
    let p = cl.prefix.get_ref();
    if p.is_empty()
        || p.len() > 64
        || p.bytes()
            .any(|b| b.is_ascii_whitespace() || b.is_ascii_control())
    {
        return Err(src.err(
            cl.prefix.span(),
            format!("prefix = {p:?}: 1 to 64 characters without spaces, like \"ringx:\""),
        ));
    }
    if let Some(h) = &cl.host_id {
        if !is_host_id(h.get_ref()) {
            return Err(src.err(
                h.span(),
                format!(
                    "host_id = {:?}: 1 to 64 printable characters without spaces, like \"web-1\"",
                    h.get_ref()
                ),
            ));
        }
    }
    if let Some(k) = &cl.events_secret {
        if k.get_ref().len() < 16 {
            return Err(src.err(
                k.span(),
                "events_secret: at least 16 characters (openssl rand -hex 32 makes 64), \
                 the same on every host",
            ));
        }
    }
    for (name, d) in [
        ("connect_timeout", &cl.connect_timeout),
        ("timeout", &cl.timeout),
        ("confirm_timeout", &cl.confirm_timeout),
    ] {
        let v = d.get_ref().0;
        if v < std::time::Duration::from_millis(1) || v > std::time::Duration::from_secs(60) {
            return Err(src.err(
                d.span(),
                format!("{name} must be between 1ms and 60s (it is {v:?})"),
            ));
        }
    }
    if let Some(t) = &cl.tls {
        if let ClusterTls::On(u) = t.get_ref() {
            if u.cert.is_some() != u.key.is_some() {
                return Err(src.err(
                    t.span(),
                    "tls: cert and key go together (a client certificate and its key)",
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::parse;

    const SITE: &str = "[[server]]\nlisten = [\"127.0.0.1:8080\"]\n[[server.location]]\npath = \"/\"\nreturn = { status = 200 }\n";

    fn err_of(cluster: &str) -> String {
        parse("c.toml", &format!("{cluster}\n{SITE}"))
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn redis_and_sentinel_forms_parse_with_their_defaults() {
        let c = parse("c.toml", &format!("[cluster]\nredis = [\"127.0.0.1:6379\", \"[::1]:6380\", \"redis.internal:6379\"]\n{SITE}")).unwrap();
        let cl = c.cluster.unwrap();
        let cl = cl.get_ref();
        assert_eq!(cl.redis.as_ref().unwrap().get_ref().len(), 3);
        assert_eq!(cl.prefix.get_ref(), "ringx:");
        assert_eq!(
            cl.timeout.get_ref().0,
            std::time::Duration::from_millis(500)
        );
        assert_eq!(
            cl.connect_timeout.get_ref().0,
            std::time::Duration::from_secs(1)
        );
        assert!(cl.tls().is_none());
        assert!(cl.host_id.is_none());
        assert!(cl.events_secret.is_none());
        assert_eq!(
            cl.confirm_timeout.get_ref().0,
            std::time::Duration::from_secs(2)
        );
        let c = parse(
            "c.toml",
            &format!(
                "[cluster]\nsentinel = [\"10.0.0.1:26379\"]\nmaster = \"ringx\"\nusername = \"u\"\n\
                 password = \"p\"\ntls = {{ ca = \"/etc/ca.pem\", sni = \"redis\" }}\nprefix = \"fleet1:\"\n\
                 timeout = \"50ms\"\nconnect_timeout = 2\nhost_id = \"web-1:9901\"\n\
                 confirm_timeout = \"5s\"\nevents_secret = \"0123456789abcdef\"\n{SITE}"
            ),
        )
        .unwrap();
        let cl = c.cluster.unwrap().into_inner();
        assert_eq!(cl.master.unwrap().get_ref(), "ringx");
        assert_eq!(cl.host_id.unwrap().get_ref(), "web-1:9901");
        assert_eq!(cl.events_secret.unwrap().get_ref(), "0123456789abcdef");
        assert_eq!(
            cl.confirm_timeout.get_ref().0,
            std::time::Duration::from_secs(5)
        );
        let t = cl.tls.as_ref().map(|t| t.get_ref().clone());
        match t {
            Some(super::ClusterTls::On(u)) => {
                assert_eq!(u.sni.as_deref(), Some("redis"));
                assert!(u.verify);
            }
            other => panic!("{other:?}"),
        }
        let c = parse(
            "c.toml",
            &format!("[cluster]\nredis = [\"r:1\"]\ntls = true\n{SITE}"),
        )
        .unwrap();
        assert!(c.cluster.unwrap().get_ref().tls().is_some());
    }

    #[test]
    fn errors_say_file_line_col_and_what_to_do() {
        let cases: &[(&str, &str, &str)] = &[
            (
                "[cluster]\nredis = [\"a:1\"]\nsentinel = [\"b:2\"]\nmaster = \"m\"",
                "c.toml:3:12: ",
                "both redis and sentinel",
            ),
            ("[cluster]\nprefix = \"x:\"", "c.toml:1:1: ", "needs redis"),
            (
                "[cluster]\nsentinel = [\"b:2\"]",
                "c.toml:2:12: ",
                "needs master",
            ),
            (
                "[cluster]\nredis = [\"a:1\"]\nmaster = \"m\"",
                "c.toml:3:10: ",
                "master is for sentinel",
            ),
            ("[cluster]\nredis = []", "c.toml:2:9: ", "redis is empty"),
            (
                "[cluster]\nredis = [\"a:1\", \"nope\"]",
                "c.toml:2:17: ",
                "\"host:port\"",
            ),
            (
                "[cluster]\nredis = [\"a:0\"]",
                "c.toml:2:10: ",
                "port 1-65535",
            ),
            (
                "[cluster]\nredis = [\"a:1\"]\nusername = \"u\"",
                "c.toml:3:12: ",
                "needs password",
            ),
            (
                "[cluster]\nredis = [\"a:1\"]\nprefix = \"a b\"",
                "c.toml:3:10: ",
                "without spaces",
            ),
            (
                "[cluster]\nredis = [\"a:1\"]\ntimeout = \"0ms\"",
                "c.toml:3:11: ",
                "between 1ms and 60s",
            ),
            (
                "[cluster]\nredis = [\"a:1\"]\ntimeout = \"3 days\"",
                "c.toml:3:11: ",
                "invalid duration",
            ),
            (
                "[cluster]\nredis = [\"a:1\"]\nhost_id = \"web 1\"",
                "c.toml:3:11: ",
                "without spaces",
            ),
            (
                "[cluster]\nredis = [\"a:1\"]\nconfirm_timeout = \"2m\"",
                "c.toml:3:19: ",
                "confirm_timeout must be between 1ms and 60s",
            ),
            (
                "[cluster]\nredis = [\"a:1\"]\nevents_secret = \"short\"",
                "c.toml:3:17: ",
                "at least 16 characters",
            ),
            (
                "[cluster]\nredis = [\"a:1\"]\ntls = { cert = \"c.pem\" }",
                "c.toml:3:7: ",
                "cert and key",
            ),
            (
                "[cluster]\nredis = [\"a:1\"]\ntls = \"yes\"",
                "c.toml:3:7: ",
                "true, false or a table",
            ),
            (
                "[cluster]\nredis = [\"a:1\"]\npasword = \"x\"",
                "c.toml:3:1: ",
                "unknown field",
            ),
        ];
        for (text, at, says) in cases {
            let e = err_of(text);
            assert!(e.starts_with(at) && e.contains(says), "{text:?}: {e}");
        }
    }

    #[test]
    fn endpoints() {
        for ok in [
            "a:1",
            "127.0.0.1:6379",
            "[::1]:6379",
            "redis-0.svc.local:26379",
        ] {
            assert!(super::is_endpoint(ok), "{ok}");
        }
        for bad in [
            "",
            "a",
            ":1",
            "a:",
            "a:65536",
            "::1:6379",
            "[::1:6379",
            "a b:1",
            "[x]:1",
        ] {
            assert!(!super::is_endpoint(bad), "{bad}");
        }
    }
}
