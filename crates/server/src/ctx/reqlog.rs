//! Counting and logging requests: [`RequestLog::request`] opens a record when a request head
//! has been read, [`RequestLog::status`] notes what the response writer reported when the
//! response head is committed, and [`RequestLog::end`] closes it (counts the response,
//! formats the access log line into the zone's buffer). A connection that closes with a
//! record open logs it then (499 if no response had begun, as nginx does).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ringx_config::ops::LogFormat;
use ringx_engine::{ConnId, Io};
use ringx_http::Request;

use super::base::Base;
use crate::accesslog::{self, LogClock, LogSink};
use crate::metrics::{bump, ZoneCounters};
use crate::response::Written;
use crate::rewrite::vars::new_request_id;

/// The open record of a request: what counting needs. Kept to four bytes so the records of
/// many connections share cache lines; what only the access log needs is in [`LogSlot`],
/// touched only with a log.
#[derive(Clone, Copy, Default)]
struct Slot {
    open: bool,
    /// The request's [`LogSlot`] was filled (the log may be switched on while it is open).
    logged: bool,
    status: u16,
}

/// What the access log needs of an open request.
#[derive(Default)]
struct LogSlot {
    /// The connection's bytes out (its transport's count, plaintext over TLS) when the
    /// request arrived, and the response head's length.
    out0: u64,
    head_len: u64,
    start: Option<Instant>,
    request: Vec<u8>,
    referer: Vec<u8>,
    user_agent: Vec<u8>,
    cache: &'static str,
    /// The request's `$request_id`, when it made one before the line was written.
    request_id: Option<[u8; 32]>,
}

/// A zone's request counters and access log buffer.
#[derive(Default)]
pub struct RequestLog {
    pub counters: Arc<ZoneCounters>,
    sink: Option<LogSink>,
    format: Option<LogFormat>,
    buf: Vec<u8>,
    flush_at: Option<Instant>,
    clock: LogClock,
    slots: Vec<Slot>,
    /// Filled only with an access log.
    logs: Vec<LogSlot>,
}

impl RequestLog {
    pub fn new(
        counters: Arc<ZoneCounters>,
        sink: Option<LogSink>,
        format: Option<LogFormat>,
    ) -> Self {
        RequestLog {
            counters,
            sink,
            format,
            buf: Vec::new(),
            flush_at: None,
            clock: LogClock::default(),
            slots: Vec::new(),
            logs: Vec::new(),
        }
    }

    /// Whether responses are logged (callers skip work only the log needs).
    #[inline]
    pub fn logging(&self) -> bool {
        self.format.is_some()
    }

    pub fn format(&self) -> Option<LogFormat> {
        self.format
    }

    /// Switches the log format (a reload); lines already buffered go out first.
    pub fn set_format(&mut self, f: Option<LogFormat>) {
        if f != self.format {
            self.flush();
            self.format = f;
        }
    }

    /// Publishes the number of open client connections.
    pub fn active(&self, n: usize) {
        self.counters.active.store(n as u64, Ordering::Relaxed);
    }

    fn slot(&mut self, c: ConnId) -> &mut Slot {
        let i = c.index();
        if self.slots.len() <= i {
            self.slots.resize_with(i + 1, Slot::default);
        }
        &mut self.slots[i]
    }

    fn log_slot(&mut self, c: ConnId) -> &mut LogSlot {
        let i = c.index();
        if self.logs.len() <= i {
            self.logs.resize_with(i + 1, LogSlot::default);
        }
        &mut self.logs[i]
    }

    /// A request head was read on `c`.
    pub fn request(&mut self, io: &Io, c: ConnId, req: &Request, b: &Base) {
        bump(&self.counters.requests, 1);
        let logging = self.logging();
        *self.slot(c) = Slot {
            open: true,
            logged: logging,
            status: 0,
        };
        if !logging {
            return;
        }
        let out0 = b.tr.bytes_out(io, c);
        let s = self.log_slot(c);
        s.head_len = 0;
        s.out0 = out0;
        s.start = Some(io.now());
        s.request.clear();
        s.request.extend_from_slice(req.method_str.as_bytes());
        s.request.push(b' ');
        s.request.extend_from_slice(req.target.as_bytes());
        s.request.extend_from_slice(match req.version {
            ringx_http::Version::Http10 => b" HTTP/1.0",
            _ => b" HTTP/1.1",
        });
        s.referer.clear();
        s.referer
            .extend_from_slice(req.header("referer").unwrap_or_default());
        s.user_agent.clear();
        s.user_agent
            .extend_from_slice(req.header("user-agent").unwrap_or_default());
        s.cache = "";
        s.request_id = None;
    }

    /// The `$request_id` of the request in progress on `c`.
    pub fn request_id(&mut self, c: ConnId, id: [u8; 32]) {
        if self.logging() {
            self.log_slot(c).request_id = Some(id);
        }
    }

    /// The proxy cache's status for the request in progress on `c` (for the log).
    pub fn cache_status(&mut self, c: ConnId, status: &'static str) {
        if self.logging() {
            self.log_slot(c).cache = status;
        }
    }

