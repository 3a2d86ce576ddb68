//! `Alt-Svc` on a QUIC server's responses over TCP (`alt_svc.rs`), through the test driver:
//! every kind of answer carries the one line, the operator's own line replaces it, and a
//! configuration without `quic` compiles to the same routes as before.

use crate::route::{Action, Canned, Loc, Routes};
use crate::testkit::{get, Harness, Resp, TempDir};
use crate::Compiled;

const ALT: &str = "h3=\":8443\"; ma=86400";

fn config(root: &str) -> String {
    format!(
        r#"
[http]
gzip = {{ types = ["text/plain"], min_length = 10, level = 5 }}
[[server]]
listen = ["127.0.0.1:8443"]
  [[server.location]]
  path = "/"
  return = {{ status = 200, body = "a body long enough to be compressed, compressed, compressed" }}
  [[server.location]]
  path = "= /plain"
  compress = false
  return = {{ status = 200, body = "plain" }}
  [[server.location]]
  path = "/added"
  return = {{ status = 200, body = "added" }}
  add_header = {{ "X-A" = "1" }}
  [[server.location]]
  path = "/own"
  return = {{ status = 200, body = "own" }}
  add_header = {{ "alt-svc" = "h3=\":9\"" }}
  [[server.location]]
  path = "/in-return"
  return = {{ status = 200, body = "in return", headers = {{ "Alt-Svc" = "clear" }} }}
  [[server.location]]
  path = "/silent"
  return = {{ status = 200, body = "silent" }}
  add_header = {{ "Alt-Svc" = "" }}
  [[server.location]]
  path = "/deny"
  return = {{ status = 200, body = "never" }}
  access = ["deny all"]
  [[server.location]]
  path = "/files/"
  alias = "{root}/"
  [[server.location]]
  path = "/up/"
  proxy_pass = "http://127.0.0.1:9001"
[[server]]
listen = ["127.0.0.1:9443"]
  [[server.location]]
  path = "= /only"
  return = {{ status = 200 }}
"#
    )
}

fn alt_svc(r: &Resp) -> Vec<&str> {
    r.headers
        .iter()
        .filter(|(k, _)| k == "alt-svc")
        .map(|(_, v)| v.as_str())
        .collect()
}

fn ask(h: &mut Harness, path: &str) -> Resp {
    let c = h.client();
    h.send(c, &get(path));
    h.response(c)
}

#[test]
fn every_kind_of_answer_carries_one_alt_svc_line() {
    let dir = TempDir::new(&[("f.txt", b"file")]);
    let mut h = Harness::with_quic(&config(dir.path()));
    for (path, status) in [
        ("/", 200),
        ("/plain", 200),
        ("/added", 200),
        ("/deny", 403),
        ("/files/f.txt", 200),
        ("/files/missing", 404),
    ] {
        let r = ask(&mut h, path);
        assert_eq!(r.status, status, "{path}: {r:?}");
        assert_eq!(alt_svc(&r), [ALT], "{path}: {r:?}");
    }
    assert_eq!(ask(&mut h, "/added").header("x-a"), Some("1"));
    // The operator's line instead of ours, or none when it is empty.
    assert_eq!(alt_svc(&ask(&mut h, "/own")), ["h3=\":9\""]);
    assert_eq!(alt_svc(&ask(&mut h, "/in-return")), ["clear"]);
    assert!(alt_svc(&ask(&mut h, "/silent")).is_empty());
    // A request no location takes gets the server's lines, with the server's own port.
    let c = h.client_on(1);
    h.send(c, &get("/other"));
    let r = h.response(c);
    assert_eq!(r.status, 404);
    assert_eq!(alt_svc(&r), ["h3=\":9443\"; ma=86400"]);
}

