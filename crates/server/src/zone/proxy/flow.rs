//! Back-pressure between the two sides, and the client going away or stalling while its
//! request is proxied.

use ringx_engine::{ConnId, Io};

use super::super::upconn::UpState;
use super::super::{HttpZone, Phase};

impl HttpZone {
    /// Everything queued to an upstream was written: a client paused for back-pressure
    /// reads again.
    pub(in crate::zone) fn up_flushed(&mut self, io: &mut Io, u: ConnId) {
        let Some((c, cgen)) = self.upc[u.index()].as_ref().and_then(|x| x.client) else {
            return;
        };
        let conn = &mut self.conns[c.index()];
        if conn.gen != cgen {
            return;
        }
        let resume = match conn.phase {
            Phase::Proxy => conn.proxy.as_mut().is_some_and(|p| {
                let was = p.body_paused;
                p.body_paused = false;
                was && p.req_body.is_some()
            }),
            Phase::Tunnel => conn.paused,
            _ => false,
        };
        if resume {
            conn.paused = false;
            if !conn.eof {
                io.resume_recv(c);
            }
            if conn.phase == Phase::Tunnel {
                self.tunnel_flush_client_buffer(io, c);
            } else {
                self.process_buffered(io, c);
            }
        }
    }

    /// The client's queue drained: the upstream paused for back-pressure reads again.
    pub(in crate::zone) fn client_flushed_while_proxying(&mut self, io: &mut Io, c: ConnId) {
        let conn = &self.conns[c.index()];
        let u = match conn.phase {
            Phase::Proxy => conn.proxy.as_ref().and_then(|p| p.up),
            Phase::Tunnel => conn.tunnel,
            _ => None,
        };
        if let Some(u) = u {
            if let Some(up) = self.upc[u.index()].as_mut() {
                if up.paused {
                    up.paused = false;
                    if !up.eof {
                        io.resume_recv(u);
                    }
                }
            }
        }
    }

    /// The client closed its side while its request was being proxied.
    pub(in crate::zone) fn proxy_client_eof(&mut self, io: &mut Io, c: ConnId) {
        let body_missing = self.conns[c.index()]
            .proxy
            .as_ref()
            .is_some_and(|p| p.req_body.is_some());
        if body_missing {
            self.detach_upstream(io, c);
            self.conns[c.index()].proxy = None;
            io.close(c);
        }
        // Otherwise the response is still delivered, then the connection closes.
    }

    pub(in crate::zone) fn client_closed_while_proxying(&mut self, io: &mut Io, c: ConnId) {
        if self.conns.get(c.index()).is_none() {
            return;
        }
        self.detach_upstream(io, c);
        self.conns[c.index()].proxy = None;
        if let Some(u) = self.conns[c.index()].tunnel.take() {
            if let Some(up) = self.upc[u.index()].as_mut() {
                if up.state != UpState::Closing {
                    up.state = UpState::Closing;
                    up.client = None;
                    io.close_after_flush(u);
                }
            }
        }
    }

    /// The client's deadline passed while proxying.
    pub(in crate::zone) fn proxy_client_timeout(&mut self, io: &mut Io, c: ConnId) {
        let in_body = self.conns[c.index()]
            .proxy
            .as_ref()
            .is_some_and(|p| p.req_body.is_some() && !p.body_paused);
        if in_body {
            return self.abort_request(io, c, 408);
        }
        // Waiting for the upstream: its read timeout decides.
        let at = io.now() + self.set.send_timeout;
        self.set_deadline(io, c, at);
    }
}
