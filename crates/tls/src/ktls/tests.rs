use std::io::{Read, Write};
use std::sync::Arc;

use rcgen::{CertificateParams, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, ServerConfig, ServerConnection};

use super::*;

#[test]
fn the_probe_agrees_with_the_kernel() {
    let p = probe();
    // The probe attaches the ULP, which loads the module where it can: afterwards the
    // kernel lists it exactly when the probe found it.
    let ulps = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_ulp").unwrap_or_default();
    assert_eq!(
        p.support.is_some(),
        ulps.split_whitespace().any(|u| u == "tls"),
        "{p:?} against [{ulps}]"
    );
    // The machine's own answer, printed so a run says which path it took.
    eprintln!("ktls probe on this machine: {}", p.detail);
}

#[test]
fn the_verdict_says_what_and_why() {
    let s = Support {
        aes_gcm_128: true,
        aes_gcm_256: false,
        chacha20_poly1305: true,
    };
    let p = verdict(Some(s), "mptcp tls", "");
    assert!(p.detail.contains("AES-GCM-128, ChaCha20-Poly1305"), "{p:?}");
    let p = verdict(
        None,
        "mptcp",
        "the tls ULP cannot be attached (No such file)",
    );
    assert!(p.support.is_none());
    assert!(
        p.detail.contains("[mptcp]") && p.detail.contains("No such file"),
        "{p:?}"
    );
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

/// Seals one record as the kernel would with `info` (`struct tls12_crypto_info_*`) after
/// `j` records of its own: TLS 1.3 and ChaCha20 XOR the record sequence number into the IV,
/// TLS 1.2 AES-GCM sends the IV field plus `j` as its explicit nonce (`tls_advance_record_sn`).
pub(crate) fn kernel_seal(info: &CryptoInfo, j: u64, typ: u8, plain: &[u8]) -> Vec<u8> {
    use aws_lc_rs::aead::{
        Aad, LessSafeKey, Nonce, UnboundKey, AES_128_GCM, AES_256_GCM, CHACHA20_POLY1305,
    };
    let b = &info.0;
    let version = u16::from_ne_bytes([b[0], b[1]]);
    let cipher = u16::from_ne_bytes([b[2], b[3]]);
    let (alg, iv, key, salt, seq) = match cipher {
        CIPHER_AES_GCM_128 => (&AES_128_GCM, &b[4..12], &b[12..28], &b[28..32], &b[32..40]),
        CIPHER_AES_GCM_256 => (&AES_256_GCM, &b[4..12], &b[12..44], &b[44..48], &b[48..56]),
        _ => (
            &CHACHA20_POLY1305,
            &b[4..16],
            &b[16..48],
            &b[48..48],
            &b[48..56],
        ),
    };
    let seq = u64::from_be_bytes(seq.try_into().unwrap()) + j;
    let mut nonce = [0u8; 12];
    nonce[..salt.len()].copy_from_slice(salt);
    nonce[salt.len()..].copy_from_slice(iv);
    let tls13 = version == TLS_1_3_VERSION;
    let gcm12 = !tls13 && cipher != CIPHER_CHACHA20_POLY1305;
    if gcm12 {
        let e = u64::from_be_bytes(nonce[4..].try_into().unwrap()) + j;
        nonce[4..].copy_from_slice(&e.to_be_bytes());
    } else {
        for (n, s) in nonce[4..].iter_mut().zip(seq.to_be_bytes()) {
            *n ^= s;
        }
    }
    let mut body = plain.to_vec();
    if tls13 {
        body.push(typ);
    }
    let explicit = if gcm12 { 8 } else { 0 };
    let len = explicit + body.len() + 16;
    let hdr = [
        if tls13 { 23 } else { typ },
        3,
        3,
        (len >> 8) as u8,
        len as u8,
    ];
    let aad = if tls13 {
        hdr.to_vec()
    } else {
        let mut a = seq.to_be_bytes().to_vec();
        a.extend_from_slice(&[typ, 3, 3, (plain.len() >> 8) as u8, plain.len() as u8]);
        a
    };
    let key = LessSafeKey::new(UnboundKey::new(alg, key).unwrap());
    let tag = key
        .seal_in_place_separate_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(&aad),
            &mut body,
        )
        .unwrap();
    let mut rec = hdr.to_vec();
    rec.extend_from_slice(&nonce[4..4 + explicit]);
    rec.extend_from_slice(&body);
    rec.extend_from_slice(tag.as_ref());
    rec
}

