//! A zone's QUIC endpoint against quinn-proto's client, datagrams passed in memory: the
//! handshake completes over ringx's TLS configuration with HTTP/3's ALPN, the connection IDs
//! the client then sends to name the zone that owns the connection, and a Retry (address
//! validation) is followed by the client and validates its address.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use quinn_proto::crypto::rustls::QuicClientConfig;
use quinn_proto::{
    ClientConfig, Connection, ConnectionHandle, DatagramEvent, Endpoint, EndpointConfig, Event,
};
use ringx_quic::{endpoint_config, for_quic, server_config, Keys, Limits, Owner, CID_LEN};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

mod common;
use common::tls;

const SERVER: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 4433);
const CLIENT: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 50000);

/// One server endpoint (a zone) and one client, their connections, and the clock.
struct Pair {
    server: Endpoint,
    client: Endpoint,
    sconn: Option<(ConnectionHandle, Connection)>,
    cconn: (ConnectionHandle, Connection),
    now: Instant,
    /// Answer new connections with a Retry until their address is validated.
    retry: bool,
    retried: usize,
    /// Destination connection IDs of the short-header packets the client sent.
    short_dcids: Vec<Vec<u8>>,
}

impl Pair {
    fn new(owner: Owner, retry: bool) -> Pair {
        let keys = Keys::generate().unwrap();
        let (s, c) = tls();
        let sc = server_config(
            Arc::new(for_quic(s, &keys, false)),
            &Limits::default(),
            &keys,
        )
        .unwrap();
        let server = Endpoint::new(
            Arc::new(endpoint_config(owner, &keys)),
            Some(Arc::new(sc)),
            true,
            None,
        );
        let mut client = Endpoint::new(Arc::new(EndpointConfig::default()), None, true, None);
        let cc = ClientConfig::new(Arc::new(QuicClientConfig::try_from(c).unwrap()));
        let now = Instant::now();
        let cconn = client.connect(now, cc, SERVER, "localhost").unwrap();
        Pair {
            server,
            client,
            sconn: None,
            cconn,
            now,
            retry,
            retried: 0,
            short_dcids: Vec::new(),
        }
    }

    /// Passes datagrams both ways, with timers, until neither side has more to send.
    fn drive(&mut self) {
        for _ in 0..100 {
            let mut moved = false;
            let mut buf = Vec::new();
            while let Some(t) = self.cconn.1.poll_transmit(self.now, 1, &mut buf) {
                moved = true;
                let d = buf[..t.size].to_vec();
                buf.clear();
                if d[0] & 0x80 == 0 {
                    self.short_dcids.push(d[1..1 + CID_LEN].to_vec());
                }
                self.deliver_to_server(d);
            }
            let mut out = Vec::new();
            if let Some((_, s)) = self.sconn.as_mut() {
                while let Some(t) = s.poll_transmit(self.now, 1, &mut buf) {
                    out.push(buf[..t.size].to_vec());
                    buf.clear();
                }
            }
            moved |= !out.is_empty();
            for d in out {
                self.deliver_to_client(d);
            }
            self.endpoint_events();
            if !moved {
                // Nothing to send: the next timer, if any is due soon.
                let next = [self.cconn.1.poll_timeout()]
                    .into_iter()
                    .chain([self.sconn.as_mut().and_then(|s| s.1.poll_timeout())])
                    .flatten()
                    .min();
                match next {
                    Some(t) if t <= self.now + Duration::from_millis(50) => {
                        self.now = self.now.max(t);
                        self.cconn.1.handle_timeout(self.now);
                        if let Some((_, s)) = self.sconn.as_mut() {
                            s.handle_timeout(self.now);
                        }
                    }
                    _ => return,
                }
            }
        }
    }

    fn deliver_to_server(&mut self, d: Vec<u8>) {
        let mut buf = Vec::new();
        let ev = self.server.handle(
            self.now,
            CLIENT,
            None,
            None,
            BytesMut::from(&d[..]),
            &mut buf,
        );
        match ev {
            Some(DatagramEvent::NewConnection(incoming)) => {
                if self.retry && !incoming.remote_address_validated() {
                    self.retried += 1;
                    let t = self.server.retry(incoming, &mut buf).unwrap();
                    self.deliver_to_client(buf[..t.size].to_vec());
                    return;
                }
                let accepted = self.server.accept(incoming, self.now, &mut buf, None);
                self.sconn = Some(accepted.map_err(|e| e.cause).unwrap());
            }
            Some(DatagramEvent::ConnectionEvent(_, ev)) => {
                if let Some((_, s)) = self.sconn.as_mut() {
                    s.handle_event(ev);
                }
            }
            Some(DatagramEvent::Response(t)) => self.deliver_to_client(buf[..t.size].to_vec()),
            None => {}
        }
    }

