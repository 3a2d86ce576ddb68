//! Directives of `http` that become `[http]`, `[runtime]`, `[tls]` keys or zones (also when
//! written in a server or location: ringx has them once), and `map`.

use ringx_nginxconf::Directive;

use crate::cx::{Cx, MapDef};
use crate::emit::{s, Table, V};
use crate::values;

/// A directive of `http` (top = true) or of a server (applied to every server then).
pub fn http_directive(cx: &mut Cx, d: &Directive, top: bool) {
    let a = d.args();
    let global = |cx: &mut Cx, d: &Directive| {
        if !top {
            cx.report.approx(
                d,
                "ringx has one value for every server: this server's is applied to all",
            );
        } else {
            cx.report.ok(d);
        }
    };
    let time_key = |cx: &mut Cx, key: &str| match a.first().and_then(|t| values::duration(t)) {
        Some(t) => {
            cx.http.set(key, s(t));
            global(cx, d);
        }
        None => cx.report.refuse(d, "not a time"),
    };
    match d.name.as_str() {
        "client_header_timeout" | "client_body_timeout" | "send_timeout" | "lingering_timeout" => {
            time_key(cx, &d.name)
        }
        "keepalive_timeout" => match a.first().and_then(|t| values::time_ms(t)) {
            Some(0) => cx.report.refuse(
                d,
                "0 turns keep-alive off in nginx; ringx keeps connections alive (lower \
                 keepalive_requests to close sooner)",
            ),
            Some(_) => {
                time_key(cx, "keepalive_timeout");
                if a.len() > 1 {
                    cx.report.approx(
                        d,
                        "ringx sends no Keep-Alive: timeout= header (second value)",
                    );
                }
            }
            None => cx.report.refuse(d, "not a time"),
        },
        "keepalive_requests" => match a.first().and_then(|n| n.parse::<i64>().ok()) {
            Some(n) => {
                cx.http.set("keepalive_requests", V::I(n));
                global(cx, d);
            }
            None => cx.report.refuse(d, "not a number"),
        },
        "client_max_body_size" => match a.first().and_then(|n| values::size(n)) {
            Some(v) if v == "0" => cx.report.refuse(d, "0 (no limit): ringx always has one"),
            Some(v) => {
                let keep = match cx.http.get("client_max_body_size") {
                    Some(V::S(old)) => values::size_bytes(old) < values::size_bytes(&v),
                    _ => true,
                };
                if keep {
                    cx.http.set("client_max_body_size", s(v));
                }
                if top {
                    cx.report.ok(d);
                } else {
                    cx.report.approx(
                        d,
                        "ringx has one client_max_body_size for every server and location: the \
                         largest written is used",
                    );
                }
            }
            None => cx.report.refuse(d, "not a size"),
        },
        "large_client_header_buffers" => match a.get(1).and_then(|n| values::size(n)) {
            Some(v) => {
                cx.http.set("max_header_size", s(v));
                cx.report.approx(
                    d,
                    "max_header_size: ringx limits the whole head to this size",
                );
            }
            None => cx.report.refuse(d, "expected NUMBER SIZE"),
        },
        "server_tokens" => {
            cx.http
                .set("server_tokens", V::B(a.first() != Some(&"off")));
            cx.report
                .approx(d, "ringx sends `Server: ringx` with or without its version");
        }
        "access_log" => access_log(cx, d, top),
        "log_format" => cx.report.refuse(
            d,
            "ringx writes nginx's combined format or JSON (access_log_format); custom formats \
             are not supported",
        ),
        "error_log" => error_log(cx, d),
        "real_ip_header" => {
            cx.http.set(
                "real_ip_header",
                s(a.first().copied().unwrap_or("X-Real-IP")),
            );
            global(cx, d);
        }
        "set_real_ip_from" => {
            let mut list = match cx.http.get("real_ip_from") {
                Some(V::A(v)) => v.clone(),
                _ => Vec::new(),
            };
            match a.first() {
                Some(c) if !c.starts_with("unix:") => {
                    list.push(s(*c));
                    cx.http.set("real_ip_from", V::A(list));
                    global(cx, d);
                }
                _ => cx.report.refuse(d, "ringx has no UNIX-domain clients"),
            }
        }
        "real_ip_recursive" => {
            cx.http
                .set("real_ip_recursive", V::B(a.first() == Some(&"on")));
            global(cx, d);
        }
        "gzip_static" => {
            cx.http.set("gzip_static", V::B(a.first() == Some(&"on")));
            global(cx, d);
        }
        "gzip_types" | "gzip_min_length" | "gzip_comp_level" if top => cx.report.ok(d),
        "gzip_vary" => cx.report.approx(
            d,
            "ringx always sends Vary: Accept-Encoding with compressible types",
        ),
        "gzip_proxied" => cx.report.approx(
            d,
            "ringx compresses proxied responses whatever the request's Via (nginx: gzip_proxied)",
        ),
        "gzip_disable" => cx.report.refuse(d, "ringx does not match User-Agents"),
        "gzip_buffers" | "gzip_http_version" => cx
            .report
            .irrelevant(d, "ringx streams its encoder's output"),
        "limit_req_zone" => limit_zone(cx, d, true),
        "limit_conn_zone" => limit_zone(cx, d, false),
        "proxy_cache_path" => cache_path(cx, d),
        "ssl_protocols"
        | "ssl_session_tickets"
        | "ssl_ciphers"
        | "ssl_prefer_server_ciphers"
        | "ssl_session_cache"
        | "ssl_session_timeout"
        | "ssl_dhparam"
        | "ssl_ecdh_curve"
        | "ssl_stapling"
        | "ssl_stapling_verify"
        | "ssl_trusted_certificate"
        | "ssl_buffer_size" => ssl_global(cx, d),
        "types" => cx.report.approx(
            d,
            "ringx has its own MIME table (the common types); a type listed here that ringx's \
             table lacks is served as application/octet-stream",
        ),
        "sendfile"
        | "tcp_nopush"
        | "tcp_nodelay"
        | "types_hash_max_size"
        | "types_hash_bucket_size"
        | "server_names_hash_bucket_size"
        | "server_names_hash_max_size"
        | "client_body_buffer_size"
        | "client_header_buffer_size"
        | "proxy_buffer_size"
        | "proxy_buffers"
        | "proxy_busy_buffers_size"
        | "proxy_temp_path"
        | "client_body_temp_path"
        | "fastcgi_temp_path"
        | "uwsgi_temp_path"
        | "scgi_temp_path"
        | "open_file_cache"
        | "open_file_cache_valid"
        | "open_file_cache_min_uses"
        | "open_file_cache_errors"
        | "output_buffers"
        | "reset_timedout_connection"
        | "resolver"
        | "resolver_timeout"
        | "variables_hash_max_size"
        | "variables_hash_bucket_size"
        | "map_hash_bucket_size"
        | "map_hash_max_size"
        | "proxy_headers_hash_max_size"
        | "proxy_headers_hash_bucket_size"
        | "aio"
        | "directio"
        | "sendfile_max_chunk"
        | "log_not_found"
        | "charset"
        | "source_charset"
        | "server_name_in_redirect"
        | "port_in_redirect"
        | "absolute_redirect"
        | "msie_padding" => cx.report.irrelevant(
            d,
            "ringx chooses these itself (buffers, system calls, caches)",
        ),
        _ => cx
            .report
            .refuse(d, format!("ringx has no equivalent of {} here", d.name)),
    }
}

