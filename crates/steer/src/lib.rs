//! Connection locality for ringx: make the packets of every connection arrive on the core
//! whose zone owns it.
//!
//! Passive connections are steered by per-zone `SO_REUSEPORT` listeners. Active (upstream)
//! connections need more: the NIC chooses the receive queue of the replies from a hash of the
//! inbound 4-tuple, and the only free variable is our source port. This crate
//!
//! 1. computes that hash exactly as RSS NICs do ([`toeplitz`], checked against Microsoft's
//!    published verification suite);
//! 2. models the NIC's indirection table and the queue → zone map, or, where the NIC has no
//!    RSS, Fastsocket's software steering by local port ([`steering`]);
//! 3. precomputes, per zone, the source ports whose replies come home, and hands them out in
//!    O(1) with a TIME_WAIT quarantine and a dynamic fallback, like F-Stack's
//!    `ff_rss_check_tbl` ([`ports`]);
//! 4. reads what the NIC really does: key, hash function, indirection table, queues and IRQ
//!    affinity ([`nic`]).
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

pub mod nic;
pub mod ports;
pub mod steering;
pub mod toeplitz;
