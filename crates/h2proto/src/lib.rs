//! Sans-I/O HTTP/2 (RFC 9113) for the ringx server: the server side of a connection, and the
//! client side a proxy uses towards HTTP/2 upstreams ([`client`], for gRPC). This
//! crate never touches a socket: [`Conn::feed`] turns received bytes into events, one frame
//! at a time, and the send calls turn responses into frames; what to write next is in
//! [`Conn::out`] and the caller's own buffer.
//!
//! # Serving one request
//!
//! ```
//! use std::time::Instant;
//! use ringx_h2proto::{Conn, Event, Limits, Step, frame};
//!
//! let mut conn = Conn::new(Limits::default());
//! let mut wire = conn.out().to_vec(); // our SETTINGS (and the connection window's update)
//! conn.clear_out();
//!
//! // The client: preface, SETTINGS, and a GET on stream 1 (HPACK: :method GET, :scheme
//! // http, :path /, :authority from the static table with a literal value).
//! let mut input = frame::PREFACE.to_vec();
//! frame::write_header(&mut input, 0, frame::kind::SETTINGS, 0, 0);
//! let block = [0x82, 0x86, 0x84, 0x41, 0x01, b'a'];
//! frame::write_header(&mut input, block.len(), frame::kind::HEADERS,
//!     frame::flag::END_HEADERS | frame::flag::END_STREAM, 1);
//! input.extend_from_slice(&block);
//!
//! let mut pos = 0;
//! let mut requests = Vec::new();
//! while pos < input.len() {
//!     match conn.feed(&input[pos..], Instant::now()) {
//!         Step::Need => break,
//!         Step::Skip(n) => pos += n,
//!         Step::Event(n, ev) => {
//!             if let Event::Request { id, head, .. } = ev {
//!                 requests.push((id, head));
//!             }
//!             pos += n;
//!         }
//!         Step::Fatal(e) => panic!("{e:?}"),
//!     }
//! }
//! let (id, head) = &requests[0];
//! assert_eq!((*id, &head.method[..], head.path.as_deref()), (1, &b"GET"[..], Some(&b"/"[..])));
//!
//! // The answer: HEADERS, then the body within the client's window.
//! wire.extend_from_slice(conn.out()); // the SETTINGS ack
//! conn.clear_out();
//! conn.send_headers(&mut wire, 1, 200, [(&b"content-type"[..], &b"text/plain"[..])], false);
//! assert!(conn.capacity(1) >= 2);
//! conn.send_data(&mut wire, 1, b"hi", true);
//! assert!(!conn.is_open(1)); // both sides ended
//! ```
//!
//! # What it enforces
//!
//! Every connection and stream error of RFC 9113 (frame sizes, stream id order, frames on
//! idle and closed streams, flow-control overflow, SETTINGS values, header blocks that are
//! interrupted), malformed requests (`ringx_http::decoded`: pseudo-headers, field names and values,
//! connection-specific fields, `content-length` against the DATA received), and the limits
//! of [`Limits`] against rapid reset, CONTINUATION floods, HPACK bombs (bounded while
//! decoding, [`hpack`]), SETTINGS/PING/PRIORITY floods and empty-frame floods. Each reason
//! is counted ([`Conn::take_stats`]).
//!
//! Not offered: server push (SETTINGS_ENABLE_PUSH is the client's to refuse; we never
//! push), extended CONNECT (RFC 8441: `:protocol` is malformed), and RFC 7540 priorities
//! (PRIORITY frames are checked and ignored, as RFC 9113 allows).
#![forbid(unsafe_code)]

pub mod client;
pub mod conn;
mod events;
pub mod frame;
pub mod hpack;
pub mod limits;
mod recv;
pub mod response;
mod send;
pub mod settings;
mod streams;

pub use conn::{Conn, ConnError, Event, Step};
pub use frame::ErrorCode;
pub use limits::{Limits, Why};
pub use ringx_http::decoded::{Framing, RequestHead};
