//! `ringx xdp`: attach the XDP filter, edit its block and allow lists live, read its
//! counters. The lists and counters are the maps pinned under `--pin-dir`, shared with
//! `ringx serve`'s `[xdp]` section.

use std::path::PathBuf;
use std::process::ExitCode;

use crate::config::xdp::parse_port;
use clap::{Args, Subcommand};
use ringx_xdp::{Cidr, Filter, List, Maps, Mode, Origin, Settings, DEFAULT_PIN_DIR};

#[derive(Args)]
pub struct XdpArgs {
    #[command(subcommand)]
    cmd: XdpCmd,
    /// Where the maps and links are pinned (a directory on a bpffs).
    #[arg(long, global = true, default_value = DEFAULT_PIN_DIR)]
    pin_dir: PathBuf,
}

#[derive(Subcommand)]
enum XdpCmd {
    /// Attach the filter to a device; where it is attached already, replace the program
    /// atomically (the link stays, packets never pass unfiltered).
    Attach(AttachArgs),
    /// Detach the filter from a device (the lists stay pinned unless --purge).
    Detach {
        #[arg(long)]
        dev: String,
        /// Also remove the pinned maps (lists and counters) when no device uses them.
        #[arg(long)]
        purge: bool,
    },
    /// Drop every packet from these sources (CIDR or address), from the next packet on.
    Block {
        #[arg(required = true)]
        cidrs: Vec<String>,
    },
    /// Remove exact entries from the block list.
    Unblock {
        #[arg(required = true)]
        cidrs: Vec<String>,
    },
    /// Pass every packet from these sources, before any other rule.
    Allow {
        #[arg(required = true)]
        cidrs: Vec<String>,
    },
    /// Remove exact entries from the allow list.
    Unallow {
        #[arg(required = true)]
        cidrs: Vec<String>,
    },
    /// Print the block and allow lists and the served ports.
    List,
    /// Print the counters (summed over CPUs) and the attached devices.
    Stats {
        /// One JSON object instead of a table.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Args)]
struct AttachArgs {
    /// Network device, e.g. eth0.
    #[arg(long)]
    dev: String,
    /// native (in the driver) or generic (after skb allocation, for drivers without XDP).
    #[arg(long, default_value = "native")]
    mode: Mode,
    /// TCP SYNs per second one source (IPv4 address, IPv6 /64) may send; 0: no limit.
    #[arg(long, default_value_t = 0)]
    syn_rate: u64,
    /// SYNs a quiet source may send at once (default: the rate).
    #[arg(long, default_value_t = 0)]
    syn_burst: u64,
    /// Drop TCP and UDP to ports below the ephemeral range that no --port lists.
    #[arg(long)]
    port_filter: bool,
    /// A served port for --port-filter: 80 (TCP), 53/udp, 443/both. Repeatable.
    #[arg(long = "port")]
    ports: Vec<String>,
}

const MOUNT_NOTE: &str = "note: no bpffs was mounted at /sys/fs/bpf, so ringx mounted one; \
    under `ip netns exec` that mount is private to this command and the pins go with it \
    (enter namespaces with `nsenter --net=/run/netns/NAME` instead)";

fn cidrs(v: &[String]) -> Result<Vec<Cidr>, String> {
    v.iter().map(|s| s.parse::<Cidr>()).collect()
}

pub fn run(args: XdpArgs) -> ExitCode {
    match exec(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ringx xdp: {e}");
            ExitCode::FAILURE
        }
    }
}

fn exec(args: XdpArgs) -> Result<(), String> {
    let dir = args.pin_dir;
    let es = |e: ringx_xdp::Error| e.to_string();
    match args.cmd {
        XdpCmd::Attach(a) => {
            let ports = a
                .ports
                .iter()
                .map(|p| parse_port(p))
                .collect::<Result<Vec<_>, _>>()?;
            if a.port_filter && ports.is_empty() {
                return Err(
                    "--port-filter without any --port would drop TCP and UDP to every \
                            port below the ephemeral range: list the served ports"
                        .into(),
                );
            }
            let settings = Settings {
                syn_rate: a.syn_rate,
                syn_burst: a.syn_burst,
                port_filter: a.port_filter,
                ..Settings::default()
            };
            let before = ringx_xdp::attachments(&dir).unwrap_or_default();
            let mut filter = Filter::load(&settings, &dir).map_err(es)?;
            if filter.mounted_bpffs() {
                eprintln!("{MOUNT_NOTE}");
            }
            if a.port_filter {
                filter.maps().clear_ports().map_err(es)?;
                for (port, tcp, udp) in ports {
                    filter.maps().serve_port(port, tcp, udp).map_err(es)?;
                }
            }
            let att = filter.attach(&a.dev, a.mode).map_err(es)?;
            if att.replaced {
                let old = before
                    .iter()
                    .find(|l| l.dev == a.dev)
                    .map_or("?".to_string(), |l| l.prog_id.to_string());
                println!(
                    "replaced the program on {}'s link {} atomically (program {old} -> {}); \
                     the link keeps its mode",
                    a.dev, att.link_id, att.prog_id
                );
            } else {
                println!(
                    "attached the ringx XDP filter to {} ({} mode, link {}, program {}), \
                     pinned at {}",
                    a.dev,
                    a.mode.as_str(),
                    att.link_id,
                    att.prog_id,
                    dir.display()
                );
            }
            Ok(())
        }
        XdpCmd::Detach { dev, purge } => {
            ringx_xdp::detach(&dir, &dev).map_err(es)?;
            println!("detached the ringx XDP filter from {dev}");
            if purge {
                ringx_xdp::purge(&dir).map_err(es)?;
                println!("removed the pinned maps under {}", dir.display());
            }
            Ok(())
        }
        XdpCmd::Block { cidrs: c } => edit(&dir, List::Block, &cidrs(&c)?, true),
        XdpCmd::Unblock { cidrs: c } => edit(&dir, List::Block, &cidrs(&c)?, false),
        XdpCmd::Allow { cidrs: c } => edit(&dir, List::Allow, &cidrs(&c)?, true),
        XdpCmd::Unallow { cidrs: c } => edit(&dir, List::Allow, &cidrs(&c)?, false),
        XdpCmd::List => {
            let m = Maps::open_pinned(&dir).map_err(es)?;
            for (name, list) in [("block", List::Block), ("allow", List::Allow)] {
                for (c, origin) in m.entries(list).map_err(es)? {
                    println!("{name} {c} ({origin})");
                }
            }
            for (port, bits) in m.served_ports().map_err(es)? {
                let proto = match bits & 3 {
                    1 => "tcp",
                    2 => "udp",
                    _ => "both",
                };
                println!("port {port}/{proto}");
            }
            Ok(())
        }
        XdpCmd::Stats { json } => {
            let m = Maps::open_pinned(&dir).map_err(es)?;
            let stats = m.stats().map_err(es)?;
            let links = ringx_xdp::attachments(&dir).map_err(es)?;
            if json {
                let links: Vec<String> = links
                    .iter()
                    .map(|l| {
                        format!(
                            "{{\"dev\":\"{}\",\"ifindex\":{},\"link_id\":{},\"prog_id\":{}}}",
                            l.dev, l.ifindex, l.link_id, l.prog_id
                        )
                    })
                    .collect();
                let s = stats.to_json();
                // {"pass":..,"drop":..,"reasons":..} + "links"
                println!("{},\"links\":[{}]}}", &s[..s.len() - 1], links.join(","));
            } else {
                println!("{stats}");
                if links.is_empty() {
                    println!("attached: none");
                }
                for l in links {
                    let state = if l.ifindex == 0 {
                        " (defunct: the device is gone)"
                    } else {
                        ""
                    };
                    println!(
                        "attached: {} (ifindex {}, link {}, program {}){state}",
                        l.dev, l.ifindex, l.link_id, l.prog_id
                    );
                }
            }
            Ok(())
        }
    }
}

fn edit(dir: &std::path::Path, list: List, cidrs: &[Cidr], add: bool) -> Result<(), String> {
    let m = Maps::open_pinned(dir).map_err(|e| e.to_string())?;
    let name = match list {
        List::Block => "block",
        List::Allow => "allow",
    };
    for c in cidrs {
        if add {
            let new = m.add(list, *c, Origin::Cli).map_err(|e| e.to_string())?;
            println!("{name} {c}{}", if new { "" } else { " (already listed)" });
        } else if m.remove(list, *c).map_err(|e| e.to_string())? {
            println!("un{name} {c}");
        } else {
            return Err(format!(
                "{c} is not on the {name} list (entries are removed exactly as added; see \
                 `ringx xdp list`)"
            ));
        }
    }
    Ok(())
}

/// The filter `ringx serve` runs for its `[xdp]` section: loaded and attached at start
/// (before privileges are dropped), its counters logged at exit. Dropping it logs the
/// counters and, with `detach_on_exit`, detaches; otherwise the pinned link keeps filtering
/// after ringx exits (a restart replaces the program atomically).
pub struct ServeXdp {
    att: Option<ringx_xdp::Attachment>,
    maps: Maps,
    detach_on_exit: bool,
}

impl ServeXdp {
    /// Loads the filter, makes the configured lists and ports current, attaches.
    /// `listen`: the server's addresses, whose ports the port filter always serves.
    pub fn start(
        cfg: &crate::config::xdp::Xdp,
        listen: &[std::net::SocketAddr],
    ) -> Result<ServeXdp, String> {
        let es = |e: ringx_xdp::Error| e.to_string();
        let mut filter = Filter::load(&cfg.settings(), &cfg.pin_dir).map_err(es)?;
        if filter.mounted_bpffs() {
            tracing::warn!("xdp: {MOUNT_NOTE}");
        }
        let maps = Maps::open_pinned(&cfg.pin_dir).map_err(es)?;
        // The configuration owns the entries it added: ones it no longer lists go, entries
        // from the CLI and the proxy's API stay.
        for (list, wanted) in [(List::Block, &cfg.block), (List::Allow, &cfg.allow)] {
            for (c, origin) in maps.entries(list).map_err(es)? {
                if origin == Origin::Config && !wanted.iter().any(|w| w.0 == c) {
                    maps.remove(list, c).map_err(es)?;
                }
            }
            for c in wanted {
                maps.add(list, c.0, Origin::Config).map_err(es)?;
            }
        }
        if cfg.port_filter {
            maps.clear_ports().map_err(es)?;
            for a in listen {
                maps.serve_port(a.port(), true, false).map_err(es)?;
            }
            for p in &cfg.ports {
                maps.serve_port(p.port, p.tcp, p.udp).map_err(es)?;
            }
        }
        let att = filter.attach(&cfg.dev.0, cfg.mode.0).map_err(es)?;
        tracing::info!(
            "xdp: {} {} ({} mode{}, link {}, program {}; maps pinned at {}; {} blocked, {} allowed{}{})",
            if att.replaced { "replaced the filter on" } else { "attached the filter to" },
            att.dev,
            cfg.mode.0.as_str(),
            if att.replaced { " kept from the existing link" } else { "" },
            att.link_id,
            att.prog_id,
            cfg.pin_dir.display(),
            maps.entries(List::Block).map_err(es)?.len(),
            maps.entries(List::Allow).map_err(es)?.len(),
            if cfg.syn_rate > 0 { format!(", SYN limit {}/s per source", cfg.syn_rate) } else { String::new() },
            if cfg.port_filter { ", port filter on" } else { "" },
        );
        Ok(ServeXdp {
            att: Some(att),
            maps,
            detach_on_exit: cfg.detach_on_exit,
        })
    }

