//! RESP2, the Redis protocol, sans-I/O: a command is an array of bulk strings; a reply is
//! decoded from the front of a buffer as its bytes arrive (`Ok(None)` asks for more), with
//! limits on what a reply may make this side hold.

/// The largest bulk string accepted (a certificate chain is a few KB).
pub const MAX_BULK: usize = 64 << 20;
/// The most elements in one array, and how deep arrays may nest.
const MAX_ELEMENTS: usize = 1 << 20;
const MAX_DEPTH: usize = 8;
/// The longest header line (`+OK`, `-ERR ...`, `$5`): an error message fits.
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
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

/// One reply from the front of `buf`, and the bytes it took; `None` while it is incomplete.
pub fn decode(buf: &[u8]) -> Result<Option<(Value, usize)>, ProtoError> {
    decode_at(buf, 0, 0)
}

fn decode_at(buf: &[u8], pos: usize, depth: usize) -> Result<Option<(Value, usize)>, ProtoError> {
    let Some((line, after)) = line(buf, pos)? else {
        return Ok(None);
    };
    let (&kind, rest) = line
        .split_first()
        .ok_or_else(|| ProtoError("an empty line".into()))?;
    let text = || {
        std::str::from_utf8(rest)
            .map(str::to_string)
            .map_err(|_| ProtoError("a status line that is not UTF-8".into()))
    };
    match kind {
        b'+' => Ok(Some((Value::Simple(text()?), after))),
        b'-' => Ok(Some((Value::Error(text()?), after))),
        b':' => Ok(Some((Value::Int(int(rest)?), after))),
        b'$' => {
            let n = int(rest)?;
            if n == -1 {
                return Ok(Some((Value::Nil, after)));
            }
            let n = usize::try_from(n)
                .ok()
                .filter(|&n| n <= MAX_BULK)
                .ok_or_else(|| ProtoError(format!("bulk length {n} (at most {MAX_BULK})")))?;
            let end = after + n;
            if buf.len() < end + 2 {
                return Ok(None);
            }
            if &buf[end..end + 2] != b"\r\n" {
                return Err(ProtoError("a bulk string not followed by CRLF".into()));
            }
            Ok(Some((Value::Bulk(buf[after..end].to_vec()), end + 2)))
        }
        b'*' => {
            let n = int(rest)?;
            if n == -1 {
                return Ok(Some((Value::Nil, after)));
            }
            if depth >= MAX_DEPTH {
                return Err(ProtoError(format!("arrays nested deeper than {MAX_DEPTH}")));
            }
            let n = usize::try_from(n)
                .ok()
                .filter(|&n| n <= MAX_ELEMENTS)
                .ok_or_else(|| ProtoError(format!("array length {n} (at most {MAX_ELEMENTS})")))?;
            let mut items = Vec::with_capacity(n.min(64));
            let mut at = after;
            for _ in 0..n {
                match decode_at(buf, at, depth + 1)? {
                    Some((v, next)) => {
                        items.push(v);
                        at = next;
                    }
                    None => return Ok(None),
                }
            }
            Ok(Some((Value::Array(items), at)))
        }
        other => Err(ProtoError(format!(
            "unknown reply type {:?} (RESP3 is not asked for)",
            other as char
        ))),
    }
}

/// The line starting at `pos` (without its CRLF) and where the next one starts.
fn line(buf: &[u8], pos: usize) -> Result<Option<(&[u8], usize)>, ProtoError> {
    let rest = &buf[pos.min(buf.len())..];
    match rest.windows(2).position(|w| w == b"\r\n") {
        Some(i) => Ok(Some((&rest[..i], pos + i + 2))),
        None if rest.len() > MAX_LINE => {
            Err(ProtoError(format!("a line longer than {MAX_LINE} bytes")))
        }
        None => Ok(None),
    }
}

fn int(s: &[u8]) -> Result<i64, ProtoError> {
    std::str::from_utf8(s)
        .ok()
        .and_then(|t| t.parse().ok())
        .ok_or_else(|| ProtoError(format!("not an integer: {:?}", String::from_utf8_lossy(s))))
}

#[cfg(test)]
mod tests {
    use super::*;

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
        ];
        for b in bad {
            assert!(decode(b).is_err(), "{:?}", String::from_utf8_lossy(b));
        }
        let long = vec![b'+'; MAX_LINE + 2];
        assert!(decode(&long).is_err());
    }
}
