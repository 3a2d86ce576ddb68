//! The HTTP client under instant-acme: one blocking HTTPS/1.1 request per connection, on the
//! ACME thread, with rustls trusting the configured CA bundle (`[acme] ca`, else the
//! system's). ACME exchanges are a few small requests per certificate, so neither a
//! connection pool nor an async runtime is worth its weight here. instant-acme keeps no
//! headers of an error response, so the client notes each response's `Retry-After` for the
//! thread that asked ([`last_retry_after`]): a `rateLimited` failure waits at least that long.

use std::cell::Cell;
use std::future::Future;
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use instant_acme::{BodyWrapper, BytesResponse, Error, HttpClient};
use rustls::{ClientConfig, ClientConnection, StreamOwned};
use rustls_pki_types::ServerName;

/// The most of a response ringx reads (certificate chains are a few KB).
const MAX_RESPONSE: usize = 1 << 20;
/// How long one request may take, connect to last byte.
const TIMEOUT: Duration = Duration::from_secs(30);

/// The longest `Retry-After` honoured (a CA's rate limit window is at most a week).
const MAX_RETRY_AFTER: Duration = Duration::from_secs(7 * 86400);

thread_local! {
    static RETRY_AFTER: Cell<Option<Duration>> = const { Cell::new(None) };
}

/// The `Retry-After` of the last response this thread's client read (None: it had none, or
/// no valid one). Requests run on the thread that blocks on them (`crate::block`), so right
/// after instant-acme returns an error this is the header of the response that carried it.
pub fn last_retry_after() -> Option<Duration> {
    RETRY_AFTER.with(Cell::get)
}

/// A `Retry-After` value (RFC 9110 §10.2.3): seconds, or an HTTP-date (a past one: now),
/// at most [`MAX_RETRY_AFTER`].
pub(crate) fn retry_after(v: &str, now: SystemTime) -> Option<Duration> {
    let v = v.trim();
    let d = match v.parse::<u64>() {
        Ok(secs) => Duration::from_secs(secs),
        Err(_) => {
            let at = httpdate::parse_http_date(v).ok()?;
            at.duration_since(now).unwrap_or(Duration::ZERO)
        }
    };
    Some(d.min(MAX_RETRY_AFTER))
}

/// A blocking HTTPS client.
pub struct Client {
    tls: Arc<ClientConfig>,
}

impl Client {
    /// Trusting the certificates in `ca` (PEM), or the system's bundle.
    pub fn new(ca: Option<&Path>) -> Result<Client, String> {
        let path = ca.unwrap_or(Path::new(ringx_tls::client::SYSTEM_CA));
        let roots = ringx_tls::material::load_roots(path).map_err(|e| e.to_string())?;
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let tls = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(Client { tls: Arc::new(tls) })
    }
}

