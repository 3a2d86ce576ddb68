//! One blocking connection to a Redis server or a sentinel: TCP (with TLS over it when
//! configured), AUTH, and one command at a time, every read and write under a timeout. It
//! lives on the cluster thread only; nothing else ever waits on it.

use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rustls::{ClientConfig, ClientConnection, StreamOwned};
use rustls_pki_types::ServerName;

use crate::error::Error;
use crate::resp::{self, Value};

/// `tls` of `[cluster]`: what the client configuration is built from.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TlsSpec {
    /// CA certificates (PEM) to verify Redis's certificate against; default: the system's.
    pub ca: Option<PathBuf>,
    /// The name verified in the certificate (and sent as SNI); default: the address's host.
    pub sni: Option<String>,
    pub verify: bool,
    /// A client certificate and key (PEM): Redis's `tls-auth-clients yes` asks for one.
    pub cert: Option<(PathBuf, PathBuf)>,
}

impl TlsSpec {
    /// The rustls client configuration; the error names the file at fault.
    pub fn client_config(&self) -> Result<Arc<ClientConfig>, String> {
        let spec = ringx_tls::client::ClientSpec {
            ca: self.ca.as_deref(),
            verify: self.verify,
            cert: self.cert.as_ref().map(|(c, k)| (c.as_path(), k.as_path())),
        };
        let cfg = ringx_tls::client::config(ringx_tls::Provider::AwsLc, &spec)
            .map_err(|e| e.to_string())?;
        // That configuration offers ALPN http/1.1, which is not what is spoken here.
        let mut cfg = (*cfg).clone();
        cfg.alpn_protocols.clear();
        Ok(Arc::new(cfg))
    }
}

/// How to reach a server.
#[derive(Clone)]
pub struct Dial {
    pub tls: Option<(Arc<ClientConfig>, Option<String>)>,
    pub connect_timeout: Duration,
    /// Each read and write of a command; past it the connection is dropped.
    pub timeout: Duration,
    pub username: Option<String>,
    pub password: Option<String>,
}

enum Stream {
    Plain(TcpStream),
    Tls(Box<StreamOwned<ClientConnection, TcpStream>>),
}

impl Stream {
    fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Plain(s) => s,
            Stream::Tls(s) => &s.sock,
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(buf),
            Stream::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write(buf),
            Stream::Tls(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Plain(s) => s.flush(),
            Stream::Tls(s) => s.flush(),
        }
    }
}

/// A connection, ready for commands.
pub struct Conn {
    stream: Stream,
    buf: Vec<u8>,
    /// `host:port` as configured (or as a sentinel named it).
    pub addr: String,
}

/// The host part of `host:port` (brackets off an IPv6 address).
fn host_of(addr: &str) -> &str {
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    host.trim_start_matches('[').trim_end_matches(']')
}

impl Conn {
    /// Connects to `addr` (each address it resolves to in turn), with TLS and AUTH as `dial`
    /// says.
    pub fn open(addr: &str, dial: &Dial, auth: bool) -> Result<Conn, Error> {
        let fail =
            |what: &str, e: &dyn std::fmt::Display| Error::Io(format!("{addr}: {what}: {e}"));
        let addrs: Vec<_> = addr
            .to_socket_addrs()
            .map_err(|e| fail("cannot resolve", &e))?
            .collect();
        let mut last: Option<io::Error> = None;
        let mut tcp = None;
        for a in &addrs {
            match TcpStream::connect_timeout(a, dial.connect_timeout) {
                Ok(s) => {
                    tcp = Some(s);
                    break;
                }
                Err(e) => last = Some(e),
            }
        }
        let tcp = match (tcp, last) {
            (Some(t), _) => t,
            (None, Some(e)) => return Err(fail("connect", &e)),
            (None, None) => return Err(fail("connect", &"resolves to no address")),
        };
        let _ = tcp.set_nodelay(true);
        tcp.set_read_timeout(Some(dial.connect_timeout))
            .and_then(|_| tcp.set_write_timeout(Some(dial.connect_timeout)))
            .map_err(|e| fail("socket timeouts", &e))?;
        let stream = match &dial.tls {
            None => Stream::Plain(tcp),
            Some((cfg, sni)) => {
                let name = sni.as_deref().unwrap_or_else(|| host_of(addr));
                let name = ServerName::try_from(name.to_string())
                    .map_err(|e| fail("TLS server name", &e))?;
                let c = ClientConnection::new(cfg.clone(), name).map_err(|e| fail("TLS", &e))?;
                let mut s = StreamOwned::new(c, tcp);
                while s.conn.is_handshaking() {
                    s.conn
                        .complete_io(&mut s.sock)
                        .map_err(|e| fail("TLS handshake", &e))?;
                }
                Stream::Tls(Box::new(s))
            }
        };
        stream
            .tcp()
            .set_read_timeout(Some(dial.timeout))
            .and_then(|_| stream.tcp().set_write_timeout(Some(dial.timeout)))
            .map_err(|e| fail("socket timeouts", &e))?;
        let mut conn = Conn {
            stream,
            buf: Vec::with_capacity(4096),
            addr: addr.to_string(),
        };
        if auth {
            if let Some(pass) = &dial.password {
                let r = match &dial.username {
                    Some(u) => conn.call(&[b"AUTH", u.as_bytes(), pass.as_bytes()])?,
                    None => conn.call(&[b"AUTH", pass.as_bytes()])?,
                };
                if let Value::Error(e) = r {
                    return Err(Error::Reply(format!(
                        "{addr}: AUTH refused ({e}): check [cluster] username and password"
                    )));
                }
            }
        }
        Ok(conn)
    }

