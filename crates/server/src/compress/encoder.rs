//! A streaming encoder for one response: bytes in, compressed bytes taken out as they come,
//! so a body of any length is compressed with bounded memory (the coding's window and a
//! little buffer, whatever the body's size).

use std::io::Write;

use super::Coding;

/// Window of the streaming brotli encoder (2^19 = 512 KiB, nginx's `brotli_window` default):
/// the encoder's memory grows with it, and text gains little beyond it.
const BROTLI_LGWIN: u32 = 19;
/// Window of the streaming zstd encoder (2^19): level 3 would take 2^21 when the length is
/// unknown, four times the memory per stream for a few percent of size.
const ZSTD_WINDOW_LOG: u32 = 19;
/// Output the brotli writer buffers before handing it on.
const BROTLI_BUFFER: usize = 16 * 1024;

pub enum Encoder {
    Gzip(flate2::write::GzEncoder<Vec<u8>>),
    Brotli(Box<brotli::CompressorWriter<Vec<u8>>>),
    Zstd(zstd::stream::write::Encoder<'static, Vec<u8>>),
}

impl Encoder {
    /// A new encoder; `size`: the input's length when known (zstd then sizes its window).
    pub fn new(coding: Coding, level: u32, size: Option<u64>) -> std::io::Result<Encoder> {
        Ok(match coding {
            Coding::Gzip => Encoder::Gzip(flate2::write::GzEncoder::new(
                Vec::new(),
                flate2::Compression::new(level),
            )),
            Coding::Brotli => Encoder::Brotli(Box::new(brotli::CompressorWriter::new(
                Vec::new(),
                BROTLI_BUFFER,
                level,
                BROTLI_LGWIN,
            ))),
            Coding::Zstd => {
                let mut e = zstd::stream::write::Encoder::new(Vec::new(), level as i32)?;
                e.window_log(ZSTD_WINDOW_LOG)?;
                if let Some(n) = size {
                    e.set_pledged_src_size(Some(n))?;
                }
                Encoder::Zstd(e)
            }
        })
    }

    /// Feeds `data`; what the encoder produced can be taken with [`take`](Self::take).
    pub fn write(&mut self, data: &[u8]) -> std::io::Result<()> {
        match self {
            Encoder::Gzip(e) => e.write_all(data),
            Encoder::Brotli(e) => e.write_all(data),
            Encoder::Zstd(e) => e.write_all(data),
        }
    }

    /// Pushes out everything fed so far (a sync flush: the stream goes on after it), so a
    /// client waiting on a slow body sees what has arrived.
    pub fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Encoder::Gzip(e) => e.flush(),
            Encoder::Brotli(e) => e.flush(),
            Encoder::Zstd(e) => e.flush(),
        }
    }

    /// The compressed bytes produced so far, handed out and forgotten.
    pub fn take(&mut self) -> Vec<u8> {
        std::mem::take(self.out())
    }

    /// Bytes produced and not taken yet.
    pub fn produced(&mut self) -> usize {
        self.out().len()
    }

    fn out(&mut self) -> &mut Vec<u8> {
        match self {
            Encoder::Gzip(e) => e.get_mut(),
            Encoder::Brotli(e) => e.get_mut(),
            Encoder::Zstd(e) => e.get_mut(),
        }
    }

    /// Ends the stream; returns the last bytes.
    pub fn finish(self) -> std::io::Result<Vec<u8>> {
        match self {
            Encoder::Gzip(e) => e.finish(),
            Encoder::Brotli(e) => Ok(e.into_inner()),
            Encoder::Zstd(e) => e.finish(),
        }
    }
}

/// Compresses a whole body at once.
pub fn compress(coding: Coding, level: u32, data: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut e = Encoder::new(coding, level, Some(data.len() as u64))?;
    e.write(data)?;
    let mut out = e.take();
    out.extend_from_slice(&e.finish()?);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn decode(c: Coding, data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        match c {
            Coding::Gzip => {
                flate2::read::GzDecoder::new(data)
                    .read_to_end(&mut out)
                    .unwrap();
            }
            Coding::Brotli => {
                brotli::Decompressor::new(data, 4096)
                    .read_to_end(&mut out)
                    .unwrap();
            }
            Coding::Zstd => out = zstd::stream::decode_all(data).unwrap(),
        }
        out
    }

    /// Streamed in pieces with flushes between some of them, each coding decodes to the
    /// input, and the flushes do make the bytes so far decodable.
    #[test]
    fn streaming_round_trips() {
        let text: Vec<u8> = (0..200_000u32)
            .flat_map(|i| format!("line {i} of a page that compresses\n").into_bytes())
            .take(300_000)
            .collect();
        for c in [Coding::Gzip, Coding::Brotli, Coding::Zstd] {
            let mut e = Encoder::new(c, 4, None).unwrap();
            let mut out = Vec::new();
            for (i, piece) in text.chunks(7_000).enumerate() {
                e.write(piece).unwrap();
                if i % 5 == 0 {
                    e.flush().unwrap();
                }
                out.extend_from_slice(&e.take());
            }
            out.extend_from_slice(&e.finish().unwrap());
            assert!(out.len() < text.len() / 4, "{c:?}: {}", out.len());
            assert_eq!(decode(c, &out), text, "{c:?}");
            assert_eq!(decode(c, &compress(c, 5, b"hi").unwrap()), b"hi");
        }
    }
}
