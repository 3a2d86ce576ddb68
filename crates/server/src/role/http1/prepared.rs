//! A local answer prepared before its request's body was read: written into a buffer of its
//! own when the request is routed, sent once the body has been read (and discarded), so that
//! the answer does not overtake the body on a connection that goes on. A refusal is the
//! exception: it goes out at once, saying close (a client trickling its body would hold the
//! connection), and what still arrives is discarded while the connection lingers.

use ringx_engine::ConnId;
use ringx_http::{BodyDecoder, BodyLimits, Request};

use crate::answer::ReqCtx;
use crate::ctx::base::Base;
use crate::ctx::Cx;
use crate::pipeline::routing::{self, Route};
use crate::response::{mark_close, ConnHdr, FilePart, Written};

/// How far reading a prepared answer's request body got.
pub(super) enum BodyRead {
    /// The body is malformed (400) or larger than `client_max_body_size` (413).
    Refused(u16),
    /// It ended, after this many bytes of the input.
    Done(usize),
    /// It goes on: this many bytes of the input were read, and more must arrive.
    More(usize),
}

/// A response prepared before its request's body was read, and the body's decoder.
pub(super) struct Prepared {
    body: BodyDecoder,
    bytes: Vec<u8>,
    written: Written,
    file: Option<FilePart>,
    /// The connection closes after it.
    pub close: bool,
}

impl Prepared {
    /// The local answer to `req` (routed by `route`) on connection `c`, `ch` the connection
    /// line it says: it waits for the body (`100 Continue` sent if asked for, the body's
    /// deadline set). None: a refusal (a status of 400 or more), which does not wait for the
    /// body: it went out at once, saying close, and the connection must linger.
    pub fn start(
        cx: &mut Cx,
        b: &mut Base,
        c: ConnId,
        (req, route, rq): (&Request, &Route<'_>, &ReqCtx),
        ch: ConnHdr,
    ) -> Option<Box<Prepared>> {
        let p = Prepared::make(cx, req, (route, rq), ch);
        if p.written.status >= 400 {
            let mut p = p;
            p.say_close();
            p.send(cx, b, c);
            return None;
        }
        if req.expect_continue {
            b.tr.write(cx.io, c, b"HTTP/1.1 100 Continue\r\n\r\n");
        }
        let at = cx.io.now() + cx.ctx.set.body_timeout;
        cx.ctx.set_deadline(cx.io, b, c, at);
        Some(p)
    }

    fn make(
        cx: &Cx,
        req: &Request,
        (route, rq): (&Route<'_>, &ReqCtx),
        ch: ConnHdr,
    ) -> Box<Prepared> {
        let mut bytes = Vec::new();
        let routes = &cx.ctx.routes;
        let r = routing::respond(routes, cx.ctx.responder(), &mut bytes, req, route, ch, rq);
        Box::new(Prepared {
            body: BodyDecoder::new(req.body, BodyLimits::default()),
            bytes,
            written: r.written,
            file: r.file,
            close: r.close || ch == ConnHdr::Close,
        })
    }

    /// Reads (and drops) what `input` holds of the request's body, within `max_body`.
    pub fn read(&mut self, input: &[u8], max_body: u64) -> BodyRead {
        let mut pos = 0;
        loop {
            let Ok(d) = self.body.decode(&input[pos..]) else {
                return BodyRead::Refused(400);
            };
            pos += d.consumed;
            if self.body.received() > max_body {
                return BodyRead::Refused(413);
            }
            if d.done {
                return BodyRead::Done(pos);
            }
            if d.consumed == 0 || pos == input.len() {
                return BodyRead::More(pos);
            }
        }
    }

    /// Makes it say close (a refusal; a drain that began while it waited).
    pub fn say_close(&mut self) {
        let before = self.bytes.len();
        mark_close(&mut self.bytes, self.written.head_len as usize);
        self.written.head_len += (self.bytes.len() - before) as u32;
        self.close = true;
    }

    /// Writes it on connection `c` (the file part of its body after it) and logs its status.
    pub fn send(self, cx: &mut Cx, b: &mut Base, c: ConnId) {
        b.tr.write(cx.io, c, &self.bytes);
        cx.ctx.log.status(cx.io, c, self.written, b);
        if let Some((f, off, len)) = self.file {
            b.tr.send_file(cx.io, c, f, off, len);
        }
    }
}
