//! Counters and their Prometheus text exposition.
//!
//! Each zone owns one [`ZoneCounters`] block, aligned to its own cache lines and written only
//! by that zone (a Relaxed load and store: no locked instruction, no line shared with another
//! writer). The admin thread reads every block and sums on read; the engine's per-zone wait
//! statistics ([`ringx_engine::WaitStats`]) come from the zones' wakers the same way.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use ringx_engine::Waker;

use crate::upstream::Upstreams;

pub mod listeners;
mod out;
mod policy;
pub mod quic;
mod upstream;

use out::Out;

/// Adds to a counter only its zone writes.
#[inline]
pub fn bump(a: &AtomicU64, n: u64) {
    a.store(a.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
}

/// Status classes counted: 1xx..5xx and anything else.
pub const CLASSES: [&str; 6] = ["1xx", "2xx", "3xx", "4xx", "5xx", "other"];

/// One zone's HTTP counters (written by the zone only).
#[repr(align(64))]
#[derive(Default)]
pub struct ZoneCounters {
    pub requests: AtomicU64,
    /// Responses by [`CLASSES`].
    pub responses: [AtomicU64; 6],
    /// Client connections open now (a gauge the zone sets).
    pub active: AtomicU64,
    /// Upstream connects, with the source port from the steering table or the kernel's.
    pub connects_steered: AtomicU64,
    pub connects_kernel: AtomicU64,
    pub connect_failures: AtomicU64,
    /// Source-port selection (`[steering] mode`, `crate::upstream::connector`): ports from the
    /// precomputed table, dynamic searches, steering-hash evaluations, connects no port fit
    /// (the kernel chose), table ports another socket held at bind.
    pub port_table_hits: AtomicU64,
    pub port_searches: AtomicU64,
    pub port_hash_evals: AtomicU64,
    pub port_fallbacks: AtomicU64,
    pub port_busy: AtomicU64,
    /// Upstream connections whose replies arrived on the zone's CPU (`SO_INCOMING_CPU` at
    /// their first bytes), and elsewhere.
    pub locality_home: AtomicU64,
    pub locality_away: AtomicU64,
    /// Access log lines handed to the writer, and dropped because it fell behind.
    pub log_lines: AtomicU64,
    pub log_dropped: AtomicU64,
    /// The configuration generation this zone serves.
    pub generation: AtomicU64,
    /// TLS handshakes completed (full, resumed) and failed (bad input, verification, plain
    /// HTTP on a TLS port); handshake steps that waited for the budget, and the CPU time
    /// handshakes took (ns).
    pub tls_full: AtomicU64,
    pub tls_resumed: AtomicU64,
    pub tls_failed: AtomicU64,
    pub tls_budget_waits: AtomicU64,
    pub tls_handshake_ns: AtomicU64,
    /// TLS connections whose records the kernel seals after the handshake (kTLS).
    pub tls_kernel: AtomicU64,
    /// HTTP/2: connections opened, requests (streams) read, and streams or connections ended
    /// by reason ([`H2_REASONS`]: the protocol's errors and limits, then zero-window stalls).
    pub h2_connections: AtomicU64,
    pub h2_requests: AtomicU64,
    pub h2_errors: [AtomicU64; H2_REASONS],
    /// UDP streams.
    pub udp: crate::udp_counters::UdpCounters,
    /// HTTP/3 over QUIC.
    pub quic: quic::QuicCounters,
    /// Access control and limits (`crate::guard`): limit_req verdicts, limit_conn
    /// refusals, requests denied by access rules and by authentication; `auth_basic`
    /// passwords verified on the zone, handed to the auth pool, refused with the pool full.
    pub limit_req_passed: AtomicU64,
    pub limit_req_delayed: AtomicU64,
    pub limit_req_refused: AtomicU64,
    pub limit_conn_refused: AtomicU64,
    pub access_denied: AtomicU64,
    pub auth_denied: AtomicU64,
    pub auth_inline: AtomicU64,
    pub auth_pool: AtomicU64,
    pub auth_busy: AtomicU64,
    /// Proxy cache answers by status ([`crate::cache::loc::STATUSES`]).
    pub cache: [AtomicU64; 7],
    /// gRPC proxying: calls started, upstream HTTP/2 connections opened, and calls ringx
    /// ended with a status of its own (by [`crate::role::grpc::status::CODES`]).
    pub grpc_calls: AtomicU64,
    pub grpc_connections: AtomicU64,
    pub grpc_local_status: [AtomicU64; GRPC_CODES],
}

/// gRPC statuses ringx produces (counted in [`ZoneCounters::grpc_local_status`]).
pub const GRPC_CODES: usize = crate::role::grpc::status::CODES.len();

/// HTTP/2 reasons counted: each of [`ringx_h2proto::Why`], then the zero-window stall.
pub const H2_REASONS: usize = ringx_h2proto::Why::ALL.len() + 1;
/// The index of zero-window stalls in [`ZoneCounters::h2_errors`].
pub const H2_STALL: usize = ringx_h2proto::Why::ALL.len();

/// The label of an HTTP/2 reason.
pub fn h2_reason(i: usize) -> &'static str {
    ringx_h2proto::Why::ALL
        .get(i)
        .map_or("zero_window_stall", |w| w.label())
}

