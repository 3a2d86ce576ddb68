//! Connection locality for ringx: make the packets of every connection arrive on the core
//! whose zone owns it. Everything about steering lives here; ringx only passes its
//! configuration in.
//!
//! Passive connections (clients connecting to ringx) are steered by per-zone `SO_REUSEPORT`
//! listeners: [`reuseport`] hands each new connection to the listener of the zone on the CPU
//! that processed its SYN (an eBPF reuseport program, else `SO_INCOMING_CPU`).
//!
//! Active (upstream) connections need more: the NIC chooses the receive queue of the replies
//! from a hash of the inbound 4-tuple, and the only free variable is our source port. This
//! crate
//!
//! 1. computes that hash exactly as RSS NICs do ([`toeplitz`], checked against Microsoft's
//!    published verification suite);
//! 2. models the NIC's indirection table and the queue → zone map, or, where the NIC has no
//!    RSS, Fastsocket's software steering by local port ([`steering`]), which the XDP program
//!    of [`xdp`] enforces;
//! 3. precomputes, per zone, the source ports whose replies come home, and hands them out in
//!    O(1) with a TIME_WAIT quarantine and a dynamic fallback, like F-Stack's
//!    `ff_rss_check_tbl` ([`ports`]);
//! 4. reads what the NIC really does: key, hash function, indirection table, queues and IRQ
//!    affinity ([`nic`]);
//! 5. decides at start which of these applies and builds every zone's table ([`active`]).
//!
//! BPF goes through `ringx-xdp`: the C programs load through aya, and what aya cannot do
//! (the reuseport program, test runs) through `ringx_xdp::sys`, the workspace's one raw
//! `bpf(2)` layer. The engine knows nothing of steering; it only reports where a connection's
//! packets were processed (`ringx_engine::locality`).
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Instant;
//! use ringx_steer::ports::{Dest, PortTableBuilder, PortTableConfig};
//! use ringx_steer::steering::{FlowSteering, Reta, ZoneMap};
//! use ringx_steer::toeplitz::DEFAULT_KEY;
//!
//! // A NIC with 2 queues, the default key and the kernel's default table; zone i on queue i.
//! let steering = Arc::new(FlowSteering::rss(
//!     &DEFAULT_KEY,
//!     Reta::round_robin(128, 2).unwrap(),
//!     ZoneMap::identity(2),
//!     true,
//! ));
//! let upstream: Dest = "10.0.0.1 10.0.0.2 8080".parse().unwrap();
//! let mut zone1 = PortTableBuilder::new(steering.clone(), PortTableConfig::default())
//!     .dest(upstream)
//!     .build(1)
//!     .unwrap();
//! let now = Instant::now();
//! let port = zone1.take(&upstream, now).expect("a port");
//! let local = std::net::SocketAddr::new(upstream.local, port);
//! assert_eq!(steering.zone_of_inbound(upstream.remote, local), Some(1));
//! zone1.release(&upstream, port, now).unwrap();
//! assert_eq!(zone1.counters.hash_evals, 0);
//! ```

pub mod active;
pub mod nic;
pub mod ports;
pub mod quic;
pub mod reuseport;
mod reuseport_prog;
pub mod steering;
pub mod toeplitz;
pub mod xdp;
