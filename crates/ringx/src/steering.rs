//! Active-side connection steering, set up at start (issue #5, `[steering] mode`).
//!
//! Every upstream server (and every `rss_table` entry) is a destination: (our route's source
//! address, server address, server port). For each zone ringx precomputes the local ports
//! whose replies from each destination arrive on that zone's CPU, and hands the zone its
//! table ([`ringx_steer::ports::PortTable`]; the zone's connector takes ports from it, see
//! `crate::proxy::connector`). What "arrive on" means depends on the mode:
//!
//! * `rss`: the NIC hashes the reply's 4-tuple with its Toeplitz key, looks the queue up in
//!   its indirection table, and the queue's interrupt runs on a CPU; a queue belongs to the
//!   zone pinned to that CPU. All of it is read from the device (`ringx rss show` prints it).
//!   RSS over ports is assumed (`ethtool -n IF rx-flow-hash tcp4` = `sdfn`, the default).
//! * `software`: the device has no RSS, so ringx attaches an XDP program
//!   (`ringx_xdp::steer`) that moves every TCP packet to its zone's CPU through a cpumap:
//!   replies by our local port, `zone = port & (2^k − 1)` (Fastsocket), client packets by a
//!   hash of the client's address and port. The tables hold the ports of each zone's
//!   residue. On veth the program is attached in generic mode by default: a native-mode
//!   redirect turns the packet into an XDP frame and loses the "checksum not yet computed"
//!   mark veth peers send with, so the receiver would drop every redirected packet unless
//!   the peer turned checksum offload off (`ethtool -K PEER tx off`).
//! * `auto`: rss when the device has Toeplitz RSS over more than one RX queue, else software
//!   (root, a free XDP hook), else off; one log line says which and why.
//!
//! The counters (table hits, dynamic searches, hash evaluations, fallbacks, and the measured
//! locality of upstream connections) are logged per zone when ringx exits.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ringx_steer::nic;
use ringx_steer::ports::{Dest, PortTable, PortTableBuilder, PortTableConfig};
use ringx_steer::steering::{FlowSteering, PortMask, ZoneMap};
use ringx_xdp::steer::{Steer, SteerSettings};

use crate::config::steering::Mode;
use crate::config::Config;
use crate::metrics::ZoneCounters;
use crate::proxy::connector::{route_source, ConnectCounters};
use crate::proxy::Upstreams;

/// Packets each zone CPU's cpumap queue holds.
const CPUMAP_QSIZE: u32 = 2048;

/// What start-up decided, the zones' tables until they take them, and the XDP program.
pub struct ActiveSteering {
    /// The mode in effect (auto resolved).
    pub mode: Mode,
    tables: Vec<Option<PortTable>>,
    /// The zones' metrics blocks, where their connectors publish (read at exit).
    zones: Vec<Arc<ZoneCounters>>,
    xdp: Option<Steer>,
}

impl ActiveSteering {
    /// Zone `zone`'s table (once).
    pub fn take_table(&mut self, zone: usize) -> Option<PortTable> {
        self.tables.get_mut(zone).and_then(Option::take)
    }