fn access_log(cx: &mut Cx, d: &Directive, top: bool) {
    let a = d.args();
    match a.as_slice() {
        ["off", ..] => cx.report.ok(d),
        [path, rest @ ..] if !path.contains('$') && !path.starts_with("syslog:") => {
            let format = rest.first().copied().unwrap_or("combined");
            if cx.http.get("access_log").is_some() {
                cx.report
                    .approx(d, "ringx has one access log: the first one written is kept");
                return;
            }
            cx.http.set("access_log", s(cx.under_prefix(path)));
            if format != "combined" {
                cx.report.approx(
                    d,
                    format!("format {format:?}: ringx writes nginx's combined format"),
                );
            } else if rest.len() > 1 {
                cx.report.approx(
                    d,
                    "buffer=/flush=/if= options: ringx writes each line at once",
                );
            } else if !top {
                cx.report
                    .approx(d, "ringx has one access log for every server");
            } else {
                cx.report.ok(d);
            }
        }
        _ => cx
            .report
            .refuse(d, "syslog and paths with variables are not supported"),
    }
}

/// `error_log FILE [LEVEL]`: `[runtime] error_log` and `log_level`.
pub fn error_log(cx: &mut Cx, d: &Directive) {
    let a = d.args();
    match a.first() {
        Some(p) if *p == "stderr" || (!p.contains(':') && !p.contains('$')) => {
            if cx.runtime.get("error_log").is_some() {
                cx.report
                    .approx(d, "ringx has one error log: the first one written is kept");
                return;
            }
            if *p != "stderr" {
                cx.runtime.set("error_log", s(cx.under_prefix(p)));
            }
            if let Some(level) = a.get(1) {
                cx.runtime.set("log_level", s(*level));
            }
            cx.report.ok(d);
        }
        _ => cx
            .report
            .refuse(d, "syslog: and memory: logs are not supported"),
    }
}

