//! An HTTP/1 connection's request cycle ([`Cycle`]): where it is ([`Phase`]), how many
//! requests it served, and how it goes on after a response: kept alive for the next
//! request (reading paused while too much output is queued), held for a request that
//! waits, or closed cleanly (lingering, so unread input cannot turn into a reset that
//! destroys the response).

use std::time::Instant;

use ringx_engine::ConnId;

use super::phase::{Next, Phase};
use crate::ctx::base::Base;
use crate::ctx::Cx;
use crate::role::proxy_header;

/// Queued output above which a connection stops reading (pipelined requests wait).
const OUT_HIGH_WATER: u64 = 256 * 1024;
/// Input a proxied request may buffer while its reading is paused.
const PAUSED_BODY_LIMIT: usize = 8 << 20;

/// Where a connection is in its request cycle.
pub(super) struct Cycle {
    pub phase: Phase,
    requests: u32,
    /// The current request asked to close the connection (`Connection: close`, or HTTP/1.0
    /// without keep-alive): the client sends nothing more after it (RFC 9112 §9.6).
    client_closes: bool,
}

impl Cycle {
    /// A new connection's; `proxy_header`: a PROXY protocol header comes first.
    pub fn new(proxy_header: bool) -> Cycle {
        let phase = if proxy_header {
            Phase::ProxyHeader
        } else {
            Phase::Idle
        };
        Cycle {
            phase,
            requests: 0,
            client_closes: false,
        }
    }

    /// Nothing read yet: the connection may still turn out to be HTTP/2 (h2c preface).
    pub fn is_fresh(&self) -> bool {
        self.phase == Phase::Idle && self.requests == 0
    }

    /// The request in progress is this connection's last (its listener goes away).
    pub fn last_request(&mut self) {
        self.requests = self.requests.max(u32::MAX - 1);
    }

    /// A request arrived (`first`: not one looked at again after a wait); `keep_alive`: it
    /// asks to keep the connection. Returns whether the connection stays open after it:
    /// not while draining, nor past `keepalive_requests`.
    pub fn request(&mut self, cx: &Cx, first: bool, keep_alive: bool) -> bool {
        if first {
            self.requests += 1;
        }
        self.client_closes = !keep_alive;
        keep_alive && !cx.ctx.draining && self.requests < cx.ctx.set.keepalive_requests
    }

    /// Input that arrived while reading is paused: buffered, within a limit (a proxied
    /// request's body may bring more than a head's worth; beyond the limit the connection
    /// closes), and the receive stopped once more than a head's worth waits.
    pub fn buffer_paused(&self, cx: &mut Cx, b: &mut Base, c: ConnId, data: &[u8]) {
        b.inbuf.extend_from_slice(data);
        // Pausing takes effect at the next submission: a proxied body may deliver what
        // the socket had queued meanwhile (bounded by the socket's receive buffer).
        let limit = if matches!(self.phase, Phase::Proxy | Phase::Wait) {
            PAUSED_BODY_LIMIT
        } else {
            cx.ctx.set.max_buffered
        };
        if b.inbuf.len() > limit {
            cx.io.close(c);
        } else if b.inbuf.len() > cx.ctx.set.limits.max_head {
            // Held without stopping the receive (a request waiting for its upstream), and
            // the client keeps sending: now stop it (no-op if already stopped).
            cx.io.pause_recv(c);
        }
    }

    /// Half-closes after the queued output and discards input until the client closes, so
    /// unread input cannot turn into a reset that destroys the response.
    pub fn linger(&mut self, cx: &mut Cx, b: &mut Base, c: ConnId) {
        self.phase = Phase::Lingering;
        b.inbuf = Vec::new();
        b.tr.shutdown_after_flush(cx.io, c);
        let at = cx.io.now() + cx.ctx.set.lingering_timeout;
        cx.ctx.set_deadline(cx.io, b, c, at);
        if b.eof {
            b.tr.close_after_flush(cx.io, c);
        }
    }

    /// A response is queued and logged: close (lingering if the client may still send) or
    /// wait for the next request. `more_input`: input follows the request.
    pub fn next(
        &mut self,
        cx: &mut Cx,
        b: &mut Base,
        c: ConnId,
        close: bool,
        more_input: bool,
    ) -> Next {
        let now = cx.io.now();
        if close || cx.ctx.draining {
            if more_input || self.requests == 0 {
                self.linger(cx, b, c);
            } else {
                // Everything the client sent was read: nothing can turn the close into a reset.
                self.phase = Phase::Lingering;
                if self.client_closes {
                    // It said it sends nothing more: the FIN may ride on the last segment.
                    cx.io.peer_done(c);
                }
                b.tr.close_after_flush(cx.io, c);
                let at = now + cx.ctx.set.send_timeout;
                cx.ctx.set_deadline(cx.io, b, c, at);
            }
            return Next::Stop;
        }
        self.phase = Phase::Idle;
        b.idle_since = now;
        let at = now + cx.ctx.set.keepalive_timeout;
        cx.ctx.set_deadline(cx.io, b, c, at);
        if b.tr.pending(cx.io, c) > OUT_HIGH_WATER {
            b.paused = true;
            cx.io.pause_recv(c);
            b.tr.notify_when_flushed(cx.io, c);
        }
        // `process` sees `paused` and keeps the rest buffered.
        Next::Continue
    }

    /// Holds the request (its head stays buffered) until `until`, then looks at it again
    /// (None: until what it waits for resumes it, within a `send_timeout`).
    pub fn hold(&mut self, cx: &mut Cx, b: &mut Base, c: ConnId, until: Option<Instant>) {
        self.phase = Phase::Wait;
        b.paused = true;
        if let Some(t) = until {
            cx.ctx.wake_at(cx.io, t, c, b.gen);
        }
        let at = until.unwrap_or(cx.io.now()) + cx.ctx.set.send_timeout;
        cx.ctx.set_deadline(cx.io, b, c, at);
    }

    /// Bytes before the PROXY header is complete; true once it is, with what followed it in
    /// `b.inbuf`, not processed yet (it may be the h2c preface: the zone decides).
    pub fn proxy_header(&mut self, cx: &mut Cx, b: &mut Base, c: ConnId, data: &[u8]) -> bool {
        match proxy_header::feed(b, data) {
            proxy_header::Step::Partial => false,
            proxy_header::Step::Refused => {
                self.phase = Phase::Lingering;
                cx.io.close(c);
                false
            }
            proxy_header::Step::Done => {
                self.phase = Phase::Idle;
                true
            }
        }
    }
}
