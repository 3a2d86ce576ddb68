//! The upstream's side of an exchange: the connect completing, the response head (interim
//! responses skipped, 502/503 retried, framing re-declared for the client) and its body,
//! relayed with back-pressure; then the upstream connection goes back to the pool or closes.

use std::mem::MaybeUninit;

use ringx_engine::ConnId;
use ringx_http::upstream::{
    parse_response_uninit, write_response_head_edit, ClientFraming, ResponseBody, ResponseEdit,
    ResponseHead,
};
use ringx_http::{BodyDecoder, BodyKind, BodyLimits, Parsed, Version};

use super::{pause_upstream, up_timeouts, Exchange, Outcome, MAX_RESPONSE_HEAD, PROXY_HIGH_WATER};
use crate::compress::encoder::Encoder;
use crate::compress::relay::Relay;
use crate::compress::Coding;
use crate::ctx::base::Base;
use crate::ctx::Cx;
use crate::error::{Error, Kind, Side};
use crate::response::{ConnHdr, HeadSink, Written};
use crate::role::upstream::{UpEvent, UpState};

/// Where parsing a response head left the input.
enum Head {
    /// More bytes are needed (kept in the upstream's buffer).
    Partial,
    /// The head was relayed; its body starts at this offset of the input.
    Body(usize),
    /// The exchange ended or changed course (done, failed, upgraded).
    Ended(Outcome),
}

impl Exchange {
    /// An event on upstream connection `u` of the exchange whose client is connection `c`
    /// (`base`): what the exchange made of it. `Flushed` (the upstream took what was queued)
    /// is the client role's to act on: the exchange goes on.
    pub fn event(
        &mut self,
        cx: &mut Cx,
        base: &mut Base,
        c: ConnId,
        u: ConnId,
        ev: UpEvent,
    ) -> Outcome {
        match ev {
            UpEvent::Connected => {
                self.upstream_connected(cx, u);
                Outcome::Pending
            }
            UpEvent::Data(d) => self.upstream_data(cx, base, c, u, d),
            UpEvent::Eof => self.upstream_eof(cx, base, c, u),
            UpEvent::Flushed => Outcome::Pending,
            UpEvent::Closed(err) => self.upstream_closed(cx, base, c, u, err),
            UpEvent::Timeout => self.upstream_timeout(cx, base, c, u),
        }
    }

    /// The connect of `u` completed.
    pub fn upstream_connected(&mut self, cx: &mut Cx, u: ConnId) {
        let now = cx.io.now();
        let (rt, _) = up_timeouts(cx.ctx.pools(self.dial.gen), self.dial.upstream);
        let Some(up) = cx.ups.get_mut(u) else { return };
        if up.state == UpState::Connecting {
            up.state = UpState::Busy;
            cx.ctx.set_up_deadline(cx.io, up, u, now + rt);
        }
    }

    /// Response bytes from `u`.
    pub fn upstream_data(
        &mut self,
        cx: &mut Cx,
        base: &mut Base,
        c: ConnId,
        u: ConnId,
        data: &[u8],
    ) -> Outcome {
        let now = cx.io.now();
        let (rt, _) = up_timeouts(cx.ctx.pools(self.dial.gen), self.dial.upstream);
        let Some(up) = cx.ups.get_mut(u) else {
            return Outcome::Pending;
        };
        up.got_bytes = true;
        match up.state {
            UpState::Busy => {}
            UpState::Closing => return Outcome::Pending,
            // Bytes before the connect completed, or in a state an exchange never leaves
            // its connection in: it cannot be trusted.
            _ => {
                let why = Error::new(Kind::Malformed, Side::Upstream);
                return self.upstream_failed(cx, base, c, u, why);
            }
        }
        up.deadline = now + rt;
        if up.head_done {
            return self.response_body(cx, base, c, u, data);
        }
        let mut buf = std::mem::take(&mut up.inbuf);
        let input: &[u8] = if buf.is_empty() {
            data
        } else {
            buf.extend_from_slice(data);
            &buf
        };
        match self.response_head(cx, base, c, u, input) {
            Head::Partial => {
                if let Some(up) = cx.ups.get_mut(u) {
                    if buf.is_empty() {
                        up.inbuf.extend_from_slice(data);
                    } else {
                        up.inbuf = buf;
                    }
                }
                Outcome::Pending
            }
            Head::Body(off) if off < input.len() => {
                self.response_body(cx, base, c, u, &input[off..])
            }
            Head::Body(_) => Outcome::Pending,
            Head::Ended(o) => o,
        }
    }

