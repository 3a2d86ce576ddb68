use crate::tls::ClientVerify;
use crate::{parse, Source};

fn server(tls: &str, listen: &str) -> String {
    format!(
        "[[server]]\nlisten = [\"{listen}\"]\n{tls}\n  [[server.location]]\n  path = \"/\"\n  return = {{ status = 200 }}\n"
    )
}

fn resolved(text: &str) -> crate::tls::ServerTls {
    let c = parse("t.toml", text).unwrap();
    let t = c.server[0].get_ref().tls.as_ref().unwrap();
    let src = Source {
        name: "t.toml",
        text,
    };
    t.get_ref().resolve(t.span(), &src).unwrap()
}

#[test]
fn the_three_forms_name_the_same_pairs() {
    let one = resolved(&server(
        "tls = { cert = \"a.pem\", key = \"a.key\" }",
        "127.0.0.1:443",
    ));
    assert_eq!(one.certs.len(), 1);
    assert_eq!(
        one.certs[0].get_ref().cert.get_ref().to_str(),
        Some("a.pem")
    );
    assert_eq!(one.verify, None);
    let list = resolved(&server(
        "tls = [{ cert = \"r.pem\", key = \"r.key\" }, { cert = \"e.pem\", key = \"e.key\" }]",
        "127.0.0.1:443",
    ));
    assert_eq!(list.certs.len(), 2);
    assert_eq!(
        list.certs[1].get_ref().key.get_ref().to_str(),
        Some("e.key")
    );
    let full = resolved(&server(
        "tls = { certs = [{ cert = \"e.pem\", key = \"e.key\" }], client_ca = \"ca.pem\", verify = \"optional\" }",
        "127.0.0.1:443",
    ));
    assert_eq!(full.verify, Some(ClientVerify::Optional));
    let ca_only = resolved(&server(
        "tls = { cert = \"e.pem\", key = \"e.key\", client_ca = \"ca.pem\" }",
        "127.0.0.1:443",
    ));
    assert_eq!(ca_only.verify, Some(ClientVerify::Required));
}

fn err(text: &str) -> String {
    parse("bad.toml", text).unwrap_err().to_string()
}

#[test]
fn mistakes_are_placed_and_explained() {
    let e = err(&server("tls = { cert = \"a.pem\" }", "127.0.0.1:443"));
    assert!(e.starts_with("bad.toml:3:") && e.contains("no key"), "{e}");
    let e = err(&server("tls = []", "127.0.0.1:443"));
    assert!(e.contains("names no certificate"), "{e}");
    let e = err(&server(
        "tls = { cert = \"a.pem\", key = \"a.key\", verify = \"always\" }",
        "127.0.0.1:443",
    ));
    assert!(e.contains("\"required\" or \"optional\""), "{e}");
    let e = err(&server(
        "tls = { cert = \"a.pem\", key = \"a.key\", verify = \"required\" }",
        "127.0.0.1:443",
    ));
    assert!(e.contains("no client_ca"), "{e}");
    let e = err(&server(
        "tls = { cert = \"a.pem\", key = \"a.key\", crt = 1 }",
        "127.0.0.1:443",
    ));
    assert!(e.contains("crt"), "{e}");
    let e = err(&format!(
        "[tls]\nhandshake_share = 2.0\n{}",
        server(
            "tls = { cert = \"a.pem\", key = \"a.key\" }",
            "127.0.0.1:443"
        )
    ));
    assert!(
        e.starts_with("bad.toml:2:") && e.contains("handshake_share"),
        "{e}"
    );
    let e = err(&format!(
        "[tls]\nktls = \"on\"\n{}",
        server(
            "tls = { cert = \"a.pem\", key = \"a.key\" }",
            "127.0.0.1:443"
        )
    ));
    assert!(
        e.starts_with("bad.toml:2:") && e.contains("ktls = \"on\"") && e.contains("\"off\""),
        "{e}"
    );
}

#[test]
fn servers_sharing_an_address_agree_on_tls() {
    let text = format!(
        "{}{}",
        server(
            "tls = { cert = \"a.pem\", key = \"a.key\" }",
            "127.0.0.1:443"
        ),
        server("server_name = [\"b\"]", "127.0.0.1:443")
    );
    let e = err(&text);
    assert!(
        e.contains("disagree about TLS") && e.contains("line 1"),
        "{e}"
    );
    let ok = format!(
        "{}{}",
        server(
            "tls = { cert = \"a.pem\", key = \"a.key\" }",
            "127.0.0.1:443"
        ),
        server("", "127.0.0.1:80")
    );
    assert!(parse("ok.toml", &ok).is_ok());
}

