//! Byte tunnels between a client and an upstream: `[[stream]]` (L4) connections and
//! WebSocket (any `Upgrade`) after the upstream's 101. Bytes are relayed as they come, each
//! direction with a bounded queue (the sending side stops reading while it is full); a FIN
//! from one side is passed on as a FIN to the other (half-close), and the tunnel closes once
//! both sides finished or on the idle timeout. Also the PROXY protocol header a load
//! balancer in front may send first.

use ringx_engine::{ConnId, Io};
use ringx_http::proxy_protocol::{self, ProxyHeader};

use super::proxy::{ProxyReq, PROXY_HIGH_WATER};
use super::upconn::UpState;
use super::{HttpZone, Phase};

/// A PROXY v2 header is at most 16 + 536 bytes; v1 at most 107.
const MAX_PROXY_HEADER: usize = 16 + 536;

impl HttpZone {
    /// A connection accepted on a `[[stream]]` listener.
    pub(super) fn stream_accept(&mut self, io: &mut Io, c: ConnId, i: usize) {
        let conn = &mut self.conns[c.index()];
        conn.stream = Some(i);
        if self.routes.streams[i].proxy_protocol {
            conn.phase = Phase::ProxyHeader;
            return;
        }
        self.stream_start(io, c);
    }

    fn stream_start(&mut self, io: &mut Io, c: ConnId) {
        let Some(i) = self.conns[c.index()].stream else {
            return;
        };
        let upstream = self.routes.streams[i].upstream;
        let Some(z) = self.ups.as_ref() else {
            io.close(c);
            return;
        };
        let def = &z.defs.list[upstream];
        let key = def
            .maglev
            .as_ref()
            .and_then(|_| self.conns[c.index()].client)
            .map(|a| a.ip().to_string().into_bytes());
        let conn = &mut self.conns[c.index()];
        conn.phase = Phase::Tunnel;
        conn.proxy = Some(Box::new(ProxyReq {
            upstream,
            server: 0,
            up: None,
            tried: Vec::new(),
            tries_left: def.retries,
            head: Vec::new(),
            host_upstream: false,
            replay: None,
            req_body: None,
            idempotent: true,
            head_request: false,
            version: ringx_http::Version::Http11,
            keep: false,
            upgrade: false,
            started: false,
            key,
            body_paused: false,
        }));
        self.proxy_send(io, c);
    }

    /// How long a tunnel may stay silent.
    fn tunnel_idle(&self, c: ConnId, upstream: usize) -> std::time::Duration {
        match self.conns[c.index()].stream {
            Some(i) => self.routes.streams[i].idle_timeout,
            None => self
                .ups
                .as_ref()
                .map_or(std::time::Duration::from_secs(60), |z| {
                    z.defs.list[upstream].read_timeout
                }),
        }
    }

    /// The stream's upstream connection is up: relay what the client sent meanwhile.
    pub(super) fn stream_connected(&mut self, io: &mut Io, c: ConnId, u: ConnId) {
        let conn = &mut self.conns[c.index()];
        conn.tunnel = Some(u);
        let p = conn.proxy.take();
        if let (Some(p), Some(z)) = (p, self.ups.as_mut()) {
            z.succeeded(p.upstream, p.server);
        }
        self.tunnel_flush_client_buffer(io, c);
        let conn = &mut self.conns[c.index()];
        if conn.paused {
            conn.paused = false;
            if !conn.eof {
                io.resume_recv(c);
            }
        }
        if conn.eof {
            io.shutdown_after_flush(u);
        }
        let ui = self.upc[u.index()].as_ref().map_or(0, |x| x.upstream);
        let at = io.now() + self.tunnel_idle(c, ui);
        self.set_up_deadline(io, u, at);
    }

    /// Client bytes buffered before the tunnel existed go to the upstream.
    pub(super) fn tunnel_flush_client_buffer(&mut self, io: &mut Io, c: ConnId) {
        let conn = &mut self.conns[c.index()];
        let Some(u) = conn.tunnel else { return };
        if !conn.inbuf.is_empty() {
            let buf = std::mem::take(&mut conn.inbuf);
            io.write(u, &buf);
        }
    }

