//! A driver with no kernel under it, for unit tests of handlers.
//!
//! [`TestDriver`] owns a real [`Io`], so a handler under test queues output and actions
//! through exactly the API the io_uring and epoll drivers give it. The test plays the kernel
//! and the peers: it scripts what happens (a connection accepted, bytes arriving, a FIN, a
//! reset, a connect completing, the clock moving, a control wake-up) and reads back what the
//! handler did (the bytes each peer received, closes, shutdowns, paused receives, connects,
//! listeners). No socket, no thread, no wait: every call runs to completion before it
//! returns.
//!
//! After each scripted event the driver carries out what the handler queued, in order, as the
//! real drivers' `flush` does: `close` ends in one `on_closed(None)` (unsent output dropped),
//! output is written as far as the peer's window allows ([`TestDriver::set_window`]),
//! `close_after_flush` and `shutdown_after_flush` take effect once the queue is empty,
//! `notify_when_flushed` calls `on_flushed` once it is, and then any timer that is due runs.
//! A handle becomes reusable once `on_closed` has been delivered for it, as on the real
//! drivers: accepted connections get the lowest free handle below `max_conns` (io_uring's
//! slot allocation), outbound ones a handle from a separate range above it, taken from a
//! free list (io_uring's reserved outbound slots).
//!
//! Calls a test makes on [`TestDriver::io`] directly (outside a callback) are carried out by
//! the next event, or by [`TestDriver::flush`].
//!
//! Events a real driver cannot deliver are dropped as the real drivers drop late completions:
//! bytes or a FIN for a connection that is not open (the handler closed it meanwhile) or that
//! already saw its FIN, a completing connect for a connection that is no longer connecting.
//! Accepting on a listener the handler closed (or after `stop_listening`), or with every
//! handle below `max_conns` taken, is a mistake in the test and panics. Closing a stream
//! listener gives its accepts back at once, as on epoll, unless the test holds them
//! ([`TestDriver::hold_accepts`]), as io_uring's asynchronous cancellation does.

use std::fs::File;
use std::io;
use std::net::SocketAddr;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

use crate::connect::ConnectTo;
use crate::dgram::Datagram;
use crate::driver::TimerDue;
use crate::handler::Handler;
use crate::io::{
    Action, AfterFlush, Chunk, ConnId, ConnState, Ctl, DgramTo, Io, ListenerId, Slots,
};

#[cfg(test)]
mod tests;

/// `on_timer` calls at one instant before [`TestDriver::advance`] gives up: a handler that
/// keeps asking to be called again at once would spin the real zone too.
const SAME_INSTANT_LIMIT: u32 = 10_000;

/// The most one read of a queued file takes.
const FILE_READ: u64 = 64 * 1024;

/// What a peer saw, in order, where the handler did more than write bytes
/// ([`TestDriver::take_transcript`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    Bytes(Vec<u8>),
    /// A socket option set on the connection ([`Io::set_sockopt`]).
    SockOpt {
        level: i32,
        name: i32,
        value: Vec<u8>,
    },
    /// A kernel TLS record of this content type ([`Io::send_tls_record`]).
    TlsRecord {
        typ: u8,
        data: Vec<u8>,
    },
}

/// What the peer at the other end of one handle saw.
#[derive(Default)]
struct Peer {
    /// Bytes received and not yet taken by the test.
    output: Vec<u8>,
    /// The same bytes with the socket options and records between them, not yet taken.
    transcript: Vec<Seen>,
    /// Bytes the peer still reads (`None`: unlimited).
    window: Option<u64>,
    write_shut: bool,
    closed: bool,
}

/// Where a datagram the handler sent went ([`TestDriver::take_datagrams`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SentTo {
    /// From UDP listener `id` to `peer` ([`Io::send_to`]), from source address `from`.
    Listener {
        id: ListenerId,
        peer: SocketAddr,
        from: Option<std::net::IpAddr>,
    },
    /// On connected datagram socket `c` ([`Io::send_datagram`]).
    Conn(ConnId),
}

