//! After the handshake, against a real rustls client in memory: records sealed and opened in
//! place for every suite on both providers, files read into their records, KeyUpdate both
//! ways, close_notify, bad records, and the kernel's share when it seals (kTLS), with the
//! kernel's sealing emulated from the keys it would be given.

use std::io::{Read, Write};
use std::sync::Arc;
use std::time::Instant;

use rustls::crypto::aws_lc_rs::cipher_suite as cs;
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection, SupportedCipherSuite};

use crate::ktls::tests::kernel_seal;
use crate::ktls::Support;
use crate::record::{APPLICATION_DATA, HANDSHAKE};
use crate::tests::{drive, sites_with, Pki};
use crate::{Budget, KernelOut, Provider, Recv, TlsConn};

pub(crate) const SUITES: [SupportedCipherSuite; 6] = [
    cs::TLS13_AES_128_GCM_SHA256,
    cs::TLS13_AES_256_GCM_SHA384,
    cs::TLS13_CHACHA20_POLY1305_SHA256,
    cs::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
    cs::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
    cs::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
];

pub(crate) const ALL: Support = Support {
    aes_gcm_128: true,
    aes_gcm_256: true,
    chacha20_poly1305: true,
};

fn client_for(pki: &Pki, suite: SupportedCipherSuite) -> ClientConnection {
    let mut provider = rustls::crypto::aws_lc_rs::default_provider();
    provider.cipher_suites = vec![suite];
    let cfg = ClientConfig::builder_with_provider(Arc::new(provider))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(pki.roots())
        .with_no_client_auth();
    ClientConnection::new(Arc::new(cfg), ServerName::try_from("a.test").unwrap()).unwrap()
}

/// Feeds `wire` to the client; returns the plaintext it reads and whether it saw
/// close_notify.
pub(crate) fn client_reads(c: &mut ClientConnection, mut wire: &[u8]) -> (Vec<u8>, bool) {
    let mut closed = false;
    let mut got = Vec::new();
    while !wire.is_empty() {
        c.read_tls(&mut wire).unwrap();
        let st = c
            .process_new_packets()
            .expect("the client accepts the records");
        closed |= st.peer_has_closed();
        let _ = c.reader().read_to_end(&mut got);
    }
    (got, closed)
}

pub(crate) fn client_wire(c: &mut ClientConnection) -> Vec<u8> {
    let mut wire = Vec::new();
    while c.wants_write() {
        c.write_tls(&mut wire).unwrap();
    }
    wire
}

/// A finished handshake; the client's first words already read by the server.
pub(crate) fn established(
    pki: &Pki,
    provider: Provider,
    suite: SupportedCipherSuite,
    ktls: Option<Support>,
) -> (ClientConnection, TlsConn, crate::Sites) {
    let sites = sites_with(pki, provider);
    let mut budget = Budget::new(1.0, Instant::now());
    let mut cl = client_for(pki, suite);
    let mut srv = TlsConn::new(provider, ktls);
    cl.writer().write_all(b"hello").unwrap();
    let r = drive(&mut cl, &mut srv, &sites, &mut budget);
    assert_eq!(r, Recv::Data, "{suite:?}");
    assert_eq!(std::mem::take(&mut srv.plain), b"hello", "{suite:?}");
    assert!(!srv.handshaking() && !cl.is_handshaking());
    (cl, srv, sites)
}

pub(crate) fn receive(
    srv: &mut TlsConn,
    sites: &crate::Sites,
    wire: &[u8],
    out: &mut Vec<u8>,
) -> Recv {
    let cfg = |sni: Option<&str>| sites.config(0, sni);
    let mut budget = Budget::new(1.0, Instant::now());
    srv.receive(wire, &cfg, &mut budget, Instant::now(), out)
}

