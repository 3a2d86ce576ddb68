//! The HTTP/1.1 origin server as a zone [`Handler`]: parse what arrives (straight from the
//! receive buffers when a request is complete in one segment), route, answer in order,
//! enforce limits and timeouts, drain on shutdown.

use std::borrow::Cow;
use std::fs::File;
use std::mem::MaybeUninit;
use std::rc::Rc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use ringx_engine::{ConnId, Handler, Io, ListenerId, TimerWheel};
use ringx_http::{BodyDecoder, BodyKind, BodyLimits, DateCache, Method, Parsed, Request};

use super::respond::{self, ConnHdr};
use super::route::{Action, Routes};
use super::settings::Settings;
use super::static_files::{self, FileReply};

/// Commands from the control thread, read when the zone is woken (0 = run).
pub const CMD_DRAIN: u8 = 1;

pub struct ZoneCtl {
    pub cmd: AtomicU8,
}

/// Queued output above which a connection stops reading (pipelined requests wait).
const OUT_HIGH_WATER: u64 = 256 * 1024;
/// Header storage on the stack per parse.
const MAX_HEADERS_STACK: usize = 128;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Between requests, nothing buffered.
    Idle,
    /// Part of a request head has arrived.
    Head,
    /// Reading (and discarding) a request body; the response waits in `pending`.
    Body,
    /// The last response is queued; reading and discarding until the client closes.
    Lingering,
    Closed,
}

struct Pending {
    bytes: Vec<u8>,
    file: Option<(Rc<File>, u64, u64)>,
    close: bool,
}

struct HttpConn {
    gen: u32,
    listener: u32,
    phase: Phase,
    inbuf: Vec<u8>,
    deadline: Instant,
    in_wheel: bool,
    requests: u32,
    paused: bool,
    eof: bool,
    body: Option<BodyDecoder>,
    pending: Option<Pending>,
    last_out: u64,
}

impl HttpConn {
    fn new(now: Instant) -> Self {
        HttpConn {
            gen: 0,
            listener: 0,
            phase: Phase::Closed,
            inbuf: Vec::new(),
            deadline: now,
            in_wheel: false,
            requests: 0,
            paused: false,
            eof: false,
            body: None,
            pending: None,
            last_out: 0,
        }
    }
}

/// Sent to the control thread once the zone runs.
pub enum ZoneEvent {
    Ready,
}

pub struct HttpZone {
    id: usize,
    routes: Arc<Routes>,
    set: Arc<Settings>,
    ctl: Arc<ZoneCtl>,
    conns: Vec<HttpConn>,
    wheel: TimerWheel,
    date: DateCache,
    /// When the wall clock's next second starts: the Date header changes then.
    date_next: Instant,
    active: usize,
    draining: bool,
    ready: Option<mpsc::Sender<ZoneEvent>>,
}

/// What processing a request decided about the rest of the input.
enum Next {
    Continue,
    Stop,
}

impl HttpZone {
    pub fn new(
        id: usize,
        routes: Arc<Routes>,
        set: Arc<Settings>,
        ctl: Arc<ZoneCtl>,
        ready: mpsc::Sender<ZoneEvent>,
    ) -> Self {
        let now = Instant::now();
        let mut date = DateCache::new();
        date.update(SystemTime::now());
        HttpZone {
            id,
            routes,
            set,
            ctl,
            conns: Vec::new(),
            wheel: TimerWheel::new(now, Duration::from_millis(100), 2048),
            date,
            date_next: now,
            active: 0,
            draining: false,
            ready: Some(ready),
        }
    }

