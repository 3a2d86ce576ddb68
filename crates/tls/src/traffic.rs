//! A connection after its handshake: records opened and sealed by [`crate::record`] (or
//! sealed by the kernel), and the few messages TLS still exchanges then — alerts,
//! close_notify, TLS 1.3 KeyUpdate (its key schedule is rustls's `KernelConnection`) — handled
//! here, whoever seals. What a client may send that costs and carries nothing (renegotiation
//! attempts, warning alerts, empty records, KeyUpdates) is limited as rustls limits it.

use rustls::kernel::KernelConnection;
use rustls::pki_types::CertificateDer;
use rustls::server::{ServerConnectionData, UnbufferedServerConnection};
use rustls::{HandshakeKind, ProtocolVersion, SupportedCipherSuite};

use crate::ktls::CryptoInfo;
use crate::record::{alert, Records, ALERT, APPLICATION_DATA, HANDSHAKE, MAX_PLAIN};
use crate::recv::Recv;

/// What a finished handshake agreed (kept once rustls has handed the records over; the
/// accessors are named as rustls's own).
pub struct Session {
    pub(crate) version: ProtocolVersion,
    suite: SupportedCipherSuite,
    sni: Option<String>,
    alpn: Option<Vec<u8>>,
    peer_certificates: Option<Vec<CertificateDer<'static>>>,
    kind: Option<HandshakeKind>,
}

impl Session {
    pub(crate) fn of(c: &UnbufferedServerConnection, sni: Option<String>) -> Option<Session> {
        Some(Session {
            version: c.protocol_version()?,
            suite: c.negotiated_cipher_suite()?,
            sni,
            alpn: c.alpn_protocol().map(<[u8]>::to_vec),
            peer_certificates: c.peer_certificates().map(<[_]>::to_vec),
            kind: c.handshake_kind(),
        })
    }

    pub fn protocol_version(&self) -> Option<ProtocolVersion> {
        Some(self.version)
    }

    pub fn negotiated_cipher_suite(&self) -> Option<SupportedCipherSuite> {
        Some(self.suite)
    }

    pub fn server_name(&self) -> Option<&str> {
        self.sni.as_deref()
    }

    pub fn alpn_protocol(&self) -> Option<&[u8]> {
        self.alpn.as_deref()
    }

    /// The client's certificate chain, when it sent one (mTLS).
    pub fn peer_certificates(&self) -> Option<&[CertificateDer<'static>]> {
        self.peer_certificates.as_deref()
    }

    pub fn handshake_kind(&self) -> Option<HandshakeKind> {
        self.kind
    }
}

/// What the kernel must send while it seals a connection's records (kTLS), in order. Not
/// `Clone`: the keys are not copied; `Debug` does not print them.
#[derive(Debug, PartialEq, Eq)]
pub enum KernelOut {
    /// These bytes as one record of this content type (an alert, a KeyUpdate).
    Record(u8, Vec<u8>),
    /// New keys for sending (`TLS_TX`), for what is queued after them.
    TxKeys(CryptoInfo),
}

/// The longest post-handshake message accepted (a KeyUpdate is 5 bytes).
const MAX_MESSAGE: usize = 1024;
/// A KeyUpdate with `update_not_requested`.
const KEY_UPDATE: [u8; 5] = [24, 0, 0, 1, 0];

// What a client may send that costs the server and carries nothing, limited as rustls 0.23
// limits it (`TemperCounters`, after BoringSSL, and `ALLOWED_CONSECUTIVE_EMPTY_FRAGMENTS_MAX`);
// past a limit the connection ends with a fatal unexpected_message. What the connection
// queues in answer is bounded with them: one no_renegotiation warning in its life, one fatal
// alert, and one KeyUpdate of ours per batch of records received (one at most waiting for the
// kernel to be handed it), so 32 at most between two records of the client's data.
/// TLS 1.2 renegotiations refused with a no_renegotiation warning; the next one is fatal.
const MAX_RENEGOTIATIONS: u8 = 1;
/// Warning alerts read past (TLS 1.2's, user_canceled) over the connection's life.
const MAX_WARNINGS: u8 = 4;
/// Empty records in a row (each costs a decrypt).
const MAX_EMPTY_RECORDS: u8 = 32;
/// KeyUpdates (TLS 1.3) between two records of application data with content (rustls counts
/// from any record of application data; an empty one buys nothing here).
const MAX_KEY_UPDATES: u8 = 32;

