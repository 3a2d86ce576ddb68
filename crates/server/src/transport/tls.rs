//! The TLS transport: a [`TlsConn`] under a client connection's role, with the output that
//! must keep its order behind it (plaintext the role wrote, file ranges it queued).
//!
//! Roles write plaintext into [`TlsTransport::staged`] (what `out_buf` hands them); the zone
//! seals after each callback. A file range is read from the page cache in 64 KiB pieces
//! (`pread`, as nginx does without `aio`), encrypted, and queued only while less than
//! [`WINDOW`] bytes wait in the connection's output, so a large download holds a bounded
//! amount of memory; the rest follows each time the output drains.

use std::collections::VecDeque;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::rc::Rc;

use ringx_engine::{ConnId, Io};
use ringx_tls::TlsConn;

/// Encrypted bytes a connection may have queued before file pieces wait for the socket.
pub const WINDOW: u64 = 256 * 1024;
/// One read of a file range.
const PIECE: usize = 64 * 1024;

/// What waits behind the staged plaintext, in order.
enum Piece {
    Bytes(Vec<u8>),
    File { file: Rc<File>, off: u64, end: u64 },
}

/// How the connection ends once everything is sealed and written.
#[derive(Clone, Copy, PartialEq, Eq)]
enum End {
    Open,
    Close,
    Shutdown,
}

/// What a finished handshake agreed, for the access log and upstream headers.
#[derive(Debug, Clone)]
pub struct TlsInfo {
    pub protocol: &'static str,
    pub cipher: &'static str,
    pub sni: Option<String>,
    /// The verified client certificate's subject (mTLS).
    pub client_dn: Option<String>,
    /// The server asked for a client certificate.
    pub client_auth: bool,
    pub resumed: bool,
    /// ALPN agreed on `h2`: the connection speaks HTTP/2.
    pub h2: bool,
}

pub struct TlsTransport {
    pub conn: TlsConn,
    queue: VecDeque<Piece>,
    end: End,
    /// The role asked to hear when its output is written.
    pub notify: bool,
    /// The handshake finished and `info` is filled in.
    pub info: Option<Box<TlsInfo>>,
    /// Not TLS after all (plain HTTP on the TLS port): nothing is sealed.
    pub plain: bool,
    /// Scratch for file pieces.
    piece: Vec<u8>,
    /// Plaintext bytes encrypted so far.
    pub sealed: u64,
}

impl TlsTransport {
    pub fn new() -> TlsTransport {
        TlsTransport {
            conn: TlsConn::new(),
            queue: VecDeque::new(),
            end: End::Open,
            notify: false,
            info: None,
            plain: false,
            piece: Vec::new(),
            sealed: 0,
        }
    }

    /// Bytes the role queued that are not encrypted yet.
    pub fn unsealed(&self) -> u64 {
        self.conn.staged.len() as u64
            + self
                .queue
                .iter()
                .map(|p| match p {
                    Piece::Bytes(b) => b.len() as u64,
                    Piece::File { off, end, .. } => end - off,
                })
                .sum::<u64>()
    }

    /// Whether file pieces or bytes behind them still wait.
    pub fn has_queue(&self) -> bool {
        !self.queue.is_empty()
    }

    pub fn send_file(&mut self, file: Rc<File>, off: u64, len: u64) {
        if len == 0 {
            return;
        }
        if !self.conn.staged.is_empty() {
            let staged = std::mem::take(&mut self.conn.staged);
            self.queue.push_back(Piece::Bytes(staged));
        }
        self.queue.push_back(Piece::File {
            file,
            off,
            end: off + len,
        });
    }

    pub fn close_after_flush(&mut self) {
        self.end = End::Close;
    }

    pub fn shutdown_after_flush(&mut self) {
        if self.end == End::Open {
            self.end = End::Shutdown;
        }
    }

    /// Encrypts what can go now into the connection's output, and ends the connection when
    /// asked and everything is out.
    pub fn seal(&mut self, io: &mut Io, c: ConnId) {
        if self.plain {
            return;
        }
        if self.queue.is_empty() {
            return self.seal_staged(io, c);
        }
        // What is staged now was written after everything queued: it waits aside while the
        // queue is sealed (`seal_bytes` would put it first), and goes after it.
        let later = std::mem::take(&mut self.conn.staged);
        self.seal_queue(io, c);
        debug_assert!(self.conn.staged.is_empty());
        self.conn.staged = later;
        if self.queue.is_empty() {
            self.seal_staged(io, c);
        }
    }

    /// Seals queued pieces in order, file pieces while the socket's queue is short.
    fn seal_queue(&mut self, io: &mut Io, c: ConnId) {
        while let Some(front) = self.queue.front_mut() {
            match front {
                Piece::Bytes(b) => {
                    let Some(out) = io.out_buf(c) else { return };
                    self.sealed += b.len() as u64;
                    self.conn.seal_bytes(b, out);
                    self.queue.pop_front();
                }
                Piece::File { file, off, end } => {
                    while *off < *end && io.pending(c) < WINDOW {
                        let n = ((*end - *off) as usize).min(PIECE);
                        self.piece.resize(n, 0);
                        let got = match file.read_at(&mut self.piece[..n], *off) {
                            Ok(0) | Err(_) => {
                                // The file shrank or failed under us: its length was
                                // promised in the head, so the connection cannot go on.
                                self.queue.clear();
                                io.close(c);
                                return;
                            }
                            Ok(got) => got,
                        };
                        *off += got as u64;
                        let Some(out) = io.out_buf(c) else { return };
                        self.sealed += got as u64;
                        self.conn.seal_bytes(&self.piece[..got], out);
                    }
                    if *off < *end {
                        // The rest when the output drains.
                        io.notify_when_flushed(c);
                        return;
                    }
                    self.queue.pop_front();
                }
            }
        }
    }

    /// Seals the staged plaintext (nothing queued waits before it), and ends the
    /// connection when asked.
    fn seal_staged(&mut self, io: &mut Io, c: ConnId) {
        let Some(out) = io.out_buf(c) else { return };
        self.sealed += self.conn.staged.len() as u64;
        match self.end {
            End::Open => {
                self.conn.seal(out);
                if self.notify {
                    // The flush event that drained the queue was the transport's; the role
                    // still waits for its own.
                    io.notify_when_flushed(c);
                }
            }
            End::Close => {
                self.conn.close_notify(out);
                io.close_after_flush(c);
            }
            End::Shutdown => {
                self.conn.close_notify(out);
                io.shutdown_after_flush(c);
            }
        }
    }
}

impl Default for TlsTransport {
    fn default() -> Self {
        TlsTransport::new()
    }
}
