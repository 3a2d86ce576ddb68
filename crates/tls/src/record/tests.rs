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

/// Opens `ct` (ciphertext then tag) with AWS-LC directly, with a nonce and additional data
/// built here from the RFCs, not by the code under test.
fn reference_open(alg: Alg, key: &[u8], nonce: [u8; 12], aad: &[u8], ct: &[u8]) -> Vec<u8> {
    use aws_lc_rs::aead as a;
    let alg = match alg {
        Alg::Aes256Gcm => &a::AES_256_GCM,
        Alg::Chacha20Poly1305 => &a::CHACHA20_POLY1305,
        Alg::Aes128Gcm => &a::AES_128_GCM,
    };
    let k = a::LessSafeKey::new(a::UnboundKey::new(alg, key).unwrap());
    let mut buf = ct.to_vec();
    let n = k
        .open_in_place(
            a::Nonce::assume_unique_for_key(nonce),
            a::Aad::from(aad),
            &mut buf,
        )
        .expect("the reference opens the record")
        .len();
    buf.truncate(n);
    buf
}

#[test]
fn nonces_and_additional_data_are_those_of_the_rfcs() {
    for p in [Provider::AwsLc, Provider::Ring] {
        for (ver, chacha) in [
            (ProtocolVersion::TLSv1_3, false),
            (ProtocolVersion::TLSv1_3, true),
            (ProtocolVersion::TLSv1_2, false),
            (ProtocolVersion::TLSv1_2, true),
        ] {
            let (mut a, _) = pair(p, ver, chacha);
            let (key, iv) = ([1u8; 32], [3u8; 12]);
            let alg = if chacha {
                Alg::Chacha20Poly1305
            } else {
                Alg::Aes256Gcm
            };
            for seq in [5u64, 6] {
                let mut wire = Vec::new();
                a.seal(APPLICATION_DATA, b"abc", &mut wire);
                // The IV XOR the 64-bit sequence number, left-padded (RFC 8446 §5.3, RFC 7905 §2).
                let mut xored = iv;
                for (i, b) in seq.to_be_bytes().iter().enumerate() {
                    xored[4 + i] ^= b;
                }
                let got = if ver == ProtocolVersion::TLSv1_3 {
                    assert_eq!(&wire[..5], &[23, 3, 3, 0, 3 + 1 + 16]);
                    reference_open(alg, &key, xored, &wire[..5], &wire[5..])
                } else {
                    // seq_num + type + version + length of the plaintext (RFC 5246 §6.2.3.3).
                    let mut aad = seq.to_be_bytes().to_vec();
                    aad.extend_from_slice(&[23, 3, 3, 0, 3]);
                    if chacha {
                        assert_eq!(&wire[..5], &[23, 3, 3, 0, 3 + 16]);
                        reference_open(alg, &key, xored, &aad, &wire[5..])
                    } else {
                        // RFC 5288 §3: salt (the IV's first 4 bytes), then 8 explicit bytes
                        // on the wire; unique per record (the IV's rest XOR the sequence).
                        assert_eq!(&wire[..5], &[23, 3, 3, 0, 8 + 3 + 16]);
                        assert_eq!(&wire[5..13], &xored[4..], "explicit nonce, seq {seq}");
                        let mut nonce = [0u8; 12];
                        nonce[..4].copy_from_slice(&iv[..4]);
                        nonce[4..].copy_from_slice(&wire[5..13]);
                        reference_open(alg, &key, nonce, &aad, &wire[13..])
                    }
                };
                let want: &[u8] = if ver == ProtocolVersion::TLSv1_3 {
                    b"abc\x17"
                } else {
                    b"abc"
                };
                assert_eq!(got, want, "{p:?} {ver:?} chacha={chacha} seq {seq}");
            }
        }
    }
}

#[test]
fn sequence_numbers_never_wrap() {
    for (p, ver, chacha) in cases() {
        let (mut a, mut b) = pair(p, ver, chacha);
        // The last number is used once, then nothing more is sealed under these keys.
        a.tx.as_mut().unwrap().seq = u64::MAX - 1;
        b.rx.seq = u64::MAX - 1;
        let mut wire = Vec::new();
        a.seal(APPLICATION_DATA, b"last", &mut wire);
        let o = b.open(&mut wire).unwrap().unwrap();
        assert_eq!(&wire[o.start..o.start + o.len], b"last");
        let mut more = Vec::new();
        a.seal(APPLICATION_DATA, b"wrapped", &mut more);
        assert!(
            more.is_empty(),
            "{p:?} {ver:?}: sealed past the last sequence number"
        );
        assert_eq!(a.tx.as_ref().unwrap().seq, u64::MAX, "no wrap to 0");
        // A peer that goes on without re-keying is refused, not opened at sequence 0.
        let mut a0 = pair(p, ver, chacha).0;
        a0.tx.as_mut().unwrap().seq = 0;
        let mut w = Vec::new();
        a0.seal(APPLICATION_DATA, b"wrapped", &mut w);
        assert_eq!(
            b.open(&mut w).unwrap().map_err(|f| f.alert),
            Err(alert::UNEXPECTED_MESSAGE),
            "{p:?} {ver:?} chacha={chacha}"
        );
    }
}

