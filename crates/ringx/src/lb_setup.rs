//! What `ringx lb attach` and `ringx lb run` share: reading [lb], turning it into the
//! balancer's settings and services, resolving next hops, loading and attaching.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use ringx_config::lb as cfg;
use ringx_lb::control;
use ringx_lb::{nexthop, BackendSpec, Balancer, Encap, LbSettings, Proto, Service};
use ringx_xdp::{Mode, MOUNT_NOTE};

pub type Res<T> = Result<T, String>;

pub fn es(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// The configuration's [lb] (checked whole, so errors are the ones `ringx check` gives).
pub fn load_lb(path: &Path) -> Res<cfg::Lb> {
    let c = ringx_config::load(path).map_err(es)?;
    c.lb.ok_or_else(|| format!("{} has no [lb] section", path.display()))
}

pub fn pin_dir(args_dir: &Option<PathBuf>, lb: Option<&cfg::Lb>) -> PathBuf {
    args_dir
        .clone()
        .or_else(|| lb.map(|l| l.pin_dir.clone()))
        .unwrap_or_else(|| PathBuf::from(ringx_lb::DEFAULT_LB_PIN_DIR))
}

/// The services of [lb] as the control plane takes them.
pub fn services(lb: &cfg::Lb) -> Vec<Service> {
    lb.services
        .iter()
        .map(|s| {
            let s = s.get_ref();
            Service {
                addr: *s.vip.get_ref(),
                proto: match s.proto {
                    cfg::Proto::Tcp => Proto::Tcp,
                    cfg::Proto::Udp => Proto::Udp,
                },
                backends: s
                    .backends
                    .iter()
                    .map(|b| BackendSpec {
                        addr: b.get_ref().addr,
                        weight: b.get_ref().weight,
                        quic_host: b.get_ref().quic_host,
                    })
                    .collect(),
            }
        })
        .collect()
}

/// The program's settings; outer sources not configured come from the route to the first
/// backend of their family.
pub fn settings(lb: &cfg::Lb) -> Res<LbSettings> {
    let backends: Vec<IpAddr> = services(lb)
        .iter()
        .flat_map(|s| s.backends.iter().map(|b| b.addr))
        .collect();
    let src = |v4: bool| -> Res<Option<IpAddr>> {
        match backends.iter().find(|a| a.is_ipv4() == v4) {
            None => Ok(None),
            Some(a) => {
                let r = nexthop::route(*a).map_err(es)?;
                r.src.map(Some).ok_or_else(|| {
                    format!(
                        "no source address on the route to {a}: set source_v4/source_v6 in [lb]"
                    )
                })
            }
        }
    };
    let source_v4 = match lb.source_v4 {
        Some(a) => a,
        None => match src(true)? {
            Some(IpAddr::V4(a)) => a,
            _ => std::net::Ipv4Addr::UNSPECIFIED,
        },
    };
    let source_v6 = match lb.source_v6 {
        Some(a) => a,
        None => match src(false)? {
            Some(IpAddr::V6(a)) => a,
            _ => std::net::Ipv6Addr::UNSPECIFIED,
        },
    };
    Ok(LbSettings {
        encap: match lb.encap {
            cfg::Encap::Gue => Encap::Gue {
                port: *lb.gue_port.get_ref(),
            },
            cfg::Encap::Ipip => Encap::Ipip,
        },
        source_v4,
        source_v6,
        conn_table_size: *lb.conn_table_size.get_ref(),
        chain: lb.chain,
        too_big_rate: *lb.too_big_rate.get_ref(),
        too_big_burst: *lb.too_big_burst.get_ref(),
    })
}

/// Next hops from the kernel's tables; a failure is reported and leaves the backend
/// unresolved (its packets are dropped as `drop_no_route` until a refresh finds it).
pub fn resolve(a: IpAddr) -> Option<ringx_lb::NextHop> {
    match nexthop::resolve(a) {
        Ok(h) => Some(h),
        Err(e) => {
            eprintln!("ringx lb: backend {a}: {e}");
            None
        }
    }
}

/// Loads the balancer, applies [lb], attaches to `devs`. Returns the loaded balancer; `say`
/// gets a line for each thing done (stdout for the CLI, the log for `ringx serve`).
pub fn bring_up(
    lb: &cfg::Lb,
    dir: &Path,
    devs: &[(String, Mode)],
    behind_filter: Option<&Path>,
    say: &dyn Fn(String),
) -> Res<Balancer> {
    let settings = settings(lb)?;
    let mut b = Balancer::load(&settings, dir).map_err(es)?;
    if b.mounted_bpffs() {
        say(format!("note: {MOUNT_NOTE}"));
    }
    let a = control::apply(b.maps(), &services(lb), &resolve).map_err(es)?;
    say(format!(
        "ringx lb: {} services, {} backends ({} unresolved), encapsulation {}, outer sources {} \
         and {}",
        a.services,
        a.backends,
        a.unresolved.len(),
        settings.encap,
        settings.source_v4,
        settings.source_v6
    ));
    if settings.chain {
        let slot = b.chain_slot();
        say(match slot.prog_id().map_err(es)? {
            Some(id) => format!(
                "ringx lb: what the balancer passes goes on to program {id} in its chain slot {}",
                slot.path().display()
            ),
            None => format!(
                "ringx lb: what the balancer passes goes on to the program put in its chain slot \
                 {} (passed while it is empty)",
                slot.path().display()
            ),
        });
    }
    for (dev, mode) in devs {
        let att = b.attach(dev, *mode).map_err(es)?;
        say(format!(
            "ringx lb: {} the balancer {} {dev} (link {}, program {}), pinned at {}",
            if att.replaced { "swapped" } else { "attached" },
            if att.replaced { "on" } else { "to" },
            att.link_id,
            att.prog_id,
            dir.display()
        ));
    }
    if let Some(fdir) = behind_filter {
        let before = ringx_xdp::chain_prog_id(fdir).map_err(es)?;
        ringx_xdp::chain_next(fdir, b.prog_fd().map_err(es)?).map_err(es)?;
        let now = ringx_xdp::chain_prog_id(fdir).map_err(es)?.unwrap_or(0);
        say(match before {
            Some(old) => format!(
                "ringx lb: swapped the stage behind the filter in {} (program {old} -> {now})",
                fdir.display()
            ),
            None => format!(
                "ringx lb: the balancer (program {now}) is behind the filter in {}",
                fdir.display()
            ),
        });
    }
    Ok(b)
}
