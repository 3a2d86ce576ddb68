//! QPACK (RFC 9204), HTTP/3's field compression: HPACK reworked so that streams which
//! arrive out of order cannot corrupt a shared table. The decoder ([`Decoder`]) takes the
//! peer's dynamic table inserts on the encoder stream, bounded by the capacity we announce;
//! our encoder ([`encode`]) uses only the static table and literals.

pub mod decode;
pub mod encode;
pub mod instructions;
mod lines;
pub mod prim;
pub mod static_table;
pub mod table;

pub use decode::{Decoded, Decoder};
