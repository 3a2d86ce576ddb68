//! A TLS client connection through the zone, with a real rustls client and the test driver:
//! the hand-over of the sending side to the kernel (kTLS) and what follows it.

use std::io::Write;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore};

use ringx_engine::testio::Seen;
use ringx_engine::ConnId;
use ringx_tls::ktls::{Support, SOL_TLS, TCP_ULP, TLS_TX};

use crate::testkit::{parse_responses, self_signed, Harness, TempDir};

const ALL: Support = Support {
    aes_gcm_128: true,
    aes_gcm_256: true,
    chacha20_poly1305: true,
};

/// A zone with one TLS server (`/` answers "hi", `/f/` serves the temp dir), its directory
/// and a client that trusts its certificate.
fn site() -> (Harness, TempDir, ClientConnection) {
    let (cert, key, der) = self_signed("k.test");
    let file: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    let dir = TempDir::new(&[
        ("cert.pem", cert.as_bytes()),
        ("key.pem", key.as_bytes()),
        ("www/file.bin", &file),
    ]);
    let d = dir.path();
    let h = Harness::new(&format!(
        r#"
[[server]]
listen = ["127.0.0.1:8443"]
tls = {{ cert = "{d}/cert.pem", key = "{d}/key.pem" }}
  [[server.location]]
  path = "/"
  return = {{ status = 200, body = "hi" }}
  [[server.location]]
  path = "/f/"
  alias = "{d}/www/"
"#
    ));
    let mut roots = RootCertStore::empty();
    roots.add(CertificateDer::from(der)).unwrap();
    let cfg = ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let cl = ClientConnection::new(Arc::new(cfg), ServerName::try_from("k.test").unwrap()).unwrap();
    (h, dir, cl)
}

fn client_wire(cl: &mut ClientConnection) -> Vec<u8> {
    let mut w = Vec::new();
    while cl.wants_write() {
        cl.write_tls(&mut w).unwrap();
    }
    w
}

/// Runs the handshake; the client's first request goes with its Finished. Returns what the
/// zone sent after the client's last flight.
fn handshake(h: &mut Harness, c: ConnId, cl: &mut ClientConnection, request: &[u8]) -> Vec<Seen> {
    cl.writer().write_all(request).unwrap();
    for _ in 0..10 {
        let w = client_wire(cl);
        h.send(c, &w);
        let mut seen = h.t.take_transcript(c);
        // The step found the zone's handshake budget spent (a debug build's signature
        // outlasts the burst; on a loaded machine, by far) and waits for its refill: the
        // zone retries on a timer.
        // A client done already waits for one refill at most, as the tests expect.
        let tries = if cl.is_handshaking() { 100 } else { 1 };
        for _ in 0..tries {
            if !seen.is_empty() {
                break;
            }
            h.advance(Duration::from_millis(50));
            seen = h.t.take_transcript(c);
        }
        if !cl.is_handshaking() {
            return seen;
        }
        for s in &seen {
            let Seen::Bytes(b) = s else {
                panic!("a socket option during the handshake: {seen:?}")
            };
            let mut rd = &b[..];
            while !rd.is_empty() {
                cl.read_tls(&mut rd).unwrap();
                cl.process_new_packets().unwrap();
            }
        }
    }
    panic!("the handshake did not finish")
}

/// The parts of a transcript after the kernel took the keys: (the TLS_TX keys, what
/// followed them).
fn after_keys(seen: &[Seen]) -> (Vec<u8>, Vec<Seen>) {
    let ulp = seen
        .iter()
        .position(|s| matches!(s, Seen::SockOpt { name, .. } if *name == TCP_ULP))
        .unwrap_or_else(|| panic!("no TCP_ULP in {seen:?}"));
    assert_eq!(
        seen[ulp],
        Seen::SockOpt {
            level: libc::SOL_TCP,
            name: TCP_ULP,
            value: b"tls".to_vec()
        }
    );
    let Seen::SockOpt { level, name, value } = &seen[ulp + 1] else {
        panic!("TLS_TX right after the ULP: {seen:?}")
    };
    assert_eq!((*level, *name), (SOL_TLS, TLS_TX));
    // Before the ULP: only TLS records (the handshake's end, session tickets).
    for s in &seen[..ulp] {
        let Seen::Bytes(b) = s else {
            panic!("{seen:?}")
        };
        assert!(
            matches!(b[0], 22 | 23),
            "a TLS record before the keys: {b:?}"
        );
    }
    (value.clone(), seen[ulp + 2..].to_vec())
}

