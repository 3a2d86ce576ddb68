//! TLS to upstreams: the rustls client configuration of an `[[upstream]] tls` (CA, whether to
//! verify, a client certificate for mTLS), and one client connection driven sans-I/O like
//! the server side ([`TlsUpConn`]). Sessions resume: the configuration's session store (256
//! entries, rustls's default) is shared by every zone's connections to that upstream.

use std::io::{Read, Write};
use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, ClientConnection, DigitallySignedStruct, SignatureScheme};

use crate::material::{self, MaterialError};
use crate::provider::Provider;

/// The CA bundle used when an upstream names none (Debian's, from `ca-certificates`).
pub const SYSTEM_CA: &str = "/etc/ssl/certs/ca-certificates.crt";

/// What an upstream's TLS is built from.
pub struct ClientSpec<'a> {
    pub ca: Option<&'a Path>,
    pub verify: bool,
    /// A client certificate and key (PEM) for upstreams that ask for one.
    pub cert: Option<(&'a Path, &'a Path)>,
}

/// Builds the configuration; errors name the file at fault.
pub fn config(provider: Provider, spec: &ClientSpec) -> Result<Arc<ClientConfig>, MaterialError> {
    let crypto = provider.crypto();
    let builder = ClientConfig::builder_with_provider(crypto.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| MaterialError {
            path: Default::default(),
            message: e.to_string(),
        })?;
    let builder = if spec.verify {
        let ca = spec.ca.unwrap_or(Path::new(SYSTEM_CA));
        builder.with_root_certificates(material::load_roots(ca)?)
    } else {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoVerify(crypto.clone())))
    };
    let mut cfg = match spec.cert {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            let chain = material::read_certs(cert)?;
            let der = material::read_key(key)?;
            builder
                .with_client_auth_cert(chain, der)
                .map_err(|e| MaterialError {
                    path: key.to_path_buf(),
                    message: format!("client certificate and key: {e}"),
                })?
        }
    };
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}

/// `verify = false`: any certificate is accepted (signatures are still checked, so the
/// connection is encrypted to whoever holds the key it shows). For test beds and upstreams
/// on a private network with self-made certificates.
#[derive(Debug)]
struct NoVerify(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for NoVerify {
    fn verify_server_cert(
        &self,
        _end: &CertificateDer<'_>,
        _inter: &[CertificateDer<'_>],
        _name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// A client connection to an upstream.
pub struct TlsUpConn {
    conn: ClientConnection,
    /// Plaintext received, for the exchange.
    pub plain: Vec<u8>,
    /// The server sent close_notify: what it sent is complete. A TCP FIN without it may be
    /// an attacker's truncation (RFC 8446 §6.1), so a response that ends with the connection
    /// is complete only with it.
    pub closed: bool,
}

impl TlsUpConn {
    /// Starts a handshake; the ClientHello is appended to `out`.
    pub fn new(
        config: Arc<ClientConfig>,
        name: ServerName<'static>,
        out: &mut Vec<u8>,
    ) -> Result<TlsUpConn, String> {
        let mut conn = ClientConnection::new(config, name).map_err(|e| e.to_string())?;
        conn.set_buffer_limit(None);
        let mut t = TlsUpConn {
            conn,
            plain: Vec::new(),
            closed: false,
        };
        t.flush(out);
        Ok(t)
    }

    /// Feeds wire bytes; decrypted bytes go to `plain`, what to send back to `out`. `true`:
    /// close_notify arrived with these bytes (it ends what the server sends; `closed` is set).
    /// An error says why the connection cannot go on (a certificate that did not verify...).
    pub fn receive(&mut self, mut data: &[u8], out: &mut Vec<u8>) -> Result<bool, String> {
        let was_closed = self.closed;
        while !data.is_empty() {
            self.conn.read_tls(&mut data).map_err(|e| e.to_string())?;
            let st = match self.conn.process_new_packets() {
                Ok(st) => st,
                Err(e) => {
                    self.flush(out); // the alert
                    return Err(e.to_string());
                }
            };
            self.closed |= st.peer_has_closed();
            let n = st.plaintext_bytes_to_read();
            if n > 0 {
                let at = self.plain.len();
                self.plain.resize(at + n, 0);
                if self
                    .conn
                    .reader()
                    .read_exact(&mut self.plain[at..])
                    .is_err()
                {
                    self.plain.truncate(at);
                }
            }
        }
        self.flush(out);
        Ok(self.closed && !was_closed)
    }

    /// Encrypts `data` (buffered by rustls until the handshake is done) into `out`.
    pub fn write(&mut self, data: &[u8], out: &mut Vec<u8>) {
        let _ = self.conn.writer().write_all(data);
        self.flush(out);
    }

    pub fn close_notify(&mut self, out: &mut Vec<u8>) {
        self.conn.send_close_notify();
        self.flush(out);
    }

    pub fn handshaking(&self) -> bool {
        self.conn.is_handshaking()
    }

    fn flush(&mut self, out: &mut Vec<u8>) {
        while self.conn.wants_write() {
            if self.conn.write_tls(out).is_err() {
                break;
            }
        }
    }
}
