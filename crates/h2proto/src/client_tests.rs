//! The client side against scripted server bytes, each script fed whole and split at every
//! boundary, and against the server side of this crate.

use std::time::Instant;

use super::*;
use crate::frame::{write_header, write_header_block, FrameHeader};
use crate::hpack::Encoder;

/// An event with its data owned, to compare.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Ev {
    Response(u32, u16, Vec<(String, String)>, bool),
    Data(u32, Vec<u8>, bool),
    Trailers(u32, Vec<(String, String)>),
    Reset(u32, ErrorCode, bool),
    GoAway(u32, ErrorCode),
    Window,
    Fatal(ErrorCode),
}

fn pairs(f: &FieldList) -> Vec<(String, String)> {
    f.iter()
        .map(|(n, v)| {
            (
                String::from_utf8_lossy(n).into_owned(),
                String::from_utf8_lossy(v).into_owned(),
            )
        })
        .collect()
}

/// A client with `n` GET streams open (ids 1, 3, ...), its output cleared.
fn client(n: usize) -> ClientConn {
    let mut c = ClientConn::new(Limits::default());
    let mut out = Vec::new();
    for _ in 0..n {
        let f: [(&[u8], &[u8]); 4] = [
            (b":method", b"POST"),
            (b":scheme", b"http"),
            (b":path", b"/svc/M"),
            (b":authority", b"up"),
        ];
        c.open(&mut out, f, false);
    }
    c.clear_out();
    c
}

/// Feeds `input` in pieces cut at `cuts`, collecting events; unread bytes are kept as a
/// caller's buffer would keep them.
fn run(c: &mut ClientConn, input: &[u8], cuts: &[usize]) -> Vec<Ev> {
    let mut evs = Vec::new();
    let mut buf = Vec::new();
    let mut last = 0;
    let mut bounds = cuts.to_vec();
    bounds.push(input.len());
    for &b in &bounds {
        buf.extend_from_slice(&input[last..b]);
        last = b;
        let mut pos = 0;
        loop {
            match c.feed(&buf[pos..], Instant::now()) {
                ClientStep::Need => break,
                ClientStep::Skip(n) => pos += n,
                ClientStep::Event(n, e) => {
                    pos += n;
                    evs.push(match e {
                        ClientEvent::Response {
                            id,
                            status,
                            fields,
                            end_stream,
                        } => Ev::Response(id, status, pairs(&fields), end_stream),
                        ClientEvent::Data {
                            id,
                            data,
                            end_stream,
                        } => Ev::Data(id, data.to_vec(), end_stream),
                        ClientEvent::Trailers { id, fields } => Ev::Trailers(id, pairs(&fields)),
                        ClientEvent::Reset { id, code, why } => Ev::Reset(id, code, why.is_some()),
                        ClientEvent::GoAway { last, code } => Ev::GoAway(last, code),
                        ClientEvent::WindowOpened => Ev::Window,
                    });
                }
                ClientStep::Fatal(e) => {
                    evs.push(Ev::Fatal(e.code));
                    return evs;
                }
            }
        }
        buf.drain(..pos);
    }
    evs
}

/// Runs the script whole and split at every byte: the events must be the same.
fn every_split(n: usize, input: &[u8]) -> Vec<Ev> {
    let whole = run(&mut client(n), input, &[]);
    for cut in 1..input.len() {
        assert_eq!(run(&mut client(n), input, &[cut]), whole, "split at {cut}");
    }
    whole
}

struct Server {
    enc: Encoder,
    b: Vec<u8>,
}

impl Server {
    /// Starts with the server's SETTINGS (`settings`: id, value pairs).
    fn new(settings: &[(u16, u32)]) -> Server {
        let mut b = Vec::new();
        write_header(&mut b, settings.len() * 6, kind::SETTINGS, 0, 0);
        for (id, v) in settings {
            b.extend_from_slice(&id.to_be_bytes());
            b.extend_from_slice(&v.to_be_bytes());
        }
        Server {
            enc: Encoder::default(),
            b,
        }
    }

    fn headers(mut self, id: u32, fields: &[(&str, &str)], end: bool) -> Server {
        let mut block = Vec::new();
        self.enc.encode(
            &mut block,
            fields.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())),
        );
        write_header_block(&mut self.b, id, &block, end, 16_384);
        self
    }

    fn data(mut self, id: u32, d: &[u8], end: bool) -> Server {
        write_header(&mut self.b, d.len(), kind::DATA, end_flag(end), id);
        self.b.extend_from_slice(d);
        self
    }

    fn raw(mut self, len: usize, k: u8, flags: u8, id: u32, p: &[u8]) -> Server {
        write_header(&mut self.b, len, k, flags, id);
        self.b.extend_from_slice(p);
        self
    }
}