    /// Sends one command and reads its reply. An error here leaves the connection unusable
    /// (a reply may be half read): drop it.
    pub fn call(&mut self, args: &[&[u8]]) -> Result<Value, Error> {
        self.send(args)?;
        loop {
            if let Some(v) = self.decoded()? {
                return Ok(v);
            }
            self.fill()?;
        }
    }

    /// Sends one command without reading its reply: on a subscribed connection the replies
    /// come among the messages ([`Conn::poll`]).
    pub fn send(&mut self, args: &[&[u8]]) -> Result<(), Error> {
        let mut out = Vec::new();
        resp::encode(args, &mut out);
        self.stream.write_all(&out).map_err(|e| self.io(e))?;
        self.stream.flush().map_err(|e| self.io(e))
    }

    /// The next reply or message once whole; `None` when none came whole within the read
    /// timeout ([`Conn::set_read_timeout`]). An error leaves the connection unusable.
    pub fn poll(&mut self) -> Result<Option<Value>, Error> {
        if let Some(v) = self.decoded()? {
            return Ok(Some(v));
        }
        match self.fill() {
            Ok(()) => self.decoded(),
            Err(Error::Io(e)) if e.ends_with(NO_ANSWER) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// How long a read waits (for [`Conn::poll`]; a command's reply waits as long).
    pub fn set_read_timeout(&self, d: Duration) -> Result<(), Error> {
        self.stream
            .tcp()
            .set_read_timeout(Some(d))
            .map_err(|e| self.io(e))
    }

    fn io(&self, e: io::Error) -> Error {
        let what = if matches!(
            e.kind(),
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
        ) {
            NO_ANSWER.to_string()
        } else {
            e.to_string()
        };
        Error::Io(format!("{}: {what}", self.addr))
    }

    /// A whole reply from the front of the buffer, taken off it.
    fn decoded(&mut self) -> Result<Option<Value>, Error> {
        match resp::decode(&self.buf) {
            Ok(Some((v, used))) => {
                self.buf.drain(..used);
                Ok(Some(v))
            }
            Ok(None) => Ok(None),
            Err(e) => Err(Error::Io(format!("{}: {e}", self.addr))),
        }
    }

    /// One read onto the buffer.
    fn fill(&mut self) -> Result<(), Error> {
        let mut chunk = [0u8; 16 << 10];
        let n = self.stream.read(&mut chunk).map_err(|e| self.io(e))?;
        if n == 0 {
            return Err(Error::Io(format!("{}: closed by the server", self.addr)));
        }
        self.buf.extend_from_slice(&chunk[..n]);
        Ok(())
    }
}

/// What a read that timed out says.
const NO_ANSWER: &str = "no answer within [cluster] timeout";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_of_addresses() {
        assert_eq!(host_of("redis.internal:6379"), "redis.internal");
        assert_eq!(host_of("[::1]:6379"), "::1");
        assert_eq!(host_of("10.0.0.1:26379"), "10.0.0.1");
    }
}
