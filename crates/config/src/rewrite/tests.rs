use super::*;
use crate::parse;

fn cfg(locs: &str) -> String {
    format!("[[server]]\nlisten = [\"127.0.0.1:18080\"]\n{locs}")
}

fn err_of(text: &str) -> String {
    parse("bad.toml", text).unwrap_err().to_string()
}

#[test]
fn location_paths_take_nginx_modifiers() {
    use PathMatch::*;
    assert_eq!(
        PathMatch::parse("/a/", false).unwrap(),
        Prefix("/a/".into())
    );
    assert_eq!(PathMatch::parse("/a", true).unwrap(), Exact("/a".into()));
    assert_eq!(PathMatch::parse("= /a", false).unwrap(), Exact("/a".into()));
    assert_eq!(
        PathMatch::parse("^~ /s/", false).unwrap(),
        PrefixStop("/s/".into())
    );
    assert_eq!(
        PathMatch::parse("~ ^/api/v[0-9]+/", false).unwrap(),
        Regex {
            pattern: "^/api/v[0-9]+/".into(),
            caseless: false
        }
    );
    assert_eq!(
        PathMatch::parse("~*\\.(png|jpg)$", false).unwrap(),
        Regex {
            pattern: "\\.(png|jpg)$".into(),
            caseless: true
        }
    );
    assert_eq!(
        PathMatch::parse("@app", false).unwrap(),
        Named("@app".into())
    );
    for bad in ["x", "~ (", "@", "= x", "^~ x"] {
        assert!(PathMatch::parse(bad, false).is_err(), "{bad}");
    }
    assert!(PathMatch::parse("~ a", true).is_err());
}

/// A regex bomb is refused at load, at the value's FILE:LINE:COL, by the size limit.
#[test]
fn a_regex_bomb_is_refused_at_its_place() {
    let e = err_of(&cfg(
        "[[server.location]]\npath = \"~ (a{1000}){1000}\"\nreturn = { status = 204 }\n",
    ));
    assert!(e.starts_with("bad.toml:4:8: "), "{e}");
    assert!(e.contains("too large once compiled"), "{e}");
    let e = err_of(&cfg(
        "[[server.location]]\npath = \"/\"\nrewrite = [\"((((x{500}){500}){500})) /y\"]\nreturn = { status = 204 }\n",
    ));
    assert!(
        e.starts_with("bad.toml:5:12: ") && e.contains("too large"),
        "{e}"
    );
    let e = err_of(&cfg(
        "[[server.location]]\npath = \"~ (?<=a)b\"\nreturn = { status = 204 }\n",
    ));
    assert!(
        e.contains("invalid regex") && e.contains("look-around"),
        "{e}"
    );
}

#[test]
fn rewrite_rules_parse_and_check_their_captures() {
    let r = RewriteRule::parse("^/old/(.*)$ /new/$1 permanent").unwrap();
    assert_eq!(r.flag, Flag::Permanent);
    assert_eq!(RewriteRule::parse("^/a /b").unwrap().flag, Flag::Continue);
    for (bad, why) in [
        ("^/a", "must be \"REGEX REPLACEMENT"),
        ("^/a /b c d", "must be \"REGEX REPLACEMENT"),
        ("^/a /b forever", "unknown flag"),
        ("^/(a) /$2", "$2 refers to a capture"),
        ("^/a b", "must be a path"),
        ("^/a /$nope", "unknown variable"),
    ] {
        let e = RewriteRule::parse(bad).unwrap_err();
        assert!(e.contains(why), "{bad}: {e}");
    }
    assert!(RewriteRule::parse("^ https://$host$request_uri").is_ok());
}

#[test]
fn templates_name_only_captures_that_exist() {
    let ok = cfg("[[server.location]]\npath = \"~ ^/u/(\\\\w+)\"\nreturn = { status = 302, location = \"/user?id=$1\" }\n");
    parse("ok.toml", &ok).unwrap();
    let e = err_of(&cfg(
        "[[server.location]]\npath = \"/u/\"\nreturn = { status = 302, location = \"/x/$1\" }\n",
    ));
    assert!(e.contains("matches no regex"), "{e}");
    let e = err_of(&cfg(
        "[[server.location]]\npath = \"/\"\nreturn = { status = 200 }\nadd_header = { \"X-A\" = \"$bogus\" }\n",
    ));
    assert!(
        e.starts_with("bad.toml:6:16: ") && e.contains("unknown variable $bogus"),
        "{e}"
    );
}

#[test]
fn header_directives_are_checked() {
    let e = err_of(&cfg(
        "[[server.location]]\npath = \"/\"\nreturn = { status = 200 }\nadd_header = { \"Content-Length\" = \"1\" }\n",
    ));
    assert!(e.contains("cannot set \"Content-Length\""), "{e}");
    let e = err_of(&cfg(
        "[[server.location]]\npath = \"/\"\nreturn = { status = 200 }\nadd_header = { \"X\" = 5 }\n",
    ));
    assert!(e.contains("a header value: a string, or"), "{e}");
    let e = err_of(&cfg(
        "[[server.location]]\npath = \"/\"\nreturn = { status = 200 }\nproxy_set_header = { \"X\" = \"y\" }\n",
    ));
    assert!(e.contains("apply to a proxy_pass location"), "{e}");
    // nginx's WebSocket idiom loads (ringx handles upgrades itself).
    parse(
        "ok.toml",
        &cfg("[[server.location]]\npath = \"/\"\nproxy_pass = \"http://127.0.0.1:9\"\nproxy_set_header = { \"Upgrade\" = \"$http_upgrade\", \"Connection\" = \"upgrade\", \"Host\" = \"$host\" }\n"),
    )
    .unwrap();
}

