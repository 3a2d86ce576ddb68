//! The request path of a zone: parse what arrived, route, answer (now, or once the body has
//! been read), keep pipelined requests in order and apply back-pressure.

use std::borrow::Cow;
use std::fs::File;
use std::mem::MaybeUninit;
use std::rc::Rc;

use ringx_engine::{ConnId, Io};
use ringx_http::{BodyDecoder, BodyKind, BodyLimits, Method, Parsed, Request};

use super::{HttpZone, Next, Pending, Phase, MAX_HEADERS_STACK, OUT_HIGH_WATER};
use crate::respond::{self, ConnHdr};
use crate::route::{Action, FileRoot};
use crate::static_files::{self, FileReply};

/// The file part of a response body: the file, the offset and the length to send.
type FilePart = (Rc<File>, u64, u64);

impl HttpZone {
    /// Answers with an error page and closes (lingering) after it.
    pub(super) fn fail(&mut self, io: &mut Io, c: ConnId, status: u16, head_only: bool) {
        let mut head_len = 0;
        if let Some(out) = io.out_buf(c) {
            let before = out.len();
            respond::error(
                out,
                status,
                &self.routes.server_header,
                &self.routes.server_token,
                &self.date,
                ConnHdr::Close,
                "",
                head_only,
            );
            head_len = super::ops::head_len_of(&out[before..]);
        }
        self.obs_status(io, c, status, head_len);
        self.obs_end(io, c);
        let conn = self.conn(c);
        conn.body = None;
        conn.pending = None;
        self.linger(io, c);
    }

    /// Half-closes after the queued output and discards input until the client closes, so
    /// unread input cannot turn into a reset that destroys the response.
    pub(super) fn linger(&mut self, io: &mut Io, c: ConnId) {
        self.conn(c).phase = Phase::Lingering;
        self.conn(c).inbuf = Vec::new();
        io.shutdown_after_flush(c);
        let at = io.now() + self.set.lingering_timeout;
        self.set_deadline(io, c, at);
        if self.conn(c).eof {
            io.close_after_flush(c);
        }
    }

    /// Consumes what it can of `input`; returns the bytes consumed.
    pub(super) fn process(&mut self, io: &mut Io, c: ConnId, input: &[u8]) -> usize {
        let mut pos = 0;
        loop {
            let conn = &mut self.conns[c.index()];
            if conn.paused {
                break;
            }
            match conn.phase {
                Phase::Lingering | Phase::Closed => return input.len(),
                Phase::Proxy => {
                    // The request body streams to the upstream; anything after it waits.
                    match self.proxy_body(io, c, &input[pos..]) {
                        Some(n) => pos += n,
                        None => return input.len(),
                    }
                    break;
                }
                Phase::Tunnel | Phase::ProxyHeader => break,
                Phase::Body => {
                    let dec = conn.body.as_mut().expect("a body phase has a decoder");
                    match dec.decode(&input[pos..]) {
                        Err(_) => {
                            self.fail(io, c, 400, false);
                            return input.len();
                        }
                        Ok(d) => {
                            pos += d.consumed;
                            if dec.received() > self.set.max_body {
                                self.fail(io, c, 413, false);
                                return input.len();
                            }
                            if d.done {
                                self.finish_body(io, c);
                                continue;
                            }
                            if d.consumed == 0 || pos == input.len() {
                                let at = io.now() + self.set.body_timeout;
                                self.conns[c.index()].deadline = at;
                                break;
                            }
                        }
                    }
                }
                Phase::Idle | Phase::Head => {
                    if pos == input.len() {
                        break;
                    }
                    let mut storage =
                        [const { MaybeUninit::<httparse::Header>::uninit() }; MAX_HEADERS_STACK];
                    let n = self.set.limits.max_headers.min(MAX_HEADERS_STACK);
                    match ringx_http::parse_request_uninit(
                        &input[pos..],
                        &mut storage[..n],
                        &self.set.limits,
                    ) {
                        Ok(Parsed::Partial) => {
                            if conn.phase == Phase::Idle {
                                conn.phase = Phase::Head;
                                let at = io.now() + self.set.header_timeout;
                                self.set_deadline(io, c, at);
                            }
                            break;
                        }
                        Err(e) => {
                            self.fail(io, c, e.status, false);
                            return input.len();
                        }
                        Ok(Parsed::Complete(req)) => {
                            pos += req.head_len;
                            let more_input = pos < input.len();
                            match self.handle(io, c, &req, more_input) {
                                Next::Continue => continue,
                                Next::Stop => return input.len(),
                                Next::Hold => return pos,
                            }
                        }
                    }
                }
            }
        }
        pos
    }

