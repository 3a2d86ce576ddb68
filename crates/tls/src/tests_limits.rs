//! What a client may send after the handshake that costs the server and carries nothing is
//! limited as rustls limits it (its `TemperCounters` and empty-fragment count): renegotiation
//! attempts, warning alerts, empty records, KeyUpdates; and what the connection queues in
//! answer stays bounded. Records no rustls client sends are sealed here with known keys
//! swapped in for the server's receiving ones.

use std::io::Write;

use rustls::crypto::cipher::{AeadKey, Iv};
use rustls::{ConnectionTrafficSecrets, ProtocolVersion};

use crate::ktls::tests::kernel_seal;
use crate::record::{Keys, Records, ALERT, APPLICATION_DATA, HANDSHAKE};
use crate::tests::Pki;
use crate::tests_traffic::{client_reads, client_wire, established, receive, ALL, SUITES};
use crate::{KernelOut, Provider, Recv, TlsConn};

/// The server's receiving keys swapped for known ones; the client's sealing side with them.
fn as_client(srv: &mut TlsConn, version: ProtocolVersion) -> Records {
    let secret = || ConnectionTrafficSecrets::Aes256Gcm {
        key: AeadKey::from([9; 32]),
        iv: Iv::new([4; 12]),
    };
    let t = srv.traffic_mut().unwrap();
    t.records.rx = Keys::new(Provider::AwsLc, 0, &secret()).unwrap();
    Records::new(Provider::AwsLc, version, (0, &secret()), (0, &secret())).unwrap()
}

/// The outer content type of each record in `wire`.
fn record_types(mut wire: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    while wire.len() >= 5 {
        let len = usize::from(u16::from_be_bytes([wire[3], wire[4]]));
        v.push(wire[0]);
        wire = &wire[(5 + len).min(wire.len())..];
    }
    v
}

/// The rustls client reads `out` and stops at a fatal unexpected_message alert.
fn client_sees_fatal_alert(cl: &mut rustls::ClientConnection, out: &[u8]) {
    let mut rd = out;
    cl.read_tls(&mut rd).unwrap();
    let e = cl.process_new_packets().unwrap_err();
    assert!(format!("{e:?}").contains("UnexpectedMessage"), "{e:?}");
}

#[test]
fn a_record_of_renegotiation_requests_gets_one_warning_then_a_fatal_alert() {
    let pki = Pki::new("renegflood");
    let (mut cl, mut srv, sites) = established(&pki, Provider::AwsLc, SUITES[3], None);
    let mut client = as_client(&mut srv, ProtocolVersion::TLSv1_2);
    // 4096 empty ClientHellos: one full record.
    let hellos = [1u8, 0, 0, 0].repeat(4096);
    let mut wire = Vec::new();
    client.seal(HANDSHAKE, &hellos, &mut wire);
    assert_eq!(record_types(&wire), [HANDSHAKE]);
    let mut out = Vec::new();
    let r = receive(&mut srv, &sites, &wire, &mut out);
    assert!(
        matches!(&r, Recv::Failed(w) if w.contains("renegotiation")),
        "{r:?}"
    );
    // no_renegotiation once, then the fatal alert: 62 bytes, not 4096 alerts (127 KB).
    assert_eq!(record_types(&out), [ALERT, ALERT], "{} bytes", out.len());
    client_sees_fatal_alert(&mut cl, &out);
}

#[test]
fn one_renegotiation_is_refused_with_a_warning_a_second_ends_the_connection() {
    let pki = Pki::new("reneg");
    let (mut cl, mut srv, sites) = established(&pki, Provider::AwsLc, SUITES[3], None);
    let mut client = as_client(&mut srv, ProtocolVersion::TLSv1_2);
    let mut wire = Vec::new();
    client.seal(HANDSHAKE, &[1, 0, 0, 0], &mut wire);
    let mut out = Vec::new();
    assert_eq!(
        receive(&mut srv, &sites, &wire, &mut out),
        Recv::Handshaking
    );
    assert_eq!(record_types(&out), [ALERT], "no_renegotiation");
    let mut rd = &out[..];
    cl.read_tls(&mut rd).unwrap();
    cl.process_new_packets()
        .expect("a warning the client reads on");
    // The connection goes on, and data does not buy another attempt.
    let mut wire = Vec::new();
    client.seal(APPLICATION_DATA, b"still here", &mut wire);
    assert_eq!(receive(&mut srv, &sites, &wire, &mut out), Recv::Data);
    let mut wire = Vec::new();
    client.seal(HANDSHAKE, &[1, 0, 0, 0], &mut wire);
    let mut out = Vec::new();
    let r = receive(&mut srv, &sites, &wire, &mut out);
    assert!(
        matches!(&r, Recv::Failed(w) if w.contains("renegotiation")),
        "{r:?}"
    );
    assert_eq!(record_types(&out), [ALERT]);
    client_sees_fatal_alert(&mut cl, &out);
}

