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
        s
    }
}
