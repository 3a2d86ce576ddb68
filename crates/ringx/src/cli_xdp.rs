//! `ringx xdp`: attach the XDP filter, edit its block and allow lists live, read its
//! counters. The lists and counters are the maps pinned under `--pin-dir`, shared with
//! `ringx serve`'s `[xdp]` section (the serve-time guard is in `serve_xdp.rs`).

use ringx_server::error::{Error, Kind, Side};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use ringx_xdp::{
    Cidr, Filter, List, Maps, Mode, Origin, ServedPort, Settings, DEFAULT_PIN_DIR, MOUNT_NOTE,
};

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
    /// Send what the filter passes on to the next stage in its chain slot (the load
    /// balancer: `ringx lb attach --behind-filter`).
    #[arg(long)]
    chain: bool,
}

fn cidrs(v: &[String]) -> Result<Vec<Cidr>, Error> {
    v.iter()
        .map(|s| s.parse::<Cidr>().map_err(Error::invalid))
        .collect()
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

fn exec(args: XdpArgs) -> Result<(), Error> {
    let dir = args.pin_dir;
    let es = |e: ringx_xdp::Error| Error::new(Kind::Io, Side::Internal).cause(e);
    match args.cmd {
        XdpCmd::Attach(a) => {
            let ports = a
                .ports
                .iter()
                .map(|p| p.parse::<ServedPort>())
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
                chain: a.chain,
                ..Settings::default()
            };
            let before = ringx_xdp::attachments(&dir).unwrap_or_default();
            let mut filter = Filter::load(&settings, &dir).map_err(es)?;
            if filter.mounted_bpffs() {
                eprintln!("note: {MOUNT_NOTE}");
            }
            if a.port_filter {
                filter.maps().clear_ports().map_err(es)?;
                for p in ports {
                    filter.maps().serve_port(p.port, p.tcp, p.udp).map_err(es)?;
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

fn edit(dir: &std::path::Path, list: List, cidrs: &[Cidr], add: bool) -> Result<(), Error> {
    let m = Maps::open_pinned(dir).map_err(|e| Error::new(Kind::Io, Side::Internal).cause(e))?;
    let name = match list {
        List::Block => "block",
        List::Allow => "allow",
    };
    for c in cidrs {
        if add {
            let new = m
                .add(list, *c, Origin::Cli)
                .map_err(|e| Error::new(Kind::Io, Side::Internal).cause(e))?;
            println!("{name} {c}{}", if new { "" } else { " (already listed)" });
        } else if m
            .remove(list, *c)
            .map_err(|e| Error::new(Kind::Io, Side::Internal).cause(e))?
        {
            println!("un{name} {c}");
        } else {
            return Err(Error::invalid(format!(
                "{c} is not on the {name} list (entries are removed exactly as added; see \
                 `ringx xdp list`)"
            )));
        }
    }
    Ok(())
}
