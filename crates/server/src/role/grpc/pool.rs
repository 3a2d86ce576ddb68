//! The zone's gRPC upstream connections: a call goes on a stream of an HTTP/2 connection to
//! the server the balancer picks, one already open when it has room for another stream
//! (the server's SETTINGS_MAX_CONCURRENT_STREAMS), else a new one; and what happens on those
//! connections, turned into events for the calls' owners.
//!
//! A connection stays while it carries calls, and `keepalive_timeout` after its last; one
//! that fails fails every call on it with UNAVAILABLE. Timeouts are the upstream's:
//! `connect_timeout` to connect, and `read_timeout` for a connection with calls in flight
//! from which nothing arrives (as nginx's `grpc_read_timeout`).

use ringx_engine::ConnId;
use ringx_h2proto::response::FieldList;
use ringx_h2proto::ErrorCode;
use ringx_tls::client::TlsUpConn;

use super::mux::{CallEvent, Mux, Owner};
use super::status::Code;
use crate::ctx::Cx;
use crate::role::upstream::{UpEvent, UpState};
use crate::transport::{TlsUpTransport, Transport};

/// Where a call went: its upstream connection (handle and record generation), its stream
/// there, and the server (for the balancer's books).
#[derive(Clone, Copy, Debug)]
pub struct Placed {
    pub u: ConnId,
    pub up_gen: u32,
    pub id: u32,
    pub gen: u32,
    pub upstream: usize,
    pub server: usize,
}

/// Starts a call for `owner` to `upstream` (of the upstream state `gen`): the request head
/// `fields`, with END_STREAM when it has no body. Err: why no server could be reached.
pub fn start(
    cx: &mut Cx,
    owner: Owner,
    gen: u32,
    upstream: usize,
    key: Option<&[u8]>,
    fields: &FieldList,
    end: bool,
) -> Result<Placed, &'static str> {
    let now = cx.io.now();
    let mut tried = Vec::new();
    let (u, server) = loop {
        let pools = cx.ctx.pools(gen);
        if pools.expired {
            return Err("the upstream was replaced by a reload");
        }
        let Some(s) = pools.pick(upstream, key, &tried, now) else {
            return Err("no upstream server could be reached");
        };
        tried.push(s);
        let open = pools.per[upstream].h2[s].iter().copied().find(|&c| {
            cx.ups
                .get(c)
                .and_then(|r| r.mux.as_ref())
                .is_some_and(|m| m.can_open())
        });
        if let Some(c) = open {
            break (c, s);
        }
        match connect(cx, gen, upstream, s) {
            Some(c) => break (c, s),
            None if tried.len() < cx.ctx.pools(gen).defs.list[upstream].servers.len() => continue,
            None => return Err("no upstream server could be reached"),
        }
    };
    let rec = cx.ups.get_mut(u).expect("a live gRPC connection");
    let up_gen = rec.gen;
    let m = rec.mux.as_deref_mut().expect("a gRPC connection");
    let id = m.open(owner, fields.iter(), end);
    m.flush(cx.io, &mut rec.tr, u);
    if m.calls() == 1 && m.connected {
        // It was idle: from now on it waits for the server, not for a next call.
        let rt = cx.ctx.pools(gen).defs.list[upstream].read_timeout;
        let rec = cx.ups.get_mut(u).expect("checked");
        cx.ctx.set_up_deadline(cx.io, rec, u, now + rt);
    }
    cx.ctx.pools(gen).started(upstream, server);
    bump(cx, |c| &c.grpc_calls);
    Ok(Placed {
        u,
        up_gen,
        id,
        gen,
        upstream,
        server,
    })
}

fn bump(cx: &Cx, f: impl Fn(&crate::metrics::ZoneCounters) -> &std::sync::atomic::AtomicU64) {
    crate::metrics::bump(f(&cx.ctx.log.counters), 1);
}

