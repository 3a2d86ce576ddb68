//! The request body on its way to the upstream, and ending an exchange early.

use ringx_engine::{ConnId, Io};

use super::super::upconn::UpState;
use super::super::{HttpZone, Phase};
use super::*;

impl HttpZone {
    /// The request body arriving from the client: forwarded as it comes (chunked framing
    /// passed through unchanged). Returns the bytes consumed, `None` if the exchange ended.
    pub(in crate::zone) fn proxy_body(
        &mut self,
        io: &mut Io,
        c: ConnId,
        input: &[u8],
    ) -> Option<usize> {
        let max_body = self.set.max_body;
        let conn = &mut self.conns[c.index()];
        let p = conn.proxy.as_mut()?;
        let Some(dec) = p.req_body.as_mut() else {
            return Some(0);
        };
        let u = p.up;
        let mut pos = 0;
        let mut done = false;
        loop {
            let d = match dec.decode(&input[pos..]) {
                Ok(d) => d,
                Err(_) => {
                    self.abort_request(io, c, 400);
                    return None;
                }
            };
            let raw = &input[pos..pos + d.consumed];
            if let Some(u) = u {
                io.write(u, raw);
            }
            if let Some(r) = p.replay.as_mut() {
                if r.len() + raw.len() <= MAX_REPLAY {
                    r.extend_from_slice(raw);
                } else {
                    p.replay = None;
                }
            }
            pos += d.consumed;
            if dec.received() > max_body {
                self.abort_request(io, c, 413);
                return None;
            }
            if d.done {
                done = true;
                break;
            }
            if d.consumed == 0 || pos == input.len() {
                break;
            }
        }
        let now = io.now();
        if done {
            p.req_body = None;
            self.hold_client(io, c);
            let at = now + self.set.send_timeout;
            self.conns[c.index()].deadline = at;
        } else {
            self.conns[c.index()].deadline = now + self.set.body_timeout;
        }
        if let Some(u) = u {
            let send = self.upc[u.index()]
                .as_ref()
                .map(|x| self.up_send_timeout(x.upstream));
            if let (Some(up), Some(st)) = (self.upc[u.index()].as_mut(), send) {
                up.deadline = now + st; // the upstream is busy receiving, not idle
            }
            if !done && io.pending(u) > PROXY_HIGH_WATER {
                self.hold_client(io, c);
                if let Some(p) = self.conns[c.index()].proxy.as_mut() {
                    p.body_paused = true;
                }
                io.notify_when_flushed(u);
            }
        }
        Some(pos)
    }

    /// The request cannot go on (bad body framing, too large): answer and drop the upstream.
    pub(in crate::zone) fn abort_request(&mut self, io: &mut Io, c: ConnId, status: u16) {
        self.detach_upstream(io, c);
        let conn = &mut self.conns[c.index()];
        let started = conn.proxy.as_ref().is_some_and(|p| p.started);
        conn.proxy = None;
        conn.phase = Phase::Idle;
        if started {
            conn.phase = Phase::Lingering;
            io.close(c);
        } else {
            self.fail(io, c, status, false);
        }
    }

    /// Closes the client's upstream connection (not reusable: the exchange was cut).
    pub(in crate::zone) fn detach_upstream(&mut self, io: &mut Io, c: ConnId) {
        let Some(p) = self.conns[c.index()].proxy.as_mut() else {
            return;
        };
        let Some(u) = p.up.take() else { return };
        let (ui, s) = (p.upstream, p.server);
        if let Some(up) = self.upc[u.index()].as_mut() {
            if up.state != UpState::Closing {
                up.state = UpState::Closing;
                up.client = None;
                if let Some(z) = self.ups.as_mut() {
                    z.per[ui].bal.finished(s);
                }
                io.close(u);
            }
        }
    }

    /// Every server was tried (or none is usable): 502/504 to the client.
    pub(in crate::zone) fn give_up(&mut self, io: &mut Io, c: ConnId, status: u16) {
        let conn = &mut self.conns[c.index()];
        conn.proxy = None;
        if conn.stream.is_some() {
            conn.phase = Phase::Lingering;
            io.close(c);
            return;
        }
        conn.phase = Phase::Idle;
        conn.paused = false;
        self.fail(io, c, status, false);
    }
}
