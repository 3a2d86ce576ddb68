//! The connection from a client's side: streams opened, requests read, responses written.

use ringx_h3proto::frame::{self, kind};
use ringx_h3proto::qpack::instructions::EncoderInstruction;
use ringx_h3proto::qpack::{Decoded, Decoder};
use ringx_h3proto::{send_data, send_headers, send_trailers, Conn, ErrorCode, Event, Limits, Uni};

mod common;
use common::*;

#[test]
fn our_streams_open_with_their_types_and_settings() {
    let c = Conn::new(Limits::default());
    let control = c.out(Uni::Control);
    assert_eq!(control[0], 0x00);
    let (f, _) = frame::parse(&control[1..], 1000).unwrap().unwrap();
    assert_eq!(f, frame::Frame::Settings(Limits::default().settings()));
    assert_eq!(
        (c.out(Uni::Encoder), c.out(Uni::Decoder)),
        (&[0x02][..], &[0x03][..])
    );
}

#[test]
fn a_get_ends_with_its_head() {
    let mut c = conn(Limits::default());
    c.feed(0, &get(), true).unwrap();
    match &events(&mut c)[..] {
        [Event::Request {
            id: 0,
            head,
            end: true,
        }] => {
            assert_eq!(
                (&head.method[..], head.path.as_deref()),
                (&b"GET"[..], Some(&b"/x"[..]))
            );
            assert_eq!(head.authority.as_deref(), Some(&b"a.example"[..]));
        }
        e => panic!("{e:?}"),
    }
}

#[test]
fn a_body_comes_the_same_however_it_is_split() {
    let mut wire = post("10");
    frame::write_header(&mut wire, 0x21 + 0x1f, 3); // grease between frames
    wire.extend_from_slice(b"xyz");
    frame::write_data(&mut wire, b"01234");
    frame::write_data(&mut wire, b"");
    frame::write_data(&mut wire, b"56789");
    for step in [1, 2, 3, 7, wire.len()] {
        let mut c = conn(Limits::default());
        let chunks: Vec<&[u8]> = wire.chunks(step).collect();
        for (i, piece) in chunks.iter().enumerate() {
            c.feed(4, piece, i + 1 == chunks.len()).unwrap();
        }
        let ev = events(&mut c);
        assert!(
            matches!(
                ev[0],
                Event::Request {
                    id: 4,
                    end: false,
                    ..
                }
            ),
            "{ev:?}"
        );
        let mut body = Vec::new();
        for e in &ev[1..] {
            match e {
                Event::Data { id: 4, data, .. } => body.extend_from_slice(data),
                e => panic!("{e:?}"),
            }
        }
        assert_eq!(body, b"0123456789");
        assert!(
            matches!(ev.last(), Some(Event::Data { end: true, .. })),
            "step {step}"
        );
    }
}

#[test]
fn a_fin_alone_ends_the_request() {
    let mut c = conn(Limits::default());
    c.feed(0, &post("0"), false).unwrap();
    assert!(matches!(
        events(&mut c)[..],
        [Event::Request { end: false, .. }]
    ));
    c.feed(0, &[], true).unwrap();
    assert_eq!(
        events(&mut c),
        [Event::Data {
            id: 0,
            data: bytes::Bytes::new(),
            end: true
        }]
    );
    // Not yet taken, the request itself says it ends.
    let mut c = conn(Limits::default());
    c.feed(0, &post("0"), false).unwrap();
    c.feed(0, &[], true).unwrap();
    assert!(matches!(
        events(&mut c)[..],
        [Event::Request { end: true, .. }]
    ));
}

#[test]
fn trailers_end_the_request() {
    let mut c = conn(Limits::default());
    let mut wire = post("2");
    frame::write_data(&mut wire, b"hi");
    wire.extend_from_slice(&headers(&[("x-checksum", "abc")]));
    c.feed(0, &wire, true).unwrap();
    let ev = events(&mut c);
    assert_eq!(
        ev.last(),
        Some(&Event::Trailers {
            id: 0,
            lines: b"x-checksum: abc\r\n".to_vec()
        })
    );
    // Anything after the trailers but unknown frames is out of order.
    let mut c = conn(Limits::default());
    let mut wire = get();
    wire.extend_from_slice(&headers(&[("x-a", "b")]));
    wire.extend_from_slice(&headers(&[("x-a", "b")]));
    assert_eq!(code(c.feed(0, &wire, false)), ErrorCode::FrameUnexpected);
}

