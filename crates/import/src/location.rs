//! Locations: nginx nests them, ringx lists them flat in `[[server.location]]`; each gets
//! what it inherits resolved, and one action: `return`, `proxy_pass`, or files.

use ringx_config::rewrite::PathMatch;
use ringx_config::template::Template;
use ringx_nginxconf::Directive;

use crate::cx::Cx;
use crate::emit::{s, Table, V};
use crate::inherit::{self, Inh, Level};
use crate::values;

/// Notes `d` refused and every directive inside it (nothing is dropped silently).
pub fn refuse_all(cx: &mut Cx, d: &Directive, reason: &str) {
    cx.report.refuse(d, reason);
    refuse_children(cx, d, "inside a block that was not translated");
}

pub fn refuse_children(cx: &mut Cx, d: &Directive, reason: &str) {
    for c in d.children() {
        cx.report.refuse(c, reason);
        refuse_children(cx, c, reason);
    }
}

/// The ringx path of a location's arguments, or why there is none.
fn path_of(a: &[&str]) -> Result<String, String> {
    let p = match a {
        [m @ ("=" | "~" | "~*" | "^~"), uri] => format!("{m} {uri}"),
        [uri] if uri.starts_with('@') => uri.to_string(),
        [uri] if uri.starts_with("^~") => format!("^~ {}", &uri[2..]),
        [uri] if uri.starts_with("~*") => format!("~* {}", &uri[2..]),
        [uri] if uri.starts_with('~') => format!("~ {}", &uri[1..]),
        [uri] if uri.starts_with('=') => format!("= {}", &uri[1..]),
        [uri] => uri.to_string(),
        _ => return Err("expected [=|~|~*|^~] URI or @name".into()),
    };
    PathMatch::parse(&p, false).map(|_| p)
}

/// A `rewrite` as ringx writes it (`"REGEX REPLACEMENT [flag]"`), checked by ringx's parser.
pub fn rewrite_rule(d: &Directive) -> Result<String, String> {
    let a = d.args();
    if a.len() < 2 || a.len() > 3 || a.iter().any(|w| w.contains(char::is_whitespace)) {
        return Err("expected REGEX REPLACEMENT [FLAG] without spaces in them".into());
    }
    let rule = a.join(" ");
    ringx_config::rewrite::RewriteRule::parse(&rule)
        .map(|_| rule)
        .map_err(|e| format!("ringx cannot take it: {e}"))
}

pub fn location(
    cx: &mut Cx,
    d: &Directive,
    parent: &Inh,
    outer: Option<&str>,
    out: &mut Vec<Table>,
) {
    let path = match path_of(&d.args()) {
        Ok(p) => p,
        Err(e) => {
            refuse_all(cx, d, &format!("ringx cannot match it: {e}"));
            return;
        }
    };
    let mut inh = parent.clone();
    let mut lvl = Level::default();
    let mut t = Table::new("[[server.location]]", d.place());
    t.set("path", s(path.clone()));
    let mut ret = None;
    let mut proxy = None;
    let mut alias = None;
    let mut try_files = None;
    let mut rewrites = Vec::new();
    let mut nested = Vec::new();
    for c in d.children() {
        let a = c.args();
        match c.name.as_str() {
            "location" => nested.push(c),
            "return" => ret = Some(c),
            "proxy_pass" | "grpc_pass" => proxy = Some(c),
            "alias" => match a.first() {
                Some(p) if !p.contains('$') && !path.starts_with('~') => {
                    alias = Some(cx.under_prefix(p));
                    cx.report.ok(c);
                }
                _ => cx.report.refuse(c, "an alias with captures or variables"),
            },
            "try_files" => {
                try_files = Some(a.iter().map(|x| s(*x)).collect::<Vec<_>>());
                cx.report.ok(c);
            }
            "rewrite" => match rewrite_rule(c) {
                Ok(r) => {
                    rewrites.push(s(r));
                    cx.report.ok(c);
                }
                Err(e) => cx.report.refuse(c, e),
            },
            "internal" => cx.report.approx(
                c,
                "ringx has no internal-only locations: clients can request this one directly",
            ),
            "proxy_http_version" => cx
                .report
                .irrelevant(c, "ringx speaks HTTP/1.1 to upstreams, with keep-alive"),
            "proxy_redirect" => {
                if a.first() == Some(&"off") {
                    cx.report.ok(c);
                } else {
                    cx.report
                        .refuse(c, "ringx does not rewrite the upstream's Location")
                }
            }
            "proxy_buffering" | "proxy_request_buffering" => cx.report.approx(
                c,
                "ringx streams bodies both ways with at most 256 KiB queued, whatever this says",
            ),
            "proxy_next_upstream" | "proxy_next_upstream_tries" | "proxy_next_upstream_timeout" => {
                cx.report.approx(c, "ringx's [[upstream]] retries decide")
            }
            "log_not_found" | "access_log" if a.first() == Some(&"off") => cx
                .report
                .approx(c, "ringx's access log is one for every location"),
            "if" | "set" | "limit_except" => refuse_all(
                cx,
                c,
                "ringx has no `if`, `set` or `limit_except`: write the condition as locations",
            ),
            n if n.starts_with("fastcgi_") || n.starts_with("uwsgi_") || n.starts_with("scgi_") => {
                cx.report.refuse(
                    c,
                    "ringx does not speak FastCGI, uwsgi or SCGI: only HTTP and gRPC upstreams",
                )
            }
            _ if inherit::take(cx, &mut inh, &mut lvl, c) => {}
            _ => crate::directives::http_directive(cx, c, false),
        }
    }
    if let Some(o) = outer {
        cx.report.approx(
            d,
            format!(
                "nested in {o:?}: ringx's locations are flat, so this one is matched against \
                 every request, not only those {o:?} matched"
            ),
        );
    } else {
        cx.report.ok(d);
    }
    let acted = if let Some(r) = ret {
        return_value(cx, r, &inh, &mut t)
    } else if let Some(p) = proxy {
        proxy_pass(cx, p, &inh, &mut t)
    } else {
        static_files(cx, &inh, &mut t, alias);
        if let Some(tf) = try_files {
            t.set("try_files", V::A(tf));
        }
        true
    };
    if !rewrites.is_empty() {
        t.set("rewrite", V::A(rewrites));
    }
    if acted {
        common(cx, &inh, &mut t);
        out.push(t);
    } else {
        cx.report.refuse(
            d,
            "no action of this location could be translated: left out",
        );
    }
    for n in nested {
        location(cx, n, &inh, Some(&path), out);
    }
}

