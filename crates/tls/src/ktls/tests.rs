use std::io::Write;
use std::sync::Arc;

use rcgen::{CertificateParams, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, ServerConfig, ServerConnection};

use super::*;

#[test]
fn the_probe_reads_the_kernels_ulps() {
    assert!(probe_from(Ok("mptcp tls\n".into())).available);
    let p = probe_from(Ok("mptcp\n".into()));
    assert!(!p.available && p.detail.contains("[mptcp]"), "{p:?}");
    let p = probe_from(Err(std::io::Error::from_raw_os_error(libc::ENOENT)));
    assert!(!p.available && p.detail.contains("cannot read"), "{p:?}");
    // The machine's own answer, printed so a run says which path it took.
    eprintln!("ktls probe on this machine: {}", probe().detail);
}

fn cmsg(level: i32, kind: i32, data: &[u8]) -> Vec<u8> {
    let hdr = std::mem::size_of::<usize>() + 8;
    let mut b = Vec::new();
    b.extend_from_slice(&(hdr + data.len()).to_ne_bytes());
    b.extend_from_slice(&level.to_ne_bytes());
    b.extend_from_slice(&kind.to_ne_bytes());
    b.extend_from_slice(data);
    while b.len() % std::mem::size_of::<usize>() != 0 {
        b.push(0);
    }
    b
}

#[test]
fn the_record_type_is_found_among_control_messages() {
    let mut buf = cmsg(libc::SOL_SOCKET, 29, &[1, 2, 3, 4]); // some other message first
    buf.extend(cmsg(SOL_TLS, TLS_GET_RECORD_TYPE, &[21]));
    assert_eq!(record_type(&buf), Some(21));
    assert_eq!(record_type(&cmsg(libc::SOL_SOCKET, 29, &[1])), None);
    // A length that runs past the buffer, or one shorter than a header, is not trusted.
    let mut bad = cmsg(SOL_TLS, TLS_GET_RECORD_TYPE, &[22]);
    bad[0] = 200;
    assert_eq!(record_type(&bad), None);
    bad[..8].copy_from_slice(&3usize.to_ne_bytes());
    assert_eq!(record_type(&bad), None);
    assert_eq!(record_type(&[]), None);
}

#[test]
fn control_records_are_told_apart() {
    assert_eq!(
        classify(21, &[1, 0]),
        Control::Alert {
            level: 1,
            description: 0
        }
    );
    assert_eq!(classify(21, &[2]), Control::Unknown(21));
    assert_eq!(
        classify(22, &[24, 0, 0, 1, 1]),
        Control::KeyUpdate {
            update_requested: true
        }
    );
    assert_eq!(
        classify(22, &[24, 0, 0, 1, 0]),
        Control::KeyUpdate {
            update_requested: false
        }
    );
    assert_eq!(classify(22, &[4, 0, 0, 9]), Control::NewSessionTicket);
    assert_eq!(classify(22, &[1]), Control::Handshake(1));
    assert_eq!(classify(22, &[]), Control::Unknown(22));
    assert_eq!(classify(23, b"x"), Control::Data);
    assert_eq!(classify(99, b""), Control::Unknown(99));
}

/// A finished in-memory handshake whose server may export its secrets.
fn handshake(suite: rustls::SupportedCipherSuite) -> (ClientConnection, ServerConnection) {
    let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let cert = CertificateParams::new(vec!["k.test".to_string()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let der = CertificateDer::from(cert.der().to_vec());
    let mut provider = rustls::crypto::aws_lc_rs::default_provider();
    provider.cipher_suites = vec![suite];
    let provider = Arc::new(provider);
    let mut scfg = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![der.clone()],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        )
        .unwrap();
    scfg.enable_secret_extraction = true;
    let mut roots = RootCertStore::empty();
    roots.add(der).unwrap();
    let ccfg = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let mut c =
        ClientConnection::new(Arc::new(ccfg), ServerName::try_from("k.test").unwrap()).unwrap();
    let mut s = ServerConnection::new(Arc::new(scfg)).unwrap();
    for _ in 0..10 {
        let mut buf = Vec::new();
        while c.wants_write() {
            c.write_tls(&mut buf).unwrap();
        }
        let mut rd = &buf[..];
        while !rd.is_empty() {
            s.read_tls(&mut rd).unwrap();
            s.process_new_packets().unwrap();
        }
        let mut back = Vec::new();
        while s.wants_write() {
            s.write_tls(&mut back).unwrap();
        }
        let mut rd = &back[..];
        while !rd.is_empty() {
            c.read_tls(&mut rd).unwrap();
            c.process_new_packets().unwrap();
        }
    }
    assert!(!c.is_handshaking() && !s.is_handshaking());
    (c, s)
}

/// Decrypts one TLS 1.3 record with what the kernel would be given.
fn open_with(info: &CryptoInfo, record: &[u8]) -> Vec<u8> {
    use aws_lc_rs::aead::{
        Aad, LessSafeKey, Nonce, UnboundKey, AES_128_GCM, AES_256_GCM, CHACHA20_POLY1305,
    };
    let b = &info.0;
    let cipher = u16::from_ne_bytes([b[2], b[3]]);
    let (alg, key, nonce_iv, seq) = match cipher {
        CIPHER_AES_GCM_128 => (
            &AES_128_GCM,
            &b[12..28],
            [&b[28..32], &b[4..12]].concat(),
            &b[32..40],
        ),
        CIPHER_AES_GCM_256 => (
            &AES_256_GCM,
            &b[12..44],
            [&b[44..48], &b[4..12]].concat(),
            &b[48..56],
        ),
        _ => (
            &CHACHA20_POLY1305,
            &b[16..48],
            b[4..16].to_vec(),
            &b[48..56],
        ),
    };
    let mut nonce = [0u8; 12];
    nonce.copy_from_slice(&nonce_iv);
    for (n, s) in nonce[4..].iter_mut().zip(seq) {
        *n ^= s;
    }
    let key = LessSafeKey::new(UnboundKey::new(alg, key).unwrap());
    let mut body = record[5..].to_vec();
    let plain = key
        .open_in_place(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(&record[..5]),
            &mut body,
        )
        .expect("the extracted key, nonce and sequence number open the record");
    plain.to_vec()
}

#[test]
fn the_extracted_secrets_open_the_next_record_for_every_suite() {
    use rustls::crypto::aws_lc_rs::cipher_suite as cs;
    for suite in [
        cs::TLS13_AES_128_GCM_SHA256,
        cs::TLS13_AES_256_GCM_SHA384,
        cs::TLS13_CHACHA20_POLY1305_SHA256,
    ] {
        let (mut c, s) = handshake(suite);
        let version = s.protocol_version().unwrap();
        let secrets = s.dangerous_extract_secrets().unwrap();
        let (tx, rx) = crypto_infos(version, &secrets).unwrap();
        assert_eq!(u16::from_ne_bytes([rx.0[0], rx.0[1]]), TLS_1_3_VERSION);
        assert_eq!(tx.0.len(), rx.0.len());
        assert_eq!(
            rx.0.len(),
            if suite == cs::TLS13_AES_128_GCM_SHA256 {
                40
            } else {
                56
            }
        );
        // The client's first application record after the handshake: sequence number 0.
        assert_eq!(secrets.rx.0, 0);
        c.writer().write_all(b"hello").unwrap();
        let mut rec = Vec::new();
        c.write_tls(&mut rec).unwrap();
        assert_eq!(rec[0], 23);
        let plain = open_with(&rx, &rec);
        assert_eq!(
            plain, b"hello\x17",
            "{suite:?}: the payload and its inner content type"
        );
    }
}
