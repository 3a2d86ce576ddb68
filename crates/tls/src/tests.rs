//! The TLS layer against a real rustls client, in memory: handshakes, SNI and key-type
//! choice, bad input, the budget, and the file checks.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, ClientConnection, RootCertStore};

use crate::material;
use crate::sites::{Sessions, SiteSpec, Sites};
use crate::sni::SniMap;
use crate::{Budget, Provider, Recv, TlsConn};

/// A CA and leaves it signs, written to a temp dir.
pub struct Pki {
    pub dir: PathBuf,
    ca: rcgen::Certificate,
    ca_key: KeyPair,
}

impl Pki {
    pub fn new(tag: &str) -> Pki {
        let dir = std::env::temp_dir().join(format!("ringx-tls-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ca_key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.distinguished_name
            .push(DnType::CommonName, "ringx test CA");
        let ca = p.self_signed(&ca_key).unwrap();
        std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
        Pki { dir, ca, ca_key }
    }

    /// Writes `name.pem` (leaf, then the CA) and `name.key`; returns the two paths.
    pub fn leaf(
        &self,
        name: &str,
        dns: &[&str],
        rsa: bool,
        days: (i64, i64),
    ) -> (PathBuf, PathBuf) {
        let alg = if rsa {
            &rcgen::PKCS_RSA_SHA256
        } else {
            &rcgen::PKCS_ECDSA_P256_SHA256
        };
        let key = KeyPair::generate_for(alg).unwrap();
        let mut p =
            CertificateParams::new(dns.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
        p.distinguished_name.push(DnType::CommonName, dns[0]);
        let now = time_now();
        p.not_before = now + time::Duration::days(days.0);
        p.not_after = now + time::Duration::days(days.1);
        let cert = p.signed_by(&key, &self.ca, &self.ca_key).unwrap();
        let (c, k) = (
            self.dir.join(format!("{name}.pem")),
            self.dir.join(format!("{name}.key")),
        );
        std::fs::write(&c, format!("{}{}", cert.pem(), self.ca.pem())).unwrap();
        std::fs::write(&k, key.serialize_pem()).unwrap();
        (c, k)
    }

    pub fn roots(&self) -> RootCertStore {
        let mut r = RootCertStore::empty();
        r.add(CertificateDer::from(self.ca.der().to_vec())).unwrap();
        r
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn time_now() -> time::OffsetDateTime {
    time::OffsetDateTime::now_utc()
}

fn key(pki: &Pki, name: &str, dns: &[&str], rsa: bool) -> Arc<rustls::sign::CertifiedKey> {
    let (c, k) = pki.leaf(name, dns, rsa, (-1, 30));
    material::load(&c, &k, &Provider::AwsLc.crypto(), UnixTime::now())
        .unwrap()
        .key
}

/// Listener 0 is TLS with servers 0 (`a.test`, default) and 1 (`*.b.test`).
fn sites(pki: &Pki) -> Sites {
    sites_ordered(pki, true)
}

/// [`sites`], the suite chosen by the server's order or (`server_order` false) the client's.
fn sites_ordered(pki: &Pki, server_order: bool) -> Sites {
    sites_built(pki, Provider::AwsLc, server_order)
}

/// [`sites`] on either provider.
pub(crate) fn sites_with(pki: &Pki, provider: Provider) -> Sites {
    sites_built(pki, provider, true)
}

fn sites_built(pki: &Pki, provider: Provider, server_order: bool) -> Sites {
    let sessions = Sessions {
        cache: 100,
        ticket_rotate_s: Some(3600),
        shared_tickets: None,
    };
    sites_full(pki, provider, &sessions, server_order)
}

/// [`sites`] with these session settings.
pub(crate) fn sites_sessions(pki: &Pki, provider: Provider, sessions: &Sessions) -> Sites {
    sites_full(pki, provider, sessions, true)
}

fn sites_full(pki: &Pki, provider: Provider, sessions: &Sessions, server_order: bool) -> Sites {
    let a = SiteSpec {
        resolver: None,
        keys: vec![key(pki, "a", &["a.test"], false)],
        client: None,
        h2: false,
    };
    let b = SiteSpec {
        resolver: None,
        keys: vec![
            key(pki, "b-rsa", &["x.b.test"], true),
            key(pki, "b-ec", &["x.b.test"], false),
        ],
        client: None,
        h2: false,
    };
    let names = [vec!["a.test".to_string()], vec!["*.b.test".to_string()]];
    let map = SniMap::new([(0, &names[0][..]), (1, &names[1][..])], 0);
    Sites::build(
        provider,
        sessions,
        server_order,
        vec![Some(a), Some(b)],
        vec![Some(map)],
    )
    .unwrap()
    .for_zone()
}

fn client(pki: &Pki, name: &str, schemes_rsa_only: bool) -> ClientConnection {
    let mut provider = rustls::crypto::aws_lc_rs::default_provider();
    if schemes_rsa_only {
        provider
            .cipher_suites
            .retain(|s| matches!(s, rustls::SupportedCipherSuite::Tls12(_)));
        provider
            .cipher_suites
            .retain(|s| format!("{:?}", s.suite()).contains("RSA"));
    }
    let cfg = ClientConfig::builder_with_provider(Arc::new(provider))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(pki.roots())
        .with_no_client_auth();
    ClientConnection::new(
        Arc::new(cfg),
        ServerName::try_from(name.to_string()).unwrap(),
    )
    .unwrap()
}

/// Runs client and server until neither has bytes to send; returns the last server outcome.
pub(crate) fn drive(
    cl: &mut ClientConnection,
    srv: &mut TlsConn,
    sites: &Sites,
    budget: &mut Budget,
) -> Recv {
    let cfg = |sni: Option<&str>| sites.config(0, sni);
    let mut last = Recv::Handshaking;
    for _ in 0..20 {
        let mut wire = Vec::new();
        while cl.wants_write() {
            cl.write_tls(&mut wire).unwrap();
        }
        let mut back = Vec::new();
        if !wire.is_empty() || srv.waiting() {
            last = if srv.waiting() && wire.is_empty() {
                srv.resume(&cfg, budget, Instant::now(), &mut back)
            } else {
                srv.receive(&wire, &cfg, budget, Instant::now(), &mut back)
            };
        }
        srv.seal(&mut back);
        if back.is_empty() && wire.is_empty() && !srv.waiting() {
            break;
        }
        let mut rd = &back[..];
        while !rd.is_empty() {
            cl.read_tls(&mut rd).unwrap();
            cl.process_new_packets().unwrap();
        }
    }
    last
}

/// The first flight of a new client for `name`: its ClientHello.
fn client_hello(pki: &Pki, name: &str) -> Vec<u8> {
    let mut wire = Vec::new();
    client(pki, name, false).write_tls(&mut wire).unwrap();
    wire
}

fn leaf_subject(cl: &ClientConnection) -> String {
    let der = &cl.peer_certificates().unwrap()[0];
    let (_, c) = x509_parser::parse_x509_certificate(der.as_ref()).unwrap();
    c.subject().to_string()
}

#[test]
fn handshake_then_data_both_ways() {
    let pki = Pki::new("data");
    let sites = sites(&pki);
    let mut budget = Budget::new(1.0, Instant::now());
    let mut cl = client(&pki, "a.test", false);
    let mut srv = TlsConn::default();
    cl.writer().write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
    assert_eq!(drive(&mut cl, &mut srv, &sites, &mut budget), Recv::Data);
    assert_eq!(srv.plain, b"GET / HTTP/1.1\r\n\r\n");
    assert!(!srv.handshaking());
    let s = srv.session().unwrap();
    assert_eq!(s.server_name(), Some("a.test"));
    assert_eq!(s.alpn_protocol(), None);
    srv.staged.extend_from_slice(b"HTTP/1.1 200 OK\r\n\r\n");
    drive(&mut cl, &mut srv, &sites, &mut budget);
    let mut got = vec![0; 19];
    cl.reader().read_exact(&mut got).unwrap();
    assert_eq!(got, b"HTTP/1.1 200 OK\r\n\r\n");
    assert!(budget.spent_ns > 0, "the handshake was charged");
}

#[test]
fn the_server_order_picks_aes_128_gcm_whatever_the_client_lists_first() {
    // rustls's client lists AES-256-GCM first in TLS 1.3 and in TLS 1.2 (RSA-only here).
    let pki = Pki::new("order");
    let sites = sites(&pki);
    let mut budget = Budget::new(1.0, Instant::now());
    for (name, rsa_only, want) in [
        (
            "a.test",
            false,
            rustls::CipherSuite::TLS13_AES_128_GCM_SHA256,
        ),
        (
            "x.b.test",
            true,
            rustls::CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
        ),
    ] {
        let mut cl = client(&pki, name, rsa_only);
        let first = cl_first_suite(rsa_only);
        assert_ne!(first, want, "the client lists another suite first");
        let mut srv = TlsConn::default();
        drive(&mut cl, &mut srv, &sites, &mut budget);
        assert_eq!(cl.negotiated_cipher_suite().map(|s| s.suite()), Some(want));
    }
}

#[test]
fn without_the_server_order_the_client_s_first_suite_wins() {
    let pki = Pki::new("client-order");
    let sites = sites_ordered(&pki, false);
    let mut budget = Budget::new(1.0, Instant::now());
    for (name, rsa_only) in [("a.test", false), ("x.b.test", true)] {
        let mut cl = client(&pki, name, rsa_only);
        let mut srv = TlsConn::default();
        drive(&mut cl, &mut srv, &sites, &mut budget);
        let got = cl.negotiated_cipher_suite().map(|s| s.suite());
        assert_eq!(got, Some(cl_first_suite(rsa_only)), "{name}");
    }
}

/// The first suite the test client lists.
fn cl_first_suite(rsa_only: bool) -> rustls::CipherSuite {
    rustls::crypto::aws_lc_rs::default_provider()
        .cipher_suites
        .iter()
        .map(|s| s.suite())
        .find(|s| !rsa_only || format!("{s:?}").contains("ECDHE_RSA"))
        .unwrap()
}

#[test]
fn sni_picks_the_server_and_the_key_type_follows_the_client() {
    let pki = Pki::new("sni");
    let sites = sites(&pki);
    let mut budget = Budget::new(1.0, Instant::now());
    for (name, rsa_only, want) in [
        ("a.test", false, "CN=a.test"),
        ("x.b.test", false, "CN=x.b.test"),
        ("unknown.test", false, "CN=a.test"),
    ] {
        let mut cl = client(&pki, name, rsa_only);
        let mut srv = TlsConn::default();
        // unknown.test gets the default server's certificate, which the client rejects.
        let mut wire = Vec::new();
        while cl.wants_write() {
            cl.write_tls(&mut wire).unwrap();
        }
        let mut back = Vec::new();
        let cfg = |sni: Option<&str>| sites.config(0, sni);
        srv.receive(&wire, &cfg, &mut budget, Instant::now(), &mut back);
        let mut rd = &back[..];
        while !rd.is_empty() {
            cl.read_tls(&mut rd).unwrap();
            let _ = cl.process_new_packets();
        }
        if name != "unknown.test" {
            drive(&mut cl, &mut srv, &sites, &mut budget);
            assert_eq!(leaf_subject(&cl), want, "{name}");
        }
    }
    // Server b has RSA and ECDSA: TLS 1.3 clients verify ECDSA, so they get it; a client
    // whose only suites are TLS 1.2 ECDHE-RSA gets RSA.
    for (rsa_only, want) in [
        (false, rustls::SignatureAlgorithm::ECDSA),
        (true, rustls::SignatureAlgorithm::RSA),
    ] {
        let mut cl = client(&pki, "x.b.test", rsa_only);
        let mut srv = TlsConn::default();
        drive(&mut cl, &mut srv, &sites, &mut budget);
        let der = &cl.peer_certificates().unwrap()[0];
        let (_, c) = x509_parser::parse_x509_certificate(der.as_ref()).unwrap();
        let rsa = c.public_key().algorithm.algorithm
            == x509_parser::oid_registry::OID_PKCS1_RSAENCRYPTION;
        assert_eq!(
            rsa,
            want == rustls::SignatureAlgorithm::RSA,
            "rsa_only={rsa_only}"
        );
    }
}

#[test]
fn a_client_hello_byte_by_byte_completes() {
    let pki = Pki::new("bytes");
    let sites = sites(&pki);
    let mut budget = Budget::new(1.0, Instant::now());
    let mut cl = client(&pki, "a.test", false);
    let mut srv = TlsConn::default();
    let mut wire = Vec::new();
    while cl.wants_write() {
        cl.write_tls(&mut wire).unwrap();
    }
    let cfg = |sni: Option<&str>| sites.config(0, sni);
    let mut back = Vec::new();
    for b in &wire {
        let r = srv.receive(
            std::slice::from_ref(b),
            &cfg,
            &mut budget,
            Instant::now(),
            &mut back,
        );
        assert_eq!(r, Recv::Handshaking);
    }
    assert!(!back.is_empty(), "the ServerHello went out");
    let mut rd = &back[..];
    while !rd.is_empty() {
        cl.read_tls(&mut rd).unwrap();
        cl.process_new_packets().unwrap();
    }
    drive(&mut cl, &mut srv, &sites, &mut budget);
    assert!(!srv.handshaking() && !cl.is_handshaking());
}

#[test]
fn plain_http_and_garbage_are_told_apart() {
    let pki = Pki::new("garbage");
    let sites = sites(&pki);
    let mut budget = Budget::new(1.0, Instant::now());
    let cfg = |sni: Option<&str>| sites.config(0, sni);
    let mut out = Vec::new();
    let r = TlsConn::default().receive(
        b"GET / HTTP/1.1\r\n",
        &cfg,
        &mut budget,
        Instant::now(),
        &mut out,
    );
    assert_eq!(r, Recv::PlainHttp);
    let r = TlsConn::default().receive(
        b"\x16\x03\x01\x00\x05hello",
        &cfg,
        &mut budget,
        Instant::now(),
        &mut out,
    );
    assert!(matches!(r, Recv::Failed(_)), "{r:?}");
    let r = TlsConn::default().receive(&[0u8; 64], &cfg, &mut budget, Instant::now(), &mut out);
    assert!(matches!(r, Recv::Failed(_)), "{r:?}");
    // A truncated ClientHello waits for the rest (the zone's handshake timeout ends it).
    let wire = client_hello(&pki, "a.test");
    let r = TlsConn::default().receive(
        &wire[..wire.len() / 2],
        &cfg,
        &mut budget,
        Instant::now(),
        &mut out,
    );
    assert_eq!(r, Recv::Handshaking);
}

#[test]
fn an_empty_budget_holds_the_handshake_until_it_refills() {
    let pki = Pki::new("budget");
    let sites = sites(&pki);
    let t0 = Instant::now();
    let mut budget = Budget::new(0.5, t0);
    budget.charge(Duration::from_millis(10)); // a flood just used it up
    let cfg = |sni: Option<&str>| sites.config(0, sni);
    let wire = client_hello(&pki, "a.test");
    let mut srv = TlsConn::default();
    let mut out = Vec::new();
    assert_eq!(
        srv.receive(&wire, &cfg, &mut budget, t0, &mut out),
        Recv::Waiting
    );
    assert!(out.is_empty() && srv.waiting());
    assert_eq!(
        srv.resume(&cfg, &mut budget, t0 + Duration::from_millis(5), &mut out),
        Recv::Waiting
    );
    let r = srv.resume(&cfg, &mut budget, t0 + Duration::from_millis(30), &mut out);
    assert_eq!(r, Recv::Handshaking);
    assert!(!out.is_empty() && !srv.waiting());
    assert!(budget.waits >= 2);
}

/// A client that keeps sending while its handshake waits for the budget holds at most
/// MAX_HANDSHAKE_INPUT bytes of the zone's memory: past it the handshake fails.
#[test]
fn bytes_sent_while_a_handshake_waits_are_bounded() {
    let pki = Pki::new("bounded");
    let sites = sites(&pki);
    let t0 = Instant::now();
    let mut budget = Budget::new(0.5, t0);
    budget.charge(Duration::from_secs(1)); // no handshake step runs during this test
    let cfg = |sni: Option<&str>| sites.config(0, sni);
    let wire = client_hello(&pki, "a.test");
    let mut srv = TlsConn::default();
    let mut out = Vec::new();
    assert_eq!(
        srv.receive(&wire, &cfg, &mut budget, t0, &mut out),
        Recv::Waiting
    );
    assert!(!srv.started(), "no step ran: a new handshake");
    // Records of junk while it waits: held until the bound, then refused.
    let junk = [0x16u8; 16 * 1024];
    let mut sent = wire.len();
    let r = loop {
        let r = srv.receive(&junk, &cfg, &mut budget, t0, &mut out);
        sent += junk.len();
        if r != Recv::Waiting {
            break r;
        }
        assert!(
            sent <= crate::conn::MAX_HANDSHAKE_INPUT,
            "held {sent} bytes"
        );
    };
    assert!(
        matches!(&r, Recv::Failed(why) if why.contains("128 KiB")),
        "{r:?}"
    );
}

#[test]
fn the_file_checks_name_the_file_and_the_fault() {
    let pki = Pki::new("checks");
    let p = Provider::AwsLc.crypto();
    let now = UnixTime::now();
    let (c, k) = pki.leaf("ok", &["ok.test"], false, (-1, 30));
    assert!(material::load(&c, &k, &p, now).is_ok());
    let (_, k2) = pki.leaf("other", &["o.test"], false, (-1, 30));
    let e = material::load(&c, &k2, &p, now).unwrap_err();
    assert!(e.path == k2 && e.message.contains("does not match"), "{e}");
    let (c3, k3) = pki.leaf("old", &["old.test"], false, (-30, -1));
    let e = material::load(&c3, &k3, &p, now).unwrap_err();
    assert!(e.path == c3 && e.message.contains("expired"), "{e}");
    let (c4, k4) = pki.leaf("new", &["new.test"], false, (2, 30));
    let e = material::load(&c4, &k4, &p, now).unwrap_err();
    assert!(e.message.contains("not valid yet"), "{e}");
    let e = material::load(&pki.dir.join("missing.pem"), &k, &p, now).unwrap_err();
    assert!(e.message.contains("cannot read"), "{e}");
    let e = material::load(&k, &k, &p, now).unwrap_err();
    assert!(e.message.contains("no certificate"), "{e}");
    // The CA first, the leaf second.
    let pem = std::fs::read_to_string(&c).unwrap();
    let split = pem.find("-----END CERTIFICATE-----").unwrap() + 26;
    let swapped = pki.dir.join("swapped.pem");
    std::fs::write(&swapped, format!("{}{}", &pem[split..], &pem[..split])).unwrap();
    let e = material::load(&swapped, &k, &p, now).unwrap_err();
    assert!(e.message.contains("out of order"), "{e}");
}
