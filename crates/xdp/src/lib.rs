//! ringx's XDP fast path: inline DDoS filtering in the driver hook, with live block lists and
//! SYN rate limits (seed 002, the XDP paper).
//!
//! The program (`bpf/ringx_xdp.bpf.c`, compiled by clang at build time and embedded here)
//! parses Ethernet (with up to two 802.1Q/802.1ad tags), IPv4 (with options) or IPv6 (with up
//! to eight extension headers), then TCP or UDP, and decides, in order: pass sources on the
//! allow list; drop sources on the block list; drop TCP SYNs beyond a per-source token
//! bucket; optionally drop traffic to ports that are not served. Every packet is counted per
//! CPU under the [`Reason`] of its verdict; malformed or truncated headers have their own
//! reason and are dropped.
//!
//! # Using it
//!
//! ```no_run
//! use std::path::Path;
//! use ringx_xdp::{Filter, List, Mode, Origin, Settings};
//!
//! // Load (verify) the program with its settings; maps are created and pinned under the
//! // directory, or reused when an earlier version pinned them.
//! let settings = Settings { syn_rate: 100, syn_burst: 200, ..Settings::default() };
//! let mut filter = Filter::load(&settings, Path::new(ringx_xdp::DEFAULT_PIN_DIR))?;
//! // Attach through a pinned bpf_link; a second attach replaces the program atomically.
//! let att = filter.attach("eth0", Mode::Native)?;
//! // The maps are the control channel: updates apply to the next packet.
//! filter.maps().add(List::Block, "203.0.113.0/24".parse()?, Origin::Cli)?;
//! println!("{}", filter.maps().stats()?);
//! att.detach()?; // or leave it: the pinned link keeps filtering after exit
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Other processes (the proxy, `ringx xdp block`) open the same maps from their pins:
//! [`BlockList::open_pinned`], [`Maps::open_pinned`], [`Stats::read`].
//!
//! Everything here needs root (or CAP_BPF with CAP_NET_ADMIN); the errors say so.
//!
//! This crate is also where BPF is handled once for the workspace: [`sys`] is the one raw
//! `bpf(2)` layer (what aya cannot do; its module doc says why), and `build.rs` the one place
//! that finds clang and the BPF headers (`ringx-steer`'s build uses them). The steering
//! programs (reuseport by CPU, XDP software steering) live in `ringx-steer`.

pub mod abi;
pub mod bench;
mod chain;
mod cidr;
mod error;
mod features;
mod loader;
mod maps;
pub mod packet;
mod port;
pub mod sys;

pub use abi::{Counter, Reason, Verdict};
pub use chain::ChainSlot;
pub use cidr::Cidr;
pub use error::{Error, Result};
pub use features::{loader, probe_features};
pub use loader::{
    attach_program, attachments, chain_clear, chain_next, chain_prog_id, detach, ensure_pin_dir,
    ephemeral_low, purge, Attachment, Filter, LinkStatus, Mode, Settings, BPFFS_LOCK,
};
pub use maps::{BlockList, List, Maps, Origin, Stats, DEFAULT_PIN_DIR};
pub use port::ServedPort;
pub use sys::TestRun;

/// What to tell the user when loading mounted a bpffs at /sys/fs/bpf
/// ([`Filter::mounted_bpffs`]; see [`ensure_pin_dir`]).
pub const MOUNT_NOTE: &str = "no bpffs was mounted at /sys/fs/bpf, so ringx mounted one; \
    under `ip netns exec` that mount is private to this command and the pins go with it \
    (enter namespaces with `nsenter --net=/run/netns/NAME` instead)";

/// Why BPF cannot be used here, or None when it can: not root, root without the capabilities
/// (a container's), or no /sys/fs/bpf. For tests to skip with a reason.
pub fn bpf_unavailable() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root (BPF programs need root or CAP_BPF + CAP_NET_ADMIN)".into());
    }
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let cap_eff = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok());
    if let Some(why) = cap_eff.and_then(missing_caps) {
        return Some(why);
    }
    if !std::path::Path::new("/sys/fs/bpf").is_dir() {
        return Some("/sys/fs/bpf does not exist (no sysfs or no BPF file system support)".into());
    }
    None
}

/// What root lacks for BPF with effective capabilities `cap_eff` (CapEff of /proc/self/status):
/// CAP_NET_ADMIN, and CAP_BPF or (before Linux 5.8) CAP_SYS_ADMIN.
fn missing_caps(cap_eff: u64) -> Option<String> {
    const CAP_NET_ADMIN: u32 = 12;
    const CAP_SYS_ADMIN: u32 = 21;
    const CAP_BPF: u32 = 39;
    let has = |cap: u32| cap_eff >> cap & 1 == 1;
    if has(CAP_NET_ADMIN) && (has(CAP_BPF) || has(CAP_SYS_ADMIN)) {
        return None;
    }
    Some(format!(
        "root, but BPF needs CAP_NET_ADMIN and CAP_BPF (or CAP_SYS_ADMIN) and the effective \
         capabilities are {cap_eff:#x} (a container's root?)"
    ))
}

#[cfg(test)]
mod tests {
    #[test]
    fn root_needs_bpf_or_sys_admin_and_net_admin() {
        let caps = |bits: &[u32]| bits.iter().fold(0u64, |m, b| m | 1 << b);
        assert_eq!(super::missing_caps(0x1ff_ffff_ffff), None);
        assert_eq!(super::missing_caps(caps(&[12, 39])), None);
        assert_eq!(super::missing_caps(caps(&[12, 21])), None);
        for lacking in [caps(&[39, 21]), caps(&[12]), 0] {
            let why = super::missing_caps(lacking).expect("refused");
            assert!(
                why.contains("CAP_BPF") && why.contains("CAP_NET_ADMIN"),
                "{why}"
            );
        }
    }
}