    /// The response head was committed, as its writer reported it.
    pub fn status(&mut self, io: &Io, c: ConnId, w: Written, b: &Base) {
        let logging = self.logging();
        let s = self.slot(c);
        let fill = !s.open || !s.logged;
        s.open = true;
        s.status = w.status;
        if !logging {
            s.logged &= !fill; // an answer with no request read has nothing for the log
            return;
        }
        s.logged = true;
        let head_len = u64::from(w.head_len);
        let (now, out0) = (io.now(), b.tr.bytes_out(io, c));
        let s = self.log_slot(c);
        if fill {
            // An answer with no request read (400, 408 on a partial head...), or a request
            // read before the log was switched on.
            s.out0 = out0.saturating_sub(head_len);
            s.start = Some(now);
            s.request.clear();
            s.referer.clear();
            s.user_agent.clear();
            s.cache = "";
            s.request_id = None;
        }
        s.head_len = head_len;
    }

    /// The response is complete (queued): count it, log it, with the connection's client
    /// address and TLS parameters.
    pub fn end(&mut self, io: &mut Io, c: ConnId, b: &Base, zone: usize) {
        let Some(s) = self.slots.get_mut(c.index()) else {
            return;
        };
        if !s.open {
            return;
        }
        s.open = false;
        let logged = s.logged;
        let status = if s.status == 0 { 499 } else { s.status };
        self.counters.response(status);
        let Some(fmt) = self.format else { return };
        if !logged {
            return; // it ended before anything of it was recorded for the log
        }
        let now = io.now();
        let bytes_out = b.tr.bytes_out(io, c);
        // `logged`: `request` or `status` filled this request's log slot.
        // Taken out while its line is written (and put back: its vectors keep capacity).
        let s = std::mem::take(&mut self.logs[c.index()]);
        let body = bytes_out.saturating_sub(s.out0).saturating_sub(s.head_len);
        let e = accesslog::Entry {
            client: match (b.real_ip, b.addr) {
                (Some(ip), a) => Some(std::net::SocketAddr::new(ip, a.map_or(0, |a| a.port()))),
                (None, a) => a,
            },
            tls: b.tr.tls_info(),
            request: &s.request,
            status,
            body_bytes: body,
            referer: &s.referer,
            user_agent: &s.user_agent,
            request_time: s
                .start
                .map_or(Duration::ZERO, |t| now.saturating_duration_since(t)),
            zone,
            cache: s.cache,
            // A request that had no id by now (one refused before it was routed) gets one as
            // nginx makes `$request_id` on its first use, the log's.
            request_id: match fmt {
                LogFormat::Json => Some(s.request_id.unwrap_or_else(new_request_id)),
                LogFormat::Combined => None,
            },
        };
        self.write_line(io, fmt, &e);
        self.logs[c.index()] = s;
    }

    /// A request read on an HTTP/2 stream (its log record is the stream's own).
    pub fn stream_request(&mut self) {
        bump(&self.counters.requests, 1);
        bump(&self.counters.h2_requests, 1);
    }

    /// An HTTP/2 stream's response is complete (or cut): counted, and logged with what the
    /// stream kept (`e`: None when it kept nothing, the log being off).
    pub fn stream_end(&mut self, io: &mut Io, e: Option<accesslog::Entry>, status: u16) {
        self.counters.response(status);
        if let (Some(fmt), Some(e)) = (self.format, e) {
            self.write_line(io, fmt, &e);
        }
    }

    /// Formats one access log line into the buffer, handed over when full or due.
    fn write_line(&mut self, io: &mut Io, fmt: LogFormat, e: &accesslog::Entry) {
        let now = io.now();
        self.clock.update(now);
        accesslog::format(&mut self.buf, fmt, &self.clock, e);
        if self.buf.len() >= accesslog::FLUSH_BYTES {
            self.flush();
        } else if self.flush_at.is_none() {
            let at = now + accesslog::FLUSH_EVERY;
            self.flush_at = Some(at);
            io.timer_at(at);
        }
    }

    /// Timer work: hands the buffer over when it is due. Returns when it is due otherwise,
    /// for the zone's next timer turn: a turn that came early for another deadline has
    /// consumed the `timer_at` asked for it (the engine keeps the earliest request only).
    pub fn tick(&mut self, now: Instant) -> Option<Instant> {
        if self.flush_at.is_some_and(|t| t <= now) {
            self.flush();
        }
        self.flush_at
    }

    /// Hands the buffer to the writer thread.
    pub fn flush(&mut self) {
        self.flush_at = None;
        if self.buf.is_empty() {
            return;
        }
        let buf = std::mem::replace(
            &mut self.buf,
            Vec::with_capacity(accesslog::FLUSH_BYTES * 2),
        );
        let lines = buf.iter().filter(|&&b| b == b'\n').count() as u64;
        let sent = self.sink.as_ref().is_some_and(|s| s.send(buf));
        if sent {
            bump(&self.counters.log_lines, lines);
        } else {
            bump(&self.counters.log_dropped, lines);
        }
    }

    /// The buffered lines, for tests.
    #[cfg(test)]
    pub fn buffered(&self) -> &[u8] {
        &self.buf
    }
}

impl Drop for RequestLog {
    fn drop(&mut self) {
        self.flush();
    }
}
