//! Active-side connection steering, decided at start (issue #5, `[steering] mode`).
//!
//! Every upstream server (and every `rss_table` entry) is a destination ([`Dest`]: our
//! route's source address, server address, server port). For each zone this precomputes the
//! local ports whose replies from each destination arrive on that zone's CPU, and hands the
//! zone its table ([`PortTable`]; ringx's connector takes ports from it). What "arrive on"
//! means depends on the [`Mode`]:
//!
//! * `rss`: the NIC hashes the reply's 4-tuple with its Toeplitz key, looks the queue up in
//!   its indirection table, and the queue's interrupt runs on a CPU; a queue belongs to the
//!   zone pinned to that CPU. All of it is read from the device (`ringx rss show` prints it).
//!   RSS over ports is assumed (`ethtool -n IF rx-flow-hash tcp4` = `sdfn`, the default).
//! * `software`: the device has no RSS, so an XDP program ([`crate::xdp`]) moves every TCP
//!   packet to its zone's CPU through a cpumap: replies by our local port,
//!   `zone = port & (2^k − 1)` (Fastsocket), client packets by a hash of the client's address
//!   and port. The tables hold the ports of each zone's residue. On veth the program is
//!   attached in generic mode by default: a native-mode redirect turns the packet into an XDP
//!   frame and loses the "checksum not yet computed" mark veth peers send with, so the
//!   receiver would drop every redirected packet unless the peer turned checksum offload off
//!   (`ethtool -K PEER tx off`).
//! * `auto`: rss when the device has Toeplitz RSS over more than one RX queue, else software
//!   (root, a free XDP hook), else off; one log line says which and why.

use std::net::IpAddr;
use std::ops::RangeInclusive;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Why active steering could not be set up as configured (a device without RSS, a queue
/// layout that does not fit the zones, an XDP program the device refused): start-up stops,
/// on ringx's side, and retrying without a configuration change fails the same way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetupError(pub String);

impl std::fmt::Display for SetupError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SetupError {}

impl From<String> for SetupError {
    fn from(s: String) -> SetupError {
        SetupError(s)
    }
}

use crate::nic;
use crate::ports::{Dest, PortTable, PortTableBuilder, PortTableConfig};
use crate::steering::{FlowSteering, PortMask, ZoneMap};
use crate::xdp::{Steer, SteerSettings};

/// Packets each zone CPU's cpumap queue holds.
const CPUMAP_QSIZE: u32 = 2048;

/// `[steering] mode`: how the source ports of upstream connections are chosen.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Deserialize),
    serde(rename_all = "lowercase")
)]
pub enum Mode {
    /// RSS if the device has it over more than one queue, else software, else off.
    Auto,
    /// The NIC's RSS: port tables from its key, indirection table and queue CPUs.
    Rss,
    /// An XDP program steers by port (devices without RSS).
    Software,
    /// The kernel chooses source ports.
    #[default]
    Off,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Auto => "auto",
            Mode::Rss => "rss",
            Mode::Software => "software",
            Mode::Off => "off",
        }
    }
}

/// A device another XDP stage of ringx runs on: the filter, the load balancer (or the
/// balancer behind the filter, the last stage being the one that matters).
#[derive(Clone, Debug)]
pub struct Occupied {
    pub dev: String,
    /// What runs there, for messages ("the [xdp] filter").
    pub what: &'static str,
    /// Its chain slot when it hands what it passes on to a next stage; None: it does not.
    pub slot: Option<ringx_xdp::ChainSlot>,
    /// Where to set the chain up when `slot` is None, for the message.
    pub hint: &'static str,
}

/// What start-up asks for.
#[derive(Clone, Debug, Default)]
pub struct Request<'a> {
    /// The mode configured.
    pub mode: Mode,
    /// Each zone's CPU, by zone.
    pub cpus: &'a [usize],
    /// The destinations to precompute.
    pub dests: &'a [Dest],
    /// The devices the replies arrive on; empty: the ones the destinations are routed through.
    pub devices: &'a [String],
    /// XDP attach mode in software; None: generic on veth, native elsewhere.
    pub xdp_mode: Option<ringx_xdp::Mode>,
    /// Devices where other XDP programs of ringx run already (a device runs one XDP program
    /// at a time): steering there goes in the last one's chain slot, or fails.
    pub occupied: &'a [Occupied],
    /// Local ports to use; None: this namespace's `ip_local_port_range`.
    pub port_range: Option<RangeInclusive<u16>>,
    /// How long a port this side closed first rests; None: [`default_time_wait`].
    pub time_wait: Option<Duration>,
    /// Most precomputed ports per zone and destination.
    pub table_ports: Option<usize>,
    /// The listening ports, whose packets the XDP program steers by client.
    pub listen_ports: &'a [u16],
}

/// What start-up decided: the mode in effect, the zones' tables until they take them, and the
/// XDP program (dropping it detaches it).
#[derive(Debug)]
pub struct Active {
    /// The mode in effect (auto resolved).
    pub mode: Mode,
    tables: Vec<Option<PortTable>>,
    xdp: Option<Steer>,
}

