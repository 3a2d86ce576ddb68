//! Sans-I/O HTTP/3 (RFC 9114) with QPACK (RFC 9204), the server side, above QUIC streams.
//! This crate knows nothing of QUIC packets: the caller owns the QUIC connection, hands
//! [`Conn::feed`] the bytes each stream delivered, and writes to streams what the send
//! calls and [`Conn::out`] give it.
//!
//! Modules, bottom up: [`varint`] (QUIC integers), [`frame`] (frames and where they may
//! go), [`settings`], [`qpack`] (static table, Huffman strings, dynamic table, field
//! sections, the encoder and decoder streams), [`fields`] (a decoded section as a request
//! head, checked as RFC 9114 §4.2 and §4.3.1 ask), [`conn`] (streams, control stream,
//! events).
//!
//! Not offered: server push (we never send MAX_PUSH_ID's counterpart: no PUSH_PROMISE, and
//! one from a client is an error), extended CONNECT (`:protocol` is malformed), datagrams,
//! and the dynamic table in our own encoder (responses use the static table and literals).
#![forbid(unsafe_code)]

pub mod error;
pub mod fields;
pub mod frame;
pub mod qpack;
pub mod settings;
pub mod varint;

pub use error::{ConnError, ErrorCode};
pub use fields::{Framing, RequestHead};