/// Opens a connection to server `s`, its preface queued (TLS with ALPN `h2` for an upstream
/// with TLS); None when the connect could not even start.
fn connect(cx: &mut Cx, gen: u32, upstream: usize, s: usize) -> Option<ConnId> {
    let now = cx.io.now();
    let (pools, connector) = cx.ctx.dial_parts(gen);
    let def = &pools.defs.list[upstream];
    let addr = def.servers[s].addr;
    // Never from the client's address (`bind = "client"`): the connection carries many
    // clients' calls.
    let u = match connector.connect(cx.io, addr, None) {
        Ok(u) => u,
        Err(e) => {
            tracing::warn!("gRPC upstream {} ({addr}): cannot connect: {e}", def.name);
            pools.failed(upstream, s, now);
            return None;
        }
    };
    let tls = def.tls.as_ref().map(|t| (t.h2.clone(), t.name(s)));
    let connect_timeout = def.connect_timeout;
    pools.per[upstream].h2[s].push(u);
    let limits = upstream_limits(&cx.ctx.set.h2);
    let rec = cx.ups.open(u, upstream, s, false, now);
    rec.pools_gen = gen;
    rec.state = UpState::Busy;
    let mut m = Box::new(Mux::new(limits));
    if let Some((config, name)) = tls {
        // The connection is listed and its record open: a TLS that cannot start fails the
        // connection (it closes at its connect deadline), never leaves it half made.
        match cx
            .io
            .out_buf(u)
            .map(|out| TlsUpConn::new(config, name, out))
        {
            Some(Ok(t)) => rec.tr = Transport::TlsUp(Box::new(TlsUpTransport::new(t))),
            Some(Err(e)) => {
                tracing::warn!("gRPC upstream TLS could not start: {e}");
                m.failed = true;
            }
            None => m.failed = true,
        }
    }
    m.flush(cx.io, &mut rec.tr, u);
    rec.mux = Some(m);
    cx.ctx.set_up_deadline(cx.io, rec, u, now + connect_timeout);
    bump(cx, |c| &c.grpc_connections);
    Some(u)
}

/// A gRPC upstream connection's limits: `[http2]`'s, with a connection window that covers
/// the stream windows of as many calls as a client connection may make at once
/// (`max_concurrent_streams`), so that calls whose clients do not read hold their own
/// streams' windows only, never the whole connection's (see `mux.rs`). Past that many calls
/// the pool opens another connection.
pub fn upstream_limits(h2: &ringx_h2proto::Limits) -> ringx_h2proto::Limits {
    let streams = u64::from(h2.max_concurrent_streams.max(1));
    let covered = u64::from(h2.initial_window.max(1)) * streams;
    let conn_window = covered.max(u64::from(h2.conn_window)).min((1 << 31) - 1) as u32;
    ringx_h2proto::Limits {
        conn_window,
        ..h2.clone()
    }
}