    /// Zone `zone`'s connector: its table, its CPU, its metrics block (also read here at
    /// exit).
    pub fn connector(
        &mut self,
        zone: usize,
        cpu: usize,
        metrics: Arc<ZoneCounters>,
    ) -> crate::proxy::connector::Connector {
        self.zones.push(metrics.clone());
        crate::proxy::connector::Connector::new(self.take_table(zone), Some(cpu), Some(metrics))
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
    /// Logs the counters (also on `/metrics` while it runs) and detaches the XDP program
    /// (dropping it closes its link).
    fn drop(&mut self) {
        let per = self.counters();
        let total = ConnectCounters::sum(&per);
        if total.connects > 0 || self.mode != Mode::Off {
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
            tracing::info!("steering ({}): total: {total}{share}", self.mode.as_str());
        }
        if let Some(x) = &self.xdp {
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

/// `ip_local_port_range` of this network namespace.
fn local_port_range() -> std::ops::RangeInclusive<u16> {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| {
            let mut it = s.split_whitespace().map(|x| x.parse::<u16>().ok());
            Some(it.next()??..=it.next()??)
        })
        .unwrap_or(32768..=60999)
}

/// The network device that holds `ip`.
fn device_of(ip: IpAddr) -> Option<String> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs allocates a list and stores its head in `head`; freed below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return None;
    }
    let mut found = None;
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, alive until freeifaddrs.
        let ifa = unsafe { &*cur };
        cur = ifa.ifa_next;
        if ifa.ifa_addr.is_null() {
            continue;
        }
        // SAFETY: ifa_addr points to a sockaddr of the family it names; we read the whole
        // sockaddr_in/sockaddr_in6 only after checking that family.
        let addr = unsafe {
            match i32::from((*ifa.ifa_addr).sa_family) {
                libc::AF_INET => {
                    let a = &*(ifa.ifa_addr as *const libc::sockaddr_in);
                    Some(IpAddr::from(u32::from_be(a.sin_addr.s_addr).to_be_bytes()))
                }
                libc::AF_INET6 => {
                    let a = &*(ifa.ifa_addr as *const libc::sockaddr_in6);
                    Some(IpAddr::from(a.sin6_addr.s6_addr))
                }
                _ => None,
            }
        };
        if addr == Some(ip) {
            // SAFETY: ifa_name is a NUL-terminated string owned by the list.
            let name = unsafe { std::ffi::CStr::from_ptr(ifa.ifa_name) };
            found = Some(name.to_string_lossy().into_owned());
            break;
        }
    }
    // SAFETY: frees the list getifaddrs returned, once; no reference into it survives.
    unsafe { libc::freeifaddrs(head) };
    found
}

fn is_loopback(dev: &str) -> bool {
    std::fs::read_to_string(format!("/sys/class/net/{dev}/type")).is_ok_and(|t| t.trim() == "772")
    // ARPHRD_LOOPBACK
}

/// The zone of each RX queue from the device's IRQ CPUs, and the RSS function.
fn rss_steering(dev: &str, cpus: &[usize]) -> Result<FlowSteering, String> {
    rss_function(&nic::discover(dev).map_err(|e| e.to_string())?, cpus)
}

/// [`rss_steering`] from what discovery found.
fn rss_function(report: &nic::NicReport, cpus: &[usize]) -> Result<FlowSteering, String> {
    let dev = &report.dev;
    let rss = match &report.rss {
        nic::RssState::Unavailable(_) => return Err(format!("{dev} has no RSS")),
        nic::RssState::Available(r) if !r.is_toeplitz() => {
            return Err(format!(
                "{dev} hashes with {}, not Toeplitz",
                r.hash_functions().join("+")
            ))
        }
        nic::RssState::Available(_) if !report.hardware_steering() => {
            return Err(format!(
                "{dev} has {} RX queue(s) under RSS",
                report.rx_queues.count
            ))
        }
        nic::RssState::Available(r) => r,
    };
    let reta = rss.reta().map_err(|e| format!("{dev}: {e}"))?;
    let queues = (report.rx_queues.count as usize).max(
        reta.table
            .iter()
            .map(|&q| usize::from(q) + 1)
            .max()
            .unwrap_or(0),
    );
    let mut queue_cpu = vec![None; queues];
    for irq in &report.irqs {
        if let (Some(q), Some(&cpu)) = (irq.queue, irq.cpus.first()) {
            if let Some(slot) = queue_cpu.get_mut(usize::from(q)) {
                *slot = Some(cpu);
            }
        }
    }
    let zones = ZoneMap::from_cpus(&queue_cpu, cpus);
    if zones.zones() == 0 {
        return Err(format!(
            "{dev}: no RX queue's interrupt is served by a zone's CPU (zones on {cpus:?}; \
             queues' CPUs {queue_cpu:?}): pin the IRQs to the zones' CPUs (see `ringx rss show \
             --dev {dev}`)"
        ));
    }
    let served: Vec<usize> = (0..queues as u16)
        .filter_map(|q| zones.zone_of(q).map(usize::from))
        .collect();
    let idle: Vec<usize> = (0..cpus.len()).filter(|z| !served.contains(z)).collect();
    if !idle.is_empty() {
        tracing::warn!(
            "steering: {dev}: no RX queue is served by the CPU of zone(s) {idle:?}: their \
             upstream connections get the kernel's ports"
        );
    }
    Ok(FlowSteering::rss(&rss.key, reta, zones, true))
}

