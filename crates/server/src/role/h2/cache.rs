//! The HTTP/2 role carrying out the cache stage (`pipeline::cache`, which decides as for
//! any request, with the same entries): a hit answered from the entry (a body kept on disk
//! sent from the file); a stale entry standing in when the upstream fails or answering a
//! revalidation's 304; and the refresh after a stale answer (`stale-while-revalidate`), by
//! an exchange the connection owns beside its streams ([`Background`]), and the zone once
//! the connection has gone: a client that leaves after its stale answer does not cancel the
//! refresh.

use std::collections::HashMap;

use ringx_engine::ConnId;

use super::proxy::Proxied;
use super::stream::H2Stream;
use crate::cache::fill::{Asked, Fill};
use crate::cache::Found;
use crate::ctx::base::Base;
use crate::ctx::Cx;
use crate::pipeline::{cache, Hit, Refresh};
use crate::response::{Fields, FilePart};
use crate::role::exchange::capture::Capture;
use crate::role::exchange::Outcome;
use crate::role::upstream::UpEvent;

/// A fill's exchange for stream `s` ended without its response going to the client (a
/// revalidation's 304, or an upstream status the stale copy stands in for; `failed`: it
/// could not be had): the response from the cache, or `Err` with the status to answer.
pub(super) fn answer_from_fill(
    cx: &mut Cx,
    s: &mut H2Stream,
    mut cap: Box<Capture>,
    failed: Option<u16>,
) -> Result<Fields, u16> {
    let status = failed.unwrap_or(502);
    let Some(mut fill) = cap.fill.take() else {
        return Err(status);
    };
    let now = cx.ctx.wall_ms(cx.io.now());
    let answer = cache::answer_of_fill(&mut cap, &mut fill, failed, now);
    let (obj, cache_status) = answer.ok_or(status)?;
    let line = fill.line(cache_status);
    let (resp, _) = found_response(cx, s, Found::Mem(obj), (cache_status, &line), &fill.asked);
    Ok(resp)
}

/// A fill's exchange for stream `s` failed with `status` before any response: the stale
/// copy's response, if the cache may serve it for that.
pub(super) fn stale_answer(
    cx: &mut Cx,
    s: &mut H2Stream,
    fill: &Fill,
    status: u16,
) -> Option<Fields> {
    let now = cx.ctx.wall_ms(cx.io.now());
    let obj = fill.stale_for(status, false, now).cloned()?;
    let line = fill.line("STALE");
    Some(found_response(cx, s, Found::Mem(obj), ("STALE", &line), &fill.asked).0)
}

/// Background updates of cache entries (a stale answer's refresh), by their upstream
/// connection, each with the client connection it was sent for. Owned by that connection
/// beside its streams while it lives; when it closes, the zone adopts what is left
/// ([`Background::adopt`]), so the update still ends in the cache (nginx finishes its
/// background update whatever the client does): otherwise the entry would stay stale and
/// its next request would send the refresh again.
#[derive(Default)]
pub struct Background(HashMap<ConnId, (ConnId, Box<Proxied>)>);

impl Background {
    /// Sends the update (`head` to `upstream` for `fill`). When it cannot be sent, the fill
    /// is dropped: the stale copy stays, and a later request updates it.
    pub(super) fn start(
        &mut self,
        cx: &mut Cx,
        b: &Base,
        c: ConnId,
        (fill, upstream, head): (Box<Fill>, usize, Vec<u8>),
    ) {
        let cap = cache::filling(fill, false);
        if let Some(p) = Proxied::sub(cx, b, c, upstream, head, cap) {
            if let Some(u) = p.ex.up {
                self.0.insert(u, (c, p));
            }
        }
    }

    /// Whether upstream connection `u` carries an update.
    pub fn has(&self, u: ConnId) -> bool {
        self.0.contains_key(&u)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Takes over `other`'s updates (a closed connection's).
    pub fn adopt(&mut self, other: Background) {
        self.0.extend(other.0);
    }

    /// An event on the upstream connection `u` of an update: when it ends, the entry is
    /// stored or refreshed (or, failed, the stale copy stays).
    pub fn event(&mut self, cx: &mut Cx, u: ConnId, ev: UpEvent) {
        let Some((c, mut p)) = self.0.remove(&u) else {
            return;
        };
        let (outcome, _) = p.event(cx, c, u, ev);
        match outcome {
            // A retry may have moved it to another connection.
            Outcome::Pending => {
                let at = p.ex.up.unwrap_or(u);
                self.0.insert(at, (c, p));
            }
            Outcome::Done => {
                let now = cx.ctx.wall_ms(cx.io.now());
                if let Some(mut cap) = p.ex.capture.take() {
                    if let Some(mut fill) = cap.fill.take() {
                        cache::settle(&mut cap, &mut fill, now);
                    }
                }
            }
            _ => p.detach(cx),
        }
    }
}

/// The response of an answer from the cache (its body's file part when it is kept
/// on disk), and the refresh to send after it (a stale answer's).
pub(super) fn hit_response(
    cx: &Cx,
    s: &mut H2Stream,
    hit: Hit,
) -> (Fields, Option<FilePart>, Option<Refresh>) {
    let (status, line) = (hit.status, &hit.line[..]);
    let (resp, file) = found_response(cx, s, hit.found, (status, line), &hit.asked);
    (resp, file, hit.refresh)
}

/// The response for what `asked` asked from entry `found`, with cache status
/// `status` (`line`: its header line); the body's file part when it is kept on disk.
/// Counted, and noted for the stream's log line.
fn found_response(
    cx: &Cx,
    s: &mut H2Stream,
    found: Found,
    (status, line): (&'static str, &[u8]),
    asked: &Asked,
) -> (Fields, Option<FilePart>) {
    let mut out = Fields::new();
    let now = cx.io.now();
    let (_, part) = cache::write_found((cx.ctx, now), &mut out, found, (status, line), asked);
    s.cache = status;
    (out, part)
}
