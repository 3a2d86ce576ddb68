//! The client's counters, rendered for `/metrics` (Prometheus text).

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

use crate::error::Error;

const KINDS: [&str; 5] = ["down", "timeout", "busy", "reply", "io"];

/// What `/metrics` shows of the cluster client.
#[derive(Debug, Default)]
pub struct Counters {
    /// Connected to the master now.
    pub up: AtomicBool,
    /// Commands asked for by callers (health checks not counted).
    pub commands: AtomicU64,
    errors: [AtomicU64; 5],
    /// Connections to a master made, and attempts that found none.
    pub connects: AtomicU64,
    pub connect_failures: AtomicU64,
    /// Connections made after one was lost.
    pub reconnects: AtomicU64,
    /// Times the master was found at another address than before (a failover).
    pub failovers: AtomicU64,
    /// The master's address, once known.
    pub master: Mutex<String>,
    /// Purges and drains sent to every host ([`crate::subscriber`], [`crate::broadcast`]).
    pub events: EventCounters,
}

/// What `/metrics` shows of the messages between hosts.
#[derive(Debug, Default)]
pub struct EventCounters {
    /// Subscribed to the channel now, and subscriptions made (the first and each after a
    /// lost connection).
    pub subscribed: AtomicBool,
    pub subscribes: AtomicU64,
    /// Messages this host published, received (its own included), and received that were
    /// not events.
    pub published: AtomicU64,
    pub received: AtomicU64,
    pub invalid: AtomicU64,
    /// Received events refused under `[cluster] events_secret`: without its MAC, sent over
    /// 5 minutes away from this host's clock, or taken already (replays).
    pub unauthenticated: AtomicU64,
    /// This host's confirmations of what it applied, written or not (Redis failed).
    pub confirms_sent: AtomicU64,
    pub confirms_failed: AtomicU64,
    /// Of the messages this host published: hosts that confirmed, and hosts known alive
    /// that did not within `confirm_timeout`; publishing that failed (Redis unavailable).
    pub confirmed: AtomicU64,
    pub unconfirmed: AtomicU64,
    /// Hosts seen within the hour, not alive, that did not confirm.
    pub unreachable: AtomicU64,
    pub publish_failed: AtomicU64,
    /// Heartbeats that found another process heartbeating under this host id.
    pub host_id_conflicts: AtomicU64,
}

impl EventCounters {
    /// Prometheus text.
    pub fn render(&self, s: &mut String) {
        let _ = write!(
            s,
            "# HELP ringx_cluster_redis_subscribed Whether this host is subscribed to the \
             channel of purges and drains.\n\
             # TYPE ringx_cluster_redis_subscribed gauge\n\
             ringx_cluster_redis_subscribed {}\n\
             # HELP ringx_cluster_redis_subscribes_total Subscriptions to the channel made (the \
             first and each after a lost connection).\n\
             # TYPE ringx_cluster_redis_subscribes_total counter\n\
             ringx_cluster_redis_subscribes_total {}\n\
             # HELP ringx_cluster_redis_messages_total Purges and drains: published by this \
             host, received (its own included), received that were not ringx events, refused \
             (no valid MAC under events_secret, or a replay), not published (Redis \
             unavailable).\n\
             # TYPE ringx_cluster_redis_messages_total counter\n\
             ringx_cluster_redis_messages_total{{kind=\"published\"}} {}\n\
             ringx_cluster_redis_messages_total{{kind=\"received\"}} {}\n\
             ringx_cluster_redis_messages_total{{kind=\"invalid\"}} {}\n\
             ringx_cluster_redis_messages_total{{kind=\"unauthenticated\"}} {}\n\
             ringx_cluster_redis_messages_total{{kind=\"publish_failed\"}} {}\n\
             # HELP ringx_cluster_redis_confirmations_sent_total This host's confirmations of \
             the messages it applied, by result.\n\
             # TYPE ringx_cluster_redis_confirmations_sent_total counter\n\
             ringx_cluster_redis_confirmations_sent_total{{result=\"ok\"}} {}\n\
             ringx_cluster_redis_confirmations_sent_total{{result=\"error\"}} {}\n\
             # HELP ringx_cluster_redis_confirmations_total Hosts that confirmed the messages \
             this host published, hosts known alive that did not in time, and hosts seen \
             within the hour but not alive that did not.\n\
             # TYPE ringx_cluster_redis_confirmations_total counter\n\
             ringx_cluster_redis_confirmations_total{{result=\"confirmed\"}} {}\n\
             ringx_cluster_redis_confirmations_total{{result=\"missing\"}} {}\n\
             ringx_cluster_redis_confirmations_total{{result=\"unreachable\"}} {}\n\
             # HELP ringx_cluster_redis_host_id_conflicts_total Heartbeats of this host that \
             found another process heartbeating under its host id.\n\
             # TYPE ringx_cluster_redis_host_id_conflicts_total counter\n\
             ringx_cluster_redis_host_id_conflicts_total {}\n",
            u8::from(self.subscribed.load(Relaxed)),
            self.subscribes.load(Relaxed),
            self.published.load(Relaxed),
            self.received.load(Relaxed),
            self.invalid.load(Relaxed),
            self.unauthenticated.load(Relaxed),
            self.publish_failed.load(Relaxed),
            self.confirms_sent.load(Relaxed),
            self.confirms_failed.load(Relaxed),
            self.confirmed.load(Relaxed),
            self.unconfirmed.load(Relaxed),
            self.unreachable.load(Relaxed),
            self.host_id_conflicts.load(Relaxed),
        );
    }
}

