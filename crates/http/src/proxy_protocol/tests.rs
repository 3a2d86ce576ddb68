use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};

use super::crc32c::{crc32c_finish, crc32c_update};
use super::header::V2_SIG;
use super::v2::{PP2_TYPE_CRC32C, V2_FIXED};
use super::write::same_family;
use super::*;
use proptest::prelude::*;

fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn done(buf: &[u8]) -> (ProxyHeader, usize) {
    match parse(buf) {
        Ok(Parse::Done { header, consumed }) => (header, consumed),
        other => panic!("{:?}: {other:?}", String::from_utf8_lossy(buf)),
    }
}

fn err(buf: &[u8]) -> &'static str {
    match parse(buf) {
        Err(ProxyError(e)) => e,
        other => panic!("{:?}: {other:?}", String::from_utf8_lossy(buf)),
    }
}

fn tcp(src: &str, dst: &str) -> ProxyHeader {
    ProxyHeader::Tcp {
        src: sa(src),
        dst: sa(dst),
    }
}

/// A v2 header with the given command/family bytes and block.
fn v2(ver_cmd: u8, fam: u8, block: &[u8]) -> Vec<u8> {
    let mut out = V2_SIG.to_vec();
    out.push(ver_cmd);
    out.push(fam);
    out.extend_from_slice(&u16::try_from(block.len()).unwrap().to_be_bytes());
    out.extend_from_slice(block);
    out
}

/// The IPv4 address block of 192.0.2.1:1234 -> 198.51.100.2:80.
const V4_BLOCK: [u8; 12] = [192, 0, 2, 1, 198, 51, 100, 2, 0x04, 0xd2, 0, 80];

fn tlv(kind: u8, value: &[u8]) -> Vec<u8> {
    let mut out = vec![kind];
    out.extend_from_slice(&u16::try_from(value.len()).unwrap().to_be_bytes());
    out.extend_from_slice(value);
    out
}

/// A TCP4 v2 header with `tlvs` and a CRC32C TLV filled in correctly.
fn v2_with_crc(tlvs: &[u8]) -> Vec<u8> {
    let mut block = V4_BLOCK.to_vec();
    block.extend_from_slice(tlvs);
    block.extend_from_slice(&tlv(PP2_TYPE_CRC32C, &[0; 4]));
    let mut h = v2(0x21, 0x11, &block);
    let crc = crc32c_finish(crc32c_update(!0, &h));
    let at = h.len() - 4;
    h[at..].copy_from_slice(&crc.to_be_bytes());
    h
}

#[test]
fn crc32c_check_value() {
    assert_eq!(crc32c_finish(crc32c_update(!0, b"123456789")), 0xE306_9283);
    assert_eq!(crc32c_finish(crc32c_update(!0, b"")), 0);
}

// --- version 1 ---

#[test]
fn v1_specification_example() {
    let buf = b"PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\nGET / HTTP/1.1\r\nHost: 192.168.0.11\r\n\r\n";
    let (h, n) = done(buf);
    assert_eq!(h, tcp("192.168.0.1:56324", "192.168.0.11:443"));
    assert_eq!(&buf[n..], b"GET / HTTP/1.1\r\nHost: 192.168.0.11\r\n\r\n");
}

#[test]
fn v1_longest_lines() {
    let v4 = b"PROXY TCP4 255.255.255.255 255.255.255.255 65535 65535\r\n";
    assert_eq!(v4.len(), 56);
    assert_eq!(
        done(v4),
        (tcp("255.255.255.255:65535", "255.255.255.255:65535"), 56)
    );
    let f = "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff";
    let v6 = format!("PROXY TCP6 {f} {f} 65535 65535\r\n");
    assert_eq!(v6.len(), 104);
    let a = format!("[{f}]:65535");
    assert_eq!(done(v6.as_bytes()), (tcp(&a, &a), 104));
    let unknown = format!("PROXY UNKNOWN {f} {f} 65535 65535\r\n");
    assert_eq!(unknown.len(), V1_MAX_LEN);
    assert_eq!(done(unknown.as_bytes()), (ProxyHeader::Unknown, 107));
    // One byte more does not fit.
    let long = format!("PROXY UNKNOWN {f} {f} 65535 655350\r\n");
    assert_eq!(err(long.as_bytes()), "v1 line longer than 107 bytes");
    assert_eq!(parse(&long.as_bytes()[..106]), Ok(Parse::Partial));
    assert_eq!(
        err(&long.as_bytes()[..107]),
        "v1 line longer than 107 bytes"
    );
}

