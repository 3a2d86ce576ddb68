//! RESP2, the Redis protocol, sans-I/O, through the `redis-protocol` crate: a command is an
//! array of bulk strings; a reply is decoded from the front of a buffer as its bytes arrive
//! (`Ok(None)` asks for more) and mapped to [`Value`], with limits on what a reply may make
//! this side hold.
//!
//! Who checks what:
//! - the crate: the grammar (reply types, integers and lengths, CRLF-ended lines, UTF-8 of
//!   an error line) and whether a reply is whole; it encodes commands.
//! - this adapter, before the crate sees a reply ([`within_limits`]): the largest bulk
//!   string, the most elements in one array, how deep arrays nest, the longest line, and the
//!   CRLF after a bulk string's bytes. The crate has no limits of its own: it waits for a
//!   bulk string or a line of any length, and recurses once per level of nesting, so a reply
//!   nesting `*1` deep enough (4 bytes a level) would abort the process on a stack overflow.
//!   The crate also takes the two bytes after a bulk string without looking at them.
//! - this adapter, after decode ([`value`]): the UTF-8 of a simple string (the crate gives
//!   bytes), and that the crate took exactly the bytes the limits were checked on.

use redis_protocol::resp2::decode::decode as decode_frame;
use redis_protocol::resp2::encode::encode_borrowed;
use redis_protocol::resp2::types::{BorrowedFrame, OwnedFrame};

/// The largest bulk string accepted (a certificate chain is a few KB).
pub const MAX_BULK: usize = 64 << 20;
/// The most elements in one array, and how deep arrays may nest.
const MAX_ELEMENTS: usize = 1 << 20;
const MAX_DEPTH: usize = 8;
/// The longest line (`+OK`, `-ERR ...`, `$5`), whole or still arriving: an error message fits.
const MAX_LINE: usize = 64 << 10;

/// A reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// `+OK`
    Simple(String),
    /// `-ERR ...`: Redis refused the command.
    Error(String),
    /// `:1`
    Int(i64),
    /// `$5\r\nhello`
    Bulk(Vec<u8>),
    /// `$-1` or `*-1`: no such key, a lost `SET NX`.
    Nil,
    Array(Vec<Value>),
}

impl Value {
    /// The bytes of a bulk or simple string.
    pub fn bytes(&self) -> Option<&[u8]> {
        match self {
            Value::Bulk(b) => Some(b),
            Value::Simple(s) => Some(s.as_bytes()),
            _ => None,
        }
    }

    /// The text of a bulk or simple string, where it is UTF-8.
    pub fn text(&self) -> Option<&str> {
        self.bytes().and_then(|b| std::str::from_utf8(b).ok())
    }
}

/// A reply that breaks the protocol or the limits: the connection cannot go on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtoError(pub String);

impl std::fmt::Display for ProtoError {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "RESP protocol error: {}", self.0)
    }
}

/// Appends the command `args` (name first) to `out`.
pub fn encode(args: &[&[u8]], out: &mut Vec<u8>) {
    let parts: Vec<BorrowedFrame> = args.iter().map(|a| BorrowedFrame::BulkString(a)).collect();
    let frame = BorrowedFrame::Array(&parts);
    let start = out.len();
    out.resize(start + frame.encode_len(false), 0);
    // The crate's only error is a buffer too small, and this one is sized by the crate.
    let n = encode_borrowed(&mut out[start..], &frame, false).expect("sized by encode_len");
    out.truncate(start + n);
}

/// One reply from the front of `buf`, and the bytes it took; `None` while it is incomplete.
pub fn decode(buf: &[u8]) -> Result<Option<(Value, usize)>, ProtoError> {
    let checked = within_limits(buf)?;
    match decode_frame(buf) {
        Ok(Some((frame, used))) if checked == Some(used) => Ok(Some((value(frame)?, used))),
        Ok(None) if checked.is_none() => Ok(None),
        // The walk and the crate read the reply differently: the limits may not hold.
        Ok(found) => Err(ProtoError(format!(
            "a reply of {:?} bytes to the codec, {checked:?} to the limits",
            found.map(|(_, used)| used)
        ))),
        Err(e) => Err(ProtoError(e.to_string())),
    }
}

/// The crate's frame as a [`Value`] (its recursion is bounded by [`MAX_DEPTH`]).
fn value(frame: OwnedFrame) -> Result<Value, ProtoError> {
    Ok(match frame {
        OwnedFrame::SimpleString(s) => Value::Simple(
            String::from_utf8(s)
                .map_err(|_| ProtoError("a status line that is not UTF-8".into()))?,
        ),
        OwnedFrame::Error(e) => Value::Error(e),
        OwnedFrame::Integer(i) => Value::Int(i),
        OwnedFrame::BulkString(b) => Value::Bulk(b),
        OwnedFrame::Null => Value::Nil,
        OwnedFrame::Array(items) => {
            Value::Array(items.into_iter().map(value).collect::<Result<_, _>>()?)
        }
    })
}

