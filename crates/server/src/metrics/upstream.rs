//! `/metrics` for upstream servers (health, what the status page set, requests in flight,
//! responses, failures, response times as a histogram) and for the certificates served.

use std::sync::atomic::Ordering;

use super::out::Out;
use crate::upstream::stats::BOUNDS;
use crate::upstream::Upstreams;

/// The upstream servers' families (`ups`: the upstreams in use).
pub(super) fn render(ups: Option<&Upstreams>, o: &mut Out) {
    let families: [(&str, &str, &str); 7] = [
        (
            "ringx_upstream_server_healthy",
            "gauge",
            "1 if the upstream server passes its health checks (always 1 without checks).",
        ),
        (
            "ringx_upstream_server_drained",
            "gauge",
            "1 if the server was drained on the status page (no new requests).",
        ),
        (
            "ringx_upstream_server_weight",
            "gauge",
            "The server's weight now (configured, or set on the status page).",
        ),
        (
            "ringx_upstream_server_active",
            "gauge",
            "Requests in flight to the server, all zones.",
        ),
        (
            "ringx_upstream_server_responses_total",
            "counter",
            "Response heads the server sent, all zones.",
        ),
        (
            "ringx_upstream_server_failures_total",
            "counter",
            "Connects that failed, connections reset or timed out, on the server.",
        ),
        (
            "ringx_upstream_server_response_seconds",
            "histogram",
            "Time from sending a request (connect included) to the server's response head.",
        ),
    ];
    let Some(u) = ups else {
        o.family(families[0].0, families[0].1, families[0].2);
        return;
    };
    let rows: Vec<_> = u
        .list
        .iter()
        .flat_map(|d| d.servers.iter().map(move |s| (d, s, s.stats.totals())))
        .collect();
    for (fi, (name, kind, help)) in families.iter().enumerate() {
        o.family(name, kind, help);
        for (d, s, t) in &rows {
            let addr = s.addr.to_string();
            let labels = [
                ("upstream", d.name.as_str()),
                ("server", s.name.as_str()),
                ("addr", addr.as_str()),
            ];
            let set = s.stats.weight.load(Ordering::Relaxed);
            match fi {
                0 => o.sample(name, &labels, u64::from(s.healthy.load(Ordering::Relaxed))),
                1 => o.sample(
                    name,
                    &labels,
                    u64::from(s.stats.drained.load(Ordering::Relaxed)),
                ),
                2 => o.sample(name, &labels, if set == 0 { s.weight } else { set }),
                3 => o.sample(name, &labels, t.active),
                4 => o.sample(name, &labels, t.responses),
                5 => o.sample(name, &labels, t.failures),
                _ => histogram(o, name, &labels, t),
            }
        }
    }
}

fn histogram(o: &mut Out, name: &str, labels: &[(&str, &str)], t: &crate::upstream::stats::Totals) {
    let bucket = format!("{name}_bucket");
    let mut cum = 0;
    for (i, c) in t.buckets.iter().enumerate() {
        cum += c;
        let le = BOUNDS.get(i).map_or("+Inf".to_string(), |b| b.to_string());
        let mut l = labels.to_vec();
        l.push(("le", &le));
        o.sample(&bucket, &l, cum);
    }
    o.sample(
        &format!("{name}_sum"),
        labels,
        format!("{:.6}", t.sum_seconds),
    );
    o.sample(&format!("{name}_count"), labels, cum);
}
