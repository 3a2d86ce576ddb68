//! Steering of the HTTP/3 sockets at start and on a reload that adds one: each QUIC packet
//! to the zone its connection ID names (`ringx_steer::quic`). A binary upgrade hands the
//! steering of each address to the new process (`RINGX_QUIC_STEERING`:
//! `addr=sockets:current:generation,...`, the maps by id), which takes it over under the
//! other generation: the old process's connections keep reaching it while it drains.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Mutex, OnceLock};

use ringx_steer::quic::{Ids, QuicSteering};

pub const ENV: &str = "RINGX_QUIC_STEERING";

/// What this process steers, by address (for the process that replaces it).
static STEERED: Mutex<Vec<(SocketAddr, QuicSteering)>> = Mutex::new(Vec::new());

/// The zones' CPUs (zone z on `CPUS[z]`), for a new client's packets to the zone on the CPU
/// that received them: set once at start, before the first [`steer`].
static CPUS: OnceLock<Vec<usize>> = OnceLock::new();

/// Records the zones' CPUs ([`CPUS`]).
pub fn set_cpus(cpus: &[usize]) {
    let _ = CPUS.set(cpus.to_vec());
}

/// What the process this one replaced handed over, read (and cleared) once.
fn handed_over() -> &'static HashMap<SocketAddr, Ids> {
    static IT: OnceLock<HashMap<SocketAddr, Ids>> = OnceLock::new();
    IT.get_or_init(|| {
        let Some(spec) = std::env::var_os(ENV) else {
            return HashMap::new();
        };
        std::env::remove_var(ENV);
        let mut out = HashMap::new();
        for item in spec.to_string_lossy().split(',').filter(|s| !s.is_empty()) {
            let parsed = item
                .split_once('=')
                .and_then(|(a, i)| Some((a.parse().ok()?, i.parse().ok()?)));
            match parsed {
                Some((a, ids)) => drop(out.insert(a, ids)),
                None => tracing::warn!("{ENV}: ignoring {item:?}"),
            }
        }
        out
    })
}

/// This process's generation: the other one than the process it replaced, else 0.
pub fn epoch() -> u8 {
    handed_over()
        .values()
        .next()
        .map_or(0, |i| (i.epoch & 1) ^ 1)
}

/// [`ringx_steer::quic::steer_zones`] over the UDP sockets that serve HTTP/3 (`quic = true`):
/// `per_zone[z]` holds zone z's listeners, each with its address.
pub fn steer<'a>(
    routes: &ringx_server::route::Routes,
    per_zone: impl Iterator<Item = impl Iterator<Item = (SocketAddr, &'a ringx_engine::Listener)>>,
) {
    let mut addrs: Vec<SocketAddr> = Vec::new();
    let groups: Vec<Vec<&std::net::UdpSocket>> = per_zone
        .enumerate()
        .map(|(z, ls)| {
            ls.filter_map(|(addr, l)| match l {
                ringx_engine::Listener::Udp(u) if routes.serves_quic(addr) => {
                    if z == 0 {
                        addrs.push(addr);
                    }
                    Some(u)
                }
                _ => None,
            })
            .collect()
        })
        .collect();
    let before = handed_over();
    let cpus = CPUS.get().map_or(&[][..], Vec::as_slice);
    let steered = ringx_steer::quic::steer_zones(
        &groups,
        cpus,
        ringx_server::role::h3::CID_LAYOUT,
        epoch(),
        |a| before.get(addrs.get(a)?).copied(),
    );
    let mut kept = STEERED.lock().unwrap_or_else(|e| e.into_inner());
    for (a, s) in steered {
        if let Some(&addr) = addrs.get(a) {
            kept.retain(|(b, _)| *b != addr);
            kept.push((addr, s));
        }
    }
}

/// [`ENV`]'s value for the process that replaces this one; None when nothing is steered.
pub fn for_upgrade() -> Option<String> {
    let kept = STEERED.lock().unwrap_or_else(|e| e.into_inner());
    (!kept.is_empty()).then(|| {
        kept.iter()
            .map(|(a, s)| format!("{a}={},", s.ids()))
            .collect()
    })
}