#[test]
fn v1_ipv6_forms() {
    for (line, src, dst) in [
        ("PROXY TCP6 ::1 ::1 1 2\r\n", "[::1]:1", "[::1]:2"),
        (
            "PROXY TCP6 :: 2001:DB8::A 0 80\r\n",
            "[::]:0",
            "[2001:db8::a]:80",
        ),
        (
            "PROXY TCP6 ::ffff:192.0.2.1 0001:0db8::1 1 2\r\n",
            "[::ffff:192.0.2.1]:1",
            "[1:db8::1]:2",
        ),
    ] {
        assert_eq!(done(line.as_bytes()), (tcp(src, dst), line.len()), "{line}");
    }
}

#[test]
fn v1_unknown() {
    assert_eq!(done(b"PROXY UNKNOWN\r\n"), (ProxyHeader::Unknown, 15));
    assert_eq!(
        done(b"PROXY UNKNOWN whatever, ignored 1 2\r\nGET"),
        (ProxyHeader::Unknown, 37)
    );
    assert_eq!(done(b"PROXY UNKNOWN \r\n"), (ProxyHeader::Unknown, 16));
    assert_eq!(
        err(b"PROXY UNKNOWNX\r\n"),
        "v1 UNKNOWN not followed by a space or CRLF"
    );
    assert_eq!(
        err(b"PROXY UNKNOWN\n"),
        "v1 UNKNOWN not followed by a space or CRLF"
    );
    assert_eq!(err(b"PROXY UNKNOWN\rX"), "v1 line not ended by CRLF");
    assert_eq!(
        err(b"PROXY UNKNOWN a\tb\r\n"),
        "v1 invalid byte after UNKNOWN"
    );
    assert_eq!(
        err(b"PROXY UNKNOWN a\nb\r\n"),
        "v1 invalid byte after UNKNOWN"
    );
    assert_eq!(
        err(b"PROXY UNKNOWN \xff\r\n"),
        "v1 invalid byte after UNKNOWN"
    );
}

