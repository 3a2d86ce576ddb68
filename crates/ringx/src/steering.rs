//! ringx's side of active-side steering (`[steering] mode`, issue #5): the configuration and
//! the upstreams become a [`ringx_steer::active::Request`], whose [`ringx_steer::active`]
//! decides the mode and builds every zone's source-port table; the zones' connectors take
//! their tables from here and publish their counters in the zones' metrics blocks.
//!
//! The counters (table hits, dynamic searches, hash evaluations, fallbacks, and the measured
//! locality of upstream connections) are logged per zone when ringx exits.

use ringx_server::error::{Error, Kind, Side};
use std::net::SocketAddr;
use std::sync::Arc;

use ringx_steer::active::{self, Active, Mode, Occupied, Request};
use ringx_steer::ports::{Dest, PortTable};

use ringx_config::Config;
use ringx_server::metrics::ZoneCounters;
use ringx_server::upstream::connector::{route_source, ConnectCounters};
use ringx_server::upstream::Upstreams;

/// What start-up decided, the zones' tables until they take them, and the XDP program.
pub struct ActiveSteering {
    active: Active,
    /// The zones' metrics blocks, where their connectors publish (read at exit).
    zones: Vec<Arc<ZoneCounters>>,
}

impl ActiveSteering {
    /// Zone `zone`'s table (once).
    pub fn take_table(&mut self, zone: usize) -> Option<PortTable> {
        self.active.take_table(zone)
    }

    /// Zone `zone`'s connector: its table, its CPU, its metrics block (also read here at
    /// exit).
    pub fn connector(
        &mut self,
        zone: usize,
        cpu: usize,
        metrics: Arc<ZoneCounters>,
    ) -> ringx_server::upstream::connector::Connector {
        self.zones.push(metrics.clone());
        ringx_server::upstream::connector::Connector::new(
            self.take_table(zone),
            Some(cpu),
            Some(metrics),
        )
    }

    /// Every zone's latest counters.
    pub fn counters(&self) -> Vec<ConnectCounters> {
        self.zones
            .iter()
            .map(|z| ConnectCounters::from_metrics(z))
            .collect()
    }
}

impl Drop for ActiveSteering {
    /// Logs the counters (also on `/metrics` while it runs); the XDP program detaches when
    /// `active` drops after this (dropping it closes its link).
    fn drop(&mut self) {
        let per = self.counters();
        let total = ConnectCounters::sum(&per);
        let mode = self.active.mode;
        if total.connects > 0 || mode != Mode::Off {
            for (z, c) in per.iter().enumerate() {
                tracing::info!("steering: zone {z}: {c}");
            }
            let measured = total.locality_home + total.locality_away;
            let share = if measured > 0 {
                format!(
                    " ({:.1}% of upstream connections home)",
                    100.0 * total.locality_home as f64 / measured as f64
                )
            } else {
                String::new()
            };
            tracing::info!("steering ({}): total: {total}{share}", mode.as_str());
        }
        if let Some(x) = self.active.xdp() {
            match x.stats() {
                Ok(s) => tracing::info!("steering: XDP program: {s}"),
                Err(e) => tracing::warn!("steering: XDP counters: {e}"),
            }
        }
    }
}

/// The destinations to precompute: every upstream server, routed from its source address,
/// and the configured `rss_table`.
pub fn destinations(cfg: &Config, upstreams: Option<&Upstreams>) -> Vec<Dest> {
    let mut out: Vec<Dest> = Vec::new();
    for u in upstreams.map_or(&[][..], |u| &u.list[..]) {
        for s in &u.servers {
            match route_source(s.addr) {
                Some(ip) => {
                    let d = Dest::new(ip, s.addr);
                    if !out.contains(&d) {
                        out.push(d);
                    }
                }
                None => tracing::warn!(
                    "steering: no route to {} ({}): its connections get the kernel's ports",
                    s.addr,
                    u.name
                ),
            }
        }
    }
    for d in &cfg.steering.rss_table.0 {
        if !out.contains(d) {
            out.push(*d);
        }
    }
    out
}

/// The devices where ringx's other XDP stages run, each with the slot of its last stage:
/// the filter's, or the balancer's where the balancer runs (on a device of its own, or behind
/// the filter, whose device it then ends).
fn occupied(cfg: &Config) -> Vec<Occupied> {
    let mut out = Vec::new();
    if let Some(x) = &cfg.xdp {
        out.push(Occupied {
            dev: x.dev.0.clone(),
            what: "the [xdp] filter",
            slot: x.chain.then(|| ringx_xdp::ChainSlot::filter(&x.pin_dir)),
            hint: "set chain = true in [xdp]",
        });
    }
    if let Some(lb) = &cfg.lb {
        let slot = lb.chain.then(|| ringx_lb::chain_slot(&lb.pin_dir));
        let stage = |dev: &str| Occupied {
            dev: dev.to_string(),
            what: "the [lb] balancer",
            slot: slot.clone(),
            hint: "set chain = true in [lb]",
        };
        let behind = lb.behind_filter.as_ref().map(|b| b.get_ref());
        for o in out.iter_mut() {
            if cfg.xdp.as_ref().is_some_and(|x| Some(&x.pin_dir) == behind) {
                *o = stage(&o.dev);
            }
        }
        out.extend(lb.devices.iter().map(|d| stage(&d.get_ref().0)));
    }
    out
}

