//! A `server` of the http context: listen addresses, names, TLS, and its locations.

use ringx_nginxconf::Directive;

use crate::cx::Cx;
use crate::emit::{s, Table, V};
use crate::inherit::{self, Inh, Level};
use crate::values;

pub fn server(cx: &mut Cx, d: &Directive, http: &Inh) {
    let mut inh = http.clone();
    let mut lvl = Level::default();
    let mut t = Table::new("[[server]]", d.place());
    let mut listen: Vec<String> = Vec::new();
    let (mut default, mut tls, mut h2, mut pp) = (false, false, false, false);
    let mut names: Vec<String> = Vec::new();
    let (mut certs, mut keys) = (Vec::new(), Vec::new());
    let (mut client_ca, mut verify) = (None, None);
    let mut rewrites: Vec<String> = Vec::new();
    let mut ret: Option<&Directive> = None;
    let mut locations: Vec<&Directive> = Vec::new();
    for c in d.children() {
        let a = c.args();
        match c.name.as_str() {
            "listen" => {
                let Some(spec) = a.first() else {
                    cx.report.refuse(c, "no address");
                    continue;
                };
                match values::listen_addr(spec) {
                    Ok(addr) => listen.push(addr.to_string()),
                    Err(e) => {
                        cx.report.refuse(c, e);
                        continue;
                    }
                }
                let mut approx = Vec::new();
                for p in &a[1..] {
                    match *p {
                        "default_server" | "default" => default = true,
                        "ssl" => tls = true,
                        "http2" => h2 = true,
                        "proxy_protocol" => pp = true,
                        "reuseport" => {}
                        "ipv6only=on" => {}
                        "deferred" => approx.push("deferred: ringx accepts at once"),
                        p if p.starts_with("backlog=") => {
                            if let Ok(n) = p["backlog=".len()..].parse::<i64>() {
                                cx.runtime.set("backlog", V::I(n));
                            }
                            approx.push("backlog= is ringx's [runtime] backlog, for every listener")
                        }
                        "ipv6only=off" => {
                            approx.push("ipv6only=off: ringx's IPv6 listeners are IPv6 only")
                        }
                        _ => approx.push("a listen parameter ringx does not have was left out"),
                    }
                }
                if approx.is_empty() {
                    cx.report.ok(c);
                } else {
                    cx.report.approx(c, approx.join("; "));
                }
            }
            "server_name" => {
                let mut approx = Vec::new();
                for n in a {
                    if n == "_" || n.is_empty() || n == "\"\"" {
                        continue;
                    } else if let Some(rest) = n.strip_prefix('.') {
                        names.push(rest.to_string());
                        names.push(format!("*.{rest}"));
                    } else if n.starts_with('~') {
                        approx.push(format!(
                            "regex name {n:?} left out: ringx matches exact and *. names"
                        ));
                    } else if n.ends_with(".*") || (n.contains('*') && !n.starts_with("*.")) {
                        approx.push(format!(
                            "{n:?} left out: ringx's wildcards are leading (*.example.com)"
                        ));
                    } else {
                        names.push(n.to_ascii_lowercase());
                    }
                }
                if approx.is_empty() {
                    cx.report.ok(c);
                } else {
                    cx.report.approx(c, approx.join("; "));
                }
            }
            "location" => locations.push(c),
            "return" => {
                ret = Some(c);
            }
            "rewrite" => match crate::location::rewrite_rule(c) {
                Ok(r) => {
                    rewrites.push(r);
                    cx.report.ok(c);
                }
                Err(e) => cx.report.refuse(c, e),
            },
            "ssl_certificate" | "ssl_certificate_key" => match a.first() {
                Some(f) if !f.contains('$') && !f.starts_with("data:") => {
                    let f = cx.under_conf(f);
                    if c.name == "ssl_certificate" {
                        certs.push(f)
                    } else {
                        keys.push(f)
                    }
                    cx.report.ok(c);
                }
                _ => cx
                    .report
                    .refuse(c, "certificates chosen by variables or inline data"),
            },
            "ssl_client_certificate" => {
                client_ca = a.first().map(|f| cx.under_conf(f));
                cx.report.ok(c);
            }
            "ssl_verify_client" => match a.first() {
                Some(&"on") => {
                    verify = Some("required");
                    cx.report.ok(c);
                }
                Some(&"optional") => {
                    verify = Some("optional");
                    cx.report.ok(c);
                }
                Some(&"off") => cx.report.ok(c),
                _ => cx.report.refuse(c, "optional_no_ca is not supported"),
            },
            "ssl_verify_depth" => cx.report.irrelevant(c, "ringx verifies the whole chain"),
            "ssl" => {
                tls |= a.first() == Some(&"on");
                cx.report.ok(c);
            }
            "http2" => {
                h2 |= a.first() == Some(&"on");
                cx.report.ok(c);
            }
            "if" | "set" => crate::location::refuse_all(
                cx,
                c,
                "ringx has no `if` or `set`: write the condition as locations or rewrites",
            ),
            "try_files" => cx
                .report
                .refuse(c, "try_files in a server: move it into its locations"),
            _ if inherit::take(cx, &mut inh, &mut lvl, c) => {}
            n if n.starts_with("ssl_") => crate::directives::ssl_global(cx, c),
            _ => crate::directives::http_directive(cx, c, false),
        }
    }
    if listen.is_empty() {
        // nginx's default: *:80 (as root).
        listen.push("0.0.0.0:80".into());
    }
    listen.dedup();
    if tls && (certs.is_empty() || certs.len() != keys.len()) {
        cx.report.refuse(
            d,
            "a TLS server needs as many ssl_certificate as ssl_certificate_key: left out",
        );
        crate::location::refuse_children(cx, d, "its server was left out");
        return;
    }
    t.set(
        "listen",
        V::A(listen.iter().map(|l| s(l.clone())).collect()),
    );
    names.dedup();
    let mut kept = Vec::new();
    for n in names {
        let taken = cx.servers.iter().any(|o| {
            shares_listen(o, &listen)
                && matches!(o.get("server_name"), Some(V::A(v)) if v.contains(&s(n.clone())))
        });
        if taken {
            cx.report.approx(
                d,
                format!("server_name {n:?} is already another server's on this address (nginx: \"conflicting server name\", ignored)"),
            );
        } else {
            kept.push(s(n));
        }
    }
    if !kept.is_empty() {
        t.set("server_name", V::A(kept));
    }
    if default {
        t.set("default", V::B(true));
    }
    if pp {
        t.set("proxy_protocol", V::B(true));
    }
    if tls {
        let pairs: Vec<V> = certs
            .iter()
            .zip(&keys)
            .map(|(c, k)| {
                V::T(vec![
                    ("cert".into(), s(c.clone())),
                    ("key".into(), s(k.clone())),
                ])
            })
            .collect();
        let v = match (client_ca, verify) {
            (Some(ca), Some(vf)) => V::T(vec![
                ("certs".into(), V::A(pairs)),
                ("client_ca".into(), s(ca)),
                ("verify".into(), s(vf)),
            ]),
            _ if pairs.len() == 1 => pairs[0].clone(),
            _ => V::A(pairs),
        };
        t.set("tls", v);
        t.set("http2", V::B(h2));
    }
    if !rewrites.is_empty() {
        t.set("rewrite", V::A(rewrites.into_iter().map(s).collect()));
    }
    let mut subs = Vec::new();
    if let Some(r) = ret {
        // The server's rewrite phase answers every request: its locations are never reached.
        let mut loc = Table::new("[[server.location]]", r.place());
        loc.set("path", s("/"));
        if crate::location::return_value(cx, r, &inh, &mut loc) {
            subs.push(loc);
        }
        for l in &locations {
            crate::location::refuse_all(
                cx,
                l,
                "never reached: the server's `return` answers first",
            );
        }
    } else {
        for l in &locations {
            crate::location::location(cx, l, &inh, None, &mut subs);
        }
        let has_root = subs.iter().any(|l| l.get("path") == Some(&s("/")));
        if !has_root {
            // nginx serves what no location matches with the server's own settings.
            let mut loc = Table::new(
                "[[server.location]]",
                format!("{} (no location matched)", d.place()),
            );
            loc.set("path", s("/"));
            crate::location::static_files(cx, &inh, &mut loc, None);
            crate::location::common(cx, &inh, &mut loc);
            subs.push(loc);
        }
    }
    if subs.is_empty() {
        cx.report.refuse(
            d,
            "no location of this server could be translated: the server is left out",
        );
        return;
    }
    t.subs = subs;
    cx.report.ok(d);
    cx.servers.push(t);
}

fn shares_listen(t: &Table, listen: &[String]) -> bool {
    matches!(t.get("listen"), Some(V::A(v)) if v.iter().any(|a| listen.iter().any(|l| *a == s(l.clone()))))
}
