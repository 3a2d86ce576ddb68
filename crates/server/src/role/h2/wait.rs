//! Streams whose request waits, as an HTTP/1 request is held (`Next::Defer`): for a
//! `limit_req` delay, for the `auth_request` subrequest's answer, or for another request's
//! fill of the cache entry it wants. The request's HTTP/1.1 head is kept with what was
//! already decided for it ([`Progress`]: charged to the rate, the auth answer, how long it
//! waited), and it is parsed and routed again when its time comes (`H2::resume`, from the
//! zone's millisecond timer) or its answer arrives. Only that stream waits: the
//! connection's other streams go on.
//!
//! Request body that arrives meanwhile is kept, and the peer's window for it is not given
//! back until the request goes on, so what a waiting stream holds is bounded by the
//! stream's window (`[http2] initial_window`).

use std::time::Instant;

use ringx_engine::ConnId;
use ringx_h2proto::Framing;

use super::proxy::Proxied;
use super::stream::H2Stream;
use super::H2;
use crate::guard::{AuthAnswer, Progress};
use crate::role::exchange::capture::Capture;
use crate::role::exchange::Outcome;
use crate::role::http1::guard as h1guard;
use crate::zone::client::Base;
use crate::zone::ctx::Cx;

/// A stream's request while it is being decided.
pub(super) struct Held {
    /// The request as an HTTP/1.1 head (parsed again on each look).
    pub h1: Vec<u8>,
    pub framing: Framing,
    pub progress: Progress,
    /// When it is looked at again (None: when its subrequest answers).
    pub until: Option<Instant>,
    /// It was looked at before (the log's fields are taken once).
    pub resumed: bool,
    pub body: HeldBody,
}

/// Request body that arrived while the stream waited.
#[derive(Default)]
pub(super) struct HeldBody {
    pub data: Vec<u8>,
    /// The body ended (END_STREAM).
    pub end: bool,
    /// Trailer lines that ended it.
    pub trailers: Option<Vec<u8>>,
}

impl Held {
    pub fn new(h1: Vec<u8>, framing: Framing) -> Box<Held> {
        Box::new(Held {
            h1,
            framing,
            progress: Progress::default(),
            until: None,
            resumed: false,
            body: HeldBody::default(),
        })
    }
}

impl H2 {
    /// Parks stream `s` until `until` (None: until its subrequest answers).
    pub(super) fn park(
        &mut self,
        cx: &mut Cx,
        b: &Base,
        c: ConnId,
        mut s: H2Stream,
        mut held: Box<Held>,
        until: Option<Instant>,
    ) {
        held.until = until;
        held.resumed = true;
        if let Some(at) = until {
            cx.ctx.wake_at(cx.io, at, c, b.gen);
        }
        s.held = Some(held);
        self.streams.insert(s.id, s);
    }

    /// The zone's timer: streams whose wait is over are looked at again.
    pub fn resume(&mut self, cx: &mut Cx, b: &mut Base, c: ConnId) {
        if self.failed {
            return;
        }
        let now = cx.io.now();
        let mut due: Vec<u32> = self
            .streams
            .values()
            .filter(|s| {
                s.held
                    .as_ref()
                    .and_then(|h| h.until)
                    .is_some_and(|t| t <= now)
            })
            .map(|s| s.id)
            .collect();
        due.sort_unstable(); // in the order they were opened
        for id in due {
            self.unpark(cx, b, c, id);
        }
        self.after(cx, b, c);
    }

    /// Looks at held stream `id` again.
    fn unpark(&mut self, cx: &mut Cx, b: &mut Base, c: ConnId, id: u32) {
        let Some(mut s) = self.streams.remove(&id) else {
            return;
        };
        let Some(held) = s.held.take() else {
            self.streams.insert(id, s);
            return;
        };
        self.serve(cx, b, c, s, held);
    }

    /// Trailers for a held stream: kept with its body. Returns false when it is not held.
    pub(super) fn held_trailers(&mut self, id: u32, lines: &[u8]) -> bool {
        let Some(h) = self.streams.get_mut(&id).and_then(|s| s.held.as_mut()) else {
            return false;
        };
        h.body.end = true;
        h.body.trailers = Some(lines.to_vec());
        true
    }

    /// What arrived of the body while stream `id` waited goes where the request went now:
    /// to its upstream, or read and dropped (its window given back either way).
    pub(super) fn pass_body(&mut self, cx: &mut Cx, id: u32, body: HeldBody) {
        if body.data.is_empty() && !body.end {
            return;
        }
        let (proxied, grpc) = self
            .streams
            .get(&id)
            .map_or((false, false), |s| (s.proxy.is_some(), s.grpc.is_some()));
        let ended_by_trailers = body.trailers.is_some();
        if proxied {
            self.proxy_data(cx, id, &body.data, body.end && !ended_by_trailers);
        } else if grpc {
            self.grpc_data(cx, id, &body.data, body.end && !ended_by_trailers);
        } else {
            self.conn.release(id, body.data.len());
            return;
        }
        if let Some(t) = body.trailers {
            self.trailers(cx, id, &t);
        }
    }

    /// Sends the `auth_request` subrequest (`head` to `upstream`) for held stream `s`; the
    /// stream waits for its answer (`auth_done`). When it cannot be sent, the answer is an
    /// error at once (500, as over HTTP/1).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn ask(
        &mut self,
        cx: &mut Cx,
        b: &mut Base,
        c: ConnId,
        mut s: H2Stream,
        mut held: Box<Held>,
        upstream: usize,
        head: Vec<u8>,
    ) {
        match Proxied::sub(cx, b, c, upstream, head, Capture::subrequest()) {
            Some(p) => {
                if let Some(u) = p.ex.up {
                    self.ups.insert(u, s.id);
                }
                s.proxy = Some(p);
                self.park(cx, b, c, s, held, None);
            }
            None => {
                held.progress.auth = Some(AuthAnswer::Error);
                self.serve(cx, b, c, s, held);
            }
        }
    }

    /// The `auth_request` subrequest of held stream `id` ended (`outcome`): its answer is
    /// applied and the request looked at again.
    pub(super) fn auth_done(
        &mut self,
        cx: &mut Cx,
        b: &mut Base,
        c: ConnId,
        id: u32,
        outcome: Outcome,
    ) {
        let Some(mut s) = self.streams.remove(&id) else {
            return;
        };
        self.detach(cx, &s);
        let cap = s.proxy.take().and_then(|mut p| p.ex.capture.take());
        let Some(mut held) = s.held.take() else {
            return; // not a held stream's subrequest (never the case)
        };
        let answer = match outcome {
            Outcome::Done => h1guard::auth_answer(cap.as_deref()),
            _ => AuthAnswer::Error,
        };
        held.progress.auth = Some(answer);
        self.serve(cx, b, c, s, held);
    }
}