#[test]
fn four_warning_alerts_are_read_past_a_fifth_ends_the_connection() {
    let pki = Pki::new("warnings");
    // TLS 1.2's warnings, and user_canceled, the one TLS 1.3 reads past.
    for (suite, version, warning) in [
        (SUITES[3], ProtocolVersion::TLSv1_2, [1u8, 112]),
        (SUITES[0], ProtocolVersion::TLSv1_3, [1u8, 90]),
    ] {
        let (mut cl, mut srv, sites) = established(&pki, Provider::AwsLc, suite, None);
        let mut client = as_client(&mut srv, version);
        let mut out = Vec::new();
        for i in 0..4 {
            let mut wire = Vec::new();
            client.seal(ALERT, &warning, &mut wire);
            // Data between them does not reset the count (rustls never does).
            client.seal(APPLICATION_DATA, b"x", &mut wire);
            let r = receive(&mut srv, &sites, &wire, &mut out);
            assert_eq!(r, Recv::Data, "{version:?} warning {i}");
        }
        assert!(out.is_empty(), "warnings are not answered");
        let mut wire = Vec::new();
        client.seal(ALERT, &warning, &mut wire);
        let r = receive(&mut srv, &sites, &wire, &mut out);
        assert!(
            matches!(&r, Recv::Failed(w) if w.contains("warning")),
            "{version:?}: {r:?}"
        );
        assert_eq!(record_types(&out).len(), 1, "{version:?}: the fatal alert");
        client_sees_fatal_alert(&mut cl, &out);
    }
}

#[test]
fn thirty_two_empty_records_in_a_row_are_read_past_not_thirty_three() {
    let pki = Pki::new("empty");
    for (suite, version) in [
        (SUITES[0], ProtocolVersion::TLSv1_3),
        (SUITES[3], ProtocolVersion::TLSv1_2),
    ] {
        let (mut cl, mut srv, sites) = established(&pki, Provider::AwsLc, suite, None);
        let mut client = as_client(&mut srv, version);
        let empties = |client: &mut Records, n: usize| {
            let mut wire = Vec::new();
            for _ in 0..n {
                client.seal_one(APPLICATION_DATA, b"", &mut wire);
            }
            wire
        };
        let mut out = Vec::new();
        let wire = empties(&mut client, 32);
        assert_eq!(
            receive(&mut srv, &sites, &wire, &mut out),
            Recv::Handshaking,
            "{version:?}"
        );
        // A record with content resets the count.
        let mut wire = Vec::new();
        client.seal(APPLICATION_DATA, b"x", &mut wire);
        wire.extend(empties(&mut client, 32));
        assert_eq!(receive(&mut srv, &sites, &wire, &mut out), Recv::Data);
        let wire = empties(&mut client, 1);
        let r = receive(&mut srv, &sites, &wire, &mut out);
        assert!(
            matches!(&r, Recv::Failed(w) if w.contains("empty records")),
            "{version:?}: {r:?}"
        );
        assert_eq!(record_types(&out).len(), 1, "{version:?}: the fatal alert");
        client_sees_fatal_alert(&mut cl, &out);
    }
}

#[test]
fn thirty_two_key_updates_between_records_of_data_not_thirty_three() {
    let pki = Pki::new("keyupdates");
    for suite in [SUITES[0], SUITES[2]] {
        let (mut cl, mut srv, sites) = established(&pki, Provider::AwsLc, suite, None);
        let mut out = Vec::new();
        for _ in 0..32 {
            cl.refresh_traffic_keys().unwrap();
        }
        let r = receive(&mut srv, &sites, &client_wire(&mut cl), &mut out);
        assert_eq!(r, Recv::Handshaking, "{suite:?}");
        // Data resets the count.
        cl.writer().write_all(b"data").unwrap();
        for _ in 0..32 {
            cl.refresh_traffic_keys().unwrap();
        }
        let r = receive(&mut srv, &sites, &client_wire(&mut cl), &mut out);
        assert_eq!(r, Recv::Data, "{suite:?}");
        cl.refresh_traffic_keys().unwrap();
        let mut out = Vec::new();
        let r = receive(&mut srv, &sites, &client_wire(&mut cl), &mut out);
        assert!(
            matches!(&r, Recv::Failed(w) if w.contains("KeyUpdates")),
            "{suite:?}: {r:?}"
        );
        assert_eq!(record_types(&out).len(), 1, "{suite:?}: the fatal alert");
    }
}

#[test]
fn key_update_requests_queue_one_answer_for_the_kernel_until_it_is_taken() {
    let pki = Pki::new("kernelout");
    for suite in [SUITES[0], SUITES[2]] {
        let (mut cl, mut srv, sites) = established(&pki, Provider::AwsLc, suite, Some(ALL));
        let mut keys = srv.take_kernel_tx().unwrap();
        let mut j = 0; // records the kernel sealed with `keys`
        let mut out = Vec::new();
        for rounds in [40, 1] {
            // A client asking for KeyUpdates, with data between (which the limit allows), to
            // a connection whose control records are not taken meanwhile.
            for round in 0..rounds {
                cl.refresh_traffic_keys().unwrap();
                cl.writer().write_all(b"x").unwrap();
                let r = receive(&mut srv, &sites, &client_wire(&mut cl), &mut out);
                assert_eq!(r, Recv::Data, "{suite:?} round {round}");
            }
            assert!(out.is_empty());
            // One KeyUpdate of ours (it answers every request made before it is sent) and
            // its keys, which the client reads with.
            let mut k = srv.take_kernel_out();
            assert_eq!(k.len(), 2, "{suite:?}: {} queued", k.len());
            let Some(KernelOut::TxKeys(next)) = k.pop() else {
                panic!("{suite:?}: no keys")
            };
            assert!(matches!(&k[0], KernelOut::Record(22, m) if m[..] == [24, 0, 0, 1, 0]));
            let mut wire = kernel_seal(&keys, j, 22, &[24, 0, 0, 1, 0]);
            wire.extend(kernel_seal(&next, 0, 23, b"on the next keys"));
            let (got, _) = client_reads(&mut cl, &wire);
            assert_eq!(got, b"on the next keys", "{suite:?} after {rounds}");
            (keys, j) = (next, 1);
        }
    }
}
