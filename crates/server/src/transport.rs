//! Transports: how a connection's bytes reach the wire, under whatever role the connection
//! plays.
//!
//! Roles never call [`Io`]'s output methods for a connection directly: they go through the
//! connection's [`Transport`], which today is [`Transport::Plain`] — every method is the
//! engine's own call, inlined, so a plain connection costs exactly what it did before
//! transports existed.
//!
//! **How TLS slots in.** A `Tls` variant holds the rustls connection (sans-I/O, driven on
//! the zone's own buffers). The zone feeds what arrives to rustls before it dispatches, and
//! hands the role the plaintext; [`out_buf`](Transport::out_buf) returns a plaintext staging buffer
//! instead of the socket's output; after each callback the zone seals what was staged on the
//! connections the callback wrote to (a `seal` method: encrypt into the engine's output).
//! `send_file` reads the file through the page cache into the staging buffer (or, with kTLS,
//! hands the record layer to the kernel and becomes the plain call again). The roles above
//! do not change: they write plaintext, they receive plaintext.

use std::fs::File;
use std::rc::Rc;

use ringx_engine::{ConnId, Io};

/// The byte layer under a connection's role.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// TCP as it is.
    #[default]
    Plain,
}

impl Transport {
    /// The buffer at the tail of the connection's output, to serialise into (`None`: the
    /// connection is closing).
    #[inline]
    pub fn out_buf<'a>(&'a mut self, io: &'a mut Io, c: ConnId) -> Option<&'a mut Vec<u8>> {
        match self {
            Transport::Plain => io.out_buf(c),
        }
    }

    /// Appends bytes to the connection's output.
    #[inline]
    pub fn write(&mut self, io: &mut Io, c: ConnId, data: &[u8]) {
        match self {
            Transport::Plain => io.write(c, data),
        }
    }

    /// Queues `len` bytes of `file` from `off` behind what is queued.
    #[inline]
    pub fn send_file(&mut self, io: &mut Io, c: ConnId, file: Rc<File>, off: u64, len: u64) {
        match self {
            Transport::Plain => io.send_file(c, file, off, len),
        }
    }

    /// Bytes queued and not yet written (back-pressure decisions).
    #[inline]
    pub fn pending(&self, io: &Io, c: ConnId) -> u64 {
        match self {
            Transport::Plain => io.pending(c),
        }
    }

    /// Closes the connection once everything queued has been written.
    #[inline]
    pub fn close_after_flush(&mut self, io: &mut Io, c: ConnId) {
        match self {
            Transport::Plain => io.close_after_flush(c),
        }
    }

    /// Ends the write side (FIN) once everything queued has been written.
    #[inline]
    pub fn shutdown_after_flush(&mut self, io: &mut Io, c: ConnId) {
        match self {
            Transport::Plain => io.shutdown_after_flush(c),
        }
    }
}
