//! The access log: nginx's `combined` format or JSON lines.
//!
//! Each zone formats lines into its own buffer and hands full buffers (over 32 KiB, or every
//! 100 ms) to one writer thread through a channel: a zone never calls `write(2)` and never
//! waits for the disk. If the writer falls behind by more than [`MAX_QUEUED`] bytes, zones
//! drop lines (counted) rather than grow without bound. SIGUSR1 reopens the file (logrotate's
//! `postrotate`), a reload may point it elsewhere.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::net::SocketAddr;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant, SystemTime};

use ringx_config::ops::LogFormat;

/// A zone hands its buffer over beyond this size...
pub const FLUSH_BYTES: usize = 32 * 1024;
/// ...or this long after its first line.
pub const FLUSH_EVERY: Duration = Duration::from_millis(100);
/// Bytes queued for the writer beyond which zones drop lines.
pub const MAX_QUEUED: usize = 64 << 20;

enum Msg {
    Data(Vec<u8>),
    Reopen,
    SetPath(Option<PathBuf>),
    Stop,
}

/// The writer thread and its controls (held by the control thread).
pub struct LogWriter {
    tx: mpsc::Sender<Msg>,
    queued: Arc<AtomicUsize>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// What a zone holds to hand buffers to the writer. `Send`, cloneable.
#[derive(Clone)]
pub struct LogSink {
    tx: mpsc::Sender<Msg>,
    queued: Arc<AtomicUsize>,
}

/// Opens (creates, appends to) a log file.
pub fn open(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o644)
        .custom_flags(libc::O_CLOEXEC)
        .open(path)
}

/// Opens a log file while privileges last and gives it to `owner` (uid, gid), the user the
/// server will run as, so that reopening it on SIGUSR1 works after the drop (nginx chowns its
/// logs to the worker user the same way).
pub fn open_for(path: &Path, owner: Option<(u32, u32)>) -> std::io::Result<File> {
    let f = open(path)?;
    if let Some((uid, gid)) = owner {
        std::os::unix::fs::fchown(&f, Some(uid), Some(gid))?;
    }
    Ok(f)
}

impl LogWriter {
    /// Starts the writer thread on `file`, opened at `path` (by [`open`], before privileges
    /// were dropped). `bytes` and `errors` count what it wrote and what failed.
    pub fn start(
        file: Option<File>,
        path: Option<PathBuf>,
        bytes: Arc<AtomicU64>,
        errors: Arc<AtomicU64>,
    ) -> std::io::Result<LogWriter> {
        let mut file = file;
        let mut path = path;
        let (tx, rx) = mpsc::channel::<Msg>();
        let queued = Arc::new(AtomicUsize::new(0));
        let q = queued.clone();
        let thread = std::thread::Builder::new()
            .name("ringx-log".into())
            .spawn(move || {
                // A file that cannot be opened (after privileges were dropped, a rotation that
                // left no file in a directory this process cannot write) keeps the old one:
                // lines go on to the file logrotate moved rather than nowhere.
                let reopen = |path: &Option<PathBuf>, file: &mut Option<File>| {
                    let Some(p) = path else {
                        *file = None;
                        return;
                    };
                    match open(p) {
                        Ok(f) => *file = Some(f),
                        Err(e) => {
                            errors.fetch_add(1, Ordering::Relaxed);
                            let still = if file.is_some() {
                                "; still writing to the file open before"
                            } else {
                                ""
                            };
                            tracing::error!("access log {}: cannot open: {e}{still}", p.display());
                        }
                    }
                };
                for m in rx {
                    match m {
                        Msg::Data(buf) => {
                            q.fetch_sub(buf.len(), Ordering::Relaxed);
                            if let Some(f) = file.as_mut() {
                                match f.write_all(&buf) {
                                    Ok(()) => {
                                        bytes.fetch_add(buf.len() as u64, Ordering::Relaxed);
                                    }
                                    Err(e) => {
                                        errors.fetch_add(1, Ordering::Relaxed);
                                        tracing::warn!("access log write: {e}");
                                    }
                                }
                            }
                        }
                        Msg::Reopen => reopen(&path, &mut file),
                        Msg::SetPath(p) => {
                            if p != path {
                                path = p;
                                reopen(&path, &mut file);
                            }
                        }
                        Msg::Stop => break,
                    }
                }
            })?;
        Ok(LogWriter {
            tx,
            queued,
            thread: Some(thread),
        })
    }