pub(crate) struct Traffic {
    pub(crate) records: Records,
    /// rustls's key schedule, for KeyUpdate.
    kernel: KernelConnection<ServerConnectionData>,
    pub(crate) session: Session,
    /// Handshake messages not complete yet (they may span records).
    hs: Vec<u8>,
    /// The client asked for a KeyUpdate of ours.
    key_update_due: bool,
    /// What is left of the limits above, and the empty records just read.
    renegotiations_left: u8,
    warnings_left: u8,
    key_updates_left: u8,
    empty_in_a_row: u8,
    peer_closed: bool,
    sent_close: bool,
    /// Records the current send keys may seal (AES-GCM's confidentiality limit, RFC 8446
    /// §5.5), less a margin.
    pub(crate) limit: u64,
    pub(crate) kernel_out: Vec<KernelOut>,
}

impl Traffic {
    pub(crate) fn new(
        records: Records,
        kernel: KernelConnection<ServerConnectionData>,
        session: Session,
    ) -> Traffic {
        let common = match session.suite {
            SupportedCipherSuite::Tls12(s) => &s.common,
            SupportedCipherSuite::Tls13(s) => &s.common,
        };
        let limit = common.confidentiality_limit.saturating_sub(1024);
        Traffic {
            records,
            kernel,
            session,
            hs: Vec::new(),
            key_update_due: false,
            renegotiations_left: MAX_RENEGOTIATIONS,
            warnings_left: MAX_WARNINGS,
            key_updates_left: MAX_KEY_UPDATES,
            empty_in_a_row: 0,
            peer_closed: false,
            sent_close: false,
            limit,
            kernel_out: Vec::new(),
        }
    }

    /// Opens the records in `incoming` (consumed ones are removed), plaintext to `plain`.
    pub(crate) fn receive(
        &mut self,
        incoming: &mut Vec<u8>,
        plain: &mut Vec<u8>,
        out: &mut Vec<u8>,
    ) -> Recv {
        let mut at = 0;
        let mut failed = None;
        while !self.peer_closed {
            let o = match self.records.open(&mut incoming[at..]) {
                None => break,
                Some(Ok(o)) => o,
                Some(Err(f)) => {
                    failed = Some((f.alert, f.why.to_string()));
                    break;
                }
            };
            let content = at + o.start..at + o.start + o.len;
            at += o.consumed;
            if o.len > 0 {
                self.empty_in_a_row = 0;
            } else if self.empty_in_a_row == MAX_EMPTY_RECORDS {
                failed = Some((alert::UNEXPECTED_MESSAGE, "too many empty records".into()));
                break;
            } else {
                self.empty_in_a_row += 1;
            }
            let r = match o.typ {
                APPLICATION_DATA => {
                    if o.len > 0 {
                        self.key_updates_left = MAX_KEY_UPDATES;
                    }
                    plain.extend_from_slice(&incoming[content]);
                    Ok(())
                }
                ALERT => self.alert(&incoming[content]),
                // RFC 8446 §5.1: no zero-length handshake fragments.
                HANDSHAKE if o.len == 0 => {
                    Err((alert::UNEXPECTED_MESSAGE, "empty handshake record".into()))
                }
                HANDSHAKE => {
                    self.hs.extend_from_slice(&incoming[content]);
                    self.messages(out)
                }
                _ => Err((alert::UNEXPECTED_MESSAGE, "unexpected record type".into())),
            };
            if let Err(e) = r {
                failed = Some(e);
                break;
            }
        }
        incoming.drain(..at.min(incoming.len()));
        if let Some((desc, why)) = failed {
            self.send_alert(2, desc, out);
            return Recv::Failed(why);
        }
        if self.key_update_due {
            self.key_update_due = false;
            if let Err(why) = self.update_tx(out) {
                return Recv::Failed(why);
            }
        }
        if self.peer_closed {
            Recv::Closed
        } else if !plain.is_empty() {
            Recv::Data
        } else {
            Recv::Handshaking
        }
    }