/// A zone driver with no kernel under it: the test scripts completions and reads back what
/// the handler queued. See the [module docs](self).
pub struct TestDriver {
    io: Io,
    max_conns: u32,
    timer: TimerDue,
    peers: Vec<Peer>,
    listening: bool,
    /// Every listener closed so far (accepts on them are refused).
    gone: Vec<ListenerId>,
    /// Stream listeners open ([`Io::accepting`]).
    streams: Vec<ListenerId>,
    /// Closing a stream listener leaves its accepts in flight ([`TestDriver::hold_accepts`]).
    hold: bool,
    /// Stream listeners closed whose accepts are still in flight: they may still accept.
    held: Vec<ListenerId>,
    added: Vec<ListenerId>,
    closed_listeners: Vec<ListenerId>,
    sockopt_err: Option<io::Error>,
    /// Datagrams sent, in order, not yet taken by the test.
    dgrams: Vec<(SentTo, Vec<u8>)>,
}

impl Default for TestDriver {
    fn default() -> Self {
        TestDriver::new()
    }
}

impl TestDriver {
    /// A zone with `max_conns` 1024 and `max_outbound` 1024.
    pub fn new() -> TestDriver {
        TestDriver::with_limits(1024, 1024)
    }

    /// A zone that holds `max_conns` accepted and `max_outbound` outbound connections
    /// ([`crate::ZoneConfig`]'s fields of those names). Outbound handles are
    /// `max_conns..max_conns + max_outbound`, as io_uring reserves them above the accepted
    /// ones.
    pub fn with_limits(max_conns: u32, max_outbound: u32) -> TestDriver {
        let mut io = Io::new(max_conns as usize);
        io.slots = Slots::Virtual {
            free: (max_conns..max_conns.saturating_add(max_outbound))
                .rev()
                .collect(),
            connects: Vec::new(),
        };
        io.now = Instant::now();
        TestDriver {
            io,
            max_conns,
            timer: TimerDue::new(None),
            peers: Vec::new(),
            listening: true,
            gone: Vec::new(),
            streams: Vec::new(),
            hold: false,
            held: Vec::new(),
            added: Vec::new(),
            closed_listeners: Vec::new(),
            sockopt_err: None,
            dgrams: Vec::new(),
        }
    }

    /// The zone's [`Io`], for calls a test makes itself (they are carried out by the next
    /// event, or by [`flush`](Self::flush)).
    pub fn io(&mut self) -> &mut Io {
        &mut self.io
    }

    /// The scripted clock: what `io.now()` returns. It moves only with
    /// [`advance`](Self::advance).
    pub fn now(&self) -> Instant {
        self.io.now
    }

    /// When `on_timer` is due next (the interval it last returned, or an earlier
    /// [`Io::timer_at`] request); `None` if the handler asked for none.
    pub fn next_timer(&self) -> Option<Instant> {
        self.io.timer_planned()
    }

    /// The initial `on_timer` call `driver::run` makes before the first wait. Without it, the
    /// handler's timer runs only once it asks with [`Io::timer_at`].
    pub fn start<H: Handler>(&mut self, h: &mut H) {
        self.timer = TimerDue::new(Some(self.io.now));
        self.settle(h);
    }

    /// A listener the zone started with (`run_zone`'s `listeners`, in order), so that ids
    /// the handler gets from [`Io::add_listener`] follow it as on a real zone. Returns its id.
    pub fn start_listener(&mut self) -> ListenerId {
        let id = self.next_listener();
        self.streams.push(id);
        self.count_accepts();
        id
    }

    /// A UDP listener the zone started with: as [`start_listener`](Self::start_listener),
    /// but it accepts nothing ([`Io::accepting`] does not count it).
    pub fn start_udp_listener(&mut self) -> ListenerId {
        self.next_listener()
    }

    /// The id the next registered listener gets.
    fn next_listener(&mut self) -> ListenerId {
        let id = ListenerId(self.io.listener_count);
        self.io.listener_count += 1;
        id
    }

