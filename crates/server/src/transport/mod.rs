//! Transports: how a connection's bytes reach the wire, under whatever role the connection
//! plays.
//!
//! Roles never call [`Io`]'s output methods for a connection directly: they go through the
//! connection's [`Transport`], which today is [`Transport::Plain`] — every method is the
//! engine's own call, inlined, so a plain connection costs exactly what it did before
//! transports existed.
//!
//! **TLS** ([`tls`]): a [`Transport::Tls`] connection's role writes plaintext into a staging
//! buffer (what [`out_buf`](Transport::out_buf) returns) and the zone seals it after each
//! callback ([`Transport::seal`]); what arrives is decrypted before the role sees it. Once
//! the kernel seals a connection's records (kTLS) the same step hands the output to the
//! engine as it is. A plain connection pays one compare of the variant per call, which the
//! instruction counts of `bench/instructions.py` show.

use std::fs::File;
use std::rc::Rc;

use ringx_engine::{ConnId, Io};

pub mod mem;
pub mod tls;
pub mod tls_up;

pub use mem::MemOut;

use crate::response::Fields;
pub use tls::{TlsInfo, TlsTransport};
pub use tls_up::TlsUpTransport;

/// The byte layer under a connection's role.
#[derive(Default)]
pub enum Transport {
    /// TCP as it is.
    #[default]
    Plain,
    Tls(Box<TlsTransport>),
    /// TLS to an upstream (an outbound connection).
    TlsUp(Box<TlsUpTransport>),
    /// An HTTP/2 stream's proxied exchange: held for the HTTP/2 role to frame (`mem.rs`).
    Mem(Box<MemOut>),
    /// A QUIC connection's TLS, as the pipeline sees a client's (`$https`, the server its
    /// SNI chose): nothing is written through it, the HTTP/3 role sends on its streams.
    Quic(Box<TlsInfo>),
}

impl Transport {
    /// The buffer at the tail of the connection's output, to serialise into (`None`: the
    /// connection is closing).
    #[inline]
    pub fn out_buf<'a>(&'a mut self, io: &'a mut Io, c: ConnId) -> Option<&'a mut Vec<u8>> {
        match self {
            Transport::Plain => io.out_buf(c),
            Transport::Tls(t) => {
                io.out_buf(c)?;
                Some(&mut t.conn.staged)
            }
            Transport::TlsUp(t) => {
                io.out_buf(c)?;
                Some(&mut t.staged)
            }
            Transport::Mem(m) => Some(&mut m.buf),
            Transport::Quic(_) => None,
        }
    }

    /// Where a response head for this connection's client is written as fields, not text:
    /// an HTTP/2 stream's exchange (`Transport::Mem`); None for a socket.
    pub fn head_fields(&mut self) -> Option<&mut Fields> {
        match self {
            Transport::Mem(m) => Some(m.head.get_or_insert_with(Box::default)),
            _ => None,
        }
    }

    /// Appends bytes to the connection's output.
    #[inline]
    pub fn write(&mut self, io: &mut Io, c: ConnId, data: &[u8]) {
        match self {
            Transport::Plain => io.write(c, data),
            Transport::Tls(t) => t.conn.staged.extend_from_slice(data),
            Transport::TlsUp(t) => t.write(io, c, data),
            Transport::Mem(m) => m.buf.extend_from_slice(data),
            Transport::Quic(_) => {}
        }
    }

    /// Queues `len` bytes of `file` from `off` behind what is queued.
    #[inline]
    pub fn send_file(&mut self, io: &mut Io, c: ConnId, file: Rc<File>, off: u64, len: u64) {
        match self {
            Transport::Plain => io.send_file(c, file, off, len),
            Transport::Tls(t) => t.send_file(file, off, len),
            // Nothing sends a file to an upstream, or through an exchange.
            Transport::TlsUp(_) | Transport::Mem(_) => io.close(c),
            Transport::Quic(_) => {}
        }
    }

    /// Bytes queued and not yet written (back-pressure decisions).
    #[inline]
    pub fn pending(&self, io: &Io, c: ConnId) -> u64 {
        match self {
            Transport::Plain => io.pending(c),
            Transport::Tls(t) => io.pending(c) + t.unsealed(),
            Transport::TlsUp(t) => io.pending(c) + t.staged.len() as u64,
            Transport::Mem(m) => m.pending().len() as u64,
            Transport::Quic(_) => 0,
        }
    }