impl ZoneCounters {
    #[inline]
    pub fn response(&self, status: u16) {
        let i = match status {
            100..=599 => (status / 100 - 1) as usize,
            _ => 5,
        };
        bump(&self.responses[i], 1);
    }
}

/// Everything `/metrics` shows.
pub struct Metrics {
    pub engine: &'static str,
    pub started: Instant,
    pub zones: Vec<Arc<ZoneCounters>>,
    pub wakers: Vec<Waker>,
    /// The upstreams in use (replaced on reload), for their health.
    pub upstreams: Mutex<Option<Arc<Upstreams>>>,
    /// The certificates served and the addresses listened on (replaced on reload).
    pub certs: Mutex<Vec<listeners::CertInfo>>,
    pub listeners: Mutex<Vec<listeners::ListenerInfo>>,
    /// Where the XDP filter's maps are pinned, when `[xdp]` is configured.
    pub xdp_pin_dir: Option<PathBuf>,
    /// Where the XDP load balancer's maps are pinned, when `[lb]` is configured.
    pub lb_pin_dir: Option<PathBuf>,
    pub reloads_ok: AtomicU64,
    pub reloads_failed: AtomicU64,
    pub generation: AtomicU64,
    /// Access log bytes written and write errors (by the writer thread).
    pub log_bytes: Arc<AtomicU64>,
    pub log_errors: Arc<AtomicU64>,
}

impl Metrics {
    /// UDP streams: sessions, datagrams each way, drops by reason, server errors.
    fn udp(o: &mut Out, zc: &[Arc<ZoneCounters>]) {
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let col = |f: &dyn Fn(&crate::udp_counters::UdpCounters) -> u64| {
            zc.iter().map(|z| f(&z.udp)).collect::<Vec<_>>()
        };
        o.per_zone(
            "ringx_udp_sessions",
            "gauge",
            "UDP stream sessions open, per zone.",
            &col(&|u| r(&u.sessions)),
        );
        o.per_zone(
            "ringx_udp_sessions_total",
            "counter",
            "UDP stream sessions opened, per zone.",
            &col(&|u| r(&u.sessions_total)),
        );
        o.per_zone_by(
            (
                "ringx_udp_datagrams_total",
                "counter",
                "UDP stream datagrams: from clients, to servers, from servers, to clients.",
            ),
            "direction",
            &[
                ("from_clients", col(&|u| r(&u.from_clients))),
                ("to_servers", col(&|u| r(&u.to_servers))),
                ("from_servers", col(&|u| r(&u.from_servers))),
                ("to_clients", col(&|u| r(&u.to_clients))),
            ],
        );
        o.per_zone_by(
            (
                "ringx_udp_bytes_total",
                "counter",
                "UDP stream payload bytes from clients and to clients.",
            ),
            "direction",
            &[
                ("from_clients", col(&|u| r(&u.from_clients_bytes))),
                ("to_clients", col(&|u| r(&u.to_clients_bytes))),
            ],
        );
        let dropped: Vec<(&str, Vec<u64>)> = crate::udp_counters::DROP_REASONS
            .iter()
            .enumerate()
            .map(|(i, why)| (*why, col(&|u| r(&u.dropped[i]))))
            .collect();
        o.per_zone_by(
            (
                "ringx_udp_dropped_total",
                "counter",
                "UDP stream datagrams dropped, by reason.",
            ),
            "reason",
            &dropped,
        );
        o.per_zone(
            "ringx_udp_upstream_errors_total",
            "counter",
            "UDP stream sessions ended by an error from their server (ICMP unreachable) or \
             whose socket could not be opened, per zone.",
            &col(&|u| r(&u.upstream_errors)),
        );
        o.per_zone(
            "ringx_udp_send_errors_total",
            "counter",
            "UDP datagrams the kernel refused to send, per zone.",
            &col(&|u| r(&u.send_errors)),
        );
    }

