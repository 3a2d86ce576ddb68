//! `ringx run -- CMD ...`: runs an unmodified program with ringx's connection locality on the
//! kernel's TCP stack, through `libringx_preload.so` (crates/preload).
//!
//! The wrapper decides what the library gets, puts it in `RINGX_PRELOAD_*` variables and
//! `LD_PRELOAD`, and runs CMD as its child. It stays as the parent because software steering
//! needs an XDP program on the device for as long as the program runs: the wrapper attaches
//! it (exactly as `ringx serve` does for `[steering] mode = "software"`) and detaches it when
//! the child is gone. Signals it receives (INT, TERM, HUP, QUIT, USR1, USR2) are passed to the
//! child, and it exits with the child's status (128 + N for a child killed by signal N).

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::{Command, ExitCode};
use std::sync::atomic::{AtomicI32, Ordering};

use clap::Args;
use ringx_steer::active::{self, Mode, Request};
use ringx_steer::ports::{parse_dest_list, Dest};

#[derive(Args, Debug)]
pub struct RunArgs {
    /// Steer the program's SO_REUSEPORT listeners: "cpu" (each connection to the listener of
    /// the CPU that processed its SYN) or "hash" (the kernel's choice, untouched).
    #[arg(long, default_value = "cpu")]
    listen: String,
    /// Pin each thread that waits on a steered listener to a CPU of its own (for programs
    /// that do not pin themselves).
    #[arg(long)]
    pin: bool,
    /// Source ports of connect(): "off", "software" (an XDP program steers replies by local
    /// port; root), "rss" (the NIC's RSS tables), as `[steering] mode`.
    #[arg(long, default_value = "off")]
    mode: String,
    /// The zones' CPUs ("0,1"); default: the CPUs this process may use.
    #[arg(long)]
    cpus: Option<String>,
    /// Where the replies arrive (software: the XDP program's devices; rss: the NIC);
    /// default: the device of the first destination's local address.
    #[arg(long)]
    device: Vec<String>,
    /// A destination with a port table: "LOCAL_ADDR REMOTE_ADDR REMOTE_PORT" (repeatable).
    #[arg(long = "rss-table")]
    rss_table: Vec<String>,
    /// Local port range "FIRST-LAST"; default: the namespace's ip_local_port_range.
    #[arg(long)]
    ports: Option<String>,
    /// XDP attach mode in software: "native" or "generic" (default: generic on veth).
    #[arg(long = "xdp-mode")]
    xdp_mode: Option<String>,
    /// Write the library's counters to DIR/ringx-preload.PID when each process exits.
    #[arg(long)]
    stats: Option<PathBuf>,
    /// The library (default: libringx_preload.so beside this binary, or $RINGX_PRELOAD_LIB).
    #[arg(long)]
    lib: Option<PathBuf>,
    /// The program and its arguments.
    #[arg(trailing_var_arg = true, required = true, allow_hyphen_values = true)]
    cmd: Vec<OsString>,
}

static CHILD: AtomicI32 = AtomicI32::new(0);
const FORWARDED: [libc::c_int; 6] = [
    libc::SIGINT,
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
];

extern "C" fn forward(sig: libc::c_int) {
    // Relaxed: the pid was stored before the handlers were installed (a happens-before
    // through sigaction), and kill is async-signal-safe.
    let pid = CHILD.load(Ordering::Relaxed);
    if pid > 0 {
        // SAFETY: kill takes a pid and a signal number.
        unsafe { libc::kill(pid, sig) };
    }
}