    /// The server closed its write side.
    pub fn upstream_eof(&mut self, cx: &mut Cx, base: &mut Base, c: ConnId, u: ConnId) -> Outcome {
        let Some(up) = cx.ups.get_mut(u) else {
            return Outcome::Pending;
        };
        up.eof = true;
        // Over TLS only close_notify ends what the server sends; a FIN without it may be a
        // truncation by anyone on the path (RFC 8446 §6.1).
        let truncated = up.tr.tls_closed() == Some(false);
        match up.state {
            // The response runs until the server closes: this is its end.
            UpState::Busy if up.head_done && up.until_close && !truncated => {
                if !self.finish_relay(cx, base, c) {
                    return Outcome::Cut;
                }
                self.response_done(cx, u, false)
            }
            UpState::Busy | UpState::Connecting => {
                let mut why = Error::new(Kind::Reset, Side::Upstream);
                if truncated && up.head_done {
                    why = why.context(format!(
                        "upstream {}: TLS: the server closed the connection without \
                         close_notify, so the response may be truncated; it is cut, not passed \
                         on as complete (nor cached)",
                        self.dial.name(cx.ctx.pools(self.dial.gen))
                    ));
                    tracing::warn!("{why}");
                }
                self.upstream_failed(cx, base, c, u, why)
            }
            _ => Outcome::Pending,
        }
    }