    pub fn sink(&self) -> LogSink {
        LogSink {
            tx: self.tx.clone(),
            queued: self.queued.clone(),
        }
    }

    /// Reopens the file (after logrotate moved it).
    pub fn reopen(&self) {
        let _ = self.tx.send(Msg::Reopen);
    }

    /// Writes to `path` from now on (reload); `None`: stop writing.
    pub fn set_path(&self, path: Option<PathBuf>) {
        let _ = self.tx.send(Msg::SetPath(path));
    }

    /// Writes what was queued and stops the thread (at exit, after the zones' last flush).
    pub fn stop(&mut self) {
        let _ = self.tx.send(Msg::Stop);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl LogSink {
    /// Hands a buffer to the writer; false (buffer dropped) when the writer is too far behind.
    pub fn send(&self, buf: Vec<u8>) -> bool {
        let n = buf.len();
        if self.queued.load(Ordering::Relaxed) + n > MAX_QUEUED {
            return false;
        }
        self.queued.fetch_add(n, Ordering::Relaxed);
        if self.tx.send(Msg::Data(buf)).is_err() {
            self.queued.fetch_sub(n, Ordering::Relaxed);
            return false;
        }
        true
    }
}

/// The local time, formatted once per second for both formats.
pub struct LogClock {
    next: Instant,
    /// `10/Oct/2000:13:55:36 -0700`
    pub clf: String,
    /// `2000-10-10T13:55:36-07:00`
    pub iso: String,
}

impl Default for LogClock {
    fn default() -> Self {
        LogClock {
            next: Instant::now(),
            clf: String::new(),
            iso: String::new(),
        }
    }
}

impl LogClock {
    /// Brings the strings up to date with one comparison unless a new second has begun.
    pub fn update(&mut self, now: Instant) {
        if now < self.next && !self.clf.is_empty() {
            return;
        }
        let wall = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default();
        self.next = now + Duration::from_nanos(1_000_000_000 - wall.subsec_nanos() as u64);
        let t = wall.as_secs() as libc::time_t;
        // SAFETY: tm is plain data (all-zero is valid); localtime_r reads a live time_t and
        // writes the live tm.
        let tm = unsafe {
            let mut tm: libc::tm = std::mem::zeroed();
            libc::localtime_r(&t, &mut tm);
            tm
        };
        const MON: [&str; 12] = [
            "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
        ];
        let off = tm.tm_gmtoff / 60;
        let (sign, off) = if off < 0 { ('-', -off) } else { ('+', off) };
        let (oh, om) = (off / 60, off % 60);
        let year = tm.tm_year + 1900;
        self.clf = format!(
            "{:02}/{}/{year}:{:02}:{:02}:{:02} {sign}{oh:02}{om:02}",
            tm.tm_mday,
            MON[tm.tm_mon.clamp(0, 11) as usize],
            tm.tm_hour,
            tm.tm_min,
            tm.tm_sec
        );
        self.iso = format!(
            "{year}-{:02}-{:02}T{:02}:{:02}:{:02}{sign}{oh:02}:{om:02}",
            tm.tm_mon + 1,
            tm.tm_mday,
            tm.tm_hour,
            tm.tm_min,
            tm.tm_sec
        );
    }
}

/// What one line says.
pub struct Entry<'a> {
    pub client: Option<SocketAddr>,
    /// What the TLS handshake agreed (JSON: `ssl_protocol`, `ssl_cipher`,
    /// `ssl_session_reused`, `ssl_server_name`, `ssl_client_s_dn`, as nginx names them).
    pub tls: Option<&'a crate::transport::TlsInfo>,
    /// The request line as received (`GET /x HTTP/1.1`); empty when none was read.
    pub request: &'a [u8],
    pub status: u16,
    pub body_bytes: u64,
    pub referer: &'a [u8],
    pub user_agent: &'a [u8],
    pub request_time: Duration,
    pub zone: usize,
    /// The proxy cache's status (`HIT`, `MISS`, ...; empty: the location has no cache):
    /// nginx's `$upstream_cache_status`, a last quoted field of the combined format.
    pub cache: &'static str,
    /// The request's `$request_id` (JSON: `request_id`), the one its `proxy_set_header` and
    /// `add_header` sent, so a line can be matched with the upstream's logs.
    pub request_id: Option<[u8; 32]>,
}

/// Appends nginx's escaping of a variable: `"`, `\` and bytes outside printable ASCII as
/// `\xHH`; an empty value as `-` when `dash`.
fn clf_escape(out: &mut Vec<u8>, v: &[u8], dash: bool) {
    if v.is_empty() && dash {
        out.push(b'-');
        return;
    }
    for &b in v {
        if b == b'"' || b == b'\\' || !(0x20..0x7f).contains(&b) {
            out.extend_from_slice(format!("\\x{b:02X}").as_bytes());
        } else {
            out.push(b);
        }
    }
}

/// Appends a JSON string body (no quotes); bytes outside ASCII as `\u00XX` so the line is
/// always valid JSON.
fn json_escape(out: &mut Vec<u8>, v: &[u8]) {
    for &b in v {
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            0x20..=0x7e => out.push(b),
            _ => out.extend_from_slice(format!("\\u{b:04x}").as_bytes()),
        }
    }
}