    /// Keeps the Date header current with one comparison per call: the wall clock is read
    /// only when a new second has begun.
    fn refresh_date(&mut self, now: Instant) {
        if now >= self.date_next {
            let wall = SystemTime::now();
            self.date.update(wall);
            let sub = wall
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos());
            self.date_next = now + Duration::from_nanos(1_000_000_000 - sub as u64);
        }
    }

    fn conn(&mut self, c: ConnId) -> &mut HttpConn {
        &mut self.conns[c.index()]
    }

    fn set_deadline(&mut self, io: &mut Io, c: ConnId, at: Instant) {
        let conn = &mut self.conns[c.index()];
        conn.deadline = at;
        if !conn.in_wheel {
            conn.in_wheel = true;
            self.wheel.insert(at, c.0, conn.gen);
            io.timer_at(at);
        }
    }

    fn conn_hdr(version11: bool, keep: bool) -> ConnHdr {
        match (keep, version11) {
            (false, _) => ConnHdr::Close,
            (true, true) => ConnHdr::Keep11,
            (true, false) => ConnHdr::Keep10,
        }
    }

    /// Answers with an error page and closes (lingering) after it.
    fn fail(&mut self, io: &mut Io, c: ConnId, status: u16, head_only: bool) {
        if let Some(out) = io.out_buf(c) {
            respond::error(
                out,
                status,
                &self.routes.server_header,
                &self.routes.server_token,
                &self.date,
                ConnHdr::Close,
                "",
                head_only,
            );
        }
        let conn = self.conn(c);
        conn.body = None;
        conn.pending = None;
        self.linger(io, c);
    }

    /// Half-closes after the queued output and discards input until the client closes, so
    /// unread input cannot turn into a reset that destroys the response.
    fn linger(&mut self, io: &mut Io, c: ConnId) {
        self.conn(c).phase = Phase::Lingering;
        self.conn(c).inbuf = Vec::new();
        io.shutdown_after_flush(c);
        let at = io.now() + self.set.lingering_timeout;
        self.set_deadline(io, c, at);
        if self.conn(c).eof {
            io.close_after_flush(c);
        }
    }

    /// Consumes what it can of `input`; returns the bytes consumed.
    fn process(&mut self, io: &mut Io, c: ConnId, input: &[u8]) -> usize {
        let mut pos = 0;
        loop {
            let conn = &mut self.conns[c.index()];
            if conn.paused {
                break;
            }
            match conn.phase {
                Phase::Lingering | Phase::Closed => return input.len(),
                Phase::Body => {
                    let dec = conn.body.as_mut().expect("a body phase has a decoder");
                    match dec.decode(&input[pos..]) {
                        Err(_) => {
                            self.fail(io, c, 400, false);
                            return input.len();
                        }
                        Ok(d) => {
                            pos += d.consumed;
                            if dec.received() > self.set.max_body {
                                self.fail(io, c, 413, false);
                                return input.len();
                            }
                            if d.done {
                                self.finish_body(io, c);
                                continue;
                            }
                            if d.consumed == 0 || pos == input.len() {
                                let at = io.now() + self.set.body_timeout;
                                self.conns[c.index()].deadline = at;
                                break;
                            }
                        }
                    }
                }
                Phase::Idle | Phase::Head => {
                    if pos == input.len() {
                        break;
                    }
                    let mut storage =
                        [const { MaybeUninit::<httparse::Header>::uninit() }; MAX_HEADERS_STACK];
                    let n = self.set.limits.max_headers.min(MAX_HEADERS_STACK);
                    match ringx_http::parse_request_uninit(
                        &input[pos..],
                        &mut storage[..n],
                        &self.set.limits,
                    ) {
                        Ok(Parsed::Partial) => {
                            if conn.phase == Phase::Idle {
                                conn.phase = Phase::Head;
                                let at = io.now() + self.set.header_timeout;
                                self.set_deadline(io, c, at);
                            }
                            break;
                        }
                        Err(e) => {
                            self.fail(io, c, e.status, false);
                            return input.len();
                        }
                        Ok(Parsed::Complete(req)) => {
                            pos += req.head_len;
                            let more_input = pos < input.len();
                            match self.handle(io, c, &req, more_input) {
                                Next::Continue => continue,
                                Next::Stop => return input.len(),
                            }
                        }
                    }
                }
            }
        }
        pos
    }

    /// Routes one request and writes (or prepares) its response.
    fn handle(&mut self, io: &mut Io, c: ConnId, req: &Request, more_input: bool) -> Next {
        let set = self.set.clone();
        let conn = &mut self.conns[c.index()];
        conn.requests += 1;
        let head_only = req.method == Method::Head;
        let v11 = req.version == ringx_http::Version::Http11;
        let keep = req.keep_alive && !self.draining && conn.requests < set.keepalive_requests;
        let has_body = !matches!(req.body, BodyKind::None);
        if let BodyKind::Length(n) = req.body {
            if n > set.max_body {
                self.fail(io, c, 413, head_only);
                return Next::Stop;
            }
        }
        if req.method == Method::Connect {
            self.fail(io, c, 405, head_only);
            return Next::Stop;
        }
        let ch = Self::conn_hdr(v11, keep);
        let mut pending = Pending {
            bytes: Vec::new(),
            file: None,
            close: !keep,
        };
        let routes = self.routes.clone();
        {
            let out: &mut Vec<u8> = if has_body {
                &mut pending.bytes
            } else {
                match io.out_buf(c) {
                    Some(o) => o,
                    None => return Next::Stop,
                }
            };
            if req.path == "*" {
                // OPTIONS * (asterisk-form): what the server supports.
                respond::head(
                    out,
                    200,
                    &routes.server_header,
                    "Allow: GET, HEAD, POST, OPTIONS\r\n",
                    0,
                    &self.date,
                    ch,
                );
            } else {
                match clean_path(req.path) {
                    Err(()) => {
                        respond::error(
                            out,
                            400,
                            &routes.server_header,
                            &routes.server_token,
                            &self.date,
                            ConnHdr::Close,
                            "",
                            head_only,
                        );
                        pending.close = true;
                    }
                    Ok(path) => {
                        let server =
                            routes.server(self.conns[c.index()].listener as usize, req.host_name());
                        match server.location(&path) {
                            None => respond::error(
                                out,
                                404,
                                &routes.server_header,
                                &routes.server_token,
                                &self.date,
                                ch,
                                "",
                                head_only,
                            ),
                            Some(loc) => match &loc.action {
                                Action::Return(canned) => {
                                    respond::canned(out, canned, &self.date, ch, head_only)
                                }
                                Action::Files(root) => {
                                    pending.file = self.files(out, root, &path, req, ch, head_only);
                                }
                            },
                        }
                    }
                }
            }
        }
        if has_body {
            let conn = &mut self.conns[c.index()];
            conn.body = Some(BodyDecoder::new(req.body, BodyLimits::default()));
            conn.pending = Some(pending);
            conn.phase = Phase::Body;
            if req.expect_continue {
                io.write(c, b"HTTP/1.1 100 Continue\r\n\r\n");
            }
            let at = io.now() + set.body_timeout;
            self.set_deadline(io, c, at);
            return Next::Continue;
        }
        if let Some((f, off, len)) = pending.file.take() {
            io.send_file(c, f, off, len);
        }
        self.after_response(io, c, pending.close, more_input)
    }

    /// Static files: writes the head (and error pages) into `out`, returns the body part.
    fn files(
        &self,
        out: &mut Vec<u8>,
        root: &super::route::FileRoot,
        path: &str,
        req: &Request,
        ch: ConnHdr,
        head_only: bool,
    ) -> Option<(Rc<File>, u64, u64)> {
        let r = &self.routes;
        match static_files::serve(root, path, req.query, req) {
            FileReply::Body {
                status,
                file,
                off,
                len,
                headers,
            } => {
                respond::head(out, status, &r.server_header, &headers, len, &self.date, ch);
                (!head_only).then_some((file, off, len))
            }
            FileReply::NotModified { headers } => {
                respond::head(out, 304, &r.server_header, &headers, 0, &self.date, ch);
                None
            }
            FileReply::Redirect(loc) => {
                let extra = format!("Location: {loc}\r\n");
                respond::error(
                    out,
                    301,
                    &r.server_header,
                    &r.server_token,
                    &self.date,
                    ch,
                    &extra,
                    head_only,
                );
                None
            }
            FileReply::Unsatisfiable { size } => {
                let extra = format!("Content-Range: bytes */{size}\r\n");
                respond::error(
                    out,
                    416,
                    &r.server_header,
                    &r.server_token,
                    &self.date,
                    ch,
                    &extra,
                    head_only,
                );
                None
            }
            FileReply::Error(405) => {
                respond::error(
                    out,
                    405,
                    &r.server_header,
                    &r.server_token,
                    &self.date,
                    ch,
                    "Allow: GET, HEAD\r\n",
                    head_only,
                );
                None
            }
            FileReply::Error(st) => {
                respond::error(
                    out,
                    st,
                    &r.server_header,
                    &r.server_token,
                    &self.date,
                    ch,
                    "",
                    head_only,
                );
                None
            }
        }
    }

    /// The body was read completely: send the response that waited for it.
    fn finish_body(&mut self, io: &mut Io, c: ConnId) {
        let conn = &mut self.conns[c.index()];
        conn.body = None;
        conn.phase = Phase::Idle;
        let Some(mut p) = conn.pending.take() else {
            return;
        };
        if self.draining && !p.close {
            // The response was prepared before the drain began: it must now say close.
            mark_close(&mut p.bytes);
            p.close = true;
        }
        io.write(c, &p.bytes);
        if let Some((f, off, len)) = p.file {
            io.send_file(c, f, off, len);
        }
        self.after_response(io, c, p.close, true);
    }

    fn after_response(&mut self, io: &mut Io, c: ConnId, close: bool, more_input: bool) -> Next {
        let close = close || self.draining;
        if close {
            if more_input || self.conns[c.index()].requests == 0 {
                self.linger(io, c);
            } else {
                // Everything the client sent was read: nothing can turn the close into a reset.
                self.conns[c.index()].phase = Phase::Lingering;
                io.close_after_flush(c);
                let at = io.now() + self.set.send_timeout;
                self.set_deadline(io, c, at);
            }
            return Next::Stop;
        }
        let at = io.now() + self.set.keepalive_timeout;
        let conn = &mut self.conns[c.index()];
        conn.phase = Phase::Idle;
        self.set_deadline(io, c, at);
        if io.pending(c) > OUT_HIGH_WATER {
            self.conns[c.index()].paused = true;
            io.pause_recv(c);
            io.notify_when_flushed(c);
            return Next::Continue; // `process` sees `paused` and keeps the rest buffered
        }
        Next::Continue
    }

    /// Runs `process` over the connection's buffered input.
    fn process_buffered(&mut self, io: &mut Io, c: ConnId) {
        let buf = std::mem::take(&mut self.conns[c.index()].inbuf);
        let used = self.process(io, c, &buf);
        let conn = &mut self.conns[c.index()];
        if conn.phase == Phase::Closed {
            return;
        }
        let mut buf = buf;
        buf.drain(..used);
        if conn.inbuf.is_empty() {
            conn.inbuf = buf;
        } else {
            buf.extend_from_slice(&conn.inbuf);
            conn.inbuf = buf;
        }
        if conn.eof && !conn.paused && conn.phase != Phase::Body {
            io.close_after_flush(c);
        }
    }

    fn expire(&mut self, io: &mut Io, c: ConnId) {
        let pending = io.pending(c);
        if pending > 0 {
            // Still sending: close only if nothing moved for a whole send_timeout.
            let conn = &mut self.conns[c.index()];
            if pending != conn.last_out {
                conn.last_out = pending;
                let at = io.now() + self.set.send_timeout;
                self.set_deadline(io, c, at);
                return;
            }
            io.close(c);
            return;
        }
        match self.conns[c.index()].phase {
            Phase::Idle | Phase::Lingering | Phase::Closed => io.close(c),
            Phase::Head | Phase::Body => self.fail(io, c, 408, false),
        }
    }

    fn start_drain(&mut self, io: &mut Io) {
        if self.draining {
            return;
        }
        self.draining = true;
        io.stop_listening();
        for (i, conn) in self.conns.iter().enumerate() {
            let c = ConnId(i as u32);
            if conn.phase == Phase::Idle && conn.inbuf.is_empty() && io.pending(c) == 0 {
                io.close(c);
            }
        }
        tracing::debug!(zone = self.id, active = self.active, "draining");
        io.timer_at(io.now() + Duration::from_millis(100));
        if self.active == 0 {
            io.exit();
        }
    }
}