    /// Source-port selection and measured locality of upstream connections (issue #5).
    fn steering(&self, o: &mut Out, zc: &[Arc<ZoneCounters>]) {
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let col = |f: &dyn Fn(&ZoneCounters) -> u64| zc.iter().map(|z| f(z)).collect::<Vec<_>>();
        o.per_zone(
            "ringx_steering_table_hits_total",
            "counter",
            "Upstream source ports taken from the zone's precomputed table (no hashing).",
            &col(&|z| r(&z.port_table_hits)),
        );
        o.per_zone(
            "ringx_steering_dynamic_searches_total",
            "counter",
            "Dynamic source-port searches (table exhausted, or destination not in it).",
            &col(&|z| r(&z.port_searches)),
        );
        o.per_zone(
            "ringx_steering_hash_evaluations_total",
            "counter",
            "Steering-function evaluations at run time (all in dynamic searches).",
            &col(&|z| r(&z.port_hash_evals)),
        );
        o.per_zone(
            "ringx_steering_fallbacks_total",
            "counter",
            "Upstream connects no steered source port fitted: the kernel chose.",
            &col(&|z| r(&z.port_fallbacks)),
        );
        o.per_zone(
            "ringx_steering_port_busy_total",
            "counter",
            "Table source ports another socket held at bind (EADDRINUSE; the next was tried).",
            &col(&|z| r(&z.port_busy)),
        );
        o.family(
            "ringx_upstream_locality_total",
            "counter",
            "Upstream connections by where their replies were processed (SO_INCOMING_CPU at \
             the first bytes): on the zone's CPU (home) or another (away).",
        );
        for (zi, z) in zc.iter().enumerate() {
            let zs = zi.to_string();
            for (cpu, v) in [("home", &z.locality_home), ("away", &z.locality_away)] {
                o.sample(
                    "ringx_upstream_locality_total",
                    &[("zone", &zs), ("cpu", cpu)],
                    r(v),
                );
            }
        }
    }
}

