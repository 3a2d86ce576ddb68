//! Session tickets under shared keys ([`crate::ticket_keys`]): a ticket one host issued
//! resumes on another that holds the same keys, and not on one that does not.

use std::io::Write;
use std::sync::Arc;
use std::time::Instant;

use rustls::client::Resumption;
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection, HandshakeKind};

use crate::sites::{Sessions, Sites};
use crate::tests::{drive, sites_sessions, Pki};
use crate::ticket_keys::{KeyMaterial, SharedTickets};
use crate::{Budget, Provider, Recv, TlsConn};

/// A host: its configurations, with `keys` as its ticket keys (`None`: its own rotating
/// ones). No session-ID cache, so that only a ticket can resume.
fn host(pki: &Pki, keys: Option<Arc<SharedTickets>>) -> Sites {
    let sessions = Sessions {
        cache: 0,
        ticket_rotate_s: Some(3600),
        shared_tickets: keys,
    };
    sites_sessions(pki, Provider::AwsLc, &sessions)
}

/// One client whose session store outlives its connections.
fn client_config(pki: &Pki, tls12: bool) -> Arc<ClientConfig> {
    let versions: &[&rustls::SupportedProtocolVersion] = if tls12 {
        &[&rustls::version::TLS12]
    } else {
        &[&rustls::version::TLS13]
    };
    let mut cfg = ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_protocol_versions(versions)
    .unwrap()
    .with_root_certificates(pki.roots())
    .with_no_client_auth();
    cfg.resumption = Resumption::in_memory_sessions(16);
    Arc::new(cfg)
}

/// A connection to `sites` with a request and its answer, so that the tickets sent after
/// the handshake reach the client; how its handshake went.
fn connect(cfg: &Arc<ClientConfig>, sites: &Sites) -> HandshakeKind {
    let name = ServerName::try_from("a.test".to_string()).unwrap();
    let mut cl = ClientConnection::new(cfg.clone(), name).unwrap();
    let mut srv = TlsConn::default();
    let mut budget = Budget::new(1.0, Instant::now());
    cl.writer().write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
    assert_eq!(drive(&mut cl, &mut srv, sites, &mut budget), Recv::Data);
    srv.staged.extend_from_slice(b"HTTP/1.1 200 OK\r\n\r\n");
    drive(&mut cl, &mut srv, sites, &mut budget);
    cl.handshake_kind().expect("handshake done")
}

fn shared(current: &KeyMaterial, others: &[&KeyMaterial]) -> Arc<SharedTickets> {
    let t = Arc::new(SharedTickets::new());
    t.install(Some(current), others);
    t
}

#[test]
fn a_ticket_from_one_host_resumes_on_another_with_the_same_keys() {
    let pki = Pki::new("tickets-shared");
    for tls12 in [false, true] {
        let k = KeyMaterial::generate(1).unwrap();
        let (ka, kb) = (shared(&k, &[]), shared(&k.clone(), &[]));
        let (a, b) = (host(&pki, Some(ka.clone())), host(&pki, Some(kb.clone())));
        let cfg = client_config(&pki, tls12);
        assert_eq!(connect(&cfg, &a), HandshakeKind::Full);
        assert!(
            ka.counters
                .issued
                .load(std::sync::atomic::Ordering::Relaxed)
                > 0
        );
        assert_eq!(connect(&cfg, &b), HandshakeKind::Resumed, "tls12: {tls12}");
        assert!(
            kb.counters
                .opened
                .load(std::sync::atomic::Ordering::Relaxed)
                > 0
        );
    }
}

#[test]
fn a_ticket_does_not_resume_on_a_host_with_other_keys() {
    let pki = Pki::new("tickets-other");
    let (k1, k2) = (
        KeyMaterial::generate(1).unwrap(),
        KeyMaterial::generate(2).unwrap(),
    );
    let kb = shared(&k2, &[]);
    let (a, b) = (
        host(&pki, Some(shared(&k1, &[]))),
        host(&pki, Some(kb.clone())),
    );
    let cfg = client_config(&pki, false);
    assert_eq!(connect(&cfg, &a), HandshakeKind::Full);
    assert_eq!(connect(&cfg, &b), HandshakeKind::Full);
    assert!(
        kb.counters
            .unknown_key
            .load(std::sync::atomic::Ordering::Relaxed)
            > 0
    );
    // Without shared keys (each host's own), the same: today's behaviour.
    let (c, d) = (host(&pki, None), host(&pki, None));
    let cfg = client_config(&pki, false);
    assert_eq!(connect(&cfg, &c), HandshakeKind::Full);
    assert_eq!(
        connect(&cfg, &c),
        HandshakeKind::Resumed,
        "its own ticket, on its host"
    );
    assert_eq!(connect(&cfg, &d), HandshakeKind::Full);
}

#[test]
fn a_ticket_under_the_previous_key_resumes_after_a_rotation() {
    let pki = Pki::new("tickets-rotated");
    let (old, new) = (
        KeyMaterial::generate(1).unwrap(),
        KeyMaterial::generate(2).unwrap(),
    );
    let ka = shared(&old, &[]);
    let a = host(&pki, Some(ka.clone()));
    let cfg = client_config(&pki, false);
    assert_eq!(connect(&cfg, &a), HandshakeKind::Full);
    // Another host has rotated since: the new key seals, the old one still opens.
    let b = host(&pki, Some(shared(&new, &[&old])));
    assert_eq!(connect(&cfg, &b), HandshakeKind::Resumed);
}
