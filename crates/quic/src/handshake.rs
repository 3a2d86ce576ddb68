//! What a server handshake did that quinn-proto does not say: whether the session was
//! resumed, and whether the client offered early data the server then refused. rustls knows
//! (`handshake_kind`), but quinn-proto's session keeps its rustls connection private and
//! reports early data on the client's side only. So the session is wrapped
//! ([`ObservedConfig`], [`ObservedSession`]), delegating everything, and the handshake's own
//! messages are read as they pass, the same bytes the peer gets:
//! - the ClientHello (RFC 8446 §4.1.2) offers early data with an `early_data` extension;
//! - the ServerHello (§4.1.3) resumes a session when it carries `pre_shared_key` (a
//!   HelloRetryRequest, a ServerHello with §4.1.3's special random, is skipped);
//! - the EncryptedExtensions (§4.3.1) accept early data when they carry `early_data`.
//!
//! Only those three messages are read; each side's bytes are kept until they are (a few
//! kilobytes, at most [`MAX_KEPT`]), then no more. The application reads the answer from
//! [`Handshake::seen`], which `handshake_data()` hands it in place of quinn-proto's
//! `HandshakeData` (whose fields [`Handshake`] carries on).
//!
//! The wrapping also hands quinn-proto packet keys that leave off a packet's trailing
//! PADDING once it is decrypted (`padding.rs`): every key that decrypts, at every level;
//! and gives a new connection the Initial keys its first packet was opened with, not a
//! second derivation of them (`initial.rs`).

use std::any::Any;
use std::sync::atomic::{AtomicU8, Ordering::Relaxed};
use std::sync::Arc;

use quinn_proto::crypto::rustls::{HandshakeData, QuicServerConfig};
use quinn_proto::crypto::{
    self, ExportKeyingMaterialError, HeaderKey, KeyPair, Keys, PacketKey, UnsupportedVersion,
};
use quinn_proto::transport_parameters::TransportParameters;
use quinn_proto::{ConnectionId, Side, TransportError};

use crate::initial::LastInitial;
use crate::padding::{trim_keys, trim_pair, Trimmed};

/// Bytes of one side's handshake kept, at most, while its message is incomplete (a
/// ClientHello with post-quantum key shares is under 2 KB).
pub const MAX_KEPT: usize = 16 * 1024;

const PRE_SHARED_KEY: u16 = 41;
const EARLY_DATA: u16 = 42;
const CLIENT_HELLO: u8 = 1;
const SERVER_HELLO: u8 = 2;
const ENCRYPTED_EXTENSIONS: u8 = 8;
/// The random of a HelloRetryRequest (RFC 8446 §4.1.3).
const HRR_RANDOM: [u8; 32] = [
    0xcf, 0x21, 0xad, 0x74, 0xe5, 0x9a, 0x61, 0x11, 0xbe, 0x1d, 0x8c, 0x02, 0x1e, 0x65, 0xb8, 0x91,
    0xc2, 0xa2, 0x11, 0x16, 0x7a, 0xbb, 0x8c, 0x5e, 0x07, 0x9e, 0x09, 0xe2, 0xc8, 0xa8, 0x33, 0x9c,
];

const RESUMED: u8 = 1;
const EARLY_OFFERED: u8 = 2;
const EARLY_ACCEPTED: u8 = 4;
/// The ClientHello was read (or given up on).
const CLIENT_DONE: u8 = 8;
/// The ServerHello and EncryptedExtensions were read (or given up on).
const SERVER_DONE: u8 = 16;

/// What one handshake was seen to do (shared with the application through [`Handshake`]).
#[derive(Debug, Default)]
pub struct HandshakeSeen(AtomicU8);

impl HandshakeSeen {
    fn has(&self, bit: u8) -> bool {
        self.0.load(Relaxed) & bit != 0
    }

    fn set(&self, bit: u8) {
        self.0.fetch_or(bit, Relaxed);
    }

