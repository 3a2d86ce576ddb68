//! `/metrics` for HTTP/3 over QUIC (`crate::role::h3`): per zone, the connections open and
//! what became of new ones (accepted, sent a Retry, refused at `quic_max_connections`), the
//! connections closed, the requests served, the datagrams in and out and the receives and
//! sends that carried them, the packets sent and declared lost and the congestion events,
//! the handshakes completed (full or resumed), and what became of 0-RTT
//! (`quic_early_data`: connections that had it accepted or refused, the requests in it
//! served or answered 425 Too Early), and the known paths (client addresses whose path
//! carried larger datagrams: learned, used by new connections, forgotten). Per zone
//! because a connection must stay on the zone that owns it (its connection IDs name that
//! zone): a migrated client whose packets reached another zone would show there.

use std::sync::atomic::{AtomicU64, Ordering};

use ringx_h3proto::ErrorCode;

use super::out::Out;

/// Why a QUIC connection closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Closed {
    /// The client closed it (CONNECTION_CLOSE), with or without an error.
    Client,
    /// No packet came for `quic_idle_timeout`.
    IdleTimeout,
    /// The client sent a stateless reset.
    Reset,
    /// The client broke QUIC's rules, and quinn-proto closed it with a transport error: more
    /// streams than it was allowed (a stream bomb), more data than a window, a malformed
    /// frame.
    ProtocolError,
    /// ringx closed it with an HTTP/3 or QPACK error (counted by code in `h3_errors`).
    Http3Error,
    /// ringx closed it once the requests it had were answered, after GOAWAY (shutdown,
    /// binary upgrade, a reload that removed its address).
    Drained,
    /// Anything else (a version mismatch, connection IDs exhausted).
    Other,
}

impl Closed {
    pub const ALL: [Closed; 7] = [
        Closed::Client,
        Closed::IdleTimeout,
        Closed::Reset,
        Closed::ProtocolError,
        Closed::Http3Error,
        Closed::Drained,
        Closed::Other,
    ];

    /// Its place in [`Closed::ALL`] (`QuicCounters::closed_by`).
    pub fn index(self) -> usize {
        Closed::ALL.iter().position(|&c| c == self).unwrap_or(0)
    }

    /// Its `reason` label on /metrics.
    pub fn label(self) -> &'static str {
        match self {
            Closed::Client => "client",
            Closed::IdleTimeout => "idle_timeout",
            Closed::Reset => "reset",
            Closed::ProtocolError => "protocol_error",
            Closed::Http3Error => "http3_error",
            Closed::Drained => "drained",
            Closed::Other => "other",
        }
    }
}

/// One zone's QUIC counters (written by the zone only).
#[derive(Default)]
pub struct QuicCounters {
    /// Connections open now (a gauge the zone sets).
    pub connections: AtomicU64,
    /// New connections by what became of them.
    pub accepted: AtomicU64,
    pub retried: AtomicU64,
    pub refused: AtomicU64,
    /// Connections closed (drained), by why ([`Closed`]).
    pub closed_by: [AtomicU64; Closed::ALL.len()],
    /// Connections ringx closed with an HTTP/3 or QPACK error, by its code (in the order of
    /// `ringx_h3proto::ErrorCode::ALL`): the header, QPACK and frame limits.
    pub h3_errors: [AtomicU64; ErrorCode::ALL.len()],
    /// Stateless resets sent: answers to a packet for a connection no zone holds (it ended,
    /// or its state was lost), which tell the client to stop.
    pub resets_sent: AtomicU64,
    /// Requests (request streams) served.
    pub requests: AtomicU64,
    /// Datagrams received on the zone's QUIC sockets, and sent.
    pub datagrams_in: AtomicU64,
    pub datagrams_out: AtomicU64,
    /// Their UDP payload bytes, received and sent.
    pub bytes_in: AtomicU64,
    pub bytes_out: AtomicU64,
    /// Receives and sends that carried them: fewer than the datagrams where the kernel
    /// coalesced received ones (GRO) or cut a send into several (GSO).
    pub receives: AtomicU64,
    pub sends: AtomicU64,
    /// QUIC packets sent (close packets left out), and those declared lost (acknowledgements
    /// of later packets came, or too long passed: what of them must be resent is queued
    /// again), with their bytes; congestion events (losses of ack-eliciting packets and new
    /// ECN congestion marks reported to a connection's congestion controller, which cuts its
    /// window at most once per recovery period).
    pub packets_sent: AtomicU64,
    pub packets_lost: AtomicU64,
    pub lost_bytes: AtomicU64,
    pub congestion_events: AtomicU64,
    /// Handshakes completed: all, and those that resumed a session.
    pub completed: AtomicU64,
    pub resumed: AtomicU64,
    /// Connections whose 0-RTT was accepted (`quic_early_data`: a ticket's first use), and
    /// whose client offered it to be refused (0-RTT off, a ticket used before or unknown).
    pub early_accepted: AtomicU64,
    pub early_refused: AtomicU64,
    /// Requests served from 0-RTT (safe methods, with `Early-Data: 1`), and answered 425
    /// Too Early (any other method).
    pub early_requests: AtomicU64,
    pub too_early: AtomicU64,
    /// Known paths (`ringx_quic::known_paths`): larger datagram sizes connections had
    /// acknowledged (recorded for their client's address), new connections that started at
    /// a size recorded for their address, and addresses forgotten (a connection that
    /// started at its size lost a packet before its handshake completed, or timed out
    /// before it; a black hole on a connection from it).
    pub paths_learned: AtomicU64,
    pub paths_used: AtomicU64,
    pub paths_forgotten: AtomicU64,
}

