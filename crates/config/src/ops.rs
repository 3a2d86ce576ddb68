//! Operations settings: the admin listener (`[admin]`), the access log (`[http] access_log`),
//! the pid file and the zones' busy-poll budget (`[runtime]`).
//!
//! ```toml
//! [runtime]
//! pid_file = "/run/ringx.pid"     # written once serving; `ringx reload` signals that pid
//! busy_poll_us = 0                # spin this long on the completion queue before parking;
//!                                 # -1: never park (pure busy polling, for measurements)
//!
//! [http]
//! access_log = "/var/log/ringx/access.log"
//! access_log_format = "combined"  # or "json"
//!
//! [admin]
//! listen = "127.0.0.1:9901"       # GET /metrics (Prometheus text), GET /healthz
//! ```

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;
use toml::Spanned;

use crate::error::{ConfigError, Source};

/// `[admin]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Admin {
    pub listen: Spanned<SocketAddr>,
    /// What the status page's actions (drain, enable, weight, purge) need; none: the admin
    /// address alone guards them.
    pub token: Option<Spanned<String>>,
}

/// `access_log_format`.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// nginx's `combined`: `$remote_addr - $remote_user [$time_local] "$request" $status
    /// $body_bytes_sent "$http_referer" "$http_user_agent"`.
    #[default]
    Combined,
    /// One JSON object per line.
    Json,
}

/// The default busy-poll budget, picked by measurement (bench/ops.py): on a machine whose
/// cores the clients share, spinning takes CPU from them and buys no latency.
pub fn default_busy_poll_us() -> i64 {
    0
}

/// Checks of the operations settings that need more than their type: `[http] access_log`,
/// `[runtime] pid_file` and `[runtime] busy_poll_us`.
pub fn validate(
    access_log: Option<&Spanned<PathBuf>>,
    pid_file: Option<&Spanned<PathBuf>>,
    busy_poll_us: i64,
    src: &Source,
) -> Result<(), ConfigError> {
    if let Some(p) = access_log {
        let path = p.get_ref();
        if !path.is_absolute() {
            return Err(src.err(
                p.span(),
                format!("access_log {} must be an absolute path", path.display()),
            ));
        }
        match path.parent().map(std::fs::metadata) {
            Some(Ok(m)) if m.is_dir() => {}
            _ => {
                return Err(src.err(
                    p.span(),
                    format!(
                        "access_log {}: its directory does not exist",
                        path.display()
                    ),
                ))
            }
        }
    }
    if let Some(p) = pid_file {
        if !p.get_ref().is_absolute() {
            return Err(src.err(p.span(), "pid_file must be an absolute path"));
        }
    }
    let b = busy_poll_us;
    if !(-1..=1_000_000).contains(&b) {
        return Err(src.err(
            0..0,
            "runtime.busy_poll_us must be between 0 and 1000000 (1 s), or -1 (never park)",
        ));
    }
    Ok(())
}

/// Level names the error log takes: nginx's, and `trace`.
pub const LOG_LEVELS: [&str; 9] = [
    "trace", "debug", "info", "notice", "warn", "error", "crit", "alert", "emerg",
];

/// The `tracing` filter for a level name (nginx's `notice` is `info`; `crit`, `alert` and
/// `emerg` are `error`, the most severe level ringx logs at).
pub fn tracing_level(name: &str) -> &'static str {
    match name {
        "trace" => "trace",
        "debug" => "debug",
        "info" | "notice" => "info",
        "warn" => "warn",
        _ => "error",
    }
}

/// `[runtime] error_log` and `log_level`: a known level; an absolute path whose directory
/// exists (or `stderr`).
pub fn validate_error_log(
    error_log: Option<&Spanned<PathBuf>>,
    level: &Spanned<String>,
    src: &Source,
) -> Result<(), ConfigError> {
    if !LOG_LEVELS.contains(&level.get_ref().as_str()) {
        return Err(src.err(
            level.span(),
            format!(
                "log_level {:?}: use one of {} (nginx's names)",
                level.get_ref(),
                LOG_LEVELS.join(", ")
            ),
        ));
    }
    let Some(p) = error_log else { return Ok(()) };
    let path = p.get_ref();
    if path.as_os_str() == "stderr" {
        return Ok(());
    }
    if !path.is_absolute() {
        return Err(src.err(
            p.span(),
            format!(
                "error_log {} must be an absolute path (or \"stderr\")",
                path.display()
            ),
        ));
    }
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => {
            return Err(src.err(
                p.span(),
                format!(
                    "error_log {} is a directory: name a file in it",
                    path.display()
                ),
            ))
        }
        _ => {}
    }
    match path.parent().map(std::fs::metadata) {
        Some(Ok(m)) if m.is_dir() => Ok(()),
        _ => Err(src.err(
            p.span(),
            format!("error_log {}: its directory does not exist", path.display()),
        )),
    }
}

/// The engine's busy-poll budget for `busy_poll_us` (-1: forever).
pub fn busy_poll(us: i64) -> std::time::Duration {
    match us {
        ..=-1 => std::time::Duration::MAX,
        us => std::time::Duration::from_micros(us as u64),
    }
}