    fn response_head(
        &mut self,
        cx: &mut Cx,
        base: &mut Base,
        c: ConnId,
        u: ConnId,
        input: &[u8],
    ) -> Head {
        let mut off = 0;
        loop {
            let mut headers = [const { MaybeUninit::<httparse::Header>::uninit() }; 128];
            let h = match parse_response_uninit(
                &input[off..],
                &mut headers,
                MAX_RESPONSE_HEAD,
                self.head_request,
            ) {
                Ok(Parsed::Partial) if off > 0 => {
                    // Interim responses were consumed: keep only the rest.
                    if let Some(up) = cx.ups.get_mut(u) {
                        up.inbuf = input[off..].to_vec();
                    }
                    return Head::Ended(Outcome::Pending);
                }
                Ok(Parsed::Partial) => return Head::Partial,
                Err(e) => {
                    let why = Error::new(Kind::Malformed, Side::Upstream)
                        .context(format!(
                            "upstream {}",
                            self.dial.name(cx.ctx.pools(self.dial.gen))
                        ))
                        .cause(e.to_string());
                    tracing::warn!("{why}");
                    return Head::Ended(self.upstream_failed(cx, base, c, u, why));
                }
                Ok(Parsed::Complete(h)) => h,
            };
            if (100..200).contains(&h.status) && h.status != 101 {
                off += h.head_len; // interim responses are not passed on (100 Continue was sent)
                continue;
            }
            if h.status == 101 && !self.upgrade {
                let why = Error::new(Kind::Malformed, Side::Upstream)
                    .context("101 Switching Protocols to a request that asked for no upgrade");
                return Head::Ended(self.upstream_failed(cx, base, c, u, why));
            }
            if matches!(h.status, 502 | 503) && self.can_retry(cx.ctx.pools(self.dial.gen)) {
                let why = Error::new(Kind::Status(h.status), Side::Upstream);
                return Head::Ended(self.upstream_failed(cx, base, c, u, why));
            }
            if self.deco.as_ref().is_some_and(|d| d.intercepts(h.status)) {
                // `proxy_intercept_errors`: the error page instead (the connection, its body
                // unread, is closed when the exchange ends).
                return Head::Ended(Outcome::GiveUp(h.status));
            }
            if let Some(cap) = self.capture.as_mut() {
                cap.status = h.status;
                cap.head.clear();
                cap.head.extend_from_slice(&input[off..off + h.head_len]);
                if let (true, Some(f)) = (cap.to_client, cap.fill.as_mut()) {
                    // A revalidation's 304, or a status the stale copy stands in for: the
                    // client is answered from the cache, this response only read.
                    let now = cx.ctx.wall_ms(cx.io.now());
                    let revalidated =
                        h.status == 304 && f.mode == crate::cache::fill::Mode::Revalidate;
                    f.stale_for_status = !revalidated && f.stale_for(h.status, true, now).is_some();
                    if revalidated || f.stale_for_status {
                        cap.to_client = false;
                    }
                }
            }
            if self.is_sub() {
                // A subrequest: nothing goes to the client; the body is read to its end (into
                // the capture, or discarded) so the connection can be reused.
                let (ui, s) = (self.dial.upstream, self.dial.server);
                let took = self.dial.took(cx.io.now());
                cx.ctx.pools(self.dial.gen).responded(ui, s, took);
                let up = cx.ups.get_mut(u).expect("a busy upstream has a record");
                up.head_done = true;
                up.framing = ClientFraming::Same;
                up.keep = h.keep_alive && !up.tied;
                let end = off + h.head_len;
                return match h.body {
                    ResponseBody::None | ResponseBody::Length(0) => {
                        let clean = end == input.len();
                        Head::Ended(self.response_done(cx, u, clean))
                    }
                    ResponseBody::Length(n) => {
                        up.body =
                            Some(BodyDecoder::new(BodyKind::Length(n), BodyLimits::default()));
                        Head::Body(end)
                    }
                    ResponseBody::Chunked => {
                        up.body = Some(BodyDecoder::new(BodyKind::Chunked, BodyLimits::default()));
                        Head::Body(end)
                    }
                    ResponseBody::UntilClose => {
                        up.until_close = true;
                        Head::Body(end)
                    }
                };
            }
            let h = match self.deco.as_ref().and_then(|d| d.status_as) {
                Some(status) if h.status != 101 => ResponseHead {
                    status,
                    reason: ringx_http::reason(status),
                    ..h
                },
                _ => h,
            };
            let keep_client = self.keep && !cx.ctx.draining && h.body != ResponseBody::UntilClose;
            let ch = ConnHdr::new(self.version == Version::Http11, keep_client);
            // The cache status, when the location has a cache, goes with the connection line.
            let line = self
                .capture
                .as_ref()
                .map_or(&[][..], |x| &x.client_line[..]);
            let conn: std::borrow::Cow<[u8]> = if line.is_empty() {
                ch.bytes().into()
            } else {
                [line, ch.bytes()].concat().into()
            };
            // An HTTP/2 stream takes the head as fields; a socket as HTTP/1.x.
            let wrote = match base.tr.head_fields() {
                Some(f) => Some(self.write_head(f, &h, &conn)),
                None => base
                    .tr
                    .out_buf(cx.io, c)
                    .map(|out| self.write_head(out, &h, &conn)),
            };
            let Some((framing, codec, head_len)) = wrote else {
                let why = Error::new(Kind::Reset, Side::Client);
                return Head::Ended(self.upstream_failed(cx, base, c, u, why));
            };
            if let (Some((coding, level)), Some(d)) = (codec, self.deco.as_deref_mut()) {
                let len = match h.body {
                    ResponseBody::Length(n) => Some(n),
                    _ => None,
                };
                match Encoder::new(coding, level, len) {
                    Ok(e) => {
                        let chunked = framing == ClientFraming::Same;
                        d.relay = Some(Relay::new(e, chunked));
                    }
                    Err(e) => {
                        // The head already says the body is encoded: it cannot go out as it is.
                        tracing::error!("cannot start a {} encoder: {e}", coding.token());
                        return Head::Ended(Outcome::Cut);
                    }
                }
            }
            self.started = true;
            self.keep = keep_client && framing == ClientFraming::Same;
            self.close_framed = framing == ClientFraming::Close;
            let (ui, s) = (self.dial.upstream, self.dial.server);
            let written = Written {
                status: h.status,
                head_len,
            };
            if self.log {
                cx.ctx.log.status(cx.io, c, written, base);
            }
            if let Some(st) = self
                .capture
                .as_ref()
                .map(|x| x.client_status)
                .filter(|s| !s.is_empty())
            {
                if self.log {
                    cx.ctx.log.cache_status(c, st);
                }
                crate::cache::loc::count(&cx.ctx.log.counters, st);
            }
            let took = self.dial.took(cx.io.now());
            cx.ctx.pools(self.dial.gen).responded(ui, s, took);
            let up = cx.ups.get_mut(u).expect("a busy upstream has a record");
            up.head_done = true;
            up.framing = framing;
            up.keep = h.keep_alive && !up.tied;
            let end = off + h.head_len;
            if h.status == 101 {
                if end < input.len() {
                    base.tr.write(cx.io, c, &input[end..]);
                }
                up.state = UpState::Tunnel;
                cx.ctx.pools(self.dial.gen).finished(ui, s);
                self.up = None;
                return Head::Ended(Outcome::Upgrade(u));
            }
            match h.body {
                // An empty body ends with the head: no byte will come to end it.
                ResponseBody::None | ResponseBody::Length(0) => {
                    let clean = end == input.len();
                    // An encoded empty body still has the coding's frame and the last chunk.
                    if h.body != ResponseBody::None && !self.finish_relay(cx, base, c) {
                        return Head::Ended(Outcome::Cut);
                    }
                    return Head::Ended(self.response_done(cx, u, clean));
                }
                // The whole body came with the head, and goes out as it came (its length
                // declared, no coding, no capture): relayed here, as `response_body` would,
                // without a decoder.
                ResponseBody::Length(n)
                    if (input.len() - end) as u64 >= n
                        && framing == ClientFraming::Same
                        && self.capture.is_none()
                        && self.deco.as_ref().is_none_or(|d| d.relay.is_none()) =>
                {
                    let stop = end + n as usize;
                    base.tr.write(cx.io, c, &input[end..stop]);
                    if self.pass_trailers {
                        self.trailers = None; // a length-delimited body has none
                    }
                    return Head::Ended(self.response_done(cx, u, stop == input.len()));
                }
                ResponseBody::Length(n) => {
                    up.body = Some(BodyDecoder::new(BodyKind::Length(n), BodyLimits::default()))
                }
                ResponseBody::Chunked => {
                    // Kept for an HTTP/2 client's trailers, or to pass the section on to an
                    // HTTP/1.1 client without the fields that may not be trailers.
                    let mut dec = BodyDecoder::new(BodyKind::Chunked, BodyLimits::default());
                    dec.keep_trailers();
                    up.body = Some(dec)
                }
                ResponseBody::UntilClose => up.until_close = true,
            }
            return Head::Body(end);
        }
    }

