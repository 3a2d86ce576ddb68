//! One TLS connection, driven sans-I/O: wire bytes in, plaintext out for the role; plaintext
//! staged by the role, sealed into wire bytes. No socket, no thread, no blocking call: the
//! zone feeds what its receive completed and queues what comes out behind the connection's
//! output.
//!
//! The handshake starts in rustls's [`Acceptor`], which reads the ClientHello without any
//! configuration, so the server's settings (certificates, client verification) are picked by
//! SNI before any expensive step; the ClientHello is then replayed into an
//! [`UnbufferedServerConnection`] with those settings, under the zone's [`Budget`]. When the
//! handshake is over, rustls hands the traffic keys over
//! (`dangerous_into_kernel_connection`) and the connection's records are sealed and opened by
//! [`crate::record`], in place in the zone's buffers — or, with kernel TLS, sealed by the
//! kernel ([`TlsConn::take_kernel_tx`]).

use std::sync::Arc;
use std::time::Instant;

use rustls::server::{Acceptor, UnbufferedServerConnection};
use rustls::unbuffered::{ConnectionState, EncodeError, EncodeTlsData, InsufficientSizeError};
use rustls::ServerConfig;

use crate::budget::Budget;
use crate::ktls::{CryptoInfo, Support};
use crate::provider::Provider;
use crate::record::Records;
pub use crate::recv::Recv;
use crate::traffic::{KernelOut, Session, Traffic};

enum State {
    /// Reading the ClientHello.
    Accepting(Box<Acceptor>),
    /// The ClientHello is read; the handshake waits for the budget.
    Accepted,
    Handshaking(Box<UnbufferedServerConnection>),
    /// The handshake is over: records in place ([`crate::record`]).
    Traffic(Box<Traffic>),
    /// Failed or closed: nothing more is read or written.
    Done,
}

/// The most a client may send before its handshake ends (unconsumed bytes held by the
/// connection): two flights with a client certificate chain fit many times over.
pub const MAX_HANDSHAKE_INPUT: usize = 128 * 1024;

/// A server-side TLS connection.
pub struct TlsConn {
    state: State,
    /// Wire bytes received and not consumed yet. While the ClientHello is read, all of them:
    /// they are replayed into the connection once SNI has picked its settings.
    incoming: Vec<u8>,
    /// Bytes of `incoming` the acceptor has read.
    fed: usize,
    /// Plaintext received, for the role to take.
    pub plain: Vec<u8>,
    /// Plaintext the role wrote, sealed by [`TlsConn::seal`].
    pub staged: Vec<u8>,
    seen_bytes: bool,
    /// The handshake waits for the budget.
    waiting: bool,
    sni: Option<String>,
    provider: Provider,
    /// The ciphers the kernel can seal (kTLS), when it may take the sending side.
    ktls: Option<Support>,
    /// The kernel's keys for sending, set when the handshake ended with kTLS.
    kernel_tx: Option<CryptoInfo>,
}

impl Default for TlsConn {
    fn default() -> Self {
        TlsConn::new(Provider::default(), None)
    }
}

/// The first byte of a TLS record carrying a handshake message.
const HANDSHAKE_RECORD: u8 = 0x16;

/// What [`TlsConn::handshake`] got to.
enum Step {
    Stop(Recv),
    /// The handshake is over; go on with the records that follow.
    Traffic,
}

impl TlsConn {
    /// A connection whose records are sealed with `provider`'s AEADs, or by the kernel for
    /// the ciphers in `ktls`.
    pub fn new(provider: Provider, ktls: Option<Support>) -> TlsConn {
        TlsConn {
            state: State::Accepting(Box::default()),
            incoming: Vec::new(),
            fed: 0,
            plain: Vec::new(),
            staged: Vec::new(),
            seen_bytes: false,
            waiting: false,
            sni: None,
            provider,
            ktls,
            kernel_tx: None,
        }
    }