/// Loads the XDP program and attaches it to every device.
fn software_steering(
    cfg: &Config,
    devs: &[String],
    cpus: &[usize],
    range: &std::ops::RangeInclusive<u16>,
    listen: &[SocketAddr],
) -> Result<Steer, String> {
    if let Some(why) = ringx_xdp::bpf_unavailable() {
        return Err(why);
    }
    if let Some(x) = &cfg.xdp {
        if devs.contains(&x.dev.0) {
            return Err(format!(
                "{} already runs the [xdp] filter (one XDP program per device)",
                x.dev.0
            ));
        }
    }
    let mut ports: Vec<u16> = listen.iter().map(SocketAddr::port).collect();
    ports.sort_unstable();
    ports.dedup();
    let settings = SteerSettings {
        zone_cpus: cpus.iter().map(|&c| c as u32).collect(),
        mask: PortMask::for_zones(cpus.len() as u16).mask(),
        port_range: (*range.start(), *range.end()),
        listen_ports: ports,
        qsize: CPUMAP_QSIZE,
    };
    let mut steer = Steer::load(&settings).map_err(|e| e.to_string())?;
    for dev in devs {
        let mode = match cfg.steering.xdp_mode {
            Some(m) => m.0,
            None if nic::driver(dev).is_ok_and(|d| d == "veth") => ringx_xdp::Mode::Generic,
            None => ringx_xdp::Mode::Native,
        };
        steer
            .attach(dev, mode)
            .map_err(|e| format!("attach to {dev}: {e}"))?;
        tracing::info!(
            "steering: XDP program on {dev} ({} mode): TCP packets to their zone's CPU",
            mode.as_str()
        );
    }
    Ok(steer)
}

