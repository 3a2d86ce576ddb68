//! A proxied body compressed as it flows: the upstream's body bytes go through an
//! [`Encoder`] and out to the client, framed as chunks for an HTTP/1.1 client (the compressed
//! length is not known in advance) or delimited by the close for HTTP/1.0.
//!
//! Bytes are passed on as soon as the encoder produces them. When a short burst of input
//! (less than [`TRICKLE`]: a slow upstream, an event stream) produced nothing, the encoder is
//! flushed at its end, so the client is never left waiting for bytes the proxy holds. A fast
//! body arrives in full receive buffers and is not flushed: it compresses as well as it would
//! in one piece.

use super::encoder::Encoder;

/// A burst of input shorter than this, which made the encoder produce (next to) nothing, is
/// flushed at its end. Bulk bodies arrive in full receive buffers (16 KiB by default).
pub const TRICKLE: usize = 8192;
/// Output of a burst that counts as nothing (gzip's 10-byte header, a block's few bytes).
const NOTHING: usize = 64;

pub struct Relay {
    enc: Option<Encoder>,
    chunked: bool,
    /// Input fed, and output emitted, in this burst.
    burst_in: usize,
    burst_out: usize,
    /// Compressed bytes sent.
    pub sent: u64,
}

impl Relay {
    pub fn new(enc: Encoder, chunked: bool) -> Relay {
        Relay {
            enc: Some(enc),
            chunked,
            burst_in: 0,
            burst_out: 0,
            sent: 0,
        }
    }

    /// Feeds body bytes; writes what the encoder has ready through `write`.
    pub fn feed(&mut self, data: &[u8], write: &mut dyn FnMut(&[u8])) -> std::io::Result<()> {
        let Some(enc) = self.enc.as_mut() else {
            return Ok(());
        };
        if data.is_empty() {
            return Ok(());
        }
        enc.write(data)?;
        self.burst_in += data.len();
        if enc.produced() > 0 {
            let out = enc.take();
            self.burst_out += out.len();
            self.emit(&out, write);
        }
        Ok(())
    }

    /// The end of what arrived for now: a short burst that produced nothing is flushed out.
    pub fn burst_end(&mut self, write: &mut dyn FnMut(&[u8])) -> std::io::Result<()> {
        let trickle = self.burst_in > 0 && self.burst_in < TRICKLE && self.burst_out < NOTHING;
        self.burst_in = 0;
        self.burst_out = 0;
        let Some(enc) = self.enc.as_mut().filter(|_| trickle) else {
            return Ok(());
        };
        enc.flush()?;
        let out = enc.take();
        self.emit(&out, write);
        Ok(())
    }

    /// The body is complete: the encoder's last bytes, and the last chunk.
    pub fn finish(&mut self, write: &mut dyn FnMut(&[u8])) -> std::io::Result<()> {
        let Some(mut enc) = self.enc.take() else {
            return Ok(());
        };
        let mut out = enc.take();
        out.extend_from_slice(&enc.finish()?);
        self.emit(&out, write);
        if self.chunked {
            write(b"0\r\n\r\n");
        }
        Ok(())
    }

    fn emit(&mut self, data: &[u8], write: &mut dyn FnMut(&[u8])) {
        if data.is_empty() {
            return;
        }
        self.sent += data.len() as u64;
        if self.chunked {
            let mut line = [0u8; 20];
            let n = hex_line(data.len(), &mut line);
            write(&line[..n]);
            write(data);
            write(b"\r\n");
        } else {
            write(data);
        }
    }
}

/// `{len:x}\r\n` into `buf`; returns its length.
fn hex_line(mut n: usize, buf: &mut [u8; 20]) -> usize {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut tmp = [0u8; 16];
    let mut i = 0;
    loop {
        tmp[i] = HEX[n & 15];
        i += 1;
        n >>= 4;
        if n == 0 {
            break;
        }
    }
    for j in 0..i {
        buf[j] = tmp[i - 1 - j];
    }
    buf[i] = b'\r';
    buf[i + 1] = b'\n';
    i + 2
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compress::Coding;
    use std::io::Read;

    fn dechunk(mut b: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        loop {
            let eol = b.windows(2).position(|w| w == b"\r\n").unwrap();
            let n = usize::from_str_radix(std::str::from_utf8(&b[..eol]).unwrap(), 16).unwrap();
            b = &b[eol + 2..];
            if n == 0 {
                assert_eq!(b, b"\r\n");
                return out;
            }
            out.extend_from_slice(&b[..n]);
            assert_eq!(&b[n..n + 2], b"\r\n");
            b = &b[n + 2..];
        }
    }

    /// Chunked and close-delimited output both decode to the body; a trickle is flushed at
    /// each burst's end, so every event reaches the client when it arrives.
    #[test]
    fn relayed_bodies_decode_and_trickles_are_flushed() {
        let body: Vec<u8> = (0..5000)
            .flat_map(|i| format!("event {i}\n").into_bytes())
            .collect();
        for chunked in [true, false] {
            let mut r = Relay::new(Encoder::new(Coding::Gzip, 5, None).unwrap(), chunked);
            let mut wire = Vec::new();
            for piece in body.chunks(3000) {
                r.feed(piece, &mut |b| wire.extend_from_slice(b)).unwrap();
            }
            r.finish(&mut |b| wire.extend_from_slice(b)).unwrap();
            let gz = if chunked { dechunk(&wire) } else { wire };
            let mut out = Vec::new();
            flate2::read::GzDecoder::new(&gz[..])
                .read_to_end(&mut out)
                .unwrap();
            assert_eq!(out, body);
        }
        for c in [Coding::Gzip, Coding::Brotli, Coding::Zstd] {
            let mut r = Relay::new(Encoder::new(c, 4, None).unwrap(), false);
            let mut wire = Vec::new();
            r.feed(b"data: one\n\n", &mut |b| wire.extend_from_slice(b))
                .unwrap();
            r.burst_end(&mut |b| wire.extend_from_slice(b)).unwrap();
            let mut out = vec![0u8; 64];
            let n = match c {
                Coding::Gzip => flate2::read::GzDecoder::new(&wire[..])
                    .read(&mut out)
                    .unwrap(),
                Coding::Brotli => brotli::Decompressor::new(&wire[..], 4096)
                    .read(&mut out)
                    .unwrap(),
                Coding::Zstd => zstd::stream::read::Decoder::new(&wire[..])
                    .unwrap()
                    .read(&mut out)
                    .unwrap(),
            };
            assert_eq!(
                &out[..n],
                b"data: one\n\n",
                "{c:?}: the event is out at the burst's end"
            );
        }
        let mut hl = [0u8; 20];
        let n = hex_line(0x1a2b, &mut hl);
        assert_eq!(&hl[..n], b"1a2b\r\n");
    }
}