    /// The server resumed a session (a PSK handshake): known once the ServerHello is sent.
    pub fn resumed(&self) -> bool {
        self.has(RESUMED)
    }

    /// The server's first flight (ServerHello, EncryptedExtensions) was read.
    pub fn server_flight_seen(&self) -> bool {
        self.has(SERVER_DONE)
    }

    /// The client offered early data and the server refused it: known once the
    /// EncryptedExtensions are sent.
    pub fn early_refused(&self) -> bool {
        self.has(EARLY_OFFERED) && self.has(SERVER_DONE) && !self.has(EARLY_ACCEPTED)
    }
}

/// `handshake_data()` of an observed session: quinn-proto's fields, and what was seen.
pub struct Handshake {
    pub protocol: Option<Vec<u8>>,
    pub server_name: Option<String>,
    pub seen: Arc<HandshakeSeen>,
}

/// quinn-proto's rustls server configuration, its sessions observed.
pub struct ObservedConfig {
    inner: Arc<QuicServerConfig>,
    /// The Initial keys derived last, for the session of that connection.
    last: Arc<LastInitial>,
}

impl ObservedConfig {
    pub fn new(inner: QuicServerConfig) -> ObservedConfig {
        ObservedConfig {
            inner: Arc::new(inner),
            last: Arc::default(),
        }
    }
}

impl crypto::ServerConfig for ObservedConfig {
    fn initial_keys(
        &self,
        version: u32,
        dst_cid: &ConnectionId,
    ) -> Result<Keys, UnsupportedVersion> {
        let keys = self.inner.initial_keys(version, dst_cid)?;
        Ok(trim_keys(self.last.keep(version, dst_cid, keys)))
    }

    fn retry_tag(&self, version: u32, orig_dst_cid: &ConnectionId, packet: &[u8]) -> [u8; 16] {
        self.inner.retry_tag(version, orig_dst_cid, packet)
    }

    fn start_session(
        self: Arc<Self>,
        version: u32,
        params: &TransportParameters,
    ) -> Box<dyn crypto::Session> {
        Box::new(ObservedSession {
            inner: self.inner.clone().start_session(version, params),
            observer: Observer::default(),
            version,
            last: self.last.clone(),
        })
    }
}

/// A server session that reads its handshake's first messages as they pass (module docs).
pub struct ObservedSession {
    inner: Box<dyn crypto::Session>,
    observer: Observer,
    /// The QUIC version the session speaks, and where its configuration keeps the Initial
    /// keys it derived last.
    version: u32,
    last: Arc<LastInitial>,
}

/// The reading of both sides' first messages.
#[derive(Default)]
struct Observer {
    seen: Arc<HandshakeSeen>,
    /// The client's handshake bytes until its ClientHello is whole.
    from_client: Vec<u8>,
    /// The server's handshake bytes until its EncryptedExtensions are whole.
    from_server: Vec<u8>,
}

impl Observer {
    fn client_bytes(&mut self, b: &[u8]) {
        if self.seen.has(CLIENT_DONE) {
            return;
        }
        self.from_client.extend_from_slice(b);
        match first_message(&self.from_client) {
            Some((CLIENT_HELLO, body)) if client_hello_offers_early_data(body) => {
                self.seen.set(EARLY_OFFERED);
            }
            Some(_) => {}
            None if self.from_client.len() < MAX_KEPT => return,
            None => {}
        }
        self.seen.set(CLIENT_DONE);
        self.from_client = Vec::new();
    }

