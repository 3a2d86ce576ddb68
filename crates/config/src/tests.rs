use super::*;
use crate::error::line_col;

#[test]
fn default_config_is_valid() {
    let c = parse("default", DEFAULT_CONFIG).unwrap();
    assert_eq!(c.server.len(), 1);
}

#[test]
fn issue_example_parses() {
    let dir = std::env::temp_dir();
    let text = format!(
        r#"
[runtime]
zones = 1
cpus = [0]
engine = "uring"
[[server]]
listen = ["127.0.0.1:8080"]
server_name = ["example.com"]
  [[server.location]]
  path = "/"
  return = {{ status = 200, body = "hello\n" }}
  [[server.location]]
  path = "/static/"
  root = "{}"
"#,
        dir.display()
    );
    let c = parse("t.toml", &text).unwrap();
    assert_eq!(*c.runtime.zones.unwrap().get_ref(), 1);
}

fn err_of(text: &str) -> String {
    parse("bad.toml", text).unwrap_err().to_string()
}

#[test]
fn errors_point_at_file_line_col() {
    let e = err_of("[runtime]\nengine = \"kqueue\"\n");
    assert!(e.starts_with("bad.toml:2:10: "), "{e}");
    let e = err_of("[[server]]\nlisten = [\"127.0.0.1:99999\"]\n[[server.location]]\npath=\"/\"\nreturn={status=200}\n");
    assert!(e.starts_with("bad.toml:2:"), "{e}");
    let e = err_of("[[server]]\nlisten = [\"127.0.0.1:80\"]\n[[server.location]]\npath=\"x\"\nreturn={status=200}\n");
    assert!(
        e.starts_with("bad.toml:4:6: ") && e.contains("must start with '/'"),
        "{e}"
    );
    let e = err_of("[http]\nkeepalive_timeout = \"3 days\"\n");
    assert!(
        e.starts_with("bad.toml:2:") && e.contains("duration"),
        "{e}"
    );
    let e = err_of("[runtime]\nzonez = 3\n");
    assert!(
        e.starts_with("bad.toml:2:1: ") && e.contains("unknown field"),
        "{e}"
    );
    let e = err_of("[[server]]\nlisten = [\"127.0.0.1:80\"]\n[[server.location]]\npath=\"/\"\n");
    assert!(e.contains("needs one of"), "{e}");
    let e = err_of("[runtime]\nzones = 2\ncpus = [0]\n");
    assert!(e.starts_with("bad.toml:3:8: "), "{e}");
    let e = err_of("[runtime]\nsqpoll = true\nsqpoll_cpu = 100000\n");
    assert!(
        e.starts_with("bad.toml:3:14: ") && e.contains("sqpoll_cpu 100000 is not available"),
        "{e}"
    );
    let e = err_of("");
    assert!(e.contains("no [[server]]"), "{e}");
    let e = err_of("[[server]]\nlisten = [\"127.0.0.1:80\"]\n[[server.location]]\npath=\"/\"\nroot=\"/nonexistent/dir\"\n");
    assert!(
        e.starts_with("bad.toml:5:6: ") && e.contains("No such file"),
        "{e}"
    );
}

#[test]
fn ops_settings() {
    let base = "[[server]]\nlisten = [\"127.0.0.1:1\"]\n[[server.location]]\npath = \"/\"\nreturn = { status = 200 }\n";
    let c = parse("t", base).unwrap();
    assert_eq!(c.runtime.busy_poll_us, 0);
    assert!(c.admin.is_none() && c.http.access_log.is_none());
    let c = parse(
        "t",
        &format!("[runtime]\nbusy_poll_us = -1\n[admin]\nlisten = \"127.0.0.1:9901\"\n[http]\naccess_log = \"/tmp/a.log\"\naccess_log_format = \"json\"\n{base}"),
    )
    .unwrap();
    assert_eq!(
        super::ops::busy_poll(c.runtime.busy_poll_us),
        std::time::Duration::MAX
    );
    assert_eq!(c.http.access_log_format, super::ops::LogFormat::Json);
    let e = parse("t", &format!("[http]\naccess_log = \"rel.log\"\n{base}")).unwrap_err();
    assert_eq!((e.line, e.col), (2, 14), "{e}");
    assert!(e.message.contains("absolute"), "{e}");
    let e = parse(
        "t",
        &format!("[http]\naccess_log = \"/no/such/dir/a.log\"\n{base}"),
    )
    .unwrap_err();
    assert!(e.message.contains("directory does not exist"), "{e}");
    assert!(parse("t", &format!("[runtime]\nbusy_poll_us = -2\n{base}")).is_err());
    let e = parse("t", &format!("[admin]\nlisten = \"nope\"\n{base}")).unwrap_err();
    assert_eq!(e.line, 2, "{e}");
}

