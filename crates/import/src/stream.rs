//! The stream module: `[[stream]]` L4 proxies, SNI routing by `ssl_preread` through a `map`
//! on `$ssl_preread_server_name`, TLS termination, UDP.

use ringx_nginxconf::Directive;

use crate::cx::Cx;
use crate::emit::{s, Table, V};
use crate::values;

pub fn stream(cx: &mut Cx, d: &Directive) {
    cx.report.ok(d);
    for c in d.children() {
        match c.name.as_str() {
            "upstream" => crate::upstream::upstream(cx, c, true),
            "map" => crate::directives::map(cx, c),
            _ => {}
        }
    }
    for c in d.children() {
        match c.name.as_str() {
            "upstream" | "map" => {}
            "server" => server(cx, c),
            "error_log" => crate::directives::error_log(cx, c),
            "access_log" | "log_format" => cx.report.refuse(
                c,
                "ringx's access log is for HTTP requests; streams are counted in /metrics",
            ),
            n if n.starts_with("ssl_") => crate::directives::ssl_global(cx, c),
            "resolver"
            | "resolver_timeout"
            | "preread_buffer_size"
            | "preread_timeout"
            | "proxy_buffer_size"
            | "tcp_nodelay"
            | "variables_hash_max_size" => cx.report.irrelevant(c, "ringx chooses these itself"),
            _ => cx.report.refuse(c, "not a stream directive ringx has"),
        }
    }
}

/// A proxy target: an upstream's name, or `host:port`.
fn target(cx: &Cx, v: &str) -> Result<String, String> {
    if cx.dropped.iter().any(|u| u == v) {
        return Err(format!("its upstream {v:?} was left out (see its line)"));
    }
    if cx.has_upstream(v) {
        return Ok(v.to_string());
    }
    values::upstream_addr(v, None)
}

