//! The answers a fleet shares: what a target may name, and against a real redis-server, an
//! answer posted by one host served by another (http-01 and tls-alpn-01), taken down when
//! the order ends, never this host's own; and Redis gone.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ringx_cluster::broadcast::alive_hosts;
use ringx_cluster::testing::{missing, wait_for, RedisServer};
use ringx_cluster::{Applied, Client, Event, Handler, Settings, Subscriber, Target};

use super::*;

#[test]
fn targets_name_a_token_or_a_dns_name_and_nothing_else() {
    let h = |t: &str| Some(Answer::Http01(t.into()));
    let n = |t: &str| Some(Answer::TlsAlpn01(t.into()));
    for (target, want) in [
        (
            &b"http-01/LoqXcYV8q5ONbJQxbmR7SCTNo3tiAXDfowyjxAjEuX0"[..],
            h("LoqXcYV8q5ONbJQxbmR7SCTNo3tiAXDfowyjxAjEuX0"),
        ),
        (b"http-01/a_b-c", h("a_b-c")),
        (b"tls-alpn-01/c.test", n("c.test")),
        (
            b"tls-alpn-01/xn--bcher-kva.example",
            n("xn--bcher-kva.example"),
        ),
        (b"http-01/", None),
        (b"http-01/a.b", None),
        (b"http-01/a/b", None),
        (b"http-01/a%20b", None),
        (b"tls-alpn-01/C.test", None),
        (b"tls-alpn-01/*.c.test", None),
        (b"tls-alpn-01/c..test", None),
        (b"tls-alpn-01/.c.test", None),
        (b"tls-alpn-01/c.test/x", None),
        (b"dns-01/c.test", None),
        (b"http-01", None),
        (b"", None),
        (b"http-01/\xff", None),
    ] {
        assert_eq!(
            Answer::parse(target),
            want,
            "{:?}",
            String::from_utf8_lossy(target)
        );
        if let Some(a) = want {
            assert_eq!(a.target().as_bytes(), target);
        }
    }
    assert!(Answer::parse(format!("http-01/{}", "a".repeat(257)).as_bytes()).is_none());
    let tok = Answer::Http01("tok".into());
    assert!(is_key_auth("tok.thumb_-1", &tok));
    assert!(!is_key_auth("other.thumb", &tok), "another token's");
    assert!(!is_key_auth("tok", &tok));
    assert!(!is_key_auth("tok.th umb", &tok));
    assert!(!is_key_auth("tok.a.b", &tok));
    assert!(is_key_auth(
        "any.thumb",
        &Answer::TlsAlpn01("c.test".into())
    ));
}

fn client(addr: &str) -> Client {
    Client::start(Settings {
        target: Target::Servers(vec![addr.to_string()]),
        username: None,
        password: None,
        tls: None,
        prefix: "t2:".into(),
        connect_timeout: Duration::from_millis(500),
        timeout: Duration::from_secs(2),
        events_secret: Some("a secret of sixteen or more".into()),
    })
    .unwrap()
}

/// A host: its client, its answers, its subscriber applying what the others post.
struct Host {
    client: Client,
    shared: Arc<Shared>,
    _sub: Subscriber,
}

fn host(addr: &str, id: &str) -> Host {
    let client = client(addr);
    let shared = Arc::new(Shared::default());
    let (c, sh) = (client.clone(), shared.clone());
    let handler: Handler = Arc::new(move |ev: &Event, _| {
        let (status, text) = match ev.action.as_str() {
            POST => receive(&c, &sh, &ev.target),
            DONE => forget(&sh, &ev.target),
            _ => (400, "unknown".into()),
        };
        Applied {
            status,
            text,
            then: None,
        }
    });
    let sub = Subscriber::start(client.clone(), id.into(), handler).unwrap();
    Host {
        client,
        shared,
        _sub: sub,
    }
}

fn relay(h: &Host, id: &str) -> Relay {
    Relay {
        client: h.client.clone(),
        host_id: id.into(),
        wait: Duration::from_secs(5),
    }
}

fn pttl(c: &Client, key: &str) -> i64 {
    match c.call(&[b"PTTL", key.as_bytes()], Duration::from_secs(2)) {
        Ok(Value::Int(n)) => n,
        other => panic!("PTTL {key}: {other:?}"),
    }
}

/// The acmeIdentifier extension (RFC 8737 §3) of a challenge certificate: its digest.
fn acme_identifier(cert: &rustls::sign::CertifiedKey) -> Vec<u8> {
    let (_, c) = x509_parser::parse_x509_certificate(cert.cert[0].as_ref()).unwrap();
    let ext = c
        .extensions()
        .iter()
        .find(|e| e.oid.to_id_string() == "1.3.6.1.5.5.7.1.31")
        .expect("an acmeIdentifier extension");
    assert!(ext.critical);
    // An OCTET STRING of the 32 bytes.
    assert_eq!(&ext.value[..2], &[0x04, 32]);
    ext.value[2..].to_vec()
}

