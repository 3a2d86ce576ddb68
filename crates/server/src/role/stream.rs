//! The stream role: a connection accepted on a `[[stream]]` listener (nginx's stream module),
//! from its PROXY header (when the listener expects one) until its upstream connection is up.
//! A server is picked by the upstream's balancer (the client address is the hash key for
//! `balance = "hash"`), connect failures are retried on other servers, and what the client
//! sends meanwhile is held (bounded). Once connected, the connection becomes a [`Tunnel`].
//!
//! With `sni` routes the upstream is picked by the TLS ClientHello's server name, read without
//! terminating TLS (nginx's `ssl_preread`): the bytes are held as they arrive and a copy is
//! parsed by rustls's `Acceptor` (which reassembles a ClientHello split over records and
//! segments); they go to the upstream untouched. A ClientHello over 16 KiB, or bytes that are
//! not one, close the connection; one that never completes ends at the header timeout.

use ringx_engine::ConnId;

use crate::ctx::base::Base;
use crate::ctx::Cx;
use crate::role::exchange::PROXY_HIGH_WATER;
use crate::role::proxy_header::{self, Step};
use crate::role::tunnel::Tunnel;
use crate::role::upstream::{attach, Opening, UpEvent, UpState};
use crate::upstream::dial::Dial;

pub struct Stream {
    /// Index of the `[[stream]]` (in the routes it was accepted under).
    pub index: usize,
    /// Waiting for the PROXY header.
    header: bool,
    /// How long the tunnel may stay silent once connected.
    idle: std::time::Duration,
    dial: Dial,
    /// The upstream connection being connected.
    up: Option<ConnId>,
    /// Reading the ClientHello to route by SNI.
    preread: Option<Box<rustls::server::Acceptor>>,
    /// Connect from the client's address (`bind = "client"` on the stream).
    bind: bool,
}

/// The most a ClientHello may take before a stream routed by SNI gives up on it.
const MAX_HELLO: usize = 16 * 1024;

impl Stream {
    /// A connection accepted on the listener of `[[stream]]` number `index`. What it needs of
    /// the configuration is taken now: a reload before its upstream answers does not move it.
    pub fn accept(cx: &mut Cx, b: &mut Base, c: ConnId, index: usize) -> Stream {
        let def = &cx.ctx.routes.streams[index];
        let mut s = Stream {
            index,
            header: def.proxy_protocol,
            idle: def.idle_timeout,
            dial: Dial::default(),
            up: None,
            preread: def.sni.is_some().then(Box::default),
            bind: def.bind_client,
        };
        let upstream = def.upstream;
        let Some((pools, gen)) = cx.ctx.current_pools() else {
            cx.io.close(c);
            return s;
        };
        s.dial = Dial::new(
            gen,
            upstream,
            pools.defs.list[upstream].retries,
            None,
            Vec::new(),
        );
        if !s.header && s.preread.is_none() {
            s.start(cx, b, c);
        }
        s
    }

    /// Feeds what arrived from `b.inbuf[from..]` to the ClientHello reader; once it is whole,
    /// routes by its server name and connects.
    fn sniff(&mut self, cx: &mut Cx, b: &mut Base, c: ConnId, from: usize) {
        let Some(acc) = self.preread.as_mut() else {
            return;
        };
        let mut rd = &b.inbuf[from..];
        while !rd.is_empty() {
            if acc.read_tls(&mut rd).is_err() {
                return cx.io.close(c);
            }
        }
        let name = match acc.accept() {
            Ok(None) if b.inbuf.len() > MAX_HELLO => return cx.io.close(c),
            Ok(None) => return,
            Ok(Some(hello)) => hello
                .client_hello()
                .server_name()
                .map(str::to_ascii_lowercase),
            Err(_) => {
                tracing::debug!(conn = c.0, addr = ?b.addr, "stream: not a TLS ClientHello");
                return cx.io.close(c);
            }
        };
        self.preread = None;
        let def = &cx.ctx.routes.streams[self.index];
        let upstream = def
            .sni
            .as_ref()
            .map_or(def.upstream, |m| m.pick(name.as_deref()));
        let gen = self.dial.gen;
        let retries = cx.ctx.pools(gen).defs.list[upstream].retries;
        self.dial = Dial::new(gen, upstream, retries, None, Vec::new());
        self.start(cx, b, c);
    }

    /// Picks a server (the client address is the hash key for `balance = "hash"`) and
    /// connects.
    fn start(&mut self, cx: &mut Cx, b: &mut Base, c: ConnId) {
        let def = &cx.ctx.pools(self.dial.gen).defs.list[self.dial.upstream];
        self.dial.key = def
            .maglev
            .as_ref()
            .and(b.addr)
            .map(|a| a.ip().to_string().into_bytes());
        self.connect(cx, b, c);
    }

