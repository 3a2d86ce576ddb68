//! A decrypted packet's PADDING, each run of it cut to one byte before quinn-proto reads the
//! packet.
//!
//! quinn-proto 0.11 reads PADDING as it reads every frame: one byte at a time, each made
//! into a `Frame` and matched (`frame::Iter`). A client pads every datagram that carries an
//! Initial packet to 1,200 bytes or more (RFC 9000 §14.1), and path-MTU probes are PADDING
//! too; quic-go's Initial datagrams carry 2–3 KB of it per handshake, which cost ringx about
//! 26 µs of the 333 a new connection took (`perf`, bench/README.md "HTTP/3"). PADDING has
//! no meaning (§19.1), so each run of it is cut to one byte, the frames after it moved up:
//! quic-go puts its padding between a packet's ACK and its other frames, others at the end.
//! One byte stays, because a packet without frames is a PROTOCOL_VIOLATION (§12.4).
//!
//! Where a run starts and ends is known only by walking the frames around it, so the walk
//! reads RFC 9000's frames (§19), RFC 9221's DATAGRAM and the ack-frequency draft's
//! IMMEDIATE_ACK, each by its length alone: quinn-proto's client pads its first 1-RTT
//! packet after its NEW_CONNECTION_ID frames, and its path-MTU probes after PING and
//! IMMEDIATE_ACK. It stops at a frame it does not read (an extension's; STREAM and DATAGRAM
//! without a length, whose data runs to the end) or one that does not parse, and leaves the
//! rest as it is: quinn-proto reads the frames the walk read as the walk read them, then
//! the rest, and judges it all as before.

use bytes::BytesMut;
use quinn_proto::crypto::{CryptoError, KeyPair, Keys, PacketKey};

/// A packet key whose decryption cuts each run of PADDING to one byte.
pub struct Trimmed(pub Box<dyn PacketKey>);

impl PacketKey for Trimmed {
    fn encrypt(&self, packet: u64, buf: &mut [u8], header_len: usize) {
        self.0.encrypt(packet, buf, header_len)
    }

    fn decrypt(
        &self,
        packet: u64,
        header: &[u8],
        payload: &mut BytesMut,
    ) -> Result<(), CryptoError> {
        self.0.decrypt(packet, header, payload)?;
        let n = collapse(payload);
        payload.truncate(n);
        Ok(())
    }

    fn tag_len(&self) -> usize {
        self.0.tag_len()
    }

    fn confidentiality_limit(&self) -> u64 {
        self.0.confidentiality_limit()
    }

    fn integrity_limit(&self) -> u64 {
        self.0.integrity_limit()
    }
}

/// `keys` with the decrypting packet key cutting PADDING (the header keys and the sealing
/// key as they are).
pub fn trim_keys(keys: Keys) -> Keys {
    Keys {
        header: keys.header,
        packet: trim_pair(keys.packet),
    }
}

/// `pair` with its decrypting key cutting PADDING.
pub fn trim_pair(pair: KeyPair<Box<dyn PacketKey>>) -> KeyPair<Box<dyn PacketKey>> {
    KeyPair {
        local: pair.local,
        remote: Box::new(Trimmed(pair.remote)),
    }
}

/// Cuts each run of PADDING in decrypted payload `p` to one byte, moving the frames after
/// it up, as far as its frames walk (module docs); `p`'s new length. What lies beyond it is
/// left as it was.
pub fn collapse(p: &mut [u8]) -> usize {
    let mut r = Walk { p, at: 0 };
    // `p[..to]` is what is kept of `p[..r.at]`.
    let mut to = 0;
    while r.at < r.p.len() {
        let start = r.at;
        if r.frame().is_none() {
            r.at = start;
            break;
        }
        let end = if r.p[start] == PADDING {
            start + 1
        } else {
            r.at
        };
        shift(r.p, start..end, to);
        to += end - start;
    }
    let rest = r.at..r.p.len();
    let n = rest.len();
    shift(r.p, rest, to);
    to + n
}

/// Moves `p[from]` to `p[to..]` (`to` is never past `from.start`).
fn shift(p: &mut [u8], from: std::ops::Range<usize>, to: usize) {
    if to != from.start {
        p.copy_within(from, to);
    }
}

