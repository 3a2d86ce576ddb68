//! A static file too large to compress whole ([`crate::answer::MAX_COMPRESS_WHOLE`]),
//! compressed as the client takes it: a piece of the file is read and fed to the encoder only
//! when the connection's queued output has drained, so one response holds the encoder's window
//! and one piece, whatever the file's size.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::rc::Rc;

use super::encoder::Encoder;
use super::relay::Relay;
use super::Codec;

/// Bytes of the file read (and compressed) per step.
pub const PIECE: usize = 64 * 1024;

pub struct FileEncoder {
    file: Rc<File>,
    /// Where the next piece starts, and what is left of the length the head was made for.
    off: u64,
    left: u64,
    relay: Relay,
    buf: Vec<u8>,
}

impl FileEncoder {
    /// `len` bytes of `file` from `off`, encoded as `codec` says; `chunked`: framed as chunks
    /// (HTTP/1.1), else delimited by the close.
    pub fn new(
        file: Rc<File>,
        off: u64,
        len: u64,
        codec: &Codec,
        chunked: bool,
    ) -> std::io::Result<FileEncoder> {
        let enc = Encoder::new(codec.coding, codec.level, Some(len))?;
        Ok(FileEncoder {
            file,
            off,
            left: len,
            relay: Relay::new(enc, chunked),
            buf: Vec::new(),
        })
    }

    /// Reads and compresses the next piece, writing what the encoder produced through
    /// `write`; after the last piece, the encoder's end and the last chunk. Returns whether
    /// the body is complete. An error (the file shrank or cannot be read) leaves the body
    /// cut: the connection must close, as the head promised more.
    pub fn step(&mut self, write: &mut dyn FnMut(&[u8])) -> std::io::Result<bool> {
        if self.left > 0 {
            let n = (self.left as usize).min(PIECE);
            self.buf.resize(n, 0);
            self.file.read_exact_at(&mut self.buf, self.off)?;
            self.off += n as u64;
            self.left -= n as u64;
            self.relay.feed(&self.buf, write)?;
        }
        if self.left == 0 {
            self.relay.finish(write)?;
            self.buf = Vec::new();
            return Ok(true);
        }
        Ok(false)
    }

    /// Compressed bytes written so far.
    pub fn sent(&self) -> u64 {
        self.relay.sent
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compress::Coding;
    use std::io::{Read, Write};

    fn codec(coding: Coding) -> Codec {
        Codec {
            coding,
            level: 1,
            min_length: 0,
            types: vec!["*".into()],
        }
    }

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

    fn file_of(data: &[u8]) -> Rc<File> {
        let mut f = tempfile_in_tmp();
        f.write_all(data).unwrap();
        Rc::new(f)
    }

    fn tempfile_in_tmp() -> File {
        let p = std::env::temp_dir().join(format!(
            "ringx-file-stream-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&p)
            .unwrap();
        std::fs::remove_file(&p).unwrap();
        f
    }

    #[test]
    fn a_file_goes_out_compressed_piece_by_piece() {
        let data: Vec<u8> = (0..(3 * PIECE + 123))
            .map(|i| b"ringx streams files "[i % 20] ^ (i / 4096) as u8)
            .collect();
        let f = file_of(&data);
        let mut s = FileEncoder::new(f, 0, data.len() as u64, &codec(Coding::Gzip), true).unwrap();
        let mut out = Vec::new();
        let mut steps = 0;
        while !s.step(&mut |b| out.extend_from_slice(b)).unwrap() {
            steps += 1;
        }
        assert_eq!(steps, 3, "one step per piece, the last one ends the body");
        let mut plain = Vec::new();
        flate2::read::GzDecoder::new(&dechunk(&out)[..])
            .read_to_end(&mut plain)
            .unwrap();
        assert_eq!(plain, data);
        assert!(s.sent() > 0);
    }

    #[test]
    fn a_file_that_shrank_is_an_error() {
        let data = vec![b'a'; 2 * PIECE];
        let f = file_of(&data);
        let mut s = FileEncoder::new(f, 0, 4 * PIECE as u64, &codec(Coding::Zstd), false).unwrap();
        let mut sink = |_: &[u8]| {};
        let mut r = Ok(false);
        for _ in 0..4 {
            r = s.step(&mut sink);
            if r.is_err() {
                break;
            }
        }
        assert!(
            r.is_err(),
            "reading past the end must fail, not end the body"
        );
    }
}
