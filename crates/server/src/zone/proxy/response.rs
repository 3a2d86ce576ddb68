//! The upstream's response: its head (interim responses skipped, 502/503 retried, framing
//! re-declared for the client) and its body, relayed with back-pressure; then the upstream
//! connection goes back to the pool or closes.

use std::mem::MaybeUninit;

use ringx_engine::{ConnId, Io};
use ringx_http::upstream::{parse_response_uninit, ClientFraming, ResponseBody};
use ringx_http::{BodyDecoder, BodyKind, BodyLimits, Parsed, Version};

use super::super::upconn::UpState;
use super::super::{HttpZone, Phase};
use super::*;

enum Head {
    Partial,
    Body(usize),
    Gone,
}

impl HttpZone {
    pub(in crate::zone) fn up_connected(&mut self, io: &mut Io, u: ConnId) {
        let now = io.now();
        let Some(up) = self.upc[u.index()].as_mut() else {
            return;
        };
        let read = self
            .ups
            .as_ref()
            .map(|z| z.defs.list[up.upstream].read_timeout);
        match up.state {
            UpState::Connecting if up.client.is_some() => {
                let is_stream = up
                    .client
                    .is_some_and(|(c, _)| self.conns[c.index()].stream.is_some());
                if is_stream {
                    up.state = UpState::Tunnel;
                    let (c, _) = up.client.expect("checked");
                    self.stream_connected(io, c, u);
                } else {
                    up.state = UpState::Busy;
                    if let Some(rt) = read {
                        self.set_up_deadline(io, u, now + rt);
                    }
                }
            }
            UpState::Connecting => {
                up.state = UpState::Closing;
                io.close(u);
            }
            _ => {}
        }
    }

    pub(in crate::zone) fn up_data(&mut self, io: &mut Io, u: ConnId, data: &[u8]) {
        let now = io.now();
        let Some(up) = self.upc[u.index()].as_mut() else {
            return;
        };
        up.got_bytes = true;
        match up.state {
            UpState::Tunnel => return self.tunnel_up_data(io, u, data),
            UpState::Busy => {}
            UpState::Closing => return,
            // Bytes nobody asked for (an idle connection): it cannot be trusted any more.
            UpState::Idle | UpState::Connecting => {
                up.state = UpState::Closing;
                io.close(u);
                return;
            }
        }
        let Some((c, _)) = up.client else {
            up.state = UpState::Closing;
            io.close(u);
            return;
        };
        let ui = up.upstream;
        let (rt, _) = self.up_timeouts(ui);
        let up = self.upc[u.index()].as_mut().expect("present");
        up.deadline = now + rt;
        if up.head_done {
            return self.response_body(io, u, c, data);
        }
        let mut buf = std::mem::take(&mut up.inbuf);
        let input: &[u8] = if buf.is_empty() {
            data
        } else {
            buf.extend_from_slice(data);
            &buf
        };
        match self.response_head(io, u, c, input) {
            Head::Partial => {
                if let Some(up) = self.upc[u.index()].as_mut() {
                    if buf.is_empty() {
                        up.inbuf.extend_from_slice(data);
                    } else {
                        up.inbuf = buf;
                    }
                }
            }
            Head::Body(off) => {
                if off < input.len() {
                    self.response_body(io, u, c, &input[off..]);
                }
            }
            Head::Gone => {}
        }
    }

    /// Whether a failed attempt may go to another server: nothing reached the client, the
    /// method is idempotent, the body (if any) can be replayed, tries and servers are left.
    pub(in crate::zone) fn can_retry(&self, c: ConnId) -> bool {
        let ok = self.conns[c.index()].proxy.as_ref().is_some_and(|p| {
            !p.started
                && p.idempotent
                && p.tries_left > 0
                && (p.req_body.is_none() || p.replay.is_some())
        });
        ok && self.untried(c)
    }

