//! The configuration's top level: [`Config`] and the `[runtime]` and `[http]` sections. Each
//! other section has its own module, which owns its types and the checks across its values.

use std::path::PathBuf;

use serde::Deserialize;
use toml::Spanned;

use crate::cache;
use crate::compress;
use crate::guard;
use crate::lb;
use crate::ops;
use crate::quic;
use crate::steering;
use crate::tls;
use crate::units::{Dur, Size};
use crate::upstream;
use crate::vhost::Server;
use crate::xdp;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub runtime: Runtime,
    #[serde(default)]
    pub http: Http,
    /// HTTP/2 (ALPN h2, h2c) and its limits.
    #[serde(default)]
    pub http2: crate::http2::Http2,
    #[serde(default)]
    pub server: Vec<Spanned<Server>>,
    #[serde(default)]
    pub upstream: Vec<Spanned<upstream::Upstream>>,
    #[serde(default)]
    pub stream: Vec<Spanned<upstream::Stream>>,
    #[serde(default)]
    pub steering: steering::Steering,
    /// The XDP filter to attach at start; none without an [xdp] section.
    pub xdp: Option<xdp::Xdp>,
    /// The admin listener (`/metrics`, `/healthz`); none without an [admin] section.
    pub admin: Option<ops::Admin>,
    /// Where `tls = { acme = true }` servers get their certificates (`crate::acme`).
    pub acme: Option<crate::acme::Acme>,
    /// Several hosts sharing state through Redis (`crate::cluster`); none without it.
    pub cluster: Option<Spanned<crate::cluster::Cluster>>,
    /// TLS sessions and handshakes, for every server with `tls`.
    #[serde(default)]
    pub tls: tls::Tls,
    /// The file this configuration was read from, to place errors found after parsing
    /// (a certificate that does not load) at `FILE:LINE:COL`.
    #[serde(skip)]
    pub origin: Origin,
    /// The XDP load balancer (`ringx lb`); none without an [lb] section.
    pub lb: Option<lb::Lb>,
    /// Transparent proxying: what `ringx tproxy rules` writes (`crate::tproxy`).
    pub tproxy: Option<crate::tproxy::Tproxy>,
    /// Request-rate and concurrency limits' shared state (`crate::guard`).
    #[serde(default)]
    pub limit_req_zone: Vec<Spanned<guard::LimitReqZone>>,
    #[serde(default)]
    pub limit_conn_zone: Vec<Spanned<guard::LimitConnZone>>,
    /// Proxy caches' storage (`crate::cache`).
    #[serde(default)]
    pub proxy_cache_path: Vec<Spanned<cache::CachePath>>,
}

/// A configuration's source file: its name and text.
#[derive(Debug, Default, Clone)]
pub struct Origin {
    pub name: String,
    pub text: String,
}