/// A Prometheus text-format writer.
impl Metrics {
    /// The Prometheus text exposition (format 0.0.4).
    pub fn render(&self) -> String {
        let mut o = Out {
            s: String::with_capacity(8192),
        };
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        o.family("ringx_info", "gauge", "Version and engine of this server.");
        o.sample(
            "ringx_info",
            &[
                ("version", env!("CARGO_PKG_VERSION")),
                ("engine", self.engine),
            ],
            1,
        );
        o.family(
            "ringx_uptime_seconds",
            "gauge",
            "Seconds since this process started serving.",
        );
        o.sample(
            "ringx_uptime_seconds",
            &[],
            format!("{:.3}", self.started.elapsed().as_secs_f64()),
        );
        o.family(
            "ringx_config_generation",
            "gauge",
            "Configuration generation (1 at start, +1 per successful reload).",
        );
        o.sample("ringx_config_generation", &[], r(&self.generation));
        o.family(
            "ringx_reloads_total",
            "counter",
            "Configuration reloads by result.",
        );
        o.sample(
            "ringx_reloads_total",
            &[("result", "ok")],
            r(&self.reloads_ok),
        );
        o.sample(
            "ringx_reloads_total",
            &[("result", "error")],
            r(&self.reloads_failed),
        );

        let zc = &self.zones;
        let col = |f: &dyn Fn(&ZoneCounters) -> u64| zc.iter().map(|z| f(z)).collect::<Vec<_>>();
        o.per_zone(
            "ringx_requests_total",
            "counter",
            "HTTP requests read, per zone.",
            &col(&|z| r(&z.requests)),
        );
        o.family(
            "ringx_responses_total",
            "counter",
            "HTTP responses by status class, per zone.",
        );
        for (zi, z) in zc.iter().enumerate() {
            for (i, class) in CLASSES.iter().enumerate() {
                o.sample(
                    "ringx_responses_total",
                    &[("zone", &zi.to_string()), ("class", class)],
                    r(&z.responses[i]),
                );
            }
        }
        o.per_zone(
            "ringx_http2_connections_total",
            "counter",
            "HTTP/2 connections (ALPN h2 or h2c prior knowledge), per zone.",
            &col(&|z| r(&z.h2_connections)),
        );
        o.per_zone(
            "ringx_http2_requests_total",
            "counter",
            "HTTP/2 requests (streams) read, per zone; also counted in ringx_requests_total.",
            &col(&|z| r(&z.h2_requests)),
        );
        o.family(
            "ringx_http2_errors_total",
            "counter",
            "HTTP/2 streams reset or connections ended, by reason (protocol errors and the \
             limits against floods, rapid reset, HPACK bombs and stalls), per zone.",
        );
        for (zi, z) in zc.iter().enumerate() {
            for (i, v) in z.h2_errors.iter().enumerate() {
                o.sample(
                    "ringx_http2_errors_total",
                    &[("zone", &zi.to_string()), ("reason", h2_reason(i))],
                    r(v),
                );
            }
        }
        o.per_zone(
            "ringx_grpc_calls_total",
            "counter",
            "gRPC calls proxied to grpc:// upstreams, per zone.",
            &col(&|z| r(&z.grpc_calls)),
        );
        o.per_zone(
            "ringx_grpc_upstream_connections_total",
            "counter",
            "HTTP/2 connections opened to gRPC upstreams (each carries many calls), per zone.",
            &col(&|z| r(&z.grpc_connections)),
        );
        o.family(
            "ringx_grpc_local_status_total",
            "counter",
            "gRPC calls ringx ended with a status of its own (the upstream could not be reached \
             or failed, the deadline passed), by grpc-status, per zone.",
        );
        for (zi, z) in zc.iter().enumerate() {
            for (i, v) in z.grpc_local_status.iter().enumerate() {
                let code = crate::role::grpc::status::CODES[i].value();
                o.sample(
                    "ringx_grpc_local_status_total",
                    &[
                        ("zone", &zi.to_string()),
                        ("code", std::str::from_utf8(code).unwrap_or("?")),
                    ],
                    r(v),
                );
            }
        }
        o.family(
            "ringx_tls_handshakes_total",
            "counter",
            "TLS handshakes by result (full, resumed, failed), per zone.",
        );
        for (zi, z) in zc.iter().enumerate() {
            for (result, v) in [
                ("full", &z.tls_full),
                ("resumed", &z.tls_resumed),
                ("failed", &z.tls_failed),
            ] {
                o.sample(
                    "ringx_tls_handshakes_total",
                    &[("zone", &zi.to_string()), ("result", result)],
                    r(v),
                );
            }
        }
        o.per_zone(
            "ringx_tls_kernel_total",
            "counter",
            "TLS connections whose records the kernel seals after the handshake (kTLS), per zone.",
            &col(&|z| r(&z.tls_kernel)),
        );
        o.per_zone(
            "ringx_tls_budget_waits_total",
            "counter",
            "TLS handshake steps that waited for the zone's handshake budget, per zone.",
            &col(&|z| r(&z.tls_budget_waits)),
        );
        o.family(
            "ringx_tls_handshake_cpu_seconds_total",
            "counter",
            "CPU time TLS handshakes took (measured around their public-key steps), per zone.",
        );
        for (zi, z) in zc.iter().enumerate() {
            o.sample(
                "ringx_tls_handshake_cpu_seconds_total",
                &[("zone", &zi.to_string())],
                format!("{:.6}", r(&z.tls_handshake_ns) as f64 / 1e9),
            );
        }
        o.per_zone(
            "ringx_connections_active",
            "gauge",
            "Client connections open, per zone.",
            &col(&|z| r(&z.active)),
        );
        o.per_zone(
            "ringx_zone_config_generation",
            "gauge",
            "Configuration generation each zone serves.",
            &col(&|z| r(&z.generation)),
        );

        let ws: Vec<ringx_engine::WaitStats> = self.wakers.iter().map(Waker::stats).collect();
        let wcol =
            |f: &dyn Fn(&ringx_engine::WaitStats) -> u64| ws.iter().map(f).collect::<Vec<_>>();
        o.per_zone(
            "ringx_connections_accepted_total",
            "counter",
            "Connections accepted, per zone.",
            &wcol(&|w| w.accepts),
        );
        o.per_zone(
            "ringx_bytes_received_total",
            "counter",
            "Bytes received on the zone's sockets (clients and upstreams).",
            &wcol(&|w| w.bytes_in),
        );
        o.per_zone(
            "ringx_bytes_sent_total",
            "counter",
            "Bytes sent on the zone's sockets (clients and upstreams).",
            &wcol(&|w| w.bytes_out),
        );
        o.per_zone(
            "ringx_zone_wait_syscalls_total",
            "counter",
            "io_uring_enter / epoll_wait calls of the zone's event loop.",
            &wcol(&|w| w.waits),
        );
        o.per_zone(
            "ringx_zone_parks_total",
            "counter",
            "Waits in which the zone published that it was parked (could block).",
            &wcol(&|w| w.parks),
        );
        o.family(
            "ringx_zone_parked_seconds_total",
            "counter",
            "Time the zone spent parked (blocked in the kernel), per zone.",
        );
        for (zi, w) in ws.iter().enumerate() {
            o.sample(
                "ringx_zone_parked_seconds_total",
                &[("zone", &zi.to_string())],
                format!("{:.6}", w.parked_ns as f64 / 1e9),
            );
        }
        o.per_zone(
            "ringx_zone_parked",
            "gauge",
            "1 while the zone is parked.",
            &wcol(&|w| u64::from(w.parked)),
        );
        o.per_zone(
            "ringx_zone_control_messages_total",
            "counter",
            "Control messages the zone picked up.",
            &wcol(&|w| w.wakes),
        );
        o.family(
            "ringx_zone_wakeups_sent_total",
            "counter",
            "Control wake-ups by how they reached the zone: msg_ring and eventfd woke a \
             parked zone; none: the zone was running and only the flag was set.",
        );
        for (zi, w) in ws.iter().enumerate() {
            let z = zi.to_string();
            for (how, v) in [
                ("msg_ring", w.sent_msg_ring),
                ("eventfd", w.sent_eventfd),
                ("none", w.sent_none),
            ] {
                o.sample(
                    "ringx_zone_wakeups_sent_total",
                    &[("zone", &z), ("via", how)],
                    v,
                );
            }
        }

        o.family(
            "ringx_upstream_connects_total",
            "counter",
            "Upstream connections opened, by who chose the source port (steering table or kernel).",
        );
        for (zi, z) in zc.iter().enumerate() {
            let zs = zi.to_string();
            o.sample(
                "ringx_upstream_connects_total",
                &[("zone", &zs), ("source_port", "steered")],
                r(&z.connects_steered),
            );
            o.sample(
                "ringx_upstream_connects_total",
                &[("zone", &zs), ("source_port", "kernel")],
                r(&z.connects_kernel),
            );
        }
        o.per_zone(
            "ringx_upstream_connect_failures_total",
            "counter",
            "Upstream connects that failed to start, per zone.",
            &col(&|z| r(&z.connect_failures)),
        );
        self.steering(&mut o, zc);
        Self::udp(&mut o, zc);
        {
            let ups = self.upstreams.lock().unwrap_or_else(|e| e.into_inner());
            upstream::render(ups.as_deref(), &mut o);
        }
        let mut certs = self.certs.lock().unwrap_or_else(|e| e.into_inner()).clone();
        // The certificates ACME obtained, in the same family (so the expiry alert, the
        // dashboard and the status page see them): `cert` is `acme:` and their names.
        certs.extend(ringx_acme::global().served().into_iter().map(
            |(names, subject, not_after)| listeners::CertInfo {
                path: format!("acme:{names}").into(),
                subject,
                not_after,
            },
        ));
        listeners::render_certs(&certs, &mut o);
        let ls = self.listeners.lock().unwrap_or_else(|e| e.into_inner());
        listeners::render_listeners(&ls, &mut o);
        drop(ls);

        o.per_zone(
            "ringx_access_log_lines_total",
            "counter",
            "Access log lines produced, per zone.",
            &col(&|z| r(&z.log_lines)),
        );
        o.per_zone(
            "ringx_access_log_dropped_total",
            "counter",
            "Access log lines dropped because the writer fell behind, per zone.",
            &col(&|z| r(&z.log_dropped)),
        );
        o.family(
            "ringx_access_log_written_bytes_total",
            "counter",
            "Access log bytes written to the file.",
        );
        o.sample(
            "ringx_access_log_written_bytes_total",
            &[],
            r(&self.log_bytes),
        );
        o.family(
            "ringx_access_log_write_errors_total",
            "counter",
            "Access log writes or reopenings that failed.",
        );
        o.sample(
            "ringx_access_log_write_errors_total",
            &[],
            r(&self.log_errors),
        );

        self.render_guard(&mut o);
        let quic: Vec<&quic::QuicCounters> = self.zones.iter().map(|z| &z.quic).collect();
        quic::render(&quic, &mut o);
        self.render_xdp(&mut o);
        self.render_lb(&mut o);
        o.s
    }

