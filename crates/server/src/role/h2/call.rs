//! A gRPC call's events applied to its HTTP/2 stream (`role/multiplex/grpc.rs` keeps the
//! call itself and says what each event means): the response head, messages and trailers
//! as they come from the upstream, a status of ringx's own when the call cannot go on, and
//! the deadlines that pass. Each says what the
//! connection does next ([`CallStep`]), which `H2` carries out in its framing.

use std::time::Instant;

use ringx_h2proto::response::FieldList;

use super::stream::H2Stream;
use crate::ctx::Cx;
use crate::role::grpc::mux::CallEvent;
use crate::role::grpc::status::Code;
use crate::role::multiplex::grpc::{self, Applied, OwnStatus};

/// What the connection does for a stream after an event of its call.
pub(super) enum CallStep {
    /// Send the response head (`status`, its fields; `end`: it ends the stream, a
    /// Trailers-Only response).
    Head(u16, FieldList, bool),
    /// Response bytes or the end wait: the stream takes its turn.
    Wake,
    /// The upstream's window took `n` bytes of the request body: the client's reopens by as
    /// many.
    Release(usize),
    /// The call cannot go on: it ends with this status of ringx's own.
    Fail(Code, &'static str),
}

impl H2Stream {
    /// Applies what the upstream stream of this stream's call did (None: it has no call).
    pub(super) fn call_event(&mut self, cx: &mut Cx, ev: CallEvent) -> Option<CallStep> {
        let g = self.grpc.as_mut()?;
        Some(match g.apply(cx, ev) {
            Applied::Head(status, fields, end) => CallStep::Head(status, fields, end),
            Applied::Data { end } => {
                self.end |= end;
                CallStep::Wake
            }
            Applied::Trailers(t) => {
                self.trailers = t;
                self.end = true;
                CallStep::Wake
            }
            Applied::Release(n) => CallStep::Release(n),
            Applied::Fail(code, msg) => CallStep::Fail(code, msg),
        })
    }

    /// Ends this stream's call with a status of ringx's own: as trailers after the response
    /// bytes already received ([`CallStep::Wake`]), or as a Trailers-Only response when
    /// nothing was sent yet ([`CallStep::Head`]). None: its end is decided already.
    pub(super) fn fail_call(
        &mut self,
        cx: &mut Cx,
        code: Code,
        msg: &'static str,
    ) -> Option<CallStep> {
        if self.end || self.ended {
            return None;
        }
        let g = self.grpc.as_deref();
        match grpc::own_status(cx, g, (code, msg), self.head_sent) {
            OwnStatus::Trailers(t) => {
                self.trailers = t;
                self.end = true;
                Some(CallStep::Wake)
            }
            OwnStatus::Only(fields) => Some(CallStep::Head(200, fields, true)),
        }
    }
}

/// The streams among `streams` whose call's `grpc-timeout` passed by `now`, and the
/// earliest deadline still ahead.
pub(super) fn late_calls<'a>(
    streams: impl Iterator<Item = &'a H2Stream>,
    now: Instant,
) -> (Vec<u32>, Option<Instant>) {
    let mut next = None::<Instant>;
    let mut late = Vec::new();
    for s in streams {
        let Some(d) = s.grpc.as_ref().and_then(|g| g.deadline) else {
            continue;
        };
        if s.ended || s.end {
            continue;
        }
        if d <= now {
            late.push(s.id);
        } else {
            next = Some(next.map_or(d, |n| n.min(d)));
        }
    }
    (late, next)
}
