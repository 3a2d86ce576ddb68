//! One connection's side of [`Io`](crate::io::Io): its queue of output (bytes, file ranges,
//! control operations such as kTLS records), what happens once the queue is empty (close,
//! shutdown, a flush notification), and its state as the drivers and the handler see it.

use std::collections::VecDeque;
use std::fs::File;
use std::io;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::rc::Rc;

/// One piece of queued output. The front chunk may be owned by an in-flight operation: it is
/// neither moved nor mutated until that operation's completion arrives.
pub(crate) enum Chunk {
    Bytes { buf: Vec<u8>, pos: usize },
    File { file: Rc<File>, off: u64, end: u64 },
}

/// A socket option or a kernel TLS record ([`Io::set_sockopt`], [`Io::send_tls_record`]),
/// carried out once the output queued before it has been written.
///
/// These are kept beside the output queue, not in it, so that the chunk matches every send
/// makes stay two-way: a plain connection's sends cost what they did before kernel TLS. The
/// order is kept by position ([`ConnIo::ctl`]) and by a chunk boundary (a control operation
/// ends the bytes chunk before it, so nothing written after it is sent with those bytes).
pub(crate) enum Ctl {
    /// A socket option.
    SockOpt(SockOpt),
    /// Bytes sent as one kernel TLS record of a content type. Boxed: io_uring's `SENDMSG`
    /// holds pointers into the record (its `msghdr`, `iovec` and control message) until its
    /// completion, and the queue moves its elements when it grows.
    TlsRecord(Box<crate::tls_record::TlsRecord>),
}

/// A socket option queued behind a connection's output. Its value may be key material
/// (kernel TLS's `TLS_TX` holds the traffic key and IV): it is wiped when the operation is
/// dropped, whether the kernel took it or the connection closed first.
pub(crate) struct SockOpt {
    pub level: i32,
    pub name: i32,
    pub value: Vec<u8>,
}

impl Drop for SockOpt {
    fn drop(&mut self) {
        zeroize::Zeroize::zeroize(&mut self.value);
    }
}

impl SockOpt {
    /// What a failure says: which option, and the kernel's answer.
    pub(crate) fn error(&self, e: io::Error) -> io::Error {
        io::Error::new(
            e.kind(),
            format!(
                "setsockopt(level {}, option {}): {e}",
                self.level, self.name
            ),
        )
    }
}

impl Chunk {
    /// A bytes chunk with nothing left to send. (A file chunk whose offset reached its end
    /// may still have bytes in the splice pipe, so it never counts as empty here.)
    pub(crate) fn is_empty_bytes(&self) -> bool {
        matches!(self, Chunk::Bytes { buf, pos } if *pos == buf.len())
    }

    pub(crate) fn remaining(&self) -> u64 {
        match self {
            Chunk::Bytes { buf, pos } => (buf.len() - pos) as u64,
            Chunk::File { off, end, .. } => end - off,
        }
    }
}

/// What to do once every queued byte has been written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AfterFlush {
    Nothing,
    ShutdownWrite,
    Close,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ConnState {
    /// No connection in this slot.
    Free,
    Open,
    /// An outbound connection whose connect has not completed: output may be queued, nothing
    /// is sent or received yet.
    Connecting,
    /// Close requested; the driver is cancelling operations and closing the descriptor.
    /// The handle is not reused until `on_closed` has been delivered.
    Closing,
}

/// Per-connection state shared by every driver: what the handler's calls on [`Io`] read and
/// write. What only one driver needs stays in that driver, in its own table indexed by the
/// same handle (io_uring: `uring/conn.rs`; epoll: its interest bits).
pub(crate) struct ConnIo {
    pub gen: u32,
    pub state: ConnState,
    pub out: VecDeque<Chunk>,
    /// An operation that reads `out.front()` is in flight.
    pub in_flight: bool,
    pub after_flush: AfterFlush,
    pub notify_flushed: bool,
    pub paused: bool,
    /// The most one receive takes before the handler can pause it ([`Io::limit_recv`]; 0:
    /// the driver's own).
    pub recv_limit: u32,
    pub eof: bool,
    /// The peer will send nothing more ([`Io::peer_done`]).
    pub peer_done: bool,
    pub dirty: bool,
    pub close_err: Option<io::Error>,
    /// The peer's address: the upstream for outbound connections; for accepted ones when the
    /// zone asked for peer addresses.
    pub peer: Option<SocketAddr>,
    /// Set for connections opened with [`Io::connect`].
    pub outbound: Option<Outbound>,
    /// A connected datagram socket ([`ConnectTo::datagram`]): output goes by
    /// [`Io::send_datagram`], one datagram per call, never through `out`.
    pub dgram: bool,
    /// Bytes taken off the output queue since the connection opened: written to the socket,
    /// or handed to the kernel on their way there (io_uring's splice pipe, whose bytes a
    /// close that drops them takes back off). [`Io::bytes_out`] is this plus what is queued.
    pub sent: u64,
    /// Control operations, each with the value `sent` must reach before it is carried out
    /// (the output queued before it). `None` on almost every connection.
    // Boxed so that the field costs every connection one word, not a VecDeque's four: only
    // kTLS connections have control operations.
    #[allow(clippy::box_collection)]
    pub ctl: Option<Box<VecDeque<(u64, Ctl)>>>,
}

