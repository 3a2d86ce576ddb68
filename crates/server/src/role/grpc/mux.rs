//! One HTTP/2 connection to a gRPC upstream server, multiplexed: the zone's calls to that
//! server share it, each on a stream of its own ([`ClientConn`] keeps the protocol's books).
//!
//! The connection has no single client: each stream has an [`Owner`] (a client connection
//! and its stream), and what the server sends is turned into [`CallEvent`]s for the owners,
//! which the zone delivers. Request bodies go out within the server's windows; what a window
//! holds back waits here, per stream, and the owner hears how much went ([`CallEvent::Sent`])
//! so that it reopens its client's window only then. Response bytes the other way are
//! released to the server's window only once the owner sent them on to its client
//! ([`Mux::release`]), so neither direction buffers more than a window.
//!
//! The connection is shared by many clients, and one that never reads (its own window
//! closed) must not hold the others up: the connection's receive window covers the
//! stream window of every call the connection may carry at once ([`Mux::new`] caps them
//! at the connection window over the stream window), so calls whose bytes wait for their
//! clients can spend their own stream windows only. And a call that ends gives back what it
//! had received and not released ([`Mux::end`]), whether its client read it or left.

use std::collections::HashMap;
use std::time::Instant;

use ringx_engine::{ConnId, Io};
use ringx_h2proto::client::{ClientConn, ClientEvent, ClientStep};
use ringx_h2proto::response::FieldList;
use ringx_h2proto::{ErrorCode, Limits};

use super::status::{from_reset, Code};
use crate::transport::Transport;

/// Queued output to the upstream above which request bodies wait for it to drain (the
/// HTTP/1 exchange's mark, `role::exchange::PROXY_HIGH_WATER`; not imported from there,
/// which depends on this module through `role::upstream`).
const HIGH_WATER: u64 = 256 * 1024;

/// The client stream a multiplexed upstream stream serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Owner {
    pub c: ConnId,
    /// The client connection's generation (its slot may be reused).
    pub gen: u32,
    /// The client's stream id.
    pub sid: u32,
}

/// What an upstream stream's owner is told.
#[derive(Debug)]
pub enum CallEvent {
    /// The response head (`end`: a Trailers-Only response, nothing follows).
    Head {
        status: u16,
        fields: FieldList,
        end: bool,
    },
    /// Response body bytes (`end`: the last); the owner releases them once sent on.
    Data(Vec<u8>, bool),
    /// The trailers, which end the response.
    Trailers(FieldList),
    /// This many request body bytes went to the server: the client may send as many more.
    Sent(usize),
    /// The stream failed: the call ends with this status.
    Failed(Code, &'static str),
}

/// Request body waiting for the server's window.
#[derive(Default)]
struct Waiting {
    buf: Vec<u8>,
    at: usize,
    end: bool,
    trailers: Option<FieldList>,
}

/// An HTTP/2 connection to a gRPC server.
pub struct Mux {
    pub conn: ClientConn,
    owners: HashMap<u32, Owner>,
    /// Every call from its start until its owner ends it ([`Mux::end`]): the response bytes
    /// delivered to the owner and not yet released to the server's windows.
    held: HashMap<u32, usize>,
    /// The calls the connection may carry at once: its receive window over a stream's, so
    /// that the stream windows of all of them never add up to more than the connection's.
    max_calls: usize,
    waiting: HashMap<u32, Waiting>,
    /// A frame not complete yet.
    inbuf: Vec<u8>,
    /// Frames of ours to write after the connection's own.
    wbuf: Vec<u8>,
    /// The connection failed (or the server went away and nothing is left on it).
    pub failed: bool,
    /// The TCP (and TLS) connection is up.
    pub connected: bool,
}

impl Mux {
    /// A connection with `limits`; it carries at most `conn_window / initial_window` calls
    /// at once (give it a connection window as large as the calls it should carry).
    pub fn new(limits: Limits) -> Mux {
        let max_calls = (limits.conn_window / limits.initial_window.max(1)).max(1) as usize;
        Mux {
            conn: ClientConn::new(limits),
            owners: HashMap::new(),
            held: HashMap::new(),
            max_calls,
            waiting: HashMap::new(),
            inbuf: Vec::new(),
            wbuf: Vec::new(),
            failed: false,
            connected: false,
        }
    }

