//! The TLS transport of an upstream connection: every write is encrypted at once (a request
//! head, a body chunk: one record each), so no sealing step is needed after callbacks; what
//! arrives is decrypted in the zone before the exchange sees it.

use ringx_engine::{ConnId, Io};
use ringx_tls::client::TlsUpConn;

pub struct TlsUpTransport {
    pub conn: TlsUpConn,
    /// Plaintext staged through `out_buf`, encrypted by the next write or seal.
    pub staged: Vec<u8>,
    /// Plaintext bytes written so far.
    pub written: u64,
}

impl TlsUpTransport {
    pub fn new(conn: TlsUpConn) -> TlsUpTransport {
        TlsUpTransport {
            conn,
            staged: Vec::new(),
            written: 0,
        }
    }

    pub fn write(&mut self, io: &mut Io, u: ConnId, data: &[u8]) {
        let Some(out) = io.out_buf(u) else { return };
        if !self.staged.is_empty() {
            self.written += self.staged.len() as u64;
            self.conn.write(&self.staged, out);
            self.staged.clear();
        }
        self.written += data.len() as u64;
        self.conn.write(data, out);
    }

    pub fn seal(&mut self, io: &mut Io, u: ConnId) {
        if !self.staged.is_empty() {
            self.write(io, u, &[]);
        }
    }

    pub fn close_notify(&mut self, io: &mut Io, u: ConnId) {
        self.seal(io, u);
        if let Some(out) = io.out_buf(u) {
            self.conn.close_notify(out);
        }
    }
}
