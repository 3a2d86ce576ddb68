//! Operations on a zone: counters and the access log for each request, control messages
//! from the control thread, and configuration reloads applied at a safe point.
//!
//! **Requests.** [`HttpZone::obs_request`] opens a record when a request head has been read,
//! [`HttpZone::obs_status`] notes the status when the response head is committed, and
//! [`HttpZone::obs_end`] closes it (counts the response, formats the access log line into the
//! zone's buffer). A connection that closes with a record open logs it then (499 if no
//! response had begun, as nginx does).
//!
//! **Reloads.** The control thread parses and validates the new configuration, compiles it
//! and binds new listen addresses, then sends each zone a [`ReloadMsg`]. The zone swaps its
//! routes, settings and upstreams between two callbacks once nothing in flight depends on the
//! old ones: connections on a removed address must be gone (idle ones are closed at once,
//! busy ones finish their request and close), and when the upstreams change, no upstream
//! connection may remain (idle ones are closed; requests being proxied finish first). Until
//! then the old configuration serves, requests in flight included. Past `drain_timeout` the
//! connections that still hold the swap back are closed.

use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use ringx_engine::{ConnId, Io, ListenerId};
use ringx_http::Request;

use super::upconn::UpState;
use super::{HttpZone, Phase, ZoneEvent, CMD_DRAIN};
use crate::accesslog::{self, LogClock, LogSink};
use crate::metrics::{bump, ZoneCounters};
use crate::route::Routes;
use crate::settings::Settings;
use crate::upstream::pools::ZoneUpstreams;
use crate::upstream::Upstreams;
use ringx_config::ops::LogFormat;

/// A driver listener whose address is not (or no longer) served.
const NO_ROUTE: u32 = u32::MAX;
/// During a drain, idle keep-alive connections get this long for one more request (answered
/// with `Connection: close`) before they are closed: closing them at once would race with a
/// request the client already sent.
pub(super) const DRAIN_IDLE_GRACE: Duration = Duration::from_millis(1000);
/// How often a zone re-checks a reload that waits for its safe point.
const RELOAD_POLL: Duration = Duration::from_millis(50);

/// Control commands and messages for a zone. `cmd` and the inbox are read when the zone is
/// woken ([`ringx_engine::Waker::wake`]).
pub struct ZoneCtl {
    pub cmd: AtomicU8,
    pub inbox: Mutex<Vec<ZoneMsg>>,
}

impl ZoneCtl {
    pub fn new() -> ZoneCtl {
        ZoneCtl {
            cmd: AtomicU8::new(0),
            inbox: Mutex::new(Vec::new()),
        }
    }
}

impl Default for ZoneCtl {
    fn default() -> Self {
        ZoneCtl::new()
    }
}

pub enum ZoneMsg {
    Reload(Box<ReloadMsg>),
}

/// A compiled configuration for one zone.
pub struct ReloadMsg {
    pub generation: u64,
    pub routes: Arc<Routes>,
    pub settings: Arc<Settings>,
    /// `Some`: the upstreams changed (to these); `None`: keep the zone's upstream state.
    pub upstreams: Option<Option<Arc<Upstreams>>>,
    /// This zone's sockets for addresses that were not served before.
    pub listeners: Vec<(SocketAddr, TcpListener)>,
    pub log: Option<LogFormat>,
    /// After this long, connections holding the swap back are closed.
    pub deadline: Duration,
}

/// The open record of a request: what counting needs. Four bytes, so that 500 connections'
/// records share 32 cache lines; what only the access log needs is in [`LogSlot`], touched
/// only with a log (a record of both, 112 bytes, was a cache miss per request at 500
/// connections).
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
    /// `Io::bytes_out` when the request arrived, and the response head's length.
    out0: u64,
    head_len: u64,
    start: Option<Instant>,
    request: Vec<u8>,
    referer: Vec<u8>,
    user_agent: Vec<u8>,
}

/// The zone's operations state (a field of [`HttpZone`]).
#[derive(Default)]
pub struct ZoneOps {
    pub counters: Arc<ZoneCounters>,
    sink: Option<LogSink>,
    format: Option<LogFormat>,
    buf: Vec<u8>,
    flush_at: Option<Instant>,
    clock: LogClock,
    slots: Vec<Slot>,
    /// Filled only with an access log.
    logs: Vec<LogSlot>,
    /// Per driver listener: its address, and the index of that address in `routes.listen`.
    laddrs: Vec<SocketAddr>,
    lmap: Vec<u32>,
    /// Listeners being closed by a pending reload.
    lclosed: Vec<bool>,
    events: Option<mpsc::Sender<ZoneEvent>>,
    reload: Option<(Box<ReloadMsg>, Instant)>,
}