    fn server_bytes(&mut self, b: &[u8]) {
        if self.seen.has(SERVER_DONE) {
            return;
        }
        self.from_server.extend_from_slice(b);
        let mut rest = &self.from_server[..];
        let mut done = false;
        while let Some((kind, body)) = first_message(rest) {
            rest = &rest[4 + body.len()..];
            match kind {
                SERVER_HELLO => match server_hello_resumes(body) {
                    Some(true) => self.seen.set(RESUMED),
                    Some(false) => {}
                    None => continue, // a HelloRetryRequest: a ServerHello follows
                },
                ENCRYPTED_EXTENSIONS => {
                    if extensions_have(body, EARLY_DATA) == Some(true) {
                        self.seen.set(EARLY_ACCEPTED);
                    }
                    done = true;
                    break;
                }
                _ => {}
            }
        }
        if done || self.from_server.len() >= MAX_KEPT {
            self.seen.set(SERVER_DONE);
            self.from_server = Vec::new();
        }
    }
}

impl crypto::Session for ObservedSession {
    fn initial_keys(&self, dst_cid: &ConnectionId, side: Side) -> Keys {
        let kept = match side {
            Side::Server => self.last.take(self.version, dst_cid),
            Side::Client => None,
        };
        trim_keys(kept.unwrap_or_else(|| self.inner.initial_keys(dst_cid, side)))
    }

    fn handshake_data(&self) -> Option<Box<dyn Any>> {
        let d = self
            .inner
            .handshake_data()?
            .downcast::<HandshakeData>()
            .ok()?;
        Some(Box::new(Handshake {
            protocol: d.protocol,
            server_name: d.server_name,
            seen: self.observer.seen.clone(),
        }))
    }

    fn peer_identity(&self) -> Option<Box<dyn Any>> {
        self.inner.peer_identity()
    }

    fn early_crypto(&self) -> Option<(Box<dyn HeaderKey>, Box<dyn PacketKey>)> {
        // A server decrypts 0-RTT with it.
        let (header, packet) = self.inner.early_crypto()?;
        Some((header, Box::new(Trimmed(packet))))
    }

    fn early_data_accepted(&self) -> Option<bool> {
        self.inner.early_data_accepted()
    }

    fn is_handshaking(&self) -> bool {
        self.inner.is_handshaking()
    }

    fn read_handshake(&mut self, buf: &[u8]) -> Result<bool, TransportError> {
        self.observer.client_bytes(buf);
        self.inner.read_handshake(buf)
    }

    fn transport_parameters(&self) -> Result<Option<TransportParameters>, TransportError> {
        self.inner.transport_parameters()
    }

    fn write_handshake(&mut self, buf: &mut Vec<u8>) -> Option<Keys> {
        let from = buf.len();
        let keys = self.inner.write_handshake(buf);
        self.observer.server_bytes(&buf[from..]);
        keys.map(trim_keys)
    }

    fn next_1rtt_keys(&mut self) -> Option<KeyPair<Box<dyn PacketKey>>> {
        self.inner.next_1rtt_keys().map(trim_pair)
    }

    fn is_valid_retry(&self, orig_dst_cid: &ConnectionId, header: &[u8], payload: &[u8]) -> bool {
        self.inner.is_valid_retry(orig_dst_cid, header, payload)
    }

    fn export_keying_material(
        &self,
        output: &mut [u8],
        label: &[u8],
        context: &[u8],
    ) -> Result<(), ExportKeyingMaterialError> {
        self.inner.export_keying_material(output, label, context)
    }
}

/// The first handshake message of `b` if it is whole: its type and body (§4: a type byte,
/// a 24-bit length).
fn first_message(b: &[u8]) -> Option<(u8, &[u8])> {
    let (&kind, rest) = b.split_first()?;
    let len = u32::from_be_bytes([0, *rest.first()?, *rest.get(1)?, *rest.get(2)?]) as usize;
    let body = rest.get(3..3 + len)?;
    Some((kind, body))
}

