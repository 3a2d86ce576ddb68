//! The status page's numbers (`GET /`, `/status.json` on the admin listener), in the manner
//! of HAProxy's stats page. They are read from the very text `/metrics` serves, parsed back,
//! so the page and a Prometheus scrape taken at the same moment cannot disagree; what
//! `/metrics` has no family for is added from `/proc` (each zone thread's CPU time and the
//! CPU it last ran on) and from the previous look (rates: requests per second, busy share).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use ringx_server::metrics::listeners::ListenerInfo;
use ringx_server::metrics::Metrics;

/// The listeners of a compiled configuration, in its order, for `/metrics` and the page.
pub fn listeners(c: &ringx_server::Compiled) -> Vec<ListenerInfo> {
    let r = &c.routes;
    let tls = |i: usize| c.tls.as_ref().is_some_and(|t| t.sites.is_tls(i));
    let tcp = r.listen.iter().enumerate().map(|(i, a)| ListenerInfo {
        addr: a.to_string(),
        proto: match r.listener_kind.get(i) {
            Some(ringx_server::route::ListenerKind::Stream(_)) => "stream",
            _ if tls(i) => "https",
            _ => "http",
        },
    });
    let udp = r.udp_listen.iter().map(|a| ListenerInfo {
        addr: a.to_string(),
        proto: "udp",
    });
    tcp.chain(udp).collect()
}

/// One sample of the Prometheus text: name, labels, value.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

/// Parses the text exposition format (what `Metrics::render` writes: no timestamps).
pub fn parse(text: &str) -> Vec<Sample> {
    let mut out = Vec::new();
    for line in text.lines() {
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let (head, value) = match line.rsplit_once(' ') {
            Some(x) => x,
            None => continue,
        };
        let Ok(value) = value.parse::<f64>() else {
            continue;
        };
        let (name, labels) = match head.split_once('{') {
            None => (head.to_string(), Vec::new()),
            Some((n, rest)) => (
                n.to_string(),
                parse_labels(rest.strip_suffix('}').unwrap_or(rest)),
            ),
        };
        out.push(Sample {
            name,
            labels,
            value,
        });
    }
    out
}

fn parse_labels(s: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = s;
    while let Some((k, v)) = rest.split_once("=\"") {
        let mut val = String::new();
        let mut chars = v.char_indices();
        let mut end = v.len();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some((_, 'n')) => val.push('\n'),
                    Some((_, c)) => val.push(c),
                    None => {}
                },
                '"' => {
                    end = i + 1;
                    break;
                }
                c => val.push(c),
            }
        }
        out.push((k.trim_start_matches(',').to_string(), val));
        rest = &v[end..];
    }
    out
}

impl Sample {
    pub fn label(&self, k: &str) -> &str {
        self.labels
            .iter()
            .find(|(n, _)| n == k)
            .map_or("", |(_, v)| v.as_str())
    }
}

/// One zone's row.
#[derive(Clone, Debug, Default)]
pub struct ZoneRow {
    pub id: usize,
    pub connections: u64,
    pub requests: u64,
    pub rps: f64,
    /// Share of the last interval the zone was not parked, in percent.
    pub busy: f64,
    pub parked: bool,
    /// CPU time share of the zone's thread over the last interval, in percent, and the CPU it
    /// last ran on (from /proc).
    pub cpu_pct: Option<f64>,
    pub on_cpu: Option<u32>,
}

/// One upstream server's row.
#[derive(Clone, Debug, Default)]
pub struct ServerRow {
    pub upstream: String,
    pub server: String,
    pub addr: String,
    pub healthy: bool,
    pub drained: bool,
    pub weight: u64,
    pub active: u64,
    pub responses: u64,
    pub failures: u64,
    /// Response time quantiles in milliseconds (p50, p90, p99).
    pub p50: Option<f64>,
    pub p90: Option<f64>,
    pub p99: Option<f64>,
}

/// Everything the page shows.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    pub version: String,
    pub engine: String,
    pub uptime: f64,
    pub generation: u64,
    pub reloads_ok: u64,
    pub reloads_failed: u64,
    pub zones: Vec<ZoneRow>,
    pub responses: BTreeMap<String, u64>,
    pub servers: Vec<ServerRow>,
    pub listeners: Vec<(String, String)>,
    /// (file, subject, days to expiry).
    pub certs: Vec<(String, String, f64)>,
    /// XDP drops by reason; None without `[xdp]`.
    pub xdp_drops: Option<BTreeMap<String, u64>>,
    /// Cache requests by status; None without a cache.
    pub cache: Option<BTreeMap<String, u64>>,
}

