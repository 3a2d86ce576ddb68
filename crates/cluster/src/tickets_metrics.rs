//! What `/metrics` shows of the shared ticket keys ([`crate::tickets`]).

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering::Relaxed};
use std::time::{SystemTime, UNIX_EPOCH};

use ringx_tls::ticket_keys::TicketCounters;

/// Where the key that seals comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Source {
    /// None yet (the first refresh has not ended): no ticket is issued.
    None = 0,
    Cluster = 1,
    Local = 2,
}

/// The source as the counters hold it.
fn source_of(v: u8) -> Source {
    match v {
        1 => Source::Cluster,
        2 => Source::Local,
        _ => Source::None,
    }
}

/// The ticket thread's counters.
#[derive(Debug, Default)]
pub struct SyncCounters {
    /// Reads of the keys from Redis that were answered, and that failed.
    pub refresh_ok: AtomicU64,
    pub refresh_errors: AtomicU64,
    /// Keys this host made: current for every host (in Redis), or its own (Redis away).
    pub rotations_cluster: AtomicU64,
    pub rotations_local: AtomicU64,
    /// Where the key that seals comes from ([`Source`] as a number).
    pub source: AtomicU8,
    /// When the key that seals was made, by this host's clock (ms since the epoch).
    pub key_created_ms: AtomicU64,
}

impl SyncCounters {
    pub fn source(&self) -> Source {
        source_of(self.source.load(Relaxed))
    }

    /// Prometheus text, with the tickets sealed and opened.
    pub fn render(&self, t: &TicketCounters) -> String {
        let mut s = String::new();
        let src = self.source();
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let age = match src {
            Source::None => 0.0,
            _ => now.saturating_sub(self.key_created_ms.load(Relaxed)) as f64 / 1000.0,
        };
        let _ = write!(
            s,
            "# HELP ringx_tls_ticket_keys_refresh_total Reads of the shared TLS ticket keys \
             from Redis, by result.\n\
             # TYPE ringx_tls_ticket_keys_refresh_total counter\n\
             ringx_tls_ticket_keys_refresh_total{{result=\"ok\"}} {}\n\
             ringx_tls_ticket_keys_refresh_total{{result=\"error\"}} {}\n\
             # HELP ringx_tls_ticket_key_source Where the TLS ticket key that seals comes from: \
             cluster (Redis, shared by every host) or local (this host's own: Redis away).\n\
             # TYPE ringx_tls_ticket_key_source gauge\n\
             ringx_tls_ticket_key_source{{source=\"cluster\"}} {}\n\
             ringx_tls_ticket_key_source{{source=\"local\"}} {}\n\
             # HELP ringx_tls_ticket_key_rotations_total TLS ticket keys this host made, for \
             every host (cluster) or for itself (local).\n\
             # TYPE ringx_tls_ticket_key_rotations_total counter\n\
             ringx_tls_ticket_key_rotations_total{{source=\"cluster\"}} {}\n\
             ringx_tls_ticket_key_rotations_total{{source=\"local\"}} {}\n\
             # HELP ringx_tls_ticket_key_age_seconds How old the TLS ticket key that seals is.\n\
             # TYPE ringx_tls_ticket_key_age_seconds gauge\n\
             ringx_tls_ticket_key_age_seconds {age:.3}\n\
             # HELP ringx_tls_tickets_total TLS session tickets under the shared keys: issued, \
             not issued (no key yet), presented and opened, presented under a key this host \
             does not know, presented and refused (altered or malformed).\n\
             # TYPE ringx_tls_tickets_total counter\n\
             ringx_tls_tickets_total{{result=\"issued\"}} {}\n\
             ringx_tls_tickets_total{{result=\"no_key\"}} {}\n\
             ringx_tls_tickets_total{{result=\"opened\"}} {}\n\
             ringx_tls_tickets_total{{result=\"unknown_key\"}} {}\n\
             ringx_tls_tickets_total{{result=\"refused\"}} {}\n",
            self.refresh_ok.load(Relaxed),
            self.refresh_errors.load(Relaxed),
            u8::from(src == Source::Cluster),
            u8::from(src == Source::Local),
            self.rotations_cluster.load(Relaxed),
            self.rotations_local.load(Relaxed),
            t.issued.load(Relaxed),
            t.no_key.load(Relaxed),
            t.opened.load(Relaxed),
            t.unknown_key.load(Relaxed),
            t.refused.load(Relaxed),
        );
        s
    }
}
