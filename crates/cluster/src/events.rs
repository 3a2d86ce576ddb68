//! What hosts tell each other through Redis pub/sub (a cache purge, a drain): an [`Event`]
//! published on `PREFIX events`, applied by every host and confirmed under
//! `PREFIX confirm:ID`; and the keys of the hosts' heartbeats.
//!
//! On the wire an event is one line of text, `ringx-event/1 ID ORIGIN ACTION TARGET`, each
//! field percent-encoded (bytes other than `A-Z a-z 0-9 - . _ ~ : / ? = &` become `%XX`),
//! so that a target may hold any byte (a cache key with CR, LF or a space) and a line never
//! splits where it should not. The decoder takes any bytes (another program may publish on
//! the channel) and refuses what is not such a line, never panicking.

use std::time::Duration;

/// The channel, under `[cluster] prefix`.
pub const CHANNEL: &str = "events";
/// The sorted set of hosts by the time (ms, Redis's clock) each last said it was alive.
pub const HOSTS: &str = "hosts";
/// How often each host says it is alive (while subscribed).
pub const HEARTBEAT_EVERY: Duration = Duration::from_secs(2);
/// A host is alive while its last heartbeat is this recent (3 heartbeats and some).
pub const ALIVE_FOR: Duration = Duration::from_millis(7000);
/// The largest message accepted or sent.
pub const MAX_MESSAGE: usize = 64 << 10;
/// The longest id, origin or action.
pub const MAX_NAME: usize = 128;

const MAGIC: &str = "ringx-event/1";

/// One message: `origin` (a host id) asks every host to do `action` to `target`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// Unique per message: the confirmations are kept under it.
    pub id: String,
    pub origin: String,
    /// `purge`, `drain`: the binary says what each means.
    pub action: String,
    pub target: Vec<u8>,
}

/// Why a message is not an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError(pub &'static str);

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "not a ringx event: {}", self.0)
    }
}

/// Whether `s` can be an id, an origin (a host id) or an action: 1 to [`MAX_NAME`] printable
/// ASCII characters, no space.
pub fn is_name(s: &str) -> bool {
    !s.is_empty() && s.len() <= MAX_NAME && s.bytes().all(|b| b.is_ascii_graphic())
}

/// The key the confirmations of message `id` are kept under (a hash: host id -> result).
pub fn confirm_key(prefix: &str, id: &str) -> String {
    format!("{prefix}confirm:{id}")
}

fn keep(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~:/?=&".contains(&b)
}