#[test]
fn auth_threads_default_to_two_and_are_bounded() {
    let base = "[[server]]\nlisten = [\"127.0.0.1:1\"]\n[[server.location]]\npath = \"/\"\nreturn = { status = 200 }\n";
    assert_eq!(*parse("t", base).unwrap().runtime.auth_threads.get_ref(), 2);
    let c = parse("t", &format!("[runtime]\nauth_threads = 0\n{base}")).unwrap();
    assert_eq!(*c.runtime.auth_threads.get_ref(), 0);
    let e = parse("t", &format!("[runtime]\nauth_threads = 65\n{base}")).unwrap_err();
    assert_eq!((e.line, e.col), (2, 16), "{e}");
    assert!(e.message.contains("between 0"), "{e}");
}

/// Issue 26: each of these was accepted. (config text, the offending entry: the error must point
/// at the last place this text occurs, words of the message)
#[test]
fn ambiguous_or_injecting_servers_are_refused() {
    let srv = |extra: &str, ret: &str| {
        format!(
            "[[server]]\nlisten = [\"127.0.0.1:80\"]\n{extra}[[server.location]]\npath = \"/\"\nreturn = {ret}\n"
        )
    };
    let ok = srv("", "{ status = 200 }");
    let table: Vec<(String, &str, &str)> = vec![
        (
            srv("", "{ status = 301, location = \"/x\\r\\nSet-Cookie: a=b\" }"),
            "\"/x\\r",
            "return location \"/x\\r\\nSet-Cookie: a=b\" contains a control character",
        ),
        (
            srv("", "{ status = 200, content_type = \"text/html\\nX: y\" }"),
            "\"text/html\\n",
            "return content_type",
        ),
        (
            srv("", "{ status = 200, content_type = \"text/html\\u0000\" }"),
            "\"text/html\\u0000",
            "control character",
        ),
        (
            srv("", "{ status = 200, headers = { \"Content-Length\" = \"0\" } }"),
            "\"Content-Length\"",
            "header \"Content-Length\" cannot be set in `headers`",
        ),
        (
            srv("", "{ status = 200, headers = { transfer-encoding = \"chunked\" } }"),
            "transfer-encoding",
            "cannot be set",
        ),
        (
            srv("", "{ status = 200, headers = { Connection = \"close\" } }"),
            "Connection",
            "cannot be set",
        ),
        (
            srv("", "{ status = 200, headers = { X = \"a\\rb\" } }"),
            "X =",
            "invalid header",
        ),
        (srv("", "{ status = 600 }"), "600", "return status 600 must be between 200 and 599"),
        (srv("", "{ status = 99 }"), "99", "must be between 200 and 599"),
        (srv("", "{ status = 101 }"), "101", "must be between 200 and 599"),
        (
            format!("{ok}[[server.location]]\npath = \"/\"\nreturn = {{ status = 204 }}\n"),
            "\"/\"\nreturn = { status = 204",
            "duplicate location \"/\" in this server: already defined at line 4",
        ),
        (
            format!(
                "{ok}[[server.location]]\npath = \"/a\"\nexact = true\nreturn = {{ status = 204 }}\n\
                 [[server.location]]\npath = \"/a\"\nexact = true\nroot = \"/\"\n"
            ),
            "\"/a\"\nexact = true\nroot",
            "duplicate location \"/a\" (exact) in this server: already defined at line 7",
        ),
        (
            format!("{}{}", srv("server_name = [\"a.test\"]\n", "{ status = 200 }"),
                    srv("server_name = [\"b.test\", \"A.Test\"]\n", "{ status = 200 }")),
            "\"A.Test\"",
            "server_name \"A.Test\" on 127.0.0.1:80 is already claimed by the server at line 3",
        ),
        (
            format!("{}{}", srv("default = true\n", "{ status = 200 }"),
                    srv("default = true\n", "{ status = 200 }")),
            "true",
            "a second default server on 127.0.0.1:80: the server at line 3 is already its default",
        ),
    ];
    for (text, entry, words) in &table {
        let (line, col) = line_col(text, text.rfind(entry).expect("the entry is in the text"));
        let e = err_of(text);
        assert!(
            e.starts_with(&format!("bad.toml:{line}:{col}: ")) && e.contains(words),
            "want {line}:{col}: ...{words}...\ngot  {e}\nfor\n{text}"
        );
    }
}

