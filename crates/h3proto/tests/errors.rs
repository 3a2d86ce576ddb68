//! Connection and stream errors, mapped to their codes, and the limits.

use ringx_h3proto::frame::{self, kind};
use ringx_h3proto::settings::Settings;
use ringx_h3proto::{Conn, ErrorCode, Event, Limits, Uni};

mod common;
use common::*;

#[test]
fn frames_out_of_place_are_connection_errors() {
    let mut data = Vec::new();
    frame::write_data(&mut data, b"x");
    let mut settings = Vec::new();
    Settings::default().write(&mut settings);
    let push_promise = [kind::PUSH_PROMISE as u8, 0x01, 0x00];
    let h2_ping = [0x06, 0x00];
    let cases: Vec<(u64, Vec<u8>, bool, ErrorCode)> = vec![
        (0, data.clone(), false, ErrorCode::FrameUnexpected),
        (
            0,
            [get(), settings.clone()].concat(),
            false,
            ErrorCode::FrameUnexpected,
        ),
        (
            0,
            [get(), push_promise.to_vec()].concat(),
            false,
            ErrorCode::FrameUnexpected,
        ),
        (
            0,
            [get(), h2_ping.to_vec()].concat(),
            false,
            ErrorCode::FrameUnexpected,
        ),
        (0, get()[..4].to_vec(), true, ErrorCode::Frame),
        (
            0,
            vec![0x01, 0x80, 0x10, 0x00, 0x00],
            false,
            ErrorCode::ExcessiveLoad,
        ),
        (CONTROL, settings.clone(), false, ErrorCode::FrameUnexpected),
        (CONTROL, data.clone(), false, ErrorCode::FrameUnexpected),
        (CONTROL, vec![0x07, 0x00], false, ErrorCode::Frame),
        (CONTROL, vec![], true, ErrorCode::ClosedCriticalStream),
        (CONTROL, vec![0x03, 0x01, 0x00], false, ErrorCode::Id),
        (10, vec![0x00], false, ErrorCode::StreamCreation),
        (10, vec![0x01], false, ErrorCode::StreamCreation),
        (1, vec![0x00], false, ErrorCode::StreamCreation),
        (3, vec![0x00], false, ErrorCode::StreamCreation),
    ];
    for (id, wire, fin, want) in cases {
        let mut c = conn(Limits::default());
        assert_eq!(code(c.feed(id, &wire, fin)), want, "stream {id}: {wire:?}");
        assert_eq!(code(c.feed(0, &get(), true)), want, "nothing is read after");
    }
    let mut c = Conn::new(Limits::default());
    assert_eq!(
        code(c.feed(CONTROL, &[0x00, 0x07, 0x01, 0x00], false)),
        ErrorCode::MissingSettings
    );
    let mut c = Conn::new(Limits::default());
    assert_eq!(
        code(c.feed(CONTROL, &[0x00, 0x21, 0x00], false)),
        ErrorCode::MissingSettings
    );
    let mut c = conn(Limits::default());
    assert_eq!(code(c.reset(CONTROL)), ErrorCode::ClosedCriticalStream);
}

#[test]
fn push_ids_and_goaway_may_not_go_the_wrong_way() {
    let mut c = conn(Limits::default());
    let mut w = Vec::new();
    frame::write_varint_frame(&mut w, kind::MAX_PUSH_ID, 5);
    frame::write_varint_frame(&mut w, kind::CANCEL_PUSH, 5);
    frame::write_varint_frame(&mut w, kind::GOAWAY, 8);
    frame::write_varint_frame(&mut w, kind::GOAWAY, 4);
    c.feed(CONTROL, &w, false).unwrap();
    assert_eq!(
        events(&mut c),
        [Event::GoAway { id: 8 }, Event::GoAway { id: 4 }]
    );
    let mut w = Vec::new();
    frame::write_varint_frame(&mut w, kind::GOAWAY, 5);
    assert_eq!(code(c.feed(CONTROL, &w, false)), ErrorCode::Id);
    let mut c = conn(Limits::default());
    let mut w = Vec::new();
    frame::write_varint_frame(&mut w, kind::MAX_PUSH_ID, 5);
    frame::write_varint_frame(&mut w, kind::MAX_PUSH_ID, 4);
    assert_eq!(code(c.feed(CONTROL, &w, false)), ErrorCode::Id);
}

#[test]
fn streams_of_unknown_types_are_discarded_and_reported() {
    let mut c = conn(Limits {
        max_ignored_uni: 1,
        ..Limits::default()
    });
    c.feed(10, &[0x40, 0x21, 0xff, 0xff], false).unwrap();
    c.feed(10, &[0x00, 0x01], false).unwrap();
    assert!(matches!(
        events(&mut c)[..],
        [Event::StreamError {
            id: 10,
            code: ErrorCode::StreamCreation,
            ..
        }]
    ));
    assert_eq!(code(c.feed(14, &[0x21], false)), ErrorCode::ExcessiveLoad);
}

#[test]
fn blocked_streams_are_bounded() {
    let mut c = conn(Limits {
        qpack_blocked_streams: 1,
        ..Limits::default()
    });
    let block = [0x02, 0x00, 0x80];
    let mut wire = Vec::new();
    frame::write_header(&mut wire, kind::HEADERS, block.len() as u64);
    wire.extend_from_slice(&block);
    c.feed(0, &wire, false).unwrap();
    c.reset(0).unwrap();
    c.feed(4, &wire, false).unwrap();
    assert_eq!(
        code(c.feed(8, &wire, false)),
        ErrorCode::QpackDecompressionFailed
    );
    assert_eq!(
        c.out(Uni::Decoder),
        [0x03, 0x40],
        "the reset stream's cancellation"
    );
}