impl QuicCounters {
    /// Connections closed, for whatever reason.
    pub fn closed_total(&self) -> u64 {
        self.closed_by
            .iter()
            .map(|a| a.load(Ordering::Relaxed))
            .sum()
    }
}

/// Renders the QUIC families of the zones' counters `zc` (in zone order).
pub(super) fn render(zc: &[&QuicCounters], o: &mut Out) {
    let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let col =
        |f: &dyn Fn(&QuicCounters) -> &AtomicU64| zc.iter().map(|z| r(f(z))).collect::<Vec<_>>();
    o.per_zone(
        "ringx_quic_connections",
        "gauge",
        "HTTP/3 (QUIC) connections open, per zone.",
        &col(&|q| &q.connections),
    );
    o.per_zone_by(
        (
            "ringx_quic_handshakes_total",
            "counter",
            "New QUIC connections: accepted, answered with a Retry (address validation), \
             refused (the zone holds quic_max_connections).",
        ),
        "result",
        &[
            ("accepted", col(&|q| &q.accepted)),
            ("retry", col(&|q| &q.retried)),
            ("refused", col(&|q| &q.refused)),
        ],
    );
    o.per_zone_by(
        (
            "ringx_quic_tls_handshakes_total",
            "counter",
            "QUIC handshakes completed, per zone: full, or resumed (a session ticket).",
        ),
        "result",
        &[
            (
                "full",
                zc.iter()
                    .map(|q| r(&q.completed).saturating_sub(r(&q.resumed)))
                    .collect(),
            ),
            ("resumed", col(&|q| &q.resumed)),
        ],
    );
    let by = |i: usize| zc.iter().map(|q| r(&q.closed_by[i])).collect::<Vec<_>>();
    o.per_zone_by(
        (
            "ringx_quic_closed_total",
            "counter",
            "QUIC connections closed, per zone, by why: the client closed it, idle_timeout, \
             the client's stateless reset, protocol_error (the client broke QUIC's rules: \
             more streams than allowed, data past a window), http3_error (ringx closed it \
             for an HTTP/3 or QPACK error: ringx_http3_errors_total), drained (after \
             GOAWAY), other.",
        ),
        "reason",
        &Closed::ALL
            .iter()
            .enumerate()
            .map(|(i, c)| (c.label(), by(i)))
            .collect::<Vec<_>>(),
    );
    o.family(
        "ringx_http3_errors_total",
        "counter",
        "HTTP/3 connections ringx closed for an HTTP/3 or QPACK error, by code, per zone \
         (H3_EXCESSIVE_LOAD: header sections and field lines past the limits; \
         QPACK_ENCODER_STREAM_ERROR and QPACK_DECOMPRESSION_FAILED: QPACK bombs).",
    );
    for (zi, q) in zc.iter().enumerate() {
        for (code, v) in ErrorCode::ALL.iter().zip(&q.h3_errors).skip(1) {
            o.sample(
                "ringx_http3_errors_total",
                &[("zone", &zi.to_string()), ("code", code.name())],
                r(v),
            );
        }
    }
    o.per_zone(
        "ringx_quic_stateless_resets_total",
        "counter",
        "Stateless resets sent, per zone: answers to a packet for a connection no zone \
         holds (it ended, or its state was lost), which tell the client to stop.",
        &col(&|q| &q.resets_sent),
    );
    o.per_zone(
        "ringx_http3_requests_total",
        "counter",
        "HTTP/3 requests, per zone.",
        &col(&|q| &q.requests),
    );
    o.per_zone_by(
        (
            "ringx_quic_datagrams_total",
            "counter",
            "QUIC datagrams received and sent, per zone.",
        ),
        "direction",
        &[
            ("in", col(&|q| &q.datagrams_in)),
            ("out", col(&|q| &q.datagrams_out)),
        ],
    );
    o.per_zone_by(
        (
            "ringx_quic_bytes_total",
            "counter",
            "UDP payload bytes of the QUIC datagrams received and sent, per zone.",
        ),
        "direction",
        &[
            ("in", col(&|q| &q.bytes_in)),
            ("out", col(&|q| &q.bytes_out)),
        ],
    );
    o.per_zone_by(
        (
            "ringx_quic_batches_total",
            "counter",
            "Receives and sends of QUIC datagrams, per zone: a receive the kernel coalesced \
             (GRO) or a segmented send (GSO) carries several datagrams.",
        ),
        "direction",
        &[("in", col(&|q| &q.receives)), ("out", col(&|q| &q.sends))],
    );
    o.per_zone(
        "ringx_quic_packets_sent_total",
        "counter",
        "QUIC packets sent, per zone (a datagram carries one or more; close packets \
         are left out).",
        &col(&|q| &q.packets_sent),
    );
    o.per_zone(
        "ringx_quic_packets_lost_total",
        "counter",
        "QUIC packets declared lost, per zone (acknowledgements of later packets came, \
         or too long passed): what of them must be resent is queued again.",
        &col(&|q| &q.packets_lost),
    );
    o.per_zone(
        "ringx_quic_lost_bytes_total",
        "counter",
        "Bytes of the QUIC packets declared lost, per zone.",
        &col(&|q| &q.lost_bytes),
    );
    o.per_zone(
        "ringx_quic_congestion_events_total",
        "counter",
        "Congestion events of QUIC connections, per zone: losses of ack-eliciting \
         packets and new ECN congestion marks reported to the congestion controller, which \
         cuts its window at most once per recovery period.",
        &col(&|q| &q.congestion_events),
    );
    o.per_zone_by(
        (
            "ringx_quic_early_data_total",
            "counter",
            "0-RTT (quic_early_data): connections that had it accepted, and whose client \
             offered it to be refused; requests in it served (safe methods, sent upstream \
             with Early-Data: 1), and requests in it answered 425 Too Early (other methods).",
        ),
        "result",
        &[
            ("accepted", col(&|q| &q.early_accepted)),
            ("refused", col(&|q| &q.early_refused)),
            ("served", col(&|q| &q.early_requests)),
            ("too_early", col(&|q| &q.too_early)),
        ],
    );
    o.per_zone_by(
        (
            "ringx_quic_known_paths_total",
            "counter",
            "Client addresses whose path carried datagrams over 1,200 bytes, per zone: \
             learned (a connection's path MTU search had a larger size acknowledged, recorded \
             for its address), used (a new connection from a recorded address started at \
             that size, probing only above it), forgotten (a connection that started at \
             its size lost a packet before its handshake completed, or timed out before it; \
             or a black hole was detected on a connection from it).",
        ),
        "event",
        &[
            ("learned", col(&|q| &q.paths_learned)),
            ("used", col(&|q| &q.paths_used)),
            ("forgotten", col(&|q| &q.paths_forgotten)),
        ],
    );
}
