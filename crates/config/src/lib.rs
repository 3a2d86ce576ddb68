//! The TOML configuration: its schema, loading, and validation with `FILE:LINE:COL` errors.
//!
//! Parsing is serde + toml; every value that can be wrong on its own is checked while it is
//! deserialised (so toml reports its position), and checks across values keep the value's
//! span (`toml::Spanned`) to point at it.
//!
//! The top level and `[runtime]`/`[http]` are in `schema`, errors in `error`; each other
//! section is a module of its own with its types and its checks (`upstream`, `steering`,
//! `xdp`, `ops`, `tls`, `quic`, `tproxy`, `cluster`, and `vhost` for `[[server]]`). This file parses, runs the checks in order,
//! and re-exports the types.

pub mod acme;
pub mod cache;
pub mod cluster;
pub mod compress;
mod error;
mod fields;
pub mod guard;
pub mod htpasswd;
pub mod http2;
pub mod keytmpl;
pub mod lb;
pub mod ops;
pub mod policy;
pub mod quic;
pub mod rewrite;
mod schema;
pub mod steering;
pub mod template;
pub mod tls;
pub mod tproxy;
pub mod units;
pub mod upstream;
mod vhost;
pub mod xdp;

pub use error::{ConfigError, Source};
pub use schema::{Config, Engine, Http, Origin, Runtime};
pub use units::{Dur, Size};
pub use vhost::{Location, Return, Server};

/// The configuration `ringx serve` runs when given no file.
pub const DEFAULT_CONFIG: &str = include_str!("default.toml");

/// Parses and validates a configuration.
pub fn parse(name: &str, text: &str) -> Result<Config, ConfigError> {
    let src = Source { name, text };
    let mut cfg: Config = toml::from_str(text).map_err(|e| {
        let span = e.span().unwrap_or(0..0);
        src.err(span, e.message().trim().to_string())
    })?;
    validate(&cfg, &src)?;
    cfg.origin = schema::Origin {
        name: name.to_string(),
        text: text.to_string(),
    };
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
    let ub = *rt.udp_buffers.get_ref();
    if !ub.is_power_of_two() || ub > 32768 {
        return Err(src.err(
            rt.udp_buffers.span(),
            "udp_buffers must be a power of two up to 32768",
        ));
    }
    if rt.recv_buffer_size.0 < 512 || rt.recv_buffer_size.0 > (1 << 20) {
        return Err(src.err(
            0..0,
            "runtime.recv_buffer_size must be between 512 bytes and 1m",
        ));
    }
    if *rt.auth_threads.get_ref() > 64 {
        return Err(src.err(
            rt.auth_threads.span(),
            "auth_threads must be between 0 (verify on the zones) and 64",
        ));
    }
    if let Some(u) = &rt.user {
        if lookup_user(u.get_ref()).is_none() {
            return Err(src.err(u.span(), format!("no such user {:?}", u.get_ref())));
        }
    }
    if cfg.server.is_empty() && cfg.stream.is_empty() && cfg.lb.is_none() {
        return Err(src.err(
            0..0,
            "no [[server]], [[stream]] or [lb]: define at least one",
        ));
    }
    upstream::validate(&cfg.upstream, &cfg.stream, &cfg.server, src)?;
    ops::validate(
        cfg.http.access_log.as_ref(),
        rt.pid_file.as_ref(),
        rt.busy_poll_us,
        src,
    )?;
    ops::validate_error_log(rt.error_log.as_ref(), &rt.log_level, src)?;
    compress::validate(
        [
            ("gzip", cfg.http.gzip.as_ref(), 9),
            ("brotli", cfg.http.brotli.as_ref(), 11),
            ("zstd", cfg.http.zstd.as_ref(), 19),
        ],
        src,
    )?;
    vhost::validate_servers(&cfg.server, src)?;
    rewrite::check::check_servers(&cfg.server, src)?;
    http2::validate(&cfg.http2, src)?;
    let limits = quic::Limits {
        max_connections: &cfg.http.quic_max_connections,
        idle_timeout: &cfg.http.quic_idle_timeout,
        max_streams: &cfg.http.quic_max_streams,
        host: &cfg.http.quic_host,
        early_data: &cfg.http.quic_early_data,
        tickets: cfg.tls.session_tickets,
    };
    quic::validate(limits, &cfg.server, &cfg.stream, src)?;
    tls::validate(
        &cfg.tls,
        cfg.server
            .iter()
            .filter_map(|s| s.get_ref().tls.as_ref())
            .chain(cfg.stream.iter().filter_map(|s| s.get_ref().tls.as_ref())),
        src,
    )?;
    if let Some(st) = cfg
        .stream
        .iter()
        .find_map(|s| s.get_ref().tls.as_ref().filter(|t| t.get_ref().is_acme()))
    {
        return Err(src.err(
            st.span(),
            "acme = true is for [[server]] tls: a [[stream]] has no names to order a certificate for",
        ));
    }
    if cfg.acme.is_some()
        || cfg.server.iter().any(|s| {
            s.get_ref()
                .tls
                .as_ref()
                .is_some_and(|t| t.get_ref().is_acme())
        })
    {
        acme::validate(cfg.acme.as_ref(), &cfg.server, src)?;
    }
    if let Some(c) = &cfg.cluster {
        cluster::validate(c, src)?;
    }
    policy::validate_guard(cfg, src)?;
    policy::validate_cache(cfg, src)?;
    steering::validate(&cfg.steering, cfg.xdp.as_ref(), src)?;
    let parts = tproxy::Parts {
        server: &cfg.server,
        stream: &cfg.stream,
        upstream: &cfg.upstream,
        user: cfg.runtime.user.as_ref(),
    };
    tproxy::validate(cfg.tproxy.as_ref(), parts, src)?;
    if let Some(lb) = &cfg.lb {
        lb::validate(lb, cfg.xdp.as_ref(), &cfg.steering, src)?;
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

#[cfg(test)]
mod tls_tests;

#[cfg(test)]
mod policy_tests;

#[cfg(test)]
mod quic_tests;
