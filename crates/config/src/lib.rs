//! The TOML configuration: its schema, loading, and validation with `FILE:LINE:COL` errors.
//!
//! Parsing is serde + toml; every value that can be wrong on its own is checked while it is
//! deserialised (so toml reports its position), and checks across values keep the value's
//! span (`toml::Spanned`) to point at it.

pub mod ops;
pub mod steering;
pub mod units;
pub mod upstream;
mod vhost;
pub mod xdp;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::ops::Range;
use std::path::PathBuf;

use serde::Deserialize;
use toml::Spanned;

pub use units::{Dur, Size};

/// The configuration `ringx serve` runs when given no file.
pub const DEFAULT_CONFIG: &str = include_str!("default.toml");

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub runtime: Runtime,
    #[serde(default)]
    pub http: Http,
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
    /// How long SIGTERM waits for requests in flight before exiting anyway.
    #[serde(default = "default_drain_timeout")]
    pub drain_timeout: Dur,
    /// `error`, `warn`, `info`, `debug` or `trace`; `RUST_LOG` overrides it.
    #[serde(default = "default_log_level")]
    pub log_level: String,
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
}

impl Default for Http {
    fn default() -> Self {
        toml::from_str("").expect("defaults deserialise")
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Server {
    pub listen: Vec<Spanned<SocketAddr>>,
    #[serde(default)]
    pub server_name: Vec<Spanned<String>>,
    /// The server for requests whose Host matches no server_name on its addresses
    /// (otherwise the first server listed for the address).
    #[serde(default = "not_default")]
    pub default: Spanned<bool>,
    #[serde(default)]
    pub location: Vec<Spanned<Location>>,
    /// Expect a PROXY protocol header (v1 or v2) from a load balancer in front, on every
    /// connection to this server's listen addresses.
    #[serde(default)]
    pub proxy_protocol: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Location {
    pub path: Spanned<String>,
    /// Match the path exactly instead of as a prefix (nginx `location = /x`).
    #[serde(default)]
    pub exact: bool,
    #[serde(rename = "return")]
    pub ret: Option<Return>,
    /// Static files: the request path is appended to this directory (nginx `root`).
    pub root: Option<Spanned<PathBuf>>,
    /// Static files: the location's prefix is replaced by this directory (nginx `alias`).
    pub alias: Option<Spanned<PathBuf>>,
    #[serde(default = "default_index")]
    pub index: Vec<String>,
    /// Reverse proxy: an `[[upstream]]` name or `http://host:port`.
    pub proxy_pass: Option<Spanned<String>>,
    /// The `Host` sent upstream: `"pass"` (the client's, default), `"upstream"` (the server's
    /// address) or a literal value.
    pub proxy_host: Option<String>,
    /// Add `X-Forwarded-For`, `X-Real-IP`, `X-Forwarded-Proto` and `Forwarded`.
    #[serde(default = "yes")]
    pub forwarded_headers: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Return {
    pub status: Spanned<u16>,
    #[serde(default)]
    pub body: String,
    pub content_type: Option<Spanned<String>>,
    /// For redirects: the Location header (nginx `return 301 URL`).
    pub location: Option<Spanned<String>>,
    #[serde(default)]
    pub headers: BTreeMap<Spanned<String>, String>,
}

fn not_default() -> Spanned<bool> {
    Spanned::new(0..0, false)
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
fn default_recv_buffer_size() -> Size {
    Size(16384)
}
fn default_drain_timeout() -> Dur {
    Dur(std::time::Duration::from_secs(30))
}
fn default_log_level() -> String {
    "info".into()
}
fn default_sqpoll_idle() -> Dur {
    Dur(std::time::Duration::from_millis(100))
}
fn default_sqpoll_spin() -> Dur {
    Dur(std::time::Duration::from_micros(50))
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
fn default_index() -> Vec<String> {
    vec!["index.html".into()]
}

/// A configuration error with its place in the file.
#[derive(Debug)]
pub struct ConfigError {
    pub file: String,
    pub line: usize,
    pub col: usize,
    pub message: String,
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(
            f,
            "{}:{}:{}: {}",
            self.file, self.line, self.col, self.message
        )
    }
}

impl std::error::Error for ConfigError {}

/// 1-based line and column of byte offset `at` in `src`.
fn line_col(src: &str, at: usize) -> (usize, usize) {
    let at = at.min(src.len());
    let before = &src[..at];
    let line = before.matches('\n').count() + 1;
    let col = before.rfind('\n').map_or(at, |nl| at - nl - 1) + 1;
    (line, col)
}

/// The source being checked, to turn spans into positions.
pub struct Source<'a> {
    pub name: &'a str,
    pub text: &'a str,
}

impl Source<'_> {
    pub fn err(&self, span: Range<usize>, message: impl Into<String>) -> ConfigError {
        let (line, col) = line_col(self.text, span.start);
        ConfigError {
            file: self.name.to_string(),
            line,
            col,
            message: message.into(),
        }
    }
}

/// Parses and validates a configuration.
pub fn parse(name: &str, text: &str) -> Result<Config, ConfigError> {
    let src = Source { name, text };
    let cfg: Config = toml::from_str(text).map_err(|e| {
        let span = e.span().unwrap_or(0..0);
        src.err(span, e.message().trim().to_string())
    })?;
    validate(&cfg, &src)?;
    Ok(cfg)
}

/// Reads, parses and validates the file at `path`.
pub fn load(path: &std::path::Path) -> Result<Config, ConfigError> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
        file: name.clone(),
        line: 0,
        col: 0,
        message: format!("cannot read the configuration: {e}"),
    })?;
    parse(&name, &text)
}