/// Walks the reply at the front of `buf` header by header, without recursion, skipping
/// bulk strings' bytes and copying nothing, and refuses it where it breaks a limit.
/// `Some(end)` when it is whole; `None` where it is cut (the crate asks for more) or breaks
/// the grammar (the crate refuses it there, having read no further than this walk).
fn within_limits(buf: &[u8]) -> Result<Option<usize>, ProtoError> {
    let mut pos = 0;
    // Elements still to come in each open array, the innermost last.
    let mut open: Vec<usize> = Vec::new();
    loop {
        let rest = &buf[pos..];
        let window = &rest[..rest.len().min(MAX_LINE + 2)];
        let Some(eol) = window.windows(2).position(|w| w == b"\r\n") else {
            if window.len() == MAX_LINE + 2 {
                return Err(ProtoError(format!("a line longer than {MAX_LINE} bytes")));
            }
            return Ok(None);
        };
        let next = pos + eol + 2;
        let Some((&kind, arg)) = rest[..eol].split_first() else {
            return Ok(None);
        };
        let len = || {
            std::str::from_utf8(arg)
                .ok()
                .and_then(|t| t.parse::<i64>().ok())
        };
        pos = match kind {
            b'+' | b'-' | b':' => next,
            b'$' => match len() {
                Some(-1) => next,
                Some(n) if n >= 0 => {
                    let n = usize::try_from(n)
                        .ok()
                        .filter(|&n| n <= MAX_BULK)
                        .ok_or_else(|| {
                            ProtoError(format!("bulk length {n} (at most {MAX_BULK})"))
                        })?;
                    let end = next + n;
                    match buf.get(end..end + 2) {
                        None => return Ok(None),
                        Some(b"\r\n") => end + 2,
                        Some(_) => {
                            return Err(ProtoError("a bulk string not followed by CRLF".into()))
                        }
                    }
                }
                _ => return Ok(None),
            },
            b'*' => match len() {
                Some(-1) => next,
                Some(n) if n >= 0 => {
                    if open.len() >= MAX_DEPTH {
                        return Err(ProtoError(format!("arrays nested deeper than {MAX_DEPTH}")));
                    }
                    let n = usize::try_from(n)
                        .ok()
                        .filter(|&n| n <= MAX_ELEMENTS)
                        .ok_or_else(|| {
                            ProtoError(format!("array length {n} (at most {MAX_ELEMENTS})"))
                        })?;
                    if n > 0 {
                        open.push(n);
                        pos = next;
                        continue;
                    }
                    next
                }
                _ => return Ok(None),
            },
            _ => return Ok(None),
        };
        // One element is whole: count it, closing the arrays it completes.
        loop {
            match open.last_mut() {
                None => return Ok(Some(pos)),
                Some(left) if *left > 1 => {
                    *left -= 1;
                    break;
                }
                Some(_) => {
                    open.pop();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use redis_protocol::resp2::types::Resp2Frame;

    #[test]
    fn commands_are_arrays_of_bulk_strings() {
        let mut out = Vec::new();
        encode(&[b"SET", b"k", b"a\r\nb", b""], &mut out);
        assert_eq!(
            out,
            b"*4\r\n$3\r\nSET\r\n$1\r\nk\r\n$4\r\na\r\nb\r\n$0\r\n\r\n"
        );
    }

    /// Each reply, whole and cut at every byte: a cut one asks for more, never errs.
    #[test]
    fn replies_decode_whole_and_ask_for_more_when_cut() {
        let cases: &[(&[u8], Value)] = &[
            (b"+OK\r\n", Value::Simple("OK".into())),
            (b"-ERR no\r\n", Value::Error("ERR no".into())),
            (b":-42\r\n", Value::Int(-42)),
            (b"$5\r\nhe\r\no\r\n", Value::Bulk(b"he\r\no".to_vec())),
            (b"$0\r\n\r\n", Value::Bulk(Vec::new())),
            (b"$-1\r\n", Value::Nil),
            (b"*-1\r\n", Value::Nil),
            (b"*0\r\n", Value::Array(vec![])),
            (
                b"*2\r\n$9\r\n127.0.0.1\r\n*2\r\n:1\r\n$-1\r\n",
                Value::Array(vec![
                    Value::Bulk(b"127.0.0.1".to_vec()),
                    Value::Array(vec![Value::Int(1), Value::Nil]),
                ]),
            ),
        ];
        for (wire, want) in cases {
            let mut with_next = wire.to_vec();
            with_next.extend_from_slice(b"+NEXT\r\n");
            assert_eq!(
                decode(&with_next).unwrap(),
                Some((want.clone(), wire.len())),
                "{:?}",
                String::from_utf8_lossy(wire)
            );
            for cut in 0..wire.len() {
                assert_eq!(decode(&wire[..cut]).unwrap(), None, "{wire:?} cut at {cut}");
            }
        }
    }

    #[test]
    fn broken_or_oversized_replies_are_errors() {
        let bad: &[&[u8]] = &[
            b"?x\r\n",
            b"\r\n",
            b":x\r\n",
            b"$abc\r\n",
            b"$-2\r\n",
            b"$3\r\nabcXY",
            b"$99999999999\r\n",
            b"*99999999999\r\n",
            b"*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n",
            b"%1\r\n",
            b"+\xff\r\n",
            b"-\xff\r\n",
            b"*2\r\n$1\r\nab\r\n",
            b"$2097152000000000000000\r\n",
        ];
        for b in bad {
            assert!(decode(b).is_err(), "{:?}", String::from_utf8_lossy(b));
        }
        let long = vec![b'+'; MAX_LINE + 2];
        assert!(decode(&long).is_err());
        // A line over the limit is refused even when its CRLF has come.
        let mut whole = long.clone();
        whole.extend_from_slice(b"\r\n");
        assert!(decode(&whole).is_err());
        // Nesting far past the limit is refused before the crate, which recurses once per
        // level, could overflow the stack on it.
        assert!(decode(&b"*1\r\n".repeat(1 << 20)).is_err());
        // At the limits: a bulk string of MAX_BULK is waited for, MAX_DEPTH arrays decode.
        assert_eq!(decode(format!("${MAX_BULK}\r\n").as_bytes()), Ok(None));
        let mut deep = b"*1\r\n".repeat(MAX_DEPTH);
        deep.extend_from_slice(b":1\r\n");
        let mut want = Value::Int(1);
        for _ in 0..MAX_DEPTH {
            want = Value::Array(vec![want]);
        }
        assert_eq!(decode(&deep), Ok(Some((want, deep.len()))));
    }

    /// A reply as Redis would send it, encoded by the crate.
    fn wire(v: &Value) -> Vec<u8> {
        fn frame(v: &Value) -> OwnedFrame {
            match v {
                Value::Simple(s) => OwnedFrame::SimpleString(s.as_bytes().to_vec()),
                Value::Error(e) => OwnedFrame::Error(e.clone()),
                Value::Int(i) => OwnedFrame::Integer(*i),
                Value::Bulk(b) => OwnedFrame::BulkString(b.clone()),
                Value::Nil => OwnedFrame::Null,
                Value::Array(items) => OwnedFrame::Array(items.iter().map(frame).collect()),
            }
        }
        let f = frame(v);
        let mut out = vec![0; f.encode_len(false)];
        let n = redis_protocol::resp2::encode::encode(&mut out, &f, false).unwrap();
        assert_eq!(n, out.len());
        out
    }

    fn values() -> impl Strategy<Value = Value> {
        let line = "[^\r\n]{0,12}";
        let leaf = prop_oneof![
            line.prop_map(Value::Simple),
            line.prop_map(Value::Error),
            any::<i64>().prop_map(Value::Int),
            prop::collection::vec(any::<u8>(), 0..24).prop_map(Value::Bulk),
            Just(Value::Nil),
        ];
        leaf.prop_recursive(MAX_DEPTH as u32, 48, 6, |inner| {
            prop::collection::vec(inner, 0..6).prop_map(Value::Array)
        })
    }

    proptest! {
        /// Any reply decodes back to itself whole, with the next reply behind it, and asks
        /// for more at each cut while its bytes arrive in random pieces.
        #[test]
        fn values_round_trip_whole_and_in_pieces(
            v in values(),
            cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..6),
        ) {
            let w = wire(&v);
            prop_assert_eq!(decode(&w), Ok(Some((v.clone(), w.len()))));
            let mut with_next = w.clone();
            with_next.extend_from_slice(b"+NEXT\r\n");
            prop_assert_eq!(decode(&with_next), Ok(Some((v.clone(), w.len()))));
            let mut cuts: Vec<usize> = cuts.iter().map(|c| c.index(w.len())).collect();
            cuts.sort_unstable();
            cuts.dedup();
            let mut buf = Vec::new();
            for &c in &cuts {
                buf.extend_from_slice(&w[buf.len()..c]);
                prop_assert_eq!(decode(&buf), Ok(None), "cut at {}", c);
            }
            buf.extend_from_slice(&w[buf.len()..]);
            prop_assert_eq!(decode(&buf), Ok(Some((v, w.len()))));
        }

        /// A reply with one byte changed, or bytes at random, never panics, and a reply
        /// found in it took no more than the buffer held.
        #[test]
        fn broken_replies_never_panic(
            v in values(),
            at in any::<prop::sample::Index>(),
            byte in any::<u8>(),
            noise in prop::collection::vec(any::<u8>(), 0..48),
        ) {
            let mut w = wire(&v);
            let i = at.index(w.len());
            w[i] = byte;
            for buf in [&w, &noise] {
                if let Ok(Some((_, used))) = decode(buf) {
                    prop_assert!(used <= buf.len());
                }
            }
        }
    }
}
