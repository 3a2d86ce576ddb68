//! A client's side of the tests: frames, requests, the control stream.
#![allow(dead_code)]

use ringx_h3proto::frame::{self, kind};
use ringx_h3proto::qpack::encode::encode_section;
use ringx_h3proto::settings::Settings;
use ringx_h3proto::{Conn, ErrorCode, Event, Limits};

pub const CONTROL: u64 = 2;
pub const ENCODER: u64 = 6;

pub fn headers(fields: &[(&str, &str)]) -> Vec<u8> {
    let mut block = Vec::new();
    encode_section(
        &mut block,
        fields.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())),
    );
    let mut f = Vec::new();
    frame::write_header(&mut f, kind::HEADERS, block.len() as u64);
    f.extend_from_slice(&block);
    f
}

pub fn get() -> Vec<u8> {
    headers(&[
        (":method", "GET"),
        (":scheme", "https"),
        (":authority", "a.example"),
        (":path", "/x"),
    ])
}

pub fn post(len: &str) -> Vec<u8> {
    headers(&[
        (":method", "POST"),
        (":scheme", "https"),
        (":authority", "a.example"),
        (":path", "/up"),
        ("content-length", len),
    ])
}

pub fn control_preamble() -> Vec<u8> {
    let mut b = vec![0x00];
    Settings::default().write(&mut b);
    b
}

/// A connection whose client opened its control stream.
pub fn conn(limits: Limits) -> Conn {
    let mut c = Conn::new(limits);
    c.feed(CONTROL, &control_preamble(), false).unwrap();
    c
}

pub fn events(c: &mut Conn) -> Vec<Event> {
    std::iter::from_fn(|| c.poll_event()).collect()
}

pub fn code(r: Result<(), ringx_h3proto::ConnError>) -> ErrorCode {
    r.unwrap_err().code
}