    /// Routes one request and writes (or prepares) its response.
    pub(super) fn handle(
        &mut self,
        io: &mut Io,
        c: ConnId,
        req: &Request,
        more_input: bool,
    ) -> Next {
        self.obs_request(io, c, req);
        let conn = &mut self.conns[c.index()];
        conn.requests += 1;
        conn.client_closes = !req.keep_alive;
        let requests = conn.requests;
        let head_only = req.method == Method::Head;
        let v11 = req.version == ringx_http::Version::Http11;
        let keep = req.keep_alive && !self.draining && requests < self.set.keepalive_requests;
        let has_body = !matches!(req.body, BodyKind::None);
        if let BodyKind::Length(n) = req.body {
            if n > self.set.max_body {
                self.fail(io, c, 413, head_only);
                return Next::Stop;
            }
        }
        if req.method == Method::Connect {
            self.fail(io, c, 405, head_only);
            return Next::Stop;
        }
        // Routed once: the proxy and the local responder both take this.
        let (path, at) = self.route(c, req);
        if self.routes.has_proxy {
            if let Some(next) = self.try_proxy(io, c, req, keep, at) {
                return next;
            }
        }
        let ch = Self::conn_hdr(v11, keep);
        if has_body {
            // The response waits until the body has been read (and 100 Continue, if asked
            // for, goes first).
            let mut bytes = Vec::new();
            let (file, bad, _) = self.respond(&mut bytes, req, &path, at, ch, head_only);
            let conn = &mut self.conns[c.index()];
            conn.body = Some(BodyDecoder::new(req.body, BodyLimits::default()));
            conn.pending = Some(Pending {
                bytes,
                file,
                close: !keep || bad,
            });
            conn.phase = Phase::Body;
            if req.expect_continue {
                io.write(c, b"HTTP/1.1 100 Continue\r\n\r\n");
            }
            let at = io.now() + self.set.body_timeout;
            self.set_deadline(io, c, at);
            return Next::Continue;
        }
        let Some(out) = io.out_buf(c) else {
            return Next::Stop;
        };
        let before = out.len();
        let (file, bad, head_len) = self.respond(out, req, &path, at, ch, head_only);
        let status = super::ops::status_of(&out[before..]);
        let head_len = match head_len {
            Some(n) => n,
            None if self.logging() => super::ops::head_len_of(&out[before..]),
            None => 0, // only the access log reads it
        };
        if let Some((f, off, len)) = file {
            io.send_file(c, f, off, len);
        }
        self.obs_status(io, c, status, head_len);
        self.after_response(io, c, !keep || bad, more_input)
    }