/// Turns a prepared keep-alive response head into one that announces the close.
fn mark_close(resp: &mut Vec<u8>) {
    const KEEP10: &[u8] = b"Connection: keep-alive\r\n";
    let Some(end) = resp.windows(4).position(|w| w == b"\r\n\r\n") else {
        return;
    };
    let head = &resp[..end + 2];
    if let Some(i) = head.windows(KEEP10.len()).position(|w| w == KEEP10) {
        resp.splice(
            i..i + KEEP10.len(),
            b"Connection: close\r\n".iter().copied(),
        );
    } else {
        resp.splice(end + 2..end + 2, b"Connection: close\r\n".iter().copied());
    }
}

/// Percent-decodes and normalises a request path; borrows it when it is already clean.
fn clean_path(raw: &str) -> Result<Cow<'_, str>, ()> {
    let simple = raw.starts_with('/')
        && !raw.contains('%')
        && !raw.contains("//")
        && !raw.contains("/.")
        && !raw.contains('\0');
    if simple {
        return Ok(Cow::Borrowed(raw));
    }
    ringx_http::normalize_path(raw)
        .map(Cow::Owned)
        .map_err(|_| ())
}

impl Handler for HttpZone {
    fn on_accept(&mut self, io: &mut Io, c: ConnId, listener: ListenerId) {
        let now = io.now();
        if self.conns.len() <= c.index() {
            self.conns.resize_with(c.index() + 1, || HttpConn::new(now));
        }
        self.active += 1;
        let conn = &mut self.conns[c.index()];
        conn.gen = conn.gen.wrapping_add(1);
        conn.listener = listener.0;
        conn.phase = Phase::Idle;
        conn.inbuf.clear();
        conn.requests = 0;
        conn.paused = false;
        conn.eof = false;
        conn.body = None;
        conn.pending = None;
        conn.last_out = 0;
        conn.in_wheel = false;
        let at = now + self.set.header_timeout;
        self.set_deadline(io, c, at);
        if self.draining {
            io.close(c);
        }
    }