#[test]
fn malformed_requests_are_stream_errors() {
    let cases: Vec<(Vec<u8>, ErrorCode)> = vec![
        (
            headers(&[(":method", "GET"), (":scheme", "https"), (":path", "/")]),
            ErrorCode::Message,
        ),
        (
            headers(&[
                (":method", "GET"),
                (":scheme", "https"),
                (":authority", "a"),
                (":path", "/"),
                ("X-Up", "1"),
            ]),
            ErrorCode::Message,
        ),
        (
            headers(&[
                (":method", "GET"),
                (":scheme", "https"),
                (":authority", "a"),
                (":path", "/"),
                ("connection", "close"),
            ]),
            ErrorCode::Message,
        ),
        (
            headers(&[
                (":method", "GET"),
                (":scheme", "https"),
                (":authority", "a"),
                (":path", "/"),
                ("te", "gzip"),
            ]),
            ErrorCode::Message,
        ),
        (
            headers(&[
                (":method", "CONNECT"),
                (":authority", "a:443"),
                (":path", "/"),
            ]),
            ErrorCode::Message,
        ),
        (
            [post("3"), {
                let mut d = Vec::new();
                frame::write_data(&mut d, b"1234");
                d
            }]
            .concat(),
            ErrorCode::Message,
        ),
        (
            [post("3"), {
                let mut d = Vec::new();
                frame::write_data(&mut d, b"12");
                d
            }]
            .concat(),
            ErrorCode::Message,
        ),
        (
            {
                let mut d = Vec::new();
                frame::write_header(&mut d, 0x21, 0);
                d
            },
            ErrorCode::RequestIncomplete,
        ),
    ];
    for (wire, want) in cases {
        let mut c = conn(Limits::default());
        c.feed(0, &wire, true).unwrap();
        let ev = events(&mut c);
        assert!(
            matches!(ev.last(), Some(Event::StreamError { id: 0, code, .. }) if *code == want),
            "{ev:?}"
        );
        // The stream's later bytes (before the peer stops) are dropped, not parsed.
        c.feed(4, &get(), true).unwrap();
    }
    let mut c = conn(Limits::default());
    c.feed(
        0,
        &headers(&[(":method", "CONNECT"), (":authority", "a:443")]),
        false,
    )
    .unwrap();
    assert!(matches!(events(&mut c)[..], [Event::Request { .. }]));
}

#[test]
fn a_blocked_request_waits_for_its_inserts() {
    let mut c = conn(Limits::default());
    // :method GET, :scheme https (static), :authority from dynamic entry 0 (Required
    // Insert Count 1, Base 1, relative index 0), :path / (static); sent before the encoder
    // stream inserts the entry.
    let block = [0x02, 0x00, 0xd1, 0xd7, 0x80, 0xc1];
    let mut wire = Vec::new();
    frame::write_header(&mut wire, kind::HEADERS, block.len() as u64);
    wire.extend_from_slice(&block);
    frame::write_data(&mut wire, b"later");
    c.feed(0, &wire, false).unwrap();
    assert_eq!(events(&mut c), []);
    c.feed(0, &[], true).unwrap();
    let mut enc = vec![0x02];
    EncoderInstruction::SetCapacity(100).write(&mut enc);
    EncoderInstruction::InsertNameRef {
        is_static: true,
        index: 0,
        value: b"b.example".to_vec(),
    }
    .write(&mut enc);
    c.feed(ENCODER, &enc, false).unwrap();
    let ev = events(&mut c);
    match &ev[..] {
        [Event::Request {
            id: 0,
            head,
            end: false,
        }, Event::Data {
            id: 0,
            data,
            end: true,
        }] => {
            assert_eq!(
                (head.authority.as_deref(), &data[..]),
                (Some(&b"b.example"[..]), &b"later"[..])
            );
        }
        e => panic!("{e:?}"),
    }
    // Our decoder stream: its type, the Insert Count Increment, the Section Acknowledgment.
    assert_eq!(c.out(Uni::Decoder), [0x03, 0x01, 0x80]);
}

#[test]
fn a_large_head_is_answered_431() {
    let mut c = conn(Limits {
        max_field_section_size: 200,
        ..Limits::default()
    });
    let long = "v".repeat(200);
    let mut wire = headers(&[
        (":method", "GET"),
        (":scheme", "https"),
        (":authority", "a"),
        (":path", "/"),
        ("x-long", &long),
    ]);
    frame::write_data(&mut wire, b"ignored");
    c.feed(0, &wire, true).unwrap();
    assert_eq!(events(&mut c), [Event::HeadTooLarge { id: 0 }]);
}