#[test]
fn v1_errors() {
    let cases: &[(&[u8], &str)] = &[
        (b"GET / HTTP/1.1\r\n", "not a PROXY protocol header"),
        (b"PROXY\r\n", "not a PROXY protocol header"),
        (
            b"PROXY  TCP4 1.2.3.4 1.2.3.4 1 2\r\n",
            "v1 protocol is not TCP4, TCP6 or UNKNOWN",
        ),
        (
            b"proxy TCP4 1.2.3.4 1.2.3.4 1 2\r\n",
            "not a PROXY protocol header",
        ),
        (
            b"PROXY tcp4 1.2.3.4 1.2.3.4 1 2\r\n",
            "v1 protocol is not TCP4, TCP6 or UNKNOWN",
        ),
        (
            b"PROXY UDP4 1.2.3.4 1.2.3.4 1 2\r\n",
            "v1 protocol is not TCP4, TCP6 or UNKNOWN",
        ),
        (
            b"PROXY TCP4  1.2.3.4 1.2.3.4 1 2\r\n",
            "v1 invalid source address",
        ),
        (
            b"PROXY TCP4 1.2.3.4  1.2.3.4 1 2\r\n",
            "v1 invalid destination address",
        ),
        (
            b"PROXY TCP4 1.2.3.4 1.2.3.4  1 2\r\n",
            "v1 invalid source port",
        ),
        (
            b"PROXY TCP4 1.2.3.4 1.2.3.4 1  2\r\n",
            "v1 invalid destination port",
        ),
        (
            b"PROXY TCP4 1.2.3.4 1.2.3.4 1 2 \r\n",
            "v1 invalid destination port",
        ),
        (
            b"PROXY TCP4 1.2.3.4 1.2.3.4 1 2\n",
            "v1 invalid destination port",
        ),
        (
            b"PROXY TCP4 1.2.3.4 1.2.3.4 1 2\r\r\n",
            "v1 line not ended by CRLF",
        ),
        (
            b"PROXY TCP4 1.2.3.4 1.2.3.4 1 2\rX",
            "v1 line not ended by CRLF",
        ),
        (
            b"PROXY TCP4 1.2.3.4\t1.2.3.4 1 2\r\n",
            "v1 invalid source address",
        ),
        (
            b"PROXY TCP4 01.2.3.4 1.2.3.4 1 2\r\n",
            "v1 invalid source address",
        ),
        (
            b"PROXY TCP4 1.2.3.256 1.2.3.4 1 2\r\n",
            "v1 invalid source address",
        ),
        (
            b"PROXY TCP4 1.2.3 1.2.3.4 1 2\r\n",
            "v1 invalid source address",
        ),
        (
            b"PROXY TCP4 1.2.3.4.5 1.2.3.4 1 2\r\n",
            "v1 invalid source address",
        ),
        (
            b"PROXY TCP4 1..3.4 1.2.3.4 1 2\r\n",
            "v1 invalid source address",
        ),
        (
            b"PROXY TCP4 ::1 1.2.3.4 1 2\r\n",
            "v1 invalid source address",
        ),
        (
            b"PROXY TCP4 1.2.3.4 ::1 1 2\r\n",
            "v1 invalid destination address",
        ),
        (
            b"PROXY TCP6 1.2.3.4 ::1 1 2\r\n",
            "v1 invalid source address",
        ),
        (
            b"PROXY TCP6 ::1 1::2::3 1 2\r\n",
            "v1 invalid destination address",
        ),
        (
            b"PROXY TCP6 ::1%eth0 ::1 1 2\r\n",
            "v1 invalid source address",
        ),
        (b"PROXY TCP6 [::1] ::1 1 2\r\n", "v1 invalid source address"),
        (
            b"PROXY TCP6 00000::1 ::1 1 2\r\n",
            "v1 invalid source address",
        ),
        (
            b"PROXY TCP6 ::1:2:3:4:5:6:7:8 ::1 1 2\r\n",
            "v1 invalid source address",
        ),
        (
            b"PROXY TCP4 1.2.3.4 1.2.3.4 01 2\r\n",
            "v1 invalid source port",
        ),
        (
            b"PROXY TCP4 1.2.3.4 1.2.3.4 00 2\r\n",
            "v1 invalid source port",
        ),
        (
            b"PROXY TCP4 1.2.3.4 1.2.3.4 65536 2\r\n",
            "v1 invalid source port",
        ),
        (
            b"PROXY TCP4 1.2.3.4 1.2.3.4 1 65536\r\n",
            "v1 invalid destination port",
        ),
        (
            b"PROXY TCP4 1.2.3.4 1.2.3.4 1 -2\r\n",
            "v1 invalid destination port",
        ),
        (
            b"PROXY TCP4 1.2.3.4 1.2.3.4 +1 2\r\n",
            "v1 invalid source port",
        ),
        (
            b"PROXY TCP4 1.2.3.4 1.2.3.4 1 2 3\r\n",
            "v1 invalid destination port",
        ),
        (
            b"PROXY TCP4 1.2.3.4 1.2.3.4 1\r\n",
            "v1 invalid source port",
        ),
        (
            b"PROXY TCP4 1.2.3.4 1.2.3.4\r\n",
            "v1 invalid destination address",
        ),
    ];
    for &(line, want) in cases {
        assert_eq!(err(line), want, "{:?}", String::from_utf8_lossy(line));
    }
}

#[test]
fn v1_edge_ports() {
    assert_eq!(
        done(b"PROXY TCP4 0.0.0.0 0.0.0.0 0 0\r\n").0,
        tcp("0.0.0.0:0", "0.0.0.0:0")
    );
    assert_eq!(
        done(b"PROXY TCP4 1.2.3.4 5.6.7.8 65535 10\r\n").0,
        tcp("1.2.3.4:65535", "5.6.7.8:10")
    );
}