impl Config {
    /// `FILE:LINE:COL` of a span of the source, with `message` after it.
    pub fn error_at(
        &self,
        span: std::ops::Range<usize>,
        message: impl Into<String>,
    ) -> crate::error::ConfigError {
        crate::error::Source {
            name: &self.origin.name,
            text: &self.origin.text,
        }
        .err(span, message)
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Engine {
    Uring,
    Epoll,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Runtime {
    /// Zones (pinned threads); default: one per CPU this process may use.
    pub zones: Option<Spanned<usize>>,
    /// CPUs to pin zones to, in order; default: the allowed CPUs in order.
    pub cpus: Option<Spanned<Vec<usize>>>,
    #[serde(default = "default_engine")]
    pub engine: Engine,
    /// Drop privileges to this user after binding the listeners.
    pub user: Option<Spanned<String>>,
    /// Connections one zone can hold.
    #[serde(default = "default_max_conns")]
    pub max_conns: u32,
    /// Receive buffers per zone (a power of two) and their size.
    #[serde(default = "default_recv_buffers")]
    pub recv_buffers: Spanned<u32>,
    #[serde(default = "default_recv_buffer_size")]
    pub recv_buffer_size: Size,
    /// Datagram receive buffers per zone (a power of two), when a `[[stream]]` is UDP. Each
    /// is as large as the largest `max_datagram_size`.
    #[serde(default = "default_udp_buffers")]
    pub udp_buffers: Spanned<u32>,
    /// HTTP/3: send a burst of a connection's QUIC packets as one segmented send (UDP GSO,
    /// nginx's `quic_gso`); off, one system call or submission per datagram. Taken at
    /// start.
    #[serde(default = "yes")]
    pub quic_gso: bool,
    /// HTTP/3: receive a sender's QUIC packets coalesced (UDP GRO), up to 64 in one
    /// receive; the zones' datagram buffers are then 64 KiB each (a quarter of
    /// `udp_buffers` of them, at least 32). Taken at start.
    #[serde(default = "yes")]
    pub quic_gro: bool,
    /// How long SIGTERM waits for requests in flight before exiting anyway.
    #[serde(default = "default_drain_timeout")]
    pub drain_timeout: Dur,
    /// The error log's level, in nginx's names (`debug`, `info`, `notice`, `warn`, `error`,
    /// `crit`, `alert`, `emerg`; also `trace`); `RUST_LOG` overrides it.
    #[serde(default = "default_log_level")]
    pub log_level: Spanned<String>,
    /// The error log (nginx's `error_log`): an absolute path, opened before privileges are
    /// dropped and reopened on SIGUSR1; `"stderr"` or none: standard error.
    pub error_log: Option<Spanned<PathBuf>>,
    /// Listen queue length.
    #[serde(default = "default_backlog")]
    pub backlog: i32,
    /// io_uring kernel submission polling: one kernel thread shared by all zones picks up
    /// submissions, so a busy zone makes no system calls. Costs that thread's CPU.
    #[serde(default)]
    pub sqpoll: bool,
    /// How long the SQ thread polls an idle ring before sleeping.
    #[serde(default = "default_sqpoll_idle")]
    pub sqpoll_idle: Dur,
    /// How long a zone spins on its completion queue before sleeping (SQPOLL only). A zone
    /// that always finds a completion within this time makes no system call at all.
    #[serde(default = "default_sqpoll_spin")]
    pub sqpoll_spin: Dur,
    /// Pin the shared SQ thread to this CPU (best on a core no zone uses).
    pub sqpoll_cpu: Option<Spanned<u32>>,
    /// Written with the server's pid once it serves; `ringx reload` signals that pid.
    pub pid_file: Option<Spanned<PathBuf>>,
    /// Microseconds an idle zone spins on its completion queue before it parks; -1: never.
    #[serde(default = "ops::default_busy_poll_us")]
    pub busy_poll_us: i64,
    /// io_uring adaptive completion batching: near saturation (4 or more receives with data in
    /// the last wait and more completions already pending, or the zone on the CPU 80% of its
    /// last 2 ms and more than two completions in the last wait) the next wait asks for as many
    /// again (at least 8, at most 64, at most half the connections), waiting at most this long
    /// for them; otherwise nothing waits. 0: off. The default was picked by measurement
    /// (bench/README.md).
    #[serde(default = "default_batch_wait_us")]
    pub batch_wait_us: u32,
    /// Also wait for a batch when completions are already waiting (fewer io_uring_enter
    /// calls, more sleeps; see the engine's `ZoneConfig::batch_when_pending`).
    #[serde(default)]
    pub batch_when_pending: bool,
    /// Threads that verify `auth_basic`'s slow password hashes (bcrypt, SHA-crypt at its
    /// default rounds) off the zones, so that guessing passwords does not stop a zone; 0:
    /// every hash is verified on the zone thread, as nginx does in its worker. At most 64.
    #[serde(default = "default_auth_threads")]
    pub auth_threads: Spanned<usize>,
}

impl Default for Runtime {
    fn default() -> Self {
        toml::from_str("").expect("defaults deserialise")
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Http {
    #[serde(default = "d60")]
    pub client_header_timeout: Dur,
    #[serde(default = "d60")]
    pub client_body_timeout: Dur,
    #[serde(default = "d75")]
    pub keepalive_timeout: Dur,
    #[serde(default = "d60")]
    pub send_timeout: Dur,
    /// How long a closing connection keeps reading (and discarding) what the client sends, so
    /// the response is not destroyed by a reset (nginx's lingering_timeout).
    #[serde(default = "d5")]
    pub lingering_timeout: Dur,
    #[serde(default = "default_keepalive_requests")]
    pub keepalive_requests: u32,
    #[serde(default = "default_max_body")]
    pub client_max_body_size: Size,
    #[serde(default = "default_max_head")]
    pub max_header_size: Size,
    #[serde(default = "default_max_uri")]
    pub max_uri_size: Size,
    #[serde(default = "default_max_headers")]
    pub max_headers: usize,
    /// Send the version in the `Server` header (`ringx/0.1.0`) or just `ringx`.
    #[serde(default = "yes")]
    pub server_tokens: bool,
    /// Access log file (absolute path); none: no access log.
    pub access_log: Option<Spanned<PathBuf>>,
    #[serde(default)]
    pub access_log_format: ops::LogFormat,
    // Compression (`crate::compress`).
    pub gzip: Option<compress::Codec>,
    pub brotli: Option<compress::Codec>,
    pub zstd: Option<compress::Codec>,
    /// Serve `FILE.gz` beside a static `FILE` to clients that take gzip.
    #[serde(default)]
    pub gzip_static: bool,
    /// `FILE.br` for brotli.
    #[serde(default)]
    pub brotli_static: bool,
    /// `FILE.zst` for zstd.
    #[serde(default)]
    pub zstd_static: bool,
    /// Proxies whose client-address header is believed (`crate::guard`).
    #[serde(default)]
    pub real_ip_from: Vec<xdp::CidrValue>,
    /// The header they put the client's address in (default `X-Real-IP`, as nginx).
    pub real_ip_header: Option<Spanned<String>>,
    /// Take the last address in the header that is not a trusted proxy (nginx's
    /// `real_ip_recursive`) rather than the last one.
    #[serde(default)]
    pub real_ip_recursive: bool,
    /// Clients that keep sending malformed requests go into the XDP block list.
    pub escalate_malformed: Option<Spanned<guard::Escalate>>,
    // HTTP/3 over QUIC, for servers with `quic = true` (`crate::quic`).
    /// QUIC connections one zone holds at most; a new one past it is refused.
    #[serde(default = "quic::default_max_connections")]
    pub quic_max_connections: Spanned<u32>,
    /// A QUIC connection with no packet for this long is closed (its max_idle_timeout).
    #[serde(default = "quic::default_idle_timeout")]
    pub quic_idle_timeout: Spanned<Dur>,
    /// Request streams (bidirectional) one QUIC connection may have open at once.
    #[serde(default = "quic::default_max_streams")]
    pub quic_max_streams: Spanned<u32>,
    /// When new clients must prove their address with a Retry token first.
    #[serde(default)]
    pub quic_retry: quic::Retry,
    /// Accept 0-RTT (early data) on resumed connections: GET, HEAD and OPTIONS in it are
    /// served (and proxied with `Early-Data: 1`), other methods answered 425 Too Early, and
    /// a ticket's early data is accepted once. Off: a replayed request could run twice.
    #[serde(default = "quic::default_early_data")]
    pub quic_early_data: Spanned<bool>,
    /// This host's id behind `ringx lb` (the `quic_host` of its backend entry there), put
    /// in every QUIC connection ID it issues so the balancer routes a migrated connection
    /// back to it; 0: a host alone.
    #[serde(default = "quic::default_host")]
    pub quic_host: Spanned<u32>,
}

impl Default for Http {
    fn default() -> Self {
        toml::from_str("").expect("defaults deserialise")
    }
}

fn default_engine() -> Engine {
    Engine::Uring
}
fn default_max_conns() -> u32 {
    16384
}
fn default_recv_buffers() -> Spanned<u32> {
    Spanned::new(0..0, 1024)
}
fn default_udp_buffers() -> Spanned<u32> {
    Spanned::new(0..0, 256)
}
fn default_recv_buffer_size() -> Size {
    Size(16384)
}
fn default_drain_timeout() -> Dur {
    Dur(std::time::Duration::from_secs(30))
}
fn default_log_level() -> Spanned<String> {
    Spanned::new(0..0, "info".into())
}
fn default_sqpoll_idle() -> Dur {
    Dur(std::time::Duration::from_millis(100))
}
fn default_sqpoll_spin() -> Dur {
    Dur(std::time::Duration::from_micros(50))
}
fn default_auth_threads() -> Spanned<usize> {
    Spanned::new(0..0, 2)
}
fn default_batch_wait_us() -> u32 {
    20
}
fn default_backlog() -> i32 {
    4096
}
fn d5() -> Dur {
    Dur(std::time::Duration::from_secs(5))
}
fn d60() -> Dur {
    Dur(std::time::Duration::from_secs(60))
}
fn d75() -> Dur {
    Dur(std::time::Duration::from_secs(75))
}
fn default_keepalive_requests() -> u32 {
    1000
}
fn default_max_body() -> Size {
    Size(1 << 20)
}
fn default_max_head() -> Size {
    Size(16 << 10)
}
fn default_max_uri() -> Size {
    Size(8 << 10)
}
fn default_max_headers() -> usize {
    100
}
fn yes() -> bool {
    true
}