fn validate(cfg: &Config, src: &Source) -> Result<(), ConfigError> {
    let rt = &cfg.runtime;
    if let Some(z) = &rt.zones {
        if *z.get_ref() == 0 || *z.get_ref() > 1024 {
            return Err(src.err(z.span(), "zones must be between 1 and 1024"));
        }
    }
    if let Some(cpu) = &rt.sqpoll_cpu {
        let allowed = ringx_engine::sys::allowed_cpus();
        if !allowed.contains(&(*cpu.get_ref() as usize)) {
            return Err(src.err(
                cpu.span(),
                format!(
                    "sqpoll_cpu {} is not available to this process (allowed: {allowed:?})",
                    cpu.get_ref()
                ),
            ));
        }
    }
    if let Some(cpus) = &rt.cpus {
        let allowed = ringx_engine::sys::allowed_cpus();
        for &c in cpus.get_ref() {
            if !allowed.contains(&c) {
                return Err(src.err(
                    cpus.span(),
                    format!("CPU {c} is not available to this process (allowed: {allowed:?})"),
                ));
            }
        }
        if let Some(z) = &rt.zones {
            if cpus.get_ref().len() != *z.get_ref() {
                return Err(src.err(
                    cpus.span(),
                    format!(
                        "cpus lists {} CPUs but zones = {}: give one CPU per zone",
                        cpus.get_ref().len(),
                        z.get_ref()
                    ),
                ));
            }
        } else if cpus.get_ref().is_empty() {
            return Err(src.err(
                cpus.span(),
                "cpus is empty: list at least one CPU or leave it out",
            ));
        }
    }
    let rb = *rt.recv_buffers.get_ref();
    if !rb.is_power_of_two() || rb > 32768 {
        return Err(src.err(
            rt.recv_buffers.span(),
            "recv_buffers must be a power of two up to 32768",
        ));
    }
    if rt.recv_buffer_size.0 < 512 || rt.recv_buffer_size.0 > (1 << 20) {
        return Err(src.err(
            0..0,
            "runtime.recv_buffer_size must be between 512 bytes and 1m",
        ));
    }
    if let Some(u) = &rt.user {
        if lookup_user(u.get_ref()).is_none() {
            return Err(src.err(u.span(), format!("no such user {:?}", u.get_ref())));
        }
    }
    if cfg.server.is_empty() && cfg.stream.is_empty() {
        return Err(src.err(
            0..0,
            "no [[server]] or [[stream]]: define at least one with a listen address",
        ));
    }
    upstream::validate(cfg, src)?;
    ops::validate(cfg, src)?;
    for (i, s) in cfg.server.iter().enumerate() {
        for a in &s.get_ref().listen {
            let other = cfg.server[..i].iter().find(|o| {
                o.get_ref()
                    .listen
                    .iter()
                    .any(|b| b.get_ref() == a.get_ref())
                    && o.get_ref().proxy_protocol != s.get_ref().proxy_protocol
            });
            if other.is_some() {
                return Err(src.err(
                    a.span(),
                    format!("servers on {} disagree about proxy_protocol", a.get_ref()),
                ));
            }
        }
    }
    for s in &cfg.server {
        let sv = s.get_ref();
        if sv.listen.is_empty() {
            return Err(src.err(s.span(), "server has an empty listen list"));
        }
        if sv.location.is_empty() {
            return Err(src.err(s.span(), "server has no [[server.location]]"));
        }
        for l in &sv.location {
            validate_location(l, src)?;
        }
    }
    vhost::validate_servers(cfg, src)?;
    steering::validate(cfg, src)?;
    Ok(())
}