const PADDING: u8 = 0x00;
const PING: u8 = 0x01;
const ACK: u8 = 0x02;
const ACK_ECN: u8 = 0x03;
const CRYPTO: u8 = 0x06;
const STREAM: u8 = 0x08;
const STREAM_LAST: u8 = 0x0f;
const STREAM_OFF: u8 = 0x04;
const STREAM_LEN: u8 = 0x02;
const CLOSE: u8 = 0x1c;
const RESET_STREAM: u8 = 0x04;
const STOP_SENDING: u8 = 0x05;
const NEW_TOKEN: u8 = 0x07;
const MAX_DATA: u8 = 0x10;
const MAX_STREAM_DATA: u8 = 0x11;
const MAX_STREAMS_BIDI: u8 = 0x12;
const MAX_STREAMS_UNI: u8 = 0x13;
const DATA_BLOCKED: u8 = 0x14;
const STREAM_DATA_BLOCKED: u8 = 0x15;
const STREAMS_BLOCKED_BIDI: u8 = 0x16;
const STREAMS_BLOCKED_UNI: u8 = 0x17;
const NEW_CONNECTION_ID: u8 = 0x18;
const RETIRE_CONNECTION_ID: u8 = 0x19;
const PATH_CHALLENGE: u8 = 0x1a;
const PATH_RESPONSE: u8 = 0x1b;
const APPLICATION_CLOSE: u8 = 0x1d;
const HANDSHAKE_DONE: u8 = 0x1e;
/// IMMEDIATE_ACK (draft-ietf-quic-ack-frequency §5), a type alone: quinn-proto's client
/// sends it in its path-MTU probes, before their PADDING.
const IMMEDIATE_ACK: u8 = 0x1f;
/// DATAGRAM with a length (RFC 9221 §4); 0x30, without, runs to the end.
const DATAGRAM_LEN: u8 = 0x31;
/// The longest connection ID (RFC 9000 §17.2).
const MAX_CID: usize = 20;
/// A stateless reset token's bytes (§10.3).
const RESET_TOKEN: usize = 16;

/// A cursor over a payload's bytes.
struct Walk<'a> {
    p: &'a mut [u8],
    at: usize,
}

impl Walk<'_> {
    /// Passes one frame (RFC 9000 §19), a run of PADDING being one; None where the frame is
    /// not one this walk reads or does not parse.
    fn frame(&mut self) -> Option<()> {
        // Frame types are varints (§12.4) in their shortest form; every type walked here
        // takes one byte, and a longer one is a frame this walk does not know.
        match self.byte()? {
            PADDING => {
                let run = self.p[self.at..]
                    .iter()
                    .take_while(|&&b| b == PADDING)
                    .count();
                self.at += run;
            }
            PING | HANDSHAKE_DONE | IMMEDIATE_ACK => {}
            MAX_DATA | MAX_STREAMS_BIDI | MAX_STREAMS_UNI | DATA_BLOCKED | STREAMS_BLOCKED_BIDI
            | STREAMS_BLOCKED_UNI | RETIRE_CONNECTION_ID => {
                self.varint()?;
            }
            MAX_STREAM_DATA | STREAM_DATA_BLOCKED | STOP_SENDING => self.varints(2)?,
            RESET_STREAM => self.varints(3)?, // stream id, error code, final size
            NEW_TOKEN | DATAGRAM_LEN => self.skip_len()?,
            PATH_CHALLENGE | PATH_RESPONSE => self.skip(8)?,
            NEW_CONNECTION_ID => {
                self.varints(2)?; // sequence number, retire prior to
                let len = usize::from(self.byte()?);
                if len == 0 || len > MAX_CID {
                    return None;
                }
                self.skip(len + RESET_TOKEN)?;
            }
            ty @ (ACK | ACK_ECN) => {
                self.varints(2)?; // largest acknowledged, ack delay
                let ranges = self.varint()?;
                self.varint()?; // the first range
                for _ in 0..ranges {
                    self.varints(2)?; // gap, range length
                }
                if ty == ACK_ECN {
                    self.varints(3)?;
                }
            }
            CRYPTO => {
                self.varint()?; // offset
                self.skip_len()?;
            }
            ty @ STREAM..=STREAM_LAST => {
                self.varint()?; // stream id
                if ty & STREAM_OFF != 0 {
                    self.varint()?;
                }
                if ty & STREAM_LEN == 0 {
                    return None; // its data runs to the end: nothing to cut after it
                }
                self.skip_len()?;
            }
            CLOSE => {
                self.varints(2)?; // error code, frame type
                self.skip_len()?; // reason phrase
            }
            APPLICATION_CLOSE => {
                self.varint()?; // error code
                self.skip_len()?; // reason phrase
            }
            _ => return None,
        }
        Some(())
    }

    fn byte(&mut self) -> Option<u8> {
        let b = *self.p.get(self.at)?;
        self.at += 1;
        Some(b)
    }

    /// A variable-length integer (RFC 9000 §16): its first two bits give its length.
    fn varint(&mut self) -> Option<u64> {
        let first = self.byte()?;
        let len = 1usize << (first >> 6);
        let rest = self.p.get(self.at..self.at + len - 1)?;
        self.at += len - 1;
        Some(
            rest.iter()
                .fold(u64::from(first & 0x3f), |v, &b| (v << 8) | u64::from(b)),
        )
    }

    fn varints(&mut self, n: usize) -> Option<()> {
        for _ in 0..n {
            self.varint()?;
        }
        Some(())
    }

    /// A length, and that many bytes after it.
    fn skip_len(&mut self) -> Option<()> {
        let n = usize::try_from(self.varint()?).ok()?;
        self.skip(n)
    }

    fn skip(&mut self, n: usize) -> Option<()> {
        if n > self.p.len() - self.at {
            return None;
        }
        self.at += n;
        Some(())
    }
}

#[cfg(test)]
#[path = "padding_tests.rs"]
mod tests;