    /// Whether the handshake is still going on.
    pub fn handshaking(&self) -> bool {
        matches!(
            self.state,
            State::Accepting(_) | State::Accepted | State::Handshaking(_)
        )
    }

    /// What the finished handshake agreed (protocol, cipher, SNI, client certificate...).
    pub fn session(&self) -> Option<&Session> {
        match &self.state {
            State::Traffic(t) => Some(&t.session),
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
        if matches!(self.state, State::Done) {
            return Recv::Failed("connection already closed".into());
        }
        if self.handshaking() && self.incoming.len() + data.len() > MAX_HANDSHAKE_INPUT {
            // A client's flights are a ClientHello (16 KiB at most here) and a certificate
            // chain with its proof: bytes beyond that while it waits are no handshake.
            self.state = State::Done;
            return Recv::Failed(format!(
                "more than {} KiB received during the handshake",
                MAX_HANDSHAKE_INPUT >> 10
            ));
        }
        self.incoming.extend_from_slice(data);
        self.pump(config, budget, now, out)
    }

    /// Goes on with bytes held while the handshake waited.
    pub fn resume(
        &mut self,
        config: &dyn Fn(Option<&str>) -> Option<Arc<ServerConfig>>,
        budget: &mut Budget,
        now: Instant,
        out: &mut Vec<u8>,
    ) -> Recv {
        self.pump(config, budget, now, out)
    }

    fn pump(
        &mut self,
        config: &dyn Fn(Option<&str>) -> Option<Arc<ServerConfig>>,
        budget: &mut Budget,
        now: Instant,
        out: &mut Vec<u8>,
    ) -> Recv {
        self.waiting = false;
        loop {
            match &mut self.state {
                State::Done => return Recv::Failed("connection already closed".into()),
                State::Accepting(a) => {
                    let mut rd = &self.incoming[self.fed..];
                    while !rd.is_empty() {
                        if let Err(e) = a.read_tls(&mut rd) {
                            self.state = State::Done;
                            return Recv::Failed(format!("reading the ClientHello: {e}"));
                        }
                    }
                    self.fed = self.incoming.len();
                    match a.accept() {
                        Ok(None) => return Recv::Handshaking,
                        Ok(Some(acc)) => {
                            self.sni = acc.client_hello().server_name().map(str::to_string);
                            // The ClientHello itself is replayed from `incoming`.
                            self.state = State::Accepted;
                        }
                        Err((e, mut alert)) => {
                            let _ = alert.write_all(out);
                            self.state = State::Done;
                            return Recv::Failed(format!("bad ClientHello: {e}"));
                        }
                    }
                }
                State::Accepted => {
                    if !budget.admit(now) {
                        self.waiting = true;
                        return Recv::Waiting;
                    }
                    let Some(cfg) = config(self.sni.as_deref()) else {
                        // The listener stopped being TLS (a reload) during the handshake.
                        self.state = State::Done;
                        return Recv::Failed("no TLS settings for this listener any more".into());
                    };
                    let t = Instant::now();
                    let c = UnbufferedServerConnection::new(cfg);
                    budget.charge(t.elapsed());
                    match c {
                        Ok(c) => self.state = State::Handshaking(Box::new(c)),
                        Err(e) => {
                            self.state = State::Done;
                            return Recv::Failed(format!("handshake: {e}"));
                        }
                    }
                }
                State::Handshaking(_) => {
                    if self.incoming.is_empty() {
                        return Recv::Handshaking;
                    }
                    if !budget.admit(now) {
                        self.waiting = true;
                        return Recv::Waiting;
                    }
                    let t = Instant::now();
                    let step = self.handshake(out);
                    budget.charge(t.elapsed());
                    if let Step::Stop(r) = step {
                        return r;
                    }
                }
                State::Traffic(_) => return self.traffic_input(out),
            }
        }
    }

    /// Runs rustls on what arrived until it needs more, writing what it sends to `out`.
    fn handshake(&mut self, out: &mut Vec<u8>) -> Step {
        let TlsConn {
            state,
            incoming,
            plain,
            ..
        } = self;
        let State::Handshaking(c) = state else {
            unreachable!("handshake() in another state")
        };
        let mut at = 0;
        let mut failed = None;
        let mut finished = false;
        loop {
            let st = c.process_tls_records(&mut incoming[at..]);
            let discard = st.discard;
            let mut stop = true;
            match st.state {
                Err(e) => failed = Some(format!("handshake: {e}")),
                Ok(ConnectionState::EncodeTlsData(mut e)) => match encode(&mut e, out) {
                    Ok(()) => stop = false,
                    Err(why) => failed = Some(why),
                },
                Ok(ConnectionState::TransmitTlsData(t)) => {
                    // What was encoded is in `out`, which the zone sends after this call.
                    t.done();
                    stop = false;
                }
                Ok(ConnectionState::BlockedHandshake) => {}
                Ok(ConnectionState::WriteTraffic(_)) => {
                    // TLS 1.3 servers may send after their Finished; the handshake ends with
                    // the client's.
                    finished = !c.is_handshaking();
                }
                Ok(ConnectionState::ReadTraffic(mut r)) => {
                    // Data that came with the client's Finished.
                    while let Some(rec) = r.next_record() {
                        match rec {
                            Ok(rec) => plain.extend_from_slice(rec.payload),
                            Err(e) => {
                                failed = Some(format!("reading records: {e}"));
                                break;
                            }
                        }
                    }
                    stop = failed.is_some();
                }
                Ok(ConnectionState::PeerClosed | ConnectionState::Closed) => {
                    failed = Some("the client closed during the handshake".into());
                }
                Ok(_) => failed = Some("early data, which is off".into()),
            }
            at += discard;
            if stop {
                break;
            }
        }
        incoming.drain(..at);
        if let Some(why) = failed {
            // rustls queued the alert that goes with the error.
            for _ in 0..4 {
                match c.process_tls_records(&mut []).state {
                    Ok(ConnectionState::EncodeTlsData(mut e)) => {
                        if encode(&mut e, out).is_err() {
                            break;
                        }
                    }
                    Ok(ConnectionState::TransmitTlsData(t)) => t.done(),
                    _ => break,
                }
            }
            self.state = State::Done;
            return Step::Stop(Recv::Failed(why));
        }
        if !finished {
            return Step::Stop(Recv::Handshaking);
        }
        match self.start_traffic() {
            Ok(()) => Step::Traffic,
            Err(why) => {
                self.state = State::Done;
                Step::Stop(Recv::Failed(why))
            }
        }
    }

    /// The handshake is over: rustls hands the keys over, and the records are ours (or the
    /// kernel's).
    fn start_traffic(&mut self) -> Result<(), String> {
        let State::Handshaking(c) = std::mem::replace(&mut self.state, State::Done) else {
            unreachable!("start_traffic() in another state")
        };
        let session = Session::of(&c, self.sni.take()).ok_or("handshake not complete")?;
        let (secrets, kernel) = c
            .dangerous_into_kernel_connection()
            .map_err(|e| format!("taking the keys over: {e}"))?;
        let version = session.version;
        let mut records = Records::new(
            self.provider,
            version,
            (secrets.tx.0, &secrets.tx.1),
            (secrets.rx.0, &secrets.rx.1),
        )
        .ok_or("no record protection for the negotiated cipher")?;
        if let Some(support) = self.ktls {
            if support.allows(&secrets.tx.1) {
                if let Some(info) = CryptoInfo::new(version, secrets.tx.0, &secrets.tx.1) {
                    self.kernel_tx = Some(info);
                    records.tx = None;
                }
            }
        }
        self.state = State::Traffic(Box::new(Traffic::new(records, kernel, session)));
        Ok(())
    }

    /// Records after the handshake.
    fn traffic_input(&mut self, out: &mut Vec<u8>) -> Recv {
        let TlsConn {
            state,
            incoming,
            plain,
            ..
        } = self;
        let State::Traffic(t) = state else {
            unreachable!("traffic_input() in another state")
        };
        let r = t.receive(incoming, plain, out);
        if matches!(r, Recv::Failed(_)) {
            // The alert is written; nothing more is read or sealed.
            self.state = State::Done;
        }
        r
    }

    /// The kernel's keys for sending, once: set when the handshake has just ended and the
    /// kernel is to seal this connection's records (kTLS). Everything sealed before (the
    /// handshake, session tickets) is in the output already; the keys go after it.
    pub fn take_kernel_tx(&mut self) -> Option<CryptoInfo> {
        self.kernel_tx.take()
    }

    /// Whether the kernel seals this connection's records.
    pub fn kernel_seals(&self) -> bool {
        matches!(&self.state, State::Traffic(t) if t.records.tx.is_none())
    }

    /// What the kernel must send for this connection while it seals (alerts, KeyUpdate and
    /// its new keys), in order.
    pub fn take_kernel_out(&mut self) -> Vec<KernelOut> {
        match &mut self.state {
            State::Traffic(t) => std::mem::take(&mut t.kernel_out),
            _ => Vec::new(),
        }
    }

    /// Encrypts what the role staged and appends the records to `out`.
    pub fn seal(&mut self, out: &mut Vec<u8>) {
        if let State::Traffic(t) = &mut self.state {
            t.seal(&self.staged, out);
        }
        self.staged.clear();
    }

    /// Encrypts `data` (after everything staged) and appends the records to `out`.
    pub fn seal_bytes(&mut self, data: &[u8], out: &mut Vec<u8>) {
        self.seal(out);
        if let State::Traffic(t) = &mut self.state {
            t.seal(data, out);
        }
    }

    /// Reads up to `len` bytes of `file` from `off` into one record at the end of `out`
    /// (after everything staged). Returns the bytes read (0: the file ended).
    pub fn seal_file(
        &mut self,
        file: &std::fs::File,
        off: u64,
        len: usize,
        out: &mut Vec<u8>,
    ) -> std::io::Result<usize> {
        self.seal(out);
        match &mut self.state {
            State::Traffic(t) => t.seal_file(file, off, len, out),
            _ => Err(std::io::Error::other("TLS connection not established")),
        }
    }

    /// Queues close_notify (after everything sealed before it).
    pub fn close_notify(&mut self, out: &mut Vec<u8>) {
        self.seal(out);
        if let State::Traffic(t) = &mut self.state {
            t.close_notify(out);
        }
    }

    #[cfg(test)]
    pub(crate) fn traffic_mut(&mut self) -> Option<&mut Traffic> {
        match &mut self.state {
            State::Traffic(t) => Some(t),
            _ => None,
        }
    }

    /// Whether bytes wait for the budget.
    pub fn waiting(&self) -> bool {
        self.waiting
    }

    /// Whether the handshake is under way (the zone paid for its first step): what waits now
    /// is the client's second flight.
    pub fn started(&self) -> bool {
        matches!(self.state, State::Handshaking(_))
    }
}

/// Copies one handshake record rustls made into `out`.
fn encode<D>(e: &mut EncodeTlsData<'_, D>, out: &mut Vec<u8>) -> Result<(), String> {
    let start = out.len();
    let mut room = 0;
    loop {
        out.resize(start + room, 0);
        match e.encode(&mut out[start..]) {
            Ok(n) => {
                out.truncate(start + n);
                return Ok(());
            }
            Err(EncodeError::InsufficientSize(InsufficientSizeError { required_size }))
                if required_size > room =>
            {
                room = required_size;
            }
            Err(e) => {
                out.truncate(start);
                return Err(format!("encoding a handshake record: {e}"));
            }
        }
    }
}