impl ZoneOps {
    /// `listeners`: the addresses of the zone's listeners in registration order.
    pub fn new(
        counters: Arc<ZoneCounters>,
        sink: LogSink,
        format: Option<LogFormat>,
        listeners: Vec<SocketAddr>,
        events: mpsc::Sender<ZoneEvent>,
    ) -> ZoneOps {
        let mut ops = ZoneOps::default();
        ops.counters = counters;
        ops.sink = Some(sink);
        ops.format = format;
        ops.lclosed = vec![false; listeners.len()];
        ops.laddrs = listeners;
        ops.events = Some(events);
        ops
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

    /// Hands the buffer to the writer thread.
    fn flush(&mut self) {
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
}

impl Drop for ZoneOps {
    fn drop(&mut self) {
        self.flush();
    }
}

/// The status code of a serialised response head (`HTTP/1.1 200 ...`).
pub(super) fn status_of(resp: &[u8]) -> u16 {
    match resp.get(9..12) {
        Some(&[a, b, c]) if [a, b, c].iter().all(u8::is_ascii_digit) => {
            u16::from(a - b'0') * 100 + u16::from(b - b'0') * 10 + u16::from(c - b'0')
        }
        _ => 0,
    }
}

/// The length of a serialised response head, CRLF CRLF included.
pub(super) fn head_len_of(resp: &[u8]) -> u64 {
    // One SIMD pass with a searcher built once per thread: this runs for every response (a
    // `windows(4)` scan was 1.3% of a zone's CPU on 64-byte responses, a memchr per line about
    // 0.7%, and `memmem::find` builds a searcher per call, which costs as much on a 150-byte
    // head).
    thread_local! {
        static END: memchr::memmem::Finder<'static> = memchr::memmem::Finder::new(b"\r\n\r\n");
    }
    END.with(|f| f.find(resp)).map_or(resp.len(), |i| i + 4) as u64
}

impl HttpZone {
    /// Installs the operations state (counters, access log, listener map).
    pub fn set_ops(&mut self, ops: ZoneOps) {
        self.ops = ops;
        self.ops.lmap = self
            .ops
            .laddrs
            .iter()
            .map(|a| {
                self.routes
                    .listen
                    .iter()
                    .position(|x| x == a)
                    .map_or(NO_ROUTE, |i| i as u32)
            })
            .collect();
        self.ops
            .counters
            .generation
            .store(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// The index in `routes.listen` of what `listener` serves (`u32::MAX`: nothing now).
    pub(super) fn route_listener(&self, listener: ListenerId) -> u32 {
        match self.ops.lmap.get(listener.0 as usize) {
            Some(&i) => i,
            // Without a map (tests, echo), listeners are registered in routes order.
            None if self.ops.laddrs.is_empty() => listener.0,
            None => NO_ROUTE,
        }
    }

    pub(super) fn obs_conns(&self) {
        self.ops
            .counters
            .active
            .store(self.active as u64, Ordering::Relaxed);
    }

    /// Whether responses are logged (callers skip work only the log needs).
    pub(super) fn logging(&self) -> bool {
        self.ops.format.is_some()
    }

    /// A request head was read.
    pub(super) fn obs_request(&mut self, io: &Io, c: ConnId, req: &Request) {
        bump(&self.ops.counters.requests, 1);
        let logging = self.logging();
        *self.ops.slot(c) = Slot {
            open: true,
            logged: logging,
            status: 0,
        };
        if !logging {
            return;
        }
        let out0 = io.bytes_out(c);
        let s = self.ops.log_slot(c);
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
    }

    /// The response head was committed: `status`, `head_len` bytes of head (read only with
    /// an access log).
    pub(super) fn obs_status(&mut self, io: &Io, c: ConnId, status: u16, head_len: u64) {
        let logging = self.logging();
        let s = self.ops.slot(c);
        let fill = !s.open || !s.logged;
        s.open = true;
        s.status = status;
        if !logging {
            s.logged &= !fill; // an answer with no request read has nothing for the log
            return;
        }
        s.logged = true;
        let (now, out0) = (io.now(), io.bytes_out(c));
        let s = self.ops.log_slot(c);
        if fill {
            // An answer with no request read (400, 408 on a partial head...), or a request
            // read before the log was switched on.
            s.out0 = out0.saturating_sub(head_len);
            s.start = Some(now);
            s.request.clear();
            s.referer.clear();
            s.user_agent.clear();
        }
        s.head_len = head_len;
    }

    /// Notes the status of a response serialised in `resp` (head first).
    pub(super) fn obs_response_bytes(&mut self, io: &Io, c: ConnId, resp: &[u8]) {
        let head_len = if self.logging() { head_len_of(resp) } else { 0 };
        self.obs_status(io, c, status_of(resp), head_len);
    }

    /// The response is complete (queued): count it, log it.
    pub(super) fn obs_end(&mut self, io: &mut Io, c: ConnId) {
        let Some(s) = self.ops.slots.get_mut(c.index()) else {
            return;
        };
        if !s.open {
            return;
        }
        s.open = false;
        let logged = s.logged;
        let status = if s.status == 0 { 499 } else { s.status };
        self.ops.counters.response(status);
        let Some(fmt) = self.ops.format else { return };
        if !logged {
            return; // it ended before anything of it was recorded for the log
        }
        let now = io.now();
        let bytes_out = io.bytes_out(c);
        let ops = &mut self.ops;
        ops.clock.update(now);
        // `logged`: obs_request or obs_status filled this request's log slot.
        let s = &ops.logs[c.index()];
        let body = bytes_out.saturating_sub(s.out0).saturating_sub(s.head_len);
        let e = accesslog::Entry {
            client: self.conns.get(c.index()).and_then(|x| x.client),
            request: &s.request,
            status,
            body_bytes: body,
            referer: &s.referer,
            user_agent: &s.user_agent,
            request_time: s
                .start
                .map_or(Duration::ZERO, |t| now.saturating_duration_since(t)),
            zone: self.id,
        };
        accesslog::format(&mut ops.buf, fmt, &ops.clock, &e);
        if ops.buf.len() >= accesslog::FLUSH_BYTES {
            ops.flush();
        } else if ops.flush_at.is_none() {
            let at = now + accesslog::FLUSH_EVERY;
            ops.flush_at = Some(at);
            io.timer_at(at);
        }
    }

    /// A client connection closed: log a request left open.
    pub(super) fn obs_closed(&mut self, io: &mut Io, c: ConnId) {
        self.obs_end(io, c);
        self.obs_conns();
    }

    /// Timer work: flush the log buffer when due, publish the connector's counters, and try
    /// a pending reload.
    pub(super) fn ops_tick(&mut self, io: &mut Io) {
        let now = io.now();
        if self.ops.flush_at.is_some_and(|t| t <= now) {
            self.ops.flush();
        }
        let cc = self.connector.counters;
        let z = &self.ops.counters;
        z.connects_steered.store(cc.steered, Ordering::Relaxed);
        z.connects_kernel.store(cc.kernel_choice, Ordering::Relaxed);
        z.connect_failures.store(cc.failures, Ordering::Relaxed);
        if self.ops.reload.is_some() {
            self.try_reload(io);
        }
    }

    /// The zone was woken: drain, or messages in the inbox.
    pub(super) fn ops_wake(&mut self, io: &mut Io) {
        if self.ctl.cmd.load(Ordering::Acquire) == CMD_DRAIN {
            self.ops.flush();
            self.start_drain(io);
        }
        let msgs = std::mem::take(&mut *self.ctl.inbox.lock().unwrap_or_else(|e| e.into_inner()));
        for m in msgs {
            match m {
                ZoneMsg::Reload(r) => {
                    let deadline = io.now() + r.deadline;
                    if let Some((old, _)) = self.ops.reload.take() {
                        // A newer reload replaces one still waiting; its new sockets go.
                        tracing::debug!(zone = self.id, "reload {} superseded", old.generation);
                    }
                    self.ops.reload = Some((r, deadline));
                    self.try_reload(io);
                }
            }
        }
    }

    /// Applies the pending reload if nothing in flight depends on what it changes; else
    /// prepares (closes what can go) and checks again shortly.
    fn try_reload(&mut self, io: &mut Io) {
        let Some((msg, deadline)) = self.ops.reload.as_ref() else {
            return;
        };
        let now = io.now();
        let forced = now >= *deadline;
        let ups_change = msg.upstreams.is_some();
        let new_listen = msg.routes.listen.clone();
        // Stop accepting on addresses that are gone.
        for (id, addr) in self.ops.laddrs.iter().enumerate() {
            if !self.ops.lclosed[id] && !new_listen.contains(addr) {
                self.ops.lclosed[id] = true;
                io.close_listener(ListenerId(id as u32));
            }
        }
        let mut blocked = 0usize;
        for i in 0..self.conns.len() {
            let c = ConnId(i as u32);
            let conn = &mut self.conns[i];
            if conn.phase == Phase::Closed {
                continue;
            }
            let addr = self.routes.listen.get(conn.listener as usize);
            let removed = addr.is_none_or(|a| !new_listen.contains(a));
            let proxied =
                matches!(conn.phase, Phase::Proxy | Phase::Tunnel) || conn.stream.is_some();
            if !(removed || ups_change && proxied) {
                continue;
            }
            blocked += 1;
            let idle = conn.phase == Phase::Idle && conn.inbuf.is_empty() && io.pending(c) == 0;
            if idle || forced {
                io.close(c);
            } else if removed && conn.phase == Phase::Idle && conn.inbuf.is_empty() {
                io.close_after_flush(c); // its last response is still being sent
            } else if removed {
                // The request in progress is its last.
                conn.requests = conn.requests.max(u32::MAX - 1);
            }
        }
        if ups_change {
            for (i, u) in self.upc.iter().enumerate() {
                let Some(u) = u else { continue };
                blocked += 1;
                if u.state == UpState::Idle || (forced && u.state != UpState::Closing) {
                    io.close(ConnId(i as u32));
                }
            }
            // The pooled ones just closed must leave the pools too.
            if let Some(z) = self.ups.as_mut() {
                for p in &mut z.per {
                    for l in &mut p.idle {
                        l.clear();
                    }
                }
            }
        }
        if blocked > 0 {
            io.timer_at(now + RELOAD_POLL);
            return;
        }
        let Some((msg, _)) = self.ops.reload.take() else {
            return;
        };
        self.apply_reload(io, *msg);
    }

    fn apply_reload(&mut self, io: &mut Io, msg: ReloadMsg) {
        let ReloadMsg {
            generation,
            routes,
            settings,
            upstreams,
            listeners,
            log,
            deadline: _,
        } = msg;
        // Client connections keep their address, under its new index.
        for conn in self.conns.iter_mut() {
            if conn.phase == Phase::Closed {
                continue;
            }
            if let Some(a) = self.routes.listen.get(conn.listener as usize) {
                if let Some(i) = routes.listen.iter().position(|x| x == a) {
                    conn.listener = i as u32;
                }
            }
        }
        for (addr, l) in listeners {
            let id = io.add_listener(l);
            debug_assert_eq!(id.0 as usize, self.ops.laddrs.len());
            self.ops.laddrs.push(addr);
            self.ops.lclosed.push(false);
        }
        self.ops.lmap = self
            .ops
            .laddrs
            .iter()
            .zip(&self.ops.lclosed)
            .map(|(a, &closed)| match closed {
                true => NO_ROUTE,
                false => routes
                    .listen
                    .iter()
                    .position(|x| x == a)
                    .map_or(NO_ROUTE, |i| i as u32),
            })
            .collect();
        if let Some(u) = upstreams {
            self.ups = u.map(|u| ZoneUpstreams::new(u, self.id));
        }
        self.routes = routes;
        self.set = settings;
        if log != self.ops.format {
            self.ops.flush();
            self.ops.format = log;
        }
        self.ops
            .counters
            .generation
            .store(generation, Ordering::Relaxed);
        tracing::debug!(zone = self.id, generation, "configuration reloaded");
        if let Some(tx) = &self.ops.events {
            let _ = tx.send(ZoneEvent::Reloaded {
                zone: self.id,
                generation,
            });
        }
    }

    /// Drain: idle keep-alive connections get a short grace for one more request instead of
    /// being closed under a request the client may already have sent.
    pub(super) fn drain_idle(&mut self, io: &mut Io, c: ConnId) {
        let at = io.now() + DRAIN_IDLE_GRACE;
        let conn = &mut self.conns[c.index()];
        if conn.deadline > at {
            conn.in_wheel = false; // a new, earlier wheel entry; the old one finds it expired
            self.set_deadline(io, c, at);
        }
    }
}

#[cfg(test)]
mod head_tests {
    use super::{head_len_of, status_of};

    #[test]
    fn status_and_head_length_of_a_serialised_response() {
        let r = b"HTTP/1.1 404 Not Found\r\nContent-Length: 4\r\n\r\n\r\n\r\n";
        assert_eq!(status_of(r), 404);
        assert_eq!(head_len_of(r), 45);
        assert_eq!(status_of(b"HTTP/1.1 2x0 OK\r\n\r\n"), 0);
        assert_eq!(status_of(b"HTTP/1.1 20"), 0);
        assert_eq!(head_len_of(b"HTTP/1.1 200 OK\r\n"), 17);
        assert_eq!(head_len_of(b"\n\r\n\r\nX"), 5);
        assert_eq!(head_len_of(b""), 0);
    }
}