/// A cursor over a message's fields.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (a, b) = (self.0.get(..n)?, self.0.get(n..)?);
        self.0 = b;
        Some(a)
    }

    fn u8(&mut self) -> Option<usize> {
        Some(usize::from(self.take(1)?[0]))
    }

    fn u16(&mut self) -> Option<usize> {
        let b = self.take(2)?;
        Some(usize::from(u16::from_be_bytes([b[0], b[1]])))
    }

    /// A field with a `len_bytes`-byte length in front.
    fn vec(&mut self, len_bytes: usize) -> Option<&'a [u8]> {
        let n = if len_bytes == 1 {
            self.u8()?
        } else {
            self.u16()?
        };
        self.take(n)
    }
}

/// Whether an extension block (`Extension extensions<..2^16-1>`, length first) carries
/// extension `want`; None when it does not parse.
fn extensions_have(block: &[u8], want: u16) -> Option<bool> {
    let mut r = Reader(Reader(block).vec(2)?);
    while !r.0.is_empty() {
        let kind = r.u16()?;
        r.vec(2)?;
        if kind == usize::from(want) {
            return Some(true);
        }
    }
    Some(false)
}

fn client_hello_offers_early_data(body: &[u8]) -> bool {
    let mut r = Reader(body);
    let exts = (|| {
        r.take(2 + 32)?; // legacy_version, random
        r.vec(1)?; // legacy_session_id
        r.vec(2)?; // cipher_suites
        r.vec(1)?; // legacy_compression_methods
        Some(r.0)
    })();
    exts.and_then(|e| extensions_have(e, EARLY_DATA)) == Some(true)
}

