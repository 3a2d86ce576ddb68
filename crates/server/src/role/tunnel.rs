//! The tunnel role: a client connection relayed byte for byte to an upstream connection —
//! WebSocket (any `Upgrade`) after the upstream's 101, or a `[[stream]]` connection once its
//! upstream is connected. Each direction has a bounded queue: the sending side stops reading
//! while the other side's queue is full. A FIN from one side is passed on as a FIN to the
//! other (half-close); the tunnel closes once both sides finished, when either side fails,
//! or after `idle` without a byte either way (the upstream connection's deadline).

use std::time::Duration;

use ringx_engine::ConnId;

use crate::ctx::base::Base;
use crate::ctx::Cx;
use crate::role::exchange::PROXY_HIGH_WATER;
use crate::role::upstream::{UpConn, UpEvent, UpState, UpTable};

pub struct Tunnel {
    /// The upstream connection.
    pub up: ConnId,
    /// Its record's generation: once it closed, its slot may carry another client's
    /// upstream, which this tunnel must never write to or close ([`Tunnel::rec`]).
    up_gen: u32,
    /// How long the tunnel may stay silent.
    pub idle: Duration,
    /// The `[[stream]]` it belongs to (None: an upgraded HTTP connection).
    pub stream: Option<usize>,
}

impl Tunnel {
    /// The upstream answered 101 on `u`: from now on both directions are opaque bytes. The
    /// tunnel may stay silent for the upstream's `read_timeout`.
    pub fn upgrade(cx: &mut Cx, b: &mut Base, c: ConnId, u: ConnId) -> Tunnel {
        let idle = match cx.ups.get(u) {
            Some(up) => cx.ctx.pools(up.pools_gen).defs.list[up.upstream].read_timeout,
            None => Duration::from_secs(60),
        };
        let t = Tunnel::new(cx.ups, u, idle, None);
        b.paused = false;
        if !b.eof {
            cx.io.resume_recv(c);
        }
        t.open(cx, b);
        t
    }

    /// A stream's upstream connection `u` is up: relay what the client sent meanwhile.
    pub fn connected(
        cx: &mut Cx,
        b: &mut Base,
        c: ConnId,
        u: ConnId,
        stream: usize,
        idle: Duration,
    ) -> Tunnel {
        let t = Tunnel::new(cx.ups, u, idle, Some(stream));
        if let Some(up) = t.rec(cx.ups) {
            up.state = UpState::Tunnel;
        }
        if b.paused {
            b.paused = false;
            if !b.eof {
                cx.io.resume_recv(c);
            }
        }
        if b.eof {
            if let Some(up) = t.rec(cx.ups) {
                up.tr.shutdown_after_flush(cx.io, u);
            }
        }
        t.open(cx, b);
        t
    }

    /// A tunnel over upstream connection `u`, bound to its record's generation.
    fn new(ups: &UpTable, u: ConnId, idle: Duration, stream: Option<usize>) -> Tunnel {
        Tunnel {
            up: u,
            up_gen: ups.get(u).map_or(0, |x| x.gen),
            idle,
            stream,
        }
    }

    /// The upstream's record while it is still the connection this tunnel opened with: a
    /// handle is kept until the client goes, which may be after the upstream closed and its
    /// slot was reused.
    fn rec<'a>(&self, ups: &'a mut UpTable) -> Option<&'a mut UpConn> {
        ups.get_live(self.up, self.up_gen)
    }

    /// Sends what the client sent before the tunnel existed, and starts the idle timer.
    fn open(&self, cx: &mut Cx, b: &mut Base) {
        self.flush_client_buffer(cx, b);
        let at = cx.io.now() + self.idle;
        if let Some(up) = self.rec(cx.ups) {
            cx.ctx.set_up_deadline(cx.io, up, self.up, at);
        }
    }

    /// Client bytes held back go to the upstream.
    fn flush_client_buffer(&self, cx: &mut Cx, b: &mut Base) {
        if b.inbuf.is_empty() {
            return;
        }
        let buf = std::mem::take(&mut b.inbuf);
        if let Some(up) = self.rec(cx.ups) {
            up.tr.write(cx.io, self.up, &buf);
        }
    }

    pub fn client_data(&mut self, cx: &mut Cx, b: &mut Base, c: ConnId, data: &[u8]) {
        let at = cx.io.now() + self.idle;
        let Some(up) = self.rec(cx.ups) else {
            return;
        };
        up.tr.write(cx.io, self.up, data);
        up.deadline = at;
        if up.tr.pending(cx.io, self.up) > PROXY_HIGH_WATER {
            b.paused = true;
            cx.io.pause_recv(c);
            cx.io.notify_when_flushed(self.up);
        }
    }

    pub fn client_eof(&mut self, cx: &mut Cx, b: &mut Base, c: ConnId) {
        let Some(up) = self.rec(cx.ups) else {
            return;
        };
        up.tr.shutdown_after_flush(cx.io, self.up);
        if up.eof {
            self.close(cx, b, c);
        }
    }

    /// The client's queue drained: an upstream paused for back-pressure reads again.
    pub fn client_flushed(&mut self, cx: &mut Cx) {
        if let Some(up) = self.rec(cx.ups) {
            if up.paused {
                up.paused = false;
                if !up.eof {
                    cx.io.resume_recv(self.up);
                }
            }
        }
    }

    /// The client connection is gone: the upstream closes once its queue is written.
    pub fn client_closed(&mut self, cx: &mut Cx) {
        if let Some(up) = self.rec(cx.ups) {
            if up.state != UpState::Closing {
                up.state = UpState::Closing;
                up.client = None;
                up.tr.close_after_flush(cx.io, self.up);
            }
        }
    }

    pub fn upstream_event(&mut self, cx: &mut Cx, b: &mut Base, c: ConnId, ev: UpEvent) {
        let u = self.up;
        match ev {
            UpEvent::Data(data) => {
                b.tr.write(cx.io, c, data);
                let at = cx.io.now() + self.idle;
                let Some(up) = self.rec(cx.ups) else { return };
                up.got_bytes = true;
                up.deadline = at;
                if b.tr.pending(cx.io, c) > PROXY_HIGH_WATER && !up.paused {
                    up.paused = true;
                    cx.io.pause_recv(u);
                    b.tr.notify_when_flushed(cx.io, c);
                }
            }
            UpEvent::Eof => {
                if let Some(up) = self.rec(cx.ups) {
                    up.eof = true;
                }
                b.tr.shutdown_after_flush(cx.io, c);
                if b.eof {
                    self.close(cx, b, c);
                }
            }
            UpEvent::Flushed => {
                if b.paused {
                    b.paused = false;
                    if !b.eof {
                        cx.io.resume_recv(c);
                    }
                    self.flush_client_buffer(cx, b);
                }
            }
            UpEvent::Closed(_) => b.tr.close_after_flush(cx.io, c),
            UpEvent::Timeout => {
                if let Some(up) = self.rec(cx.ups) {
                    up.abandon(cx.io, u);
                }
                b.tr.close_after_flush(cx.io, c);
            }
            UpEvent::Connected => {}
        }
    }

    /// Both sides finished: each closes once its queue is written.
    fn close(&mut self, cx: &mut Cx, b: &mut Base, c: ConnId) {
        if let Some(up) = self.rec(cx.ups) {
            up.state = UpState::Closing;
            up.client = None;
            up.tr.close_after_flush(cx.io, self.up);
        }
        b.tr.close_after_flush(cx.io, c);
    }
}
