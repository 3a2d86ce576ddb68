//! A gRPC call on a client's stream (`proxy_pass = "grpc://…"`), HTTP/2's (`role/h2`) or
//! HTTP/3's (`role/h3`): the stream's request goes on a stream of a pooled, multiplexed
//! HTTP/2 upstream connection (`role::grpc::pool`), and what comes back — head, messages,
//! trailers — goes to the client as it arrives ([`GrpcCall::apply`] says what each of the
//! call's events means for the client's stream; the role frames it).
//!
//! Flow control is end to end: the client's request body leaves its window (HTTP/2's
//! WINDOW_UPDATE; over HTTP/3 the stream is not read further) only once the upstream's
//! window took it ([`CallEvent::Sent`]), and response bytes are released to the
//! upstream's window only once they were framed to the client, so neither direction holds
//! more than a window. The call's `grpc-timeout` is a deadline here too (as Envoy's
//! `max_grpc_timeout`): past it the upstream stream is cancelled and the client gets
//! DEADLINE_EXCEEDED. A call the upstream cannot take (no server reachable, connection
//! lost, stream refused or reset) ends with a gRPC status in trailers — UNAVAILABLE and
//! the like — never an HTTP error page, which a gRPC client could not read.
//!
//! A call is decided when its HEADERS arrive and placed on an upstream connection once the
//! client's read that brought them has been handled ([`GrpcCall::place`], from
//! `H2::after`, or the end of an HTTP/3 connection's turn): a call its client resets in the same read (a rapid reset) never reaches
//! the upstream. The upstream connection is shared, and a storm of calls started and
//! cancelled there is load the upstream server sheds on everyone's calls, the neighbours'
//! included (grpcio's server cancels calls at random past 1000 waiting for its handlers).

use std::cell::Cell;
use std::time::Instant;

use ringx_h2proto::response::FieldList;
use ringx_http::Request;

use crate::answer::ReqCtx;
use crate::ctx::base::Base;
use crate::ctx::Cx;
use crate::metrics::bump;
use crate::pipeline::routing::Route;
use crate::role::exchange::deco::Deco;
use crate::role::grpc::mux::{CallEvent, Owner};
use crate::role::grpc::pool::{self, Placed};
use crate::role::grpc::status::{self, Code};
use crate::role::proxy_start::{self, GrpcStart};

/// A call in flight.
pub struct GrpcCall {
    /// Where it went; None until it is placed.
    placed: Option<Placed>,
    /// What placing it needs, and the request body that came before (None once placed).
    unplaced: Option<Box<Unplaced>>,
    /// `grpc-timeout` as a point in time.
    pub deadline: Option<Instant>,
    /// Response bytes received and not yet framed to the client (from `at`).
    pub out: Vec<u8>,
    pub at: usize,
    /// `add_header` and `proxy_hide_header` of the location.
    pub deco: Option<Box<Deco>>,
    /// The upstream stream was let go ([`GrpcCall::end`] ran).
    done: Cell<bool>,
}

/// A call decided and not placed yet.
struct Unplaced {
    start: GrpcStart,
    /// The request has no body (END_STREAM on its HEADERS).
    end: bool,
    /// Request body received meanwhile; the client's window for it is given back once the
    /// upstream's window takes it.
    body: Vec<u8>,
    /// The body ended (with `trailers`: by trailers).
    body_end: bool,
    trailers: bool,
}

