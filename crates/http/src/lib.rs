//! Sans-I/O HTTP/1.1 for the ringx server: request heads, body framing,
//! responses, dates and paths. This crate never touches a socket; it turns
//! bytes into decisions and decisions into bytes.
//!
//! # Parsing a request head
//!
//! Give [`parse_request`] the bytes received so far and storage for the
//! header fields. Everything in the returned [`Request`] borrows from those
//! bytes, so nothing is copied.
//!
//! ```
//! use ringx_http::{parse_request, BodyKind, Limits, Method, Parsed};
//!
//! let limits = Limits::default();
//! let buf = b"POST /upload?x=1 HTTP/1.1\r\nHost: example.com:8080\r\nContent-Length: 5\r\n\r\nhello";
//! let mut headers = [httparse::EMPTY_HEADER; 100];
//!
//! let Parsed::Complete(req) = parse_request(buf, &mut headers, &limits).unwrap() else {
//!     unreachable!("need more bytes: read more and call again with the same buffer start")
//! };
//! assert_eq!(req.method, Method::Post);
//! assert_eq!(req.path, "/upload");
//! assert_eq!(req.query, Some("x=1"));
//! assert_eq!(req.host_name(), Some(&b"example.com"[..])); // validated, so ASCII
//! assert_eq!(req.body, BodyKind::Length(5));
//! assert!(req.keep_alive);
//! assert_eq!(&buf[req.head_len..], b"hello"); // the body starts after the head
//! ```
//!
//! A [`Parsed::Partial`] result means "read more and call again". An error
//! carries the status to answer with ([`RequestError::status`]); after it,
//! answer with that status (ringx's error pages are written by its server
//! crate's response writer) and close the connection, because the framing
//! of anything that follows is unknown.
//!
//! The parser follows RFC 9112 strictly and rejects anything ambiguous, in
//! particular everything used for request smuggling:
//!
//! * leading empty lines are skipped; bare CR, NUL, obs-fold, whitespace
//!   before a colon or before the first header, and control bytes in field
//!   values are 400;
//! * `Transfer-Encoding` with `Content-Length`, in HTTP/1.0, empty, or
//!   without `chunked` as its final coding is 400; other codings
//!   (`gzip, chunked`) or `chunked` twice are 501;
//! * `Content-Length` must be a single `1*DIGIT` value that fits in a u64;
//! * HTTP/1.1 needs exactly one valid `Host`; absolute-form targets must be
//!   `http`/`https` without userinfo and then provide the host;
//! * `*` only with `OPTIONS`, `host:port` only (and always) with `CONNECT`;
//! * a method longer than [`MAX_METHOD_LEN`] is 501 (RFC 9112 §3);
//! * unknown `HTTP/x.y` versions are 505, `Expect` other than
//!   `100-continue` is 417, too-long targets 414 and too-large heads or too
//!   many fields 431 (see [`Limits`]).
//!
//! # Reading the body
//!
//! [`Request::body`] says how the body is framed. Feed the bytes after the
//! head to a [`BodyDecoder`]; it hands back slices of the input and never
//! consumes bytes past the end of the body, so a pipelined request stays in
//! the buffer.
//!
//! ```
//! use ringx_http::{BodyDecoder, BodyKind, BodyLimits};
//!
//! let mut decoder = BodyDecoder::new(BodyKind::Chunked, BodyLimits::default());
//! let d = decoder.decode(b"3;name=value\r\nabc\r\n0\r\nTrailer: x\r\n\r\n").unwrap();
//! assert_eq!(d.data, b"abc");
//! assert!(d.done);
//! ```
//!
//! # Writing responses
//!
//! ```
//! use ringx_http::{write_chunk, write_last_chunk, write_status_line, DateCache};
//! use std::time::{Duration, SystemTime, UNIX_EPOCH};
//!
//! let mut date = DateCache::new();
//! date.update(UNIX_EPOCH + Duration::from_secs(784_111_777)); // once per loop iteration
//!
//! let mut out = Vec::new();
//! write_status_line(&mut out, 200);
//! out.extend_from_slice(date.header());
//! out.extend_from_slice(b"Transfer-Encoding: chunked\r\n\r\n");
//! write_chunk(&mut out, b"hi");
//! write_last_chunk(&mut out);
//! assert_eq!(
//!     out,
//!     b"HTTP/1.1 200 OK\r\nDate: Sun, 06 Nov 1994 08:49:37 GMT\r\n\
//!       Transfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n"
//! );
//! ```
//!
//! # Mapping paths to files
//!
//! [`normalize_path`] percent-decodes [`Request::path`] and resolves dot
//! segments, refusing any path that would climb above the root.
//!
//! ```
//! assert_eq!(ringx_http::normalize_path("/static/../img/%7Elogo.png").unwrap(), "/img/~logo.png");
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod ascii;
mod body;
mod bytes;
mod chunked;
mod date;
pub mod decoded;
mod error;
mod fields;
mod head;
mod head_sink;
mod host;
pub mod huffman;
mod limits;
mod method;
mod path;
pub mod proxy_protocol;
mod request;
mod response;
mod status;
mod target;
pub mod trailer;
pub mod upstream;
mod version;

pub use body::{BodyDecoder, BodyKind, Decoded};
pub use date::{fmt_http_date, parse_http_date, DateCache, DATE_HEADER_LEN};
pub use error::{BodyError, RequestError};
pub use head::MAX_METHOD_LEN;
pub use head_sink::HeadSink;
pub use limits::{BodyLimits, Limits};
pub use method::Method;
pub use path::{normalize_path, PathError};
pub use request::{parse_request, parse_request_uninit, request_from_parts, Parsed, Request};
pub use response::{
    decimal, write_chunk, write_last_chunk, write_status_line, write_status_line_reason,
};
pub use status::reason;
pub use version::Version;

/// Re-exported so callers can name [`Request::headers`] and build header
/// storage (`[httparse::EMPTY_HEADER; N]`) without their own dependency.
pub use httparse;