/// What the client reads from `wire`.
fn client_reads(c: &mut ClientConnection, mut wire: &[u8]) -> Vec<u8> {
    while !wire.is_empty() {
        c.read_tls(&mut wire).unwrap();
        c.process_new_packets()
            .expect("the client accepts the records");
    }
    let mut got = Vec::new();
    let _ = c.reader().read_to_end(&mut got);
    got
}

#[test]
fn the_kernel_given_the_send_keys_continues_where_rustls_stopped() {
    use rustls::crypto::aws_lc_rs::cipher_suite as cs;
    for suite in [
        cs::TLS13_AES_128_GCM_SHA256,
        cs::TLS13_AES_256_GCM_SHA384,
        cs::TLS13_CHACHA20_POLY1305_SHA256,
        cs::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
        cs::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
        cs::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
    ] {
        let (mut c, mut s) = handshake(suite);
        // Records rustls seals first (after the handshake's), with their nonces.
        let mut wire = Vec::new();
        for i in 0..5u8 {
            s.writer().write_all(&[i; 10]).unwrap();
            s.write_tls(&mut wire).unwrap();
        }
        assert_eq!(client_reads(&mut c, &wire).len(), 50, "{suite:?}");
        let version = s.protocol_version().unwrap();
        let tls12 = version == rustls::ProtocolVersion::TLSv1_2;
        let tls12_gcm = tls12 && !format!("{suite:?}").contains("CHACHA");
        let mut explicit_sent: Vec<[u8; 8]> = Vec::new();
        let mut r = &wire[..];
        while tls12_gcm && r.len() >= 5 {
            // Each record: the 5-byte header, then the explicit nonce.
            explicit_sent.push(r[5..13].try_into().unwrap());
            r = &r[5 + usize::from(u16::from_be_bytes([r[3], r[4]]))..];
        }
        #[allow(deprecated)]
        let secrets = s.dangerous_extract_secrets().unwrap();
        let tx = CryptoInfo::new(version, secrets.tx.0, &secrets.tx.1).unwrap();
        let want = if tls12 {
            TLS_1_2_VERSION
        } else {
            TLS_1_3_VERSION
        };
        assert_eq!(u16::from_ne_bytes([tx.0[0], tx.0[1]]), want, "{suite:?}");
        // The kernel's records, as it would seal them with these keys: the client opens
        // every one, in order after rustls's.
        let mut wire = Vec::new();
        for j in 0..3 {
            wire.extend(kernel_seal(&tx, j, 23, format!("kernel {j}").as_bytes()));
        }
        assert_eq!(
            client_reads(&mut c, &wire),
            b"kernel 0kernel 1kernel 2",
            "{suite:?}"
        );
        if tls12_gcm {
            // Here rustls sent its Finished (record 0) and five records.
            assert_eq!(secrets.tx.0, 6, "{suite:?}");
            // No nonce of the kernel's (a long run of them) is one rustls used.
            let first = u64::from_be_bytes(tx.0[4..12].try_into().unwrap());
            for j in 0..100_000u64 {
                let n = first.wrapping_add(j).to_be_bytes();
                assert!(!explicit_sent.contains(&n), "{suite:?}: nonce reuse at {j}");
            }
        }
    }
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
        #[allow(deprecated)]
        let secrets = s.dangerous_extract_secrets().unwrap();
        let tx = CryptoInfo::new(version, secrets.tx.0, &secrets.tx.1).unwrap();
        let rx = CryptoInfo::new(version, secrets.rx.0, &secrets.rx.1).unwrap();
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

#[test]
fn debug_output_names_the_cipher_not_the_keys() {
    use rustls::crypto::cipher::{AeadKey, Iv};
    let s = rustls::ConnectionTrafficSecrets::Aes256Gcm {
        key: AeadKey::from([0xab; 32]),
        iv: Iv::new([0xcd; 12]),
    };
    let info = CryptoInfo::new(rustls::ProtocolVersion::TLSv1_3, 7, &s).unwrap();
    let d = format!("{:?}", crate::KernelOut::TxKeys(info));
    assert_eq!(d, "TxKeys(CryptoInfo { version: 0x0304, cipher: 52, .. })");
    // Neither the key (171), the IV (205) nor the salt, in decimal or hex.
    for k in ["171", "205", "ab", "cd"] {
        assert!(!d.to_lowercase().contains(k), "{d}");
    }
}