    fn alert(&mut self, body: &[u8]) -> Result<(), (u8, String)> {
        let &[level, desc] = body else {
            return Err((alert::DECODE_ERROR, "malformed alert".into()));
        };
        match desc {
            alert::CLOSE_NOTIFY => {
                self.peer_closed = true;
                Ok(())
            }
            // RFC 8446 §6: every alert but close_notify and user_canceled is fatal in TLS
            // 1.3; TLS 1.2's warnings are ignored, as rustls does.
            alert::USER_CANCELED => self.warning(),
            _ if level == 1 && !self.records.tls13() => self.warning(),
            d => {
                self.sent_close = true; // the peer has gone: no alert back
                Err((alert::CLOSE_NOTIFY, format!("the client sent alert {d}")))
            }
        }
    }

    /// A warning alert read past, while the limit allows.
    fn warning(&mut self) -> Result<(), (u8, String)> {
        self.warnings_left = self.warnings_left.checked_sub(1).ok_or((
            alert::UNEXPECTED_MESSAGE,
            "too many warning alerts".to_string(),
        ))?;
        Ok(())
    }

    /// Complete handshake messages in `hs`: TLS 1.3 KeyUpdate; a TLS 1.2 renegotiation is
    /// refused with a warning, as rustls does; anything else is unexpected. One pass, and
    /// the messages read removed once.
    fn messages(&mut self, out: &mut Vec<u8>) -> Result<(), (u8, String)> {
        let mut at = 0;
        let r = self.each_message(&mut at, out);
        self.hs.drain(..at);
        r
    }

    fn each_message(&mut self, at: &mut usize, out: &mut Vec<u8>) -> Result<(), (u8, String)> {
        while let [typ, l0, l1, l2, ref rest @ ..] = self.hs[*at..] {
            let len = usize::from(l0) << 16 | usize::from(l1) << 8 | usize::from(l2);
            if len > MAX_MESSAGE {
                return Err((alert::DECODE_ERROR, "handshake message too long".into()));
            }
            if rest.len() < len {
                break;
            }
            // RFC 8446 §5.1: a message before a key change ends its record.
            let last = rest.len() == len;
            let requested = match &rest[..len] {
                [0] => Some(false),
                [1] => Some(true),
                _ => None,
            };
            *at += 4 + len;
            match (typ, self.records.tls13()) {
                (24, true) => {
                    let requested = requested
                        .ok_or((alert::DECODE_ERROR, "malformed KeyUpdate".to_string()))?;
                    if !last {
                        return Err((
                            alert::UNEXPECTED_MESSAGE,
                            "data after a KeyUpdate in its record".into(),
                        ));
                    }
                    self.key_updates_left = self.key_updates_left.checked_sub(1).ok_or((
                        alert::UNEXPECTED_MESSAGE,
                        "too many KeyUpdates without data".to_string(),
                    ))?;
                    let (_, s) = self
                        .kernel
                        .update_rx_secret()
                        .map_err(|e| (alert::UNEXPECTED_MESSAGE, format!("KeyUpdate: {e}")))?;
                    self.records.rx = self
                        .records
                        .rekey(&s)
                        .ok_or((alert::UNEXPECTED_MESSAGE, "KeyUpdate: no keys".into()))?;
                    self.key_update_due |= requested;
                }
                (1, false) => {
                    self.renegotiations_left = self.renegotiations_left.checked_sub(1).ok_or((
                        alert::UNEXPECTED_MESSAGE,
                        "renegotiation asked again".to_string(),
                    ))?;
                    self.send_alert(1, alert::NO_RENEGOTIATION, out);
                }
                (t, _) => {
                    return Err((
                        alert::UNEXPECTED_MESSAGE,
                        format!("unexpected handshake message {t} after the handshake"),
                    ))
                }
            }
        }
        Ok(())
    }