/// `return`: ringx's `return = { status, body | location }`. False when it cannot be.
pub fn return_value(cx: &mut Cx, d: &Directive, inh: &Inh, t: &mut Table) -> bool {
    let a = d.args();
    let (status, rest) = match a.as_slice() {
        [url]
            if url.starts_with("http://")
                || url.starts_with("https://")
                || url.starts_with("$scheme") =>
        {
            (302u16, Some(*url))
        }
        [code] => match code.parse() {
            Ok(c) => (c, None),
            Err(_) => {
                cx.report.refuse(d, "not a status code");
                return false;
            }
        },
        [code, text] => match code.parse() {
            Ok(c) => (c, Some(*text)),
            Err(_) => {
                cx.report.refuse(d, "not a status code");
                return false;
            }
        },
        _ => {
            cx.report.refuse(d, "expected CODE [TEXT|URL]");
            return false;
        }
    };
    if status == 444 || !(200..=599).contains(&status) {
        cx.report.refuse(
            d,
            format!(
                "{status}: nginx closes the connection without a response; ringx always answers"
            ),
        );
        return false;
    }
    if let Some(v) = rest {
        if let Err(e) = Template::parse(v) {
            cx.report
                .refuse(d, format!("ringx cannot take its value: {e}"));
            return false;
        }
    }
    let mut r = vec![("status".to_string(), V::I(status as i64))];
    match rest {
        Some(url) if [301, 302, 303, 307, 308].contains(&status) => {
            r.push(("location".into(), s(url)))
        }
        Some(body) => {
            r.push(("body".into(), s(body)));
            let ct = inh.default_type.as_deref().unwrap_or("text/plain");
            if ct != "text/plain" {
                r.push(("content_type".into(), s(ct)));
            }
        }
        None if (300..400).contains(&status) => {
            cx.report.refuse(d, "a redirect without a URL");
            return false;
        }
        None => {}
    }
    let typed = r.iter().any(|(k, _)| k == "body");
    let redirect = r.iter().any(|(k, _)| k == "location");
    t.set("return", V::T(r));
    if redirect {
        cx.report.approx(
            d,
            "nginx sends its HTML page for the code with the redirect (text/html); ringx's \
             body is empty",
        );
    } else if typed {
        cx.report.approx(
            d,
            "nginx types a return body by the request's extension (/x.html: text/html), else \
             default_type; ringx sends the location's one content_type",
        );
    } else {
        cx.report.ok(d);
    }
    true
}

