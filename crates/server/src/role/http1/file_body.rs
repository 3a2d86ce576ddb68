//! A compressed static body produced as the client takes it ([`FileEncoder`]): pieces are read
//! and compressed only while the connection's queued output is below a high-water mark; past
//! it, the next piece waits until the output has drained.

use ringx_engine::ConnId;

use crate::compress::file_encoder::FileEncoder;
use crate::ctx::base::Base;
use crate::ctx::Cx;

/// Queued output above which no more of the file is compressed until it drains.
const HIGH_WATER: u64 = 256 * 1024;

pub(super) enum Pumped {
    /// The body is complete (its last chunk is queued).
    Done,
    /// The output is full: `on_flushed` comes when it has drained.
    Waiting,
    /// The file could not be read as long as the head said: the body is cut.
    Failed,
}

/// Produces the body's next pieces while the client keeps up.
pub(super) fn pump(s: &mut FileEncoder, cx: &mut Cx, b: &mut Base, c: ConnId) -> Pumped {
    loop {
        if b.tr.pending(cx.io, c) > HIGH_WATER {
            b.tr.notify_when_flushed(cx.io, c);
            // A client that stops reading is closed after the send timeout.
            let at = cx.io.now() + cx.ctx.set.send_timeout;
            cx.ctx.set_deadline(cx.io, b, c, at);
            return Pumped::Waiting;
        }
        let io = &mut *cx.io;
        let tr = &mut b.tr;
        let mut write = |d: &[u8]| tr.write(io, c, d);
        match s.step(&mut write) {
            Ok(true) => return Pumped::Done,
            Ok(false) => {}
            Err(e) => {
                tracing::warn!("compressing a static file for {:?}: {e}", b.addr);
                return Pumped::Failed;
            }
        }
    }
}