fn validate_location(l: &Spanned<Location>, src: &Source) -> Result<(), ConfigError> {
    let loc = l.get_ref();
    let path = loc.path.get_ref();
    if !path.starts_with('/') {
        return Err(src.err(
            loc.path.span(),
            format!("location path {path:?} must start with '/'"),
        ));
    }
    let actions = [
        loc.ret.is_some(),
        loc.root.is_some(),
        loc.alias.is_some(),
        loc.proxy_pass.is_some(),
    ];
    match actions.iter().filter(|&&x| x).count() {
        1 => {}
        0 => {
            return Err(src.err(
                l.span(),
                "location needs one of `return`, `root`, `alias` or `proxy_pass`",
            ))
        }
        _ => {
            return Err(src.err(
                l.span(),
                "location has more than one of `return`, `root`, `alias`, `proxy_pass`",
            ))
        }
    }
    if let Some(r) = &loc.ret {
        vhost::validate_return(r, src)?;
    }
    for dir in [&loc.root, &loc.alias].into_iter().flatten() {
        let p = dir.get_ref();
        if !p.is_absolute() {
            return Err(src.err(
                dir.span(),
                format!("{} must be an absolute path", p.display()),
            ));
        }
        match std::fs::metadata(p) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => return Err(src.err(dir.span(), format!("{} is not a directory", p.display()))),
            Err(e) => return Err(src.err(dir.span(), format!("{}: {e}", p.display()))),
        }
    }
    Ok(())
}

/// uid and gid of a user name.
pub fn lookup_user(name: &str) -> Option<(u32, u32)> {
    let cname = std::ffi::CString::new(name).ok()?;
    let mut pw: libc::passwd = unsafe_zeroed_passwd();
    let mut buf = vec![0 as libc::c_char; 16384];
    let mut out: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: getpwnam_r writes into `pw` and `buf` (sizes given) and sets `out` to `&pw` or
    // null; all are live locals.
    let r = unsafe {
        libc::getpwnam_r(
            cname.as_ptr(),
            &mut pw,
            buf.as_mut_ptr(),
            buf.len(),
            &mut out,
        )
    };
    if r != 0 || out.is_null() {
        return None;
    }
    Some((pw.pw_uid, pw.pw_gid))
}

fn unsafe_zeroed_passwd() -> libc::passwd {
    // SAFETY: passwd is a C struct of integers and pointers, for which all-zero is valid.
    unsafe { std::mem::zeroed() }
}

#[cfg(test)]
mod tests;