impl Active {
    /// No steering for `zones` zones: the kernel chooses every port.
    pub fn off(zones: usize) -> Active {
        Active {
            mode: Mode::Off,
            tables: (0..zones).map(|_| None).collect(),
            xdp: None,
        }
    }

    /// Zone `zone`'s table (once).
    pub fn take_table(&mut self, zone: usize) -> Option<PortTable> {
        self.tables.get_mut(zone).and_then(Option::take)
    }

    /// The XDP program, when steering in software.
    pub fn xdp(&self) -> Option<&Steer> {
        self.xdp.as_ref()
    }
}

/// `ip_local_port_range` of this network namespace.
pub fn local_port_range() -> RangeInclusive<u16> {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| {
            let mut it = s.split_whitespace().map(|x| x.parse::<u16>().ok());
            Some(it.next()??..=it.next()??)
        })
        .unwrap_or(32768..=60999)
}

/// The network device that holds `ip`.
pub fn device_of(ip: IpAddr) -> Option<String> {
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

/// Whether `dev` is a loopback device (`ARPHRD_LOOPBACK`).
pub fn is_loopback(dev: &str) -> bool {
    std::fs::read_to_string(format!("/sys/class/net/{dev}/type")).is_ok_and(|t| t.trim() == "772")
    // ARPHRD_LOOPBACK
}

/// The zone of each RX queue from the device's IRQ CPUs, and the RSS function.
fn rss_steering(dev: &str, cpus: &[usize]) -> Result<FlowSteering, SetupError> {
    rss_function(
        &nic::discover(dev).map_err(|e| SetupError(e.to_string()))?,
        cpus,
    )
}

/// [`rss_steering`] from what discovery found.
fn rss_function(report: &nic::NicReport, cpus: &[usize]) -> Result<FlowSteering, SetupError> {
    let dev = &report.dev;
    let rss = match &report.rss {
        nic::RssState::Unavailable(_) => return Err(SetupError(format!("{dev} has no RSS"))),
        nic::RssState::Available(r) if !r.is_toeplitz() => {
            return Err(SetupError(format!(
                "{dev} hashes with {}, not Toeplitz",
                r.hash_functions().join("+")
            )))
        }
        nic::RssState::Available(_) if !report.hardware_steering() => {
            return Err(SetupError(format!(
                "{dev} has {} RX queue(s) under RSS",
                report.rx_queues.count
            )))
        }
        nic::RssState::Available(r) => r,
    };
    let reta = rss.reta().map_err(|e| SetupError(format!("{dev}: {e}")))?;
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
        return Err(SetupError(format!(
            "{dev}: no RX queue's interrupt is served by a zone's CPU (zones on {cpus:?}; \
             queues' CPUs {queue_cpu:?}): pin the IRQs to the zones' CPUs (see `ringx rss show \
             --dev {dev}`)"
        )));
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
    req: &Request,
    devs: &[String],
    range: &RangeInclusive<u16>,
) -> Result<Steer, SetupError> {
    if let Some(why) = ringx_xdp::bpf_unavailable() {
        return Err(SetupError(why));
    }
    let behind = |dev: &str| req.occupied.iter().find(|o| o.dev == dev);
    for dev in devs {
        if let Some(o) = behind(dev).filter(|o| o.slot.is_none()) {
            return Err(SetupError(format!(
                "{dev} already runs {} ({} to steer behind it)",
                o.what, o.hint
            )));
        }
    }
    let mut ports = req.listen_ports.to_vec();
    ports.sort_unstable();
    ports.dedup();
    let cpus = req.cpus;
    let settings = SteerSettings {
        zone_cpus: cpus.iter().map(|&c| c as u32).collect(),
        mask: PortMask::for_zones(cpus.len() as u16).mask(),
        port_range: (*range.start(), *range.end()),
        listen_ports: ports,
        qsize: CPUMAP_QSIZE,
    };
    let mut steer = Steer::load(&settings).map_err(|e| SetupError(e.to_string()))?;
    for dev in devs {
        if let Some((o, slot)) = behind(dev).and_then(|o| Some((o, o.slot.as_ref()?))) {
            steer
                .chain_behind(slot)
                .map_err(|e| SetupError(format!("behind {} on {dev}: {e}", o.what)))?;
            tracing::info!(
                "steering: XDP program behind {} on {dev} (its chain slot {}): TCP packets it \
                 passes to their zone's CPU",
                o.what,
                slot.path().display()
            );
            continue;
        }
        let mode = match req.xdp_mode {
            Some(m) => m,
            None if nic::driver(dev).is_ok_and(|d| d == "veth") => ringx_xdp::Mode::Generic,
            None => ringx_xdp::Mode::Native,
        };
        steer
            .attach(dev, mode)
            .map_err(|e| SetupError(format!("attach to {dev}: {e}")))?;
        tracing::info!(
            "steering: XDP program on {dev} ({} mode): TCP packets to their zone's CPU",
            mode.as_str()
        );
    }
    Ok(steer)
}

/// Decides the mode, attaches XDP when steering in software, and builds every zone's table.
/// Errors (an explicit mode that cannot work) stop start-up; `auto` never fails.
pub fn setup(req: &Request) -> Result<Active, SetupError> {
    let cpus = req.cpus;
    let zones = cpus.len();
    let mut st = Active::off(zones);
    if req.mode == Mode::Off {
        return Ok(st);
    }
    let started = Instant::now();
    let dests = req.dests;
    let range = req.port_range.clone().unwrap_or_else(local_port_range);
    let mut devs: Vec<String> = req.devices.to_vec();
    if devs.is_empty() {
        // auto without a device: the ones the upstreams are routed through.
        for d in dests {
            if let Some(dev) = device_of(d.local) {
                if !devs.contains(&dev) {
                    devs.push(dev);
                }
            }
        }
    }
    let (mode, steering, why) = match req.mode {
        Mode::Off => unreachable!("handled above"),
        Mode::Rss => {
            let dev = devs
                .first()
                .ok_or_else(|| "mode = \"rss\" needs a device".to_string())?;
            let fs = rss_steering(dev, cpus).map_err(|e| {
                format!("mode = \"rss\": {e} (`ringx rss show --dev {dev}` shows why)")
            })?;
            (Mode::Rss, fs, String::new())
        }
        Mode::Software => {
            st.xdp = Some(software_steering(req, &devs, &range)?);
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
                Err(SetupError(format!(
                    "{} devices: RSS tables model one",
                    devs.len()
                )))
            };
            match rss {
                Ok(fs) => (
                    Mode::Rss,
                    fs,
                    format!("{}: RSS over its RX queues", devs[0]),
                ),
                Err(no_rss) => match software_steering(req, &devs, &range) {
                    Ok(x) => {
                        st.xdp = Some(x);
                        (Mode::Software, software_function(zones), no_rss.0)
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
        time_wait: req.time_wait.unwrap_or_else(default_time_wait),
        max_table_ports: req.table_ports.unwrap_or(usize::MAX),
        ..PortTableConfig::default()
    };
    let builder = PortTableBuilder::new(Arc::new(steering), config).dests(dests.iter().copied());
    let mut tables = builder.build_all().map_err(|e| SetupError(e.to_string()))?;
    for z in tables.len()..zones {
        tables.push(
            builder
                .build(z as u16)
                .map_err(|e| SetupError(e.to_string()))?,
        );
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
pub fn default_time_wait() -> Duration {
    let reuse =
        std::fs::read_to_string("/proc/sys/net/ipv4/tcp_tw_reuse").is_ok_and(|s| s.trim() == "1");
    Duration::from_secs(if reuse { 1 } else { 60 })
}

/// The software steering function for `zones` zones: zone = local port & mask.
pub fn software_function(zones: usize) -> FlowSteering {
    FlowSteering::software(
        PortMask::for_zones(zones as u16),
        ZoneMap::identity(zones as u16),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;

    #[test]
    fn off_builds_nothing() {
        let mut st = setup(&Request {
            cpus: &[0, 1],
            ..Request::default()
        })
        .unwrap();
        assert_eq!(st.mode, Mode::Off);
        assert!(st.take_table(0).is_none());
    }

    #[test]
    fn auto_over_loopback_is_off() {
        let dests: Vec<Dest> = vec!["127.0.0.1 127.0.0.1 9".parse().unwrap()];
        let mut st = setup(&Request {
            mode: Mode::Auto,
            cpus: &[0, 1],
            dests: &dests,
            ..Request::default()
        })
        .unwrap();
        assert_eq!(st.mode, Mode::Off);
        assert!(st.take_table(1).is_none());
        assert_eq!(
            device_of("127.0.0.1".parse().unwrap()).as_deref(),
            Some("lo")
        );
        assert!(is_loopback("lo"));
    }

    #[test]
    fn explicit_rss_without_rss_is_an_error() {
        let e = setup(&Request {
            mode: Mode::Rss,
            cpus: &[0],
            devices: &["lo".to_string()],
            ..Request::default()
        })
        .expect_err("lo has no RSS");
        assert!(e.0.contains("lo"), "{e}");
    }

    #[test]
    fn rss_zones_follow_the_queues_irq_cpus() {
        use crate::toeplitz::{toeplitz, HashInput, DEFAULT_KEY};
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
        assert!(e.0.contains("no RX queue's interrupt"), "{e}");
        let mut one = report.clone();
        one.rx_queues.count = 1;
        assert!(rss_function(&one, &[0])
            .err()
            .unwrap()
            .0
            .contains("1 RX queue"));
        let mut xor = report.clone();
        if let nic::RssState::Available(r) = &mut xor.rss {
            r.hfunc = 2;
        }
        assert!(rss_function(&xor, &[0])
            .err()
            .unwrap()
            .0
            .contains("xor, not Toeplitz"));
        let mut none = report;
        none.rss = nic::RssState::Unavailable("no".into());
        assert_eq!(
            rss_function(&none, &[0]).err().unwrap().0,
            "eth9 has no RSS"
        );
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
