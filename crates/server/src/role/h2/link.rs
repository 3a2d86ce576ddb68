//! The HTTP/2 framing of one client connection, apart from what its streams carry: the
//! protocol's books ([`Conn`]: frames, stream states, windows), the control frames it
//! queues, response heads written as HEADERS, and the turns the streams take at sending a
//! frame each, within the windows, while the socket's queue stays under its high-water mark.

use std::collections::{HashMap, VecDeque};

use ringx_engine::ConnId;
use ringx_h2proto::response::FieldList;
use ringx_h2proto::{Conn, Limits};

use super::stream::{flush, H2Stream, Turn};
use crate::ctx::base::Base;
use crate::ctx::Cx;
use crate::metrics::bump;

/// Queued output above which no more frames are written until the socket drains.
const OUT_HIGH_WATER: u64 = 256 * 1024;

/// A connection's framing.
pub(super) struct Link {
    pub conn: Conn,
    /// Streams with output waiting, in turn.
    ready: VecDeque<u32>,
    /// Streams whose last turn ended their response (false) or failed it (true), for the
    /// connection to finish (kept to reuse its capacity).
    done: Vec<(u32, bool)>,
}

impl Link {
    pub fn new(limits: Limits) -> Link {
        Link {
            conn: Conn::new(limits),
            ready: VecDeque::new(),
            done: Vec::new(),
        }
    }

    /// Writes the control frames the connection queued.
    pub fn flush_ctl(&mut self, cx: &mut Cx, b: &mut Base, c: ConnId) {
        flush(&mut self.conn, &mut b.tr, cx, c);
    }

    /// Adds the connection's error counts to the zone's.
    pub fn count(&mut self, cx: &mut Cx) {
        let counters = &cx.ctx.log.counters;
        for (why, n) in self.conn.take_stats() {
            bump(&counters.h2_errors[why.index()], u64::from(n));
        }
    }

    /// Sends a response head, `status` and `fields`, as HEADERS on stream `s`, with
    /// END_STREAM when the response has no body and nothing follows the head (`last`;
    /// `empty`: no body bytes came with the head). Returns whether the response has no body
    /// (a HEAD request's, a 204 or 304, or an empty one); None: no room for it.
    pub fn send_head(
        &mut self,
        cx: &mut Cx,
        b: &mut Base,
        c: ConnId,
        s: &mut H2Stream,
        (status, fields): (u16, &FieldList),
        (empty, last): (bool, bool),
    ) -> Option<bool> {
        let no_body = s.head_only || status == 204 || status == 304 || empty && last;
        let end = no_body && last;
        self.flush_ctl(cx, b, c);
        let out = b.tr.out_buf(cx.io, c)?;
        self.conn
            .send_headers(out, s.id, status, fields.iter(), end);
        s.head_sent = true;
        s.status = status;
        s.ended = end;
        Some(no_body)
    }

    /// Queues a stream for its turns.
    pub fn wake(&mut self, id: u32) {
        if !self.ready.contains(&id) {
            self.ready.push_back(id);
        }
    }

    /// Streams take turns sending a frame each until every window is closed, every body
    /// waits on its upstream, or the socket's queue is full (then the connection's
    /// `on_flushed` goes on). Returns the streams whose turn ended their response (false)
    /// or failed it (true), to be finished; the caller gives the vector back (`give_back`).
    pub fn pump(
        &mut self,
        cx: &mut Cx,
        b: &mut Base,
        c: ConnId,
        streams: &mut HashMap<u32, H2Stream>,
    ) -> Vec<(u32, bool)> {
        let mut blocked = Vec::new();
        let mut done = std::mem::take(&mut self.done);
        while let Some(id) = self.ready.pop_front() {
            if b.tr.pending(cx.io, c) > OUT_HIGH_WATER {
                self.ready.push_front(id);
                b.tr.notify_when_flushed(cx.io, c);
                break;
            }
            let Some(s) = streams.get_mut(&id) else {
                continue;
            };
            match s.turn(&mut self.conn, &mut b.tr, cx, c) {
                Turn::More => self.ready.push_back(id),
                Turn::Blocked => blocked.push(id),
                Turn::Idle => {}
                Turn::Ended => done.push((id, false)),
                Turn::Failed => done.push((id, true)),
            }
        }
        // Their turn comes again with the next window update (or any other event).
        self.ready.extend(blocked);
        done
    }

    /// Gives back the vector `pump` returned, emptied, to be used again.
    pub fn give_back(&mut self, mut done: Vec<(u32, bool)>) {
        done.clear();
        self.done = done;
    }

    /// Whether stream `s` has output its window holds back (a window the peer keeps closed).
    pub fn stalled(&self, s: &H2Stream) -> bool {
        s.has_output() && self.conn.capacity(s.id) == 0
    }
}