    fn response_head(&mut self, io: &mut Io, u: ConnId, c: ConnId, input: &[u8]) -> Head {
        let mut off = 0;
        loop {
            let Some(p) = self.conns[c.index()].proxy.as_ref() else {
                return Head::Gone;
            };
            let mut headers = [const { MaybeUninit::<httparse::Header>::uninit() }; 128];
            let h = match parse_response_uninit(
                &input[off..],
                &mut headers,
                MAX_RESPONSE_HEAD,
                p.head_request,
            ) {
                Ok(Parsed::Partial) => {
                    if off > 0 {
                        // Interim responses were consumed: keep only the rest.
                        if let Some(up) = self.upc[u.index()].as_mut() {
                            up.inbuf = input[off..].to_vec();
                        }
                        return Head::Gone;
                    }
                    return Head::Partial;
                }
                Err(e) => {
                    let name = self.upstream_name(u);
                    tracing::warn!("upstream {name}: {e}");
                    self.upstream_failed(io, u, Fail::Bad);
                    return Head::Gone;
                }
                Ok(Parsed::Complete(h)) => h,
            };
            if (100..200).contains(&h.status) && h.status != 101 {
                off += h.head_len; // interim responses are not passed on (100 Continue was sent)
                continue;
            }
            if h.status == 101 && !p.upgrade {
                self.upstream_failed(io, u, Fail::Bad);
                return Head::Gone;
            }
            if matches!(h.status, 502 | 503) && self.can_retry(c) {
                self.upstream_failed(io, u, Fail::Status);
                return Head::Gone;
            }
            let p = self.conns[c.index()].proxy.as_mut().expect("checked above");
            let keep_client = p.keep && !self.draining && h.body != ResponseBody::UntilClose;
            let ch = Self::conn_hdr(p.version == Version::Http11, keep_client);
            let Some(out) = io.out_buf(c) else {
                self.upstream_failed(io, u, Fail::Reset);
                return Head::Gone;
            };
            let before = out.len();
            let framing = ringx_http::upstream::write_response_head(out, &h, p.version, ch.bytes());
            let head_len = (out.len() - before) as u64;
            p.started = true;
            p.keep = keep_client && framing == ClientFraming::Same;
            let (ui, s) = (p.upstream, p.server);
            self.obs_status(io, c, h.status, head_len);
            if let Some(z) = self.ups.as_mut() {
                z.succeeded(ui, s);
            }
            let up = self.upc[u.index()].as_mut().expect("busy upstream");
            up.head_done = true;
            up.framing = framing;
            up.keep = h.keep_alive && !up.tied;
            let end = off + h.head_len;
            if h.status == 101 {
                self.tunnel_begin(io, c, u, &input[end..]);
                return Head::Gone;
            }
            match h.body {
                ResponseBody::None => {
                    let clean = end == input.len();
                    self.response_done(io, u, c, clean);
                    return Head::Gone;
                }
                ResponseBody::Length(n) => {
                    up.body = Some(BodyDecoder::new(BodyKind::Length(n), BodyLimits::default()))
                }
                ResponseBody::Chunked => {
                    up.body = Some(BodyDecoder::new(BodyKind::Chunked, BodyLimits::default()))
                }
                ResponseBody::UntilClose => up.until_close = true,
            }
            return Head::Body(end);
        }
    }

    fn response_body(&mut self, io: &mut Io, u: ConnId, c: ConnId, input: &[u8]) {
        let Some(up) = self.upc[u.index()].as_mut() else {
            return;
        };
        if up.until_close {
            io.write(c, input);
        } else {
            let framing = up.framing;
            let Some(dec) = up.body.as_mut() else { return };
            let mut pos = 0;
            while pos < input.len() {
                let d = match dec.decode(&input[pos..]) {
                    Ok(d) => d,
                    Err(e) => {
                        tracing::warn!("upstream response body: {e:?}");
                        self.upstream_failed(io, u, Fail::Bad);
                        return;
                    }
                };
                match framing {
                    ClientFraming::Same => io.write(c, &input[pos..pos + d.consumed]),
                    ClientFraming::Close => io.write(c, d.data),
                }
                pos += d.consumed;
                if d.done {
                    let clean = pos == input.len();
                    return self.response_done(io, u, c, clean);
                }
                if d.consumed == 0 {
                    break;
                }
            }
        }
        // A slow client: stop reading from the upstream until the client's queue drains.
        if io.pending(c) > PROXY_HIGH_WATER {
            if let Some(up) = self.upc[u.index()].as_mut() {
                if !up.paused {
                    up.paused = true;
                    io.pause_recv(u);
                    io.notify_when_flushed(c);
                }
            }
        }
    }

    /// The response is complete: pool the upstream connection if it can carry another
    /// request, and let the client go on.
    pub(in crate::zone) fn response_done(
        &mut self,
        io: &mut Io,
        u: ConnId,
        c: ConnId,
        clean: bool,
    ) {
        let now = io.now();
        let Some(up) = self.upc[u.index()].as_mut() else {
            return;
        };
        let (ui, s) = (up.upstream, up.server);
        up.client = None;
        let reusable = clean && up.keep && !up.eof && !self.draining;
        let pooled = reusable && self.ups.as_mut().is_some_and(|z| z.put_idle(ui, s, u));
        if let Some(z) = self.ups.as_mut() {
            z.per[ui].bal.finished(s);
        }
        let (_, ka) = self.up_timeouts(ui);
        let up = self.upc[u.index()].as_mut().expect("present");
        if pooled {
            up.state = UpState::Idle;
            up.reset_for_request();
            if up.paused {
                up.paused = false;
                io.resume_recv(u);
            }
            self.set_up_deadline(io, u, now + ka);
        } else {
            up.state = UpState::Closing;
            self.connector.closing(io, u);
            io.close(u);
        }
        let conn = &mut self.conns[c.index()];
        let Some(p) = conn.proxy.take() else { return };
        conn.phase = Phase::Idle;
        conn.paused = false;
        let close = !p.keep || p.req_body.is_some() || conn.eof;
        if self.proxy_pool.len() < PROXY_POOL && p.head.capacity() <= 64 * 1024 {
            self.proxy_pool.push(p);
        }
        let more = !conn.inbuf.is_empty();
        self.after_response(io, c, close, more);
        if close {
            return;
        }
        let conn = &self.conns[c.index()];
        if !conn.paused {
            if !conn.eof {
                io.resume_recv(c);
            }
            self.process_buffered(io, c);
        }
    }
}