    /// The request's cleaned path (Err: it cannot be normalised) and where it goes: indices of
    /// its server and location in the routes (None: no location matches).
    pub(super) fn route<'r>(
        &self,
        c: ConnId,
        req: &Request<'_, 'r>,
    ) -> (Result<Cow<'r, str>, ()>, At) {
        let path = clean_path(req.path);
        let at = path.as_ref().ok().and_then(|p| {
            let si = self
                .routes
                .server_index(self.conns[c.index()].listener as usize, || req.host_name());
            self.routes.servers[si].location_index(p).map(|li| (si, li))
        });
        (path, at)
    }

    /// Writes the response head (and any in-memory body) of a request routed by `route` into
    /// `out`. Returns the file part of the body, whether the request was bad enough that the
    /// connection must close, and the head's length where it is known without a search.
    pub(super) fn respond(
        &self,
        out: &mut Vec<u8>,
        req: &Request,
        path: &Result<Cow<'_, str>, ()>,
        at: At,
        ch: ConnHdr,
        head_only: bool,
    ) -> (Option<FilePart>, bool, Option<u64>) {
        let routes = &*self.routes;
        if req.path == "*" {
            // OPTIONS * (asterisk-form): what the server supports.
            let allow = "Allow: GET, HEAD, POST, OPTIONS\r\n";
            respond::head(out, 200, &routes.server_header, allow, 0, &self.date, ch);
            return (None, false, None);
        }
        let Ok(path) = path else {
            let (sh, tok) = (&routes.server_header, &routes.server_token);
            respond::error(out, 400, sh, tok, &self.date, ConnHdr::Close, "", head_only);
            return (None, true, None);
        };
        match at.map(|(si, li)| &routes.servers[si].locations[li].action) {
            Some(Action::Return(canned)) => {
                let head_len = respond::canned(out, canned, &self.date, ch, head_only);
                (None, false, Some(head_len as u64))
            }
            Some(Action::Files(root)) => {
                let file = self.files(out, root, path, req, ch, head_only);
                (file, false, None)
            }
            Some(Action::Proxy(_)) => unreachable!("proxied requests are routed in try_proxy"),
            None => {
                let (sh, tok) = (&routes.server_header, &routes.server_token);
                respond::error(out, 404, sh, tok, &self.date, ch, "", head_only);
                (None, false, None)
            }
        }
    }

    /// Static files: writes the head (and error pages) into `out`, returns the body part.
    pub(super) fn files(
        &self,
        out: &mut Vec<u8>,
        root: &FileRoot,
        path: &str,
        req: &Request,
        ch: ConnHdr,
        head_only: bool,
    ) -> Option<(Rc<File>, u64, u64)> {
        let r = &self.routes;
        match static_files::serve(root, path, req.query, req) {
            FileReply::Body {
                status,
                file,
                off,
                len,
                headers,
            } => {
                respond::head(out, status, &r.server_header, &headers, len, &self.date, ch);
                (!head_only).then_some((file, off, len))
            }
            FileReply::NotModified { headers } => {
                respond::head(out, 304, &r.server_header, &headers, 0, &self.date, ch);
                None
            }
            FileReply::Redirect(loc) => {
                let extra = format!("Location: {loc}\r\n");
                respond::error(
                    out,
                    301,
                    &r.server_header,
                    &r.server_token,
                    &self.date,
                    ch,
                    &extra,
                    head_only,
                );
                None
            }
            FileReply::Unsatisfiable { size } => {
                let extra = format!("Content-Range: bytes */{size}\r\n");
                respond::error(
                    out,
                    416,
                    &r.server_header,
                    &r.server_token,
                    &self.date,
                    ch,
                    &extra,
                    head_only,
                );
                None
            }
            FileReply::Error(405) => {
                respond::error(
                    out,
                    405,
                    &r.server_header,
                    &r.server_token,
                    &self.date,
                    ch,
                    "Allow: GET, HEAD\r\n",
                    head_only,
                );
                None
            }
            FileReply::Error(st) => {
                respond::error(
                    out,
                    st,
                    &r.server_header,
                    &r.server_token,
                    &self.date,
                    ch,
                    "",
                    head_only,
                );
                None
            }
        }
    }

    /// The body was read completely: send the response that waited for it.
    pub(super) fn finish_body(&mut self, io: &mut Io, c: ConnId) {
        let conn = &mut self.conns[c.index()];
        conn.body = None;
        conn.phase = Phase::Idle;
        let Some(mut p) = conn.pending.take() else {
            return;
        };
        if self.draining && !p.close {
            // The response was prepared before the drain began: it must now say close.
            mark_close(&mut p.bytes);
            p.close = true;
        }
        io.write(c, &p.bytes);
        self.obs_response_bytes(io, c, &p.bytes);
        if let Some((f, off, len)) = p.file {
            io.send_file(c, f, off, len);
        }
        self.after_response(io, c, p.close, true);
    }

    pub(super) fn after_response(
        &mut self,
        io: &mut Io,
        c: ConnId,
        close: bool,
        more_input: bool,
    ) -> Next {
        self.obs_end(io, c);
        let close = close || self.draining;
        if close {
            if more_input || self.conns[c.index()].requests == 0 {
                self.linger(io, c);
            } else {
                // Everything the client sent was read: nothing can turn the close into a reset.
                self.conns[c.index()].phase = Phase::Lingering;
                if self.conns[c.index()].client_closes {
                    // It said it sends nothing more: the FIN may ride on the last segment.
                    io.peer_done(c);
                }
                io.close_after_flush(c);
                let at = io.now() + self.set.send_timeout;
                self.set_deadline(io, c, at);
            }
            return Next::Stop;
        }
        let at = io.now() + self.set.keepalive_timeout;
        let conn = &mut self.conns[c.index()];
        conn.phase = Phase::Idle;
        self.set_deadline(io, c, at);
        if io.pending(c) > OUT_HIGH_WATER {
            self.conns[c.index()].paused = true;
            io.pause_recv(c);
            io.notify_when_flushed(c);
            return Next::Continue; // `process` sees `paused` and keeps the rest buffered
        }
        Next::Continue
    }

    /// Runs `process` over the connection's buffered input.
    pub(super) fn process_buffered(&mut self, io: &mut Io, c: ConnId) {
        let buf = std::mem::take(&mut self.conns[c.index()].inbuf);
        let used = self.process(io, c, &buf);
        let conn = &mut self.conns[c.index()];
        if conn.phase == Phase::Closed {
            return;
        }
        let mut buf = buf;
        buf.drain(..used);
        if conn.inbuf.is_empty() {
            conn.inbuf = buf;
        } else {
            buf.extend_from_slice(&conn.inbuf);
            conn.inbuf = buf;
        }
        if conn.eof
            && !conn.paused
            && !matches!(conn.phase, Phase::Body | Phase::Proxy | Phase::Tunnel)
        {
            io.close_after_flush(c);
        }
    }
}