impl Snapshot {
    pub fn requests(&self) -> u64 {
        self.zones.iter().map(|z| z.requests).sum()
    }
    pub fn connections(&self) -> u64 {
        self.zones.iter().map(|z| z.connections).sum()
    }
    pub fn rps(&self) -> f64 {
        self.zones.iter().map(|z| z.rps).sum()
    }
    /// Hits (answered from the cache, fresh or stale) over all cached-location requests.
    pub fn cache_hit_ratio(&self) -> Option<f64> {
        let c = self.cache.as_ref()?;
        let all: u64 = c.values().sum();
        let hits: u64 = ["HIT", "STALE", "UPDATING", "REVALIDATED"]
            .iter()
            .filter_map(|s| c.get(*s))
            .sum();
        (all > 0).then(|| hits as f64 / all as f64)
    }
}

/// What the previous look saw, for rates.
struct Prev {
    at: Instant,
    requests: Vec<u64>,
    parked_s: Vec<f64>,
    cpu_ticks: Vec<Option<u64>>,
}

/// The page's state: the metrics and the previous look.
pub struct Board {
    pub metrics: std::sync::Arc<Metrics>,
    prev: Mutex<Option<Prev>>,
    /// Rates from the last full interval, kept when looks come faster than one a second.
    last: Mutex<Vec<(f64, f64, Option<f64>)>>,
}

/// A zone thread's CPU ticks (user + system) and the CPU it last ran on.
fn zone_threads() -> BTreeMap<usize, (u64, u32)> {
    let mut out = BTreeMap::new();
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return out;
    };
    for e in dir.flatten() {
        let p = e.path();
        let Ok(comm) = std::fs::read_to_string(p.join("comm")) else {
            continue;
        };
        let Some(id) = comm
            .trim()
            .strip_prefix("ringx-zone-")
            .and_then(|n| n.parse::<usize>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(p.join("stat")) else {
            continue;
        };
        // Fields after the parenthesised name: state is field 3; utime 14, stime 15,
        // processor 39 (proc(5)).
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let f: Vec<&str> = rest.split_whitespace().collect();
        let num = |i: usize| f.get(i - 3).and_then(|v| v.parse::<u64>().ok());
        if let (Some(u), Some(s), Some(cpu)) = (num(14), num(15), num(39)) {
            out.insert(id, (u + s, cpu as u32));
        }
    }
    out
}

