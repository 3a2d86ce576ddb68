//! Failures of upstream connections: passive health marks, retries on another server,
//! 502/504, or cutting a response that had started; EOF, close and timeouts.

use ringx_engine::{ConnId, Io};

use super::super::upconn::{UpConn, UpState};
use super::super::{HttpZone, Phase};
use super::*;

/// What a failure handler needs of the upstream connection's record.
struct FailInfo {
    upstream: usize,
    server: usize,
    reused: bool,
    got_bytes: bool,
    was_busy: bool,
    client: Option<(ConnId, u32)>,
}

impl FailInfo {
    /// Reads the record and marks it closing (detached from its client).
    fn take(up: &mut UpConn) -> FailInfo {
        let was_busy = matches!(
            up.state,
            UpState::Busy | UpState::Connecting | UpState::Tunnel
        );
        up.state = UpState::Closing;
        FailInfo {
            upstream: up.upstream,
            server: up.server,
            reused: up.reused,
            got_bytes: up.got_bytes,
            was_busy,
            client: up.client.take(),
        }
    }
}

impl HttpZone {
    /// The upstream connection failed: blame the server (passive health), then retry
    /// elsewhere if nothing reached the client yet, else cut the client off. The record
    /// stays (state `Closing`) until `on_closed`.
    pub(in crate::zone) fn upstream_failed(&mut self, io: &mut Io, u: ConnId, why: Fail) {
        let Some(up) = self.upc[u.index()].as_mut() else {
            return;
        };
        if up.state == UpState::Closing {
            return;
        }
        let info = FailInfo::take(up);
        io.close(u);
        self.after_failure(io, info, why);
    }

    /// The client side of a failure: retry, 502/504, or cut the response off.
    fn after_failure(&mut self, io: &mut Io, f: FailInfo, why: Fail) {
        let now = io.now();
        let silent = f.reused && !f.got_bytes && matches!(why, Fail::Reset | Fail::Connect);
        if let Some(z) = self.ups.as_mut() {
            if f.was_busy {
                z.per[f.upstream].bal.finished(f.server);
            }
            if !silent && why != Fail::Status {
                z.failed(f.upstream, f.server, now);
            }
        }
        let Some((c, cgen)) = f.client else { return };
        let conn = &mut self.conns[c.index()];
        if conn.gen != cgen || !matches!(conn.phase, Phase::Proxy | Phase::Tunnel) {
            return;
        }
        let Some(p) = conn.proxy.as_mut() else {
            // An established tunnel (WebSocket or stream).
            conn.tunnel = None;
            io.close_after_flush(c);
            return;
        };
        p.up = None;
        if p.started {
            // Part of the response is out: end the connection so the client sees it cut.
            conn.proxy = None;
            conn.phase = Phase::Lingering;
            io.close_after_flush(c);
            return;
        }
        if silent {
            // The keep-alive race: the server closed an idle connection as we reused it.
            p.tried.retain(|&x| x != f.server);
            return self.proxy_send(io, c);
        }
        let stream_retry = conn.stream.is_some() && p.tries_left > 0 && self.untried(c);
        if stream_retry || self.can_retry(c) {
            if let Some(p) = self.conns[c.index()].proxy.as_mut() {
                p.tries_left -= 1;
            }
            return self.proxy_send(io, c);
        }
        let status = if why == Fail::Timeout { 504 } else { 502 };
        self.give_up(io, c, status);
    }

    /// Some server of the request's upstream was not tried yet.
    pub(in crate::zone) fn untried(&self, c: ConnId) -> bool {
        let (Some(p), Some(z)) = (self.conns[c.index()].proxy.as_ref(), self.ups.as_ref()) else {
            return false;
        };
        (0..z.defs.list[p.upstream].servers.len()).any(|s| !p.tried.contains(&s))
    }

    pub(in crate::zone) fn upstream_name(&self, u: ConnId) -> String {
        match (self.upc[u.index()].as_ref(), self.ups.as_ref()) {
            (Some(up), Some(z)) => {
                let d = &z.defs.list[up.upstream];
                format!("{} ({})", d.name, d.servers[up.server].name)
            }
            _ => "?".into(),
        }
    }

    pub(in crate::zone) fn up_eof(&mut self, io: &mut Io, u: ConnId) {
        let Some(up) = self.upc[u.index()].as_mut() else {
            return;
        };
        up.eof = true;
        match up.state {
            UpState::Tunnel => self.tunnel_up_eof(io, u),
            UpState::Busy if up.head_done && up.until_close => {
                let c = up.client.map(|x| x.0);
                if let Some(c) = c {
                    self.response_done(io, u, c, false);
                }
            }
            UpState::Busy => self.upstream_failed(io, u, Fail::Reset),
            UpState::Idle | UpState::Connecting => {
                let (ui, s) = (up.upstream, up.server);
                if up.state == UpState::Idle {
                    if let Some(z) = self.ups.as_mut() {
                        z.remove_idle(ui, s, u);
                    }
                }
                up.state = UpState::Closing;
                io.close(u);
            }
            UpState::Closing => {}
        }
    }

    pub(in crate::zone) fn up_closed(
        &mut self,
        io: &mut Io,
        u: ConnId,
        err: Option<std::io::Error>,
    ) {
        if self.upc[u.index()].is_none() {
            return;
        }
        let name = self.upstream_name(u);
        // Out of the table first: a retry below may be given this very slot again.
        let mut up = self.upc[u.index()].take().expect("checked");
        self.connector.closed(u, io.now());
        if let Some(e) = &err {
            tracing::debug!(zone = self.id, "upstream {name}: {e}");
        }
        let why = match up.state {
            UpState::Connecting => {
                if let Some(e) = &err {
                    tracing::warn!("upstream {name}: {e}");
                }
                Fail::Connect
            }
            UpState::Busy | UpState::Tunnel => Fail::Reset,
            UpState::Idle => {
                if let Some(z) = self.ups.as_mut() {
                    z.remove_idle(up.upstream, up.server, u);
                }
                return;
            }
            UpState::Closing => return,
        };
        if let (UpState::Tunnel, Some((c, _))) = (up.state, up.client) {
            if self.conns[c.index()].proxy.is_none() {
                self.conns[c.index()].tunnel = None;
                io.close_after_flush(c);
                return;
            }
        }
        let info = FailInfo::take(&mut up);
        self.after_failure(io, info, why);
    }

    pub(in crate::zone) fn up_expire(&mut self, io: &mut Io, u: ConnId) {
        let Some(up) = self.upc[u.index()].as_mut() else {
            return;
        };
        match up.state {
            UpState::Connecting | UpState::Busy => {
                tracing::warn!("upstream {}: timed out", self.upstream_name(u));
                self.upstream_failed(io, u, Fail::Timeout)
            }
            UpState::Idle => {
                let (ui, s) = (up.upstream, up.server);
                up.state = UpState::Closing;
                if let Some(z) = self.ups.as_mut() {
                    z.remove_idle(ui, s, u);
                }
                io.close(u);
            }
            UpState::Tunnel => {
                up.state = UpState::Closing;
                let c = up.client.take();
                io.close(u);
                if let Some((c, _)) = c {
                    self.conns[c.index()].tunnel = None;
                    io.close_after_flush(c);
                }
            }
            UpState::Closing => {}
        }
    }
}