#[test]
fn v1_rejects_at_the_first_wrong_byte() {
    // A plain HTTP request is refused from its first byte on.
    assert_eq!(err(b"G"), "not a PROXY protocol header");
    assert_eq!(err(b"PRI * HTTP/2.0"), "not a PROXY protocol header");
    assert_eq!(err(b"\x16\x03\x01"), "not a PROXY protocol header");
    for (buf, want) in [
        (
            &b"PROXY TCP5"[..],
            "v1 protocol is not TCP4, TCP6 or UNKNOWN",
        ),
        (b"PROXY TCP4 1.2.3.", "v1 invalid source address"), // fine so far...
        (b"PROXY TCP4 256", "v1 invalid source address"),
        (b"PROXY TCP4 1.2.3.4.", "v1 invalid source address"),
        (b"PROXY TCP4 1..", "v1 invalid source address"),
        (b"PROXY TCP4 01", "v1 invalid source address"),
        (b"PROXY TCP6 1:::", "v1 invalid source address"),
        (b"PROXY TCP6 1::2::", "v1 invalid source address"),
        (
            b"PROXY TCP4 1.2.3.4 1.2.3.4 65536",
            "v1 invalid source port",
        ),
        (b"PROXY TCP4 1.2.3.4 1.2.3.4 0", "v1 invalid source port"),
    ] {
        if buf == b"PROXY TCP4 1.2.3." {
            assert_eq!(parse(buf), Ok(Parse::Partial)); // ...still a valid prefix
            continue;
        }
        if buf == b"PROXY TCP4 1.2.3.4 1.2.3.4 0" {
            assert_eq!(parse(buf), Ok(Parse::Partial)); // "0 " may follow
            assert_eq!(err(b"PROXY TCP4 1.2.3.4 1.2.3.4 00"), want);
            continue;
        }
        assert_eq!(err(buf), want, "{:?}", String::from_utf8_lossy(buf));
    }
}

#[test]
fn v1_partial() {
    for buf in [
        &b""[..],
        b"P",
        b"PRO",
        b"PROXY",
        b"PROXY ",
        b"PROXY T",
        b"PROXY TCP",
        b"PROXY TCP4",
        b"PROXY U",
        b"PROXY UNKNOWN",
        b"PROXY UNKNOWN ",
        b"PROXY UNKNOWN ab",
        b"PROXY UNKNOWN\r",
        b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2",
        b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r",
        b"PROXY TCP6 ::1 ::",
        b"PROXY TCP6 ::ffff:1.2.3",
    ] {
        assert_eq!(
            parse(buf),
            Ok(Parse::Partial),
            "{:?}",
            String::from_utf8_lossy(buf)
        );
    }
}

// --- version 2 ---

#[test]
fn v2_tcp4_and_tcp6() {
    let h = v2(0x21, 0x11, &V4_BLOCK);
    let mut buf = h.clone();
    buf.extend_from_slice(b"GET /");
    assert_eq!(done(&buf), (tcp("192.0.2.1:1234", "198.51.100.2:80"), 28));

    let mut block = Vec::new();
    block.extend_from_slice(&"2001:db8::1".parse::<Ipv6Addr>().unwrap().octets());
    block.extend_from_slice(&"::ffff:10.0.0.1".parse::<Ipv6Addr>().unwrap().octets());
    block.extend_from_slice(&[0xff, 0xff, 0x01, 0xbb]);
    assert_eq!(
        done(&v2(0x21, 0x21, &block)),
        (tcp("[2001:db8::1]:65535", "[::ffff:10.0.0.1]:443"), 52)
    );
}

#[test]
fn v2_local_ignores_family_and_block() {
    let mut out = Vec::new();
    write_v2_local(&mut out);
    assert_eq!(out, b"\r\n\r\n\0\r\nQUIT\n\x20\x00\x00\x00");
    assert_eq!(done(&out), (ProxyHeader::Local, 16));
    // Receivers must skip the announced length even for LOCAL.
    assert_eq!(done(&v2(0x20, 0x11, &V4_BLOCK)), (ProxyHeader::Local, 28));
    assert_eq!(done(&v2(0x20, 0xff, b"xyz")), (ProxyHeader::Local, 19));
    assert_eq!(done(&v2(0x20, 0x21, b"")), (ProxyHeader::Local, 16));
}

#[test]
fn v2_unknown_families() {
    assert_eq!(done(&v2(0x21, 0x00, b"")), (ProxyHeader::Unknown, 16));
    assert_eq!(done(&v2(0x21, 0x00, b"opaque")), (ProxyHeader::Unknown, 22));
    assert_eq!(done(&v2(0x21, 0x12, &V4_BLOCK)), (ProxyHeader::Unknown, 28));
    assert_eq!(done(&v2(0x21, 0x22, &[0; 36])), (ProxyHeader::Unknown, 52));
    assert_eq!(
        done(&v2(0x21, 0x31, &[0; 216])),
        (ProxyHeader::Unknown, 232)
    );
    assert_eq!(
        done(&v2(0x21, 0x32, &[0; 216])),
        (ProxyHeader::Unknown, 232)
    );
}