fn clock_ticks() -> f64 {
    // SAFETY: sysconf takes an integer and reads no memory of ours.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

impl Board {
    pub fn new(metrics: std::sync::Arc<Metrics>) -> Board {
        Board {
            metrics,
            prev: Mutex::new(None),
            last: Mutex::new(Vec::new()),
        }
    }

    /// A look at everything, with rates over the time since the previous look (at least a
    /// second; faster looks reuse the last rates).
    pub fn snapshot(&self) -> Snapshot {
        let samples = parse(&self.metrics.render());
        let mut s = Snapshot::default();
        let mut zones: BTreeMap<usize, ZoneRow> = BTreeMap::new();
        let mut parked_s: BTreeMap<usize, f64> = BTreeMap::new();
        let mut servers: BTreeMap<(String, String, String), ServerRow> = BTreeMap::new();
        let mut buckets: BTreeMap<(String, String, String), Vec<(f64, f64)>> = BTreeMap::new();
        let now_epoch = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        for x in &samples {
            let zone = x.label("zone").parse::<usize>().ok();
            let key = || {
                (
                    x.label("upstream").to_string(),
                    x.label("server").to_string(),
                    x.label("addr").to_string(),
                )
            };
            let v = x.value;
            match x.name.as_str() {
                "ringx_info" => {
                    s.version = x.label("version").into();
                    s.engine = x.label("engine").into();
                }
                "ringx_uptime_seconds" => s.uptime = v,
                "ringx_config_generation" => s.generation = v as u64,
                "ringx_reloads_total" if x.label("result") == "ok" => s.reloads_ok = v as u64,
                "ringx_reloads_total" => s.reloads_failed = v as u64,
                "ringx_requests_total" => {
                    let z = zone.unwrap_or(0);
                    zones.entry(z).or_default().requests = v as u64;
                }
                "ringx_connections_active" => {
                    zones.entry(zone.unwrap_or(0)).or_default().connections = v as u64;
                }
                "ringx_zone_parked" => {
                    zones.entry(zone.unwrap_or(0)).or_default().parked = v > 0.0;
                }
                "ringx_zone_parked_seconds_total" => {
                    parked_s.insert(zone.unwrap_or(0), v);
                }
                "ringx_responses_total" => {
                    *s.responses.entry(x.label("class").into()).or_default() += v as u64;
                }
                "ringx_upstream_server_healthy" => {
                    servers.entry(key()).or_default().healthy = v > 0.0;
                }
                "ringx_upstream_server_drained" => {
                    servers.entry(key()).or_default().drained = v > 0.0;
                }
                "ringx_upstream_server_weight" => {
                    servers.entry(key()).or_default().weight = v as u64
                }
                "ringx_upstream_server_active" => {
                    servers.entry(key()).or_default().active = v as u64
                }
                "ringx_upstream_server_responses_total" => {
                    servers.entry(key()).or_default().responses = v as u64;
                }
                "ringx_upstream_server_failures_total" => {
                    servers.entry(key()).or_default().failures = v as u64;
                }
                "ringx_upstream_server_response_seconds_bucket" => {
                    let le = x.label("le").parse::<f64>().unwrap_or(f64::INFINITY);
                    buckets.entry(key()).or_default().push((le, v));
                }
                "ringx_listener_info" => s
                    .listeners
                    .push((x.label("addr").into(), x.label("proto").into())),
                "ringx_tls_certificate_expiry_timestamp_seconds" => s.certs.push((
                    x.label("cert").into(),
                    x.label("subject").into(),
                    (v - now_epoch) / 86400.0,
                )),
                "ringx_xdp_packets_total" => {
                    let d = s.xdp_drops.get_or_insert_with(BTreeMap::new);
                    if x.label("verdict") == "drop" {
                        *d.entry(x.label("reason").into()).or_default() += v as u64;
                    }
                }
                "ringx_cache_requests_total" => {
                    let c = s.cache.get_or_insert_with(BTreeMap::new);
                    *c.entry(x.label("status").into()).or_default() += v as u64;
                }
                _ => {}
            }
        }
        for (k, mut row) in servers {
            if let Some(b) = buckets.get(&k) {
                row.p50 = quantile(b, 0.5).map(|q| q * 1000.0);
                row.p90 = quantile(b, 0.9).map(|q| q * 1000.0);
                row.p99 = quantile(b, 0.99).map(|q| q * 1000.0);
            }
            (row.upstream, row.server, row.addr) = k;
            s.servers.push(row);
        }
        s.zones = zones
            .into_iter()
            .map(|(id, mut z)| {
                z.id = id;
                z
            })
            .collect();
        self.rates(&mut s, &parked_s);
        s
    }

    fn rates(&self, s: &mut Snapshot, parked: &BTreeMap<usize, f64>) {
        let now = Instant::now();
        let threads = zone_threads();
        let cur = Prev {
            at: now,
            requests: s.zones.iter().map(|z| z.requests).collect(),
            parked_s: s
                .zones
                .iter()
                .map(|z| parked.get(&z.id).copied().unwrap_or(0.0))
                .collect(),
            cpu_ticks: s
                .zones
                .iter()
                .map(|z| threads.get(&z.id).map(|t| t.0))
                .collect(),
        };
        for z in &mut s.zones {
            z.on_cpu = threads.get(&z.id).map(|t| t.1);
        }
        let mut prev = self.prev.lock().unwrap_or_else(|e| e.into_inner());
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        let since = prev
            .as_ref()
            .map(|p| now.duration_since(p.at).as_secs_f64());
        match (prev.as_ref(), since) {
            (Some(p), Some(dt)) if dt >= 1.0 => {
                let hz = clock_ticks();
                *last = (0..s.zones.len())
                    .map(|i| {
                        let dq = cur.requests[i].saturating_sub(*p.requests.get(i).unwrap_or(&0));
                        let dp = cur.parked_s[i] - p.parked_s.get(i).copied().unwrap_or(0.0);
                        let cpu = match (cur.cpu_ticks[i], p.cpu_ticks.get(i).copied().flatten()) {
                            (Some(a), Some(b)) => {
                                Some(a.saturating_sub(b) as f64 / hz / dt * 100.0)
                            }
                            _ => None,
                        };
                        (
                            dq as f64 / dt,
                            ((1.0 - dp / dt) * 100.0).clamp(0.0, 100.0),
                            cpu,
                        )
                    })
                    .collect();
                *prev = Some(cur);
            }
            (Some(_), _) => {}
            (None, _) => {
                // The first look: averages since the start.
                *last = first_look(&cur, s.uptime, clock_ticks());
                *prev = Some(cur);
            }
        }
        for (z, r) in s.zones.iter_mut().zip(last.iter()) {
            (z.rps, z.busy, z.cpu_pct) = *r;
        }
    }
}

/// The rates of the first look, with nothing before it: averages over the `uptime` (a zone
/// thread starts with the process): requests/s, busy %, CPU % (from its CPU ticks at `hz`).
fn first_look(cur: &Prev, uptime: f64, hz: f64) -> Vec<(f64, f64, Option<f64>)> {
    let up = uptime.max(1e-3);
    (0..cur.requests.len())
        .map(|i| {
            let busy = (1.0 - cur.parked_s[i] / up) * 100.0;
            let cpu = cur.cpu_ticks[i].map(|t| (t as f64 / hz / up * 100.0).clamp(0.0, 100.0));
            (cur.requests[i] as f64 / up, busy.clamp(0.0, 100.0), cpu)
        })
        .collect()
}

/// `histogram_quantile` over cumulative (le, count) buckets, in seconds.
fn quantile(b: &[(f64, f64)], q: f64) -> Option<f64> {
    let mut b = b.to_vec();
    b.sort_by(|x, y| x.0.total_cmp(&y.0));
    let total = b.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let rank = q * total;
    let mut prev = (0.0, 0.0);
    for &(le, c) in &b {
        if c >= rank {
            if le.is_infinite() {
                return Some(prev.0);
            }
            let within = if c > prev.1 {
                (rank - prev.1) / (c - prev.1)
            } else {
                1.0
            };
            return Some(prev.0 + (le - prev.0) * within);
        }
        prev = (le, c);
    }
    Some(prev.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_what_metrics_writes() {
        let t = "# HELP x y\n# TYPE x counter\nringx_requests_total{zone=\"0\"} 12\n\
                 ringx_upstream_server_healthy{upstream=\"a\",server=\"h:1\",addr=\"1.2.3.4:1\"} 1\n\
                 ringx_tls_certificate_expiry_timestamp_seconds{cert=\"/x \\\"q\\\".pem\",subject=\"CN=a\"} 5\n\
                 ringx_uptime_seconds 1.500\n";
        let s = parse(t);
        assert_eq!(s.len(), 4);
        assert_eq!(s[0].label("zone"), "0");
        assert_eq!(s[0].value, 12.0);
        assert_eq!(s[1].label("server"), "h:1");
        assert_eq!(s[1].label("addr"), "1.2.3.4:1");
        assert_eq!(s[2].label("cert"), "/x \"q\".pem");
        assert_eq!(s[2].label("subject"), "CN=a");
        assert_eq!(s[3].value, 1.5);
    }

    /// The first load of the page shows each zone's CPU % (since the start), not "–".
    #[test]
    fn the_first_look_has_cpu_since_the_start() {
        let cur = Prev {
            at: Instant::now(),
            requests: vec![100, 0],
            parked_s: vec![5.0, 10.0],
            cpu_ticks: vec![Some(250), None],
        };
        let r = first_look(&cur, 10.0, 100.0);
        // Zone 0: 100 requests in 10 s, parked half the time, 2.5 s of CPU in 10 s.
        assert_eq!(r[0], (10.0, 50.0, Some(25.0)));
        // Zone 1: its thread not found in /proc: no CPU figure.
        assert_eq!(r[1], (0.0, 0.0, None));
        // A thread that started a little after the process cannot show more than 100%.
        let busy = Prev {
            cpu_ticks: vec![Some(1_010), Some(0)],
            ..cur
        };
        assert_eq!(first_look(&busy, 10.0, 100.0)[0].2, Some(100.0));
    }

    #[test]
    fn quantiles_as_prometheus_computes_them() {
        let b = [
            (0.001, 0.0),
            (0.01, 50.0),
            (0.1, 100.0),
            (f64::INFINITY, 100.0),
        ];
        let p50 = quantile(&b, 0.5).unwrap();
        assert!((p50 - 0.01).abs() < 1e-9, "{p50}");
        let p90 = quantile(&b, 0.9).unwrap();
        assert!((p90 - 0.082).abs() < 1e-9, "{p90}");
        assert_eq!(quantile(&[(f64::INFINITY, 0.0)], 0.5), None);
    }
}