/// Decides the mode, attaches XDP when steering in software, and builds every zone's table.
/// Errors (an explicit mode that cannot work) stop start-up; `auto` never fails.
pub fn setup(
    cfg: &Config,
    cpus: &[usize],
    upstreams: Option<&Upstreams>,
    listen: &[SocketAddr],
) -> Result<ActiveSteering, String> {
    let zones = cpus.len();
    let mut st = ActiveSteering {
        mode: Mode::Off,
        tables: (0..zones).map(|_| None).collect(),
        zones: Vec::new(),
        xdp: None,
    };
    let wanted = cfg.steering.mode();
    if wanted == Mode::Off {
        return Ok(st);
    }
    let started = Instant::now();
    let dests = destinations(cfg, upstreams);
    let range = cfg
        .steering
        .port_range
        .as_ref()
        .map_or_else(local_port_range, |r| r.get_ref().0.clone());
    let mut devs: Vec<String> = cfg.steering.devices().iter().map(|d| d.0.clone()).collect();
    if devs.is_empty() {
        // auto without a device: the ones the upstreams are routed through.
        for d in &dests {
            if let Some(dev) = device_of(d.local) {
                if !devs.contains(&dev) {
                    devs.push(dev);
                }
            }
        }
    }
    let (mode, steering, why) = match wanted {
        Mode::Off => unreachable!("handled above"),
        Mode::Rss => {
            let fs = rss_steering(&devs[0], cpus).map_err(|e| {
                format!(
                    "mode = \"rss\": {e} (`ringx rss show --dev {}` shows why)",
                    devs[0]
                )
            })?;
            (Mode::Rss, fs, String::new())
        }
        Mode::Software => {
            st.xdp = Some(software_steering(cfg, &devs, cpus, &range, listen)?);
            (Mode::Software, software_function(zones), String::new())
        }
        Mode::Auto => {
            let off = |why: String| {
                tracing::info!("steering: mode = \"auto\": off: {why}");
            };
            if devs.is_empty() {
                off("no device given, and no upstream to find one from".into());
                return Ok(st);
            }
            if let Some(lo) = devs.iter().find(|d| is_loopback(d)) {
                off(format!(
                    "the upstreams are reached over {lo} (loopback), whose packets are processed \
                     on the sending CPU: nothing to steer"
                ));
                return Ok(st);
            }
            let rss = if devs.len() == 1 {
                rss_steering(&devs[0], cpus)
            } else {
                Err(format!("{} devices: RSS tables model one", devs.len()))
            };
            match rss {
                Ok(fs) => (
                    Mode::Rss,
                    fs,
                    format!("{}: RSS over its RX queues", devs[0]),
                ),
                Err(no_rss) => match software_steering(cfg, &devs, cpus, &range, listen) {
                    Ok(x) => {
                        st.xdp = Some(x);
                        (Mode::Software, software_function(zones), no_rss)
                    }
                    Err(e) => {
                        off(format!(
                            "no hardware steering ({no_rss}), and software steering is \
                             unavailable ({e})"
                        ));
                        return Ok(st);
                    }
                },
            }
        }
    };
    let config = PortTableConfig {
        range: range.clone(),
        time_wait: cfg
            .steering
            .time_wait
            .map_or_else(default_time_wait, |d| d.0),
        max_table_ports: cfg.steering.table_ports.unwrap_or(usize::MAX),
        ..PortTableConfig::default()
    };
    let builder = PortTableBuilder::new(Arc::new(steering), config).dests(dests.iter().copied());
    let mut tables = builder.build_all().map_err(|e| e.to_string())?;
    for z in tables.len()..zones {
        tables.push(builder.build(z as u16).map_err(|e| e.to_string())?);
    }
    tables.truncate(zones);
    let sizes: Vec<usize> = tables
        .iter()
        .flat_map(|t| {
            dests
                .iter()
                .filter_map(|d| t.dest_id(d))
                .map(|id| t.table_len(id))
        })
        .collect();
    let (min, max) = (
        sizes.iter().min().copied().unwrap_or(0),
        sizes.iter().max().copied().unwrap_or(0),
    );
    st.tables = tables.into_iter().map(Some).collect();
    st.mode = mode;
    let why = if why.is_empty() {
        String::new()
    } else {
        format!(" ({why})")
    };
    tracing::info!(
        "steering: mode {}{why} on {}: {zones} zones, {} destinations, {min}-{max} ports per \
         zone and destination from {}-{}, built in {:.1} ms",
        mode.as_str(),
        devs.join(", "),
        dests.len(),
        range.start(),
        range.end(),
        started.elapsed().as_secs_f64() * 1000.0
    );
    Ok(st)
}

/// How long a port this side closed first rests: the kernel's TIME_WAIT (60 s), or 1 s
/// when `net.ipv4.tcp_tw_reuse = 1` lets connect() reuse a TIME_WAIT 4-tuple whose last
/// timestamp is over a second old.
fn default_time_wait() -> Duration {
    let reuse =
        std::fs::read_to_string("/proc/sys/net/ipv4/tcp_tw_reuse").is_ok_and(|s| s.trim() == "1");
    Duration::from_secs(if reuse { 1 } else { 60 })
}

