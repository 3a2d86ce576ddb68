use super::*;

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