#[test]
fn proxy_pass_uri_parts() {
    use crate::upstream::split_uri;
    assert_eq!(split_uri("http://app/v2/"), ("http://app", Some("/v2/")));
    assert_eq!(
        split_uri("http://10.0.0.1:80/"),
        ("http://10.0.0.1:80", Some("/"))
    );
    assert_eq!(
        split_uri("http://10.0.0.1:80"),
        ("http://10.0.0.1:80", None)
    );
    assert_eq!(split_uri("app"), ("app", None));
    let ups = "[[upstream]]\nname = \"app\"\nservers = [\"127.0.0.1:9\"]\n";
    let ok = format!(
        "{ups}{}",
        cfg("[[server.location]]\npath = \"/api/\"\nproxy_pass = \"http://app/v2/\"\n")
    );
    parse("ok.toml", &ok).unwrap();
    let e = err_of(&format!(
        "{ups}{}",
        cfg("[[server.location]]\npath = \"~ ^/api/\"\nproxy_pass = \"http://app/v2/\"\n")
    ));
    assert!(e.contains("cannot have a URI part"), "{e}");
}

#[test]
fn error_pages_and_try_files() {
    let e = err_of(&cfg(
        "error_page = { \"404 99\" = \"/e.html\" }\n[[server.location]]\npath = \"/\"\nreturn = { status = 200 }\n",
    ));
    assert!(
        e.starts_with("bad.toml:3:16: ") && e.contains("\"99\" is not an error status"),
        "{e}"
    );
    let e = err_of(&cfg(
        "[[server.location]]\npath = \"/\"\nreturn = { status = 200 }\nerror_page = { \"404\" = \"@gone\" }\n",
    ));
    assert!(e.contains("\"@gone\" names no location"), "{e}");
    let e = err_of(&cfg(
        "[[server.location]]\npath = \"/\"\nreturn = { status = 200 }\nerror_page = { \"404\" = \"/a b\\r\\n.html\" }\n",
    ));
    assert!(
        e.starts_with("bad.toml:6:") && e.contains("a space or a control character"),
        "{e}"
    );
    let dir = std::env::temp_dir();
    let e = err_of(&cfg(&format!(
        "[[server.location]]\npath = \"/\"\nroot = \"{}\"\ntry_files = [\"$uri\"]\n",
        dir.display()
    )));
    assert!(e.contains("at least two entries"), "{e}");
    let e = err_of(&cfg(
        "[[server.location]]\npath = \"/\"\nproxy_pass = \"http://127.0.0.1:9\"\ntry_files = [\"$uri\", \"/i\"]\n",
    ));
    assert!(e.contains("give it `root`"), "{e}");
    parse(
        "ok.toml",
        &cfg(&format!(
            "error_page = {{ \"500 502 503 504\" = \"/50x.html\", \"403\" = \"=200 /ok\" }}\n[[server.location]]\npath = \"/\"\nroot = \"{}\"\ntry_files = [\"$uri\", \"$uri/\", \"@app\"]\n[[server.location]]\npath = \"@app\"\nproxy_pass = \"http://127.0.0.1:9\"\n",
            dir.display()
        )),
    )
    .unwrap();
}

#[test]
fn compression_and_error_log_settings() {
    let loc = "[[server.location]]\npath = \"/\"\nreturn = { status = 200 }\n";
    let e = err_of(&format!("[http]\ngzip = {{ level = 10 }}\n{}", cfg(loc)));
    assert!(
        e.starts_with("bad.toml:2:18: ") && e.contains("between 1 and 9"),
        "{e}"
    );
    let e = err_of(&format!(
        "[http]\nbrotli = {{ types = [\"html\"] }}\n{}",
        cfg(loc)
    ));
    assert!(e.contains("\"html\" is not a MIME type"), "{e}");
    let e = err_of(&format!("[http]\ngzip = {{ lvl = 1 }}\n{}", cfg(loc)));
    assert!(e.contains("unknown field"), "{e}");
    let c = parse(
        "ok.toml",
        &format!(
            "[http]\ngzip = {{}}\nbrotli = {{ level = 0 }}\n{}",
            cfg(loc)
        ),
    )
    .unwrap();
    assert_eq!(c.http.gzip.unwrap().level_or(5), 5);
    let e = err_of(&format!("[runtime]\nlog_level = \"loud\"\n{}", cfg(loc)));
    assert!(
        e.starts_with("bad.toml:2:13: ") && e.contains("notice"),
        "{e}"
    );
    let e = err_of(&format!("[runtime]\nerror_log = \"rel.log\"\n{}", cfg(loc)));
    assert!(e.contains("absolute path"), "{e}");
    let e = err_of(&format!(
        "[runtime]\nerror_log = \"/nonexistent-dir/e.log\"\n{}",
        cfg(loc)
    ));
    assert!(e.contains("directory does not exist"), "{e}");
    parse(
        "ok.toml",
        &format!(
            "[runtime]\nerror_log = \"stderr\"\nlog_level = \"notice\"\n{}",
            cfg(loc)
        ),
    )
    .unwrap();
}