fn server(cx: &mut Cx, d: &Directive) {
    let mut t = Table::new("[[stream]]", d.place());
    let mut listen = Vec::new();
    let (mut udp, mut tls, mut pp, mut preread) = (false, false, false, false);
    let mut pass: Option<&Directive> = None;
    let (mut cert, mut key) = (None, None);
    let mut extra: Vec<(String, V)> = Vec::new();
    for c in d.children() {
        let a = c.args();
        match c.name.as_str() {
            "listen" => {
                match a.first().map(|x| values::listen_addr(x)) {
                    Some(Ok(addr)) => listen.push(s(addr.to_string())),
                    Some(Err(e)) => {
                        cx.report.refuse(c, e);
                        continue;
                    }
                    None => {
                        cx.report.refuse(c, "no address");
                        continue;
                    }
                }
                for p in &a[1..] {
                    match *p {
                        "udp" => udp = true,
                        "ssl" => tls = true,
                        "proxy_protocol" => pp = true,
                        _ => {}
                    }
                }
                cx.report.ok(c);
            }
            "proxy_pass" => pass = Some(c),
            "ssl_preread" => {
                preread = a.first() == Some(&"on");
                cx.report.ok(c);
            }
            "proxy_timeout" => match a.first().and_then(|x| values::duration(x)) {
                Some(v) => {
                    extra.push(("idle_timeout".into(), s(v)));
                    cx.report.ok(c);
                }
                None => cx.report.refuse(c, "not a time"),
            },
            "proxy_responses" => match a.first().and_then(|n| n.parse::<i64>().ok()) {
                Some(n) => {
                    extra.push(("responses".into(), V::I(n)));
                    cx.report.ok(c);
                }
                None => cx.report.refuse(c, "not a number"),
            },
            "proxy_connect_timeout" => cx.report.approx(
                c,
                "ringx's connect timeout is the [[upstream]]'s connect_timeout (default 5s)",
            ),
            "proxy_bind" => match a.as_slice() {
                ["$remote_addr", "transparent"] => {
                    extra.push(("bind".into(), s("client")));
                    cx.report.ok(c);
                }
                _ => cx
                    .report
                    .refuse(c, "ringx binds to the client's address or not at all"),
            },
            "proxy_protocol" => cx
                .report
                .refuse(c, "set proxy_protocol on the [[upstream]] (v1/v2) by hand"),
            "ssl_certificate" | "ssl_certificate_key" => {
                let v = a.first().map(|f| f.to_string()).unwrap_or_default();
                let file = match v.strip_prefix('$').and_then(|m| cx.maps.get(m).cloned()) {
                    Some(map) => match &map.default {
                        Some(f) => {
                            cx.report.approx(
                                c,
                                format!(
                                    "chosen by the map at {} in nginx: ringx serves the map's \
                                     default {f:?} for every name",
                                    map.place
                                ),
                            );
                            Some(f.clone())
                        }
                        None => {
                            cx.report.refuse(c, "a certificate map without a default");
                            None
                        }
                    },
                    None if !v.contains('$') && !v.is_empty() => {
                        cx.report.ok(c);
                        Some(v)
                    }
                    None => {
                        cx.report.refuse(c, "a certificate chosen by variables");
                        None
                    }
                };
                let file = file.map(|f| cx.under_conf(&f));
                if c.name == "ssl_certificate" {
                    cert = file
                } else {
                    key = file
                }
            }
            n if n.starts_with("ssl_") => crate::directives::ssl_global(cx, c),
            _ => cx
                .report
                .refuse(c, "not a stream server directive ringx has"),
        }
    }
    let Some(p) = pass else {
        cx.report.refuse(d, "no proxy_pass: ringx's streams proxy");
        return;
    };
    let v = p.args().first().map(|x| x.to_string()).unwrap_or_default();
    let mut sni: Vec<(String, V)> = Vec::new();
    let default = if let Some(var) = v.strip_prefix('$') {
        let Some(map) = cx.maps.get(var).cloned() else {
            cx.report
                .refuse(p, format!("${var} is not a map this configuration defines"));
            cx.report.refuse(d, "no proxy_pass: left out");
            return;
        };
        if !preread || map.source != "$ssl_preread_server_name" {
            cx.report.refuse(p, "ringx routes streams by a map only on $ssl_preread_server_name with ssl_preread on");
            cx.report.refuse(d, "no proxy_pass: left out");
            return;
        }
        let mut approx = Vec::new();
        for (k, val) in &map.entries {
            let names: Vec<String> =
                if let Some(rest) = k.strip_prefix('.').filter(|_| map.hostnames) {
                    vec![rest.to_string(), format!("*.{rest}")]
                } else if k.starts_with('~')
                    || (k.contains('*') && !(map.hostnames && k.starts_with("*.")))
                {
                    approx.push(format!("{k:?} left out (ringx routes exact and *. names)"));
                    continue;
                } else {
                    vec![k.to_string()]
                };
            match target(cx, val) {
                Ok(tg) => sni.extend(names.into_iter().map(|n| (n, s(tg.clone())))),
                Err(e) => approx.push(format!("{k:?}: {e}")),
            }
        }
        if approx.is_empty() {
            cx.report.ok(p);
        } else {
            cx.report.approx(p, approx.join("; "));
        }
        match map.default {
            Some(dv) => dv,
            None => {
                cx.report.refuse(
                    d,
                    "the SNI map has no default: ringx needs proxy_pass for other names",
                );
                return;
            }
        }
    } else {
        cx.report.ok(p);
        v
    };
    let default = match target(cx, &default) {
        Ok(x) => x,
        Err(e) => {
            cx.report
                .refuse(d, format!("its proxy_pass: {e}; left out"));
            return;
        }
    };
    if listen.is_empty() {
        cx.report.refuse(d, "no listen address: left out");
        return;
    }
    t.set("listen", V::A(listen));
    t.set("proxy_pass", s(default));
    if udp {
        t.set("protocol", s("udp"));
    }
    if pp {
        t.set("proxy_protocol", V::B(true));
    }
    if !sni.is_empty() {
        t.set("sni", V::T(sni));
    }
    if tls {
        match (cert, key) {
            (Some(c), Some(k)) => t.set(
                "tls",
                V::T(vec![("cert".into(), s(c)), ("key".into(), s(k))]),
            ),
            _ => {
                cx.report
                    .refuse(d, "ssl without a certificate and key: left out");
                return;
            }
        }
    }
    for (k, v) in extra {
        t.set(&k, v);
    }
    cx.report.ok(d);
    cx.streams.push(t);
}
