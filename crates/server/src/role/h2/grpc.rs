//! A gRPC call on an HTTP/2 stream (`proxy_pass = "grpc://…"`): the stream's request goes
//! on a stream of a pooled, multiplexed HTTP/2 upstream connection (`role::grpc::pool`),
//! and what comes back — head, messages, trailers — goes to the client as it arrives.
//!
//! Flow control is end to end: the client's request body leaves its window only once the
//! upstream's window took it ([`CallEvent::Sent`]), and response bytes are released to the
//! upstream's window only once they were framed to the client, so neither direction holds
//! more than a window. The call's `grpc-timeout` is a deadline here too (as Envoy's
//! `max_grpc_timeout`): past it the upstream stream is cancelled and the client gets
//! DEADLINE_EXCEEDED. A call the upstream cannot take (no server reachable, connection
//! lost, stream refused or reset) ends with a gRPC status in trailers — UNAVAILABLE and
//! the like — never an HTTP error page, which a gRPC client could not read.

use std::cell::Cell;
use std::time::Instant;

use ringx_h2proto::response::FieldList;
use ringx_http::Request;

use crate::answer::ReqCtx;
use crate::ctx::base::Base;
use crate::ctx::Cx;
use crate::metrics::bump;
use crate::role::exchange::deco::Deco;
use crate::role::grpc::mux::Owner;
use crate::role::grpc::pool::{self, Placed};
use crate::role::grpc::status::{self, Code};
use crate::role::http1::local::Route;
use crate::role::proxy_start;

/// A call in flight.
pub(super) struct GrpcCall {
    pub placed: Placed,
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

/// What starting a call gave.
pub(super) enum Started {
    Call(Box<GrpcCall>),
    /// It cannot go anywhere: answer this status (Trailers-Only).
    Failed(Code, &'static str),
}

/// Starts the call of `owner`'s stream (`end`: the request has no body).
pub(super) fn start(
    cx: &mut Cx,
    b: &Base,
    owner: Owner,
    req: &Request,
    route: &Route<'_>,
    rq: &ReqCtx,
    end: bool,
) -> Started {
    let Some(g) = proxy_start::prepare_grpc(cx.ctx, b, req, route, rq) else {
        return Started::Failed(Code::Unavailable, "no upstream for this location");
    };
    let deadline = req
        .header("grpc-timeout")
        .and_then(status::parse_timeout)
        .map(|d| cx.io.now() + d);
    match pool::start(
        cx,
        owner,
        g.gen,
        g.upstream,
        g.key.as_deref(),
        &g.fields,
        end,
    ) {
        Ok(placed) => Started::Call(Box::new(GrpcCall {
            placed,
            deadline,
            out: Vec::new(),
            at: 0,
            deco: g.deco,
            done: Cell::new(false),
        })),
        Err(why) => {
            tracing::warn!("gRPC call {}: {why}", req.path);
            Started::Failed(Code::Unavailable, "upstream unavailable")
        }
    }
}

impl GrpcCall {
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
        let id = self.placed.id;
        pool::with_mux(cx, &self.placed, |m, _| m.release(id, n));
    }

    /// Request body bytes (`end`: the last); returns how many the upstream's window took
    /// now (the client's window reopens by as many; the rest come as `CallEvent::Sent`).
    pub fn body(&mut self, cx: &mut Cx, data: &[u8], end: bool) -> usize {
        let (u, id) = (self.placed.u, self.placed.id);
        pool::with_mux(cx, &self.placed, |m, io| m.send_body(io, u, id, data, end))
            .unwrap_or(data.len())
    }

    /// The request ended with trailers (gRPC clients send none; they end the body).
    pub fn end_request(&mut self, cx: &mut Cx) {
        let (u, id) = (self.placed.u, self.placed.id);
        pool::with_mux(cx, &self.placed, |m, io| {
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
    /// open) and the balancer counts it finished; once only.
    pub fn end(&self, cx: &mut Cx) {
        if !self.done.replace(true) {
            pool::end(cx, &self.placed);
        }
    }
}

/// Counts a status ringx made itself.
pub(super) fn count_local(cx: &Cx, code: Code) {
    bump(&cx.ctx.log.counters.grpc_local_status[code.index()], 1);
}
