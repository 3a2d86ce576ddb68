//! A stream's locally made response body waiting for the peer's window: bytes, a part of a
//! file (sent by `send_file` behind each frame header, never through memory), and a static
//! file compressed as the window takes it. The protocol frames what [`Pieces::write`] sends.

use std::collections::VecDeque;
use std::fs::File;
use std::rc::Rc;

use ringx_engine::ConnId;

use crate::compress::file_encoder::FileEncoder;
use crate::ctx::Cx;
use crate::transport::Transport;

/// Part of a response body waiting for the window.
pub(crate) enum Piece {
    /// Bytes, from an offset.
    Bytes(Vec<u8>, usize),
    File(Rc<File>, u64, u64),
    /// A static file compressed as it goes.
    Compress(Box<Squeeze>),
}

impl Piece {
    /// Bytes ready to go (for `Compress`, what the last piece of the file made).
    fn len(&self) -> u64 {
        match self {
            Piece::Bytes(b, at) => (b.len() - at) as u64,
            Piece::File(_, off, end) => end - off,
            Piece::Compress(z) => (z.buf.len() - z.at) as u64,
        }
    }

    /// More of it is still to be made.
    fn unfinished(&self) -> bool {
        matches!(self, Piece::Compress(z) if !z.done)
    }
}

/// A static file too large to compress whole, compressed as the peer's window takes it
/// ([`FileEncoder`]): the next piece of the file is read and compressed only once what the last
/// one made has gone out and the stream's window is open, so a stream holds the encoder and
/// one piece's output, and a peer that grants no window gets nothing more read.
pub(crate) struct Squeeze {
    file: Box<FileEncoder>,
    buf: Vec<u8>,
    at: usize,
    /// The encoder's end is in `buf`.
    done: bool,
}

impl Squeeze {
    pub fn new(file: Box<FileEncoder>) -> Squeeze {
        Squeeze {
            file,
            buf: Vec::new(),
            at: 0,
            done: false,
        }
    }

    /// Compresses pieces of the file until some output is ready or the body is complete.
    fn refill(&mut self) -> std::io::Result<()> {
        self.buf.clear();
        self.at = 0;
        let buf = &mut self.buf;
        while buf.is_empty() && !self.done {
            self.done = self.file.step(&mut |d| buf.extend_from_slice(d))?;
        }
        Ok(())
    }
}

/// The body's pieces, in order.
#[derive(Default)]
pub(crate) struct Pieces(VecDeque<Piece>);

impl Pieces {
    pub fn push(&mut self, p: Piece) {
        self.0.push_back(p);
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Makes the front piece ready to send: a file being compressed makes its next piece
    /// once the last one went, and only when the window is `open`. Ok(false): it waits for
    /// the window; Err: the file could not be read (the body cannot be completed).
    pub fn prepare(&mut self, open: bool) -> std::io::Result<bool> {
        if let Some(Piece::Compress(z)) = self.0.front_mut() {
            if z.at == z.buf.len() && !z.done {
                if !open {
                    return Ok(false); // nothing is read before the peer can take it
                }
                z.refill()?;
            }
            if z.done && z.at == z.buf.len() {
                self.0.pop_front();
            }
        }
        Ok(true)
    }

    /// Bytes ready to go, in all pieces.
    pub fn queued(&self) -> u64 {
        self.0.iter().map(Piece::len).sum()
    }

    /// Bytes ready to go in the front piece (what one frame may carry at most).
    pub fn front_len(&self) -> u64 {
        self.0.front().map_or(0, Piece::len)
    }

    /// More of the body is still to be made (a file being compressed).
    pub fn unfinished(&self) -> bool {
        self.0.iter().any(Piece::unfinished)
    }

    /// Writes the next `n` bytes of the front piece to `tr` (at most [`front_len`]).
    ///
    /// [`front_len`]: Pieces::front_len
    pub fn write(&mut self, tr: &mut Transport, cx: &mut Cx, c: ConnId, n: u64) {
        let Some(piece) = self.0.front_mut() else {
            return;
        };
        match piece {
            Piece::Bytes(b, at) => {
                tr.write(cx.io, c, &b[*at..*at + n as usize]);
                *at += n as usize;
            }
            Piece::File(f, off, _) => {
                tr.send_file(cx.io, c, f.clone(), *off, n);
                *off += n;
            }
            Piece::Compress(z) => {
                tr.write(cx.io, c, &z.buf[z.at..z.at + n as usize]);
                z.at += n as usize;
            }
        }
        if piece.len() == 0 && !piece.unfinished() {
            self.0.pop_front();
        }
    }
}
