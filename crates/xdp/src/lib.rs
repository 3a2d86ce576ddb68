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

/// Why BPF cannot be used here, or None when it can: not root, or the kernel refuses a
/// trivial map. For tests to skip with a reason.
pub fn bpf_unavailable() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root (BPF programs need root or CAP_BPF + CAP_NET_ADMIN)".into());
    }
    if !std::path::Path::new("/sys/fs/bpf").is_dir() {
        return Some("/sys/fs/bpf does not exist (no sysfs or no BPF file system support)".into());
    }
    None
}
