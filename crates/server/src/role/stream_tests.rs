//! `[[stream]]` connections and tunnels through a zone driven by the test driver.

use std::time::Duration;

use crate::testkit::Harness;

fn streams(extra: &str) -> Harness {
    Harness::new(&format!(
        r#"
[[stream]]
listen = ["127.0.0.1:5432"]
proxy_pass = "db"
idle_timeout = "30s"
{extra}
[[upstream]]
name = "db"
servers = ["127.0.0.1:9001", "127.0.0.1:9002"]
retries = 1
connect_timeout = "5s"
"#
    ))
}

#[test]
fn a_stream_relays_bytes_both_ways() {
    let mut h = streams("");
    let c = h.client();
    let (u, _) = h.accept_upstream();
    h.send(c, b"client says");
    assert_eq!(h.upstream_got(u), b"client says");
    h.send(u, b"server says");
    assert_eq!(h.output(c), b"server says");
}

#[test]
fn bytes_sent_before_the_upstream_is_up_are_delivered_once_it_is() {
    let mut h = streams("");
    let c = h.client();
    h.send(c, b"early");
    let (u, _) = h.accept_upstream();
    assert_eq!(h.upstream_got(u), b"early");
}

#[test]
fn a_refused_stream_connect_goes_to_the_next_server_then_gives_up() {
    let mut h = streams("");
    let c = h.client();
    let (u1, a1) = h.connects()[0];
    h.upstream_refuses(u1);
    let (u2, a2) = h.connects()[0];
    assert_ne!(a1, a2);
    assert!(h.t.is_open(c));
    h.upstream_refuses(u2);
    assert!(
        h.t.closed(c),
        "no server left: the client connection closes"
    );
    assert!(h.output(c).is_empty(), "nothing is said on an L4 stream");
}

#[test]
fn a_stream_connect_that_hangs_times_out_and_moves_on() {
    let mut h = streams("");
    let c = h.client();
    assert_eq!(h.connects().len(), 1);
    h.advance(Duration::from_secs(6));
    let (u2, _) = h.connects()[0];
    h.t.connected(&mut h.z, u2);
    h.send(c, b"x");
    assert_eq!(h.upstream_got(u2), b"x");
}

#[test]
fn a_stream_behind_a_load_balancer_reads_its_proxy_header_first() {
    let mut h = streams("proxy_protocol = true");
    let c = h.client();
    assert!(h.connects().is_empty(), "no connect before the header");
    h.send(c, b"PROXY TCP4 203.0.113.9 10.0.0.1 5555 5432\r\nhello");
    let (u, _) = h.accept_upstream();
    assert_eq!(h.upstream_got(u), b"hello", "the header is not forwarded");
}

#[test]
fn a_stream_without_its_proxy_header_is_closed() {
    let mut h = streams("proxy_protocol = true");
    let c = h.client();
    h.send(c, b"GET / HTTP/1.1\r\n\r\n");
    assert!(h.t.closed(c));
    assert!(h.connects().is_empty());
}

#[test]
fn a_fin_is_passed_on_and_the_tunnel_closes_when_both_sides_finished() {
    let mut h = streams("");
    let c = h.client();
    let (u, _) = h.accept_upstream();
    h.eof(c);
    assert!(h.t.write_shut(u), "the client's FIN reaches the server");
    assert!(h.t.is_open(c), "half-closed: the server may still answer");
    h.send(u, b"last words");
    assert_eq!(h.output(c), b"last words");
    h.eof(u);
    assert!(h.t.closed(c) && h.t.closed(u));
}

#[test]
fn a_silent_tunnel_is_closed_after_its_idle_timeout() {
    let mut h = streams("");
    let c = h.client();
    let (u, _) = h.accept_upstream();
    h.advance(Duration::from_secs(20));
    h.send(c, b"keep"); // activity moves the idle deadline
    h.advance(Duration::from_secs(20));
    assert!(h.t.is_open(c) && h.t.is_open(u));
    h.advance(Duration::from_secs(11));
    assert!(h.t.closed(c) && h.t.closed(u));
}

#[test]
fn a_server_closing_the_tunnel_closes_the_client_after_what_it_sent() {
    let mut h = streams("");
    let c = h.client();
    let (u, _) = h.accept_upstream();
    h.send(u, b"bye");
    h.reset(u);
    assert_eq!(h.output(c), b"bye");
    assert!(h.t.closed(c));
}

#[test]
fn a_client_leaving_closes_the_upstream() {
    let mut h = streams("");
    let c = h.client();
    let (u, _) = h.accept_upstream();
    h.reset(c);
    assert!(h.t.closed(u));
}