/// Where a request goes: indices of its server and location in the routes (None: no
/// location matches, or the path could not be normalised).
pub(super) type At = Option<(usize, usize)>;

/// Turns a prepared keep-alive response head into one that announces the close.
fn mark_close(resp: &mut Vec<u8>) {
    const KEEP10: &[u8] = b"Connection: keep-alive\r\n";
    let Some(end) = resp.windows(4).position(|w| w == b"\r\n\r\n") else {
        return;
    };
    let head = &resp[..end + 2];
    if let Some(i) = head.windows(KEEP10.len()).position(|w| w == KEEP10) {
        resp.splice(
            i..i + KEEP10.len(),
            b"Connection: close\r\n".iter().copied(),
        );
    } else {
        resp.splice(end + 2..end + 2, b"Connection: close\r\n".iter().copied());
    }
}

/// Percent-decodes and normalises a request path; borrows it when it is already clean.
pub(super) fn clean_path(raw: &str) -> Result<Cow<'_, str>, ()> {
    if is_clean(raw.as_bytes()) {
        return Ok(Cow::Borrowed(raw));
    }
    ringx_http::normalize_path(raw)
        .map(Cow::Owned)
        .map_err(|_| ())
}

/// Whether a path needs no normalisation: it starts with '/' and holds no '%', NUL, "//" or
/// "/." (one pass; this runs for every request).
fn is_clean(raw: &[u8]) -> bool {
    if raw.first() != Some(&b'/') {
        return false;
    }
    let mut prev = 0u8;
    for &b in raw {
        match b {
            b'%' | 0 => return false,
            b'/' | b'.' if prev == b'/' => return false,
            _ => {}
        }
        prev = b;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::{clean_path, is_clean};
    use std::borrow::Cow;

    #[test]
    fn clean_paths_are_borrowed() {
        for p in ["/", "/r64", "/a/b.c/d", "/a.b/c..d", "/x-y_z~"] {
            assert!(is_clean(p.as_bytes()), "{p}");
            assert!(matches!(clean_path(p), Ok(Cow::Borrowed(_))), "{p}");
        }
    }

    #[test]
    fn paths_needing_work_are_not_clean() {
        for p in [
            "", "r64", "//a", "/a//b", "/./a", "/a/../b", "/a/.", "/%41", "/a\0b",
        ] {
            assert!(!is_clean(p.as_bytes()), "{p:?}");
        }
        assert_eq!(clean_path("/a/../b").unwrap(), "/b");
        assert_eq!(clean_path("/%61").unwrap(), "/a");
    }
}
