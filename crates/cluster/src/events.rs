//! What hosts tell each other through Redis pub/sub (a cache purge, a drain): an [`Event`]
//! published on `PREFIX events`, applied by every host and confirmed under
//! `PREFIX confirm:ID`; and the keys of the hosts' heartbeats.
//!
//! On the wire an event is one line of text, `ringx-event/2 ID ORIGIN SENT ACTION TARGET
//! MAC`, each field percent-encoded (bytes other than `A-Z a-z 0-9 - . _ ~ : / ? = &`
//! become `%XX`), so that a target may hold any byte (a cache key with CR, LF or a space)
//! and a line never splits where it should not. `SENT` is the publisher's clock in Unix
//! milliseconds; `MAC` is HMAC-SHA256 under `[cluster] events_secret` of everything before
//! the space that precedes it, in 64 lower-case hex digits, or `-` when the publisher has no
//! secret. The decoder takes any bytes (another program may publish on the channel) and
//! refuses what is not such a line, never panicking; with a secret it refuses what does not
//! carry its MAC. (`ringx-event/1` had neither `SENT` nor `MAC`; it is refused.)

use std::time::Duration;

use aws_lc_rs::hmac;

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

/// With a secret, how far a message's `SENT` may be from the receiving host's clock (either
/// way): older ones are refused as replays, as are ids seen within it.
pub const MAX_AGE: Duration = Duration::from_secs(300);

const MAGIC: &str = "ringx-event/2";
const MAC_HEX: usize = 64;

/// One message: `origin` (a host id) asks every host to do `action` to `target`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// Unique per message: the confirmations are kept under it.
    pub id: String,
    pub origin: String,
    /// When it was published: the publisher's clock, Unix milliseconds.
    pub sent_ms: u64,
    /// `purge`, `drain`: the binary says what each means.
    pub action: String,
    pub target: Vec<u8>,
}

/// Why a message is not taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    /// Not a ringx event.
    Invalid(&'static str),
    /// An event, but without the MAC of this host's `[cluster] events_secret`.
    Unauthenticated(&'static str),
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            DecodeError::Invalid(why) => write!(f, "not a ringx event: {why}"),
            DecodeError::Unauthenticated(why) => write!(f, "not authenticated: {why}"),
        }
    }
}

/// An event received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    pub event: Event,
    /// Its MAC was checked under this host's secret: only someone who has the secret sent
    /// it. False without a secret (anyone who can publish on the channel may have).
    pub authenticated: bool,
}

fn mac_key(secret: &[u8]) -> hmac::Key {
    hmac::Key::new(hmac::HMAC_SHA256, secret)
}

fn hex(v: &[u8]) -> String {
    v.iter().map(|b| format!("{b:02x}")).collect()
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
    use DecodeError::Invalid;
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
                    return Err(Invalid("a bad %-escape"));
                };
                out.push(h << 4 | l);
                i += 3;
            }
            b if keep(b) => {
                out.push(b);
                i += 1;
            }
            _ => return Err(Invalid("a byte that should have been %-escaped")),
        }
    }
    Ok(out)
}

fn name(v: &[u8]) -> Result<String, DecodeError> {
    let v = decode_field(v)?;
    match String::from_utf8(v) {
        Ok(s) if is_name(&s) => Ok(s),
        _ => Err(DecodeError::Invalid(
            "an id, origin or action that is not 1-128 printable characters",
        )),
    }
}

impl Event {
    /// The message published, with the MAC of `secret` when there is one; `None` when a
    /// field cannot be sent (a name that is not [`is_name`], or a message over
    /// [`MAX_MESSAGE`]).
    pub fn encode(&self, secret: Option<&[u8]>) -> Option<Vec<u8>> {
        if ![&self.id, &self.origin, &self.action]
            .iter()
            .all(|s| is_name(s))
            || self.sent_ms >= 10_000_000_000_000_000_000
        {
            return None;
        }
        let mut out = Vec::with_capacity(64 + self.target.len());
        out.extend_from_slice(MAGIC.as_bytes());
        let sent = self.sent_ms.to_string();
        for f in [
            self.id.as_bytes(),
            self.origin.as_bytes(),
            sent.as_bytes(),
            self.action.as_bytes(),
            &self.target,
        ] {
            out.push(b' ');
            encode_field(f, &mut out);
        }
        out.push(b' ');
        match secret {
            Some(k) => {
                let tag = hmac::sign(&mac_key(k), &out[..out.len() - 1]);
                out.extend_from_slice(hex(tag.as_ref()).as_bytes());
            }
            None => out.push(b'-'),
        }
        (out.len() <= MAX_MESSAGE).then_some(out)
    }

