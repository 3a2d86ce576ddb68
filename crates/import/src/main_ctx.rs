//! The main context and the driver: read the nginx configuration, walk it, write the TOML.

use std::path::Path;

use ringx_nginxconf::{Directive, Limits};

use crate::cx::{Cx, Options, Outcome};
use crate::emit::{s, V};

/// Reads the nginx configuration at `path` and translates it.
pub fn import(path: &Path, opts: Options) -> Result<Outcome, ringx_nginxconf::Error> {
    let conf = ringx_nginxconf::load(path, Limits::default())?;
    let conf_dir = std::fs::canonicalize(&conf.prefix).unwrap_or(conf.prefix.clone());
    let mut cx = Cx::new(opts, conf_dir);
    for d in &conf.directives {
        main_directive(&mut cx, d);
    }
    crate::location::settle(&mut cx);
    client_order_unless_said(&mut cx);
    Ok(Outcome {
        toml: render(&cx, &conf.file),
        report: cx.report,
    })
}

fn main_directive(cx: &mut Cx, d: &Directive) {
    let a = d.args();
    match d.name.as_str() {
        "http" => crate::http::http(cx, d),
        "stream" => crate::stream::stream(cx, d),
        "events" => {
            for e in d.children() {
                match e.name.as_str() {
                    "worker_connections" => {
                        match e.args().first().and_then(|n| n.parse::<i64>().ok()) {
                            Some(n) => {
                                cx.runtime.set("max_conns", V::I(n));
                                cx.report.approx(
                                    e,
                                    "max_conns: ringx counts client connections per zone; nginx's \
                                 worker_connections also counts upstream connections",
                                );
                            }
                            None => cx.report.refuse(e, "not a number"),
                        }
                    }
                    "multi_accept" | "use" | "accept_mutex" | "accept_mutex_delay" => cx
                        .report
                        .irrelevant(e, "ringx's zones accept with io_uring multishot accept"),
                    _ => cx.report.refuse(e, "unknown in events"),
                }
            }
        }
        "worker_processes" => match a.first() {
            Some(&"auto") => cx.report.ok(d),
            Some(n) => match n.parse::<i64>() {
                Ok(n) if n > 0 => {
                    cx.runtime.set("zones", V::I(n));
                    cx.report.ok(d);
                }
                _ => cx.report.refuse(d, "not a number of processes"),
            },
            None => cx.report.refuse(d, "no value"),
        },
        "worker_cpu_affinity" => match cpus(&a) {
            Some(list) => {
                cx.runtime
                    .set("cpus", V::A(list.into_iter().map(V::I).collect()));
                cx.report.ok(d);
            }
            None if a.first() == Some(&"auto") => cx
                .report
                .approx(d, "ringx pins each zone to one CPU in order by default"),
            None => cx.report.refuse(
                d,
                "each zone pins to one CPU: give one mask with one bit per worker",
            ),
        },
        "user" => match a.first() {
            Some(u) => {
                cx.runtime.set("user", s(*u));
                if a.len() > 1 {
                    cx.report.approx(
                        d,
                        "ringx takes the user's own group; the group named is not used",
                    );
                } else {
                    cx.report.ok(d);
                }
            }
            None => cx.report.refuse(d, "no user"),
        },
        "pid" => match a.first() {
            Some(p) => {
                let p = cx.under_prefix(p);
                cx.runtime.set("pid_file", s(p));
                cx.report.ok(d);
            }
            None => cx.report.refuse(d, "no path"),
        },
        "error_log" => crate::directives::error_log(cx, d),
        "load_module" => cx.report.irrelevant(
            d,
            "ringx's modules are built in (or missing: see the other notes)",
        ),
        "worker_rlimit_nofile"
        | "worker_shutdown_timeout"
        | "pcre_jit"
        | "daemon"
        | "master_process"
        | "timer_resolution"
        | "worker_priority"
        | "thread_pool"
        | "lock_file"
        | "working_directory"
        | "worker_rlimit_core"
        | "env" => cx
            .report
            .irrelevant(d, "process management that ringx does its own way"),
        "mail" => cx.report.refuse(d, "ringx has no mail proxy"),
        _ => cx.report.refuse(d, "unknown in the main context"),
    }
}

/// CPUs of `worker_cpu_affinity` masks: one mask per worker, one bit each.
fn cpus(masks: &[&str]) -> Option<Vec<i64>> {
    if masks.is_empty() || masks[0] == "auto" {
        return None;
    }
    masks
        .iter()
        .map(|m| {
            if !m.bytes().all(|b| b == b'0' || b == b'1')
                || m.bytes().filter(|&b| b == b'1').count() != 1
            {
                return None;
            }
            Some((m.len() - 1 - m.rfind('1')?) as i64)
        })
        .collect()
}

/// nginx's `ssl_prefer_server_ciphers` is off unless a configuration turns it on: the
/// client's order of suites decides. ringx's default is its own order, so a configuration
/// with TLS that does not say gets `prefer_server_ciphers = false`.
fn client_order_unless_said(cx: &mut Cx) {
    let has = |t: &crate::emit::Table, k: &str| t.kv.iter().any(|(n, _)| n == k);
    let tls = cx.servers.iter().chain(&cx.streams).any(|t| has(t, "tls"));
    if tls && !has(&cx.tls, "prefer_server_ciphers") {
        cx.tls.set("prefer_server_ciphers", V::B(false));
    }
}

fn render(cx: &Cx, file: &str) -> String {
    let mut out = format!(
        "# ringx configuration imported from {file} by `ringx import`.\n\
         # Each table names the nginx block it comes from; the report lists what was not\n\
         # carried over exactly.\n\n"
    );
    for t in [&cx.runtime, &cx.http, &cx.http2, &cx.tls] {
        if !t.kv.is_empty() {
            t.render(&mut out, "");
            out.push('\n');
        }
    }
    for t in cx
        .zones
        .iter()
        .chain(&cx.upstreams)
        .chain(&cx.servers)
        .chain(&cx.streams)
    {
        t.render(&mut out, "");
        out.push('\n');
    }
    out
}