fn other(e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Error {
    Error::Other(e.into())
}

impl HttpClient for Client {
    fn request(
        &self,
        req: http::Request<BodyWrapper<Bytes>>,
    ) -> Pin<Box<dyn Future<Output = Result<BytesResponse, Error>> + Send>> {
        let tls = self.tls.clone();
        Box::pin(async move {
            let (parts, body) = req.into_parts();
            let body = body.collect().await.map_err(other)?.to_bytes();
            RETRY_AFTER.with(|c| c.set(None));
            let rsp = exchange(&tls, &parts, &body)?;
            let after = rsp
                .headers()
                .get(http::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| retry_after(v, SystemTime::now()));
            RETRY_AFTER.with(|c| c.set(after));
            Ok(BytesResponse::from(rsp))
        })
    }
}

/// Sends one request and reads its response.
fn exchange(
    tls: &Arc<ClientConfig>,
    parts: &http::request::Parts,
    body: &[u8],
) -> Result<http::Response<Full<Bytes>>, Error> {
    let uri = &parts.uri;
    if uri.scheme_str() != Some("https") {
        return Err(other(format!("{uri}: ACME speaks https only")));
    }
    let host = uri.host().ok_or_else(|| other(format!("{uri}: no host")))?;
    let port = uri.port_u16().unwrap_or(443);
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let addrs: Vec<_> = (bare, port).to_socket_addrs().map_err(other)?.collect();
    // Every address in turn ("localhost" may resolve to ::1 first, with the CA on 127.0.0.1).
    let mut last = None;
    let mut tcp = None;
    for a in &addrs {
        match TcpStream::connect_timeout(a, TIMEOUT) {
            Ok(t) => {
                tcp = Some(t);
                break;
            }
            Err(e) => last = Some(e),
        }
    }
    let tcp = match (tcp, last) {
        (Some(t), _) => t,
        (None, Some(e)) => return Err(other(format!("{host}:{port}: {e}"))),
        (None, None) => return Err(other(format!("{host}: no address"))),
    };
    tcp.set_read_timeout(Some(TIMEOUT)).map_err(other)?;
    tcp.set_write_timeout(Some(TIMEOUT)).map_err(other)?;
    let name = ServerName::try_from(
        host.trim_start_matches('[')
            .trim_end_matches(']')
            .to_string(),
    )
    .map_err(other)?;
    let conn = ClientConnection::new(tls.clone(), name).map_err(other)?;
    let mut s = StreamOwned::new(conn, tcp);
    let target = uri.path_and_query().map_or("/", |p| p.as_str());
    let mut head = format!(
        "{} {target} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nContent-Length: {}\r\n",
        parts.method,
        uri.authority().map_or(host, |a| a.as_str()),
        body.len()
    );
    for (k, v) in &parts.headers {
        if let Ok(v) = v.to_str() {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).map_err(other)?;
    s.write_all(body).map_err(other)?;
    s.flush().map_err(other)?;
    let head_only = parts.method == http::Method::HEAD;
    read_response(&mut s, head_only)
}

/// Reads a response: its head, then a body framed by Content-Length, chunked, or the end of
/// the connection.
fn read_response(s: &mut impl Read, head_only: bool) -> Result<http::Response<Full<Bytes>>, Error> {
    let mut buf = Vec::with_capacity(8192);
    let mut chunk = [0u8; 8192];
    let mut eof = false;
    loop {
        if let Some(r) = parse(&buf, eof, head_only)? {
            return Ok(r);
        }
        if eof {
            return Err(other("the ACME server closed before a whole response"));
        }
        match s.read(&mut chunk) {
            Ok(0) => eof = true,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            // A peer that closes without close_notify: the framing decides what was whole.
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => eof = true,
            Err(e) => return Err(other(e)),
        }
        if buf.len() > MAX_RESPONSE {
            return Err(other("ACME response over 1 MiB"));
        }
    }
}

/// The response in `buf`, once it is whole.
fn parse(
    buf: &[u8],
    eof: bool,
    head_only: bool,
) -> Result<Option<http::Response<Full<Bytes>>>, Error> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut r = httparse::Response::new(&mut headers);
    let n = match r.parse(buf).map_err(other)? {
        httparse::Status::Complete(n) => n,
        httparse::Status::Partial => return Ok(None),
    };
    let status = r.code.unwrap_or(0);
    let mut b = http::Response::builder().status(status);
    let mut length = None;
    let mut chunked = false;
    for h in r.headers.iter() {
        if h.name.eq_ignore_ascii_case("content-length") {
            length = std::str::from_utf8(h.value)
                .ok()
                .and_then(|v| v.trim().parse::<usize>().ok());
        }
        if h.name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = h.value.eq_ignore_ascii_case(b"chunked");
        }
        b = b.header(h.name, h.value);
    }
    let rest = &buf[n..];
    let body = if head_only || status == 204 || status == 304 || (100..200).contains(&status) {
        Vec::new()
    } else if chunked {
        match dechunk(rest)? {
            Some(v) => v,
            None => return Ok(None),
        }
    } else if let Some(len) = length {
        if rest.len() < len {
            return Ok(None);
        }
        rest[..len].to_vec()
    } else if eof {
        rest.to_vec()
    } else {
        return Ok(None);
    };
    b.body(Full::new(Bytes::from(body)))
        .map(Some)
        .map_err(other)
}

