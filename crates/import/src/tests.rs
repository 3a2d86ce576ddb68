//! Translations checked by ringx's own configuration parser, and their reports.

use crate::{import, Fate, Options};

struct Tmp(std::path::PathBuf);
impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn run(name: &str, conf: &str) -> (String, crate::Report, Tmp) {
    let dir = std::env::temp_dir().join(format!("ringx-import-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("www")).unwrap();
    let conf = conf.replace("@DIR@", &dir.display().to_string());
    std::fs::write(dir.join("nginx.conf"), conf).unwrap();
    let out = import(
        &dir.join("nginx.conf"),
        Options {
            prefix: dir.clone(),
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    if let Err(e) = ringx_config::parse("out.toml", &out.toml) {
        panic!("{e}\n{}", out.toml);
    }
    (out.toml, out.report, Tmp(dir))
}

fn fate(r: &crate::Report, line: usize, name: &str) -> Fate {
    r.notes
        .iter()
        .find(|n| n.place.ends_with(&format!("nginx.conf:{line}")) && n.directive == name)
        .unwrap_or_else(|| panic!("no note for line {line}: {r:?}"))
        .fate
}

#[test]
fn a_proxy_site_with_an_upstream_and_inherited_headers() {
    let (toml, r, _t) = run(
        "proxy",
        "worker_processes 2;\n\
         http {\n\
           upstream app { server 127.0.0.1:9000 weight=2 max_fails=3 fail_timeout=5s; server 127.0.0.1:9001 backup; least_conn; }\n\
           add_header X-Frame-Options DENY;\n\
           server {\n\
             listen 127.0.0.1:8080 default_server;\n\
             server_name .example.com;\n\
             root @DIR@/www;\n\
             location /api/ { proxy_pass http://app; proxy_set_header X-Real-IP $remote_addr; proxy_read_timeout 30s; }\n\
             location = /old { return 301 /new; }\n\
             location ~* \\.(png)$ { expires 1h; }\n\
             location /x { if ($arg_a) { return 403; } }\n\
           }\n\
         }\n",
    );
    assert!(toml.contains("zones = 2"), "{toml}");
    assert!(toml.contains("balance = \"least_conn\""), "{toml}");
    assert!(toml.contains("read_timeout = \"30s\""), "{toml}");
    assert!(
        toml.contains("server_name = [\"example.com\", \"*.example.com\"]"),
        "{toml}"
    );
    assert!(toml.contains("proxy_host = \"app\""), "{toml}");
    assert!(toml.contains("forwarded_headers = false"), "{toml}");
    assert!(toml.contains("X-Real-IP = \"$remote_addr\""), "{toml}");
    assert!(toml.contains("X-Frame-Options = \"DENY\""), "{toml}");
    assert!(toml.contains("Cache-Control = \"max-age=3600\""), "{toml}");
    assert!(
        toml.contains("return = { status = 301, location = \"/new\" }"),
        "{toml}"
    );
    assert!(
        toml.contains("# ") && toml.contains("nginx.conf:9"),
        "{toml}"
    );
    assert_eq!(fate(&r, 11, "expires"), Fate::Approximated); // expires
    assert_eq!(fate(&r, 12, "if"), Fate::Refused); // if
    assert!(r.count(Fate::Translated) > 10);
    assert!(r.render().ends_with(&format!(
        "translated {}, approximated {}, refused {}, irrelevant {}\n",
        r.count(Fate::Translated),
        r.count(Fate::Approximated),
        r.count(Fate::Refused),
        r.count(Fate::Irrelevant)
    )));
}

#[test]
fn a_server_return_answers_everything_and_its_locations_are_unreachable() {
    let (toml, r, _t) = run(
        "redirect",
        "http {\n server {\n  listen 127.0.0.1:8081;\n  return 301 https://$host$request_uri;\n  location / { root /tmp; }\n }\n}\n",
    );
    assert!(toml.contains("return = { status = 301, location = \"https://$host$request_uri\" }"));
    assert!(!toml.contains("root"), "{toml}");
    assert_eq!(fate(&r, 5, "location"), Fate::Refused);
    // nginx's redirect carries its HTML page; ringx's is empty: said at the return's line.
    assert_eq!(fate(&r, 4, "return"), Fate::Approximated);
}

#[test]
fn sni_routing_through_a_map_becomes_a_stream_sni_table() {
    let (toml, r, _t) = run(
        "sni",
        "stream {\n\
           map $ssl_preread_server_name $name {\n\
             backend.example.com backend;\n\
             ~^w backend;\n\
             default backend2;\n\
           }\n\
           upstream backend { server 127.0.0.1:12345; }\n\
           upstream backend2 { server 127.0.0.1:12346; }\n\
           server { listen 127.0.0.1:12347; proxy_pass $name; ssl_preread on; }\n\
           server { listen 127.0.0.1:53 udp; proxy_pass 127.0.0.1:5353; proxy_timeout 20s; proxy_responses 1; }\n\
         }\n",
    );
    assert!(
        toml.contains("sni = { \"backend.example.com\" = \"backend\" }"),
        "{toml}"
    );
    assert!(toml.contains("proxy_pass = \"backend2\""), "{toml}");
    assert!(toml.contains("protocol = \"udp\""), "{toml}");
    assert!(toml.contains("idle_timeout = \"20s\""), "{toml}");
    // The regex entry is left out, and said so.
    assert_eq!(fate(&r, 9, "proxy_pass"), Fate::Approximated);
}

#[test]
fn unparsable_input_is_an_error_at_its_line() {
    let dir = std::env::temp_dir().join(format!("ringx-import-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("nginx.conf"), "http {\n server {\n").unwrap();
    let e = import(&dir.join("nginx.conf"), Options::default()).unwrap_err();
    assert_eq!(e.line, 3, "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn toml_strings_are_escaped() {
    assert_eq!(
        crate::emit::quote("a\"b\\c\nd\u{1}"),
        "\"a\\\"b\\\\c\\nd\\u0001\""
    );
    assert_eq!(crate::emit::key("X-Frame"), "X-Frame");
    assert_eq!(crate::emit::key("500 502"), "\"500 502\"");
}

#[test]
fn the_client_s_suite_order_decides_as_in_nginx_unless_the_server_s_is_asked_for() {
    let site = |extra: &str| {
        format!(
            "http {{\n {extra}\n server {{\n  listen 127.0.0.1:8443 ssl;\n  ssl_certificate @DIR@/c.pem;\n  ssl_certificate_key @DIR@/c.key;\n  return 200 ok;\n }}\n}}\n"
        )
    };
    let (toml, _, _t) = run("order-default", &site(""));
    assert!(toml.contains("prefer_server_ciphers = false"), "{toml}");
    let (toml, _, _t) = run("order-on", &site("ssl_prefer_server_ciphers on;"));
    assert!(toml.contains("prefer_server_ciphers = true"), "{toml}");
    let (toml, _, _t) = run(
        "order-plain",
        "http {\n server {\n  listen 127.0.0.1:8080;\n  return 200 ok;\n }\n}\n",
    );
    assert!(!toml.contains("prefer_server_ciphers"), "{toml}");
}