/// What starting a call gave.
pub enum Started {
    Call(Box<GrpcCall>),
    /// It cannot go anywhere: answer this status (Trailers-Only).
    Failed(Code, &'static str),
}

/// Decides the call of a stream (`end`: the request has no body); it is placed later
/// ([`GrpcCall::place`]).
pub fn start(
    cx: &mut Cx,
    b: &Base,
    req: &Request,
    route: &Route<'_>,
    rq: &ReqCtx,
    end: bool,
) -> Started {
    let Some(mut g) = proxy_start::prepare_grpc(cx.ctx, b, req, route, rq) else {
        return Started::Failed(Code::Unavailable, "no upstream for this location");
    };
    let deadline = req
        .header("grpc-timeout")
        .and_then(status::parse_timeout)
        .map(|d| cx.io.now() + d);
    let deco = g.deco.take();
    Started::Call(Box::new(GrpcCall {
        placed: None,
        unplaced: Some(Box::new(Unplaced {
            start: g,
            end,
            body: Vec::new(),
            body_end: false,
            trailers: false,
        })),
        deadline,
        out: Vec::new(),
        at: 0,
        deco,
        done: Cell::new(false),
    }))
}

impl GrpcCall {
    /// Places the call of `owner`'s stream on an upstream connection, with the request body
    /// that came meanwhile; returns how many of those bytes the upstream's window took (the
    /// client's window reopens by as many). Err: no server could be reached (logged). A
    /// call placed already, or ended before, is left as it is (Ok(0)).
    pub(crate) fn place(&mut self, cx: &mut Cx, owner: Owner) -> Result<usize, ()> {
        if self.done.get() {
            return Ok(0);
        }
        let Some(u) = self.unplaced.take() else {
            return Ok(0);
        };
        let g = &u.start;
        let placed = pool::start(
            cx,
            owner,
            g.gen,
            g.upstream,
            g.key.as_deref(),
            &g.fields,
            u.end,
        )
        .map_err(|why| {
            // The path is looked up only for the log line, not for every call placed.
            let path = g.fields.iter().find(|(n, _)| *n == b":path").map(|f| f.1);
            let path = String::from_utf8_lossy(path.unwrap_or_default());
            tracing::warn!("gRPC call {path}: {why}");
        })?;
        self.placed = Some(placed);
        let mut took = 0;
        if !u.body.is_empty() || (u.body_end && !u.trailers) {
            took = self.body(cx, &u.body, u.body_end && !u.trailers);
        }
        if u.trailers {
            self.end_request(cx);
        }
        Ok(took)
    }

    /// Response bytes waiting to be framed.
    pub fn pending(&self) -> &[u8] {
        &self.out[self.at..]
    }

    /// `n` pending bytes went to the client: they leave the buffer, and the upstream may
    /// send as many more.
    pub fn sent(&mut self, cx: &mut Cx, n: usize) {
        self.at += n;
        if self.at == self.out.len() {
            self.out.clear();
            self.at = 0;
        }
        if let Some(p) = &self.placed {
            pool::with_mux(cx, p, |m, _| m.release(p.id, n));
        }
    }

    /// Request body bytes (`end`: the last); returns how many the upstream's window took
    /// now (the client's window reopens by as many; the rest come as `CallEvent::Sent`).
    pub fn body(&mut self, cx: &mut Cx, data: &[u8], end: bool) -> usize {
        if let Some(w) = self.unplaced.as_mut() {
            w.body.extend_from_slice(data);
            w.body_end |= end;
            return 0;
        }
        let Some(p) = &self.placed else {
            return data.len(); // ended: read and dropped
        };
        let (u, id) = (p.u, p.id);
        pool::with_mux(cx, p, |m, io| m.send_body(io, u, id, data, end)).unwrap_or(data.len())
    }

    /// The request ended with trailers (gRPC clients send none; they end the body).
    pub fn end_request(&mut self, cx: &mut Cx) {
        if let Some(w) = self.unplaced.as_mut() {
            w.body_end = true;
            w.trailers = true;
            return;
        }
        let Some(p) = &self.placed else {
            return;
        };
        let (u, id) = (p.u, p.id);
        pool::with_mux(cx, p, |m, io| {
            m.send_trailers(io, u, id, FieldList::default())
        });
    }

    /// The response head's fields as the client gets them: the location's
    /// `proxy_hide_header` removed, its `add_header` lines added.
    pub fn head_fields(&self, status: u16, fields: &FieldList) -> FieldList {
        let Some(d) = &self.deco else {
            return pool::response_fields(fields, &[], "");
        };
        let hide = d.edit.as_ref().map_or(&[][..], |e| &e.hide[..]);
        let mut added = d.add_always.clone();
        if (200..400).contains(&status) {
            added.push_str(&d.add_ok);
        }
        pool::response_fields(fields, hide, &added)
    }