/// Appends one line in `fmt`.
pub fn format(out: &mut Vec<u8>, fmt: LogFormat, clock: &LogClock, e: &Entry) {
    let addr = e
        .client
        .map_or_else(|| "-".to_string(), |a| a.ip().to_string());
    match fmt {
        LogFormat::Combined => {
            out.extend_from_slice(addr.as_bytes());
            out.extend_from_slice(b" - - [");
            out.extend_from_slice(clock.clf.as_bytes());
            out.extend_from_slice(b"] \"");
            clf_escape(out, e.request, false);
            out.extend_from_slice(format!("\" {} {} \"", e.status, e.body_bytes).as_bytes());
            clf_escape(out, e.referer, true);
            out.extend_from_slice(b"\" \"");
            clf_escape(out, e.user_agent, true);
            out.push(b'"');
            if !e.cache.is_empty() {
                out.extend_from_slice(b" \"");
                out.extend_from_slice(e.cache.as_bytes());
                out.push(b'"');
            }
            out.push(b'\n');
        }
        LogFormat::Json => {
            out.extend_from_slice(b"{\"time\":\"");
            out.extend_from_slice(clock.iso.as_bytes());
            out.extend_from_slice(b"\",\"remote_addr\":\"");
            out.extend_from_slice(addr.as_bytes());
            out.extend_from_slice(b"\",\"request\":\"");
            json_escape(out, e.request);
            out.extend_from_slice(
                format!(
                    "\",\"status\":{},\"body_bytes_sent\":{},\"request_time\":{:.3},\"http_referer\":\"",
                    e.status,
                    e.body_bytes,
                    e.request_time.as_secs_f64()
                )
                .as_bytes(),
            );
            json_escape(out, e.referer);
            out.extend_from_slice(b"\",\"http_user_agent\":\"");
            json_escape(out, e.user_agent);
            if let Some(t) = e.tls {
                out.extend_from_slice(b"\",\"ssl_protocol\":\"");
                out.extend_from_slice(t.protocol.as_bytes());
                out.extend_from_slice(b"\",\"ssl_cipher\":\"");
                out.extend_from_slice(t.cipher.as_bytes());
                out.extend_from_slice(if t.resumed {
                    b"\",\"ssl_session_reused\":\"r"
                } else {
                    b"\",\"ssl_session_reused\":\"."
                });
                out.extend_from_slice(b"\",\"ssl_server_name\":\"");
                json_escape(out, t.sni.as_deref().unwrap_or("").as_bytes());
                out.extend_from_slice(b"\",\"ssl_client_s_dn\":\"");
                json_escape(out, t.client_dn.as_deref().unwrap_or("").as_bytes());
            }
            if !e.cache.is_empty() {
                out.extend_from_slice(b"\",\"upstream_cache_status\":\"");
                out.extend_from_slice(e.cache.as_bytes());
            }
            if let Some(id) = &e.request_id {
                out.extend_from_slice(b"\",\"request_id\":\"");
                out.extend_from_slice(id);
            }
            out.extend_from_slice(format!("\",\"zone\":{}}}\n", e.zone).as_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clock() -> LogClock {
        LogClock {
            next: Instant::now(),
            clf: "10/Oct/2000:13:55:36 -0700".into(),
            iso: "2000-10-10T13:55:36-07:00".into(),
        }
    }

    fn entry<'a>(req: &'a [u8], ua: &'a [u8]) -> Entry<'a> {
        Entry {
            client: Some("127.0.0.1:5555".parse().unwrap()),
            tls: None,
            request: req,
            status: 200,
            body_bytes: 2326,
            referer: b"",
            user_agent: ua,
            request_time: Duration::from_millis(12),
            zone: 1,
            cache: "",
            request_id: None,
        }
    }

    #[test]
    fn combined_like_nginx() {
        let mut out = Vec::new();
        format(
            &mut out,
            LogFormat::Combined,
            &clock(),
            &entry(b"GET /a\"b HTTP/1.1", b"curl/8"),
        );
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "127.0.0.1 - - [10/Oct/2000:13:55:36 -0700] \"GET /a\\x22b HTTP/1.1\" 200 2326 \"-\" \"curl/8\"\n"
        );
    }

    /// A cached location's lines carry the cache status: a last quoted field in combined
    /// (as nginx's `"$upstream_cache_status"` appended to it), `upstream_cache_status` in JSON.
    #[test]
    fn the_cache_status_is_logged() {
        let e = Entry {
            cache: "HIT",
            ..entry(b"GET / HTTP/1.1", b"ua")
        };
        let mut out = Vec::new();
        format(&mut out, LogFormat::Combined, &clock(), &e);
        assert!(
            out.ends_with(b"\"-\" \"ua\" \"HIT\"\n"),
            "{}",
            String::from_utf8_lossy(&out)
        );
        let mut out = Vec::new();
        format(&mut out, LogFormat::Json, &clock(), &e);
        assert!(String::from_utf8(out)
            .unwrap()
            .contains(",\"upstream_cache_status\":\"HIT\","));
    }

    /// JSON lines carry the request's id; combined keeps nginx's fields only.
    #[test]
    fn the_request_id_is_logged_in_json() {
        let e = Entry {
            request_id: Some(*b"0123456789abcdef0123456789abcdef"),
            ..entry(b"GET / HTTP/1.1", b"ua")
        };
        let mut out = Vec::new();
        format(&mut out, LogFormat::Json, &clock(), &e);
        let s = String::from_utf8(out).unwrap();
        assert!(
            s.ends_with(",\"request_id\":\"0123456789abcdef0123456789abcdef\",\"zone\":1}\n"),
            "{s}"
        );
        let mut out = Vec::new();
        format(&mut out, LogFormat::Combined, &clock(), &e);
        assert!(!String::from_utf8(out).unwrap().contains("0123"));
    }

    #[test]
    fn json_is_valid_for_any_bytes() {
        let mut out = Vec::new();
        format(
            &mut out,
            LogFormat::Json,
            &clock(),
            &entry(b"GET /\xff\x01\"\\ HTTP/1.1", b"ua"),
        );
        let s = String::from_utf8(out).unwrap();
        assert!(s.ends_with("\"zone\":1}\n"), "{s}");
        assert!(
            s.contains("\"request\":\"GET /\\u00ff\\u0001\\\"\\\\ HTTP/1.1\""),
            "{s}"
        );
        assert!(s.contains("\"request_time\":0.012"), "{s}");
    }

    #[test]
    fn clock_formats() {
        let mut c = LogClock::default();
        c.update(Instant::now());
        assert_eq!(c.clf.len(), "10/Oct/2000:13:55:36 -0700".len(), "{}", c.clf);
        assert_eq!(c.iso.len(), "2000-10-10T13:55:36-07:00".len(), "{}", c.iso);
    }

    #[test]
    fn writer_writes_and_reopens() {
        let dir = std::env::temp_dir().join(format!("ringx-log-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("access.log");
        let bytes = Arc::new(AtomicU64::new(0));
        let f = open(&p).unwrap();
        let mut w =
            LogWriter::start(Some(f), Some(p.clone()), bytes.clone(), Arc::default()).unwrap();
        assert!(w.sink().send(b"one\n".to_vec()));
        std::thread::sleep(Duration::from_millis(50));
        std::fs::rename(&p, dir.join("access.log.1")).unwrap();
        w.reopen();
        assert!(w.sink().send(b"two\n".to_vec()));
        w.stop();
        assert_eq!(std::fs::read(dir.join("access.log.1")).unwrap(), b"one\n");
        assert_eq!(std::fs::read(&p).unwrap(), b"two\n");
        assert_eq!(bytes.load(Ordering::Relaxed), 8);
        let _ = std::fs::remove_dir_all(dir);
    }
}
