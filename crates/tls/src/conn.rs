//! One TLS connection, driven sans-I/O: wire bytes in, plaintext out for the role; plaintext
//! staged by the role, sealed into wire bytes. No socket, no thread, no blocking call: the
//! zone feeds what its receive completed and queues what comes out behind the connection's
//! output.
//!
//! The handshake starts in rustls's [`Acceptor`], which reads the ClientHello without any
//! configuration, so the server's settings (certificates, client verification) are picked by
//! SNI before any expensive step. Every expensive step runs under the zone's [`Budget`].

use std::io::{Read, Write};
use std::sync::Arc;
use std::time::Instant;

use rustls::server::{Accepted, Acceptor};
use rustls::{ServerConfig, ServerConnection};

use crate::budget::Budget;

enum State {
    /// Reading the ClientHello.
    Accepting(Box<Acceptor>),
    /// The ClientHello is read; the handshake waits for the budget.
    Accepted(Box<Accepted>),
    Open(Box<ServerConnection>),
    /// Failed or closed: nothing more is read or written.
    Done,
}

/// What a call to [`TlsConn::receive`] left for the caller to do.
#[derive(Debug, PartialEq, Eq)]
pub enum Recv {
    /// Nothing for the role (yet); handshake bytes may be in `out`.
    Handshaking,
    /// [`TlsConn::plain`] holds bytes for the role.
    Data,
    /// The handshake waits for the budget: call [`TlsConn::resume`] later.
    Waiting,
    /// The first bytes are not TLS but look like an HTTP request.
    PlainHttp,
    /// The peer sent close_notify (plaintext before it is in `plain`).
    Closed,
    /// The connection failed; an alert for the peer may be in `out`. Close after writing it.
    Failed(String),
}

/// A server-side TLS connection.
pub struct TlsConn {
    state: State,
    /// Wire bytes not yet given to rustls (while the handshake waits for the budget).
    held: Vec<u8>,
    /// Plaintext received, for the role to take.
    pub plain: Vec<u8>,
    /// Plaintext the role wrote, sealed by [`TlsConn::seal`].
    pub staged: Vec<u8>,
    seen_bytes: bool,
}

impl Default for TlsConn {
    fn default() -> Self {
        TlsConn::new()
    }
}

/// The first byte of a TLS record carrying a handshake message.
const HANDSHAKE_RECORD: u8 = 0x16;

impl TlsConn {
    pub fn new() -> TlsConn {
        TlsConn {
            state: State::Accepting(Box::default()),
            held: Vec::new(),
            plain: Vec::new(),
            staged: Vec::new(),
            seen_bytes: false,
        }
    }

    /// Whether the handshake is still going on.
    pub fn handshaking(&self) -> bool {
        match &self.state {
            State::Accepting(_) | State::Accepted(_) => true,
            State::Open(c) => c.is_handshaking(),
            State::Done => false,
        }
    }

    /// The established connection (protocol, cipher, SNI, client certificate...).
    pub fn session(&self) -> Option<&ServerConnection> {
        match &self.state {
            State::Open(c) if !c.is_handshaking() => Some(c),
            _ => None,
        }
    }

    /// Feeds wire bytes. `config` picks the server's settings by SNI (`None`: there are none
    /// any more, the handshake fails); `out` receives what to send.
    pub fn receive(
        &mut self,
        data: &[u8],
        config: &dyn Fn(Option<&str>) -> Option<Arc<ServerConfig>>,
        budget: &mut Budget,
        now: Instant,
        out: &mut Vec<u8>,
    ) -> Recv {
        if !self.seen_bytes && !data.is_empty() {
            self.seen_bytes = true;
            if data[0] != HANDSHAKE_RECORD && data[0].is_ascii_uppercase() {
                self.state = State::Done;
                return Recv::PlainHttp;
            }
        }
        if !self.held.is_empty() || matches!(self.state, State::Accepted(_)) {
            // Behind bytes that wait for the budget.
            self.held.extend_from_slice(data);
            return self.resume(config, budget, now, out);
        }
        self.pump(data, config, budget, now, out)
    }

    /// Goes on with bytes held while the handshake waited.
    pub fn resume(
        &mut self,
        config: &dyn Fn(Option<&str>) -> Option<Arc<ServerConfig>>,
        budget: &mut Budget,
        now: Instant,
        out: &mut Vec<u8>,
    ) -> Recv {
        // pump puts back what it does not consume when it has to wait again.
        let held = std::mem::take(&mut self.held);
        self.pump(&held, config, budget, now, out)
    }

