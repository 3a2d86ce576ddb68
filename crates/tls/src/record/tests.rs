//! The record formats, sealed by one side and opened by the other, on both providers.

use rustls::crypto::cipher::{AeadKey, Iv};
use rustls::{ConnectionTrafficSecrets, ProtocolVersion};

use super::*;

fn secrets(chacha: bool, k: u8) -> ConnectionTrafficSecrets {
    let (key, iv) = (AeadKey::from([k; 32]), Iv::new([k.wrapping_mul(3); 12]));
    if chacha {
        ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv }
    } else {
        ConnectionTrafficSecrets::Aes256Gcm { key, iv }
    }
}

/// Two ends of one connection: `a` sends with what `b` receives with.
fn pair(provider: Provider, version: ProtocolVersion, chacha: bool) -> (Records, Records) {
    let (x, y) = (secrets(chacha, 1), secrets(chacha, 2));
    (
        Records::new(provider, version, (5, &x), (9, &y)).unwrap(),
        Records::new(provider, version, (9, &y), (5, &x)).unwrap(),
    )
}

fn cases() -> Vec<(Provider, ProtocolVersion, bool)> {
    let mut v = Vec::new();
    for p in [Provider::AwsLc, Provider::Ring] {
        for ver in [ProtocolVersion::TLSv1_3, ProtocolVersion::TLSv1_2] {
            for chacha in [false, true] {
                v.push((p, ver, chacha));
            }
        }
    }
    v
}

#[test]
fn what_one_end_seals_the_other_opens() {
    for (p, ver, chacha) in cases() {
        let (mut a, mut b) = pair(p, ver, chacha);
        let mut wire = Vec::new();
        let big: Vec<u8> = (0..40_000u32).map(|i| i as u8).collect();
        a.seal(APPLICATION_DATA, b"GET /", &mut wire);
        a.seal(ALERT, &[1, 0], &mut wire);
        a.seal(APPLICATION_DATA, &big, &mut wire);
        let mut got = Vec::new();
        let mut types = Vec::new();
        let mut at = 0;
        while at < wire.len() {
            let o = b.open(&mut wire[at..]).unwrap().unwrap();
            assert!(o.len <= MAX_PLAIN);
            types.push(o.typ);
            got.push(wire[at + o.start..at + o.start + o.len].to_vec());
            at += o.consumed;
        }
        assert_eq!(types, [23, 21, 23, 23, 23], "{p:?} {ver:?} chacha={chacha}");
        assert_eq!(got[0], b"GET /");
        assert_eq!(got[1], [1, 0]);
        assert_eq!(got[2..].concat(), big);
        assert_eq!(a.tx.as_ref().unwrap().seq, 5 + 5);
        assert_eq!(b.rx.seq, 5 + 5);
        // TLS 1.3 hides the type: every record is application data outside.
        if ver == ProtocolVersion::TLSv1_3 {
            let mut r = &wire[..];
            while !r.is_empty() {
                assert_eq!(r[0], 23);
                r = &r[5 + usize::from(u16::from_be_bytes([r[3], r[4]]))..];
            }
        }
    }
}

#[test]
fn a_record_cut_anywhere_waits_for_the_rest() {
    for (p, ver, chacha) in cases() {
        let (mut a, mut b) = pair(p, ver, chacha);
        let mut wire = Vec::new();
        a.seal(APPLICATION_DATA, b"one record", &mut wire);
        for cut in 0..wire.len() {
            let mut part = wire[..cut].to_vec();
            assert_eq!(b.open(&mut part), None, "cut at {cut}");
        }
        let o = b.open(&mut wire).unwrap().unwrap();
        assert_eq!(o.consumed, wire.len());
    }
}

#[test]
fn bad_records_get_their_alert() {
    for (p, ver, chacha) in cases() {
        let (mut a, b) = pair(p, ver, chacha);
        let mut wire = Vec::new();
        a.seal(APPLICATION_DATA, b"data", &mut wire);
        let open = |w: &mut Vec<u8>| {
            let mut b2 = Records {
                tls13: b.tls13,
                explicit: b.explicit,
                tx: None,
                rx: Keys::new(p, 9, &secrets(chacha, 1)).unwrap(),
                provider: p,
            };
            b2.rx.seq = 5;
            b2.open(w).unwrap().map(|o| o.typ).map_err(|f| f.alert)
        };
        assert_eq!(open(&mut wire.clone()), Ok(23), "{p:?} {ver:?} {chacha}");
        for at in 5..wire.len() {
            let mut w = wire.clone();
            w[at] ^= 0x40;
            assert_eq!(
                open(&mut w),
                Err(alert::BAD_RECORD_MAC),
                "byte {at} changed"
            );
        }
        let mut w = wire.clone();
        w[2] = 1;
        assert_eq!(open(&mut w), Err(alert::DECODE_ERROR), "record version");
        let mut w = wire.clone();
        w[3] = 0x50;
        assert_eq!(open(&mut w), Err(alert::RECORD_OVERFLOW));
        if ver == ProtocolVersion::TLSv1_3 {
            // A ChangeCipherSpec, or a plaintext alert, after the handshake.
            let mut w = vec![20, 3, 3, 0, 1, 1];
            assert_eq!(open(&mut w), Err(alert::UNEXPECTED_MESSAGE));
        }
    }
}

#[test]
fn tls13_padding_is_taken_off_and_a_record_of_only_zeros_refused() {
    for p in [Provider::AwsLc, Provider::Ring] {
        let (mut a, mut b) = pair(p, ProtocolVersion::TLSv1_3, false);
        // Sealed as a peer may: content, type, then zeros.
        let mut wire = Vec::new();
        a.seal(0, b"padded\x17\0\0\0", &mut wire);
        // That is: "padded", type 23, three zeros, then our own type byte 0 — all zeros
        // after the 23, so 23 is the type.
        let o = b.open(&mut wire).unwrap().unwrap();
        assert_eq!(
            (o.typ, &wire[o.start..o.start + o.len]),
            (23, &b"padded"[..])
        );
        let mut wire = Vec::new();
        a.seal(0, &[0, 0, 0], &mut wire);
        assert_eq!(
            b.open(&mut wire).unwrap().map_err(|f| f.alert),
            Err(alert::UNEXPECTED_MESSAGE)
        );
    }
}