    /// The call is over on our side: the upstream stream is let go (cancelled if still
    /// open) and the balancer counts it finished; once only. A call not placed yet never
    /// will be: nothing of it reached the upstream.
    pub fn end(&self, cx: &mut Cx) {
        if !self.done.replace(true) {
            if let Some(p) = &self.placed {
                pool::end(cx, p);
            }
        }
    }
}

/// Counts a status ringx made itself.
pub fn count_local(cx: &Cx, code: Code) {
    bump(&cx.ctx.log.counters.grpc_local_status[code.index()], 1);
}

/// What an event of a call means for its client stream ([`GrpcCall::apply`]).
pub enum Applied {
    /// Send the response head (`status`, its fields as the client gets them; `end`: it ends
    /// the stream, a Trailers-Only response).
    Head(u16, FieldList, bool),
    /// Response bytes wait in [`GrpcCall::pending`] (`end`: the last of the response, which
    /// has no trailers).
    Data { end: bool },
    /// The response ends with these trailers, after the bytes pending.
    Trailers(Vec<(Vec<u8>, Vec<u8>)>),
    /// The upstream's window took `n` bytes of the request body: the client may send as
    /// many more.
    Release(usize),
    /// The call cannot go on: it ends with this status of ringx's own ([`own_status`]).
    Fail(Code, &'static str),
}

impl GrpcCall {
    /// Applies what the call's upstream stream did (`ev`); the call is let go of once its
    /// response has ended or it failed.
    pub fn apply(&mut self, cx: &mut Cx, ev: CallEvent) -> Applied {
        match ev {
            CallEvent::Head {
                status,
                fields,
                end,
            } => {
                if end {
                    self.end(cx);
                }
                Applied::Head(status, self.head_fields(status, &fields), end)
            }
            CallEvent::Data(d, end) => {
                self.out.extend_from_slice(&d);
                if end {
                    self.end(cx);
                }
                Applied::Data { end }
            }
            CallEvent::Trailers(f) => {
                self.end(cx);
                // gRPC's own trailers pass; what may not be a trailer does not.
                let kept = f
                    .iter()
                    .filter(|(n, _)| !ringx_http::trailer::is_forbidden_trailer(n))
                    .map(|(n, v)| (n.to_vec(), v.to_vec()));
                Applied::Trailers(kept.collect())
            }
            CallEvent::Sent(n) => Applied::Release(n),
            CallEvent::Failed(code, msg) => {
                self.end(cx);
                Applied::Fail(code, msg)
            }
        }
    }
}

/// How a call ends with a status of ringx's own ([`own_status`]).
pub enum OwnStatus {
    /// As trailers, after the response bytes already sent.
    Trailers(Vec<(Vec<u8>, Vec<u8>)>),
    /// As a Trailers-Only response (status 200, these fields, the stream ended): nothing
    /// was sent yet.
    Only(FieldList),
}

/// Ends call `g` (if the stream has one) with status `code` and `msg` of ringx's own,
/// counted; `head_sent`: the response head went to the client already.
pub fn own_status(
    cx: &mut Cx,
    g: Option<&GrpcCall>,
    (code, msg): (Code, &'static str),
    head_sent: bool,
) -> OwnStatus {
    count_local(cx, code);
    if let Some(g) = g {
        g.end(cx);
    }
    if head_sent {
        let t = status::trailers(code, msg);
        let t = t.iter().map(|(n, v)| (n.to_vec(), v.to_vec()));
        return OwnStatus::Trailers(t.collect());
    }
    let mut fields = FieldList::with_capacity(64, 3);
    for (n, v) in status::trailers_only(code, msg) {
        fields.push(n, v);
    }
    OwnStatus::Only(fields)
}
