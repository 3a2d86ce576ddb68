//! `/metrics` for access control, limits and escalation (`crate::guard`): the L7 side (per
//! zone verdicts) and the hand-over to XDP (escalations, blocks in force); the XDP side's
//! drops of blocked sources are `ringx_xdp_packets_total{verdict="drop",reason="drop_block"}`.

use std::sync::atomic::{AtomicU64, Ordering};

use super::{Metrics, Out, ZoneCounters};

impl Metrics {
    pub(super) fn render_guard(&self, o: &mut Out) {
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let col = |f: &dyn Fn(&ZoneCounters) -> &AtomicU64| {
            self.zones.iter().map(|z| r(f(z))).collect::<Vec<_>>()
        };
        o.family(
            "ringx_limit_req_total",
            "counter",
            "limit_req verdicts: passed at once, delayed within the burst, refused.",
        );
        for (result, vals) in [
            ("passed", col(&|z| &z.limit_req_passed)),
            ("delayed", col(&|z| &z.limit_req_delayed)),
            ("refused", col(&|z| &z.limit_req_refused)),
        ] {
            for (z, v) in vals.iter().enumerate() {
                o.sample(
                    "ringx_limit_req_total",
                    &[("zone", &z.to_string()), ("result", result)],
                    v,
                );
            }
        }
        o.per_zone(
            "ringx_limit_conn_refused_total",
            "counter",
            "Requests refused by limit_conn.",
            &col(&|z| &z.limit_conn_refused),
        );
        o.per_zone(
            "ringx_access_denied_total",
            "counter",
            "Requests denied by access rules (403).",
            &col(&|z| &z.access_denied),
        );
        o.per_zone(
            "ringx_auth_denied_total",
            "counter",
            "Requests refused by auth_basic or auth_request (401, 403).",
            &col(&|z| &z.auth_denied),
        );
        o.family(
            "ringx_auth_verifications_total",
            "counter",
            "auth_basic passwords verified on the zone thread (fast hashes, or no auth pool), \
             handed to the auth pool's threads (slow hashes), or refused with 503 because every \
             queue of the pool was full.",
        );
        for (place, vals) in [
            ("zone", col(&|z| &z.auth_inline)),
            ("pool", col(&|z| &z.auth_pool)),
            ("busy", col(&|z| &z.auth_busy)),
        ] {
            for (z, v) in vals.iter().enumerate() {
                o.sample(
                    "ringx_auth_verifications_total",
                    &[("zone", &z.to_string()), ("where", place)],
                    v,
                );
            }
        }
        let s = crate::guard::escalate::stats();
        o.family(
            "ringx_escalations_total",
            "counter",
            "Clients escalated to the XDP block list: requested by the zones, dropped (no \
             escalation thread or its queue full), blocked, expired (unblocked), failed updates.",
        );
        for (result, a) in [
            ("requested", &s.requested),
            ("dropped", &s.dropped),
            ("blocked", &s.blocked),
            ("expired", &s.expired),
            ("error", &s.errors),
        ] {
            o.sample("ringx_escalations_total", &[("result", result)], r(a));
        }
        o.family(
            "ringx_escalated_clients",
            "gauge",
            "Client addresses blocked in XDP by escalation now.",
        );
        o.sample("ringx_escalated_clients", &[], r(&s.active));
        self.render_cache(o);
    }

    /// The proxy caches: answers by status per zone, each cache's entries and bytes per
    /// tier, stores, evictions, purges and disk errors.
    fn render_cache(&self, o: &mut Out) {
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let caches = crate::cache::CacheZone::all();
        if caches.is_empty() {
            return;
        }
        o.family(
            "ringx_cache_requests_total",
            "counter",
            "Requests to cached locations by cache status (nginx's $upstream_cache_status).",
        );
        for (i, st) in crate::cache::loc::STATUSES.iter().enumerate() {
            for (z, zc) in self.zones.iter().enumerate() {
                o.sample(
                    "ringx_cache_requests_total",
                    &[("zone", &z.to_string()), ("status", st)],
                    r(&zc.cache[i]),
                );
            }
        }
        o.family(
            "ringx_cache_entries",
            "gauge",
            "Entries in each tier of each cache.",
        );
        let usage: Vec<_> = caches
            .iter()
            .map(|c| (c.name.as_str(), c.usage()))
            .collect();
        for (name, ((me, _), (de, _))) in &usage {
            o.sample(
                "ringx_cache_entries",
                &[("cache", name), ("tier", "memory")],
                me,
            );
            o.sample(
                "ringx_cache_entries",
                &[("cache", name), ("tier", "disk")],
                de,
            );
        }
        o.family(
            "ringx_cache_bytes",
            "gauge",
            "Bytes held by each tier of each cache.",
        );
        for (name, ((_, mb), (_, db))) in &usage {
            o.sample(
                "ringx_cache_bytes",
                &[("cache", name), ("tier", "memory")],
                mb,
            );
            o.sample(
                "ringx_cache_bytes",
                &[("cache", name), ("tier", "disk")],
                db,
            );
        }
        o.family(
            "ringx_cache_events_total",
            "counter",
            "Cache events: responses stored, entries evicted from memory and from disk (least \
             recently used, or inactive), purged, disk errors.",
        );
        for c in &caches {
            let s = &c.stats;
            for (ev, a) in [
                ("stored", &s.stored),
                ("memory_evicted", &s.mem_evicted),
                ("disk_evicted", &s.disk_evicted),
                ("purged", &s.purged),
                ("disk_error", &s.disk_errors),
            ] {
                o.sample(
                    "ringx_cache_events_total",
                    &[("cache", &c.name), ("event", ev)],
                    r(a),
                );
            }
        }
    }
}
