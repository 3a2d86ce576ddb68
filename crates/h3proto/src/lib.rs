//! Sans-I/O HTTP/3 (RFC 9114) with QPACK (RFC 9204), the server side, above QUIC streams.
//! This crate knows nothing of QUIC packets: the caller owns the QUIC connection, hands
//! [`Conn::feed`] the bytes each stream delivered, and writes to streams what the send
//! calls and [`Conn::out`] give it.
//!
//! # Serving one request
//!
//! ```
//! use ringx_h3proto::{frame, qpack, send_data, send_headers, settings::Settings};
//! use ringx_h3proto::{Conn, Event, Limits, Uni};
//!
//! let mut conn = Conn::new(Limits::default());
//! // Our control stream (type 0x00, SETTINGS), encoder (0x02) and decoder (0x03) streams:
//! // the caller opens three unidirectional QUIC streams and writes these to them.
//! assert_eq!(conn.out(Uni::Control)[0], 0x00);
//! conn.clear_out(Uni::Control);
//!
//! // The client's control stream (stream 2): its type, then its SETTINGS.
//! let mut control = vec![0x00];
//! Settings::default().write(&mut control);
//! conn.feed(2, &control, false).unwrap();
//!
//! // A GET on stream 0, its HEADERS frame ending the stream.
//! let mut block = Vec::new();
//! let fields = [(":method", "GET"), (":scheme", "https"), (":authority", "a"), (":path", "/")];
//! qpack::encode::encode_section(&mut block, fields.map(|(n, v)| (n.as_bytes(), v.as_bytes())));
//! let mut request = Vec::new();
//! frame::write_header(&mut request, frame::kind::HEADERS, block.len() as u64);
//! request.extend_from_slice(&block);
//! conn.feed(0, &request, true).unwrap();
//!
//! let Some(Event::Request { id, head, end }) = conn.poll_event() else { panic!() };
//! assert_eq!((id, &head.method[..], head.path.as_deref(), end), (0, &b"GET"[..], Some(&b"/"[..]), true));
//!
//! // The answer, written to stream 0 (then the caller ends the stream).
//! let mut wire = Vec::new();
//! send_headers(&mut wire, 200, [(&b"content-type"[..], &b"text/plain"[..])]);
//! send_data(&mut wire, b"hi");
//! ```
//!
//! # What it enforces
//!
//! Every connection and stream error of RFC 9114 and RFC 9204 (frames out of place or out
//! of order, SETTINGS first and once, one control and QPACK stream each and none closed,
//! push IDs and GOAWAY ids that go the wrong way, invalid QPACK instructions and
//! references), malformed requests (`ringx_http::decoded`, shared with HTTP/2, and `request.rs` for
//! HTTP/3's own rule), and the [`Limits`] on what a peer can make
//! us hold: frames read whole are bounded at their header, the dynamic table by the
//! capacity we announce, blocked streams and what they bring while blocked, field sections
//! by their decoded size, streams tracked at once. DATA is handed through as it arrives,
//! and unknown frames and streams are skipped without being held.
//!
//! Modules, bottom up: [`varint`] (QUIC integers), [`frame`] (frames and where they may
//! go), [`settings`], [`qpack`] (static table, Huffman strings, dynamic table, field
//! sections, the encoder and decoder streams), [`conn`] (streams, control stream,
//! events).
//!
//! Not offered: server push (we never send MAX_PUSH_ID's counterpart: no PUSH_PROMISE, and
//! one from a client is an error), extended CONNECT (`:protocol` is malformed), datagrams,
//! and the dynamic table in our own encoder (responses use the static table and literals).
#![forbid(unsafe_code)]

pub mod conn;
pub mod error;
mod events;
pub mod frame;
pub mod limits;
pub mod qpack;
mod reader;
mod request;
pub mod settings;
mod stream;
pub mod varint;

pub use conn::{send_data, send_headers, send_trailers, Conn, Uni};
pub use error::{ConnError, ErrorCode};
pub use events::Event;
pub use limits::Limits;
pub use ringx_http::decoded::{Framing, RequestHead};
