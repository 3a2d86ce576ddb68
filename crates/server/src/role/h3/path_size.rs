//! What a connection's search for its path's datagram size tells the zone's known paths
//! (`ringx_quic::known_paths`), and what its end does.
//!
//! Only the address the connection was accepted from is learned for: after a migration the
//! connection's size is another path's (quinn-proto keeps the size only for the same IPv4
//! address), and the new address is not the one whose handshake the size was found on.
//! A known address is forgotten when a connection that started at its known size has a
//! packet declared lost before its handshake completes, or times out without completing it:
//! the flight at that size may be what was lost. quinn-proto sends its loss probes no larger
//! than QUIC's minimum, so such a handshake crawls to its end through them (a probe timeout
//! each, the first about a second before any round trip is measured, then doubling) without
//! its black-hole detection ever firing: left known, every connection from that address for
//! ten minutes would pay that. A loss on a good path in the first round trip (real loss,
//! or reordering by three packets) forgets it too: the next connection searches again. After
//! the handshake, black-hole detection (large packets lost) forgets it.

use std::net::IpAddr;
use std::time::Instant;

use quinn_proto::PathStats;
use ringx_quic::known_paths::STEPS;
use ringx_quic::KnownPaths;

use crate::metrics::bump;
use crate::metrics::quic::QuicCounters;

/// One connection's view of its path's size.
pub(super) struct PathWatch {
    /// The client's address when the connection was accepted.
    origin: IpAddr,
    /// It started at a size known for `origin`, which a loss before the handshake completes
    /// forgets (once).
    known_start: bool,
    /// The datagram size when last looked at.
    size: u16,
    /// quinn-proto's count of black holes on the path when last looked at.
    black_holes: u64,
    /// The handshake had completed when last looked at.
    confirmed: bool,
    /// The connection ended at its idle timeout (quinn-proto's `TimedOut`).
    pub(super) timed_out: bool,
}

impl PathWatch {
    /// A connection accepted from `origin` at `size` bytes, `known_start` if that size was
    /// known for it.
    pub fn new(origin: IpAddr, size: u16, known_start: bool) -> PathWatch {
        PathWatch {
            origin,
            known_start,
            size,
            black_holes: 0,
            confirmed: false,
            timed_out: false,
        }
    }

    /// The connection's path as quinn-proto has it now (`p`, to `remote`; `handshaking`
    /// whether its handshake has yet to complete, a connection closed in it included): a
    /// larger size acknowledged is recorded for the origin, a black hole forgets it, and so
    /// does a loss before the handshake completed at a known start; counted in `q`.
    pub fn note(
        &mut self,
        (remote, handshaking): (IpAddr, bool),
        p: &PathStats,
        paths: &mut KnownPaths,
        q: &QuicCounters,
        now: Instant,
    ) {
        // Looked at before `confirmed` moves: a loss declared in the run that completed the
        // handshake still counts.
        if self.known_start && !self.confirmed && p.lost_packets > 0 {
            self.known_start = false;
            paths.forget(self.origin);
            bump(&q.paths_forgotten, 1);
        }
        self.confirmed |= !handshaking;
        let (size, holes) = (p.current_mtu, p.black_holes_detected);
        if size == self.size && holes == self.black_holes {
            return;
        }
        if remote == self.origin {
            if holes > self.black_holes {
                paths.forget(self.origin);
                bump(&q.paths_forgotten, 1);
            } else if size > self.size && size >= STEPS[0] {
                paths.learned(self.origin, size, now);
                bump(&q.paths_learned, 1);
            }
        }
        // Compared with what was last seen, wherever the connection now is.
        self.size = size;
        self.black_holes = holes;
    }

    /// The connection is over: one that started at a known size and timed out before its
    /// handshake completed forgets its origin. One its client closed, or that TLS refused,
    /// says nothing of the path (and a spoofed Initial must not wipe an entry).
    pub fn ended(&self, paths: &mut KnownPaths, q: &QuicCounters) {
        if self.known_start && !self.confirmed && self.timed_out {
            paths.forget(self.origin);
            bump(&q.paths_forgotten, 1);
        }
    }
}