    /// The output above which a relayed response stops reading from its upstream, where
    /// this transport sets its own ([`MemOut::high_water`]); else `default`.
    pub fn high_water(&self, default: u64) -> u64 {
        match self {
            Transport::Mem(m) => m.high_water.unwrap_or(default),
            _ => default,
        }
    }

    /// Closes the connection once everything queued has been written.
    #[inline]
    pub fn close_after_flush(&mut self, io: &mut Io, c: ConnId) {
        match self {
            Transport::Plain => io.close_after_flush(c),
            Transport::Tls(t) if t.plain => io.close_after_flush(c),
            Transport::Tls(t) => t.close_after_flush(),
            Transport::TlsUp(t) => {
                t.close_notify(io, c);
                io.close_after_flush(c)
            }
            // The stream's end is the HTTP/2 (HTTP/3) role's to send.
            Transport::Mem(_) | Transport::Quic(_) => {}
        }
    }

    /// Ends the connection as an abort once everything queued has been written: a reset
    /// (`SO_LINGER` 0, where the driver can set it in order) and, over TLS, no close_notify,
    /// so that a client can tell a response cut short (a close-delimited body, a failed
    /// upstream mid-body) from one that ended.
    pub fn abort_after_flush(&mut self, io: &mut Io, c: ConnId) {
        match self {
            Transport::Plain => io.reset_after_flush(c),
            Transport::Tls(t) if t.plain => io.reset_after_flush(c),
            Transport::Tls(t) => t.abort_after_flush(),
            Transport::TlsUp(_) => io.close(c),
            Transport::Mem(_) | Transport::Quic(_) => {}
        }
    }

    /// Ends the write side (FIN) once everything queued has been written.
    #[inline]
    pub fn shutdown_after_flush(&mut self, io: &mut Io, c: ConnId) {
        match self {
            Transport::Plain => io.shutdown_after_flush(c),
            Transport::Tls(t) if t.plain => io.shutdown_after_flush(c),
            Transport::Tls(t) => t.shutdown_after_flush(),
            Transport::TlsUp(t) => {
                t.close_notify(io, c);
                io.shutdown_after_flush(c)
            }
            Transport::Mem(_) | Transport::Quic(_) => {}
        }
    }

    /// Asks for the role's `on_flushed` once everything it queued is written.
    #[inline]
    pub fn notify_when_flushed(&mut self, io: &mut Io, c: ConnId) {
        match self {
            Transport::Tls(t) => t.notify = true,
            Transport::Mem(m) => return m.notify = true,
            Transport::Quic(_) => return,
            _ => {}
        }
        io.notify_when_flushed(c);
    }

    /// Encrypts what the role queued (TLS; nothing to do on a plain connection).
    #[inline]
    pub fn seal(&mut self, io: &mut Io, c: ConnId) {
        match self {
            Transport::Plain | Transport::Mem(_) | Transport::Quic(_) => {}
            Transport::Tls(t) => t.seal(io, c),
            Transport::TlsUp(t) => t.seal(io, c),
        }
    }

    /// Bytes the role wrote so far, written or queued (over TLS: plaintext, as nginx's
    /// `$bytes_sent` counts them).
    #[inline]
    pub fn bytes_out(&self, io: &Io, c: ConnId) -> u64 {
        match self {
            Transport::Plain => io.bytes_out(c),
            Transport::Tls(t) if t.plain => io.bytes_out(c),
            Transport::Tls(t) => t.sealed + t.unsealed(),
            Transport::TlsUp(t) => t.written + t.staged.len() as u64,
            Transport::Mem(m) => m.written + m.pending().len() as u64,
            Transport::Quic(_) => 0,
        }
    }

    /// Whether the connection is TLS.
    #[inline]
    pub fn is_tls(&self) -> bool {
        matches!(self, Transport::Tls(_) | Transport::Quic(_))
    }

    /// For a TLS upstream connection, whether the server's close_notify has arrived (None:
    /// not one).
    pub fn tls_closed(&self) -> Option<bool> {
        match self {
            Transport::TlsUp(t) => Some(t.conn.closed),
            Transport::Plain | Transport::Tls(_) | Transport::Mem(_) | Transport::Quic(_) => None,
        }
    }

    /// What the TLS handshake agreed (None: plain, or still handshaking).
    pub fn tls_info(&self) -> Option<&TlsInfo> {
        match self {
            Transport::Tls(t) => t.info.as_deref(),
            Transport::Quic(i) => Some(i),
            Transport::Plain | Transport::TlsUp(_) | Transport::Mem(_) => None,
        }
    }
}