    /// The counters now (for export).
    pub fn stats(&self) -> Result<ringx_xdp::Stats, ringx_xdp::Error> {
        self.maps.stats()
    }
}

impl Drop for ServeXdp {
    fn drop(&mut self) {
        use ringx_xdp::{Reason, Verdict};
        match self.stats() {
            Ok(s) => {
                let drops: Vec<String> = Reason::ALL
                    .iter()
                    .filter(|r| r.verdict() == Verdict::Drop && s.get(**r).packets > 0)
                    .map(|r| format!("{} {}", r.name(), s.get(*r).packets))
                    .collect();
                tracing::info!(
                    "xdp counters: passed {} packets, dropped {}{}",
                    s.total(Verdict::Pass).packets,
                    s.total(Verdict::Drop).packets,
                    if drops.is_empty() {
                        String::new()
                    } else {
                        format!(" ({})", drops.join(", "))
                    }
                );
            }
            Err(e) => tracing::warn!("xdp: cannot read the counters: {e}"),
        }
        let Some(att) = self.att.take() else { return };
        let dev = att.dev.clone();
        if self.detach_on_exit {
            match att.detach() {
                Ok(()) => tracing::info!("xdp: detached from {dev}"),
                Err(e) => tracing::warn!("xdp: detaching from {dev} failed: {e}"),
            }
        } else {
            tracing::info!(
                "xdp: the filter stays attached to {dev} (pinned); `ringx xdp detach --dev {dev}` removes it"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports() {
        assert_eq!(parse_port("80"), Ok((80, true, false)));
        assert_eq!(parse_port("53/udp"), Ok((53, false, true)));
        assert_eq!(parse_port("443/both"), Ok((443, true, true)));
        assert!(parse_port("x").is_err());
        assert!(parse_port("80/sctp").is_err());
        assert!(parse_port("70000").is_err());
    }
}