/// What the checks above must still let through.
#[test]
fn unambiguous_servers_pass() {
    let dir = std::env::temp_dir();
    let text = format!(
        r#"
[[server]]
listen = ["127.0.0.1:80", "127.0.0.1:81", "127.0.0.1:80"]
server_name = ["a.test", "*.a.test"]
default = true
  [[server.location]]
  path = "/"
  return = {{ status = 302, location = "https://a.test/", content_type = "text/html; charset=utf-8", headers = {{ X-Frame-Options = "DENY", Cache-Control = "no-store" }} }}
  [[server.location]]
  path = "/"
  exact = true
  return = {{ status = 599 }}
  [[server.location]]
  path = "/s/"
  root = "{}"
[[server]]
listen = ["127.0.0.1:80"]
server_name = ["b.test"]
  [[server.location]]
  path = "/"
  return = {{ status = 200 }}
[[server]]
listen = ["127.0.0.1:81"]
server_name = ["b.test"]
  [[server.location]]
  path = "/"
  return = {{ status = 200 }}
[[server]]
listen = ["127.0.0.1:82"]
server_name = ["a.test"]
default = true
  [[server.location]]
  path = "/"
  return = {{ status = 200 }}
"#,
        dir.display()
    );
    parse("t.toml", &text).unwrap();
}

/// UDP streams and transparent proxying: what is refused, and where.
#[test]
fn udp_and_transparent_checks() {
    let udp = "[[stream]]\nlisten = [\"127.0.0.1:53\"]\nprotocol = \"udp\"\nproxy_pass = \"127.0.0.1:5353\"\n";
    let c = parse("t.toml", udp).unwrap();
    assert_eq!(
        c.stream[0].get_ref().idle(),
        std::time::Duration::from_secs(30)
    );
    let cases: &[(&str, &str, &str)] = &[
        (udp, "tls = { cert = \"/x.pem\", key = \"/x.key\" }\n", "DTLS is not supported"),
        (udp, "proxy_protocol = true\n", "for TCP streams"),
        (udp, "max_datagram_size = 70000\n", "65507"),
        (udp, "max_sessions = 0\n", "between 1 and 1000000"),
        (udp, "transparent = true\n", "transparent is for TCP listeners"),
        (udp, "bind = \"10.0.0.1\"\n", "the only value is \"client\""),
        (
            "[[stream]]\nlisten = [\"127.0.0.1:53\"]\nproxy_pass = \"127.0.0.1:5353\"\n",
            "responses = 1\n",
            "responses is for UDP streams",
        ),
        (
            udp,
            "[[stream]]\nlisten = [\"127.0.0.1:53\"]\nprotocol = \"udp\"\nproxy_pass = \"127.0.0.1:5354\"\n",
            "already another UDP stream's address",
        ),
        (
            udp,
            "[tproxy]\n[[tproxy.divert]]\nports = [80]\nto = \"127.0.0.1:53\"\n",
            "not a transparent listen address",
        ),
        (udp, "[tproxy]\ntable = 254\n", "free routing table"),
        (
            "[runtime]\nuser = \"root\"\n",
            &format!("{udp}bind = \"client\"\n"),
            "needs CAP_NET_ADMIN after privileges are dropped",
        ),
    ];
    for (base, extra, want) in cases {
        let e = err_of(&format!("{base}{extra}"));
        assert!(
            e.starts_with("bad.toml:") && e.contains(want),
            "{extra:?}: {e}"
        );
    }
    // A UDP and a TCP stream may share an address; a transparent TCP stream takes a divert.
    let ok = format!(
        "{udp}[[stream]]\nlisten = [\"127.0.0.1:53\"]\nproxy_pass = \"127.0.0.1:5353\"\n\
         transparent = true\n[tproxy]\n[[tproxy.divert]]\nports = [53]\nto = \"127.0.0.1:53\"\n"
    );
    parse("t.toml", &ok).unwrap();
}

/// A TLS scheme (`https://`, `grpcs://`) naming an `[[upstream]]` without `tls` is refused
/// where it is written; with `tls`, or with the plain scheme, it loads.
#[test]
fn tls_scheme_to_an_upstream_without_tls_is_refused() {
    let conf = |up_extra: &str, target: &str| {
        format!(
            "[[upstream]]\nname = \"app\"\nservers = [\"127.0.0.1:9000\"]\n{up_extra}\
             [[server]]\nlisten = [\"127.0.0.1:8080\"]\n[[server.location]]\npath = \"/\"\n\
             proxy_pass = \"{target}\"\n"
        )
    };
    for (target, plain) in [("grpcs://app", "grpc://app"), ("https://app", "http://app")] {
        let e = err_of(&conf("", target));
        assert!(
            e.starts_with("bad.toml:8:14: ")
                && e.contains("has no tls")
                && e.contains(&format!("{plain:?}")),
            "{target}: {e}"
        );
        parse("t.toml", &conf("tls = {}\n", target)).unwrap();
        parse("t.toml", &conf("", plain)).unwrap();
    }
}