/// Files from the inherited `root` (nginx's default: `html` under the prefix) or `alias`.
pub fn static_files(cx: &mut Cx, inh: &Inh, t: &mut Table, alias: Option<String>) {
    match alias {
        Some(a) => t.set("alias", s(a)),
        None => {
            let root = inh.root.clone().unwrap_or_else(|| cx.under_prefix("html"));
            t.set("root", s(root));
        }
    }
    if let Some(ix) = &inh.index {
        if ix.as_slice() != ["index.html"] {
            t.set("index", V::A(ix.iter().map(|i| s(i.clone())).collect()));
        }
    }
}

fn proxy_pass(cx: &mut Cx, d: &Directive, inh: &Inh, t: &mut Table) -> bool {
    let Some(url) = d.args().first().map(|u| u.to_string()) else {
        cx.report.refuse(d, "no URL");
        return false;
    };
    let grpc = d.name == "grpc_pass";
    let (scheme, rest) = match url.split_once("://") {
        Some((sch, rest)) => (sch.to_string(), rest.to_string()),
        None if grpc => ("grpc".to_string(), url.clone()),
        None => {
            cx.report.refuse(d, "no scheme");
            return false;
        }
    };
    if url.contains('$') || rest.starts_with("unix:") {
        cx.report.refuse(
            d,
            "proxy_pass with variables or to a UNIX-domain socket: ringx proxies to fixed TCP addresses",
        );
        return false;
    }
    let (hostport, _uri) = rest.split_once('/').unwrap_or((&rest, ""));
    if cx.dropped.iter().any(|u| u == hostport) {
        cx.report.refuse(
            d,
            format!("its upstream {hostport:?} was left out (see its line)"),
        );
        return false;
    }
    let group = cx.has_upstream(hostport);
    let target = match (scheme.as_str(), grpc) {
        ("http" | "https", false) => url.clone(),
        ("grpc" | "grpcs", true) => format!("{scheme}://{rest}"),
        _ => {
            cx.report
                .refuse(d, format!("scheme {scheme:?} is not one ringx proxies"));
            return false;
        }
    };
    t.set("proxy_pass", s(target));
    cx.report.ok(d);
    // nginx sends Host: $proxy_host and no forwarding fields unless told.
    let mut host = Some(if group {
        hostport.to_string()
    } else {
        values::proxy_host(hostport, scheme == "https")
    });
    let mut forwarded = false;
    let mut set = Vec::new();
    for (n, v, place) in &inh.proxy_set_header {
        let pd = Directive {
            name: "proxy_set_header".into(),
            words: Vec::new(),
            block: None,
            file: place
                .rsplit_once(':')
                .map_or(place.clone(), |(f, _)| f.to_string()),
            line: place
                .rsplit_once(':')
                .and_then(|(_, l)| l.parse().ok())
                .unwrap_or(0),
        };
        let lower = n.to_ascii_lowercase();
        match lower.as_str() {
            "host" => match v.as_str() {
                "$http_host" => {
                    host = None;
                    cx.report.ok(&pd);
                }
                "$host" => {
                    host = None;
                    cx.report.approx(&pd, "ringx passes the client's Host as sent (with its port); nginx's $host has none");
                }
                "$proxy_host" => cx.report.ok(&pd),
                lit if !lit.contains('$') => {
                    host = Some(lit.to_string());
                    cx.report.ok(&pd);
                }
                _ => cx.report.refuse(
                    &pd,
                    "ringx's Host upstream is the client's, the upstream's, or fixed",
                ),
            },
            "x-forwarded-for" if v.contains("$proxy_add_x_forwarded_for") => {
                forwarded = true;
                cx.report.approx(
                    &pd,
                    "forwarded_headers = true: ringx then also sends X-Forwarded-Proto, X-Real-IP \
                     and Forwarded, each replacing the client's",
                );
            }
            "connection" | "upgrade" => cx.report.irrelevant(
                &pd,
                "ringx passes WebSocket upgrades itself and manages the upstream connection",
            ),
            _ => match Template::parse(v) {
                Ok(_) => {
                    set.push((n.clone(), s(v.clone())));
                    cx.report.ok(&pd);
                }
                Err(e) => cx
                    .report
                    .refuse(&pd, format!("ringx cannot take its value: {e}")),
            },
        }
    }
    if let Some(h) = host {
        t.set("proxy_host", s(h));
    }
    if !forwarded {
        t.set("forwarded_headers", V::B(false));
    } else {
        set.retain(|(n, _)| {
            !["x-forwarded-proto", "x-real-ip"].contains(&n.to_ascii_lowercase().as_str())
        });
    }
    if !set.is_empty() {
        t.set("proxy_set_header", V::T(set));
    }
    if !inh.proxy_hide_header.is_empty() {
        t.set(
            "proxy_hide_header",
            V::A(inh.proxy_hide_header.iter().map(|h| s(h.clone())).collect()),
        );
    }
    if inh.proxy_intercept_errors == Some(true) {
        t.set("proxy_intercept_errors", V::B(true));
    }
    if let Some(zone) = &inh.proxy_cache {
        let mut c = vec![("zone".to_string(), s(zone.clone()))];
        if let Some(k) = &inh.proxy_cache_key {
            c.push(("key".into(), s(k.clone())));
        }
        if !inh.proxy_cache_valid.is_empty() {
            c.push((
                "valid".into(),
                V::T(
                    inh.proxy_cache_valid
                        .iter()
                        .map(|(k, v)| (k.clone(), s(v.clone())))
                        .collect(),
                ),
            ));
        }
        if !inh.proxy_cache_use_stale.is_empty() {
            c.push((
                "use_stale".into(),
                V::A(
                    inh.proxy_cache_use_stale
                        .iter()
                        .map(|u| s(u.clone()))
                        .collect(),
                ),
            ));
        }
        for (k, v) in [
            ("background_update", inh.proxy_cache_background_update),
            ("lock", inh.proxy_cache_lock),
            ("revalidate", inh.proxy_cache_revalidate),
        ] {
            c.push((k.into(), V::B(v.unwrap_or(false))));
        }
        if let Some(lt) = &inh.proxy_cache_lock_timeout {
            c.push(("lock_timeout".into(), s(lt.clone())));
        }
        c.push(("status_header".into(), s("")));
        t.set("proxy_cache", V::T(c));
    }
    if group {
        let keys = ["connect_timeout", "read_timeout", "send_timeout"];
        if let Some(u) = cx
            .upstreams
            .iter_mut()
            .find(|u| u.get("name") == Some(&s(hostport)))
        {
            for (k, v) in keys.iter().zip(&inh.proxy_timeouts) {
                if let Some(v) = v {
                    u.set(k, s(v.clone()));
                }
            }
        }
    }
    true
}