#[test]
fn an_answer_one_host_posts_is_served_by_the_others_until_the_order_ends() {
    if !ringx_kerneltest::require(missing()) {
        return;
    }
    let r = RedisServer::start();
    let (a, b, c) = (
        host(&r.addr(), "a"),
        host(&r.addr(), "b"),
        host(&r.addr(), "c"),
    );
    wait_for("three hosts alive", || {
        alive_hosts(&a.client).is_ok_and(|v| v == ["a", "b", "c"])
    });
    let ra = relay(&a, "a");
    // http-01: in Redis with its time to live, and on every other host once it confirmed.
    let tok = Answer::Http01("tok-1".into());
    let o = ra.post(&tok, "tok-1.thumb").unwrap();
    assert!(o.ok() && o.missing.is_empty(), "{o:?}");
    assert_eq!(o.confirmed.len(), 3, "{o:?}");
    assert_eq!(o.confirmed["b"], "200 answering http-01/tok-1");
    let key = "t2:acme/challenges/http-01/tok-1";
    let ttl = pttl(&a.client, key);
    assert!((350_000..=360_000).contains(&ttl), "{ttl}");
    for h in [&b, &c] {
        assert_eq!(h.shared.http01("tok-1").as_deref(), Some("tok-1.thumb"));
    }
    // The host that posted it answers from its own (the order put it there), not a copy.
    assert_eq!(a.shared.http01("tok-1"), None);
    // tls-alpn-01: each host makes a certificate of its own for the key authorization.
    let name = Answer::TlsAlpn01("c.test".into());
    ra.post(&name, "tok-2.thumb").unwrap();
    let want = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, b"tok-2.thumb");
    for h in [&b, &c] {
        let cert = h
            .shared
            .alpn_cert("c.test")
            .expect("a challenge certificate");
        assert_eq!(acme_identifier(&cert), want.as_ref());
    }
    assert_eq!(b.shared.counters.shared_received.load(Relaxed), 2);
    // Host b orders c.test itself later and posts its own answer: a's order ending (its
    // message late) does not take b's down.
    let own = certs::alpn_challenge("c.test", &[7; 32]).unwrap();
    b.shared.set_alpn("c.test", Some(own.clone()));
    ra.withdraw(&tok).unwrap();
    ra.withdraw(&name).unwrap();
    wait_for("the answers taken down", || {
        c.shared.http01("tok-1").is_none() && c.shared.alpn_cert("c.test").is_none()
    });
    wait_for("b's http-01 copy taken down", || {
        b.shared.http01("tok-1").is_none()
    });
    let kept = b.shared.alpn_cert("c.test").expect("b's own answer stays");
    assert!(Arc::ptr_eq(&kept, &own));
    for k in [key, "t2:acme/challenges/tls-alpn-01/c.test"] {
        assert_eq!(pttl(&a.client, k), -2, "{k} deleted");
    }
}

#[test]
fn what_redis_does_not_hold_is_refused_and_redis_gone_costs_no_wait() {
    if !ringx_kerneltest::require(missing()) {
        return;
    }
    let mut r = RedisServer::start();
    let c = client(&r.addr());
    let sh = Shared::default();
    let b = Duration::from_secs(2);
    // Taken down already (or lapsed), or not a key authorization for that token.
    assert_eq!(receive(&c, &sh, b"http-01/gone").0, 404);
    c.call(&[b"SET", b"t2:acme/challenges/http-01/x", b"y.thumb"], b)
        .unwrap();
    assert_eq!(receive(&c, &sh, b"http-01/x").0, 400);
    assert_eq!(receive(&c, &sh, b"purge/x").0, 400);
    assert_eq!(sh.http01("x"), None);
    assert_eq!(sh.counters.shared_refused.load(Relaxed), 3);
    assert_eq!(forget(&sh, b"http-01/x").0, 404);
    // Redis gone: posting fails at once (the order goes on, this host answering alone),
    // and a host told to take an answer finds none to read.
    r.stop();
    let ra = Relay {
        client: c.clone(),
        host_id: "a".into(),
        wait: Duration::from_secs(5),
    };
    let t = Instant::now();
    let mut failed = 0;
    // The first command may still meet the old connection; then Redis is down.
    for _ in 0..3 {
        failed += usize::from(ra.post(&Answer::Http01("t".into()), "t.k").is_err());
    }
    assert_eq!(failed, 3);
    assert_eq!(receive(&c, &sh, b"http-01/t").0, 503);
    assert!(ra.withdraw(&Answer::Http01("t".into())).is_err());
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
}
