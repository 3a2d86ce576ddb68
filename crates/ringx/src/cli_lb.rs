//! `ringx lb`: the XDP L4 load balancer (crate ringx-lb). Its state is the maps pinned under
//! `--pin-dir`, so each command changes one thing and `ringx lb run` (health checks, next
//! hops) keeps running beside them.
//!
//! ```text
//! ringx lb attach --dev eth0 -c lb.toml     load, make the maps say what [lb] says, attach
//!                                           (or swap the program in the device's link)
//! ringx lb run -c lb.toml                   the same on [lb].devices, then health checks
//!                                           and next-hop refreshes until SIGTERM
//! ringx lb backend --dev eth0 [--gue-port]  a backend: attach the decapsulation program
//! ringx lb drain 10.0.0.12 [--undo]         no new flows to it; established ones stay
//! ringx lb stats [--json]                   counters by reason, service and backend
//! ringx lb detach --dev eth0 [--purge]      (also `ringx lb backend --detach`)
//! ```

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Subcommand};
use ringx_lb::control::{self, Out};
use ringx_lb::{Decap, LbMaps};
use ringx_xdp::Mode;

use crate::lb_setup::{bring_up, es, load_lb, pin_dir, Res};

#[derive(Args)]
pub struct LbArgs {
    #[command(subcommand)]
    cmd: LbCmd,
    /// Where the maps and links are pinned (default: [lb].pin_dir, or /sys/fs/bpf/ringx-lb;
    /// for `backend`, /sys/fs/bpf/ringx-lbd).
    #[arg(long, global = true)]
    pin_dir: Option<PathBuf>,
}

#[derive(Subcommand)]
enum LbCmd {
    /// Load the balancer with the configuration's [lb] and attach it to a device; where it
    /// is attached already, swap the program atomically.
    Attach {
        /// The device (unless --behind-filter).
        #[arg(long)]
        dev: Option<String>,
        #[arg(short = 'c', long = "config")]
        config: PathBuf,
        /// native or generic (default: [lb].mode).
        #[arg(long)]
        mode: Option<Mode>,
        /// Instead of a device of its own, go behind the XDP filter pinned in this directory
        /// (attached with `ringx xdp attach --chain`): what the filter passes is balanced.
        /// A second call replaces the stage in one step. Default: [lb].behind_filter.
        #[arg(long, value_name = "FILTER_PIN_DIR")]
        behind_filter: Option<PathBuf>,
        /// Hand what the balancer passes to the program in its chain slot (`lb_chain` in
        /// the pin directory; `ringx serve`'s software steering on the device goes there).
        /// Default: [lb].chain.
        #[arg(long)]
        chain: bool,
    },
    /// Attach to [lb].devices, then check the backends' health and refresh their next hops
    /// until SIGTERM or SIGINT.
    Run {
        #[arg(short = 'c', long = "config")]
        config: PathBuf,
    },
    /// On a backend: attach the decapsulation program (GUE on --gue-port, and IP-in-IP).
    Backend {
        #[arg(long)]
        dev: String,
        #[arg(long, default_value_t = 6080)]
        gue_port: u16,
        #[arg(long, default_value = "native")]
        mode: Mode,
        /// Detach it instead.
        #[arg(long)]
        detach: bool,
        /// Print its counters (JSON) instead.
        #[arg(long)]
        stats: bool,
    },
    /// Stop new flows to a backend (established flows keep it); --undo takes it back.
    Drain {
        backend: IpAddr,
        #[arg(long)]
        undo: bool,
    },
    /// Counters by reason, per service and per backend.
    Stats {
        #[arg(long)]
        json: bool,
    },
    /// Detach the balancer from a device (the maps stay unless --purge).
    Detach {
        #[arg(long)]
        dev: String,
        #[arg(long)]
        purge: bool,
    },
}

pub fn run(args: LbArgs) -> ExitCode {
    match exec(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ringx lb: {e}");
            ExitCode::FAILURE
        }
    }
}