/// An event on gRPC connection `u`; the calls' events go to `out` (the zone delivers them).
pub fn on_upstream(cx: &mut Cx, u: ConnId, ev: UpEvent, out: &mut Vec<(Owner, CallEvent)>) {
    let now = cx.io.now();
    let Some(rec) = cx.ups.get_mut(u) else {
        return;
    };
    let (gen, upstream, server) = (rec.pools_gen, rec.upstream, rec.server);
    let Some(m) = rec.mux.as_deref_mut() else {
        return;
    };
    let failed_before = out.len();
    let mut closed = false;
    match ev {
        UpEvent::Connected => m.connected = true,
        UpEvent::Data(d) => {
            rec.got_bytes = true;
            m.feed(d, now, out);
            m.pump(cx.io, u, out);
        }
        UpEvent::Flushed => m.pump(cx.io, u, out),
        UpEvent::Eof => m.fail(Code::Unavailable, "upstream closed the connection", out),
        UpEvent::Closed(e) => {
            closed = true;
            if !m.failed {
                tracing::warn!(
                    "gRPC upstream connection to {:?} closed: {}",
                    cx.io.peer_addr(u),
                    e.map_or("by the server".to_string(), |e| e.to_string())
                );
            }
            let msg = if m.connected {
                "upstream connection lost"
            } else {
                "upstream connect failed"
            };
            m.fail(Code::Unavailable, msg, out);
        }
        UpEvent::Timeout if !m.connected => {
            m.fail(Code::Unavailable, "upstream connect timed out", out);
        }
        UpEvent::Timeout if m.calls() > 0 => {
            m.fail(Code::Unavailable, "upstream timed out", out);
        }
        UpEvent::Timeout => {
            m.conn.goaway(ErrorCode::NoError);
            m.failed = true;
        }
    }
    let failed = m.failed;
    let idle = m.calls() == 0;
    m.flush(cx.io, &mut rec.tr, u);
    let connected = m.connected;
    let pools = cx.ctx.pools(gen);
    if failed && !connected && out.len() > failed_before {
        pools.failed(upstream, server, now);
    }
    let current = cx.ctx.is_current(gen);
    let going = cx
        .ups
        .get(u)
        .and_then(|r| r.mux.as_ref())
        .is_some_and(|m| m.conn.going_away());
    if failed || closed || (idle && (going || !current)) {
        let list = &mut cx.ctx.pools(gen).per[upstream].h2[server];
        list.retain(|&c| c != u);
        if let Some(rec) = cx.ups.get_mut(u) {
            if !closed {
                rec.abandon(cx.io, u);
            }
        }
        return;
    }
    let def = &cx.ctx.pools(gen).defs.list[upstream];
    let wait = match (connected, idle) {
        (false, _) => return,
        (true, true) => def.keepalive_timeout,
        (true, false) => def.read_timeout,
    };
    if let Some(rec) = cx.ups.get_mut(u) {
        cx.ctx.set_up_deadline(cx.io, rec, u, now + wait);
    }
}

/// Runs `f` on call `id`'s connection (if it is still the one the call started on) and
/// writes what it queued.
pub fn with_mux<R>(
    cx: &mut Cx,
    p: &Placed,
    f: impl FnOnce(&mut Mux, &mut ringx_engine::Io) -> R,
) -> Option<R> {
    let rec = cx.ups.get_mut(p.u).filter(|r| r.gen == p.up_gen)?;
    let m = rec.mux.as_deref_mut()?;
    let r = f(m, cx.io);
    m.flush(cx.io, &mut rec.tr, p.u);
    Some(r)
}

/// The call is over (its response ended, it failed, or its client went away): the stream
/// is let go (cancelled if still open), and the balancer counts it finished. A connection
/// left idle waits `keepalive_timeout` for the next call, or closes if it is going away.
pub fn end(cx: &mut Cx, p: &Placed) {
    let now = cx.io.now();
    let idle = with_mux(cx, p, |m, _| {
        m.end(p.id);
        m.calls() == 0 && m.connected
    });
    let Some(pools) = cx.ctx.pools_if(p.gen) else {
        return;
    };
    pools.finished(p.upstream, p.server);
    let keep = pools.defs.list[p.upstream].keepalive_timeout;
    if idle == Some(true) {
        if let Some(rec) = cx.ups.get_mut(p.u) {
            cx.ctx.set_up_deadline(cx.io, rec, p.u, now + keep);
        }
    }
}

/// A response head as the client gets it: the upstream's fields without those the location
/// hides, then its `add_header` lines (`added`: "Name: value\r\n" lines).
pub fn response_fields(fields: &FieldList, hide: &[String], added: &str) -> FieldList {
    let mut f = FieldList::default();
    for (n, v) in fields.iter() {
        if !hide.iter().any(|h| h.as_bytes() == n) {
            f.push(n, v);
        }
    }
    f.push_lines(added.as_bytes());
    f
}