fn own(p: &[(&str, &str)]) -> Vec<(String, String)> {
    p.iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

#[test]
fn a_grpc_response_with_trailers() {
    let s = Server::new(&[])
        .headers(1, &[(":status", "100")], false)
        .headers(
            1,
            &[(":status", "200"), ("content-type", "application/grpc")],
            false,
        )
        .data(1, b"\0\0\0\0\x02hi", false)
        .headers(1, &[("grpc-status", "0"), ("grpc-message", "")], true);
    let evs = every_split(1, &s.b);
    assert_eq!(
        evs,
        [
            Ev::Response(1, 200, own(&[("content-type", "application/grpc")]), false),
            Ev::Data(1, b"\0\0\0\0\x02hi".to_vec(), false),
            Ev::Trailers(1, own(&[("grpc-status", "0"), ("grpc-message", "")])),
        ]
    );
}

#[test]
fn a_trailers_only_response_ends_the_stream_and_it_closes_once_we_ended_ours() {
    let mut c = client(1);
    let mut out = Vec::new();
    c.send_data(&mut out, 1, b"x", true);
    let s = Server::new(&[]).headers(
        1,
        &[
            (":status", "200"),
            ("grpc-status", "14"),
            ("content-type", "application/grpc"),
        ],
        true,
    );
    let evs = run(&mut c, &s.b, &[]);
    assert!(
        matches!(evs[..], [Ev::Response(1, 200, _, true)]),
        "{evs:?}"
    );
    assert!(!c.is_open(1));
}

#[test]
fn server_faults_are_the_rfc_errors() {
    type Case = (Server, Ev);
    let cases: Vec<Case> = vec![
        // DATA before the response head: the stream is malformed.
        (
            Server::new(&[]).data(1, b"x", false),
            Ev::Reset(1, ErrorCode::Protocol, true),
        ),
        // Trailers without END_STREAM.
        (
            Server::new(&[])
                .headers(1, &[(":status", "200")], false)
                .headers(1, &[("grpc-status", "0")], false),
            Ev::Reset(1, ErrorCode::Protocol, true),
        ),
        // A pseudo-header in trailers.
        (
            Server::new(&[])
                .headers(1, &[(":status", "200")], false)
                .headers(1, &[(":status", "200")], true),
            Ev::Reset(1, ErrorCode::Protocol, true),
        ),
        // A connection-specific response field.
        (
            Server::new(&[]).headers(1, &[(":status", "200"), ("connection", "close")], false),
            Ev::Reset(1, ErrorCode::Protocol, true),
        ),
        // More DATA than the content-length.
        (
            Server::new(&[])
                .headers(1, &[(":status", "200"), ("content-length", "1")], false)
                .data(1, b"ab", true),
            Ev::Reset(1, ErrorCode::Protocol, true),
        ),
        // HEADERS on a stream we never opened, on a server-initiated id, PUSH_PROMISE.
        (
            Server::new(&[]).headers(5, &[(":status", "200")], true),
            Ev::Fatal(ErrorCode::Protocol),
        ),
        (
            Server::new(&[]).headers(2, &[(":status", "200")], true),
            Ev::Fatal(ErrorCode::Protocol),
        ),
        (
            Server::new(&[]).raw(4, kind::PUSH_PROMISE, flag::END_HEADERS, 1, &[0, 0, 0, 2]),
            Ev::Fatal(ErrorCode::Protocol),
        ),
        // The first frame is not SETTINGS.
        (
            Server {
                enc: Encoder::default(),
                b: Vec::new(),
            }
            .headers(1, &[(":status", "200")], true),
            Ev::Fatal(ErrorCode::Protocol),
        ),
        // A DATA frame over the stream's window (65 535 by default).
        (
            Server::new(&[])
                .headers(1, &[(":status", "200")], false)
                .data(1, &vec![0; 16_000], false)
                .data(1, &vec![0; 16_000], false)
                .data(1, &vec![0; 16_000], false)
                .data(1, &vec![0; 16_000], false)
                .data(1, &vec![0; 16_000], false),
            Ev::Reset(1, ErrorCode::FlowControl, true),
        ),
    ];
    for (s, want) in cases {
        let evs = run(&mut client(1), &s.b, &[]);
        assert_eq!(evs.last(), Some(&want), "{evs:?}");
    }
}

#[test]
fn goaway_refuses_later_streams_and_no_more_open() {
    let mut c = client(2);
    assert!(c.can_open());
    let mut p = 1u32.to_be_bytes().to_vec();
    p.extend_from_slice(&0u32.to_be_bytes());
    let s = Server::new(&[]).raw(8, kind::GOAWAY, 0, 0, &p);
    assert_eq!(run(&mut c, &s.b, &[]), [Ev::GoAway(1, ErrorCode::NoError)]);
    assert!(!c.can_open() && c.going_away());
}

#[test]
fn the_servers_concurrency_limit_and_windows_are_followed() {
    let mut c = client(1);
    let s = Server::new(&[
        (settings::MAX_CONCURRENT_STREAMS, 1),
        (settings::INITIAL_WINDOW_SIZE, 10),
    ]);
    let evs = run(&mut c, &s.b, &[]);
    assert!(evs.is_empty(), "a smaller window opens nothing: {evs:?}");
    assert!(!c.can_open(), "one stream open, the limit is 1");
    assert_eq!(c.capacity(1), 10);
    let mut out = Vec::new();
    c.send_data(&mut out, 1, b"0123456789", false);
    assert_eq!(c.capacity(1), 0);
    let mut w = Vec::new();
    frame::write_window_update(&mut w, 1, 5);
    assert_eq!(run(&mut c, &w, &[]), [Ev::Window]);
    assert_eq!(c.capacity(1), 5);
    // The settings are acknowledged.
    assert!(c
        .out()
        .windows(5)
        .any(|x| x == [0, 0, 0, kind::SETTINGS, flag::ACK]));
}

#[test]
fn released_response_bytes_reopen_the_servers_window() {
    let mut c = client(1);
    let s = Server::new(&[])
        .headers(1, &[(":status", "200")], false)
        .data(1, &vec![7; 40_000], false);
    let evs = run(&mut c, &s.b, &[]);
    assert_eq!(evs.len(), 2);
    c.clear_out();
    c.release(1, 40_000);
    let mut ups = Vec::new();
    let out = c.out().to_vec();
    let mut pos = 0;
    while let Some(h) = FrameHeader::parse(&out[pos..]) {
        assert_eq!(h.kind, kind::WINDOW_UPDATE);
        ups.push((
            h.stream,
            u32::from_be_bytes(out[pos + 9..pos + 13].try_into().unwrap()),
        ));
        pos += 13;
    }
    assert_eq!(
        ups,
        [(1, 40_000)],
        "the stream's window (the connection's is larger)"
    );
}

#[test]
fn a_stream_we_reset_ignores_its_late_frames() {
    let mut c = client(1);
    c.reset(1, ErrorCode::Cancel);
    let s = Server::new(&[])
        .headers(1, &[(":status", "200")], false)
        .data(1, b"late", true);
    assert!(run(&mut c, &s.b, &[]).is_empty());
}

#[test]
fn against_the_servers_side_of_this_crate() {
    let mut client = ClientConn::new(Limits::default());
    let mut server = crate::Conn::new(Limits::default());
    let mut wire = client.out().to_vec();
    client.clear_out();
    let f: [(&[u8], &[u8]); 5] = [
        (b":method", b"POST"),
        (b":scheme", b"http"),
        (b":path", b"/pkg.Svc/Call"),
        (b":authority", b"up"),
        (b"te", b"trailers"),
    ];
    let id = client.open(&mut wire, f, false);
    client.send_data(&mut wire, id, b"request", true);
    let mut pos = 0;
    let mut got = Vec::new();
    loop {
        match server.feed(&wire[pos..], Instant::now()) {
            crate::Step::Need => break,
            crate::Step::Skip(n) => pos += n,
            crate::Step::Event(n, e) => {
                pos += n;
                if let crate::Event::Data { data, .. } = e {
                    got.extend_from_slice(data);
                }
            }
            crate::Step::Fatal(e) => panic!("{e:?}"),
        }
    }
    assert_eq!(got, b"request");
    let mut back = server.out().to_vec();
    server.clear_out();
    server.send_headers(
        &mut back,
        id,
        200,
        [(&b"content-type"[..], &b"application/grpc"[..])],
        false,
    );
    server.send_data(&mut back, id, b"reply", false);
    server.send_trailers(&mut back, id, [(&b"grpc-status"[..], &b"0"[..])]);
    let mut evs = run(&mut client, &back, &[]);
    evs.retain(|e| *e != Ev::Window); // the server's connection window update
    assert_eq!(
        evs,
        [
            Ev::Response(id, 200, own(&[("content-type", "application/grpc")]), false),
            Ev::Data(id, b"reply".to_vec(), false),
            Ev::Trailers(id, own(&[("grpc-status", "0")])),
        ]
    );
    assert!(!client.is_open(id) && client.open_streams() == 0);
}