    /// From now on, a stream listener the handler closes keeps its accepts in flight until
    /// [`give_back_accepts`](Self::give_back_accepts): it may still accept a connection
    /// (one the kernel took before io_uring's cancellation reached the accept), and
    /// [`Io::accepting`] stays true.
    pub fn hold_accepts(&mut self) {
        self.hold = true;
    }

    /// The kernel gives back the accepts of the listeners closed meanwhile (their
    /// cancellations complete): `on_timer` runs if none is left, then what it queued is
    /// carried out. Closing gives them back at once again afterwards.
    pub fn give_back_accepts<H: Handler>(&mut self, h: &mut H) {
        self.hold = false;
        self.held.clear();
        self.count_accepts();
        self.settle(h);
    }

    /// Stream listener `id` closed: its accepts are given back, or held.
    fn close_stream(&mut self, id: ListenerId) {
        if let Some(i) = self.streams.iter().position(|&s| s == id) {
            self.streams.remove(i);
            if self.hold {
                self.held.push(id);
            }
        }
    }

    fn count_accepts(&mut self) {
        let n = (self.streams.len() + self.held.len()) as u32;
        self.io.set_accepts_open(n);
    }

    /// A connection accepted on `listener` (`peer`: the address [`Io::peer_addr`] reports,
    /// as with [`crate::ZoneConfig::peer_addrs`]): `on_accept`, then what the handler queued
    /// is carried out. Returns its handle: the lowest free one below `max_conns`, as io_uring
    /// allocates direct-descriptor slots.
    ///
    /// # Panics
    ///
    /// If the listener was closed, the zone stopped listening, or `max_conns` connections are
    /// open: a real zone accepts nothing then.
    pub fn accept<H: Handler>(
        &mut self,
        h: &mut H,
        listener: ListenerId,
        peer: Option<SocketAddr>,
    ) -> ConnId {
        assert!(
            (self.listening && !self.gone.contains(&listener)) || self.held.contains(&listener),
            "accept on {listener:?}: the zone no longer listens there"
        );
        let free = (0..self.max_conns).find(|&i| {
            self.io
                .conns
                .get(i as usize)
                .is_none_or(|x| x.state == ConnState::Free)
        });
        let c = ConnId(free.unwrap_or_else(|| {
            panic!(
                "accept: every handle below max_conns ({}) is taken",
                self.max_conns
            )
        }));
        self.io.conn_mut(c).open();
        self.io.conns[c.index()].peer = peer;
        *self.peer_mut(c) = Peer::default();
        h.on_accept(&mut self.io, c, listener);
        self.settle(h);
        c
    }

    /// Bytes arrive on `c`: `on_data`, then what the handler queued is carried out. Delivered
    /// even if the handler paused the receive (a paused real connection may still get a
    /// little data: receives already done when the pause takes effect).
    pub fn recv<H: Handler>(&mut self, h: &mut H, c: ConnId, data: &[u8]) {
        if self.receiving(c) {
            h.on_data(&mut self.io, c, data);
        }
        self.settle(h);
    }

    /// A datagram arrives on UDP listener `listener`: `on_datagram`, then what the handler
    /// queued is carried out. (The test driver does not tell TCP from UDP listeners: the
    /// handler knows which of its listeners is which.)
    pub fn datagram<H: Handler>(&mut self, h: &mut H, listener: ListenerId, dg: Datagram<'_>) {
        self.datagram_batch(h, listener, &[dg]);
    }

