//! `ringx`: the command line.

mod acme;
mod activation;
mod admin;
mod admin_action;
mod cache_purge;
mod cli_gen;
mod cli_import;
mod cli_lb;
mod cli_rss;
mod cli_tproxy;
mod cli_xdp;
mod cluster;
mod cluster_events;
mod control;
mod echo;
mod echo_pool;
mod errlog;
mod handoff;
mod lb_run;
mod lb_setup;
mod lifecycle;
mod pidfile;
mod quic_steering;
mod run;
mod sdnotify;
mod serve_xdp;
mod services;
mod sockfd;
mod status;
mod status_html;
mod status_json;
mod steering;
mod tproxy_rules;
mod upgrade;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "ringx",
    version,
    about = "Web server, reverse proxy and TCP proxy on thread-per-core io_uring zones"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run the server (on the embedded default configuration when no file is given).
    Serve {
        /// Configuration file (TOML).
        #[arg(short = 'c', long = "config")]
        config: Option<PathBuf>,
    },
    /// Validate a configuration and exit: 0 if it is valid, 1 with FILE:LINE:COL: message if not.
    Check {
        #[arg(short = 'c', long = "config")]
        config: Option<PathBuf>,
    },
    /// Print the embedded default configuration.
    DefaultConfig,
    /// Translate an nginx configuration into ringx's, reporting what was not carried over.
    Import(cli_import::ImportArgs),
    /// RSS: hash flows like a NIC, show a device's RSS setup.
    #[command(subcommand)]
    Rss(cli_rss::RssCmd),
    /// XDP filter: attach, detach, block and allow lists, counters.
    Xdp(cli_xdp::XdpArgs),
    /// XDP L4 load balancer: attach, run (health checks), backends, drain, counters.
    Lb(cli_lb::LbArgs),
    /// Run the length-prefixed echo server of the netpoll benchmark on the engine.
    Echo(echo::EchoArgs),
    /// Run an unmodified program with ringx's connection locality (libringx_preload.so).
    Run(run::RunArgs),
    /// Transparent proxying: the TPROXY and policy routing rules for a configuration.
    Tproxy(cli_tproxy::TproxyArgs),
    /// Make the running server reload its configuration (SIGHUP to the pid in its pid_file).
    Reload {
        #[arg(short = 'c', long = "config")]
        config: Option<PathBuf>,
        /// The pid file to read (default: [runtime] pid_file of the configuration).
        #[arg(long = "pid-file")]
        pid_file: Option<PathBuf>,
    },
    /// Print the man page or a shell's completions (what `make deb` packages).
    #[command(hide = true)]
    Gen(cli_gen::GenArgs),
}

fn load(path: &Option<PathBuf>) -> Result<ringx_config::Config, ringx_config::ConfigError> {
    match path {
        Some(p) => ringx_config::load(p),
        None => ringx_config::parse("(embedded default)", ringx_config::DEFAULT_CONFIG),
    }
}

/// What `ringx check` says about transparent proxying: it needs CAP_NET_ADMIN, and whether
/// this process has it.
fn transparent_note(c: &ringx_config::Config) -> Option<String> {
    if !ringx_config::tproxy::needs_transparent(&c.server, &c.stream, &c.upstream) {
        return None;
    }
    let has = has_cap_net_admin();
    Some(format!(
        "transparent listeners and bind = \"client\" need CAP_NET_ADMIN (IP_TRANSPARENT); this \
         process {}; the TPROXY and routing rules: ringx tproxy rules{}",
        if has {
            "has it"
        } else {
            "lacks it: run ringx serve as root, or grant it with setcap cap_net_admin+ep"
        },
        if c.tproxy.is_none() {
            " (no [tproxy] divert: only the rules for replies to client addresses)"
        } else {
            ""
        }
    ))
}

/// Whether CAP_NET_ADMIN (bit 12) is in this process's effective capabilities.
fn has_cap_net_admin() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .is_some_and(|caps| caps & (1 << 12) != 0)
}

fn main() -> ExitCode {
    // Freed memory stays with the process (up to 64 MiB of free top per heap) and the main
    // heap grows 16 MiB at a time: a warmed-up zone then makes no brk/mprotect/madvise calls
    // as connections come and go (engine::sys::keep_heap).
    ringx_engine::sys::keep_heap(64 << 20, 16 << 20);
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Rss(cmd) => cli_rss::run(cmd),
        Cmd::Xdp(args) => cli_xdp::run(args),
        Cmd::Lb(args) => cli_lb::run(args),
        Cmd::Echo(args) => echo::run(args),
        Cmd::Run(args) => run::run(args),
        Cmd::Tproxy(args) => cli_tproxy::run(args),
        Cmd::Import(args) => cli_import::run(args),
        Cmd::Gen(args) => cli_gen::run(args, Cli::command()),
        Cmd::DefaultConfig => {
            print!("{}", ringx_config::DEFAULT_CONFIG);
            ExitCode::SUCCESS
        }
        Cmd::Check { config } => match {
            // Warnings (an expiring certificate, an upstream not verified) on standard error,
            // as `nginx -t` prints them.
            lifecycle::init_logging("warn");
            load(&config)
        }
        .map_err(ringx_server::error::Error::from)
        .and_then(|c| {
            // What start-up would do with it: roots opened, upstream names resolved,
            // certificates and keys read and checked.
            ringx_server::compiled::Compiled::from(&c).map(|_| c)
        }) {
            Ok(c) => {
                let name = config.map_or("(embedded default)".to_string(), |p| {
                    p.display().to_string()
                });
                println!("ringx: configuration {name} is valid");
                if let Some(note) = transparent_note(&c) {
                    println!("ringx: {note}");
                }
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("ringx: {e}");
                ExitCode::FAILURE
            }
        },
        Cmd::Reload { config, pid_file } => services::signal_cmd(&config, pid_file, libc::SIGHUP),
        Cmd::Serve { config } => match load(&config) {
            Ok(cfg) if cfg.server.is_empty() && cfg.stream.is_empty() => {
                eprintln!(
                    "ringx: the configuration has only [lb], nothing to serve: run the \
                     balancer with `ringx lb run -c FILE`"
                );
                ExitCode::FAILURE
            }
            Ok(cfg) => lifecycle::serve(cfg, config),
            Err(e) => {
                eprintln!("ringx: {e}");
                ExitCode::FAILURE
            }
        },
    }
}