    fn pump(
        &mut self,
        mut input: &[u8],
        config: &dyn Fn(Option<&str>) -> Option<Arc<ServerConfig>>,
        budget: &mut Budget,
        now: Instant,
        out: &mut Vec<u8>,
    ) -> Recv {
        loop {
            match &mut self.state {
                State::Done => return Recv::Failed("connection already closed".into()),
                State::Accepting(a) => {
                    while !input.is_empty() {
                        if let Err(e) = a.read_tls(&mut input) {
                            self.state = State::Done;
                            return Recv::Failed(format!("reading the ClientHello: {e}"));
                        }
                    }
                    match a.accept() {
                        Ok(None) => return Recv::Handshaking,
                        Ok(Some(acc)) => self.state = State::Accepted(Box::new(acc)),
                        Err((e, mut alert)) => {
                            let _ = alert.write_all(out);
                            self.state = State::Done;
                            return Recv::Failed(format!("bad ClientHello: {e}"));
                        }
                    }
                }
                State::Accepted(_) => {
                    if !budget.admit(now) {
                        self.held.extend_from_slice(input);
                        return Recv::Waiting;
                    }
                    let State::Accepted(acc) = std::mem::replace(&mut self.state, State::Done)
                    else {
                        unreachable!("matched above")
                    };
                    let Some(cfg) = config(acc.client_hello().server_name()) else {
                        // The listener stopped being TLS (a reload) during the handshake.
                        return Recv::Failed("no TLS settings for this listener any more".into());
                    };
                    let t = Instant::now();
                    let r = acc.into_connection(cfg);
                    budget.charge(t.elapsed());
                    match r {
                        Ok(mut c) => {
                            c.set_buffer_limit(None);
                            self.state = State::Open(Box::new(c));
                            if input.is_empty() {
                                self.flush_tls(out);
                                return Recv::Handshaking;
                            }
                        }
                        Err((e, mut alert)) => {
                            let _ = alert.write_all(out);
                            return Recv::Failed(format!("handshake: {e}"));
                        }
                    }
                }
                State::Open(c) => {
                    let hs = c.is_handshaking();
                    if hs && !input.is_empty() && !budget.admit(now) {
                        self.held.extend_from_slice(input);
                        return Recv::Waiting;
                    }
                    return self.open_input(input, budget, out);
                }
            }
        }
    }

    fn open_input(&mut self, mut input: &[u8], budget: &mut Budget, out: &mut Vec<u8>) -> Recv {
        let State::Open(c) = &mut self.state else {
            return Recv::Failed("not open".into());
        };
        let mut closed = false;
        while !input.is_empty() {
            if let Err(e) = c.read_tls(&mut input) {
                self.state = State::Done;
                return Recv::Failed(format!("reading records: {e}"));
            }
            let hs = c.is_handshaking();
            let t = hs.then(Instant::now);
            let st = c.process_new_packets();
            if let Some(t) = t {
                budget.charge(t.elapsed());
            }
            let st = match st {
                Ok(st) => st,
                Err(e) => {
                    // rustls queued the alert that goes with the error.
                    let _ = c.write_tls(out);
                    while c.wants_write() && c.write_tls(out).is_ok() {}
                    self.state = State::Done;
                    return Recv::Failed(e.to_string());
                }
            };
            let n = st.plaintext_bytes_to_read();
            if n > 0 {
                let at = self.plain.len();
                self.plain.resize(at + n, 0);
                if c.reader().read_exact(&mut self.plain[at..]).is_err() {
                    self.plain.truncate(at);
                }
            }
            closed |= st.peer_has_closed();
        }
        self.flush_tls(out);
        if closed {
            Recv::Closed
        } else if !self.plain.is_empty() {
            Recv::Data
        } else {
            Recv::Handshaking
        }
    }

    /// Encrypts what the role staged and appends every pending record to `out`.
    pub fn seal(&mut self, out: &mut Vec<u8>) {
        if let State::Open(c) = &mut self.state {
            if !self.staged.is_empty() {
                // No buffer limit was set: the write takes everything.
                let _ = c.writer().write_all(&self.staged);
                self.staged.clear();
            }
        }
        self.flush_tls(out);
    }

    /// Encrypts `data` (after everything staged) and appends the records to `out`.
    pub fn seal_bytes(&mut self, data: &[u8], out: &mut Vec<u8>) {
        if let State::Open(c) = &mut self.state {
            if !self.staged.is_empty() {
                let _ = c.writer().write_all(&self.staged);
                self.staged.clear();
            }
            let _ = c.writer().write_all(data);
        }
        self.flush_tls(out);
    }

    /// Queues close_notify (after everything sealed before it).
    pub fn close_notify(&mut self, out: &mut Vec<u8>) {
        self.seal(out);
        if let State::Open(c) = &mut self.state {
            c.send_close_notify();
        }
        self.flush_tls(out);
    }

    fn flush_tls(&mut self, out: &mut Vec<u8>) {
        if let State::Open(c) = &mut self.state {
            while c.wants_write() {
                if c.write_tls(out).is_err() {
                    break;
                }
            }
        }
    }

    /// Whether bytes wait for the budget.
    pub fn waiting(&self) -> bool {
        !self.held.is_empty() || matches!(self.state, State::Accepted(_))
    }
}