#[test]
fn v2_tlvs_are_skipped() {
    let mut block = V4_BLOCK.to_vec();
    block.extend_from_slice(&tlv(0x01, b"h2")); // ALPN
    block.extend_from_slice(&tlv(0x04, b"")); // NOOP
    block.extend_from_slice(&tlv(0xEA, &[1; 40])); // vendor (AWS-style)
    let (h, n) = done(&v2(0x21, 0x11, &block));
    assert_eq!(h, tcp("192.0.2.1:1234", "198.51.100.2:80"));
    assert_eq!(n, 16 + block.len());
}

#[test]
fn v2_crc32c() {
    let good = v2_with_crc(&tlv(0x02, b"example.com"));
    assert_eq!(done(&good).1, good.len());
    // Every single-bit flip after the fixed part is caught (by the CRC,
    // or by the framing it breaks).
    let crc_type_at = good.len() - 7;
    assert_eq!(good[crc_type_at], PP2_TYPE_CRC32C);
    for i in V2_FIXED..good.len() {
        if i == crc_type_at {
            continue; // turns the checksum into an unknown TLV
        }
        let mut bad = good.clone();
        bad[i] ^= 0x10;
        assert!(parse(&bad).is_err(), "flip at {i}");
    }
    let mut bad = good.clone();
    let at = bad.len() - 1;
    bad[at] ^= 1;
    assert_eq!(err(&bad), "v2 CRC32C mismatch");

    let mut block = V4_BLOCK.to_vec();
    block.extend_from_slice(&tlv(PP2_TYPE_CRC32C, &[0; 3]));
    assert_eq!(err(&v2(0x21, 0x11, &block)), "v2 CRC32C TLV is not 4 bytes");
    let twice = v2_with_crc(&tlv(PP2_TYPE_CRC32C, &[0; 4]));
    assert_eq!(err(&twice), "v2 duplicate CRC32C TLV");
}

#[test]
fn v2_errors() {
    let mut sig = V2_SIG.to_vec();
    sig[11] = b'X';
    assert_eq!(err(&sig), "not a PROXY protocol header");
    assert_eq!(err(b"\r\n\r\n\r\n"), "not a PROXY protocol header");
    assert_eq!(err(&v2(0x11, 0x11, &V4_BLOCK)), "v2 version is not 2");
    assert_eq!(err(&v2(0x31, 0x11, &V4_BLOCK)), "v2 version is not 2");
    assert_eq!(err(&v2(0x01, 0x11, &V4_BLOCK)), "v2 version is not 2");
    assert_eq!(
        err(&v2(0x22, 0x11, &V4_BLOCK)),
        "v2 command is not LOCAL or PROXY"
    );
    assert_eq!(
        err(&v2(0x2f, 0x11, &V4_BLOCK)),
        "v2 command is not LOCAL or PROXY"
    );
    for fam in [0x01, 0x02, 0x10, 0x13, 0x20, 0x30, 0x33, 0x41, 0xff] {
        assert_eq!(
            err(&v2(0x21, fam, &V4_BLOCK)),
            "v2 unknown address family or transport",
            "{fam:#x}"
        );
    }
    assert_eq!(
        err(&v2(0x21, 0x11, &V4_BLOCK[..11])),
        "v2 length shorter than the address block"
    );
    assert_eq!(
        err(&v2(0x21, 0x21, &[0; 35])),
        "v2 length shorter than the address block"
    );
    assert_eq!(
        err(&v2(0x21, 0x31, &[0; 215])),
        "v2 length shorter than the address block"
    );
    assert_eq!(
        err(&v2(0x21, 0x11, &[])),
        "v2 length shorter than the address block"
    );
    // The largest header accepted, then one byte more.
    let mut block = V4_BLOCK.to_vec();
    block.extend_from_slice(&tlv(0x04, &[0; V2_MAX_LEN - 16 - 12 - 3]));
    assert_eq!(done(&v2(0x21, 0x11, &block)).1, V2_MAX_LEN);
    block.push(0);
    assert_eq!(
        err(&v2(0x21, 0x11, &block)),
        "v2 header longer than 536 bytes"
    );
    // Rejected from the length field on, before the block arrives.
    assert_eq!(
        err(&v2(0x21, 0x11, &block)[..16]),
        "v2 header longer than 536 bytes"
    );
    assert_eq!(
        err(&v2(0x20, 0x00, &[0; 600])[..16]),
        "v2 header longer than 536 bytes"
    );
    // TLV framing.
    let mut block = V4_BLOCK.to_vec();
    block.extend_from_slice(&[0x01, 0x00]);
    assert_eq!(err(&v2(0x21, 0x11, &block)), "v2 truncated TLV");
    let mut block = V4_BLOCK.to_vec();
    block.extend_from_slice(&[0x01, 0x00, 0x03, b'a', b'b']);
    assert_eq!(
        err(&v2(0x21, 0x11, &block)),
        "v2 TLV longer than the header"
    );
}