#[test]
fn proxied_responses_and_their_failures_carry_it() {
    let dir = TempDir::new(&[]);
    let mut h = Harness::with_quic(&config(dir.path()));
    let c = h.client();
    h.send(c, &get("/up/refused"));
    let (u, _) = h.connects().pop().expect("an upstream connect");
    h.upstream_refuses(u);
    let r = h.response(c);
    assert_eq!(r.status, 502, "{r:?}");
    assert_eq!(alt_svc(&r), [ALT]);
    let c = h.client();
    h.send(c, &get("/up/x"));
    let (u, _) = h.accept_upstream();
    h.upstream_got(u);
    h.send(u, b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
    let r = h.response(c);
    assert_eq!((r.status, r.text().as_str()), (200, "ok"));
    assert_eq!(alt_svc(&r), [ALT]);
}

fn compile(text: &str, quic: bool) -> std::sync::Arc<Routes> {
    let mut cfg = ringx_config::parse("t.toml", text).unwrap_or_else(|e| panic!("{e}"));
    for s in &mut cfg.server {
        *s.get_mut().quic.get_mut() = quic;
    }
    Compiled::from(&cfg)
        .unwrap_or_else(|e| panic!("{e}"))
        .routes
}

fn at<'a>(r: &'a Routes, path: &str) -> &'a Loc {
    r.servers[0]
        .locations
        .iter()
        .find(|l| l.path == path)
        .unwrap_or_else(|| panic!("no location {path}"))
}

fn canned(l: &Loc) -> &Canned {
    match &l.action {
        Action::Return(c) => c,
        _ => panic!("not a fixed return"),
    }
}

#[test]
fn the_line_is_compiled_in_and_marked_for_http3_and_nothing_without_quic() {
    let dir = TempDir::new(&[]);
    let text = config(dir.path());
    let line = format!("Alt-Svc: {ALT}\r\n");
    let quic = compile(&text, true);
    // A `return` with nothing else keeps the fast path: the line is in its head, its
    // compressed variant's, and its fields, last.
    let c = canned(at(&quic, "/"));
    assert!(at(&quic, "/").rw.is_none());
    assert!(c.alt_svc && c.head.ends_with(line.as_bytes()));
    assert!(!c.variants.is_empty());
    for (_, v) in &c.variants {
        assert!(v.alt_svc && v.head.ends_with(line.as_bytes()));
    }
    // Elsewhere it is the last `always` line of the location's add_header.
    let added = at(&quic, "/added").rw.as_ref().expect("lines added");
    let a = added.add_header.as_ref().expect("add_header");
    assert!(a.ends_with_alt_svc() && a.sets("x-a"));
    let own = at(&quic, "/own").rw.as_ref().expect("lines added");
    assert!(!own
        .add_header
        .as_ref()
        .expect("add_header")
        .ends_with_alt_svc());
    assert!(!canned(at(&quic, "/in-return")).alt_svc);

    // Without quic: no line anywhere, and the locations as they were.
    let plain = compile(&text, false);
    for l in &plain.servers[0].locations {
        if let Action::Return(c) = &l.action {
            let ours = c.head.windows(line.len()).any(|w| w == line.as_bytes());
            assert!(!c.alt_svc && !ours, "{}", l.path);
        }
        if let Some(a) = l.rw.as_ref().and_then(|rw| rw.add_header.as_ref()) {
            assert!(!a.ends_with_alt_svc());
        }
    }
    assert!(at(&plain, "/").rw.is_none() && at(&plain, "/files/").rw.is_none());
    assert!(plain.servers[0].add_header.is_none() && plain.servers[1].add_header.is_none());
}

#[test]
fn every_port_of_the_server_is_advertised_once() {
    let text = "[[server]]\nlisten = [\"127.0.0.1:443\", \"127.0.0.1:8443\", \"[::]:443\"]\n\
                [[server.location]]\npath = \"/\"\nreturn = { status = 200 }\n";
    let r = compile(text, true);
    let head = String::from_utf8(canned(at(&r, "/")).head.clone()).expect("text");
    assert!(
        head.ends_with("Alt-Svc: h3=\":443\"; ma=86400, h3=\":8443\"; ma=86400\r\n"),
        "{head}"
    );
}
