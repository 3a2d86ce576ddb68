//! `ringx tproxy rules [-c FILE] [--apply | --remove]`: prints the packet-filter and policy
//! routing commands transparent proxying needs for a configuration (`tproxy_rules.rs`),
//! applies them, or removes what an earlier `--apply` added.
//!
//! `--apply` runs the commands in order and records, in a state file, how to take each one
//! back; if one fails, those already run are taken back (newest first) and nothing stays.
//! `--remove` runs the recorded removals, newest first, and deletes the state file: it undoes
//! exactly what was added, even if the configuration changed since. A policy-routing rule or
//! route that already existed before `--apply` is left alone and not recorded.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use clap::{Args, Subcommand, ValueEnum};
use ringx_config::tproxy::Backend;

use crate::tproxy_rules::{plan, resolve_backend, shell, Step};

#[derive(Args)]
pub struct TproxyArgs {
    #[command(subcommand)]
    cmd: TproxyCmd,
}

#[derive(Subcommand)]
enum TproxyCmd {
    /// Print the nft (or iptables) and `ip rule`/`ip route` commands for the configuration's
    /// transparent listeners and [tproxy]; --apply runs them, --remove undoes what --apply did.
    Rules(RulesArgs),
}

#[derive(Args)]
struct RulesArgs {
    /// Configuration file (TOML).
    #[arg(short = 'c', long = "config")]
    config: Option<PathBuf>,
    /// Run the commands (needs CAP_NET_ADMIN), recording how to undo them.
    #[arg(long, conflicts_with = "remove")]
    apply: bool,
    /// Undo what --apply added (from the state file).
    #[arg(long)]
    remove: bool,
    /// Packet filter (default: [tproxy] backend, else nft when installed, else iptables).
    #[arg(long, value_enum)]
    backend: Option<BackendArg>,
    /// Where --apply records what it added (default: /run/ringx/tproxy-TABLE.state).
    #[arg(long)]
    state: Option<PathBuf>,
}

#[derive(Clone, Copy, ValueEnum)]
enum BackendArg {
    Nft,
    Iptables,
}

/// The first line of a state file.
const STATE_HEADER: &str = "# ringx tproxy state v1: one removal per line, arguments tab-separated";

pub fn run(args: TproxyArgs) -> ExitCode {
    let TproxyCmd::Rules(a) = args.cmd;
    match exec(a) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ringx tproxy: {e}");
            ExitCode::FAILURE
        }
    }
}

fn exec(a: RulesArgs) -> Result<(), String> {
    let cfg = match &a.config {
        Some(p) => ringx_config::load(p),
        None => ringx_config::parse("(embedded default)", ringx_config::DEFAULT_CONFIG),
    }
    .map_err(|e| e.to_string())?;
    let table = cfg.tproxy.as_ref().map_or(100, |t| *t.table.get_ref());
    let state = a
        .state
        .unwrap_or_else(|| PathBuf::from(format!("/run/ringx/tproxy-{table}.state")));
    if a.remove {
        return remove(&state);
    }
    let backend = match a.backend {
        Some(BackendArg::Nft) => Backend::Nft,
        Some(BackendArg::Iptables) => Backend::Iptables,
        None => resolve_backend(cfg.tproxy.as_ref().map_or(Backend::Auto, |t| t.backend)),
    };
    let p = plan(&cfg, backend);
    if !a.apply {
        print_plan(&p.steps);
        return Ok(());
    }
    if state.exists() {
        return Err(format!(
            "{} exists: rules are applied already (run --remove first)",
            state.display()
        ));
    }
    apply(&p.steps, &state)
}

fn print_plan(steps: &[Step]) {
    println!("# transparent proxying: policy routing and TPROXY rules (ringx tproxy rules)");
    for s in steps {
        match &s.stdin {
            Some(text) => {
                println!("{} <<'EOF'", shell(&s.add));
                print!("{text}");
                println!("EOF");
            }
            None => println!("{}", shell(&s.add)),
        }
    }
    println!("# removed by: ringx tproxy rules --remove (or, in reverse order):");
    for s in steps.iter().rev() {
        println!("#   {}", shell(&s.del));
    }
}

