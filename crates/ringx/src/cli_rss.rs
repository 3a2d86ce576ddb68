//! `ringx rss`: compute RSS hashes and show what a NIC does with them.

use ringx_server::error::Error;
use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;

use clap::{Args, Subcommand};
use ringx_steer::nic;
use ringx_steer::toeplitz::{parse_key, toeplitz, HashInput, DEFAULT_KEY};

#[derive(Subcommand)]
pub enum RssCmd {
    /// Print the Toeplitz hash of a packet's tuple (source, destination) as a NIC computes it.
    Hash(HashArgs),
    /// Show a device's RSS key, hash function, indirection table, RX queues and IRQ CPUs.
    Show {
        /// Network device, e.g. eth0.
        #[arg(long)]
        dev: String,
    },
}

#[derive(Args)]
pub struct HashArgs {
    /// RSS key in hex, `6d5a56da...` or `6d:5a:56:da:...` (default: the Microsoft/Intel
    /// verification key).
    #[arg(long)]
    key: Option<String>,
    /// Packet source, IP:PORT (IPv6 in brackets: [2001:db8::1]:80); IP alone with --ip-only.
    #[arg(long)]
    src: String,
    /// Packet destination, IP:PORT; IP alone with --ip-only.
    #[arg(long)]
    dst: String,
    /// Hash the addresses only (a NIC's `sd` mode), ports ignored.
    #[arg(long)]
    ip_only: bool,
}

/// An endpoint: `IP:PORT`, `[V6]:PORT`, or (when `port_optional`) `IP`, `V6`, `[V6]`.
fn parse_endpoint(what: &str, s: &str, port_optional: bool) -> Result<(IpAddr, u16), Error> {
    if let Ok(sa) = s.parse::<SocketAddr>() {
        return Ok((sa.ip(), sa.port()));
    }
    let bare = s
        .strip_prefix('[')
        .and_then(|r| r.strip_suffix(']'))
        .unwrap_or(s);
    match bare.parse::<IpAddr>() {
        Ok(ip) if port_optional => Ok((ip, 0)),
        Ok(_) => Err(Error::invalid(format!(
            "{what} {s:?} has no port: write IP:PORT ([IPv6]:PORT), or pass --ip-only"
        ))),
        Err(_) => Err(Error::invalid(format!(
            "{what} {s:?} is not IP:PORT (IPv6 in brackets: [2001:db8::1]:80)"
        ))),
    }
}

fn hash(args: &HashArgs) -> Result<u32, Error> {
    let key = match &args.key {
        Some(k) => parse_key(k)?,
        None => DEFAULT_KEY.to_vec(),
    };
    let (src, sport) = parse_endpoint("--src", &args.src, args.ip_only)?;
    let (dst, dport) = parse_endpoint("--dst", &args.dst, args.ip_only)?;
    let input = if args.ip_only {
        HashInput::ip_only(src, dst)
    } else {
        HashInput::with_ports(SocketAddr::new(src, sport), SocketAddr::new(dst, dport))
    }
    .ok_or_else(|| "--src and --dst must both be IPv4 or both IPv6".to_string())?;
    let need = input.as_bytes().len() + 4;
    if key.len() < need {
        return Err(Error::invalid(format!(
            "key of {} bytes is too short: hashing {} input bytes needs at least {need}",
            key.len(),
            input.as_bytes().len()
        )));
    }
    Ok(toeplitz(&key, input.as_bytes()))
}

pub fn run(cmd: RssCmd) -> ExitCode {
    match cmd {
        RssCmd::Hash(args) => match hash(&args) {
            Ok(h) => {
                println!("{h:#010x}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("ringx rss hash: {e}");
                ExitCode::FAILURE
            }
        },
        RssCmd::Show { dev } => match nic::discover(&dev) {
            Ok(report) => {
                print!("{report}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("ringx rss show: {e}");
                ExitCode::FAILURE
            }
        },
    }
}
