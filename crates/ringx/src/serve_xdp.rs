//! The XDP filter `ringx serve` runs for its `[xdp]` section (crate ringx-xdp; the same
//! pinned maps `ringx xdp` edits).

use ringx_server::error::{Error, Kind, Side};
use ringx_xdp::{Filter, List, Maps, Origin, MOUNT_NOTE};

use ringx_config::xdp::Xdp;

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
    pub fn start(cfg: &Xdp, listen: &[std::net::SocketAddr]) -> Result<ServeXdp, Error> {
        let es = |e: ringx_xdp::Error| {
            Error::new(Kind::Io, Side::Internal)
                .context("[xdp]")
                .cause(e)
        };
        let mut filter = Filter::load(&cfg.settings(), &cfg.pin_dir).map_err(es)?;
        if filter.mounted_bpffs() {
            tracing::warn!("xdp: note: {MOUNT_NOTE}");
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