/// What every kind of location carries: headers, error pages, guards, compression.
pub fn common(cx: &mut Cx, inh: &Inh, t: &mut Table) {
    let mut headers: Vec<(String, V)> = Vec::new();
    for (n, v, always) in &inh.add_header {
        let val = if *always {
            V::T(vec![
                ("value".into(), s(v.clone())),
                ("always".into(), V::B(true)),
            ])
        } else {
            s(v.clone())
        };
        headers.push((n.clone(), val));
    }
    if let Some(cc) = &inh.expires {
        if !headers
            .iter()
            .any(|(n, _)| n.eq_ignore_ascii_case("cache-control"))
        {
            headers.push(("Cache-Control".into(), s(cc.clone())));
        }
    }
    if !headers.is_empty() {
        t.set("add_header", V::T(headers));
    }
    if !inh.error_page.is_empty() {
        t.set(
            "error_page",
            V::T(
                inh.error_page
                    .iter()
                    .map(|(k, v)| (k.clone(), s(v.clone())))
                    .collect(),
            ),
        );
    }
    if let Some(r) = inh.recursive_error_pages {
        t.set("recursive_error_pages", V::B(r));
    }
    if inh.gzip == Some(false) && cx.http.get("gzip").is_some() {
        t.set("compress", V::B(false));
    }
    if !inh.access.is_empty() {
        t.set(
            "access",
            V::A(inh.access.iter().map(|a| s(a.clone())).collect()),
        );
    }
    if let (Some(realm), Some(file)) = (&inh.auth_basic, &inh.auth_basic_user_file) {
        t.set(
            "auth_basic",
            V::T(vec![
                ("realm".into(), s(realm.clone())),
                ("user_file".into(), s(file.clone())),
            ]),
        );
    }
    if let Some((zone, burst, nodelay)) = inh.limit_req.first() {
        let mut l = vec![
            ("zone".to_string(), s(zone.clone())),
            ("burst".into(), V::I(*burst as i64)),
            ("nodelay".into(), V::B(*nodelay)),
        ];
        if let Some(st) = inh.limit_req_status {
            l.push(("status".into(), V::I(st as i64)));
        }
        t.set("limit_req", V::T(l));
    }
    if let Some((zone, max)) = inh.limit_conn.first() {
        let mut l = vec![
            ("zone".to_string(), s(zone.clone())),
            ("max".into(), V::I(*max as i64)),
        ];
        if let Some(st) = inh.limit_conn_status {
            l.push(("status".into(), V::I(st as i64)));
        }
        t.set("limit_conn", V::T(l));
    }
}

/// `proxy_set_header`s that no proxying location took: irrelevant where they stand.
pub fn settle(cx: &mut Cx) {
    for d in std::mem::take(&mut cx.headers) {
        cx.report
            .irrelevant(&d, "no location that inherits it proxies");
    }
}