/// Runs `args` (with `stdin` fed to it); Err with what it printed when it fails.
fn run_cmd(args: &[String], stdin: Option<&str>) -> Result<(), String> {
    let mut cmd = Command::new(&args[0]);
    cmd.args(&args[1..])
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("{}: {e} (is it installed?)", args[0]))?;
    if let (Some(text), Some(mut w)) = (stdin, child.stdin.take()) {
        w.write_all(text.as_bytes())
            .map_err(|e| format!("{}: writing its input: {e}", shell(args)))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| format!("{}: {e}", shell(args)))?;
    if out.status.success() {
        return Ok(());
    }
    let mut msg = String::from_utf8_lossy(&out.stderr).trim().to_string();
    if msg.is_empty() {
        msg = String::from_utf8_lossy(&out.stdout).trim().to_string();
    }
    Err(format!("`{}` failed: {msg}", shell(args)))
}

/// An `ip rule`/`ip route` that is there already (not ours to remove).
fn already_there(step: &Step, err: &str) -> bool {
    step.add.first().is_some_and(|c| c == "ip") && err.contains("File exists")
}

fn apply(steps: &[Step], state: &Path) -> Result<(), String> {
    let mut done: Vec<&Step> = Vec::new();
    for s in steps {
        match run_cmd(&s.add, s.stdin.as_deref()) {
            Ok(()) => done.push(s),
            Err(e) if already_there(s, &e) => {
                eprintln!(
                    "ringx tproxy: {} exists already; left as it is",
                    shell(&s.add)
                );
            }
            Err(e) => {
                let undo = undo(done.iter().rev().map(|s| &s.del));
                return Err(match undo {
                    Ok(()) => format!("{e}; what was applied before it was removed again"),
                    Err(u) => format!("{e}; removing what was applied before it failed too: {u}"),
                });
            }
        }
    }
    let mut text = String::from(STATE_HEADER);
    text.push('\n');
    for s in &done {
        if s.del.iter().any(|a| a.contains(['\t', '\n'])) {
            return Err("a removal command has a tab or newline in an argument".into());
        }
        text += &s.del.join("\t");
        text.push('\n');
    }
    let write = || -> std::io::Result<()> {
        if let Some(dir) = state.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(state, &text)
    };
    if let Err(e) = write() {
        let _ = undo(done.iter().rev().map(|s| &s.del));
        return Err(format!(
            "cannot record the rules in {}: {e}; they were removed again",
            state.display()
        ));
    }
    for s in &done {
        println!("applied: {}", shell(&s.add));
    }
    println!(
        "recorded in {} (ringx tproxy rules --remove undoes it)",
        state.display()
    );
    Ok(())
}

/// Runs removals in the order given; goes on past failures, reporting them all.
fn undo<'a>(dels: impl Iterator<Item = &'a Vec<String>>) -> Result<(), String> {
    let errs: Vec<String> = dels.filter_map(|d| run_cmd(d, None).err()).collect();
    match errs.is_empty() {
        true => Ok(()),
        false => Err(errs.join("; ")),
    }
}

fn remove(state: &Path) -> Result<(), String> {
    let text = std::fs::read_to_string(state).map_err(|e| {
        format!(
            "{}: {e} (nothing recorded as applied: was --apply run with this --state?)",
            state.display()
        )
    })?;
    let mut lines = text.lines();
    if lines.next() != Some(STATE_HEADER) {
        return Err(format!(
            "{} is not a ringx tproxy state file",
            state.display()
        ));
    }
    let dels: Vec<Vec<String>> = lines
        .filter(|l| !l.is_empty())
        .map(|l| l.split('\t').map(str::to_string).collect())
        .collect();
    // Newest first; what fails stays recorded (in its order) for the next --remove.
    let mut left = Vec::new();
    let mut errs = Vec::new();
    for d in dels.iter().rev() {
        match run_cmd(d, None) {
            Ok(()) => println!("removed: {}", shell(d)),
            Err(e) => {
                errs.push(e);
                left.push(d);
            }
        }
    }
    if errs.is_empty() {
        return std::fs::remove_file(state).map_err(|e| format!("{}: {e}", state.display()));
    }
    let mut text = String::from(STATE_HEADER);
    text.push('\n');
    for d in left.iter().rev() {
        text += &d.join("\t");
        text.push('\n');
    }
    let kept = std::fs::write(state, text).map_err(|e| format!("; and {}: {e}", state.display()));
    Err(format!(
        "{}; what failed stays in {}{}",
        errs.join("; "),
        state.display(),
        kept.err().unwrap_or_default()
    ))
}
