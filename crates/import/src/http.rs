//! The `http` context: what becomes `[http]`, the zones and caches, the upstreams and maps
//! (read first, since servers name them), then the servers.

use ringx_nginxconf::Directive;

use crate::cx::Cx;
use crate::emit::{s, V};
use crate::inherit::{self, Inh, Level};
use crate::values;

pub fn http(cx: &mut Cx, d: &Directive) {
    cx.report.ok(d);
    for c in d.children() {
        match c.name.as_str() {
            "upstream" => crate::upstream::upstream(cx, c, false),
            "map" => crate::directives::map(cx, c),
            _ => {}
        }
    }
    let mut inh = Inh::default();
    let mut lvl = Level::default();
    let mut servers = Vec::new();
    for c in d.children() {
        match c.name.as_str() {
            "upstream" | "map" => {}
            "server" => servers.push(c),
            _ if inherit::take(cx, &mut inh, &mut lvl, c) => {}
            _ => crate::directives::http_directive(cx, c, true),
        }
    }
    if let Some(on) = inh.gzip {
        if on {
            let g = gzip_table(d);
            cx.http.set("gzip", V::T(g));
        }
    }
    let h2c = servers.iter().any(|srv| {
        srv.children().iter().any(|l| {
            l.name == "listen" && l.args().contains(&"http2") && !l.args().contains(&"ssl")
        })
    });
    if !h2c && !servers.is_empty() {
        // nginx speaks HTTP/2 on a plain port only with `listen ... http2`.
        cx.http2.set("h2c", V::B(false));
    }
    for srv in servers {
        crate::server::server(cx, srv, &inh);
    }
}

/// `gzip_*` of the http block: ringx's `[http] gzip`.
fn gzip_table(http: &Directive) -> Vec<(String, V)> {
    let mut t = Vec::new();
    for c in http.children() {
        let a = c.args();
        match c.name.as_str() {
            "gzip_types" => {
                // nginx always compresses text/html besides the listed types.
                let mut types: Vec<V> = vec![s("text/html")];
                types.extend(a.iter().filter(|x| **x != "text/html").map(|x| s(*x)));
                t.push(("types".to_string(), V::A(types)));
            }
            "gzip_min_length" => {
                if let Some(n) = a.first().and_then(|n| values::size_bytes(n)) {
                    t.push(("min_length".to_string(), V::I(n as i64)));
                }
            }
            "gzip_comp_level" => {
                if let Some(n) = a.first().and_then(|n| n.parse::<i64>().ok()) {
                    t.push(("level".to_string(), V::I(n)));
                }
            }
            _ => {}
        }
    }
    if !t.iter().any(|(k, _)| k == "types") {
        // nginx's default gzip_types is text/html alone.
        t.push(("types".to_string(), V::A(vec![s("text/html")])));
    }
    if !t.iter().any(|(k, _)| k == "min_length") {
        t.push(("min_length".to_string(), V::I(20)));
    }
    if !t.iter().any(|(k, _)| k == "level") {
        t.push(("level".to_string(), V::I(1)));
    }
    t
}