#[test]
fn a_stream_cannot_both_pass_tls_through_and_terminate_it() {
    let e = err(
        "[[stream]]\nlisten = [\"127.0.0.1:9443\"]\nproxy_pass = \"127.0.0.1:1\"\nsni = { \"a.test\" = \"127.0.0.1:2\" }\ntls = { cert = \"a.pem\", key = \"a.key\" }\n",
    );
    assert!(
        e.starts_with("bad.toml:5:") && e.contains("cannot also terminate"),
        "{e}"
    );
    let e = err(
        "[[stream]]\nlisten = [\"127.0.0.1:9443\"]\nproxy_pass = \"127.0.0.1:1\"\nsni = { \"a*.test\" = \"127.0.0.1:2\" }\n",
    );
    assert!(e.contains("sni name"), "{e}");
}

/// `tls = { acme = true }` with `[acme]`: the defaults, and what is refused at its place.
#[test]
fn acme_servers_and_their_refusals() {
    let ok = format!(
        "[acme]\ncontact = \"ops@example.com\"\nstorage = \"/tmp/acme\"\n{}",
        server(
            "server_name = [\"a.test\", \"www.a.test\"]\ntls = { acme = true }",
            "127.0.0.1:443"
        )
    );
    let c = parse("t.toml", &ok).unwrap();
    let a = c.acme.as_ref().unwrap();
    assert_eq!(a.directory.get_ref(), crate::acme::LETS_ENCRYPT);
    assert_eq!(a.key_type.get_ref(), "ecdsa-p256");
    assert_eq!(a.contact_uris(), ["mailto:ops@example.com"]);
    let st = resolved(&ok);
    assert!(st.acme && st.certs.is_empty());
    assert_eq!(
        crate::acme::names(c.server[0].get_ref()),
        ["a.test", "www.a.test"]
    );
    // No [acme] section: Let's Encrypt's defaults.
    assert!(parse(
        "t.toml",
        &server(
            "server_name = [\"a.test\"]\ntls = { acme = true }",
            "127.0.0.1:443"
        )
    )
    .is_ok());
    let refused = [
        (
            server(
                "server_name = [\"*.a.test\"]\ntls = { acme = true }",
                "127.0.0.1:443",
            ),
            "t.toml:3:16: server_name \"*.a.test\": a wildcard certificate",
        ),
        (
            server("tls = { acme = true }", "127.0.0.1:443"),
            "t.toml:3:7: tls = { acme = true } needs server_name",
        ),
        (
            server(
                "server_name = [\"a.test\"]\ntls = { acme = true, cert = \"c\", key = \"k\" }",
                "127.0.0.1:443",
            ),
            "t.toml:4:16: tls has acme = true and certificate files",
        ),
        (
            format!(
                "[acme]\nkey_type = \"dsa\"\n{}",
                server(
                    "server_name = [\"a.test\"]\ntls = { acme = true }",
                    "127.0.0.1:443"
                )
            ),
            "t.toml:2:12: key_type = \"dsa\"",
        ),
        (
            format!(
                "[acme]\nchallenge = \"dns-01\"\n{}",
                server(
                    "server_name = [\"a.test\"]\ntls = { acme = true }",
                    "127.0.0.1:443"
                )
            ),
            "t.toml:2:13: challenge = \"dns-01\" needs dns_hook",
        ),
        (
            format!(
                "[acme]\ndirectory = \"http://ca/dir\"\n{}",
                server(
                    "server_name = [\"a.test\"]\ntls = { acme = true }",
                    "127.0.0.1:443"
                )
            ),
            "t.toml:2:13: directory = \"http://ca/dir\": an ACME directory is an https:// URL",
        ),
    ];
    for (text, want) in refused {
        let e = parse("t.toml", &text).unwrap_err().to_string();
        assert!(e.starts_with(want), "{e}\nwanted {want}");
    }
    // A wildcard is fine where a DNS hook can answer dns-01.
    let hook = format!(
        "[acme]\ndns_hook = \"/usr/local/bin/dns-hook\"\n{}",
        server(
            "server_name = [\"*.a.test\"]\ntls = { acme = true }",
            "127.0.0.1:443"
        )
    );
    assert!(parse("t.toml", &hook).is_ok());
}

#[test]
fn the_server_s_suite_order_decides_unless_told_otherwise() {
    let site = server(
        "tls = { cert = \"a.pem\", key = \"a.key\" }",
        "127.0.0.1:443",
    );
    assert!(parse("t.toml", &site).unwrap().tls.prefer_server_ciphers);
    let off = format!("[tls]\nprefer_server_ciphers = false\n{site}");
    assert!(!parse("t.toml", &off).unwrap().tls.prefer_server_ciphers);
}