    fn deliver_to_client(&mut self, d: Vec<u8>) {
        let mut buf = Vec::new();
        let ev = self.client.handle(
            self.now,
            SERVER,
            None,
            None,
            BytesMut::from(&d[..]),
            &mut buf,
        );
        if let Some(DatagramEvent::ConnectionEvent(_, ev)) = ev {
            self.cconn.1.handle_event(ev);
        }
    }

    fn endpoint_events(&mut self) {
        while let Some(ev) = self.cconn.1.poll_endpoint_events() {
            if let Some(back) = self.client.handle_event(self.cconn.0, ev) {
                self.cconn.1.handle_event(back);
            }
        }
        if let Some((h, s)) = self.sconn.as_mut() {
            while let Some(ev) = s.poll_endpoint_events() {
                if let Some(back) = self.server.handle_event(*h, ev) {
                    s.handle_event(back);
                }
            }
        }
    }

    fn client_connected(&mut self) -> bool {
        let mut connected = false;
        while let Some(ev) = self.cconn.1.poll() {
            connected |= matches!(ev, Event::Connected);
        }
        connected
    }
}

#[test]
fn a_handshake_completes_with_h3_and_the_client_sends_to_ids_naming_the_zone() {
    let owner = Owner {
        host: 2,
        zone: 5,
        epoch: 0,
    };
    let mut p = Pair::new(owner, false);
    p.drive();
    assert!(p.client_connected(), "the client's handshake completed");
    let server = &p.sconn.as_ref().expect("the server accepted").1;
    assert!(!server.is_handshaking());
    let hs = server
        .crypto_session()
        .handshake_data()
        .and_then(|d| d.downcast::<ringx_quic::Handshake>().ok())
        .expect("the observed session's handshake data");
    assert_eq!(hs.protocol.as_deref(), Some(&b"h3"[..]));
    assert!(
        !hs.seen.resumed() && !hs.seen.early_refused(),
        "a full handshake"
    );
    // Open a stream so the client sends 1-RTT (short-header) packets.
    let s = p.cconn.1.streams().open(quinn_proto::Dir::Bi).unwrap();
    p.cconn.1.send_stream(s).write(b"ping").unwrap();
    p.drive();
    assert!(
        !p.short_dcids.is_empty(),
        "the client sent short-header packets"
    );
    for dcid in &p.short_dcids {
        assert_eq!(
            Owner::of(dcid),
            Some(owner),
            "every 1-RTT packet names the zone"
        );
    }
}

#[test]
fn a_retry_validates_the_address_and_the_handshake_goes_on() {
    let mut p = Pair::new(
        Owner {
            host: 0,
            zone: 1,
            epoch: 1,
        },
        true,
    );
    p.drive();
    assert_eq!(
        p.retried, 1,
        "one Retry, then the token validates the address"
    );
    assert!(p.client_connected());
    let server = &p.sconn.as_ref().expect("the server accepted").1;
    assert!(!server.is_handshaking());
}

#[test]
fn a_provider_without_the_initial_cipher_suite_is_refused_with_what_to_do() {
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["localhost".into()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let chacha_only = rustls::crypto::CryptoProvider {
        cipher_suites: vec![
            rustls::crypto::aws_lc_rs::cipher_suite::TLS13_CHACHA20_POLY1305_SHA256,
        ],
        ..rustls::crypto::aws_lc_rs::default_provider()
    };
    let tls = rustls::ServerConfig::builder_with_provider(Arc::new(chacha_only))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![CertificateDer::from(cert.der().to_vec())],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        )
        .unwrap();
    let keys = Keys::generate().unwrap();
    let err = server_config(
        Arc::new(for_quic(tls, &keys, false)),
        &Limits::default(),
        &keys,
    )
    .map(|_| ())
    .expect_err("refused");
    assert!(err.to_string().contains("TLS_AES_128_GCM_SHA256"), "{err}");
}
