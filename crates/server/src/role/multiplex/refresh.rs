//! The refresh after a stale answer (`stale-while-revalidate`) on a multiplexed connection:
//! an exchange the connection owns beside its streams ([`Background`]), and the zone once the
//! connection has gone, so that a client that leaves after its stale answer does not cancel
//! the refresh.

use std::collections::HashMap;

use ringx_engine::ConnId;

use super::proxied::Proxied;
use crate::cache::fill::Fill;
use crate::ctx::base::Base;
use crate::ctx::Cx;
use crate::pipeline::cache;
use crate::role::exchange::Outcome;
use crate::role::upstream::UpEvent;

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
    pub(crate) fn start(
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