    /// Writes the response head `h` for the client into `out` (`conn`: the line that ends
    /// it, with the cache status), edited as the location says (hidden fields, `add_header`,
    /// compression). Returns the framing, the coding the body is to be encoded with, and the
    /// head's length.
    fn write_head<O: HeadSink + ?Sized>(
        &mut self,
        out: &mut O,
        h: &ResponseHead,
        conn: &[u8],
    ) -> (ClientFraming, Option<(Coding, u32)>, u32) {
        let before = out.mark();
        let (framing, codec) = match self.deco.as_deref_mut() {
            None => (
                ringx_http::upstream::write_response_head(out, h, self.version, conn),
                None,
            ),
            Some(d) => {
                let (codec, vary) = d.decide(h);
                let codec = codec
                    .filter(|_| h.status != 101)
                    .map(|k| (k.coding, k.level));
                let added = d.added(h.status);
                let edit = ResponseEdit {
                    hide: d.hide(),
                    encode: codec.map(|k| k.0.token()),
                    vary,
                    add: added.as_bytes(),
                };
                let f = write_response_head_edit(out, h, self.version, conn, &edit);
                (f, codec)
            }
        };
        (framing, codec, (out.mark() - before) as u32)
    }

    fn response_body(
        &mut self,
        cx: &mut Cx,
        base: &mut Base,
        c: ConnId,
        u: ConnId,
        input: &[u8],
    ) -> Outcome {
        let Some(up) = cx.ups.get_mut(u) else {
            return Outcome::Pending;
        };
        let sub = self.is_sub();
        if let Some(cap) = self.capture.as_mut().filter(|_| up.until_close) {
            cap.take(input);
        }
        let mut relay = self.deco.as_mut().and_then(|d| d.relay.as_mut());
        let mut encode_failed = false;
        if up.until_close {
            match relay.as_mut() {
                _ if sub => {}
                Some(r) => {
                    let mut w = |b: &[u8]| base.tr.write(cx.io, c, b);
                    encode_failed = r.feed(input, &mut w).is_err();
                }
                None => base.tr.write(cx.io, c, input),
            }
        } else {
            let framing = up.framing;
            let Some(dec) = up.body.as_mut() else {
                return Outcome::Pending;
            };
            let raw = !sub && relay.is_none() && framing == ClientFraming::Same;
            let mut pos = 0;
            while pos < input.len() {
                let d = match dec.decode(&input[pos..]) {
                    Ok(d) => d,
                    Err(e) => {
                        let why = Error::new(Kind::Malformed, Side::Upstream)
                            .context("upstream response body")
                            .cause(format!("{e:?}"));
                        tracing::warn!("{why}");
                        return self.upstream_failed(cx, base, c, u, why);
                    }
                };
                let mut w = |b: &[u8]| base.tr.write(cx.io, c, b);
                match (relay.as_mut(), framing) {
                    _ if sub => {}
                    (Some(r), _) => encode_failed |= r.feed(d.data, &mut w).is_err(),
                    (None, ClientFraming::Same) => w(&input[pos..pos + d.consumed - d.trailer]),
                    (None, ClientFraming::Close) => w(d.data),
                }
                if let Some(cap) = self.capture.as_mut() {
                    cap.take(d.data);
                }
                pos += d.consumed;
                if d.done && !encode_failed {
                    let clean = pos == input.len();
                    let kept = dec.take_trailers();
                    if let (true, Some(t)) = (raw, &kept) {
                        // The trailer section as it came, less what may not be a trailer.
                        let mut end = ringx_http::trailer::allowed_lines(t);
                        end.extend_from_slice(b"\r\n");
                        base.tr.write(cx.io, c, &end);
                    }
                    if self.pass_trailers {
                        self.trailers = kept;
                    }
                    if !self.finish_relay(cx, base, c) {
                        return Outcome::Cut;
                    }
                    return self.response_done(cx, u, clean);
                }
                if d.consumed == 0 || encode_failed {
                    break;
                }
            }
        }
        if let Some(r) = self.deco.as_mut().and_then(|d| d.relay.as_mut()) {
            let mut w = |b: &[u8]| base.tr.write(cx.io, c, b);
            encode_failed |= r.burst_end(&mut w).is_err();
        }
        if encode_failed {
            tracing::error!("compressing a proxied response failed: the response is cut");
            return Outcome::Cut;
        }
        // A slow client: stop reading from the upstream until the client's queue drains.
        if !sub && base.tr.pending(cx.io, c) > base.tr.high_water(PROXY_HIGH_WATER) {
            if let Some(up) = cx.ups.get_mut(u) {
                if !up.paused {
                    pause_upstream(cx.io, up, u);
                    base.tr.notify_when_flushed(cx.io, c);
                }
            }
        }
        Outcome::Pending
    }