    /// Whether a new call may start on this connection: the server's stream limit, and
    /// ours (calls not yet ended by their owners, whose windows the connection's covers).
    pub fn can_open(&self) -> bool {
        !self.failed && self.conn.can_open() && self.held.len() < self.max_calls
    }

    /// Calls in flight.
    pub fn calls(&self) -> usize {
        self.owners.len()
    }

    /// Writes what is queued: the connection's frames first (the preface, acks, window
    /// updates, resets), then ours.
    pub fn flush(&mut self, io: &mut Io, tr: &mut Transport, u: ConnId) {
        if !self.conn.out().is_empty() {
            tr.write(io, u, self.conn.out());
            self.conn.clear_out();
        }
        if !self.wbuf.is_empty() {
            tr.write(io, u, &self.wbuf);
            self.wbuf.clear();
        }
    }

    /// Opens a stream for `owner` with the request head `fields`; returns its id.
    pub fn open<'a>(
        &mut self,
        owner: Owner,
        fields: impl IntoIterator<Item = (&'a [u8], &'a [u8])>,
        end: bool,
    ) -> u32 {
        let id = self.conn.open(&mut self.wbuf, fields, end);
        self.owners.insert(id, owner);
        self.held.insert(id, 0);
        id
    }

    /// Request body bytes of stream `id` (`end`: the last); returns how many went now (the
    /// rest wait for the window and are reported by [`CallEvent::Sent`]).
    pub fn send_body(&mut self, io: &mut Io, u: ConnId, id: u32, data: &[u8], end: bool) -> usize {
        if !self.owners.contains_key(&id) {
            return data.len();
        }
        let w = self.waiting.entry(id).or_default();
        w.buf.extend_from_slice(data);
        w.end |= end;
        let mut sent = 0;
        self.send_waiting(io, u, id, &mut sent);
        sent
    }

    /// Request trailers (they end the request).
    pub fn send_trailers(&mut self, io: &mut Io, u: ConnId, id: u32, fields: FieldList) {
        if !self.owners.contains_key(&id) {
            return;
        }
        let w = self.waiting.entry(id).or_default();
        w.trailers = Some(fields);
        w.end = true;
        self.send_waiting(io, u, id, &mut 0);
    }

    /// Sends what stream `id` has waiting, as the windows and the socket's queue allow;
    /// adds the body bytes sent to `sent`.
    fn send_waiting(&mut self, io: &mut Io, u: ConnId, id: u32, sent: &mut usize) {
        let Some(w) = self.waiting.get_mut(&id) else {
            return;
        };
        loop {
            let left = w.buf.len() - w.at;
            if left > 0 && io.pending(u) + self.wbuf.len() as u64 > HIGH_WATER {
                io.notify_when_flushed(u);
                return;
            }
            let n = left.min(self.conn.capacity(id)).min(self.conn.max_frame());
            let last = n == left && w.end && w.trailers.is_none();
            if n == 0 && !(left == 0 && w.end) {
                return; // the window is closed: WindowOpened goes on
            }
            if n > 0 || last {
                self.conn
                    .send_data(&mut self.wbuf, id, &w.buf[w.at..w.at + n], last);
                w.at += n;
                *sent += n;
            }
            if w.at < w.buf.len() {
                continue;
            }
            w.buf.clear();
            w.at = 0;
            if !w.end {
                return;
            }
            if let Some(t) = w.trailers.take() {
                self.conn.send_trailers(&mut self.wbuf, id, t.iter());
            }
            self.waiting.remove(&id);
            return;
        }
    }

    /// Request bodies held back by a window or the socket's queue go on; their owners hear
    /// how much went.
    pub fn pump(&mut self, io: &mut Io, u: ConnId, out: &mut Vec<(Owner, CallEvent)>) {
        let ids: Vec<u32> = self.waiting.keys().copied().collect();
        for id in ids {
            let mut sent = 0;
            self.send_waiting(io, u, id, &mut sent);
            if let (true, Some(&o)) = (sent > 0, self.owners.get(&id)) {
                out.push((o, CallEvent::Sent(sent)));
            }
        }
    }

    /// `n` bytes of stream `id`'s response were sent on to the client: the server may send
    /// as many more.
    /// (A call already ended gave its bytes back then: nothing more goes.)
    pub fn release(&mut self, id: u32, n: usize) {
        if let Some(h) = self.held.get_mut(&id) {
            *h = h.saturating_sub(n);
            self.conn.release(id, n);
        }
    }