    fn on_data(&mut self, io: &mut Io, c: ConnId, data: &[u8]) {
        self.refresh_date(io.now());
        let conn = &mut self.conns[c.index()];
        match conn.phase {
            Phase::Lingering | Phase::Closed => return,
            _ => {}
        }
        if conn.paused {
            conn.inbuf.extend_from_slice(data);
            if conn.inbuf.len() > self.set.max_buffered {
                io.close(c);
            }
            return;
        }
        if conn.inbuf.is_empty() {
            // The common case: parse straight from the receive buffer, keep only a tail.
            let used = self.process(io, c, data);
            let conn = &mut self.conns[c.index()];
            if used < data.len() && conn.phase != Phase::Closed && conn.phase != Phase::Lingering {
                conn.inbuf.extend_from_slice(&data[used..]);
            }
        } else {
            conn.inbuf.extend_from_slice(data);
            self.process_buffered(io, c);
        }
        let conn = &self.conns[c.index()];
        if conn.inbuf.len() > self.set.max_buffered {
            // Only reachable while paused or with a huge partial head (431 handles that).
            io.close(c);
        }
    }

    fn on_eof(&mut self, io: &mut Io, c: ConnId) {
        let conn = &mut self.conns[c.index()];
        conn.eof = true;
        match conn.phase {
            Phase::Lingering => {
                if io.pending(c) == 0 {
                    io.close(c)
                } else {
                    io.close_after_flush(c)
                }
            }
            Phase::Body | Phase::Head => io.close(c),
            Phase::Idle if conn.paused => {} // finishes in on_flushed
            _ => io.close_after_flush(c),
        }
    }