#[test]
fn record_sizes_are_held_to_the_limits() {
    for (p, ver, chacha) in cases() {
        let tls13 = ver == ProtocolVersion::TLSv1_3;
        let (mut a, b) = pair(p, ver, chacha);
        let fresh = || {
            let mut r = pair(p, ver, chacha).1;
            r.rx.seq = b.rx.seq;
            r
        };
        // Sealing: 2^14 bytes of plaintext in one record, one more byte in a second.
        let mut wire = Vec::new();
        a.seal(APPLICATION_DATA, &[7; MAX_PLAIN], &mut wire);
        assert_eq!(wire.len(), MAX_PLAIN + a.overhead(), "{p:?} {ver:?}");
        let mut wire = Vec::new();
        a.seal(APPLICATION_DATA, &[7; MAX_PLAIN + 1], &mut wire);
        let first = 5 + usize::from(u16::from_be_bytes([wire[3], wire[4]]));
        assert!(first < wire.len(), "two records");
        // Ciphertext: 2^14 + 256 (TLS 1.3) or + 2048 (TLS 1.2) is the most a header may say.
        let max = MAX_PLAIN + if tls13 { 256 } else { 2048 };
        for (len, overflow) in [(max, false), (max + 1, true)] {
            let mut w = vec![23, 3, 3, (len >> 8) as u8, len as u8];
            w.resize(5 + len, 0x55);
            let r = fresh().open(&mut w).unwrap().map_err(|f| f.alert);
            let want = if overflow {
                alert::RECORD_OVERFLOW
            } else {
                alert::BAD_RECORD_MAC
            };
            assert_eq!(r.map(|o| o.len), Err(want), "{p:?} {ver:?} length {len}");
        }
        // Plaintext: a record that decrypts to more than 2^14 bytes (TLS 1.3: more than
        // 2^14 + 1 of content, type and padding) is refused, even when its content alone
        // would fit.
        let (mut a, _) = pair(p, ver, chacha);
        let mut ok = Vec::new();
        a.seal_one(APPLICATION_DATA, &[7; MAX_PLAIN], &mut ok);
        let mut too_long = Vec::new();
        a.seal_one(APPLICATION_DATA, &[7; MAX_PLAIN + 1], &mut too_long);
        let mut padded = if tls13 {
            let mut content = vec![7; MAX_PLAIN];
            content.extend_from_slice(&[23, 0]); // type 23, then padding: seal_one's type 0
            let mut w = Vec::new();
            a.seal_one(0, &content, &mut w);
            Some(w)
        } else {
            None
        };
        let mut r = fresh();
        assert_eq!(r.open(&mut ok).unwrap().unwrap().len, MAX_PLAIN);
        assert_eq!(
            r.open(&mut too_long).unwrap().map_err(|f| f.alert),
            Err(alert::RECORD_OVERFLOW),
            "{p:?} {ver:?} chacha={chacha}"
        );
        if let Some(w) = padded.as_mut() {
            assert_eq!(
                r.open(w).unwrap().map_err(|f| f.alert),
                Err(alert::RECORD_OVERFLOW),
                "{p:?}: 2^14 of content with 2 bytes of padding"
            );
        }
    }
}

#[test]
fn keys_wipe_their_iv_when_dropped() {
    use std::mem::MaybeUninit;
    let at = std::mem::offset_of!(Keys, iv);
    let iv = |slot: &MaybeUninit<Keys>| {
        // SAFETY: the IV's 12 bytes lie at its offset inside the slot, which is alive; they
        // are initialised (by `Keys::new`, then by the drop's zeroize), and any bytes are
        // valid `u8`s.
        unsafe {
            slot.as_ptr()
                .cast::<u8>()
                .add(at)
                .cast::<[u8; NONCE]>()
                .read()
        }
    };
    for p in [Provider::AwsLc, Provider::Ring] {
        for chacha in [false, true] {
            let mut slot = MaybeUninit::new(Keys::new(p, 0, &secrets(chacha, 2)).unwrap());
            assert_eq!(iv(&slot), [6; NONCE]);
            // SAFETY: `slot` holds a `Keys`, dropped once here and never used as one again.
            unsafe { std::ptr::drop_in_place(slot.as_mut_ptr()) };
            assert_eq!(iv(&slot), [0; NONCE], "{p:?} chacha {chacha}");
        }
    }
}