    pub(super) fn tunnel_client_data(&mut self, io: &mut Io, c: ConnId, data: &[u8]) {
        let conn = &mut self.conns[c.index()];
        let Some(u) = conn.tunnel else {
            // Still connecting: keep it (bounded) for the upstream.
            conn.inbuf.extend_from_slice(data);
            if conn.inbuf.len() as u64 > PROXY_HIGH_WATER {
                self.hold_client(io, c);
            }
            return;
        };
        io.write(u, data);
        let ui = self.upc[u.index()].as_ref().map_or(0, |x| x.upstream);
        let at = io.now() + self.tunnel_idle(c, ui);
        if let Some(up) = self.upc[u.index()].as_mut() {
            up.deadline = at;
        }
        if io.pending(u) > PROXY_HIGH_WATER {
            self.hold_client(io, c);
            io.notify_when_flushed(u);
        }
    }

    pub(super) fn tunnel_up_data(&mut self, io: &mut Io, u: ConnId, data: &[u8]) {
        let Some((c, _)) = self.upc[u.index()].as_ref().and_then(|x| x.client) else {
            return;
        };
        io.write(c, data);
        let ui = self.upc[u.index()].as_ref().map_or(0, |x| x.upstream);
        let at = io.now() + self.tunnel_idle(c, ui);
        let up = self.upc[u.index()].as_mut().expect("present");
        up.deadline = at;
        if io.pending(c) > PROXY_HIGH_WATER && !up.paused {
            up.paused = true;
            io.pause_recv(u);
            io.notify_when_flushed(c);
        }
    }

    pub(super) fn tunnel_client_eof(&mut self, io: &mut Io, c: ConnId) {
        let Some(u) = self.conns[c.index()].tunnel else {
            return; // passed on once connected (stream_connected)
        };
        io.shutdown_after_flush(u);
        if self.upc[u.index()].as_ref().is_some_and(|x| x.eof) {
            self.tunnel_close(io, c, u);
        }
    }

    pub(super) fn tunnel_up_eof(&mut self, io: &mut Io, u: ConnId) {
        let Some((c, _)) = self.upc[u.index()].as_ref().and_then(|x| x.client) else {
            io.close(u);
            return;
        };
        io.shutdown_after_flush(c);
        if self.conns[c.index()].eof {
            self.tunnel_close(io, c, u);
        }
    }

    /// Both sides finished: close each once its queue is written.
    fn tunnel_close(&mut self, io: &mut Io, c: ConnId, u: ConnId) {
        if let Some(up) = self.upc[u.index()].as_mut() {
            up.state = UpState::Closing;
            up.client = None;
        }
        self.conns[c.index()].tunnel = None;
        io.close_after_flush(u);
        io.close_after_flush(c);
    }

    /// The upstream answered 101: from now on both directions are opaque bytes.
    pub(super) fn tunnel_begin(&mut self, io: &mut Io, c: ConnId, u: ConnId, rest: &[u8]) {
        if !rest.is_empty() {
            io.write(c, rest);
        }
        let ui = match self.upc[u.index()].as_mut() {
            Some(up) => {
                up.state = UpState::Tunnel;
                up.upstream
            }
            None => return,
        };
        if let (Some(z), Some(p)) = (self.ups.as_mut(), self.conns[c.index()].proxy.as_ref()) {
            z.per[p.upstream].bal.finished(p.server);
        }
        let conn = &mut self.conns[c.index()];
        conn.proxy = None;
        conn.phase = Phase::Tunnel;
        conn.tunnel = Some(u);
        conn.paused = false;
        if !conn.eof {
            io.resume_recv(c);
        }
        self.tunnel_flush_client_buffer(io, c);
        let at = io.now() + self.tunnel_idle(c, ui);
        self.set_up_deadline(io, u, at);
    }

    /// Bytes before the PROXY header is complete.
    pub(super) fn proxy_header_data(&mut self, io: &mut Io, c: ConnId, data: &[u8]) {
        let conn = &mut self.conns[c.index()];
        conn.inbuf.extend_from_slice(data);
        match proxy_protocol::parse(&conn.inbuf) {
            Ok(proxy_protocol::Parse::Partial) => {
                if conn.inbuf.len() > MAX_PROXY_HEADER {
                    io.close(c);
                }
            }
            Err(e) => {
                tracing::debug!(zone = self.id, "PROXY protocol header refused: {e}");
                conn.phase = Phase::Lingering;
                io.close(c);
            }
            Ok(proxy_protocol::Parse::Done { header, consumed }) => {
                if let ProxyHeader::Tcp { src, .. } = header {
                    conn.client = Some(src);
                }
                conn.inbuf.drain(..consumed);
                if conn.stream.is_some() {
                    self.stream_start(io, c);
                    self.tunnel_flush_client_buffer(io, c);
                } else {
                    conn.phase = Phase::Idle;
                    self.process_buffered(io, c);
                }
            }
        }
    }
}
