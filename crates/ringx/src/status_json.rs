//! `/status.json`: the status page's numbers for scripts (the same [`Snapshot`] the HTML
//! shows), written by hand: a handful of objects, no serializer needed.

use std::fmt::Write as _;

use crate::status::Snapshot;

/// A JSON string literal.
pub fn string(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '\n' => o.push_str("\\n"),
            '\r' => o.push_str("\\r"),
            '\t' => o.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(o, "\\u{:04x}", c as u32);
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

/// A number, or null when unknown or not finite.
fn num(v: Option<f64>) -> String {
    match v {
        Some(x) if x.is_finite() => format!("{}", (x * 1000.0).round() / 1000.0),
        _ => "null".into(),
    }
}

fn map(m: &std::collections::BTreeMap<String, u64>) -> String {
    let items: Vec<String> = m
        .iter()
        .map(|(k, v)| format!("{}:{v}", string(k)))
        .collect();
    format!("{{{}}}", items.join(","))
}

/// The whole snapshot as one JSON object.
pub fn render(s: &Snapshot) -> String {
    let zones: Vec<String> = s
        .zones
        .iter()
        .map(|z| {
            format!(
                "{{\"id\":{},\"connections\":{},\"requests\":{},\"requests_per_second\":{},\
                 \"busy_percent\":{},\"parked\":{},\"cpu_percent\":{},\"cpu\":{}}}",
                z.id,
                z.connections,
                z.requests,
                num(Some(z.rps)),
                num(Some(z.busy)),
                z.parked,
                num(z.cpu_pct),
                z.on_cpu.map_or("null".into(), |c| c.to_string())
            )
        })
        .collect();
    let servers: Vec<String> = s
        .servers
        .iter()
        .map(|r| {
            format!(
                "{{\"upstream\":{},\"server\":{},\"addr\":{},\"healthy\":{},\"drained\":{},\
                 \"weight\":{},\"active\":{},\"responses\":{},\"failures\":{},\
                 \"latency_ms\":{{\"p50\":{},\"p90\":{},\"p99\":{}}}}}",
                string(&r.upstream),
                string(&r.server),
                string(&r.addr),
                r.healthy,
                r.drained,
                r.weight,
                r.active,
                r.responses,
                r.failures,
                num(r.p50),
                num(r.p90),
                num(r.p99)
            )
        })
        .collect();
    let listeners: Vec<String> = s
        .listeners
        .iter()
        .map(|(a, p)| format!("{{\"addr\":{},\"proto\":{}}}", string(a), string(p)))
        .collect();
    let certs: Vec<String> = s
        .certs
        .iter()
        .map(|(f, subj, days)| {
            format!(
                "{{\"file\":{},\"subject\":{},\"days_left\":{}}}",
                string(f),
                string(subj),
                num(Some(*days))
            )
        })
        .collect();
    format!(
        "{{\"version\":{},\"engine\":{},\"uptime_seconds\":{},\"generation\":{},\
         \"reloads\":{{\"ok\":{},\"error\":{}}},\"requests\":{},\"connections\":{},\
         \"requests_per_second\":{},\"responses\":{},\"zones\":[{}],\"servers\":[{}],\
         \"listeners\":[{}],\"certificates\":[{}],\"xdp_drops\":{},\"cache\":{},\
         \"cache_hit_ratio\":{}}}\n",
        string(&s.version),
        string(&s.engine),
        num(Some(s.uptime)),
        s.generation,
        s.reloads_ok,
        s.reloads_failed,
        s.requests(),
        s.connections(),
        num(Some(s.rps())),
        map(&s.responses),
        zones.join(","),
        servers.join(","),
        listeners.join(","),
        certs.join(","),
        s.xdp_drops.as_ref().map_or("null".into(), map),
        s.cache.as_ref().map_or("null".into(), map),
        num(s.cache_hit_ratio())
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn strings_are_escaped() {
        assert_eq!(super::string("a\"b\\c\n\u{1}"), "\"a\\\"b\\\\c\\n\\u0001\"");
    }
}