#[test]
fn after_our_goaway_new_requests_are_rejected() {
    let mut c = conn(Limits::default());
    c.feed(0, &get(), true).unwrap();
    c.feed(8, &get(), false).unwrap();
    c.clear_out(Uni::Control);
    c.send_goaway();
    let (f, _) = frame::parse(c.out(Uni::Control), 16).unwrap().unwrap();
    assert_eq!(f, frame::Frame::GoAway(12));
    c.feed(4, &get(), true).unwrap();
    c.feed(12, &get(), true).unwrap();
    let ev = events(&mut c);
    assert!(
        matches!(
            ev[3],
            Event::StreamError {
                id: 12,
                code: ErrorCode::RequestRejected,
                ..
            }
        ),
        "{ev:?}"
    );
    assert!(matches!(ev[2], Event::Request { id: 4, .. }));
}

#[test]
fn responses_decode_as_written() {
    let mut out = Vec::new();
    send_headers(
        &mut out,
        200,
        [
            (&b"content-type"[..], &b"text/html; charset=utf-8"[..]),
            (b"x-served-by", b"ringx"),
        ],
    );
    send_data(&mut out, b"<p>hi</p>");
    send_trailers(&mut out, [(&b"x-done"[..], &b"1"[..])]);
    let (f, n) = frame::parse(&out, 1000).unwrap().unwrap();
    let frame::Frame::Headers(block) = f else {
        panic!("{f:?}")
    };
    let mut d = Decoder::new(0);
    let mut got = Vec::new();
    assert_eq!(
        d.decode(0, block, 1000, |n, v| got.push((n.to_vec(), v.to_vec()))),
        Ok(Decoded::Whole)
    );
    let want: Vec<(Vec<u8>, Vec<u8>)> = [
        (":status", "200"),
        ("content-type", "text/html; charset=utf-8"),
        ("x-served-by", "ringx"),
    ]
    .iter()
    .map(|(n, v)| (n.as_bytes().to_vec(), v.as_bytes().to_vec()))
    .collect();
    assert_eq!(got, want);
    let (f, m) = frame::parse(&out[n..], 1000).unwrap().unwrap();
    assert_eq!(f, frame::Frame::Data(b"<p>hi</p>"));
    assert!(matches!(
        frame::parse(&out[n + m..], 1000).unwrap().unwrap().0,
        frame::Frame::Headers(_)
    ));
}

proptest::proptest! {
    /// Any request our encoder writes, with any body, cut anywhere, reads back whole.
    #[test]
    fn any_request_reads_back(
        extra in proptest::collection::vec(("x-[a-z]{1,8}", "[!-~]([ -~]{0,20}[!-~])?"), 0..6),
        body in proptest::collection::vec(proptest::collection::vec(proptest::prelude::any::<u8>(), 0..40), 0..4),
        cut in 1usize..64,
    ) {
        let len: usize = body.iter().map(Vec::len).sum();
        let len = len.to_string();
        let mut fields = vec![(":method", "PUT"), (":scheme", "https"), (":authority", "h"), (":path", "/p"), ("content-length", len.as_str())];
        fields.extend(extra.iter().map(|(n, v)| (n.as_str(), v.as_str())));
        let mut wire = headers(&fields);
        for chunk in &body {
            frame::write_data(&mut wire, chunk);
        }
        let mut c = conn(Limits::default());
        let pieces: Vec<&[u8]> = wire.chunks(cut).collect();
        for (i, p) in pieces.iter().enumerate() {
            c.feed(0, p, i + 1 == pieces.len()).unwrap();
        }
        let ev = events(&mut c);
        let Event::Request { head, .. } = &ev[0] else { panic!("{ev:?}") };
        let lines: String = extra.iter().map(|(n, v)| format!("{n}: {v}\r\n")).collect();
        proptest::prop_assert_eq!(String::from_utf8_lossy(&head.lines), lines);
        let mut got = Vec::new();
        for e in &ev[1..] {
            let Event::Data { data, .. } = e else { panic!("{e:?}") };
            got.extend_from_slice(data);
        }
        proptest::prop_assert_eq!(got, body.concat());
        let ended = matches!(ev.last(), Some(Event::Data { end: true, .. } | Event::Request { end: true, .. }));
        proptest::prop_assert!(ended);
    }
}