    /// Sends a KeyUpdate of ours and switches to the next send keys.
    fn update_tx(&mut self, out: &mut Vec<u8>) -> Result<(), String> {
        if !self.records.tls13() {
            return Err("TLS 1.2 connection at its record limit".into());
        }
        let queued = |k: &KernelOut| matches!(k, KernelOut::TxKeys(_));
        if self.records.tx.is_none() && self.kernel_out.iter().any(queued) {
            // A KeyUpdate of ours the kernel has not been handed yet goes out after this
            // request and answers it too (RFC 8446 §4.6.3): one at most waits in
            // `kernel_out`, and the key schedule moves once for it.
            return Ok(());
        }
        let (_, s) = self
            .kernel
            .update_tx_secret()
            .map_err(|e| format!("KeyUpdate: {e}"))?;
        match &mut self.records.tx {
            Some(_) => {
                self.records.seal(HANDSHAKE, &KEY_UPDATE, out);
                self.records.tx = Some(self.records.rekey(&s).ok_or("KeyUpdate: no keys")?);
            }
            None => {
                let info =
                    CryptoInfo::new(self.session.version, 0, &s).ok_or("KeyUpdate: no keys")?;
                self.kernel_out
                    .push(KernelOut::Record(HANDSHAKE, KEY_UPDATE.to_vec()));
                self.kernel_out.push(KernelOut::TxKeys(info));
            }
        }
        Ok(())
    }

    fn send_alert(&mut self, level: u8, desc: u8, out: &mut Vec<u8>) {
        if self.sent_close {
            return;
        }
        if level == 2 || desc == alert::CLOSE_NOTIFY {
            self.sent_close = true;
        }
        if self.records.tx.is_some() {
            self.records.seal(ALERT, &[level, desc], out);
        } else {
            self.kernel_out
                .push(KernelOut::Record(ALERT, vec![level, desc]));
        }
    }

    /// Re-keys before the send keys reach their limit (TLS 1.3); a TLS 1.2 connection there
    /// ends.
    fn before_seal(&mut self, out: &mut Vec<u8>) -> bool {
        match &self.records.tx {
            Some(tx) if tx.seq >= self.limit => {
                if self.sent_close || self.update_tx(out).is_err() {
                    self.close_notify(out);
                    return false;
                }
                true
            }
            Some(_) => !self.sent_close,
            None => false,
        }
    }

    pub(crate) fn seal(&mut self, data: &[u8], out: &mut Vec<u8>) {
        // The limit is checked per record: one call may carry many (a proxied body).
        for chunk in data.chunks(MAX_PLAIN) {
            if !self.before_seal(out) {
                return;
            }
            self.records.seal(APPLICATION_DATA, chunk, out);
        }
    }

    pub(crate) fn seal_file(
        &mut self,
        file: &std::fs::File,
        off: u64,
        len: usize,
        out: &mut Vec<u8>,
    ) -> std::io::Result<usize> {
        if !self.before_seal(out) {
            return Err(std::io::Error::other("TLS connection closed for sending"));
        }
        self.records.seal_file(file, off, len, out)
    }

    pub(crate) fn close_notify(&mut self, out: &mut Vec<u8>) {
        self.send_alert(1, alert::CLOSE_NOTIFY, out);
    }
}