    fn on_flushed(&mut self, io: &mut Io, c: ConnId) {
        let conn = &mut self.conns[c.index()];
        if conn.paused {
            conn.paused = false;
            if !conn.eof {
                io.resume_recv(c);
            }
            self.process_buffered(io, c);
        }
    }

    fn on_closed(&mut self, io: &mut Io, c: ConnId, err: Option<std::io::Error>) {
        if let Some(e) = err {
            tracing::debug!(zone = self.id, conn = c.0, "connection error: {e}");
        }
        let conn = &mut self.conns[c.index()];
        conn.phase = Phase::Closed;
        conn.body = None;
        conn.pending = None;
        if conn.inbuf.capacity() > 64 * 1024 {
            conn.inbuf = Vec::new();
        } else {
            conn.inbuf.clear();
        }
        self.active -= 1;
        if self.draining && self.active == 0 {
            io.exit();
        }
    }

    fn on_timer(&mut self, io: &mut Io) -> Option<Duration> {
        if let Some(tx) = self.ready.take() {
            let _ = tx.send(ZoneEvent::Ready);
        }
        let now = io.now();
        self.refresh_date(now);
        let mut due = Vec::new();
        let conns = &mut self.conns;
        self.wheel.advance(now, |wheel, key, gen| {
            let Some(conn) = conns.get_mut(key as usize) else {
                return;
            };
            if conn.gen != gen || conn.phase == Phase::Closed {
                return;
            }
            if conn.deadline > now {
                wheel.insert(conn.deadline, key, gen);
            } else {
                conn.in_wheel = false;
                due.push(ConnId(key));
            }
        });
        for c in due {
            self.expire(io, c);
        }
        let next = self
            .wheel
            .next_due(now)
            .map(|d| d.max(Duration::from_millis(10)));
        if self.draining {
            return Some(next.map_or(Duration::from_millis(100), |d| {
                d.min(Duration::from_millis(100))
            }));
        }
        next
    }

    fn on_wake(&mut self, io: &mut Io) {
        if self.ctl.cmd.load(Ordering::Acquire) == CMD_DRAIN {
            self.start_drain(io);
        }
    }
}