    /// Opens a new connection to the next server (never a pooled one: a stream's bytes are
    /// its own). No server left: the client connection closes.
    fn connect(&mut self, cx: &mut Cx, b: &mut Base, c: ConnId) {
        let now = cx.io.now();
        let (pools, connector) = cx.ctx.dial_parts(self.dial.gen);
        let def = &pools.defs.list[self.dial.upstream];
        let (timeout, pp) = (def.connect_timeout, def.proxy_protocol);
        // bind = "client" (on the stream or its upstream): from the client's address.
        let bind = self.bind || def.bind_client;
        let from = b.addr.filter(|_| bind).map(|a| a.ip());
        match self.dial.reach(cx.io, pools, connector, false, from, now) {
            Ok(r) => {
                let def = &pools.defs.list[self.dial.upstream];
                let tls = def
                    .tls
                    .as_ref()
                    .map(|t| (t.config.clone(), t.name(self.dial.server)));
                let rec = attach(cx.io, cx.ups, b, c, &self.dial, r, Opening { pp, tls });
                rec.state = UpState::Connecting;
                cx.ctx.set_up_deadline(cx.io, rec, r.conn, now + timeout);
                self.up = Some(r.conn);
            }
            // nginx's "no live upstreams while connecting to upstream": said once per
            // client, the servers' own failures were logged as they happened.
            Err(e) => {
                tracing::warn!(addr = ?b.addr, "stream: {e}");
                cx.io.close(c)
            }
        }
    }

    pub fn client_data(&mut self, cx: &mut Cx, b: &mut Base, c: ConnId, data: &[u8]) {
        if self.header {
            match proxy_header::feed(b, data) {
                Step::Partial => {}
                Step::Refused => cx.io.close(c),
                Step::Done if self.preread.is_some() => {
                    self.header = false;
                    self.sniff(cx, b, c, 0);
                }
                Step::Done => {
                    self.header = false;
                    self.start(cx, b, c);
                }
            }
            return;
        }
        if self.preread.is_some() {
            let from = b.inbuf.len();
            b.inbuf.extend_from_slice(data);
            return self.sniff(cx, b, c, from);
        }
        // Still connecting: keep it (bounded) for the upstream.
        b.inbuf.extend_from_slice(data);
        if b.inbuf.len() as u64 > PROXY_HIGH_WATER {
            b.paused = true;
            cx.io.pause_recv(c);
        }
    }

    /// The client closed its side: before the PROXY header that ends it; while connecting,
    /// the FIN is passed on once the upstream is up ([`Tunnel::connected`]).
    pub fn client_eof(&mut self, cx: &mut Cx, b: &mut Base, c: ConnId) {
        if self.header || self.preread.is_some() {
            b.tr.close_after_flush(cx.io, c);
        }
    }

    /// The client's deadline passed: only a PROXY header or a ClientHello that never came
    /// ends the connection here (the connect has its own timeout).
    pub fn expire(&mut self, cx: &mut Cx, c: ConnId) {
        if self.header || self.preread.is_some() {
            cx.io.close(c);
        }
    }

    /// The client connection is gone: so is the connect.
    pub fn client_closed(&mut self, cx: &mut Cx) {
        if let Some(u) = self.up.take() {
            if let Some(up) = cx.ups.get_mut(u) {
                up.abandon(cx.io, u);
                let p = cx.ctx.pools(self.dial.gen);
                p.finished(self.dial.upstream, self.dial.server);
            }
        }
    }

    /// An event on the connection being connected. Returns the tunnel this connection
    /// becomes once it is up.
    pub fn upstream_event(
        &mut self,
        cx: &mut Cx,
        b: &mut Base,
        c: ConnId,
        u: ConnId,
        ev: UpEvent,
    ) -> Option<Tunnel> {
        match ev {
            UpEvent::Connected => {
                self.up = None;
                let pools = cx.ctx.pools(self.dial.gen);
                pools.succeeded(self.dial.upstream, self.dial.server);
                pools.finished(self.dial.upstream, self.dial.server);
                Some(Tunnel::connected(cx, b, c, u, self.index, self.idle))
            }
            UpEvent::Closed(err) => {
                if let Some(e) = err {
                    tracing::warn!(
                        "stream upstream {}: {e}",
                        self.dial.name(cx.ctx.pools(self.dial.gen))
                    );
                }
                self.failed(cx, b, c, u);
                None
            }
            UpEvent::Timeout => {
                tracing::warn!(
                    "stream upstream {}: connect timed out",
                    self.dial.name(cx.ctx.pools(self.dial.gen))
                );
                if let Some(up) = cx.ups.get_mut(u) {
                    up.state = UpState::Closing;
                    up.client = None;
                    cx.io.close(u);
                }
                self.failed(cx, b, c, u);
                None
            }
            // Nothing is sent or received before the connect completes.
            UpEvent::Data(_) | UpEvent::Eof | UpEvent::Flushed => None,
        }
    }

    /// The connect failed: the server is blamed, and the next one tried while tries are left.
    fn failed(&mut self, cx: &mut Cx, b: &mut Base, c: ConnId, u: ConnId) {
        if self.up != Some(u) {
            return;
        }
        self.up = None;
        let now = cx.io.now();
        let pools = cx.ctx.pools(self.dial.gen);
        pools.finished(self.dial.upstream, self.dial.server);
        pools.failed(self.dial.upstream, self.dial.server, now);
        if self.dial.tries_left > 0 && self.dial.untried(pools) {
            self.dial.tries_left -= 1;
            self.connect(cx, b, c);
        } else {
            cx.io.close(c);
        }
    }
}

#[cfg(test)]
#[path = "stream_tests.rs"]
mod tests;
