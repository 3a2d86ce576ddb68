use crate::error::line_col;
use crate::quic::Retry;
use crate::{parse, Config};

const TLS: &str = "tls = { cert = \"a.pem\", key = \"a.key\" }\n";

fn server(listen: &str, extra: &str) -> String {
    format!(
        "[[server]]\nlisten = [\"{listen}\"]\n{extra}[[server.location]]\npath = \"/\"\nreturn = {{ status = 200 }}\n"
    )
}

fn ok(text: &str) -> Config {
    parse("t.toml", text).unwrap_or_else(|e| panic!("{e}\nfor\n{text}"))
}

#[test]
fn quic_defaults_and_values_parse() {
    let c = ok(&server("127.0.0.1:443", TLS));
    assert!(!*c.server[0].get_ref().quic.get_ref());
    let h = &c.http;
    assert_eq!(*h.quic_max_connections.get_ref(), 10_000);
    assert_eq!(h.quic_idle_timeout.get_ref().0.as_secs(), 30);
    assert_eq!(*h.quic_max_streams.get_ref(), 100);
    assert_eq!(h.quic_retry, Retry::Auto);
    assert!(!*h.quic_early_data.get_ref());
    assert_eq!(*h.quic_host.get_ref(), 0, "a host alone by default");

    let c = ok(&format!(
        "[http]\nquic_max_connections = 500\nquic_idle_timeout = \"90s\"\nquic_max_streams = 16\n\
         quic_retry = \"always\"\nquic_early_data = true\nquic_host = 255\n{}{}",
        server("127.0.0.1:443", &format!("{TLS}quic = true\n")),
        // A second server on the address, saying the same.
        server(
            "127.0.0.1:443",
            &format!("server_name = [\"b.test\"]\n{TLS}quic = true\n")
        ),
    ));
    assert!(*c.server[0].get_ref().quic.get_ref());
    assert!(*c.server[1].get_ref().quic.get_ref());
    let h = &c.http;
    assert_eq!(*h.quic_max_connections.get_ref(), 500);
    assert_eq!(h.quic_idle_timeout.get_ref().0.as_secs(), 90);
    assert_eq!(*h.quic_max_streams.get_ref(), 16);
    assert_eq!(h.quic_retry, Retry::Always);
    assert!(*h.quic_early_data.get_ref());
    assert_eq!(*h.quic_host.get_ref(), 255);
    let c = ok(&format!(
        "[http]\nquic_retry = \"never\"\n{}",
        server("127.0.0.1:443", "")
    ));
    assert_eq!(c.http.quic_retry, Retry::Never);
    // A UDP stream on another port than the QUIC one, and `quic = false` anywhere, pass.
    ok(&format!(
        "{}[[stream]]\nlisten = [\"127.0.0.1:444\"]\nprotocol = \"udp\"\nproxy_pass = \"127.0.0.1:9\"\nquic = false\n",
        server("127.0.0.1:443", &format!("{TLS}quic = true\n"))
    ));
}

/// Each mistake, with where `ringx check` must place it (the last occurrence of the entry in
/// the text) and words of the message.
#[test]
fn quic_mistakes_are_placed_and_explained() {
    let quic = format!("{TLS}quic = true\n");
    let table: Vec<(String, &str, &str)> = vec![
        (
            server("127.0.0.1:80", "quic = true\n"),
            "true",
            "quic = true needs tls on this server",
        ),
        (
            format!(
                "{}{}",
                server("127.0.0.1:443", &quic),
                server("127.0.0.1:443", &format!("server_name = [\"b.test\"]\n{TLS}"))
            ),
            "\"127.0.0.1:443\"",
            "servers on 127.0.0.1:443 disagree about quic: the server at line 1 has quic = true \
             and this one has none",
        ),
        (
            format!(
                "{}{}",
                server("127.0.0.1:443", TLS),
                server("127.0.0.1:443", &format!("server_name = [\"b.test\"]\n{quic}"))
            ),
            "\"127.0.0.1:443\"",
            "the server at line 1 has no quic and this one has quic = true",
        ),
        (
            format!(
                "{}[[stream]]\nlisten = [\"127.0.0.1:5432\"]\nproxy_pass = \"127.0.0.1:9\"\nquic = true\n",
                server("127.0.0.1:443", TLS)
            ),
            "true",
            "quic = true is for a [[server]] with tls (HTTP/3); a [[stream]] passes bytes on",
        ),
        (
            format!(
                "{}[[stream]]\nlisten = [\"127.0.0.1:443\"]\nprotocol = \"udp\"\nproxy_pass = \"127.0.0.1:9\"\n",
                server("127.0.0.1:443", &quic)
            ),
            "\"127.0.0.1:443\"",
            "udp 127.0.0.1:443 is also the QUIC address of the server at line 1",
        ),
        (
            format!("[http]\nquic_max_connections = 0\n{}", server("127.0.0.1:80", "")),
            "0\n[[server]]",
            "quic_max_connections must be between 1 and 1000000",
        ),
        (
            format!("[http]\nquic_max_streams = 70000\n{}", server("127.0.0.1:80", "")),
            "70000",
            "quic_max_streams must be between 1 and 65536",
        ),
        (
            format!("[http]\nquic_idle_timeout = \"500ms\"\n{}", server("127.0.0.1:80", "")),
            "\"500ms\"",
            "quic_idle_timeout must be between 1s and 1h",
        ),
        (
            format!("[http]\nquic_idle_timeout = \"2 days\"\n{}", server("127.0.0.1:80", "")),
            "\"2 days\"",
            "duration",
        ),
        (
            format!("[http]\nquic_retry = \"sometimes\"\n{}", server("127.0.0.1:80", "")),
            "\"sometimes\"",
            "`auto`, `always`, `never`",
        ),
        (
            format!("[http]\nquic_host = 256\n{}", server("127.0.0.1:80", "")),
            "256",
            "quic_host must be between 0 and 255",
        ),
        (
            format!(
                "[http]\nquic_early_data = true\n[tls]\nsession_tickets = false\n{}",
                server("127.0.0.1:80", "")
            ),
            "true",
            "quic_early_data = true needs session tickets",
        ),
        (
            format!("[http]\nquic_early_data = \"yes\"\n{}", server("127.0.0.1:80", "")),
            "\"yes\"",
            "bool",
        ),
    ];
    for (text, entry, words) in &table {
        let (line, col) = line_col(text, text.rfind(entry).expect("the entry is in the text"));
        let e = parse("bad.toml", text).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("bad.toml:{line}:{col}: ")) && e.contains(words),
            "want {line}:{col}: ...{words}...\ngot  {e}\nfor\n{text}"
        );
    }
}