fn library(arg: Option<PathBuf>) -> Result<PathBuf, String> {
    let candidates: Vec<PathBuf> = arg
        .into_iter()
        .chain(std::env::var_os("RINGX_PRELOAD_LIB").map(PathBuf::from))
        .chain(
            std::env::current_exe()
                .ok()
                .and_then(|p| p.parent().map(|d| d.join("libringx_preload.so"))),
        )
        // Where the Debian package installs it.
        .chain(std::iter::once(PathBuf::from(
            "/usr/lib/ringx/libringx_preload.so",
        )))
        .collect();
    candidates
        .iter()
        .find(|p| p.is_file())
        .cloned()
        .ok_or_else(|| {
            format!(
                "libringx_preload.so not found (looked at {}; build it with `cargo build \
                 --release -p ringx-preload`, or pass --lib)",
                candidates
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })
}

fn parse_mode(s: &str) -> Result<Mode, String> {
    match s {
        "off" => Ok(Mode::Off),
        "software" => Ok(Mode::Software),
        "rss" => Ok(Mode::Rss),
        _ => Err(format!("--mode {s:?}: expected off, software or rss")),
    }
}

/// What the child's environment gets, and the XDP program to hold while it runs.
struct Plan {
    env: Vec<(String, String)>,
    _steering: Option<active::Active>,
}

fn plan(a: &RunArgs) -> Result<Plan, String> {
    if a.listen != "cpu" && a.listen != "hash" {
        return Err(format!("--listen {:?}: expected cpu or hash", a.listen));
    }
    let mode = parse_mode(&a.mode)?;
    let cpus: Vec<usize> = match &a.cpus {
        Some(s) => s
            .split(',')
            .map(|c| {
                c.trim()
                    .parse()
                    .map_err(|_| format!("--cpus {s:?}: not a CPU list"))
            })
            .collect::<Result<_, _>>()?,
        None => ringx_engine::sys::allowed_cpus(),
    };
    let mut dests: Vec<Dest> = Vec::new();
    for t in &a.rss_table {
        dests.extend(parse_dest_list(t).map_err(|e| format!("--rss-table: {e}"))?);
    }
    let range = match &a.ports {
        Some(p) => {
            let (x, y) = p
                .split_once('-')
                .ok_or_else(|| format!("--ports {p:?}: expected FIRST-LAST"))?;
            let x: u16 = x.trim().parse().map_err(|_| format!("--ports {p:?}"))?;
            let y: u16 = y.trim().parse().map_err(|_| format!("--ports {p:?}"))?;
            x..=y
        }
        None => active::local_port_range(),
    };
    if mode != Mode::Off && dests.is_empty() {
        return Err(format!(
            "--mode {}: give the destinations with --rss-table",
            a.mode
        ));
    }
    let xdp_mode = a
        .xdp_mode
        .as_deref()
        .map(str::parse::<ringx_xdp::Mode>)
        .transpose()
        .map_err(|e| format!("--xdp-mode: {e}"))?;
    let steering = if mode == Mode::Software {
        let st = active::setup(&Request {
            mode,
            cpus: &cpus,
            dests: &dests,
            devices: &a.device,
            xdp_mode,
            port_range: Some(range.clone()),
            ..Request::default()
        })
        .map_err(|e| format!("--mode software: {e}"))?;
        Some(st)
    } else {
        None
    };
    let join = |v: &[String]| v.join(";");
    let mut env = vec![
        ("RINGX_PRELOAD_LISTEN".to_string(), a.listen.clone()),
        ("RINGX_PRELOAD_PIN".to_string(), u8::from(a.pin).to_string()),
        ("RINGX_PRELOAD_MODE".to_string(), mode.as_str().to_string()),
        (
            "RINGX_PRELOAD_CPUS".to_string(),
            cpus.iter()
                .map(|c| c.to_string())
                .collect::<Vec<_>>()
                .join(","),
        ),
        (
            "RINGX_PRELOAD_PORTS".to_string(),
            format!("{}-{}", range.start(), range.end()),
        ),
    ];
    if !dests.is_empty() {
        let d: Vec<String> = dests
            .iter()
            .map(|d| format!("{} {} {}", d.local, d.remote.ip(), d.remote.port()))
            .collect();
        env.push(("RINGX_PRELOAD_DESTS".to_string(), join(&d)));
    }
    if let Some(dev) = a.device.first() {
        env.push(("RINGX_PRELOAD_DEVICE".to_string(), dev.clone()));
    }
    if let Some(s) = &a.stats {
        env.push(("RINGX_PRELOAD_STATS".to_string(), s.display().to_string()));
    }
    Ok(Plan {
        env,
        _steering: steering,
    })
}

pub fn run(a: RunArgs) -> ExitCode {
    crate::lifecycle::init_logging("info");
    let lib = match library(a.lib.clone()) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("ringx run: {e}");
            return ExitCode::FAILURE;
        }
    };
    let plan = match plan(&a) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("ringx run: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut preload = lib.into_os_string();
    if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|v| !v.is_empty()) {
        preload.push(":");
        preload.push(old);
    }
    let mut cmd = Command::new(&a.cmd[0]);
    cmd.args(&a.cmd[1..])
        .env("LD_PRELOAD", preload)
        .envs(plan.env.iter().cloned());
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("ringx run: cannot run {:?}: {e}", a.cmd[0]);
            return ExitCode::from(127);
        }
    };
    CHILD.store(child.id() as i32, Ordering::Relaxed);
    for sig in FORWARDED {
        // SAFETY: installs a handler that only loads an atomic and calls kill (both
        // async-signal-safe); the handler is a plain extern "C" fn that lives forever.
        unsafe {
            libc::signal(
                sig,
                forward as extern "C" fn(libc::c_int) as libc::sighandler_t,
            )
        };
    }
    let status = match child.wait() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("ringx run: waiting for the program: {e}");
            return ExitCode::FAILURE;
        }
    };
    drop(plan);
    use std::os::unix::process::ExitStatusExt as _;
    let code = status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(1);
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        a: RunArgs,
    }

    fn args(v: &[&str]) -> RunArgs {
        T::try_parse_from(std::iter::once("run").chain(v.iter().copied()))
            .unwrap()
            .a
    }

    #[test]
    fn environment_for_the_library() {
        let p = plan(&args(&[
            "--pin",
            "--cpus",
            "1,0",
            "--ports",
            "40000-40999",
            "--",
            "true",
        ]))
        .unwrap();
        let get = |k: &str| p.env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("RINGX_PRELOAD_LISTEN"), Some("cpu"));
        assert_eq!(get("RINGX_PRELOAD_PIN"), Some("1"));
        assert_eq!(get("RINGX_PRELOAD_MODE"), Some("off"));
        assert_eq!(get("RINGX_PRELOAD_CPUS"), Some("1,0"));
        assert_eq!(get("RINGX_PRELOAD_PORTS"), Some("40000-40999"));
        assert_eq!(get("RINGX_PRELOAD_DESTS"), None);
    }

    #[test]
    fn refusals_say_why() {
        for (v, needle) in [
            (&["--listen", "x", "--", "true"][..], "--listen"),
            (&["--mode", "auto", "--", "true"][..], "--mode"),
            (&["--mode", "rss", "--", "true"][..], "--rss-table"),
            (&["--ports", "9", "--", "true"][..], "FIRST-LAST"),
            (&["--cpus", "a", "--", "true"][..], "--cpus"),
        ] {
            let e = plan(&args(v)).err().unwrap();
            assert!(e.contains(needle), "{v:?}: {e}");
        }
        let cmd = args(&["--", "nginx", "-g", "daemon off;"]).cmd;
        assert_eq!(cmd, ["nginx", "-g", "daemon off;"]);
    }
}