/// Decides the mode, attaches XDP when steering in software, and builds every zone's table
/// ([`ringx_steer::active::setup`]). Errors (an explicit mode that cannot work) stop
/// start-up; `auto` never fails.
pub fn setup(
    cfg: &Config,
    cpus: &[usize],
    upstreams: Option<&Upstreams>,
    listen: &[SocketAddr],
) -> Result<ActiveSteering, Error> {
    let st = &cfg.steering;
    let mode = st.mode();
    let dests = if mode == Mode::Off {
        Vec::new()
    } else {
        destinations(cfg, upstreams)
    };
    let devices: Vec<String> = st.devices().iter().map(|d| d.0.clone()).collect();
    let listen_ports: Vec<u16> = listen.iter().map(SocketAddr::port).collect();
    let active = active::setup(&Request {
        mode,
        cpus,
        dests: &dests,
        devices: &devices,
        xdp_mode: st.xdp_mode.map(|m| m.0),
        occupied: &occupied(cfg),
        port_range: st.port_range.as_ref().map(|r| r.get_ref().0.clone()),
        time_wait: st.time_wait.map(|d| d.0),
        table_ports: st.table_ports,
        listen_ports: &listen_ports,
    })
    .map_err(|e| {
        Error::new(Kind::Config, Side::Internal)
            .context("[steering]")
            .cause(e)
    })?;
    Ok(ActiveSteering {
        active,
        zones: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(steering: &str, upstream: &str) -> Config {
        ringx_config::parse(
            "t.toml",
            &format!(
                "[steering]\n{steering}\n{upstream}\n[[server]]\nlisten = [\"127.0.0.1:1\"]\n\
                 [[server.location]]\npath = \"/\"\nreturn = {{ status = 200 }}\n"
            ),
        )
        .unwrap()
    }

    #[test]
    fn steering_goes_behind_the_last_stage_on_its_device() {
        let lb = |extra: &str, chain: bool| {
            format!(
                "[lb]\n{extra}\nchain = {chain}\npin_dir = \"/sys/fs/bpf/l\"\n\
                 [[lb.service]]\nvip = \"198.51.100.1:80\"\nbackends = [\"10.0.0.11\"]\n\
                 [xdp]\ndev = \"eth1\"\npin_dir = \"/sys/fs/bpf/f\"\nchain = true\n"
            )
        };
        let steer = "mode = \"software\"\ndevice = [\"eth1\", \"eth2\"]";
        // Filter -> balancer on eth1: steering there goes in the balancer's slot.
        let c = cfg(steer, &lb("behind_filter = \"/sys/fs/bpf/f\"", true));
        let o = occupied(&c);
        assert_eq!(o.len(), 1);
        assert_eq!(
            (o[0].dev.as_str(), o[0].what),
            ("eth1", "the [lb] balancer")
        );
        assert_eq!(
            o[0].slot.as_ref().unwrap().path(),
            std::path::Path::new("/sys/fs/bpf/l/lb_chain")
        );
        // The balancer on a device of its own: the filter's slot on eth1, the balancer's
        // on eth2.
        let c = cfg(steer, &lb("devices = [\"eth2\"]", true));
        let o = occupied(&c);
        assert_eq!(o.len(), 2);
        assert_eq!(
            o[0].slot.as_ref().unwrap().path(),
            std::path::Path::new("/sys/fs/bpf/f/rx_chain")
        );
        assert_eq!(o[1].dev, "eth2");
        assert_eq!(
            o[1].slot.as_ref().unwrap().path(),
            std::path::Path::new("/sys/fs/bpf/l/lb_chain")
        );
        // Without a filter or balancer: nothing occupied.
        assert!(occupied(&cfg("", "")).is_empty());
    }

    #[test]
    fn off_builds_nothing() {
        let c = cfg("", "");
        let mut st = setup(&c, &[0, 1], None, &[]).unwrap();
        assert_eq!(st.active.mode, Mode::Off);
        assert!(st.take_table(0).is_none());
    }

    #[test]
    fn auto_over_loopback_is_off() {
        let c = cfg(
            "mode = \"auto\"",
            "[[upstream]]\nname = \"a\"\nservers = [\"127.0.0.1:9\"]",
        );
        let mut ups = Upstreams::compile(&c).unwrap();
        let _ = ringx_server::route::Routes::compile(&c, &mut ups);
        let mut st = setup(&c, &[0, 1], Some(&ups), &[]).unwrap();
        assert_eq!(st.active.mode, Mode::Off);
        assert!(st.take_table(1).is_none());
    }

    #[test]
    fn destinations_are_upstreams_and_rss_table() {
        let c = cfg(
            "rss_table = [\"10.1.0.1 10.1.0.2 80\", \"127.0.0.1 127.0.0.1 9\"]",
            "[[upstream]]\nname = \"a\"\nservers = [\"127.0.0.1:9\", \"127.0.0.1:10\"]",
        );
        let ups = Upstreams::compile(&c).unwrap();
        let d = destinations(&c, Some(&ups));
        let want: Vec<Dest> = [
            "127.0.0.1 127.0.0.1 9",
            "127.0.0.1 127.0.0.1 10",
            "10.1.0.1 10.1.0.2 80",
        ]
        .iter()
        .map(|s| s.parse().unwrap())
        .collect();
        assert_eq!(d, want);
    }

    #[test]
    fn explicit_rss_without_rss_is_an_error() {
        let c = cfg("mode = \"rss\"\ndevice = \"lo\"", "");
        let e = setup(&c, &[0], None, &[]).err().expect("lo has no RSS");
        assert!(e.to_string().contains("lo"), "{e}");
    }
}