    /// The load balancer's counters from its pinned maps (`ringx lb stats` shows the same).
    fn render_lb(&self, o: &mut Out) {
        let Some(dir) = &self.lb_pin_dir else { return };
        o.family(
            "ringx_lb_up",
            "gauge",
            "1 if the XDP load balancer's counters could be read.",
        );
        let read = || -> ringx_xdp::Result<_> {
            let maps = ringx_lb::LbMaps::open_pinned(dir)?;
            let reasons = maps.reasons()?;
            let mut svcs = Vec::new();
            for (id, addr, proto) in ringx_lb::control::services(&maps)? {
                svcs.push((format!("{addr}"), proto.as_str(), maps.vip_counter(id)?));
            }
            let mut backends = Vec::new();
            for b in ringx_lb::control::backend_states(&maps)? {
                backends.push((
                    b.addr.to_string(),
                    b.drained || b.down,
                    maps.backend_counter(b.index)?,
                ));
            }
            Ok((reasons, svcs, backends))
        };
        let (reasons, svcs, backends) = match read() {
            Ok(v) => v,
            Err(e) => {
                tracing::debug!("metrics: lb counters: {e}");
                o.sample("ringx_lb_up", &[], 0);
                return;
            }
        };
        o.sample("ringx_lb_up", &[], 1);
        for (what, unit) in [("packets", "Packets"), ("bytes", "Bytes")] {
            let name = format!("ringx_lb_{what}_total");
            o.family(
                &name,
                "counter",
                &format!("{unit} the XDP load balancer saw, by verdict and reason."),
            );
            for (r, c) in &reasons {
                let verdict = format!("{:?}", r.verdict()).to_lowercase();
                let v = if what == "packets" {
                    c.packets
                } else {
                    c.bytes
                };
                o.sample(&name, &[("verdict", &verdict), ("reason", r.name())], v);
            }
        }
        type Field = fn(&ringx_lb::Counter) -> u64;
        let fields: [(&str, &str, Field); 4] = [
            ("packets", "Packets forwarded", |c| c.packets),
            ("bytes", "Bytes forwarded", |c| c.bytes),
            (
                "new_flows",
                "New flows (TCP SYNs, UDP flows) given a backend",
                |c| c.new_flows,
            ),
            ("lru_misses", "Connection-table misses", |c| c.lru_misses),
        ];
        for (f, help, get) in fields {
            let name = format!("ringx_lb_service_{f}_total");
            o.family(&name, "counter", &format!("{help}, per virtual service."));
            for (vip, proto, c) in &svcs {
                o.sample(&name, &[("vip", vip), ("proto", proto)], get(c));
            }
            let name = format!("ringx_lb_backend_{f}_total");
            o.family(&name, "counter", &format!("{help}, per backend."));
            for (addr, _, c) in &backends {
                o.sample(&name, &[("backend", addr)], get(c));
            }
        }
        o.family(
            "ringx_lb_backend_up",
            "gauge",
            "1 if the backend takes new flows (not drained, not failed).",
        );
        for (addr, out, _) in &backends {
            o.sample("ringx_lb_backend_up", &[("backend", addr)], u8::from(!out));
        }
    }