/// A chunked body, once its last chunk has come.
fn dechunk(mut b: &[u8]) -> Result<Option<Vec<u8>>, Error> {
    let mut out = Vec::new();
    loop {
        let Some(eol) = b.windows(2).position(|w| w == b"\r\n") else {
            return Ok(None);
        };
        let line = std::str::from_utf8(&b[..eol]).map_err(other)?;
        let size = line.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size, 16).map_err(|_| other("bad chunk size"))?;
        b = &b[eol + 2..];
        if size == 0 {
            return Ok(Some(out));
        }
        if b.len() < size + 2 {
            return Ok(None);
        }
        out.extend_from_slice(&b[..size]);
        b = &b[size + 2..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn framings() {
        let r = parse(
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
            false,
            false,
        )
        .unwrap()
        .unwrap();
        assert_eq!(r.status(), 200);
        assert!(parse(
            b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok",
            false,
            false
        )
        .unwrap()
        .is_none());
        let c = b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n1;x\r\nc\r\n0\r\n\r\n";
        let r = parse(c, false, false).unwrap().unwrap();
        assert_eq!(r.status(), 201);
        assert!(parse(&c[..c.len() - 7], false, false).unwrap().is_none());
        let h = b"HTTP/1.1 200 OK\r\nReplay-Nonce: abc\r\nContent-Length: 9\r\n\r\n";
        let r = parse(h, false, true).unwrap().unwrap();
        assert_eq!(r.headers()["replay-nonce"], "abc");
        assert!(parse(b"HTTP/1.1 200 OK\r\n\r\nall", false, false)
            .unwrap()
            .is_none());
        assert!(parse(b"HTTP/1.1 200 OK\r\n\r\nall", true, false)
            .unwrap()
            .is_some());
        assert_eq!(dechunk(b"zz\r\n").map_err(|_| ()), Err(()));
    }

    #[test]
    fn retry_after_in_seconds_or_as_a_date() {
        let now = httpdate::parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT").unwrap();
        assert_eq!(retry_after("120", now), Some(Duration::from_secs(120)));
        assert_eq!(retry_after(" 0 ", now), Some(Duration::ZERO));
        assert_eq!(
            retry_after("Sun, 06 Nov 1994 08:59:37 GMT", now),
            Some(Duration::from_secs(600))
        );
        // A date already past: now.
        assert_eq!(
            retry_after("Sun, 06 Nov 1994 08:00:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(retry_after("99999999", now), Some(MAX_RETRY_AFTER));
        assert_eq!(retry_after("soon", now), None);
        assert_eq!(retry_after("-5", now), None);
    }

    /// A local HTTPS server answering each connection with the next of `answers`.
    fn serve(answers: Vec<&'static str>) -> (u16, std::path::PathBuf) {
        let rcgen::CertifiedKey { cert, key_pair } =
            rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        let ca = std::env::temp_dir().join(format!("ringx-acme-http-{}.pem", std::process::id()));
        std::fs::write(&ca, cert.pem()).unwrap();
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let cfg = Arc::new(
            rustls::ServerConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_no_client_auth()
                .with_single_cert(
                    vec![cert.der().clone()],
                    rustls_pki_types::PrivateKeyDer::Pkcs8(key_pair.serialize_der().into()),
                )
                .unwrap(),
        );
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for answer in answers {
                let (tcp, _) = l.accept().unwrap();
                let conn = rustls::ServerConnection::new(cfg.clone()).unwrap();
                let mut s = StreamOwned::new(conn, tcp);
                let mut got = Vec::new();
                let mut b = [0u8; 1024];
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut b) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => got.extend_from_slice(&b[..n]),
                    }
                }
                let _ = s.write_all(answer.as_bytes());
                s.conn.send_close_notify();
                let _ = s.flush();
            }
        });
        (port, ca)
    }

    /// instant-acme sees no headers of an error response: the client notes its Retry-After
    /// for the thread that asked, and forgets it on the next response without one.
    #[test]
    fn the_last_responses_retry_after_is_noted_for_the_thread() {
        let (port, ca) = serve(vec![
            "HTTP/1.1 429 Too Many Requests\r\nRetry-After: 30\r\n\
             Content-Type: application/problem+json\r\nContent-Length: 2\r\n\r\n{}",
            "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
        ]);
        let client = Client::new(Some(&ca)).unwrap();
        let get = || {
            let req = http::Request::builder()
                .uri(format!("https://localhost:{port}/new-order"))
                .body(BodyWrapper::from(Vec::new()))
                .unwrap();
            crate::block::block_on(client.request(req)).unwrap()
        };
        get();
        assert_eq!(last_retry_after(), Some(Duration::from_secs(30)));
        // Another thread has its own.
        assert_eq!(std::thread::spawn(last_retry_after).join().unwrap(), None);
        get();
        assert_eq!(last_retry_after(), None);
        let _ = std::fs::remove_file(ca);
    }
}