    /// The owner is done with stream `id` (its response ended, or its client went away):
    /// a stream still open is cancelled, and the bytes it received that were never sent on
    /// go back to the connection's window (the stream's own window went with the stream).
    pub fn end(&mut self, id: u32) {
        self.owners.remove(&id);
        self.waiting.remove(&id);
        self.conn.reset(id, ErrorCode::Cancel);
        if let Some(n) = self.held.remove(&id) {
            self.conn.release(id, n);
        }
    }

    /// Response bytes delivered to owners and not yet released, all calls together.
    #[cfg(test)]
    pub fn held_bytes(&self) -> usize {
        self.held.values().sum()
    }

    /// Reads what the server sent; the owners' events go to `out`.
    pub fn feed(&mut self, data: &[u8], now: Instant, out: &mut Vec<(Owner, CallEvent)>) {
        if self.failed {
            return;
        }
        let mut buf = std::mem::take(&mut self.inbuf);
        let owned = !buf.is_empty();
        if owned {
            buf.extend_from_slice(data);
        }
        let input: &[u8] = if owned { &buf } else { data };
        let mut pos = 0;
        loop {
            match self.conn.feed(&input[pos..], now) {
                ClientStep::Need => break,
                ClientStep::Skip(n) => pos += n,
                ClientStep::Event(n, ev) => {
                    pos += n;
                    self.event(ev, out);
                }
                ClientStep::Fatal(e) => {
                    tracing::warn!("gRPC upstream connection: HTTP/2 error: {}", e.msg);
                    self.fail(Code::Unavailable, "upstream HTTP/2 protocol error", out);
                    return;
                }
            }
        }
        if owned {
            buf.drain(..pos);
            self.inbuf = buf;
        } else {
            self.inbuf.extend_from_slice(&input[pos..]);
        }
    }

    fn event(&mut self, ev: ClientEvent, out: &mut Vec<(Owner, CallEvent)>) {
        match ev {
            ClientEvent::Response {
                id,
                status,
                fields,
                end_stream,
            } => {
                let owner = if end_stream {
                    self.forget(id)
                } else {
                    self.owners.get(&id).copied()
                };
                if let Some(o) = owner {
                    let end = end_stream;
                    out.push((
                        o,
                        CallEvent::Head {
                            status,
                            fields,
                            end,
                        },
                    ));
                }
            }
            ClientEvent::Data {
                id,
                data,
                end_stream,
            } => {
                let owner = if end_stream {
                    self.forget(id)
                } else {
                    self.owners.get(&id).copied()
                };
                match owner {
                    Some(o) => {
                        if let Some(h) = self.held.get_mut(&id) {
                            *h += data.len();
                        }
                        out.push((o, CallEvent::Data(data.to_vec(), end_stream)))
                    }
                    None => self.conn.release(id, data.len()),
                }
            }
            ClientEvent::Trailers { id, fields } => {
                if let Some(o) = self.forget(id) {
                    out.push((o, CallEvent::Trailers(fields)));
                }
            }
            ClientEvent::Reset { id, code, why } => {
                if let Some(o) = self.forget(id) {
                    let (status, msg) = match why {
                        None => (from_reset(code), "upstream reset the stream"),
                        Some(_) => (Code::Internal, "malformed upstream response"),
                    };
                    out.push((o, CallEvent::Failed(status, msg)));
                }
            }
            ClientEvent::GoAway { last, .. } => {
                let refused: Vec<u32> = self
                    .owners
                    .keys()
                    .copied()
                    .filter(|&id| id > last)
                    .collect();
                for id in refused {
                    if let Some(o) = self.forget(id) {
                        let msg = "upstream went away before processing the call";
                        out.push((o, CallEvent::Failed(Code::Unavailable, msg)));
                    }
                }
            }
            ClientEvent::WindowOpened => {}
        }
    }

    /// Stream `id` ended on the server's side: its owner is forgotten (returned), and any
    /// request body still waiting is dropped.
    fn forget(&mut self, id: u32) -> Option<Owner> {
        self.waiting.remove(&id);
        self.owners.remove(&id)
    }

    /// The connection cannot go on: every call on it fails with `code`.
    pub fn fail(&mut self, code: Code, msg: &'static str, out: &mut Vec<(Owner, CallEvent)>) {
        self.failed = true;
        self.waiting.clear();
        for (_, o) in self.owners.drain() {
            out.push((o, CallEvent::Failed(code, msg)));
        }
    }
}
