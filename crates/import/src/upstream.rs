//! `upstream` blocks (http and stream alike): ringx's `[[upstream]]`.

use ringx_nginxconf::Directive;

use crate::cx::Cx;
use crate::emit::{s, Table, V};
use crate::values;

pub fn upstream(cx: &mut Cx, d: &Directive, stream: bool) {
    let Some(name) = d.args().first().map(|n| n.to_string()) else {
        cx.report.refuse(d, "no name");
        return;
    };
    let mut t = Table::new("[[upstream]]", d.place());
    t.set("name", s(name.clone()));
    let mut servers = Vec::new();
    for c in d.children() {
        let a = c.args();
        match c.name.as_str() {
            "server" => {
                let Some(addr) = a.first() else {
                    cx.report.refuse(c, "no address");
                    continue;
                };
                let addr = match values::upstream_addr(addr, (!stream).then_some(80)) {
                    Ok(x) => x,
                    Err(e) => {
                        cx.report.refuse(c, e);
                        continue;
                    }
                };
                let mut e = vec![("addr".to_string(), s(addr))];
                let mut approx = Vec::new();
                let mut down = false;
                for p in &a[1..] {
                    let (k, v) = p.split_once('=').unwrap_or((p, ""));
                    match k {
                        "weight" | "max_fails" => match v.parse::<i64>() {
                            Ok(n) => e.push((k.to_string(), V::I(n))),
                            Err(_) => approx.push(format!("{p}: not a number, left out")),
                        },
                        "fail_timeout" => match values::duration(v) {
                            Some(t) => e.push(("fail_timeout".into(), s(t))),
                            None => approx.push(format!("{p}: not a time, left out")),
                        },
                        "backup" => e.push(("backup".into(), V::B(true))),
                        "down" => down = true,
                        _ => approx.push(format!("{p}: ringx has no such server parameter")),
                    }
                }
                if down {
                    cx.report.approx(c, "marked down: left out of the upstream");
                    continue;
                }
                servers.push(if e.len() == 1 { e.remove(0).1 } else { V::T(e) });
                if approx.is_empty() {
                    cx.report.ok(c);
                } else {
                    cx.report.approx(c, approx.join("; "));
                }
            }
            "keepalive" => match a.first().and_then(|n| n.parse::<i64>().ok()) {
                Some(n) => {
                    t.set("keepalive", V::I(n));
                    cx.report
                        .approx(c, "ringx keeps this many idle connections per zone");
                }
                None => cx.report.refuse(c, "not a number"),
            },
            "keepalive_timeout" => match a.first().and_then(|x| values::duration(x)) {
                Some(v) => {
                    t.set("keepalive_timeout", s(v));
                    cx.report.ok(c);
                }
                None => cx.report.refuse(c, "not a time"),
            },
            "least_conn" => {
                t.set("balance", s("least_conn"));
                cx.report.ok(c);
            }
            "ip_hash" => {
                t.set("balance", s("hash"));
                t.set("hash_key", s("client"));
                cx.report.approx(
                    c,
                    "balance = \"hash\" on the client address (Maglev; nginx hashes the first three \
                     octets of an IPv4 address)",
                );
            }
            "hash" => {
                let key = match a.first().copied() {
                    Some("$remote_addr" | "$binary_remote_addr") => Some("client".to_string()),
                    Some("$request_uri" | "$uri") => Some("uri".to_string()),
                    Some(k) if k.starts_with("$http_") && !k[6..].contains('$') => {
                        Some(format!("header:{}", k[6..].replace('_', "-")))
                    }
                    _ => None,
                };
                match key {
                    Some(k) => {
                        t.set("balance", s("hash"));
                        t.set("hash_key", s(k));
                        cx.report.approx(
                            c,
                            "balance = \"hash\" (Maglev consistent hashing, with or without `consistent`)",
                        );
                    }
                    None => cx.report.refuse(
                        c,
                        "ringx hashes the client address, the URI or one header: round robin is used",
                    ),
                }
            }
            "random" => {
                t.set("balance", s("random_two"));
                if a.first() == Some(&"two") {
                    cx.report.ok(c);
                } else {
                    cx.report
                        .approx(c, "random_two: two random servers, the less loaded one");
                }
            }
            "zone" => cx
                .report
                .irrelevant(c, "ringx shares upstream state between its zones itself"),
            "keepalive_requests" | "keepalive_time" => cx
                .report
                .irrelevant(c, "ringx reuses a pooled connection until it closes"),
            _ => cx.report.refuse(c, "not an upstream directive ringx has"),
        }
    }
    if servers.is_empty() {
        cx.report.refuse(
            d,
            "no server of it could be translated: the upstream is left out",
        );
        cx.dropped.push(name);
        return;
    }
    t.kv.insert(1, ("servers".into(), V::A(servers)));
    cx.report.ok(d);
    cx.upstreams.push(t);
}