    /// Ends a compressed body (its last bytes, the last chunk); false if the encoder failed.
    fn finish_relay(&mut self, cx: &mut Cx, base: &mut Base, c: ConnId) -> bool {
        let Some(r) = self.deco.as_mut().and_then(|d| d.relay.as_mut()) else {
            return true;
        };
        let mut w = |b: &[u8]| base.tr.write(cx.io, c, b);
        r.finish(&mut w).is_ok()
    }

    /// The response is complete: the upstream connection goes back to the pool if it can
    /// carry another request (`clean`: nothing followed the response), else it closes.
    fn response_done(&mut self, cx: &mut Cx, u: ConnId, clean: bool) -> Outcome {
        if let Some(cap) = self.capture.as_mut() {
            cap.complete = true;
        }
        let now = cx.io.now();
        let draining = cx.ctx.draining || !cx.ctx.is_current(self.dial.gen);
        let Some(up) = cx.ups.get_mut(u) else {
            return Outcome::Done;
        };
        let (ui, s) = (up.upstream, up.server);
        up.client = None;
        let reusable = clean && up.keep && !up.eof && !draining;
        let pools = cx.ctx.pools(self.dial.gen);
        let pooled = reusable && pools.put_idle(ui, s, u);
        pools.finished(ui, s);
        let (_, ka) = up_timeouts(pools, ui);
        self.up = None;
        if pooled {
            up.state = UpState::Idle;
            up.reset_for_request();
            if up.paused {
                up.paused = false;
                cx.io.resume_recv(u);
            }
            cx.ctx.set_up_deadline(cx.io, up, u, now + ka);
        } else {
            up.state = UpState::Closing;
            cx.ctx.connector.closing(cx.io, u);
            cx.io.close(u);
        }
        Outcome::Done
    }
}
