//! `ringx check` on the access, limit and cache directives: every bad value is reported at
//! its FILE:LINE:COL with a message that says what to write instead.

use super::parse;

const BASE: &str = "[[server]]\nlisten = [\"127.0.0.1:1\"]\n[[server.location]]\npath = \"/\"\nproxy_pass = \"http://127.0.0.1:2\"\n";

fn err(extra_loc: &str, top: &str) -> String {
    let text = format!("{top}{BASE}{extra_loc}\n");
    match parse("bad.toml", &text) {
        Ok(_) => panic!("accepted:\n{text}"),
        Err(e) => e.to_string(),
    }
}

/// The error is at `line` (1-based, of the whole file) and says `what`.
fn at(e: &str, line: usize, what: &str) {
    assert!(e.starts_with(&format!("bad.toml:{line}:")), "{e}");
    assert!(e.contains(what), "{e}");
}

#[test]
fn bad_access_rules_are_placed() {
    at(
        &err("access = [\"allow 10.0.0.0/33\"]", ""),
        6,
        "prefix length /33",
    );
    at(
        &err("access = [\"allow 10.0.0.1\", \"permit all\"]", ""),
        6,
        "start with \"allow\" or \"deny\"",
    );
    at(
        &err("access = [\"deny 300.1.1.1\"]", ""),
        6,
        "is not an address or prefix",
    );
    at(
        &err("", "[http]\nreal_ip_from = [\"10.0.0.0/8x\"]\n"),
        2,
        "prefix length",
    );
    at(
        &err("", "[http]\nreal_ip_header = \"X Forwarded\"\n"),
        2,
        "not a header name",
    );
}

#[test]
fn bad_limits_are_placed() {
    let zone = "[[limit_req_zone]]\nname = \"z\"\nkey = \"$remote_addr\"\nrate = \"10r/s\"\n";
    at(
        &err(
            "",
            "[[limit_req_zone]]\nname = \"z\"\nkey = \"$remote_addr\"\nrate = \"10/s\"\n",
        ),
        4,
        "invalid rate \"10/s\"",
    );
    at(
        &err(
            "",
            "[[limit_req_zone]]\nname = \"z\"\nkey = \"$remote\"\nrate = \"10r/s\"\n",
        ),
        3,
        "unknown variable $remote",
    );
    at(
        &err("limit_req = { zone = \"nope\" }", zone),
        10,
        "no [[limit_req_zone]] named \"nope\"",
    );
    at(
        &err("limit_req = { zone = \"z\", status = 200 }", zone),
        10,
        "4xx or 5xx",
    );
    at(
        &err(
            "limit_req = { zone = \"z\", escalate = { after = 5, block_for = \"1m\" } }",
            zone,
        ),
        10,
        "needs an [xdp] section",
    );
    at(
        &err(
            "",
            &format!("{zone}[[limit_req_zone]]\nname = \"z\"\nkey = \"$uri\"\nrate = \"1r/m\"\n"),
        ),
        6,
        "already defined at line 2",
    );
    at(
        &err(
            "limit_conn = { zone = \"c\", max = 0 }",
            "[[limit_conn_zone]]\nname = \"c\"\nkey = \"$remote_addr\"\n",
        ),
        9,
        "at least 1",
    );
}