/// A real ClientHello for `name`, from a rustls client.
fn client_hello(name: &str) -> Vec<u8> {
    use std::sync::Arc;
    let cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(rustls::RootCertStore::empty())
    .with_no_client_auth();
    let server = rustls::pki_types::ServerName::try_from(name.to_string()).unwrap();
    let mut conn = rustls::ClientConnection::new(Arc::new(cfg), server).unwrap();
    let mut out = Vec::new();
    conn.write_tls(&mut out).unwrap();
    out
}

fn sni_streams() -> Harness {
    streams(
        r#"sni = { "a.test" = "site_a", "*.b.test" = "site_b" }
[[upstream]]
name = "site_a"
servers = ["127.0.0.1:9101"]
[[upstream]]
name = "site_b"
servers = ["127.0.0.1:9201"]"#,
    )
}

#[test]
fn a_stream_routes_by_the_client_hello_and_forwards_it_untouched() {
    for (name, ports) in [
        ("a.test", &[9101][..]),
        ("x.b.test", &[9201]),
        ("other.test", &[9001, 9002]), // proxy_pass's upstream
    ] {
        let mut h = sni_streams();
        let c = h.client();
        assert!(
            h.connects().is_empty(),
            "nothing is dialled before the ClientHello"
        );
        let hello = client_hello(name);
        // Split in three segments: the name is read only once the message is whole.
        let (a, rest) = hello.split_at(7);
        let (b, d) = rest.split_at(rest.len() / 2);
        h.send(c, a);
        h.send(c, b);
        assert!(h.connects().is_empty());
        h.send(c, d);
        let (u, addr) = h.accept_upstream();
        assert!(ports.contains(&addr.port()), "{name}: {addr}");
        assert_eq!(h.upstream_got(u), hello, "the bytes go on as they came");
    }
}

#[test]
fn a_stream_routed_by_sni_closes_on_what_is_not_a_client_hello() {
    let mut h = sni_streams();
    let c = h.client();
    h.send(c, b"GET / HTTP/1.1\r\n\r\n");
    assert!(h.t.closed(c) && h.connects().is_empty());
    // A ClientHello that never completes ends at the header timeout.
    let mut h = sni_streams();
    let c = h.client();
    let hello = client_hello("a.test");
    h.send(c, &hello[..hello.len() - 1]);
    h.advance(Duration::from_secs(61));
    assert!(h.t.closed(c) && h.connects().is_empty());
    // An oversized one (a ClientHello that says 65,535 bytes, sent as full records) is
    // closed once 16 KiB are held, not read on.
    let mut h = sni_streams();
    let c = h.client();
    let mut wire = Vec::new();
    for i in 0..2 {
        wire.extend_from_slice(&[22, 3, 1, 0x40, 0]);
        let mut frag = vec![0x41u8; 0x4000];
        if i == 0 {
            frag[..4].copy_from_slice(&[1, 0, 0xff, 0xff]);
        }
        wire.extend_from_slice(&frag);
    }
    h.send(c, &wire[..0x4000 + 5 + 100]);
    assert!(
        h.t.closed(c) && h.connects().is_empty(),
        "an oversized ClientHello is closed at once"
    );
}

/// A tunnel whose upstream closed holds that upstream's handle until its client goes; the
/// slot may meanwhile carry another client's upstream, which the old tunnel must not touch
/// (seen on loopback: a client's close ended a stranger's connection it had reused).
#[test]
fn a_finished_tunnel_leaves_the_upstream_that_reused_its_slot_alone() {
    let mut h = streams("");
    let c1 = h.client();
    let (u1, _) = h.accept_upstream();
    // The client reads nothing: what the server sent stays queued, so c1 outlives u1.
    h.t.set_window(c1, Some(0));
    h.send(u1, b"for c1");
    h.reset(u1);
    assert!(h.t.is_open(c1), "c1 still has bytes to write");
    let c2 = h.client();
    let (u2, _) = h.accept_upstream();
    assert_eq!(u2, u1, "the test needs the slot reused");
    h.send(c1, b"late from c1");
    h.send(c2, b"from c2");
    assert_eq!(
        h.upstream_got(u2),
        b"from c2",
        "c1's bytes went to c2's server"
    );
    h.reset(c1);
    assert!(h.t.is_open(u2), "c1's end closed c2's upstream");
    h.send(u2, b"for c2");
    assert_eq!(h.output(c2), b"for c2");
}