fn exec(args: LbArgs) -> Res<()> {
    match args.cmd {
        LbCmd::Attach {
            dev,
            config,
            mode,
            behind_filter,
            chain,
        } => {
            let mut lb = load_lb(&config)?;
            lb.chain |= chain;
            let dir = pin_dir(&args.pin_dir, Some(&lb));
            let devs: Vec<_> = dev
                .into_iter()
                .map(|d| (d, mode.unwrap_or(lb.mode.0)))
                .collect();
            let behind =
                behind_filter.or_else(|| lb.behind_filter.as_ref().map(|b| b.get_ref().clone()));
            if devs.is_empty() && behind.is_none() {
                return Err("give --dev, or --behind-filter (or behind_filter in [lb])".into());
            }
            bring_up(&lb, &dir, &devs, behind.as_deref(), &|l| println!("{l}"))?;
            Ok(())
        }
        LbCmd::Run { config } => crate::lb_run::run(&config, args.pin_dir),
        LbCmd::Backend {
            dev,
            gue_port,
            mode,
            detach,
            stats,
        } => {
            let dir = args
                .pin_dir
                .unwrap_or_else(|| PathBuf::from(ringx_lb::DEFAULT_DECAP_PIN_DIR));
            if stats {
                let c = ringx_lb::decap_stats_pinned(&dir).map_err(es)?;
                let v: Vec<String> = c
                    .iter()
                    .map(|(r, c)| {
                        format!(
                            "\"{}\":{{\"packets\":{},\"bytes\":{}}}",
                            r.name(),
                            c.packets,
                            c.bytes
                        )
                    })
                    .collect();
                println!("{{{}}}", v.join(","));
                return Ok(());
            }
            if detach {
                ringx_xdp::detach(&dir, &dev).map_err(es)?;
                ringx_lb::purge(&dir).map_err(es)?;
                println!("ringx lb: detached the decapsulation program from {dev}");
                return Ok(());
            }
            let mut d = Decap::load(gue_port, &dir).map_err(es)?;
            let att = d.attach(&dev, mode).map_err(es)?;
            println!(
                "ringx lb: {} the decapsulation program {} {dev} (GUE on UDP {gue_port}, and \
                 IP-in-IP; link {}, program {})",
                if att.replaced { "swapped" } else { "attached" },
                if att.replaced { "on" } else { "to" },
                att.link_id,
                att.prog_id
            );
            Ok(())
        }
        LbCmd::Drain { backend, undo } => {
            let dir = pin_dir(&args.pin_dir, None);
            let maps = LbMaps::open_pinned(&dir).map_err(es)?;
            let changed = control::set_out(&maps, backend, Out::Drain, !undo).map_err(es)?;
            let what = if undo {
                "takes new flows again"
            } else {
                "drained: no new flows; established flows stay"
            };
            let already = if changed { "" } else { " (already)" };
            println!("ringx lb: {backend} {what}{already}");
            Ok(())
        }
        LbCmd::Stats { json } => {
            let dir = pin_dir(&args.pin_dir, None);
            let maps = LbMaps::open_pinned(&dir).map_err(es)?;
            print!("{}", stats(&maps, &dir, json).map_err(es)?);
            Ok(())
        }
        LbCmd::Detach { dev, purge } => {
            let dir = pin_dir(&args.pin_dir, None);
            ringx_xdp::detach(&dir, &dev).map_err(|e| match e {
                ringx_xdp::Error::NotAttached { .. } => {
                    format!(
                        "the balancer is not attached to {dev} (no link pinned in {})",
                        dir.display()
                    )
                }
                e => e.to_string(),
            })?;
            println!("ringx lb: detached the balancer from {dev}");
            if purge {
                ringx_lb::purge(&dir).map_err(es)?;
                println!("ringx lb: removed the pinned maps under {}", dir.display());
            }
            Ok(())
        }
    }
}

/// `ringx lb stats`: text or one JSON object.
pub fn stats(maps: &LbMaps, dir: &Path, json: bool) -> ringx_xdp::Result<String> {
    use std::fmt::Write as _;
    let reasons = maps.reasons()?;
    let svcs = control::services(maps)?;
    let backends = control::backend_states(maps)?;
    let links = ringx_xdp::attachments(dir)?;
    let mut s = String::new();
    if json {
        let r: Vec<String> = reasons
            .iter()
            .map(|(r, c)| {
                format!(
                    "\"{}\":{{\"packets\":{},\"bytes\":{}}}",
                    r.name(),
                    c.packets,
                    c.bytes
                )
            })
            .collect();
        let counter = |c: &ringx_lb::Counter| {
            format!(
                "\"packets\":{},\"bytes\":{},\"new_flows\":{},\"lru_misses\":{}",
                c.packets, c.bytes, c.new_flows, c.lru_misses
            )
        };
        let mut sv = Vec::new();
        for (id, addr, proto) in &svcs {
            let c = maps.vip_counter(*id)?;
            sv.push(format!(
                "{{\"vip\":\"{addr}\",\"proto\":\"{}\",{}}}",
                proto.as_str(),
                counter(&c)
            ));
        }
        let mut bv = Vec::new();
        for b in &backends {
            let c = maps.backend_counter(b.index)?;
            bv.push(format!(
                "{{\"addr\":\"{}\",\"drained\":{},\"down\":{},\"resolved\":{},{}}}",
                b.addr,
                b.drained,
                b.down,
                b.resolved,
                counter(&c)
            ));
        }
        let lv: Vec<String> = links
            .iter()
            .map(|l| {
                format!(
                    "{{\"dev\":\"{}\",\"ifindex\":{},\"link_id\":{},\"prog_id\":{}}}",
                    l.dev, l.ifindex, l.link_id, l.prog_id
                )
            })
            .collect();
        let _ = writeln!(
            s,
            "{{\"reasons\":{{{}}},\"services\":[{}],\"backends\":[{}],\"links\":[{}]}}",
            r.join(","),
            sv.join(","),
            bv.join(","),
            lv.join(",")
        );
        return Ok(s);
    }
    for (r, c) in &reasons {
        let _ = writeln!(
            s,
            "{:<16} {:>12} packets {:>14} bytes  {}",
            r.name(),
            c.packets,
            c.bytes,
            r.description()
        );
    }
    for (id, addr, proto) in &svcs {
        let c = maps.vip_counter(*id)?;
        let _ = writeln!(
            s,
            "service {addr}/{}: {} packets, {} bytes, {} new flows, {} table misses",
            proto.as_str(),
            c.packets,
            c.bytes,
            c.new_flows,
            c.lru_misses
        );
    }
    for b in &backends {
        let c = maps.backend_counter(b.index)?;
        let mut state = Vec::new();
        if b.drained {
            state.push("drained");
        }
        if b.down {
            state.push("down");
        }
        if !b.resolved {
            state.push("next hop unresolved");
        }
        let state = if state.is_empty() {
            String::new()
        } else {
            format!(" ({})", state.join(", "))
        };
        let _ = writeln!(
            s,
            "backend {}{state}: {} packets, {} bytes, {} new flows, {} table misses",
            b.addr, c.packets, c.bytes, c.new_flows, c.lru_misses
        );
    }
    if links.is_empty() {
        let _ = writeln!(s, "attached: none");
    }
    for l in links {
        let _ = writeln!(
            s,
            "attached: {} (ifindex {}, link {}, program {})",
            l.dev, l.ifindex, l.link_id, l.prog_id
        );
    }
    Ok(s)
}
