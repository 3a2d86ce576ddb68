//! `/metrics` for access control, limits and escalation (`crate::guard`): the L7 side (per
//! zone verdicts) and the hand-over to XDP (escalations, blocks in force); the XDP side's
//! drops of blocked sources are `ringx_xdp_packets_total{reason="drop_block"}`.

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
    }
}