#[test]
fn records_both_ways_for_every_suite_on_both_providers() {
    let pki = Pki::new("records");
    let file_data: Vec<u8> = (0..70_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
    let path = pki.dir.join("file.bin");
    std::fs::write(&path, &file_data).unwrap();
    let file = std::fs::File::open(&path).unwrap();
    for provider in [Provider::AwsLc, Provider::Ring] {
        for suite in SUITES {
            let (mut cl, mut srv, sites) = established(&pki, provider, suite, None);
            assert!(srv.take_kernel_tx().is_none() && !srv.kernel_seals());
            // A reply longer than a record, then a file read into its records.
            let mut out = Vec::new();
            srv.staged.extend_from_slice(&[b'x'; 40_000]);
            srv.seal(&mut out);
            let mut off = 0;
            loop {
                let n = srv.seal_file(&file, off, 20_000, &mut out).unwrap();
                if n == 0 {
                    break;
                }
                assert!(n <= 16_384, "one record at most");
                off += n as u64;
            }
            srv.close_notify(&mut out);
            let (got, closed) = client_reads(&mut cl, &out);
            assert_eq!(
                got.len(),
                40_000 + file_data.len(),
                "{provider:?} {suite:?}"
            );
            assert!(got[..40_000].iter().all(|&b| b == b'x'));
            assert!(
                got[40_000..] == file_data[..],
                "{provider:?} {suite:?}: the file"
            );
            assert!(closed, "close_notify");
            // The client's records: several, then its close_notify.
            let big: Vec<u8> = (0..50_000u32).map(|i| i as u8).collect();
            cl.writer().write_all(&big).unwrap();
            cl.send_close_notify();
            let mut out = Vec::new();
            let wire = client_wire(&mut cl);
            // In pieces that cut records anywhere.
            let mut last = Recv::Handshaking;
            for piece in wire.chunks(1000) {
                last = receive(&mut srv, &sites, piece, &mut out);
            }
            assert_eq!(last, Recv::Closed, "{provider:?} {suite:?}");
            assert!(
                srv.plain == big,
                "{provider:?} {suite:?}: the client's data"
            );
        }
    }
}

#[test]
fn a_key_update_from_the_client_is_answered_and_both_sides_rekey() {
    let pki = Pki::new("keyupdate");
    for provider in [Provider::AwsLc, Provider::Ring] {
        for suite in &SUITES[..3] {
            let (mut cl, mut srv, sites) = established(&pki, provider, *suite, None);
            for round in 0..2 {
                // rustls sends KeyUpdate(update_requested) and switches its keys.
                cl.refresh_traffic_keys().unwrap();
                cl.writer().write_all(b"after").unwrap();
                let mut out = Vec::new();
                let r = receive(&mut srv, &sites, &client_wire(&mut cl), &mut out);
                assert_eq!(r, Recv::Data, "{suite:?} round {round}");
                assert_eq!(std::mem::take(&mut srv.plain), b"after");
                assert!(!out.is_empty(), "our KeyUpdate went out");
                srv.staged.extend_from_slice(b"reply on new keys");
                srv.seal(&mut out);
                let (got, _) = client_reads(&mut cl, &out);
                assert_eq!(
                    got, b"reply on new keys",
                    "{provider:?} {suite:?} round {round}"
                );
            }
        }
    }
}

#[test]
fn a_bad_record_ends_the_connection_with_an_alert() {
    let pki = Pki::new("badrecord");
    for suite in [SUITES[0], SUITES[3]] {
        let (mut cl, mut srv, sites) = established(&pki, Provider::AwsLc, suite, None);
        cl.writer().write_all(b"tampered").unwrap();
        let mut wire = client_wire(&mut cl);
        let at = wire.len() - 3;
        wire[at] ^= 1;
        let mut out = Vec::new();
        let r = receive(&mut srv, &sites, &wire, &mut out);
        assert!(
            matches!(&r, Recv::Failed(w) if w.contains("decrypt")),
            "{r:?}"
        );
        let mut rd = &out[..];
        cl.read_tls(&mut rd).unwrap();
        let e = cl.process_new_packets().unwrap_err();
        assert!(format!("{e:?}").contains("BadRecordMac"), "{e:?}");
        // Nothing more is read or sealed.
        assert!(matches!(
            receive(&mut srv, &sites, b"x", &mut out),
            Recv::Failed(_)
        ));
    }
    // A record longer than TLS allows, before its body arrives.
    let (_cl, mut srv, sites) = established(&pki, Provider::AwsLc, SUITES[0], None);
    let mut out = Vec::new();
    let r = receive(&mut srv, &sites, &[23, 3, 3, 0x48, 0x01], &mut out);
    assert!(
        matches!(&r, Recv::Failed(w) if w.contains("too long")),
        "{r:?}"
    );
}

#[test]
fn when_the_kernel_seals_only_control_records_are_left_for_it() {
    let pki = Pki::new("kernel");
    for suite in SUITES {
        let (mut cl, mut srv, sites) = established(&pki, Provider::AwsLc, suite, Some(ALL));
        let tx = srv.take_kernel_tx().expect("the keys for TLS_TX");
        assert!(srv.take_kernel_tx().is_none(), "once");
        assert!(srv.kernel_seals());
        // Nothing is sealed in user space any more: the role's bytes go to the kernel.
        let mut out = Vec::new();
        srv.staged.extend_from_slice(b"plain");
        srv.seal(&mut out);
        assert!(out.is_empty());
        let mut wire = kernel_seal(&tx, 0, 23, b"from the kernel");
        let tls13 = !format!("{suite:?}").starts_with("TLS_ECDHE");
        let mut j = 1;
        let mut keys = tx;
        if tls13 {
            // A KeyUpdate asked of us: the kernel sends ours, then takes new keys.
            cl.refresh_traffic_keys().unwrap();
            cl.writer().write_all(b"rekey").unwrap();
            let r = receive(&mut srv, &sites, &client_wire(&mut cl), &mut out);
            assert_eq!(r, Recv::Data);
            assert!(out.is_empty(), "no record from user space");
            let mut k = srv.take_kernel_out();
            assert_eq!(k.len(), 2, "{k:?}");
            assert_eq!(k[0], KernelOut::Record(22, vec![24, 0, 0, 1, 0]));
            let Some(KernelOut::TxKeys(next)) = k.pop() else {
                panic!("{k:?}")
            };
            wire.extend(kernel_seal(&keys, j, 22, &[24, 0, 0, 1, 0]));
            keys = next;
            j = 0;
            wire.extend(kernel_seal(&keys, j, 23, b" and after a KeyUpdate"));
            j += 1;
        }
        srv.close_notify(&mut out);
        assert!(out.is_empty());
        let k = srv.take_kernel_out();
        assert_eq!(k, vec![KernelOut::Record(21, vec![1, 0])]);
        wire.extend(kernel_seal(&keys, j, 21, &[1, 0]));
        let (got, closed) = client_reads(&mut cl, &wire);
        let want: &[u8] = if tls13 {
            b"from the kernel and after a KeyUpdate"
        } else {
            b"from the kernel"
        };
        assert_eq!(got, want, "{suite:?}");
        assert!(closed);
    }
    // A cipher the kernel lacks stays in user space.
    let only_aes = Support {
        aes_gcm_128: true,
        ..Support::default()
    };
    let (_cl, mut srv, _) = established(&pki, Provider::AwsLc, SUITES[2], Some(only_aes));
    assert!(srv.take_kernel_tx().is_none() && !srv.kernel_seals());
}

#[test]
fn send_keys_are_renewed_at_their_limit_even_within_one_write() {
    let pki = Pki::new("limit");
    let data: Vec<u8> = (0..40_000u32).map(|i| (i % 253) as u8).collect();
    // TLS 1.3: a KeyUpdate of ours as soon as the limit is reached, between the records
    // of one write (three records here), and the client reads all of it.
    for suite in [SUITES[0], SUITES[2]] {
        let (mut cl, mut srv, _) = established(&pki, Provider::AwsLc, suite, None);
        let t = srv.traffic_mut().unwrap();
        t.limit = t.records.tx.as_ref().unwrap().seq + 1;
        let mut out = Vec::new();
        srv.staged.extend_from_slice(&data);
        srv.seal(&mut out);
        let t = srv.traffic_mut().unwrap();
        // One record under the old keys, then the KeyUpdate, then two under the new ones.
        assert_eq!(t.records.tx.as_ref().unwrap().seq, 2, "{suite:?}");
        let (got, _) = client_reads(&mut cl, &out);
        assert!(got == data, "{suite:?}");
    }
    // TLS 1.2 has no KeyUpdate: the connection ends with close_notify at its limit.
    let (mut cl, mut srv, _) = established(&pki, Provider::AwsLc, SUITES[3], None);
    let t = srv.traffic_mut().unwrap();
    t.limit = t.records.tx.as_ref().unwrap().seq + 1;
    let mut out = Vec::new();
    srv.staged.extend_from_slice(&data);
    srv.seal(&mut out);
    let (got, closed) = client_reads(&mut cl, &out);
    assert_eq!(got, &data[..16_384]);
    assert!(closed, "close_notify at the limit");
    let mut more = Vec::new();
    srv.staged.extend_from_slice(b"more");
    srv.seal(&mut more);
    assert!(more.is_empty(), "nothing sealed after it");
}

#[test]
fn an_empty_handshake_record_is_refused() {
    use rustls::crypto::cipher::{AeadKey, Iv};
    let pki = Pki::new("emptyhs");
    let (_cl, mut srv, sites) = established(&pki, Provider::AwsLc, SUITES[0], None);
    // The server's receiving keys swapped for known ones, so that this test can seal as
    // the client: a record whose inner type is handshake and whose content is empty (RFC
    // 8446 §5.1 forbids it; a stream of them would cost decrypts and carry nothing).
    let secret = || rustls::ConnectionTrafficSecrets::Aes256Gcm {
        key: AeadKey::from([9; 32]),
        iv: Iv::new([4; 12]),
    };
    let t = srv.traffic_mut().unwrap();
    t.records.rx = crate::record::Keys::new(Provider::AwsLc, 0, &secret()).unwrap();
    let mut client = crate::record::Records::new(
        Provider::AwsLc,
        rustls::ProtocolVersion::TLSv1_3,
        (0, &secret()),
        (0, &secret()),
    )
    .unwrap();
    let mut wire = Vec::new();
    client.seal(APPLICATION_DATA, b"fine", &mut wire);
    let mut out = Vec::new();
    assert_eq!(receive(&mut srv, &sites, &wire, &mut out), Recv::Data);
    let mut wire = Vec::new();
    client.seal_one(HANDSHAKE, b"", &mut wire);
    let r = receive(&mut srv, &sites, &wire, &mut out);
    assert!(
        matches!(&r, Recv::Failed(w) if w.contains("empty handshake")),
        "{r:?}"
    );
}
