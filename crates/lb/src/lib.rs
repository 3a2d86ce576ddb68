//! ringx's XDP L4 load balancer: the tier in front of several ringx hosts (seed 002, the
//! XDP paper's load balancing; Katran's design).
//!
//! ```text
//!  client ──► balancer (XDP: ringx_lb) ──encapsulated──► backend (XDP: ringx_lb_decap)
//!     ▲           one table lookup, one ring lookup,          VIP on loopback, ringx
//!     │           XDP_TX / XDP_REDIRECT                        serving on it
//!     └───────────────────── the answer, straight from the backend ◄──┘
//! ```
//!
//! * `bpf/ringx_lb.bpf.c`: parses IPv4 and IPv6, finds the virtual service, looks the flow
//!   up in the connection table (an LRU hash with per-CPU free lists), else picks the
//!   backend from the service's Maglev ring at the flow's hash and remembers it; wraps the
//!   packet in GUE (IP in UDP) or IP-in-IP and sends it to the backend's next hop. ICMP
//!   fragmentation-needed and packet-too-big errors about a flow reach the flow's backend;
//!   everything not for a service passes untouched.
//! * `bpf/ringx_lb_decap.bpf.c`: the backend's half, taking the outer headers off.
//! * [`control`]: the control plane. The pinned maps are the whole state; [`control::apply`]
//!   makes them say what a configuration says, [`control::set_out`] drains a backend or
//!   takes a failed one out and back. Rings are computed here ([`ring`], with
//!   crates/balance's Maglev), never in the program, so every balancer with the same
//!   configuration sends a flow to the same backend.
//! * [`nexthop`]: where each backend's packets go (device, MACs, MTU), from the kernel's
//!   routes and neighbours.
//!
//! ```no_run
//! use std::path::Path;
//! use ringx_lb::{control, nexthop, Balancer, BackendSpec, LbSettings, Proto, Service};
//!
//! let mut lb = Balancer::load(&LbSettings::default(), Path::new(ringx_lb::DEFAULT_LB_PIN_DIR))?;
//! let svc = Service {
//!     addr: "198.51.100.1:80".parse()?,
//!     proto: Proto::Tcp,
//!     backends: vec![BackendSpec { addr: "10.0.0.2".parse()?, weight: 1, quic_host: None }],
//! };
//! control::apply(lb.maps(), &[svc], &|a| nexthop::resolve(a).ok())?;
//! lb.attach("eth0", ringx_xdp::Mode::Native)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod abi;
pub mod bench;
pub mod control;
pub mod hash;
mod loader;
mod maps;
pub mod nexthop;
pub mod ring;

pub use abi::{Counter, DecapReason, Reason, ReasonCounter, Verdict};
pub use bench::{Floor, Generator, Limit, LimitHeader, Wrapped};
pub use control::{BackendSpec, NextHop, Service};
pub use loader::{
    chain_slot, decap_stats_pinned, purge, Balancer, Decap, Encap, LbSettings,
    DEFAULT_DECAP_PIN_DIR,
};
pub use maps::{addr_key, vip_key, LbMaps, Proto, DEFAULT_LB_PIN_DIR};
