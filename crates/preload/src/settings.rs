//! The library's settings, from the environment `ringx run` prepares (read once, in the
//! constructor). No `RINGX_PRELOAD_*` variable at all: the library is inert and every call
//! passes straight through.
//!
//! | variable | value | meaning |
//! |---|---|---|
//! | `RINGX_PRELOAD_LISTEN` | `cpu` \| `hash` | steer `SO_REUSEPORT` listeners by CPU (default `hash`: leave them) |
//! | `RINGX_PRELOAD_PIN` | `1` | pin a thread that uses a steered listener to a CPU of its own |
//! | `RINGX_PRELOAD_MODE` | `off` \| `software` \| `rss` | source ports of `connect` (see `ringx_steer::active`) |
//! | `RINGX_PRELOAD_CPUS` | `0,1` | the zones' CPUs, in zone order (default: the allowed CPUs) |
//! | `RINGX_PRELOAD_DEVICE` | `eth0` | `rss`: the device whose RSS the tables model |
//! | `RINGX_PRELOAD_DESTS` | `L R P;L R P` | the destinations with tables (`rss_table` syntax) |
//! | `RINGX_PRELOAD_PORTS` | `32768-60999` | local port range (the XDP program's, in software) |
//! | `RINGX_PRELOAD_STATS` | a directory | write the counters to `DIR/ringx-preload.PID` at exit |

use std::ops::RangeInclusive;
use std::path::PathBuf;

use ringx_steer::active::Mode;
use ringx_steer::ports::{parse_dest_list, Dest};

pub const PREFIX: &str = "RINGX_PRELOAD_";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub listen_cpu: bool,
    pub pin: bool,
    pub mode: Mode,
    pub cpus: Vec<usize>,
    pub device: Option<String>,
    pub dests: Vec<Dest>,
    pub ports: Option<RangeInclusive<u16>>,
    pub stats: Option<PathBuf>,
}

/// The settings from `get` (the environment); `Ok(None)` when no variable is set.
pub fn parse(get: impl Fn(&str) -> Option<String>) -> Result<Option<Settings>, String> {
    const NAMES: [&str; 8] = [
        "LISTEN", "PIN", "MODE", "CPUS", "DEVICE", "DESTS", "PORTS", "STATS",
    ];
    let var = |n: &str| get(&format!("{PREFIX}{n}")).filter(|v| !v.is_empty());
    if NAMES.iter().all(|n| var(n).is_none()) {
        return Ok(None);
    }
    let bad = |n: &str, v: &str, want: &str| format!("{PREFIX}{n}={v:?}: expected {want}");
    let listen_cpu = match var("LISTEN").as_deref() {
        None | Some("hash") => false,
        Some("cpu") => true,
        Some(v) => return Err(bad("LISTEN", v, "cpu or hash")),
    };
    let pin = match var("PIN").as_deref() {
        None | Some("0") => false,
        Some("1") => true,
        Some(v) => return Err(bad("PIN", v, "0 or 1")),
    };
    let mode = match var("MODE").as_deref() {
        None | Some("off") => Mode::Off,
        Some("software") => Mode::Software,
        Some("rss") => Mode::Rss,
        Some(v) => return Err(bad("MODE", v, "off, software or rss")),
    };
    let cpus = match var("CPUS") {
        None => Vec::new(),
        Some(v) => v
            .split(',')
            .map(|c| c.trim().parse::<usize>())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| bad("CPUS", &v, "a comma-separated list of CPU numbers"))?,
    };
    let dests = match var("DESTS") {
        None => Vec::new(),
        Some(v) => parse_dest_list(&v).map_err(|e| format!("{PREFIX}DESTS: {e}"))?,
    };
    let ports = match var("PORTS") {
        None => None,
        Some(v) => {
            let range = v
                .split_once('-')
                .and_then(|(a, b)| Some(a.trim().parse::<u16>().ok()?..=b.trim().parse().ok()?))
                .filter(|r| !r.is_empty() && *r.start() > 0);
            Some(range.ok_or_else(|| bad("PORTS", &v, "FIRST-LAST"))?)
        }
    };
    if mode != Mode::Off && dests.is_empty() {
        return Err(format!(
            "{PREFIX}MODE={}: no destination ({PREFIX}DESTS) to choose source ports for",
            mode.as_str()
        ));
    }
    Ok(Some(Settings {
        listen_cpu,
        pin,
        mode,
        cpus,
        device: var("DEVICE"),
        dests,
        ports,
        stats: var("STATS").map(PathBuf::from),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (format!("{PREFIX}{k}"), v.to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn nothing_set_is_inert() {
        assert_eq!(parse(env(&[])), Ok(None));
        assert_eq!(parse(env(&[("LISTEN", "")])), Ok(None));
    }

    #[test]
    fn full_settings() {
        let s = parse(env(&[
            ("LISTEN", "cpu"),
            ("PIN", "1"),
            ("MODE", "software"),
            ("CPUS", "1, 0"),
            ("DESTS", "10.0.0.1 10.0.0.2 80; 10.0.0.1 10.0.0.3 443"),
            ("PORTS", "40000-40999"),
            ("STATS", "/tmp/x"),
        ]))
        .unwrap()
        .unwrap();
        assert!(s.listen_cpu && s.pin);
        assert_eq!(s.mode, Mode::Software);
        assert_eq!(s.cpus, vec![1, 0]);
        assert_eq!(s.dests.len(), 2);
        assert_eq!(s.dests[1].remote.port(), 443);
        assert_eq!(s.ports, Some(40000..=40999));
        assert_eq!(s.stats, Some(PathBuf::from("/tmp/x")));
    }

    #[test]
    fn errors_name_the_variable() {
        for (pairs, needle) in [
            (&[("LISTEN", "yes")][..], "RINGX_PRELOAD_LISTEN=\"yes\""),
            (&[("PIN", "2")][..], "RINGX_PRELOAD_PIN"),
            (&[("MODE", "auto")][..], "off, software or rss"),
            (&[("CPUS", "0,x")][..], "RINGX_PRELOAD_CPUS"),
            (&[("PORTS", "9-1")][..], "FIRST-LAST"),
            (&[("PORTS", "0-10")][..], "FIRST-LAST"),
            (&[("MODE", "software")][..], "no destination"),
            (&[("DESTS", "10.0.0.1 80")][..], "RINGX_PRELOAD_DESTS"),
        ] {
            let e = parse(env(pairs)).unwrap_err();
            assert!(e.contains(needle), "{pairs:?}: {e}");
        }
    }
}