    /// Datagrams arriving on `listener` in one batch, as a receive that found them all
    /// waiting hands them over: each to `on_datagram`, then the batch's end.
    pub fn datagram_batch<H: Handler>(
        &mut self,
        h: &mut H,
        listener: ListenerId,
        dgs: &[Datagram<'_>],
    ) {
        assert!(
            self.listening && !self.gone.contains(&listener),
            "datagrams on {listener:?}: the zone no longer listens there"
        );
        for dg in dgs {
            h.on_datagram(&mut self.io, listener, *dg);
        }
        self.settle(h);
    }

    /// Every datagram sent since the last call ([`Io::send_to`], [`Io::send_datagram`]), in
    /// order. A send on a datagram socket that closed before the driver carried it out is
    /// not among them (counted as a send error, as the real drivers do).
    pub fn take_datagrams(&mut self) -> Vec<(SentTo, Vec<u8>)> {
        std::mem::take(&mut self.dgrams)
    }

    /// A datagram socket is refused by its peer (ICMP port unreachable): `on_closed` with
    /// `ECONNREFUSED`, as the real drivers report it.
    pub fn refused<H: Handler>(&mut self, h: &mut H, c: ConnId) {
        let e = io::Error::from_raw_os_error(libc::ECONNREFUSED);
        self.reset(h, c, e);
    }

    /// The peer's FIN (a read returned 0): `on_eof`, then what the handler queued is carried
    /// out.
    pub fn eof<H: Handler>(&mut self, h: &mut H, c: ConnId) {
        if self.receiving(c) {
            self.io.conns[c.index()].eof = true;
            h.on_eof(&mut self.io, c);
        }
        self.settle(h);
    }

    /// The connection fails (a reset, a receive or send error): unsent output is dropped,
    /// `on_closed(Some(err))`, and the handle is free.
    pub fn reset<H: Handler>(&mut self, h: &mut H, c: ConnId, err: io::Error) {
        self.close_now(h, c, Some(err));
        self.settle(h);
    }

    /// Outbound connects the handler asked for ([`Io::connect`]) since the last call, in
    /// order: the handle and where to. Nothing is connected until [`connected`](Self::connected)
    /// or [`connect_failed`](Self::connect_failed).
    pub fn take_connects(&mut self) -> Vec<(ConnId, ConnectTo)> {
        match &mut self.io.slots {
            Slots::Virtual { connects, .. } => std::mem::take(connects),
            _ => unreachable!("the test driver's slots are virtual"),
        }
    }

    /// An outbound connect completes: the connection is open, `on_connected`, then the output
    /// queued while it was connecting goes out.
    pub fn connected<H: Handler>(&mut self, h: &mut H, c: ConnId) {
        if self.state(c) == Some(ConnState::Connecting) {
            self.io.conns[c.index()].state = ConnState::Open;
            self.io.mark_dirty(c);
            h.on_connected(&mut self.io, c);
        }
        self.settle(h);
    }

    /// An outbound connect fails: `on_closed(Some(err))`, with the error worded as the real
    /// drivers word it ("connect to ADDR: err").
    pub fn connect_failed<H: Handler>(&mut self, h: &mut H, c: ConnId, err: io::Error) {
        if self.state(c) == Some(ConnState::Connecting) {
            let peer = self.io.conns[c.index()]
                .peer
                .map_or_else(String::new, |p| p.to_string());
            let err = io::Error::new(err.kind(), format!("connect to {peer}: {err}"));
            self.close_now(h, c, Some(err));
        }
        self.settle(h);
    }

    /// The zone's [`crate::Waker`] fired (a control message is waiting): `on_wake`, then what
    /// the handler queued is carried out.
    pub fn wake<H: Handler>(&mut self, h: &mut H) {
        if !self.io.exit {
            h.on_wake(&mut self.io);
        }
        self.settle(h);
    }

    /// Moves the scripted clock forward by `by`, calling `on_timer` at each due time on the
    /// way as `driver::run` would (at the interval `on_timer` returned, or earlier when the
    /// handler asked with [`Io::timer_at`]), each call seeing `io.now()` equal to its due
    /// time, and carrying out what each call queued.
    ///
    /// # Panics
    ///
    /// If `on_timer` keeps asking to be called again at the same instant (a real zone would
    /// spin).
    pub fn advance<H: Handler>(&mut self, h: &mut H, by: Duration) {
        let end = self.io.now + by;
        let mut same = 0;
        loop {
            self.timer.merge(&mut self.io);
            match self.timer.next() {
                Some(t) if t <= end && !self.io.exit => {
                    let at = t.max(self.io.now);
                    same = if at == self.io.now { same + 1 } else { 0 };
                    assert!(
                        same < SAME_INSTANT_LIMIT,
                        "on_timer keeps asking to run again at the same instant"
                    );
                    self.io.now = at;
                    self.timer.tick(&mut self.io, h);
                    self.flush(h);
                }
                _ => break,
            }
        }
        self.io.now = end;
    }

    /// Everything written to `c` since the last call, as the peer received it (queued file
    /// chunks read from their file). Empty once the connection's handle was reused.
    pub fn take_output(&mut self, c: ConnId) -> Vec<u8> {
        self.peers
            .get_mut(c.index())
            .map_or_else(Vec::new, |p| std::mem::take(&mut p.output))
    }

    /// What was written to `c` since the last call, with the socket options set and the
    /// TLS records sent between the bytes (kernel TLS's hand-over), in order.
    pub fn take_transcript(&mut self, c: ConnId) -> Vec<Seen> {
        self.peers
            .get_mut(c.index())
            .map_or_else(Vec::new, |p| std::mem::take(&mut p.transcript))
    }

    /// Makes the next socket option set on any connection fail with `err`, as a kernel
    /// that refuses it would.
    pub fn fail_next_sockopt(&mut self, err: io::Error) {
        self.sockopt_err = Some(err);
    }

    /// The peer reads at most `bytes` more (`None`: unlimited, the default): output beyond
    /// that stays queued ([`Io::pending`] > 0), as when a real peer stops reading and the
    /// socket buffer fills, so back-pressure, `on_flushed` and send timeouts can be tested.
    /// Call [`flush`](Self::flush) after raising it to let the queued output go.
    pub fn set_window(&mut self, c: ConnId, bytes: Option<u64>) {
        self.peer_mut(c).window = bytes;
        if self.io.is_open(c) {
            self.io.mark_dirty(c);
        }
    }

    /// Carries out what the handler queued: actions in order (closes, pauses, listeners),
    /// then each connection's output as far as its window allows, with what follows a drained
    /// queue (close, shutdown, `on_flushed`), until nothing new is queued. The real drivers
    /// do the same after each batch of completions.
    pub fn flush<H: Handler>(&mut self, h: &mut H) {
        loop {
            // Datagrams first, as on the real drivers: one queued before its socket's close
            // goes out before it.
            self.send_datagrams();
            for a in std::mem::take(&mut self.io.actions) {
                match a {
                    Action::Close(c) => self.close_now(h, c, None),
                    // A new outbound connection (recorded by `Io::connect`; it completes when
                    // the test says so): its peer starts afresh, as an accepted one's does.
                    Action::Connect(c) => *self.peer_mut(c) = Peer::default(),
                    // The paused flag on `Io` is the state (`recv_paused`).
                    Action::PauseRecv(_) | Action::ResumeRecv(_) => {}
                }
            }
            for l in std::mem::take(&mut self.io.new_listeners) {
                let id = self.next_listener();
                if !l.is_udp() {
                    self.streams.push(id);
                }
                drop(l);
                self.added.push(id);
            }
            for id in std::mem::take(&mut self.io.closed_listeners) {
                self.gone.push(id);
                self.closed_listeners.push(id);
                self.close_stream(id);
            }
            if self.io.stop_listening {
                self.io.stop_listening = false;
                self.listening = false;
                for id in self.streams.clone() {
                    self.close_stream(id);
                }
            }
            self.count_accepts();
            if self.io.dirty.is_empty()
                && self.io.actions.is_empty()
                && self.io.dgram_out.is_empty()
            {
                break;
            }
            while let Some(c) = self.io.dirty.pop() {
                self.flush_conn(h, c);
            }
        }
    }

    /// Carries out the datagram sends the handler queued: each is recorded for
    /// [`take_datagrams`](Self::take_datagrams), or dropped when its listener or socket is
    /// gone.
    fn send_datagrams(&mut self) {
        for o in std::mem::take(&mut self.io.dgram_out) {
            let to = match o.to {
                DgramTo::Listener { id, s } => (self.listening && !self.gone.contains(&id))
                    .then_some(SentTo::Listener {
                        id,
                        peer: s.to,
                        from: s.from,
                    }),
                DgramTo::Conn { c, gen } => self
                    .io
                    .conns
                    .get(c.index())
                    .is_some_and(|x| x.gen == gen && x.state == ConnState::Open)
                    .then_some(SentTo::Conn(c)),
            };
            if let Some(to) = to {
                // A GSO send is the datagrams the kernel would cut it into.
                let seg = match o.to {
                    DgramTo::Listener { s, .. } if s.segment > 0 => usize::from(s.segment),
                    _ => o.buf.len().max(1),
                };
                for d in o.buf.chunks(seg) {
                    self.dgrams.push((to, d.to_vec()));
                }
            }
            self.io.dgram_done(o.buf, to.is_some());
        }
    }

    /// Open, or connecting.
    pub fn is_open(&self, c: ConnId) -> bool {
        self.io.is_open(c)
    }

    /// The connection was closed (`on_closed` delivered) since it was last opened.
    pub fn closed(&self, c: ConnId) -> bool {
        self.peers.get(c.index()).is_some_and(|p| p.closed)
    }

    /// The write side was shut down (`shutdown_after_flush` took effect: the FIN was sent)
    /// since the connection was opened.
    pub fn write_shut(&self, c: ConnId) -> bool {
        self.peers.get(c.index()).is_some_and(|p| p.write_shut)
    }

    /// The handler paused receiving on `c` and has not resumed.
    pub fn recv_paused(&self, c: ConnId) -> bool {
        self.io.is_open(c) && self.io.conns[c.index()].paused
    }

    /// [`Io::exit`] was called.
    pub fn exited(&self) -> bool {
        self.io.exit
    }

    /// False once the handler called [`Io::stop_listening`].
    pub fn listening(&self) -> bool {
        self.listening
    }

    /// Listeners the handler added ([`Io::add_listener`]) since the last call, with the ids
    /// it was given.
    pub fn added_listeners(&mut self) -> Vec<ListenerId> {
        std::mem::take(&mut self.added)
    }

    /// Listeners the handler closed ([`Io::close_listener`]) since the last call.
    pub fn closed_listeners(&mut self) -> Vec<ListenerId> {
        std::mem::take(&mut self.closed_listeners)
    }

    fn state(&self, c: ConnId) -> Option<ConnState> {
        self.io.conns.get(c.index()).map(|x| x.state)
    }

    /// Open, and the peer has not sent its FIN.
    fn receiving(&self, c: ConnId) -> bool {
        self.io
            .conns
            .get(c.index())
            .is_some_and(|x| x.state == ConnState::Open && !x.eof)
    }

    fn peer_mut(&mut self, c: ConnId) -> &mut Peer {
        if self.peers.len() <= c.index() {
            self.peers.resize_with(c.index() + 1, Peer::default);
        }
        &mut self.peers[c.index()]
    }

    /// Carries out what the handler queued, then runs `on_timer` while it is due at the
    /// current time (the top of `driver::run`'s loop).
    fn settle<H: Handler>(&mut self, h: &mut H) {
        h.on_batch_end(&mut self.io);
        self.flush(h);
        let mut n = 0;
        loop {
            self.timer.merge(&mut self.io);
            if self.io.exit || self.timer.next().is_none_or(|t| t > self.io.now) {
                return;
            }
            n += 1;
            assert!(
                n < SAME_INSTANT_LIMIT,
                "on_timer keeps asking to run again at the same instant"
            );
            self.timer.tick(&mut self.io, h);
            self.flush(h);
        }
    }

    /// Closes at once (epoll's `close_now`; io_uring's close once its cancels completed):
    /// unsent output dropped, the handle freed, `on_closed`.
    fn close_now<H: Handler>(&mut self, h: &mut H, c: ConnId, err: Option<io::Error>) {
        if !self.io.is_open(c) {
            return;
        }
        let conn = &mut self.io.conns[c.index()];
        conn.state = ConnState::Free;
        conn.in_flight = false;
        conn.out.clear();
        let err = err.or_else(|| conn.close_err.take());
        if conn.outbound.take().is_some() {
            if let Slots::Virtual { free, .. } = &mut self.io.slots {
                free.push(c.0);
            }
        }
        self.peer_mut(c).closed = true;
        h.on_closed(&mut self.io, c, err);
    }

    /// Writes `c`'s queued output as far as the peer's window allows, then what follows a
    /// drained queue (the real drivers' `flush_conn` / `write_out`).
    fn flush_conn<H: Handler>(&mut self, h: &mut H, c: ConnId) {
        let conn = &mut self.io.conns[c.index()];
        conn.dirty = false;
        if conn.state != ConnState::Open {
            return; // connecting: the output goes once connected
        }
        if self.peers.len() <= c.index() {
            self.peers.resize_with(c.index() + 1, Peer::default);
        }
        let peer = &mut self.peers[c.index()];
        loop {
            conn.skip_empty_front(&mut self.io.spares);
            if conn.ctl_due() {
                // A control operation whose turn has come (the real drivers' `ctl.rs`).
                match conn.ctl_front() {
                    Some(Ctl::SockOpt(o)) => {
                        if let Some(e) = self.sockopt_err.take() {
                            let e = o.error(e);
                            return self.close_now(h, c, Some(e));
                        }
                        peer.transcript.push(Seen::SockOpt {
                            level: o.level,
                            name: o.name,
                            value: o.value.clone(),
                        });
                    }
                    Some(Ctl::TlsRecord(r)) => {
                        // A record goes whole (the real drivers send it in one sendmsg); its
                        // bytes do not count in `sent`, which orders the operations.
                        let data = r.buf[r.pos..].to_vec();
                        peer.output.extend_from_slice(&data);
                        peer.transcript.push(Seen::TlsRecord { typ: r.typ, data });
                    }
                    None => {}
                }
                conn.ctl_pop();
                continue;
            }
            let room = peer.window.unwrap_or(u64::MAX);
            let at = peer.output.len();
            let n = match conn.out.front() {
                None => break,
                Some(_) if room == 0 => return, // stays queued, as in a full socket buffer
                Some(Chunk::Bytes { buf, pos }) => {
                    let n = (buf.len() - pos).min(room.min(usize::MAX as u64) as usize);
                    peer.output.extend_from_slice(&buf[*pos..pos + n]);
                    n as u64
                }
                Some(Chunk::File { file, off, end }) => {
                    let want = (end - off).min(room).min(FILE_READ);
                    match read_file(file, *off, want, &mut peer.output) {
                        Ok(n) => n,
                        Err(e) => return self.close_now(h, c, Some(e)),
                    }
                }
            };
            let new = &peer.output[at..];
            match peer.transcript.last_mut() {
                Some(Seen::Bytes(b)) => b.extend_from_slice(new),
                _ => peer.transcript.push(Seen::Bytes(new.to_vec())),
            }
            if let Some(w) = &mut peer.window {
                *w -= n;
            }
            conn.sent += n;
            if conn.advance(n) {
                conn.pop_front(&mut self.io.spares);
            }
        }
        match std::mem::replace(&mut conn.after_flush, AfterFlush::Nothing) {
            AfterFlush::Nothing => {}
            AfterFlush::Close => return self.close_now(h, c, None),
            AfterFlush::ShutdownWrite => peer.write_shut = true,
        }
        if conn.notify_flushed {
            conn.notify_flushed = false;
            h.on_flushed(&mut self.io, c);
        }
    }
}

/// Appends `len` bytes of `file` from `off` to `out`. A file that ends before them fails as
/// on the real drivers ("file shrank while being sent").
fn read_file(file: &File, off: u64, len: u64, out: &mut Vec<u8>) -> io::Result<u64> {
    let start = out.len();
    out.resize(start + len as usize, 0);
    let r = file.read_at(&mut out[start..], off);
    let n = *r.as_ref().unwrap_or(&0);
    out.truncate(start + n);
    match r {
        Ok(0) => Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "file shrank while being sent",
        )),
        Ok(n) => Ok(n as u64),
        Err(e) => Err(e),
    }
}
