//! `[steering]`: connection locality (issue #5).
//!
//! ```toml
//! [steering]
//! listen = "cpu"    # or "hash"
//! ```
//!
//! `listen` is the passive side: how the kernel hands new connections to the zones' listeners
//! on each address. `"cpu"` (the default) gives each connection to the zone pinned to the CPU
//! that processed its SYN — an eBPF reuseport program, or `SO_INCOMING_CPU` on the listeners
//! where eBPF is refused; a CPU without a (live) zone listener falls back to the kernel's
//! hash, so no connection is refused when a zone is gone. `"hash"` leaves the choice to the
//! kernel's 4-tuple hash (plain `SO_REUSEPORT`). See `ringx_engine::reuseport`.
//!
//! The active side (upstream source ports) adds its keys to this section.

use serde::Deserialize;

/// The `[steering]` section.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Steering {
    /// How new connections are spread over the zones' listeners.
    #[serde(default)]
    pub listen: ListenSteering,
}

/// `steering.listen`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ListenSteering {
    /// The zone on the CPU that processed the SYN (eBPF or `SO_INCOMING_CPU`).
    #[default]
    Cpu,
    /// The kernel's reuseport hash of the 4-tuple.
    Hash,
}

#[cfg(test)]
mod tests {
    use super::*;

    const SERVER: &str =
        "[[server]]\nlisten = [\"127.0.0.1:80\"]\n[[server.location]]\npath = \"/\"\nreturn = { status = 200 }\n";

    #[test]
    fn listen_defaults_to_cpu_and_parses_both() {
        let c = crate::config::parse("t.toml", SERVER).unwrap();
        assert_eq!(c.steering.listen, ListenSteering::Cpu);
        let c = crate::config::parse(
            "t.toml",
            &format!("[steering]\nlisten = \"hash\"\n{SERVER}"),
        )
        .unwrap();
        assert_eq!(c.steering.listen, ListenSteering::Hash);
        let c = crate::config::parse("t.toml", &format!("[steering]\nlisten = \"cpu\"\n{SERVER}"))
            .unwrap();
        assert_eq!(c.steering.listen, ListenSteering::Cpu);
    }

    #[test]
    fn bad_values_point_at_the_key() {
        let e = crate::config::parse("t.toml", &format!("[steering]\nlisten = \"rr\"\n{SERVER}"))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("t.toml:2:10: "), "{e}");
        let e = crate::config::parse("t.toml", &format!("[steering]\nlistne = \"cpu\"\n{SERVER}"))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("t.toml:2:1: ") && e.contains("unknown field"),
            "{e}"
        );
    }
}