fn limit_zone(cx: &mut Cx, d: &Directive, req: bool) {
    let a = d.args();
    let Some(key) = a.first() else {
        cx.report.refuse(d, "no key");
        return;
    };
    if let Err(e) = ringx_config::keytmpl::Template::parse(key) {
        cx.report.refuse(d, format!("its key: {e}"));
        return;
    }
    let mut name = None;
    let mut size = None;
    let mut rate = None;
    for w in &a[1..] {
        if let Some(z) = w.strip_prefix("zone=") {
            let (n, sz) = z.split_once(':').unwrap_or((z, ""));
            name = Some(n.to_string());
            size = values::size(sz);
        } else if let Some(r) = w.strip_prefix("rate=") {
            rate = Some(r.to_string());
        } else if w.starts_with("sync") {
            cx.report.approx(d, "sync: ringx's zones are per host");
        }
    }
    let Some(name) = name else {
        cx.report.refuse(d, "no zone=NAME:SIZE");
        return;
    };
    let mut t = Table::new(
        if req {
            "[[limit_req_zone]]"
        } else {
            "[[limit_conn_zone]]"
        },
        d.place(),
    );
    t.set("name", s(name));
    t.set("key", s(*key));
    if req {
        match rate {
            Some(r) => t.set("rate", s(r)),
            None => {
                cx.report.refuse(d, "no rate=");
                return;
            }
        }
    }
    if let Some(sz) = size {
        t.set("size", s(sz));
    }
    cx.zones.push(t);
    cx.report.ok(d);
}

fn cache_path(cx: &mut Cx, d: &Directive) {
    let a = d.args();
    let Some(path) = a.first() else {
        cx.report.refuse(d, "no path");
        return;
    };
    let mut t = Table::new("[[proxy_cache_path]]", d.place());
    let mut named = false;
    let mut approx = Vec::new();
    t.set("path", s(cx.under_prefix(path)));
    for w in &a[1..] {
        let (k, v) = w.split_once('=').unwrap_or((w, ""));
        match k {
            "keys_zone" => {
                let (n, sz) = v.split_once(':').unwrap_or((v, ""));
                t.kv.insert(0, ("name".into(), s(n)));
                if let Some(sz) = values::size(sz) {
                    t.set("memory_size", s(sz));
                    approx.push("keys_zone's size becomes memory_size (ringx keeps small bodies in memory too)");
                }
                named = true;
            }
            "max_size" => {
                if let Some(v) = values::size(v) {
                    t.set("max_size", s(v));
                }
            }
            "inactive" => {
                if let Some(v) = values::duration(v) {
                    t.set("inactive", s(v));
                }
            }
            "levels" | "use_temp_path" | "loader_files" | "loader_sleep" | "loader_threshold"
            | "manager_files" | "manager_sleep" | "manager_threshold" | "min_free" => {
                approx.push("levels, use_temp_path and the loader/manager settings do not apply to ringx's store")
            }
            _ => approx.push("an unknown parameter was left out"),
        }
    }
    if !named {
        cx.report.refuse(d, "no keys_zone=NAME:SIZE");
        return;
    }
    cx.zones.push(t);
    approx.dedup();
    if approx.is_empty() {
        cx.report.ok(d);
    } else {
        cx.report.approx(d, approx.join("; "));
    }
}

