//! Length-prefixed framing for RPC-style protocols on the engine: each message is a 4-byte
//! big-endian length followed by that many bytes (the netpoll echo benchmark's protocol).
//!
//! [`Deframer`] yields complete messages as borrowed slices of the receive buffer whenever a
//! message arrived whole, and copies only the bytes of a message split across receives.

/// Largest message accepted by default (16 MiB).
pub const DEFAULT_MAX_FRAME: usize = 16 << 20;

/// A message longer than the limit: the connection should be closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameTooLarge(pub usize);

impl std::fmt::Display for FrameTooLarge {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "message of {} bytes exceeds the frame limit", self.0)
    }
}

impl std::error::Error for FrameTooLarge {}

/// Reassembles length-prefixed messages from a byte stream, one connection each.
#[derive(Debug)]
pub struct Deframer {
    partial: Vec<u8>,
    max: usize,
}

impl Default for Deframer {
    fn default() -> Self {
        Deframer::new(DEFAULT_MAX_FRAME)
    }
}

impl Deframer {
    /// A deframer that rejects messages longer than `max` bytes.
    pub fn new(max: usize) -> Self {
        Deframer {
            partial: Vec::new(),
            max,
        }
    }

    /// Bytes held from an incomplete message.
    pub fn buffered(&self) -> usize {
        self.partial.len()
    }

    /// Feeds received bytes and calls `f` with each complete message's payload, in order.
    pub fn feed(&mut self, mut data: &[u8], mut f: impl FnMut(&[u8])) -> Result<(), FrameTooLarge> {
        if !self.partial.is_empty() {
            // Finish the message that began in an earlier receive.
            let need = if self.partial.len() < 4 {
                let take = (4 - self.partial.len()).min(data.len());
                self.partial.extend_from_slice(&data[..take]);
                data = &data[take..];
                if self.partial.len() < 4 {
                    return Ok(());
                }
                self.frame_len(&self.partial[..4])?
            } else {
                self.frame_len(&self.partial[..4])?
            };
            let missing = 4 + need - self.partial.len();
            let take = missing.min(data.len());
            self.partial.extend_from_slice(&data[..take]);
            data = &data[take..];
            if self.partial.len() < 4 + need {
                return Ok(());
            }
            f(&self.partial[4..]);
            self.partial.clear();
        }
        // Whole messages straight from the receive buffer.
        while data.len() >= 4 {
            let len = self.frame_len(&data[..4])?;
            if data.len() < 4 + len {
                break;
            }
            f(&data[4..4 + len]);
            data = &data[4 + len..];
        }
        self.partial.extend_from_slice(data);
        Ok(())
    }

    fn frame_len(&self, hdr: &[u8]) -> Result<usize, FrameTooLarge> {
        let len = u32::from_be_bytes([hdr[0], hdr[1], hdr[2], hdr[3]]) as usize;
        if len > self.max {
            return Err(FrameTooLarge(len));
        }
        Ok(len)
    }
}

/// Appends one framed message (length prefix and payload) to `out`.
pub fn encode(out: &mut Vec<u8>, payload: &[u8]) {
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    out.extend_from_slice(payload);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(msgs: &[&[u8]]) -> Vec<u8> {
        let mut v = Vec::new();
        for m in msgs {
            encode(&mut v, m);
        }
        v
    }

    #[test]
    fn every_split_gives_the_same_messages() {
        let msgs: Vec<Vec<u8>> = vec![
            b"".to_vec(),
            b"a".to_vec(),
            vec![7u8; 300],
            b"hello".to_vec(),
        ];
        let refs: Vec<&[u8]> = msgs.iter().map(|m| m.as_slice()).collect();
        let s = stream(&refs);
        for cut in 0..=s.len() {
            for cut2 in cut..=s.len() {
                let mut d = Deframer::new(1024);
                let mut got = Vec::new();
                for part in [&s[..cut], &s[cut..cut2], &s[cut2..]] {
                    d.feed(part, |m| got.push(m.to_vec())).unwrap();
                }
                assert_eq!(got, msgs, "cuts at {cut} and {cut2}");
                assert_eq!(d.buffered(), 0);
            }
        }
    }

    #[test]
    fn oversized_frame_is_refused() {
        let mut d = Deframer::new(10);
        let s = stream(&[&[0u8; 11]]);
        assert_eq!(d.feed(&s, |_| {}), Err(FrameTooLarge(11)));
    }
}