    /// The event a message holds. With `secret`, only a message carrying its MAC is taken.
    pub fn decode(msg: &[u8], secret: Option<&[u8]>) -> Result<Received, DecodeError> {
        use DecodeError::{Invalid, Unauthenticated};
        if msg.len() > MAX_MESSAGE {
            return Err(Invalid("longer than 64 KiB"));
        }
        let mut parts = msg.split(|&b| b == b' ');
        if parts.next() != Some(MAGIC.as_bytes()) {
            return Err(Invalid("it does not start with ringx-event/2"));
        }
        let mut field = || parts.next().ok_or(Invalid("fewer than 6 fields"));
        let (id, origin, sent, action, target, mac) =
            (field()?, field()?, field()?, field()?, field()?, field()?);
        if parts.next().is_some() {
            return Err(Invalid("more than 6 fields"));
        }
        let sent_ms = match sent {
            [b'0'] => 0,
            [b'1'..=b'9', ..] if sent.len() <= 19 && sent.iter().all(u8::is_ascii_digit) => {
                std::str::from_utf8(sent)
                    .ok()
                    .and_then(|t| t.parse::<u64>().ok())
                    .ok_or(Invalid("a time that is not a number of milliseconds"))?
            }
            _ => return Err(Invalid("a time that is not a number of milliseconds")),
        };
        let mac = match mac {
            b"-" => None,
            m if m.len() == MAC_HEX && m.iter().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) => {
                Some(m)
            }
            _ => {
                return Err(Invalid(
                    "a MAC that is neither - nor 64 lower-case hex digits",
                ))
            }
        };
        let event = Event {
            id: name(id)?,
            origin: name(origin)?,
            sent_ms,
            action: name(action)?,
            target: decode_field(target)?,
        };
        let Some(secret) = secret else {
            return Ok(Received {
                event,
                authenticated: false,
            });
        };
        let Some(mac) = mac else {
            return Err(Unauthenticated(
                "no MAC, and [cluster] events_secret is set here",
            ));
        };
        let tag: Vec<u8> = mac
            .chunks(2)
            .map(|h| {
                let d = |c: u8| if c <= b'9' { c - b'0' } else { c - b'a' + 10 };
                d(h[0]) << 4 | d(h[1])
            })
            .collect();
        let signed = &msg[..msg.len() - MAC_HEX - 1];
        hmac::verify(&mac_key(secret), signed, &tag).map_err(|_| {
            Unauthenticated("a MAC that is not [cluster] events_secret's (another secret?)")
        })?;
        Ok(Received {
            event,
            authenticated: true,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const KEY: &[u8] = b"0123456789abcdef-fleet";

    fn ev(target: &[u8]) -> Event {
        Event {
            id: "18c0a1f2-7".into(),
            origin: "web-1:9901".into(),
            sent_ms: 1_764_656_000_123,
            action: "purge".into(),
            target: target.to_vec(),
        }
    }

    fn plain(e: Event) -> Result<Received, DecodeError> {
        Ok(Received {
            event: e,
            authenticated: false,
        })
    }

    #[test]
    fn a_message_is_one_line_with_the_target_escaped() {
        let e = ev(b"c?key=GET http://a/b\r\n%");
        let m = e.encode(None).unwrap();
        assert_eq!(
            m,
            b"ringx-event/2 18c0a1f2-7 web-1:9901 1764656000123 purge \
              c?key=GET%20http://a/b%0D%0A%25 -"
        );
        assert_eq!(Event::decode(&m, None), plain(e));
        let drain = ev(b"");
        assert_eq!(
            drain.encode(None).unwrap(),
            b"ringx-event/2 18c0a1f2-7 web-1:9901 1764656000123 purge  -"
        );
        assert_eq!(
            Event::decode(&drain.encode(None).unwrap(), None),
            plain(drain)
        );
    }

    #[test]
    fn with_a_secret_only_its_mac_is_taken() {
        let e = ev(b"");
        let m = e.encode(Some(KEY)).unwrap();
        let (head, mac) = m.split_at(m.len() - 64);
        assert_eq!(
            head,
            b"ringx-event/2 18c0a1f2-7 web-1:9901 1764656000123 purge  "
        );
        // HMAC-SHA256(KEY, the message before " MAC").
        let want = hmac::sign(&mac_key(KEY), &head[..head.len() - 1]);
        assert_eq!(mac, hex(want.as_ref()).as_bytes());
        let ok = Event::decode(&m, Some(KEY)).unwrap();
        assert!(ok.authenticated);
        assert_eq!(ok.event, e);
        // Without a secret here, a signed message is taken, not authenticated.
        assert_eq!(Event::decode(&m, None), plain(e.clone()));
        // Unsigned, signed with another secret, or changed anywhere: refused.
        let unauth = |m: &[u8]| {
            matches!(
                Event::decode(m, Some(KEY)),
                Err(DecodeError::Unauthenticated(_))
            )
        };
        assert!(unauth(&e.encode(None).unwrap()));
        assert!(unauth(&e.encode(Some(b"another secret, 16+")).unwrap()));
        let mut drain = e.clone();
        drain.action = "drain".into();
        let mut forged = drain.encode(None).unwrap();
        forged.truncate(forged.len() - 1);
        forged.extend_from_slice(mac);
        assert!(unauth(&forged));
        let mut later = e.clone();
        later.sent_ms += 1;
        let mut replayed = later.encode(None).unwrap();
        replayed.truncate(replayed.len() - 1);
        replayed.extend_from_slice(mac);
        assert!(unauth(&replayed));
    }

    #[test]
    fn what_cannot_be_sent_is_refused() {
        let mut e = ev(b"");
        e.origin = "a b".into();
        assert_eq!(e.encode(None), None);
        e.origin = String::new();
        assert_eq!(e.encode(None), None);
        e.origin = "x".repeat(MAX_NAME + 1);
        assert_eq!(e.encode(None), None);
        assert_eq!(ev(&vec![0; MAX_MESSAGE]).encode(Some(KEY)), None);
        let mut e = ev(b"");
        e.sent_ms = u64::MAX;
        assert_eq!(e.encode(None), None);
    }

    #[test]
    fn other_messages_are_refused() {
        for m in [
            &b""[..],
            b"hello",
            b"ringx-event/1 a b c d",
            b"ringx-event/3 a b 1 c d -",
            b"ringx-event/2 a b 1 c -",
            b"ringx-event/2 a b 1 c d - e",
            b"ringx-event/2 a b 1 c d%",
            b"ringx-event/2 a b 1 c d% -",
            b"ringx-event/2 a b 1 c d%4 -",
            b"ringx-event/2 a b 1 c d%G0 -",
            b"ringx-event/2 a b 1 c \xff -",
            b"ringx-event/2 a%20 b 1 c d -",
            b"ringx-event/2 a%FF b 1 c d -",
            b"ringx-event/2  b 1 c d -",
            b"ringx-event/2 a b 1 c d -\n",
            b"ringx-event/2 a b  c d -",
            b"ringx-event/2 a b 01 c d -",
            b"ringx-event/2 a b -1 c d -",
            b"ringx-event/2 a b 1x c d -",
            b"ringx-event/2 a b %31 c d -",
            b"ringx-event/2 a b 12345678901234567890 c d -",
            b"ringx-event/2 a b 1 c d ",
            b"ringx-event/2 a b 1 c d --",
            b"ringx-event/2 a b 1 c d 00",
            b"ringx-event/2 a b 1 c d 0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef",
            b"ringx-event/2 a b 1 c d 0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcde",
        ] {
            let got = Event::decode(m, None);
            assert!(
                matches!(got, Err(DecodeError::Invalid(_))),
                "{:?}: {got:?}",
                String::from_utf8_lossy(m)
            );
            assert!(Event::decode(m, Some(KEY)).is_err());
        }
        // Lower-case escapes are taken too.
        assert_eq!(
            Event::decode(b"ringx-event/2 a b 0 c %0a -", None)
                .unwrap()
                .event
                .target,
            b"\n"
        );
    }

    fn names() -> impl Strategy<Value = String> {
        "[!-~]{1,20}"
    }

    proptest! {
        /// Any event that can be sent decodes back to itself, with or without a secret.
        #[test]
        fn events_round_trip(
            id in names(),
            origin in names(),
            sent_ms in 0u64..10_000_000_000_000_000_000,
            action in names(),
            target in prop::collection::vec(any::<u8>(), 0..64),
        ) {
            let e = Event { id, origin, sent_ms, action, target };
            let m = e.encode(None).expect("fits");
            prop_assert!(!m.contains(&b'\n') && !m.contains(&b'\r'));
            prop_assert_eq!(Event::decode(&m, None), plain(e.clone()));
            let m = e.encode(Some(KEY)).expect("fits");
            prop_assert_eq!(
                Event::decode(&m, Some(KEY)),
                Ok(Received { event: e, authenticated: true })
            );
        }

        /// The decoder never panics: on bytes at random, on a message with one byte
        /// changed, or cut anywhere; and a signed message changed anywhere is refused.
        #[test]
        fn the_decoder_never_panics(
            noise in prop::collection::vec(any::<u8>(), 0..256),
            target in prop::collection::vec(any::<u8>(), 0..32),
            at in any::<prop::sample::Index>(),
            byte in any::<u8>(),
        ) {
            let _ = Event::decode(&noise, None);
            let _ = Event::decode(&noise, Some(KEY));
            let mut tail = b"ringx-event/2 ".to_vec();
            tail.extend_from_slice(&noise);
            let _ = Event::decode(&tail, None);
            let _ = Event::decode(&tail, Some(KEY));
            for secret in [None, Some(KEY)] {
                let mut m = ev(&target).encode(secret).expect("fits");
                let i = at.index(m.len());
                let _ = Event::decode(&m[..i], secret);
                let changed = m[i] != byte;
                m[i] = byte;
                // What decodes is an event that can be sent again, and never a signed
                // message changed.
                if let Ok(r) = Event::decode(&m, secret) {
                    prop_assert!(r.event.encode(secret).is_some());
                    prop_assert!(secret.is_none() || !changed, "a changed message taken");
                }
            }
        }
    }
}