/// A `map`: kept for the directives that can use it (the stream module's SNI routing);
/// elsewhere its variable is refused where used.
pub fn map(cx: &mut Cx, d: &Directive) {
    let a = d.args();
    let (Some(src), Some(var)) = (a.first(), a.get(1)) else {
        cx.report.refuse(d, "expected SOURCE $VARIABLE { ... }");
        return;
    };
    let mut def = MapDef {
        source: src.to_string(),
        entries: Vec::new(),
        default: None,
        hostnames: false,
        place: d.place(),
    };
    for e in d.children() {
        match (e.name.as_str(), e.args().as_slice()) {
            ("default", [v]) => def.default = Some(v.to_string()),
            ("hostnames", []) => def.hostnames = true,
            (k, [v]) => def.entries.push((k.to_string(), v.to_string())),
            _ => {}
        }
    }
    cx.maps.insert(var.trim_start_matches('$').to_string(), def);
    cx.report.approx(
        d,
        "ringx has no map variables: a map is carried over only where the stream module routes by \
         it (ssl_preread); each use elsewhere is refused at its line",
    );
}

/// TLS directives that ringx has once for every server (`[tls]`) or not at all.
pub fn ssl_global(cx: &mut Cx, d: &Directive) {
    let a = d.args();
    match d.name.as_str() {
        "ssl_protocols" => {
            if a.iter().all(|p| *p == "TLSv1.2" || *p == "TLSv1.3") {
                cx.report.ok(d);
            } else {
                cx.report.approx(d, "ringx offers TLS 1.2 and 1.3 only");
            }
        }
        "ssl_session_tickets" => {
            let on = a.first() != Some(&"off");
            cx.tls.set("session_tickets", V::B(on));
            cx.report.ok(d);
        }
        "ssl_ciphers" => cx.report.approx(
            d,
            "ringx offers AES-GCM and ChaCha20-Poly1305 with ECDHE (rustls), nothing else",
        ),
        "ssl_prefer_server_ciphers" => {
            let on = a.first() == Some(&"on");
            cx.tls.set("prefer_server_ciphers", V::B(on));
            cx.report.ok(d);
        }
        "ssl_session_cache" | "ssl_session_timeout" => cx.report.approx(
            d,
            "ringx keeps [tls] session_cache sessions per zone and resumes by tickets in every zone",
        ),
        "ssl_dhparam" => cx.report.irrelevant(d, "ringx has no DHE key exchange"),
        "ssl_ecdh_curve" => cx.report.approx(d, "rustls's groups (X25519, P-256, P-384)"),
        "ssl_stapling" | "ssl_stapling_verify" => {
            cx.report.refuse(d, "ringx does not staple OCSP responses")
        }
        "ssl_trusted_certificate" => cx.report.irrelevant(d, "used by OCSP stapling only"),
        "ssl_buffer_size" | "ssl_early_data" | "ssl_conf_command" => {
            cx.report.irrelevant(d, "ringx sizes records itself; 0-RTT is off")
        }
        _ => cx.report.refuse(d, "not supported"),
    }
}