fn encode_field(v: &[u8], out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &b in v {
        if keep(b) {
            out.push(b);
        } else {
            out.extend_from_slice(&[b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
        }
    }
}

fn decode_field(v: &[u8]) -> Result<Vec<u8>, DecodeError> {
    let hex = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'A'..=b'F' => Some(c - b'A' + 10),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let mut out = Vec::with_capacity(v.len());
    let mut i = 0;
    while i < v.len() {
        match v[i] {
            b'%' => {
                let (Some(h), Some(l)) = (
                    v.get(i + 1).copied().and_then(hex),
                    v.get(i + 2).copied().and_then(hex),
                ) else {
                    return Err(DecodeError("a bad %-escape"));
                };
                out.push(h << 4 | l);
                i += 3;
            }
            b if keep(b) => {
                out.push(b);
                i += 1;
            }
            _ => return Err(DecodeError("a byte that should have been %-escaped")),
        }
    }
    Ok(out)
}

fn name(v: &[u8]) -> Result<String, DecodeError> {
    let v = decode_field(v)?;
    match String::from_utf8(v) {
        Ok(s) if is_name(&s) => Ok(s),
        _ => Err(DecodeError(
            "an id, origin or action that is not 1-128 printable characters",
        )),
    }
}

impl Event {
    /// The message published; `None` when a field cannot be sent (a name that is not
    /// [`is_name`], or a message over [`MAX_MESSAGE`]).
    pub fn encode(&self) -> Option<Vec<u8>> {
        if ![&self.id, &self.origin, &self.action]
            .iter()
            .all(|s| is_name(s))
        {
            return None;
        }
        let mut out = Vec::with_capacity(64 + self.target.len());
        out.extend_from_slice(MAGIC.as_bytes());
        for f in [
            self.id.as_bytes(),
            self.origin.as_bytes(),
            self.action.as_bytes(),
            &self.target,
        ] {
            out.push(b' ');
            encode_field(f, &mut out);
        }
        (out.len() <= MAX_MESSAGE).then_some(out)
    }

    /// The event a message holds.
    pub fn decode(msg: &[u8]) -> Result<Event, DecodeError> {
        if msg.len() > MAX_MESSAGE {
            return Err(DecodeError("longer than 64 KiB"));
        }
        let mut parts = msg.split(|&b| b == b' ');
        if parts.next() != Some(MAGIC.as_bytes()) {
            return Err(DecodeError("it does not start with ringx-event/1"));
        }
        let mut field = || parts.next().ok_or(DecodeError("fewer than 4 fields"));
        let (id, origin, action, target) = (field()?, field()?, field()?, field()?);
        if parts.next().is_some() {
            return Err(DecodeError("more than 4 fields"));
        }
        Ok(Event {
            id: name(id)?,
            origin: name(origin)?,
            action: name(action)?,
            target: decode_field(target)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ev(target: &[u8]) -> Event {
        Event {
            id: "18c0a1f2-7".into(),
            origin: "web-1:9901".into(),
            action: "purge".into(),
            target: target.to_vec(),
        }
    }

    #[test]
    fn a_message_is_one_line_with_the_target_escaped() {
        let e = ev(b"c?key=GET http://a/b\r\n%");
        let m = e.encode().unwrap();
        assert_eq!(
            m,
            b"ringx-event/1 18c0a1f2-7 web-1:9901 purge c?key=GET%20http://a/b%0D%0A%25"
        );
        assert_eq!(Event::decode(&m), Ok(e));
        let drain = ev(b"");
        assert_eq!(
            drain.encode().unwrap(),
            b"ringx-event/1 18c0a1f2-7 web-1:9901 purge "
        );
        assert_eq!(Event::decode(&drain.encode().unwrap()), Ok(drain));
    }

    #[test]
    fn what_cannot_be_sent_is_refused() {
        let mut e = ev(b"");
        e.origin = "a b".into();
        assert_eq!(e.encode(), None);
        e.origin = String::new();
        assert_eq!(e.encode(), None);
        e.origin = "x".repeat(MAX_NAME + 1);
        assert_eq!(e.encode(), None);
        assert_eq!(ev(&vec![0; MAX_MESSAGE]).encode(), None);
    }

    #[test]
    fn other_messages_are_refused() {
        for m in [
            &b""[..],
            b"hello",
            b"ringx-event/2 a b c d",
            b"ringx-event/1 a b c",
            b"ringx-event/1 a b c d e",
            b"ringx-event/1 a b c d%",
            b"ringx-event/1 a b c d%4",
            b"ringx-event/1 a b c d%G0",
            b"ringx-event/1 a b c \xff",
            b"ringx-event/1 a%20 b c d",
            b"ringx-event/1 a%FF b c d",
            b"ringx-event/1  b c d",
            b"ringx-event/1 a b c d\n",
        ] {
            assert!(
                Event::decode(m).is_err(),
                "{:?}",
                String::from_utf8_lossy(m)
            );
        }
        // Lower-case escapes are taken too.
        assert_eq!(
            Event::decode(b"ringx-event/1 a b c %0a").unwrap().target,
            b"\n"
        );
    }

    fn names() -> impl Strategy<Value = String> {
        "[!-~]{1,20}"
    }

    proptest! {
        /// Any event that can be sent decodes back to itself.
        #[test]
        fn events_round_trip(
            id in names(),
            origin in names(),
            action in names(),
            target in prop::collection::vec(any::<u8>(), 0..64),
        ) {
            let e = Event { id, origin, action, target };
            let m = e.encode().expect("fits");
            prop_assert!(!m.contains(&b'\n') && !m.contains(&b'\r'));
            prop_assert_eq!(Event::decode(&m), Ok(e));
        }

        /// The decoder never panics: on bytes at random, on a message with one byte
        /// changed, or cut anywhere.
        #[test]
        fn the_decoder_never_panics(
            noise in prop::collection::vec(any::<u8>(), 0..256),
            target in prop::collection::vec(any::<u8>(), 0..32),
            at in any::<prop::sample::Index>(),
            byte in any::<u8>(),
        ) {
            let _ = Event::decode(&noise);
            let mut tail = b"ringx-event/1 ".to_vec();
            tail.extend_from_slice(&noise);
            let _ = Event::decode(&tail);
            let mut m = ev(&target).encode().expect("fits");
            let i = at.index(m.len());
            let _ = Event::decode(&m[..i]);
            m[i] = byte;
            if let Ok(e) = Event::decode(&m) {
                // What decodes is an event that can be sent again.
                prop_assert!(e.encode().is_some());
            }
        }
    }
}