#[test]
fn v2_partial_and_early_rejection() {
    let h = v2(0x21, 0x11, &V4_BLOCK);
    assert_eq!(parse(&h[..1]), Ok(Parse::Partial));
    assert_eq!(parse(&h[..10]), Ok(Parse::Partial));
    assert_eq!(parse(&h[..16]), Ok(Parse::Partial));
    assert_eq!(parse(&h[..27]), Ok(Parse::Partial));
    // Bad bytes are refused as soon as they are seen.
    assert_eq!(err(&v2(0x11, 0, b"")[..13]), "v2 version is not 2");
    assert_eq!(
        err(&v2(0x25, 0, b"")[..13]),
        "v2 command is not LOCAL or PROXY"
    );
    assert_eq!(
        err(&v2(0x21, 0x44, b"")[..14]),
        "v2 unknown address family or transport"
    );
    assert_eq!(
        err(&v2(0x21, 0x21, &[0; 12])[..16]),
        "v2 length shorter than the address block"
    );
}

// --- writing ---

#[test]
fn writers() {
    let mut out = Vec::new();
    write_v1(&mut out, sa("192.0.2.1:1234"), sa("198.51.100.2:80"));
    assert_eq!(out, b"PROXY TCP4 192.0.2.1 198.51.100.2 1234 80\r\n");
    out.clear();
    write_v1(&mut out, sa("192.0.2.1:1234"), sa("[2001:db8::2]:80"));
    assert_eq!(out, b"PROXY TCP6 ::ffff:192.0.2.1 2001:db8::2 1234 80\r\n");
    out.clear();
    write_v1_unknown(&mut out);
    assert_eq!(out, b"PROXY UNKNOWN\r\n");
    assert_eq!(done(&out), (ProxyHeader::Unknown, 15));
    out.clear();
    write_v2(&mut out, sa("192.0.2.1:1234"), sa("198.51.100.2:80"));
    assert_eq!(out, v2(0x21, 0x11, &V4_BLOCK));
    out.clear();
    write_v2(&mut out, sa("[2001:db8::1]:1"), sa("198.51.100.2:80"));
    assert_eq!(
        done(&out),
        (tcp("[2001:db8::1]:1", "[::ffff:198.51.100.2]:80"), 52)
    );
    // Appends; does not clear.
    let mut out = b"x".to_vec();
    write_v2_local(&mut out);
    assert_eq!(out.len(), 17);
    assert_eq!(
        ProxyError("x").to_string(),
        "invalid PROXY protocol header: x"
    );
}

// --- properties ---

fn addr() -> impl Strategy<Value = SocketAddr> {
    prop_oneof![
        (any::<[u8; 4]>(), any::<u16>()).prop_map(|(ip, port)| SocketAddr::from((ip, port))),
        (any::<[u8; 16]>(), any::<u16>()).prop_map(|(ip, port)| SocketAddr::from((ip, port))),
        // v4-mapped and other special forms print differently.
        (any::<[u8; 4]>(), any::<u16>()).prop_map(|(ip, port)| {
            SocketAddr::from((Ipv4Addr::from(ip).to_ipv6_mapped(), port))
        }),
        (any::<u16>(), any::<u16>()).prop_map(|(last, port)| SocketAddr::from((
            Ipv6Addr::new(0, 0, 0, 0, 0, 0, 0, last),
            port
        ))),
    ]
}

fn expected(src: SocketAddr, dst: SocketAddr) -> ProxyHeader {
    let (src, dst) = same_family(src, dst);
    ProxyHeader::Tcp { src, dst }
}

