//! One compile step from a configuration to what the zones serve from, used alike by
//! start-up and by every reload (as Envoy's listener manager builds a new configuration and
//! swaps it in): routes with their pre-serialised responses, the HTTP settings, the upstreams
//! (named ones, then one per address written directly in a `proxy_pass`), and the access log.

use std::path::PathBuf;
use std::sync::Arc;

use ringx_config::ops::LogFormat;
use ringx_config::Config;

use crate::error::Error;
use crate::route::{ListenerKind, Routes};
use crate::settings::Settings;
use crate::tls::TlsSetup;
use crate::upstream::Upstreams;

/// A configuration compiled for the zones.
pub struct Compiled {
    pub routes: Arc<Routes>,
    pub settings: Arc<Settings>,
    /// None when nothing proxies.
    pub upstreams: Option<Arc<Upstreams>>,
    /// What decides whether zones must rebuild their upstream state on reload: the compiled
    /// upstreams and streams (whose indices requests in flight hold).
    pub fingerprint: String,
    pub log_path: Option<PathBuf>,
    /// The access log's format, when there is one.
    pub log_format: Option<LogFormat>,
    /// TLS settings, when a server has `tls` (certificates loaded and checked).
    pub tls: Option<Arc<TlsSetup>>,
}

impl Compiled {
    /// Compiles `cfg` (already validated by `ringx_config`): directories of static
    /// locations are opened and upstream host names resolved here, so what fails now is
    /// reported before anything changes.
    pub fn from(cfg: &Config) -> Result<Compiled, Error> {
        let mut ups = Upstreams::compile(cfg)?;
        let routes = Routes::compile(cfg, &mut ups)?;
        let tls = crate::tls::compile(cfg, &routes)?.map(Arc::new);
        let fingerprint = fingerprint(&ups, &routes);
        let log_path = cfg.http.access_log.as_ref().map(|p| p.get_ref().clone());
        Ok(Compiled {
            settings: Arc::new(Settings::from_config(
                &cfg.http,
                &cfg.http2,
                cfg.runtime.recv_buffer_size.0,
            )),
            routes: Arc::new(routes),
            upstreams: (!ups.list.is_empty()).then(|| Arc::new(ups)),
            fingerprint,
            log_format: log_path.as_ref().map(|_| cfg.http.access_log_format),
            log_path,
            tls,
        })
    }
}

/// The parts of the upstreams and streams whose change invalidates zones' upstream state.
fn fingerprint(ups: &Upstreams, routes: &Routes) -> String {
    let mut s = String::new();
    for u in &ups.list {
        s += &format!(
            "{}|{:?}|{:?}|{}|{:?}|{:?}|{:?}|{:?}|{}|{:?};",
            u.name,
            u.policy,
            u.hash_key,
            u.keepalive,
            u.keepalive_timeout,
            u.connect_timeout,
            u.read_timeout,
            u.send_timeout,
            u.retries,
            u.proxy_protocol
        );
        if let Some(h) = &u.health {
            s += &format!(
                "h{:?}|{}|{:?}|{}|{}|{:?};",
                h.interval, h.path, h.expect, h.rise, h.fall, h.timeout
            );
        }
        for sv in &u.servers {
            s += &format!(
                "{}|{}|{}|{}|{:?}|{};",
                sv.name, sv.addr, sv.weight, sv.max_fails, sv.fail_timeout, sv.backup
            );
        }
        s.push('\n');
    }
    for st in &routes.streams {
        s += &format!(
            "stream {}|{:?}|{}|{:?}|{:?};",
            st.upstream, st.idle_timeout, st.proxy_protocol, st.sni, st.udp
        );
    }
    for (a, i) in routes.udp_listen.iter().zip(&routes.udp_serves) {
        s += &format!("udp {a}->{i:?};");
    }
    for (a, k) in routes.listen.iter().zip(&routes.listener_kind) {
        if let ListenerKind::Stream(i) = k {
            s += &format!("{a}->{i};");
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = r#"
[[server]]
listen = ["127.0.0.1:18911"]
  [[server.location]]
  path = "/"
  proxy_pass = "app"
[[upstream]]
name = "app"
servers = ["127.0.0.1:18912"]
"#;

    fn compile(toml: &str) -> Compiled {
        let cfg = ringx_config::parse("t.toml", toml).expect("parses");
        Compiled::from(&cfg).expect("compiles")
    }

    /// A reload changes the zones' upstream state only when something an exchange in flight
    /// refers to changed: not for routes or HTTP settings.
    #[test]
    fn the_fingerprint_follows_upstreams_not_routes() {
        let a = compile(BASE);
        let routes_only = compile(&BASE.replace("path = \"/\"", "path = \"/x/\""));
        assert_eq!(a.fingerprint, routes_only.fingerprint);
        let more = compile(&BASE.replace(
            "\"127.0.0.1:18912\"]",
            "\"127.0.0.1:18912\", \"127.0.0.1:18913\"]",
        ));
        assert_ne!(a.fingerprint, more.fingerprint);
        let timeout = compile(&format!("{BASE}read_timeout = \"5s\"\n"));
        assert_ne!(a.fingerprint, timeout.fingerprint);
        assert!(a.upstreams.is_some() && a.log_format.is_none());
    }

    /// A root that passed validation but is gone when the configuration is compiled (a
    /// reload racing a deployment): the compile step fails, naming it, before anything changes.
    #[test]
    fn a_missing_root_is_an_error_naming_it() {
        let dir = crate::testkit::TempDir::new(&[]);
        let root = dir.path().to_string();
        let cfg = ringx_config::parse(
            "t.toml",
            &format!("[[server]]\nlisten = [\"127.0.0.1:18914\"]\n[[server.location]]\npath = \"/\"\nroot = \"{root}\"\n"),
        )
        .expect("the root exists when the configuration is validated");
        drop(dir);
        let e = match Compiled::from(&cfg) {
            Ok(_) => panic!("compiled with a root that is gone"),
            Err(e) => e.to_string(),
        };
        assert!(e.contains(&root), "{e}");
    }
}