#[test]
fn cluster_scope_is_checked_and_placed() {
    let z = "[[limit_req_zone]]\nname = \"z\"\nkey = \"$remote_addr\"\nrate = \"10r/s\"\n";
    let cl = "[cluster]\nredis = [\"127.0.0.1:6379\"]\n";
    at(
        &err("", &format!("{z}scope = \"cluster\"\n")),
        5,
        "needs a [cluster] section",
    );
    at(
        &err("", &format!("{z}cluster_fallback = \"open\"\n")),
        5,
        "cluster_fallback is for a zone with scope = \"cluster\"",
    );
    at(
        &err(
            "",
            &format!("{cl}{z}scope = \"cluster\"\ncluster_sync = \"2s\"\n"),
        ),
        8,
        "between 5ms and 1s",
    );
    at(
        &err("", &format!("{cl}{z}scope = \"everywhere\"\n")),
        7,
        "unknown variant",
    );
    at(
        &err(
            "",
            &format!("{cl}{z}scope = \"cluster\"\ncluster_fallback = \"maybe\"\n"),
        ),
        8,
        "unknown variant",
    );
    let text = format!(
        "{cl}{z}scope = \"cluster\"\ncluster_fallback = \"closed\"\ncluster_sync = \"50ms\"\n\
         [[limit_conn_zone]]\nname = \"c\"\nkey = \"$remote_addr\"\nscope = \"cluster\"\n{BASE}"
    );
    let cfg = parse("ok.toml", &text).unwrap();
    let c = cfg.limit_req_zone[0].get_ref().cluster().unwrap();
    assert_eq!(c.fallback, crate::guard::Fallback::Closed);
    assert_eq!(c.sync_every, std::time::Duration::from_millis(50));
    let c = cfg.limit_conn_zone[0].get_ref().cluster().unwrap();
    assert_eq!(c.fallback, crate::guard::Fallback::Local);
    assert_eq!(c.sync_every, crate::guard::DEFAULT_CLUSTER_SYNC);
    let local = parse("ok.toml", &format!("{z}scope = \"local\"\n{BASE}")).unwrap();
    assert_eq!(local.limit_req_zone[0].get_ref().cluster(), None);
}

#[test]
fn bad_auth_is_placed() {
    at(
        &err(
            "auth_basic = { realm = \"r\", user_file = \"/nonexistent/htpasswd\" }",
            "",
        ),
        6,
        "/nonexistent/htpasswd",
    );
    let dir = std::env::temp_dir().join(format!("ringx-policy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("users");
    std::fs::write(&f, "ok:$6$s$h\nold:{SHA}qUqP5cyxm6YcTAhz05Hph5gvu9M=\n").unwrap();
    let e = err(
        &format!(
            "auth_basic = {{ realm = \"r\", user_file = \"{}\" }}",
            f.display()
        ),
        "",
    );
    at(&e, 6, "line 2: user \"old\": {SHA}");
    std::fs::remove_dir_all(&dir).unwrap();
    at(
        &err("auth_request = { proxy_pass = \"nope\", uri = \"/a\" }", ""),
        6,
        "no [[upstream]] named \"nope\"",
    );
    at(
        &err(
            "auth_request = { proxy_pass = \"http://127.0.0.1:3\", uri = \"a b\" }",
            "",
        ),
        6,
        "must be a path",
    );
}

#[test]
fn bad_cache_directives_are_placed() {
    let path = "[[proxy_cache_path]]\nname = \"c\"\npath = \"/tmp/ringx-policy-cache\"\n";
    at(
        &err("proxy_cache = { zone = \"x\" }", path),
        9,
        "no [[proxy_cache_path]] named \"x\"",
    );
    at(
        &err(
            "proxy_cache = { zone = \"c\", valid = { \"2OO\" = \"1m\" } }",
            path,
        ),
        9,
        "list statuses",
    );
    at(
        &err(
            "proxy_cache = { zone = \"c\", use_stale = [\"often\"] }",
            path,
        ),
        9,
        "use_stale \"often\"",
    );
    at(
        &err("proxy_cache = { zone = \"c\", methods = [\"POST\"] }", path),
        9,
        "cannot be cached",
    );
    at(
        &err(
            "",
            "[[proxy_cache_path]]\nname = \"c\"\npath = \"relative\"\n",
        ),
        3,
        "absolute path",
    );
    at(
        &err(
            "",
            "[[proxy_cache_path]]\nname = \"c\"\npath = \"/nonexistent/a/b\"\n",
        ),
        3,
        "neither it nor its parent",
    );
    let ok = format!("{path}{BASE}proxy_cache = {{ zone = \"c\" }}\n");
    parse("ok.toml", &ok).expect("a plain cache parses");
    let no_proxy = format!(
        "{path}[[server]]\nlisten = [\"127.0.0.1:1\"]\n[[server.location]]\npath = \"/\"\nreturn = {{ status = 200 }}\nproxy_cache = {{ zone = \"c\" }}\n"
    );
    let e = parse("bad.toml", &no_proxy).unwrap_err().to_string();
    at(&e, 9, "has no proxy_pass");
}
