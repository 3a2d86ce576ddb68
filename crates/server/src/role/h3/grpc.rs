//! A gRPC call on an HTTP/3 stream (`proxy_pass = "grpc://…"`): the call itself, its
//! upstream stream on the zone's pooled HTTP/2 connections, is HTTP/2's
//! (`role/multiplex/grpc.rs`); here its events become the stream's HEADERS, DATA and
//! trailing HEADERS, and its flow control QUIC's: request body the upstream's window has
//! not taken is held (`H3Stream::body_held`) and the stream is not read meanwhile, so the
//! client's QUIC window holds it back; response bytes are released to the upstream's window
//! as they are framed to the client (`stream.rs`). As over HTTP/2, a call is placed at the
//! end of the connection's turn that decided it (a call reset in the same turn never
//! reaches the upstream), `grpc-timeout` is a deadline (DEADLINE_EXCEEDED), and a call that
//! cannot go on ends with a gRPC status in trailers, never an error page. The connection
//! carries out what each event asks ([`CallStep`], in `serve.rs`).

use std::time::Instant;

use super::stream::{H3Stream, Streams};
use crate::ctx::Cx;
use crate::role::grpc::mux::CallEvent;
use crate::role::grpc::status::Code;
use crate::role::multiplex::grpc::{self, Applied, OwnStatus};

/// What the connection does for a stream after an event of its call.
pub(super) enum CallStep {
    /// The stream has more to send: it takes its turn.
    Wake,
    /// The upstream's window took `n` bytes of the request body held.
    Took(usize),
    /// The call cannot go on: it ends with this status of ringx's own.
    Fail(Code, &'static str),
}

impl H3Stream {
    /// Applies what the upstream stream of this stream's call did (None: it has no call).
    pub(super) fn call_event(&mut self, cx: &mut Cx, ev: CallEvent) -> Option<CallStep> {
        let g = self.grpc.as_mut()?;
        Some(match g.apply(cx, ev) {
            Applied::Head(status, fields, end) => {
                self.head(status, fields.iter());
                self.end |= end;
                CallStep::Wake
            }
            Applied::Data { end } => {
                self.end |= end;
                CallStep::Wake
            }
            Applied::Trailers(t) => {
                self.trailers = Some(t);
                self.end = true;
                CallStep::Wake
            }
            Applied::Release(n) => CallStep::Took(n),
            Applied::Fail(code, msg) => CallStep::Fail(code, msg),
        })
    }

    /// Ends this stream's call with a status of ringx's own: trailers after the response
    /// bytes already received, or a Trailers-Only response when nothing was sent yet; what
    /// the client still sends is read and dropped. False: its end was decided already.
    pub(super) fn fail_call(&mut self, cx: &mut Cx, code: Code, msg: &'static str) -> bool {
        if self.end {
            return false;
        }
        match grpc::own_status(cx, self.grpc.as_deref(), (code, msg), self.status != 0) {
            OwnStatus::Trailers(t) => self.trailers = Some(t),
            OwnStatus::Only(fields) => self.head(200, fields.iter()),
        }
        self.body_held = 0;
        self.end = true;
        true
    }

    /// Request body for this stream's call (`end`: the last of it): what the upstream's
    /// window does not take now is held. A body past `client_max_body_size` fails the call.
    pub(super) fn call_body(&mut self, cx: &mut Cx, data: &[u8], end: bool) -> Option<CallStep> {
        self.body_in += data.len() as u64;
        if self.body_in > cx.ctx.set.max_body {
            // A gRPC client reads a status, not an error page.
            let msg = "request larger than client_max_body_size";
            return Some(CallStep::Fail(Code::ResourceExhausted, msg));
        }
        let took = self.grpc.as_mut()?.body(cx, data, end);
        self.body_held += data.len().saturating_sub(took);
        None
    }

    /// Whether this stream's call is past its `grpc-timeout` at `now`.
    pub(super) fn call_late(&self, now: Instant) -> bool {
        let deadline = self.grpc.as_ref().and_then(|g| g.deadline);
        !self.end && deadline.is_some_and(|d| d <= now)
    }
}

/// The stream whose call's owner tag is `sid` (the low 32 bits of its stream id).
pub(super) fn stream_of(streams: &Streams, sid: u32) -> Option<u64> {
    if streams.contains_key(&u64::from(sid)) {
        return Some(u64::from(sid));
    }
    // A stream id past 2^32 (a long-lived connection): found by its low bits.
    streams.keys().find(|&&k| k as u32 == sid).copied()
}