/// Whether a ServerHello resumes a session; None for a HelloRetryRequest (or one that does
/// not parse).
fn server_hello_resumes(body: &[u8]) -> Option<bool> {
    let mut r = Reader(body);
    r.take(2)?; // legacy_version
    if r.take(32)? == HRR_RANDOM {
        return None;
    }
    r.vec(1)?; // legacy_session_id_echo
    r.take(2 + 1)?; // cipher_suite, legacy_compression_method
    extensions_have(r.0, PRE_SHARED_KEY)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(kind: u8, body: &[u8]) -> Vec<u8> {
        let n = body.len() as u32;
        let mut m = vec![kind];
        m.extend_from_slice(&n.to_be_bytes()[1..]);
        m.extend_from_slice(body);
        m
    }

    fn exts(kinds: &[u16]) -> Vec<u8> {
        let mut e = Vec::new();
        for k in kinds {
            e.extend_from_slice(&k.to_be_bytes());
            e.extend_from_slice(&[0, 2, 0xab, 0xcd]);
        }
        let mut out = (e.len() as u16).to_be_bytes().to_vec();
        out.extend(e);
        out
    }

    fn server_hello(random: [u8; 32], kinds: &[u16]) -> Vec<u8> {
        let mut b = vec![3, 3];
        b.extend_from_slice(&random);
        b.extend_from_slice(&[2, 9, 9, 0x13, 0x01, 0]);
        b.extend(exts(kinds));
        message(SERVER_HELLO, &b)
    }

    fn client_hello(kinds: &[u16]) -> Vec<u8> {
        let mut b = vec![3, 3];
        b.extend_from_slice(&[7; 32]);
        b.extend_from_slice(&[0, 0, 2, 0x13, 0x01, 1, 0]);
        b.extend(exts(kinds));
        message(CLIENT_HELLO, &b)
    }

    /// The reading, without a rustls session behind it.
    fn observe(client: &[&[u8]], server: &[&[u8]]) -> Arc<HandshakeSeen> {
        let mut o = Observer::default();
        for c in client {
            o.client_bytes(c);
        }
        for b in server {
            o.server_bytes(b);
        }
        o.seen
    }

    #[test]
    fn a_resumption_with_early_data_accepted_is_seen_in_pieces() {
        let ch = client_hello(&[43, EARLY_DATA, PRE_SHARED_KEY]);
        let sh = server_hello([1; 32], &[43, 51, PRE_SHARED_KEY]);
        let ee = message(ENCRYPTED_EXTENSIONS, &exts(&[16, EARLY_DATA]));
        let mut server = sh.clone();
        server.extend(&ee);
        // Split anywhere: the messages arrive over several CRYPTO frames.
        for cut in [1, 3, 5, ch.len() / 2, ch.len() - 1] {
            let seen = observe(&[&ch[..cut], &ch[cut..]], &[&server[..cut], &server[cut..]]);
            assert!(seen.resumed() && !seen.early_refused(), "cut at {cut}");
            assert!(seen.has(EARLY_ACCEPTED));
        }
    }

    #[test]
    fn early_data_offered_and_refused_and_full_handshakes() {
        let ch = client_hello(&[EARLY_DATA]);
        let sh = server_hello([1; 32], &[43, 51]);
        let ee = message(ENCRYPTED_EXTENSIONS, &exts(&[16]));
        let seen = observe(&[&ch], &[&sh, &ee]);
        assert!(!seen.resumed() && seen.early_refused());
        // Not offered: nothing refused.
        let seen = observe(&[&client_hello(&[43])], &[&sh, &ee]);
        assert!(!seen.resumed() && !seen.early_refused());
        // Not known before the EncryptedExtensions are sent.
        let seen = observe(&[&ch], &[&sh]);
        assert!(!seen.early_refused());
    }

    #[test]
    fn a_hello_retry_request_is_skipped() {
        let hrr = server_hello(HRR_RANDOM, &[43, 51]);
        let sh = server_hello([2; 32], &[PRE_SHARED_KEY]);
        let ee = message(ENCRYPTED_EXTENSIONS, &exts(&[]));
        let seen = observe(&[&client_hello(&[])], &[&hrr, &sh, &ee]);
        assert!(seen.resumed());
    }

    #[test]
    fn a_new_connection_takes_the_initial_keys_its_first_packet_was_opened_with() {
        use quinn_proto::crypto::ServerConfig as _;
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".into()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let der = rustls_pki_types::CertificateDer::from(cert.der().to_vec());
        let pk = rustls_pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into());
        let mut tls =
            rustls::ServerConfig::builder_with_provider(ringx_tls::Provider::AwsLc.crypto())
                .with_protocol_versions(&[&rustls::version::TLS13])
                .unwrap()
                .with_no_client_auth()
                .with_single_cert(vec![der], pk)
                .unwrap();
        tls.max_early_data_size = 0;
        let config = Arc::new(ObservedConfig::new(
            QuicServerConfig::try_from(Arc::new(tls)).unwrap(),
        ));
        let cid = ConnectionId::new(&[9; 8]);
        let params = TransportParameters::read(Side::Client, &mut &b""[..]).unwrap();
        config.initial_keys(1, &cid).unwrap();
        assert!(!config.last.is_empty(), "the first packet's keys are kept");
        let session = config.clone().start_session(1, &params);
        let _ = session.initial_keys(&cid, Side::Server);
        assert!(config.last.is_empty(), "the connection took them");
        // A connection of another ID derives its own, leaving a kept set alone.
        config.initial_keys(1, &cid).unwrap();
        let other = ConnectionId::new(&[8; 8]);
        let _ = config
            .clone()
            .start_session(1, &params)
            .initial_keys(&other, Side::Server);
        assert!(!config.last.is_empty());
    }

    #[test]
    fn garbage_is_given_up_on_within_bounds() {
        let junk = vec![1u8; MAX_KEPT + 10];
        let seen = observe(&[&junk], &[&junk]);
        assert!(!seen.resumed() && !seen.early_refused());
        assert!(seen.has(CLIENT_DONE) && seen.has(SERVER_DONE));
        // A message that says it is shorter than its fields.
        let seen = observe(
            &[&message(CLIENT_HELLO, &[3, 3, 0])],
            &[&message(SERVER_HELLO, &[3])],
        );
        assert!(!seen.resumed() && !seen.early_refused());
    }
}