/// Valid headers of every kind: written ones, and v2 with TLVs/CRC.
fn valid_header() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        (addr(), addr()).prop_map(|(s, d)| {
            let mut out = Vec::new();
            write_v1(&mut out, s, d);
            out
        }),
        (addr(), addr()).prop_map(|(s, d)| {
            let mut out = Vec::new();
            write_v2(&mut out, s, d);
            out
        }),
        Just(b"PROXY UNKNOWN\r\n".to_vec()),
        "[ -~]{0,91}".prop_map(|rest| format!("PROXY UNKNOWN {rest}\r\n").into_bytes()),
        Just(v2(0x20, 0x00, b"")),
        proptest::collection::vec(any::<u8>(), 0..=64).prop_map(|b| v2(0x20, 0x12, &b)),
        proptest::collection::vec(
            (any::<u8>(), proptest::collection::vec(any::<u8>(), 0..20)),
            0..5
        )
        .prop_map(|tlvs| {
            let bytes: Vec<u8> = tlvs
                .iter()
                .filter(|(k, _)| *k != PP2_TYPE_CRC32C)
                .flat_map(|(k, v)| tlv(*k, v))
                .collect();
            v2_with_crc(&bytes)
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn never_panics(buf in proptest::collection::vec(any::<u8>(), 0..600)) {
        let _ = parse(&buf);
    }

    #[test]
    fn never_panics_near_signatures(
        v1 in any::<bool>(),
        tail in proptest::collection::vec(
            prop_oneof![Just(b' '), Just(b'\r'), Just(b'\n'), Just(b':'), Just(b'.'), Just(b'0'), Just(b'9'), Just(b'f'), any::<u8>()],
            0..120,
        ),
    ) {
        let mut buf = if v1 { b"PROXY TCP4 ".to_vec() } else { V2_SIG.to_vec() };
        buf.extend_from_slice(&tail);
        let _ = parse(&buf);
        if !v1 && buf.len() > 13 {
            // A valid version/command and family, so the rest is looked at.
            buf[12] = 0x20 | (buf[12] & 1);
            buf[13] = [0x00, 0x11, 0x12, 0x21, 0x22, 0x31, 0x32][usize::from(buf[13] % 7)];
            let _ = parse(&buf);
        }
    }

    #[test]
    fn round_trip_v1(src in addr(), dst in addr(), tail in proptest::collection::vec(any::<u8>(), 0..8)) {
        let mut out = Vec::new();
        write_v1(&mut out, src, dst);
        let n = out.len();
        prop_assert!(n <= V1_MAX_LEN);
        out.extend_from_slice(&tail);
        prop_assert_eq!(parse(&out), Ok(Parse::Done { header: expected(src, dst), consumed: n }));
    }

    #[test]
    fn round_trip_v2(src in addr(), dst in addr(), tail in proptest::collection::vec(any::<u8>(), 0..8)) {
        let mut out = Vec::new();
        write_v2(&mut out, src, dst);
        let n = out.len();
        out.extend_from_slice(&tail);
        prop_assert_eq!(parse(&out), Ok(Parse::Done { header: expected(src, dst), consumed: n }));
    }

    #[test]
    fn prefixes_are_partial(h in valid_header()) {
        let Ok(Parse::Done { consumed, .. }) = parse(&h) else {
            return Err(TestCaseError::fail(format!("not valid: {h:?}")));
        };
        prop_assert_eq!(consumed, h.len());
        for k in 0..h.len() {
            prop_assert_eq!(parse(&h[..k]), Ok(Parse::Partial), "prefix {}", k);
        }
    }

    /// Once an input is refused, no continuation makes it acceptable, and
    /// a completed header does not depend on what follows.
    #[test]
    fn verdicts_are_stable(h in valid_header(), cut in any::<prop::sample::Index>(), junk in proptest::collection::vec(any::<u8>(), 1..40)) {
        let at = cut.index(h.len());
        let mut bad = h[..at].to_vec();
        bad.extend_from_slice(&junk);
        let full = parse(&h);
        match parse(&bad) {
            Err(_) => {
                let mut longer = bad.clone();
                longer.extend_from_slice(&h);
                prop_assert!(parse(&longer).is_err());
            }
            Ok(Parse::Done { consumed, .. }) => {
                prop_assert_eq!(parse(&bad[..consumed]), parse(&bad));
            }
            Ok(Parse::Partial) => prop_assert!(bad.len() < V2_MAX_LEN),
        }
        let mut more = h.clone();
        more.extend_from_slice(&junk);
        prop_assert_eq!(parse(&more), full);
    }
}