impl Counters {
    pub fn error(&self, e: &Error) {
        let i = KINDS.iter().position(|k| *k == e.kind()).unwrap_or(0);
        self.errors[i].fetch_add(1, Relaxed);
    }

    /// Callers' commands that got `kind` ("down", "timeout", "busy", "reply", "io").
    pub fn errors(&self, kind: &str) -> u64 {
        KINDS
            .iter()
            .position(|k| *k == kind)
            .map_or(0, |i| self.errors[i].load(Relaxed))
    }

    /// Prometheus text.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let master = self
            .master
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let _ = write!(
            s,
            "# HELP ringx_cluster_redis_up Whether this host is connected to the Redis master.\n\
             # TYPE ringx_cluster_redis_up gauge\n\
             ringx_cluster_redis_up{{master=\"{}\"}} {}\n\
             # HELP ringx_cluster_redis_commands_total Redis commands asked for by ringx.\n\
             # TYPE ringx_cluster_redis_commands_total counter\n\
             ringx_cluster_redis_commands_total {}\n\
             # HELP ringx_cluster_redis_errors_total Commands that got no reply, by why: down \
             (no connection), timeout (past the budget), busy (queue full), reply (refused by \
             Redis), io (the connection failed under it).\n\
             # TYPE ringx_cluster_redis_errors_total counter\n",
            master.replace(['"', '\\', '\n'], "_"),
            u8::from(self.up.load(Relaxed)),
            self.commands.load(Relaxed),
        );
        for (i, k) in KINDS.iter().enumerate() {
            let _ = writeln!(
                s,
                "ringx_cluster_redis_errors_total{{kind=\"{k}\"}} {}",
                self.errors[i].load(Relaxed)
            );
        }
        let _ = write!(
            s,
            "# HELP ringx_cluster_redis_connects_total Connections to the Redis master, by \
             result.\n\
             # TYPE ringx_cluster_redis_connects_total counter\n\
             ringx_cluster_redis_connects_total{{result=\"ok\"}} {}\n\
             ringx_cluster_redis_connects_total{{result=\"error\"}} {}\n\
             # HELP ringx_cluster_redis_reconnects_total Connections made after one was lost.\n\
             # TYPE ringx_cluster_redis_reconnects_total counter\n\
             ringx_cluster_redis_reconnects_total {}\n\
             # HELP ringx_cluster_redis_failovers_total Times the master moved to another \
             address.\n\
             # TYPE ringx_cluster_redis_failovers_total counter\n\
             ringx_cluster_redis_failovers_total {}\n",
            self.connects.load(Relaxed),
            self.connect_failures.load(Relaxed),
            self.reconnects.load(Relaxed),
            self.failovers.load(Relaxed),
        );
        self.events.render(&mut s);
        s
    }
}