fn software_function(zones: usize) -> FlowSteering {
    FlowSteering::software(
        PortMask::for_zones(zones as u16),
        ZoneMap::identity(zones as u16),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(steering: &str, upstream: &str) -> Config {
        crate::config::parse(
            "t.toml",
            &format!(
                "[steering]\n{steering}\n{upstream}\n[[server]]\nlisten = [\"127.0.0.1:1\"]\n\
                 [[server.location]]\npath = \"/\"\nreturn = {{ status = 200 }}\n"
            ),
        )
        .unwrap()
    }

    #[test]
    fn off_builds_nothing() {
        let c = cfg("", "");
        let mut st = setup(&c, &[0, 1], None, &[]).unwrap();
        assert_eq!(st.mode, Mode::Off);
        assert!(st.take_table(0).is_none());
    }

    #[test]
    fn auto_over_loopback_is_off() {
        let c = cfg(
            "mode = \"auto\"",
            "[[upstream]]\nname = \"a\"\nservers = [\"127.0.0.1:9\"]",
        );
        let mut ups = Upstreams::compile(&c).unwrap();
        let _ = crate::server::route::Routes::compile(&c, &mut ups);
        let mut st = setup(&c, &[0, 1], Some(&ups), &[]).unwrap();
        assert_eq!(st.mode, Mode::Off);
        assert!(st.take_table(1).is_none());
        assert_eq!(
            device_of("127.0.0.1".parse().unwrap()).as_deref(),
            Some("lo")
        );
        assert!(is_loopback("lo"));
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
        assert!(e.contains("lo"), "{e}");
    }

    #[test]
    fn rss_zones_follow_the_queues_irq_cpus() {
        use ringx_steer::toeplitz::{toeplitz, HashInput, DEFAULT_KEY};
        // 4 queues, queue q's interrupt on CPU q; zones on CPUs 3 and 1.
        let indir: Vec<u32> = (0..128).map(|i| i % 4).collect();
        let report = nic::NicReport {
            dev: "eth9".into(),
            rss: nic::RssState::Available(nic::RssConfig {
                key: DEFAULT_KEY.to_vec(),
                hfunc: 1,
                indir: indir.clone(),
            }),
            rx_queues: nic::RxQueues {
                count: 4,
                source: "test",
            },
            irqs: (0..4)
                .map(|q| nic::QueueIrq {
                    irq: 40 + q,
                    name: format!("eth9-TxRx-{q}"),
                    queue: Some(q as u16),
                    cpus: vec![q as usize],
                })
                .collect(),
        };
        let fs = rss_function(&report, &[3, 1]).unwrap();
        let d: Dest = "10.0.0.1 10.0.0.2 80".parse().unwrap();
        let tables = PortTableBuilder::new(
            Arc::new(fs),
            PortTableConfig {
                range: 40000..=40999,
                ..PortTableConfig::default()
            },
        )
        .dest(d)
        .build_all()
        .unwrap();
        assert_eq!(tables.len(), 2);
        for (z, cpu) in [(0usize, 3u32), (1, 1)] {
            let id = tables[z].dest_id(&d).unwrap();
            assert!(tables[z].table_len(id) > 150);
            for p in tables[z].idle_ports(id) {
                let input = HashInput::with_ports(d.remote, SocketAddr::new(d.local, p)).unwrap();
                let queue = indir[toeplitz(&DEFAULT_KEY, input.as_bytes()) as usize & 127];
                assert_eq!(queue, cpu, "zone {z} port {p}");
            }
        }
        // No zone on a queue's CPU, one queue, another hash: refused, saying why.
        let e = rss_function(&report, &[7]).err().unwrap();
        assert!(e.contains("no RX queue's interrupt"), "{e}");
        let mut one = report.clone();
        one.rx_queues.count = 1;
        assert!(rss_function(&one, &[0])
            .err()
            .unwrap()
            .contains("1 RX queue"));
        let mut xor = report.clone();
        if let nic::RssState::Available(r) = &mut xor.rss {
            r.hfunc = 2;
        }
        assert!(rss_function(&xor, &[0])
            .err()
            .unwrap()
            .contains("xor, not Toeplitz"));
        let mut none = report;
        none.rss = nic::RssState::Unavailable("no".into());
        assert_eq!(rss_function(&none, &[0]).err().unwrap(), "eth9 has no RSS");
    }

    #[test]
    fn software_tables_hold_each_zones_residue() {
        // The XDP part needs root and a device; the table part is the same function.
        let fs = software_function(2);
        let d: Dest = "10.0.0.1 10.0.0.2 80".parse().unwrap();
        let b = PortTableBuilder::new(
            Arc::new(fs),
            PortTableConfig {
                range: 40000..=40099,
                ..PortTableConfig::default()
            },
        )
        .dest(d);
        let t = b.build_all().unwrap();
        for (z, t) in t.iter().enumerate() {
            let id = t.dest_id(&d).unwrap();
            assert_eq!(t.table_len(id), 50);
            assert!(t.idle_ports(id).all(|p| usize::from(p & 1) == z));
        }
    }
}
