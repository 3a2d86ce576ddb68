use super::*;
use ringx_http::{httparse, parse_request, Limits, Parsed};

fn accept(fields: &str) -> Accept {
    let raw = format!("GET / HTTP/1.1\r\nHost: h\r\n{fields}\r\n");
    let mut h = [httparse::EMPTY_HEADER; 16];
    let limits = Limits {
        max_head: 1 << 20,
        ..Limits::default()
    };
    let Ok(Parsed::Complete(req)) = parse_request(raw.as_bytes(), &mut h, &limits) else {
        panic!("{raw}")
    };
    Accept::of(&req)
}

fn policy(toml: &str) -> Arc<Policy> {
    let cfg = ringx_config::parse(
        "t.toml",
        &format!(
            "[http]\n{toml}\n[[server]]\nlisten = [\"127.0.0.1:18941\"]\n[[server.location]]\npath = \"/\"\nreturn = {{ status = 200 }}\n"
        ),
    )
    .expect("parses");
    Policy::compile(&cfg.http).expect("compression on")
}

#[test]
fn q_values() {
    use Coding::*;
    let a = accept("Accept-Encoding: gzip, br;q=0.5, zstd;q=0\r\n");
    assert_eq!((a.q(Gzip), a.q(Brotli), a.q(Zstd)), (1000, 500, 0));
    let a = accept("Accept-Encoding: *;q=0.2, gzip;q=0\r\n");
    assert_eq!((a.q(Gzip), a.q(Brotli), a.q(Zstd)), (0, 200, 200));
    let a = accept("Accept-Encoding: X-GZIP ; Q=0.75\r\n");
    assert_eq!(a.q(Gzip), 750);
    // Split over two fields; a bad qvalue drops its element only.
    let a = accept("Accept-Encoding: gzip;q=2\r\nAccept-Encoding: br;q=0.001\r\n");
    assert_eq!((a.q(Gzip), a.q(Brotli)), (0, 1));
    let a = accept("Accept-Encoding: identity\r\n");
    assert!(!a.any());
    assert!(!accept("").any());
    for (v, want) in [
        ("1", Some(1000)),
        ("1.000", Some(1000)),
        ("1.001", None),
        ("0.5", Some(500)),
        ("0.", Some(0)),
        ("0.1234", None),
        ("2", None),
        (".5", None),
        ("0.x", None),
    ] {
        assert_eq!(qvalue(v.as_bytes()), want, "{v}");
    }
}

/// A client's Accept-Encoding of hundreds of kilobytes is read in one linear pass, and what
/// it says still counts.
#[test]
fn a_huge_accept_encoding() {
    let mut v = "x-unknown;q=0.1, ".repeat(40_000);
    v.push_str("br;q=0.9");
    let t = std::time::Instant::now();
    let a = accept(&format!("Accept-Encoding: {v}\r\n"));
    assert_eq!(a.q(Coding::Brotli), 900);
    assert!(t.elapsed() < std::time::Duration::from_secs(1));
}

#[test]
fn choosing_a_coding() {
    let p = policy(
        "gzip = { types = [\"text/html\", \"application/*\"], min_length = 100 }\nbrotli = { types = [\"text/html\"] }\nzstd = { types = [\"*\"], min_length = 10 }",
    );
    let name = |a: &str, t: &str, n: Option<u64>| {
        p.choose(&accept(&format!("Accept-Encoding: {a}\r\n")), t, n)
            .map(|c| c.coding.token())
    };
    // Equal q: the server's order (br, zstd, gzip); otherwise the client's q.
    assert_eq!(name("gzip, br, zstd", "text/html", None), Some("br"));
    assert_eq!(
        name("gzip, br;q=0.5, zstd;q=0.4", "text/html", None),
        Some("gzip")
    );
    assert_eq!(
        name("gzip, br", "text/html; charset=utf-8", Some(1000)),
        Some("br")
    );
    assert_eq!(name("gzip", "application/json", Some(1000)), Some("gzip"));
    assert_eq!(
        name("gzip", "application/json", Some(99)),
        None,
        "min_length"
    );
    assert_eq!(name("gzip, zstd", "image/png", Some(99)), Some("zstd"), "*");
    assert_eq!(name("gzip", "image/png", None), None);
    assert_eq!(name("gzip", "applicationx/json", None), None);
    assert_eq!(name("identity", "text/html", None), None);
    assert!(p.varies("text/html") && p.varies("image/png"));
    let p = policy("gzip = {}\ngzip_static = true\nbrotli_static = true");
    assert!(
        p.varies("text/css") && !p.varies("image/png"),
        "the default types"
    );
    assert_eq!(
        p.statics_for(&accept("Accept-Encoding: gzip, br;q=0.5\r\n")),
        vec![Coding::Gzip, Coding::Brotli]
    );
    assert_eq!(
        p.statics_for(&accept("Accept-Encoding: gzip, br\r\n")),
        vec![Coding::Brotli, Coding::Gzip]
    );
}

#[test]
fn vary_is_added_once() {
    assert_eq!(vary_with(None).unwrap(), b"Accept-Encoding");
    assert_eq!(
        vary_with(Some(b"Cookie")).unwrap(),
        b"Cookie, Accept-Encoding"
    );
    assert!(vary_with(Some(b"cookie, accept-encoding")).is_none());
    assert!(vary_with(Some(b"*")).is_none());
}
