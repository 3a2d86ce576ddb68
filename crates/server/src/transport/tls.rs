//! The TLS transport: a [`TlsConn`] under a client connection's role, with the output that
//! must keep its order behind it (plaintext the role wrote, file ranges it queued).
//!
//! Roles write plaintext into [`TlsTransport::staged`] (what `out_buf` hands them); the zone
//! seals after each callback. A file range is read from the page cache one record at a time
//! (`pread`, as nginx does without `aio`), straight into the output buffer where its record
//! goes and sealed there ([`ringx_tls::TlsConn::seal_file`]), and queued only while less than
//! [`WINDOW`] bytes wait in the connection's output, so a large download holds a bounded
//! amount of memory; the rest follows each time the output drains.
//!
//! **Kernel TLS.** When the handshake ends and the kernel is to seal the connection's
//! records, the zone queues the `tls` ULP and the `TLS_TX` keys behind the handshake's last
//! bytes ([`TlsTransport::hand_over`]). From then on the sealing step after each callback
//! hands the role's output to the engine as it is (the staged bytes by swapping vectors,
//! files as files: `sendfile` and splice); what TLS itself still sends (close_notify, a
//! KeyUpdate and its new keys) goes as records of their type (`Io::send_tls_record`) and
//! socket options, in order. Records from the client are still opened here. The roles'
//! calls stay those of a TLS connection, so `Transport`'s dispatch, which a plain
//! connection's calls go through, is what it was before kernel TLS.

use std::collections::VecDeque;
use std::fs::File;
use std::rc::Rc;

use ringx_engine::{ConnId, Io};
use ringx_tls::ktls::{self, Support};
use ringx_tls::{KernelOut, Provider, TlsConn};

/// Encrypted bytes a connection may have queued before file pieces wait for the socket.
pub const WINDOW: u64 = 256 * 1024;
/// One read of a file range: one record's plaintext.
const PIECE: usize = ringx_tls::record::MAX_PLAIN;

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
    /// Closed without close_notify, as a reset: what was sent is incomplete.
    Abort,
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
    /// The server whose TLS settings the handshake used (by SNI, or the listener's default):
    /// a request routed by `Host` to another is checked by `Routes::misdirected`.
    pub server: usize,
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
    /// The kernel seals this connection's records (kTLS): [`TlsTransport::seal`] hands the
    /// output to the engine as it is.
    pub kernel: bool,
    /// Plaintext bytes encrypted so far (or handed to the kernel to seal).
    pub sealed: u64,
    /// The handshake is in the zone's queue of those waiting for the budget.
    pub queued: bool,
}

impl TlsTransport {
    /// Records sealed with `provider`'s AEADs, or by the kernel for the ciphers in `ktls`.
    pub fn new(provider: Provider, ktls: Option<Support>) -> TlsTransport {
        TlsTransport {
            conn: TlsConn::new(provider, ktls),
            queue: VecDeque::new(),
            end: End::Open,
            notify: false,
            info: None,
            plain: false,
            kernel: false,
            sealed: 0,
            queued: false,
        }
    }

    /// The handshake has just ended: if the kernel is to seal the records, queues its keys
    /// behind what is queued (the handshake's last flight, session tickets). True if it
    /// took over.
    pub fn hand_over(&mut self, io: &mut Io, c: ConnId) -> bool {
        let Some(keys) = self.conn.take_kernel_tx() else {
            return false;
        };
        io.set_sockopt(c, libc::SOL_TCP, ktls::TCP_ULP, b"tls".to_vec());
        io.set_sockopt(c, ktls::SOL_TLS, ktls::TLS_TX, keys.into_bytes());
        self.kernel = true;
        true
    }

    /// What TLS still sends while the kernel seals, in order with the role's output.
    fn kernel_out(&mut self, io: &mut Io, c: ConnId) {
        for k in self.conn.take_kernel_out() {
            match k {
                KernelOut::Record(typ, data) => io.send_tls_record(c, typ, &data),
                KernelOut::TxKeys(keys) => {
                    io.set_sockopt(c, ktls::SOL_TLS, ktls::TLS_TX, keys.into_bytes())
                }
            }
        }
    }

    /// The role's output buffer: the connection's own while the kernel seals, else the
    /// staging buffer (`None`: the connection is closing).
    /// While the kernel seals: hands what the role queued to the engine as it is (the staged
    /// bytes by swapping vectors where the output's tail is empty, files as files, so they
    /// go by sendfile or splice), then what TLS itself must send, then the end asked for.
    fn seal_kernel(&mut self, io: &mut Io, c: ConnId) {
        while let Some(p) = self.queue.pop_front() {
            match p {
                Piece::Bytes(b) => {
                    self.sealed += b.len() as u64;
                    io.write(c, &b);
                }
                Piece::File { file, off, end } => {
                    self.sealed += end - off;
                    io.send_file(c, file, off, end - off);
                }
            }
        }
        if !self.conn.staged.is_empty() {
            self.sealed += self.conn.staged.len() as u64;
            match io.out_buf(c) {
                Some(out) if out.is_empty() => std::mem::swap(out, &mut self.conn.staged),
                Some(out) => {
                    out.extend_from_slice(&self.conn.staged);
                    self.conn.staged.clear();
                }
                None => self.conn.staged.clear(),
            }
        }
        match self.end {
            End::Open | End::Abort => {}
            End::Close | End::Shutdown => {
                let mut none = Vec::new();
                self.conn.close_notify(&mut none);
            }
        }
        self.kernel_out(io, c);
        match self.end {
            End::Open if self.notify => io.notify_when_flushed(c),
            End::Open => {}
            End::Close => io.close_after_flush(c),
            End::Shutdown => io.shutdown_after_flush(c),
            End::Abort => io.reset_after_flush(c),
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

    /// Ends the connection without close_notify once what is queued is sealed and written.
    pub fn abort_after_flush(&mut self) {
        self.end = End::Abort;
    }

    pub fn shutdown_after_flush(&mut self) {
        if self.end == End::Open {
            self.end = End::Shutdown;
        }
    }

    /// Encrypts what can go now into the connection's output, and ends the connection when
    /// asked and everything is out.
    pub fn seal(&mut self, io: &mut Io, c: ConnId) {
        if self.kernel {
            return self.seal_kernel(io, c);
        }
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
                    let pending = io.pending(c);
                    if *off < *end && pending < WINDOW {
                        // Room for what this round seals, records and all, so the buffer
                        // grows once rather than doubling under the records.
                        let round = (*end - *off).min(WINDOW - pending) as usize;
                        let Some(out) = io.out_buf(c) else { return };
                        out.reserve(round + round.div_ceil(PIECE) * 32);
                    }
                    while *off < *end && io.pending(c) < WINDOW {
                        let n = ((*end - *off) as usize).min(PIECE);
                        let Some(out) = io.out_buf(c) else { return };
                        // Nothing is staged here (`seal` set it aside), so `seal_file`
                        // seals only the file's piece.
                        match self.conn.seal_file(file, *off, n, out) {
                            Ok(got) if got > 0 => {
                                *off += got as u64;
                                self.sealed += got as u64;
                            }
                            _ => {
                                // The file shrank or failed under us: its length was
                                // promised in the head, so the connection cannot go on.
                                self.queue.clear();
                                io.close(c);
                                return;
                            }
                        }
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
            End::Abort => {
                self.conn.seal(out);
                io.reset_after_flush(c);
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
        TlsTransport::new(Provider::default(), None)
    }
}