/// What an outbound connection keeps beside its handle.
pub(crate) struct Outbound {
    /// The ordinary descriptor (io_uring: also installed as the direct descriptor, kept so
    /// socket options can still be read; epoll: moved into the driver at connect; the test
    /// driver: none).
    pub fd: Option<OwnedFd>,
    /// The peer address, boxed: the kernel reads it while the connect is in flight.
    pub sa: Box<socket2::SockAddr>,
}

impl ConnIo {
    pub(crate) fn new() -> Self {
        ConnIo {
            gen: 0,
            state: ConnState::Free,
            out: VecDeque::new(),
            in_flight: false,
            after_flush: AfterFlush::Nothing,
            notify_flushed: false,
            paused: false,
            recv_limit: 0,
            eof: false,
            peer_done: false,
            dirty: false,
            close_err: None,
            peer: None,
            outbound: None,
            dgram: false,
            sent: 0,
            ctl: None,
        }
    }

    /// Resets for a new connection in this slot.
    pub(crate) fn open(&mut self) {
        self.gen = crate::slot::next_gen(self.gen);
        self.state = ConnState::Open;
        debug_assert!(self.out.is_empty() && !self.in_flight);
        self.after_flush = AfterFlush::Nothing;
        self.notify_flushed = false;
        self.paused = false;
        self.recv_limit = 0;
        self.eof = false;
        self.peer_done = false;
        self.dirty = false;
        self.close_err = None;
        self.peer = None;
        self.dgram = false;
        self.sent = 0;
        if self.ctl.is_some() {
            // Checked first: dropping a `None` in place is an out-of-line call per accept.
            self.ctl = None;
        }
    }

    /// Drops queued output that no operation owns.
    pub(crate) fn drop_unsent(&mut self) {
        let keep = usize::from(self.in_flight);
        while self.out.len() > keep {
            self.out.pop_back();
        }
    }

    /// Whether a flush of this connection has anything to do: output queued, an action that
    /// waits for the queue to drain (close, shutdown), or a flush notification. A keep-alive
    /// response that went out whole leaves none. (The io_uring driver adds its own reason,
    /// the descriptor a file send held: `uring/conn.rs`.)
    pub(crate) fn flush_has_work(&self) -> bool {
        !self.out.is_empty()
            || !matches!(self.after_flush, AfterFlush::Nothing)
            || self.notify_flushed
            || self.ctl.is_some()
    }

    /// Whether the first control operation's turn has come: everything queued before it has
    /// left the output queue. (io_uring also waits for its splice pipe to drain.)
    pub(crate) fn ctl_due(&self) -> bool {
        self.ctl
            .as_ref()
            .and_then(|q| q.front())
            .is_some_and(|(at, _)| *at <= self.sent)
    }

    /// The first control operation (its turn has come: [`ConnIo::ctl_due`]).
    pub(crate) fn ctl_front(&mut self) -> Option<&mut Ctl> {
        self.ctl.as_mut()?.front_mut().map(|(_, op)| op)
    }

    /// The first control operation is done.
    pub(crate) fn ctl_pop(&mut self) {
        if let Some(q) = self.ctl.as_mut() {
            q.pop_front();
            if q.is_empty() {
                self.ctl = None;
            }
        }
    }

    /// The front chunk was written completely: pop it, and give its vector to the zone's pool
    /// of spare output vectors (`Io::spares`) for the next response, whichever connection it
    /// is for.
    pub(crate) fn pop_front(&mut self, spares: &mut Vec<Vec<u8>>) {
        if let Some(Chunk::Bytes { mut buf, .. }) = self.out.pop_front() {
            if spares.len() < MAX_SPARES && buf.capacity() <= MAX_SPARE {
                buf.clear();
                spares.push(buf);
            }
        }
    }

    /// Drops output buffers at the front that the handler asked for (`Io::out_buf`) but left
    /// empty, so no driver ever issues a zero-length send.
    pub(crate) fn skip_empty_front(&mut self, spares: &mut Vec<Vec<u8>>) {
        while self.out.front().is_some_and(Chunk::is_empty_bytes) {
            self.pop_front(spares);
        }
    }

    /// Records that `n` bytes of the front chunk were written; true if it is now done.
    pub(crate) fn advance(&mut self, n: u64) -> bool {
        match self.out.front_mut() {
            Some(Chunk::Bytes { buf, pos }) => {
                *pos += n as usize;
                *pos == buf.len()
            }
            Some(Chunk::File { off, end, .. }) => {
                *off += n;
                *off == *end
            }
            None => true,
        }
    }
}

/// Output vectors larger than this are freed rather than kept for reuse.
const MAX_SPARE: usize = 64 * 1024;
/// Spare output vectors a zone keeps. They are taken last-in first-out, so the next response
/// is written into memory the last send has just read: with hundreds of connections, one
/// spare vector per connection would mean a cold vector for every response.
const MAX_SPARES: usize = 64;