    fn render_xdp(&self, o: &mut Out) {
        let Some(dir) = &self.xdp_pin_dir else { return };
        o.family(
            "ringx_xdp_up",
            "gauge",
            "1 if the XDP filter's counters could be read.",
        );
        let stats = match ringx_xdp::Stats::read(dir) {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!("metrics: xdp counters: {e}");
                o.sample("ringx_xdp_up", &[], 0);
                return;
            }
        };
        o.sample("ringx_xdp_up", &[], 1);
        o.family(
            "ringx_xdp_packets_total",
            "counter",
            "Packets the XDP filter saw, by verdict and reason.",
        );
        for r in ringx_xdp::Reason::ALL {
            let verdict = format!("{:?}", r.verdict()).to_lowercase();
            o.sample(
                "ringx_xdp_packets_total",
                &[("verdict", &verdict), ("reason", r.name())],
                stats.get(r).packets,
            );
        }
        o.family(
            "ringx_xdp_bytes_total",
            "counter",
            "Bytes the XDP filter saw, by verdict and reason.",
        );
        for r in ringx_xdp::Reason::ALL {
            let verdict = format!("{:?}", r.verdict()).to_lowercase();
            o.sample(
                "ringx_xdp_bytes_total",
                &[("verdict", &verdict), ("reason", r.name())],
                stats.get(r).bytes,
            );
        }
    }
}