fn bytes(seen: &[Seen]) -> Vec<u8> {
    seen.iter()
        .filter_map(|s| match s {
            Seen::Bytes(b) => Some(&b[..]),
            _ => None,
        })
        .flatten()
        .copied()
        .collect()
}

#[test]
fn after_the_handshake_the_kernel_seals_and_the_role_writes_plaintext() {
    let (mut h, _dir, mut cl) = site();
    h.z.force_ktls(ALL);
    let c = h.client();
    let seen = handshake(
        &mut h,
        c,
        &mut cl,
        b"GET / HTTP/1.1\r\nHost: k.test\r\n\r\n",
    );
    let (keys, after) = after_keys(&seen);
    // TLS 1.3, AES-128-GCM (ringx's order): struct tls12_crypto_info_aes_gcm_128.
    assert_eq!(u16::from_ne_bytes([keys[0], keys[1]]), 0x0304);
    assert_eq!(keys.len(), 40);
    // The response leaves as plaintext, for the kernel to seal.
    let r = parse_responses(&bytes(&after));
    assert_eq!(r.len(), 1, "{after:?}");
    assert_eq!((r[0].status, &r[0].body[..]), (200, &b"hi"[..]));
    assert_eq!(h.counters.tls_kernel.load(Ordering::Relaxed), 1);
    // A file goes as the file (sendfile in the engine), in plaintext.
    let mut req = b"GET /f/file.bin HTTP/1.1\r\nHost: k.test\r\n\r\n".to_vec();
    cl.writer().write_all(&req).unwrap();
    h.send(c, &client_wire(&mut cl));
    let r = parse_responses(&bytes(&h.t.take_transcript(c)));
    assert_eq!(r[0].status, 200);
    assert!(r[0].body.len() == 100_000 && r[0].body[..251] == (0..251u8).collect::<Vec<_>>()[..]);
    // The last request: the response, then close_notify as an alert record, then the close.
    req = b"GET / HTTP/1.1\r\nHost: k.test\r\nConnection: close\r\n\r\n".to_vec();
    cl.writer().write_all(&req).unwrap();
    h.send(c, &client_wire(&mut cl));
    let seen = h.t.take_transcript(c);
    assert_eq!(
        seen.last(),
        Some(&Seen::TlsRecord {
            typ: 21,
            data: vec![1, 0]
        }),
        "{seen:?}"
    );
    assert_eq!(parse_responses(&bytes(&seen))[0].status, 200);
    assert!(h.t.closed(c));
}

#[test]
fn a_kernel_that_refuses_the_keys_closes_the_connection_before_any_plaintext() {
    let (mut h, _dir, mut cl) = site();
    h.z.force_ktls(ALL);
    // Nothing sets an option before the handshake ends: the first one (the ULP) fails.
    h.t.fail_next_sockopt(std::io::Error::from_raw_os_error(libc::ENOENT));
    let c = h.client();
    let mut seen = handshake(
        &mut h,
        c,
        &mut cl,
        b"GET / HTTP/1.1\r\nHost: k.test\r\n\r\n",
    );
    // The client is done once it has the server's Finished; the zone may still hold its
    // last flight for the handshake budget's refill (a loaded machine's slow signature spent
    // it): the refusal comes when the zone takes the flight.
    for _ in 0..100 {
        if h.t.closed(c) {
            break;
        }
        h.advance(Duration::from_millis(50));
        seen.extend(h.t.take_transcript(c));
    }
    assert!(h.t.closed(c), "closed with the kernel's refusal");
    assert!(
        !bytes(&seen).windows(8).any(|x| x == b"HTTP/1.1"),
        "no plaintext left: {seen:?}"
    );
}

#[test]
fn a_kernel_without_the_cipher_leaves_the_records_to_ringx() {
    let (mut h, _dir, mut cl) = site();
    h.z.force_ktls(Support {
        chacha20_poly1305: true,
        ..Support::default()
    });
    let c = h.client();
    let seen = handshake(
        &mut h,
        c,
        &mut cl,
        b"GET / HTTP/1.1\r\nHost: k.test\r\n\r\n",
    );
    assert!(
        seen.iter().all(|s| matches!(s, Seen::Bytes(_))),
        "no socket option: {seen:?}"
    );
    assert!(!bytes(&seen).windows(8).any(|x| x == b"HTTP/1.1"));
    assert_eq!(h.counters.tls_kernel.load(Ordering::Relaxed), 0);
}
