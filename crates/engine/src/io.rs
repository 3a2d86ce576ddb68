//! The per-zone I/O surface a [`Handler`](crate::Handler) talks to.
//!
//! Both drivers own one [`Io`]; the handler queues output and actions on it while the driver
//! dispatches completions, and the driver turns the queue into system calls (epoll) or
//! submission-queue entries (io_uring) once per loop iteration, so a burst of pipelined
//! requests costs one send, not one per response.

use std::fs::File;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::rc::Rc;
use std::time::Instant;

pub(crate) use crate::conn_io::{AfterFlush, Chunk, ConnIo, ConnState, Ctl, Outbound, SockOpt};
use crate::connect::ConnectTo;
use crate::listener::Listener;

/// Datagram sends a zone queues or has in flight at most, unless its configuration says
/// otherwise ([`crate::ZoneConfig::max_datagrams_queued`]).
pub(crate) const DEFAULT_DGRAM_LIMIT: u32 = 4096;

/// A connection handle. For io_uring it is the direct-descriptor slot (the kernel's own
/// index is the handle: no fd table, no lookup); for epoll it is the file descriptor.
/// Both are small dense integers, so handlers index plain vectors with them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId(pub u32);

impl ConnId {
    /// The index for per-connection tables.
    #[inline]
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// A listener registered with [`crate::Driver::add_listener`], in registration order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ListenerId(pub u32);

/// How handles of outbound connections are chosen.
pub(crate) enum Slots {
    /// The descriptor is the handle.
    Fd,
    /// Direct-descriptor slots reserved for outbound connections (accepts allocate below
    /// them), free ones on a stack.
    Reserved(Vec<u32>),
    /// No kernel under the zone (the test driver, [`crate::testio`]): handles reserved for
    /// outbound connections as with `Reserved`, and each connect recorded, not made (no
    /// socket is created).
    Virtual {
        free: Vec<u32>,
        connects: Vec<(ConnId, ConnectTo)>,
    },
}

/// Takes a free outbound slot, or says that the zone's `max_outbound` is reached.
fn take_slot(free: &mut Vec<u32>, to: &ConnectTo) -> io::Result<ConnId> {
    match free.pop() {
        Some(slot) => Ok(ConnId(slot)),
        None => Err(io::Error::new(
            io::ErrorKind::OutOfMemory,
            format!(
                "connect to {}: no free outbound connection slot (the zone's max_outbound is reached)",
                to.addr
            ),
        )),
    }
}

/// Deferred actions the driver carries out after the handler returns.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Action {
    Close(ConnId),
    PauseRecv(ConnId),
    ResumeRecv(ConnId),
    Connect(ConnId),
}

/// The handler's view of a zone's connections: queue output, close, pause reading.
pub struct Io {
    pub(crate) conns: Vec<ConnIo>,
    /// Spare output vectors, most recently used last (`ConnIo::pop_front`).
    pub(crate) spares: Vec<Vec<u8>>,
    pub(crate) dirty: Vec<ConnId>,
    pub(crate) actions: Vec<Action>,
    pub(crate) now: Instant,
    pub(crate) exit: bool,
    pub(crate) stop_listening: bool,
    /// The earliest time the handler asked to get `on_timer` at.
    pub(crate) timer_at: Option<Instant>,
    /// When the zone's loop calls `on_timer` next, as the loop last planned it
    /// (`driver::TimerDue`): `timer_at` requests since are not in it.
    pub(crate) timer_next: Option<Instant>,
    pub(crate) slots: Slots,
    /// Listeners registered so far (the next [`ListenerId`]).
    pub(crate) listener_count: u32,
    /// Listeners the handler added, registered by the driver after the callback batch.
    pub(crate) new_listeners: Vec<Listener>,
    /// Listeners the handler closed.
    pub(crate) closed_listeners: Vec<ListenerId>,
    /// Stream listeners whose accepts the kernel has not given back: open ones, and closed
    /// ones whose accepts are still being cancelled ([`Io::accepting`]).
    pub(crate) accepts_open: u32,
    /// Connections accepted and not yet handed to the handler (io_uring: their peer address
    /// query is in flight): `on_accept` is still to come ([`Io::accepting`]).
    pub(crate) handovers: u32,
    /// The driver carries out [`Io::set_sockopt`] (io_uring: Linux 6.7's socket commands).
    pub(crate) sockopts: bool,
    /// Datagrams queued this iteration (`dgram.rs`), sent by the driver after the batch.
    pub(crate) dgram_out: Vec<DgramOut>,
    /// Datagram sends queued or in flight, and the most allowed.
    pub(crate) dgram_pending: u32,
    pub(crate) dgram_limit: u32,
    /// Buffers of finished sends, kept for the next: those of a datagram's size, and a
    /// few of a segmented send's (up to 64 KiB each), apart so a small datagram never
    /// holds a large one.
    pub(crate) dgram_spares: Vec<Vec<u8>>,
    pub(crate) dgram_large_spares: Vec<Vec<u8>>,
    pub(crate) dgram_stats: DgramStats,
    /// A segmented (GSO) send failed: none are asked for any more (`Io::gso_works`).
    pub(crate) gso_failed: bool,
}

impl Io {
    pub(crate) fn new(capacity: usize) -> Self {
        let mut conns = Vec::with_capacity(capacity);
        conns.resize_with(capacity, ConnIo::new);
        Io {
            conns,
            spares: Vec::new(),
            dirty: Vec::new(),
            actions: Vec::new(),
            now: Instant::now(),
            exit: false,
            stop_listening: false,
            timer_at: None,
            timer_next: None,
            slots: Slots::Fd,
            listener_count: 0,
            new_listeners: Vec::new(),
            closed_listeners: Vec::new(),
            accepts_open: 0,
            handovers: 0,
            sockopts: true,
            dgram_out: Vec::new(),
            dgram_pending: 0,
            dgram_limit: DEFAULT_DGRAM_LIMIT,
            dgram_spares: Vec::new(),
            dgram_large_spares: Vec::new(),
            dgram_stats: DgramStats::default(),
            gso_failed: false,
        }
    }

    pub(crate) fn conn_mut(&mut self, c: ConnId) -> &mut ConnIo {
        let i = c.index();
        if i >= self.conns.len() {
            self.conns.resize_with(i + 1, ConnIo::new);
        }
        &mut self.conns[i]
    }

    pub(crate) fn mark_dirty(&mut self, c: ConnId) {
        let conn = &mut self.conns[c.index()];
        if !conn.dirty {
            conn.dirty = true;
            self.dirty.push(c);
        }
    }

    /// Open, or connecting (output may be queued before the connect completes).
    pub(crate) fn is_open(&self, c: ConnId) -> bool {
        self.conns
            .get(c.index())
            .is_some_and(|x| matches!(x.state, ConnState::Open | ConnState::Connecting))
    }

    /// Opens an outbound TCP connection. The handle is usable at once: output queued now is
    /// sent when the connect completes. Then [`Handler::on_connected`](crate::Handler::on_connected)
    /// is called, or, if the connect fails, [`Handler::on_closed`](crate::Handler::on_closed)
    /// with the error. Errors returned here (socket, bind) mean nothing was opened.
    pub fn connect(&mut self, to: &ConnectTo) -> io::Result<ConnId> {
        // The socket first: an error creating or binding it means nothing was opened.
        let (c, fd) = match &mut self.slots {
            Slots::Fd => {
                let fd = crate::connect::socket_for(to)?;
                (ConnId(fd.as_raw_fd() as u32), Some(fd))
            }
            Slots::Reserved(free) => {
                let fd = crate::connect::socket_for(to)?;
                (take_slot(free, to)?, Some(fd))
            }
            Slots::Virtual { free, connects } => {
                let c = take_slot(free, to)?;
                connects.push((c, *to));
                (c, None)
            }
        };
        let conn = self.conn_mut(c);
        conn.open();
        conn.dgram = to.datagram;
        conn.state = ConnState::Connecting;
        conn.peer = Some(to.addr);
        conn.outbound = Some(Outbound {
            fd,
            sa: crate::connect::sockaddr(to.addr),
        });
        self.actions.push(Action::Connect(c));
        Ok(c)
    }

    /// The peer's address, when known (see [`crate::ZoneConfig::peer_addrs`]).
    pub fn peer_addr(&self, c: ConnId) -> Option<SocketAddr> {
        self.conns.get(c.index()).and_then(|x| x.peer)
    }

    /// An ordinary descriptor for the connection, to read socket options
    /// (`SO_INCOMING_CPU`...): the connection's own on epoll, outbound connections' on
    /// io_uring; `None` for io_uring's accepted connections, which exist only as direct
    /// descriptors, and for every connection of the test driver ([`crate::testio`]). Never
    /// close it or change its blocking mode.
    pub fn raw_fd(&self, c: ConnId) -> Option<RawFd> {
        let conn = self.conns.get(c.index())?;
        if !matches!(conn.state, ConnState::Open | ConnState::Connecting) {
            return None;
        }
        match (&self.slots, &conn.outbound) {
            (Slots::Fd, _) => Some(c.0 as RawFd),
            (Slots::Reserved(_), Some(o)) => o.fd.as_ref().map(|f| f.as_raw_fd()),
            (Slots::Reserved(_), None) => None,
            (Slots::Virtual { .. }, _) => None,
        }
    }

    /// The time at the start of this loop iteration (one clock read per iteration).
    #[inline]
    pub fn now(&self) -> Instant {
        self.now
    }

    /// Appends bytes to the connection's output. Copies `data`; see [`Io::out_buf`] to
    /// serialise in place.
    pub fn write(&mut self, c: ConnId, data: &[u8]) {
        if let Some(buf) = self.out_buf(c) {
            buf.extend_from_slice(data);
        }
    }

    /// The vector at the tail of the connection's output, to serialise a response into it
    /// directly. Everything appended is sent in order after what was queued before.
    /// Returns `None` if the connection is closing.
    pub fn out_buf(&mut self, c: ConnId) -> Option<&mut Vec<u8>> {
        if !self.is_open(c) {
            return None;
        }
        self.mark_dirty(c);
        let conn = &mut self.conns[c.index()];
        let appendable = matches!(conn.out.back(), Some(Chunk::Bytes { .. }))
            && !(conn.in_flight && conn.out.len() == 1);
        if !appendable {
            let buf = self.spares.pop().unwrap_or_default();
            conn.out.push_back(Chunk::Bytes { buf, pos: 0 });
        }
        match conn.out.back_mut() {
            Some(Chunk::Bytes { buf, .. }) => Some(buf),
            _ => unreachable!("an appendable bytes chunk was just ensured"),
        }
    }

    /// Queues `len` bytes of `file` from `offset`. epoll: `sendfile`. io_uring: a body that fits
    /// behind the response head is read from the page cache into the output buffer and sent
    /// with it (`uring/file_read.rs`), a larger one goes by `sendfile` (`uring/sendfile.rs`),
    /// and bytes not in the page cache are spliced by the kernel's workers.
    pub fn send_file(&mut self, c: ConnId, file: Rc<File>, offset: u64, len: u64) {
        if len == 0 || !self.is_open(c) {
            return;
        }
        self.mark_dirty(c);
        let conn = &mut self.conns[c.index()];
        conn.out.push_back(Chunk::File {
            file,
            off: offset,
            end: offset + len,
        });
    }

    /// Sets a socket option on the connection once everything queued before it has been
    /// written, and before anything queued after it: kernel TLS's `TCP_ULP` and `TLS_TX`,
    /// whose keys seal what follows them. io_uring: `IORING_OP_URING_CMD`
    /// `SOCKET_URING_OP_SETSOCKOPT` on the direct descriptor (Linux 6.7); epoll:
    /// `setsockopt(2)`. If the kernel refuses, the connection closes and `on_closed` gets the
    /// error. See [`Io::can_set_sockopt`].
    pub fn set_sockopt(&mut self, c: ConnId, level: i32, name: i32, value: Vec<u8>) {
        self.queue_ctl(c, Ctl::SockOpt(SockOpt { level, name, value }));
    }

    /// Queues a control operation after everything queued so far.
    fn queue_ctl(&mut self, c: ConnId, op: Ctl) {
        if !self.is_open(c) {
            return;
        }
        self.mark_dirty(c);
        let at = self.bytes_out(c);
        let conn = &mut self.conns[c.index()];
        conn.ctl
            .get_or_insert_with(Box::default)
            .push_back((at, op));
        if matches!(conn.out.back(), Some(Chunk::Bytes { .. })) {
            // What is written after the operation goes in a chunk of its own.
            let buf = self.spares.pop().unwrap_or_default();
            conn.out.push_back(Chunk::Bytes { buf, pos: 0 });
        }
    }

    /// Whether this zone's driver can carry out [`Io::set_sockopt`].
    pub fn can_set_sockopt(&self) -> bool {
        self.sockopts
    }

    /// Sends `data` as one record of TLS content type `typ` (an alert, a handshake message)
    /// on a connection whose sending side kernel TLS seals: `sendmsg(2)` with a `SOL_TLS`
    /// `TLS_SET_RECORD_TYPE` control message (io_uring: `IORING_OP_SENDMSG`), in order with
    /// the rest of the output. On a socket without kernel TLS the bytes go out as they are.
    pub fn send_tls_record(&mut self, c: ConnId, typ: u8, data: &[u8]) {
        if !data.is_empty() {
            let r = crate::tls_record::TlsRecord::new(typ, data);
            self.queue_ctl(c, Ctl::TlsRecord(r));
        }
    }

    /// Bytes queued and not yet written, for back-pressure decisions.
    pub fn pending(&self, c: ConnId) -> u64 {
        self.conns
            .get(c.index())
            .map_or(0, |x| x.out.iter().map(Chunk::remaining).sum::<u64>())
    }

    /// Calls [`Handler::on_flushed`](crate::Handler::on_flushed) once the output is empty.
    pub fn notify_when_flushed(&mut self, c: ConnId) {
        if self.is_open(c) {
            self.conns[c.index()].notify_flushed = true;
            self.mark_dirty(c);
        }
    }

    /// Closes the connection now, dropping unsent output. `on_closed` follows.
    ///
    /// Also aborts a close already under way that is still writing its last output (io_uring
    /// submits the close together with the last send): a peer that stopped reading would
    /// otherwise hold the connection for as long as it likes.
    pub fn close(&mut self, c: ConnId) {
        let closing = self
            .conns
            .get(c.index())
            .is_some_and(|x| x.state == ConnState::Closing && x.in_flight);
        if self.is_open(c) || closing {
            self.actions.push(Action::Close(c));
        }
    }

    /// Says the peer will send nothing more on this connection (it said so in its protocol,
    /// as an HTTP client does with `Connection: close`). A close after flush then lets the
    /// kernel hold the last bytes back and send the FIN with them (`MSG_MORE`): one segment
    /// instead of two. Without this the last bytes leave at once: if data still arrived
    /// before the close, the kernel would answer with a reset and drop bytes it still held.
    pub fn peer_done(&mut self, c: ConnId) {
        if let Some(conn) = self.conns.get_mut(c.index()) {
            conn.peer_done = true;
        }
    }

    /// Closes once everything queued has been written.
    pub fn close_after_flush(&mut self, c: ConnId) {
        if self.is_open(c) {
            self.conns[c.index()].after_flush = AfterFlush::Close;
            self.mark_dirty(c);
        }
    }

    /// Closes with a reset (RST) once everything queued before it has been written:
    /// `SO_LINGER` {on, 0} queued behind the output ([`Io::set_sockopt`]), then the close. A
    /// peer can then tell output cut short from output that ended. Where the driver cannot
    /// set the option in order (io_uring before Linux 6.7), the close is a FIN.
    pub fn reset_after_flush(&mut self, c: ConnId) {
        if self.can_set_sockopt() {
            let linger = libc::linger {
                l_onoff: 1,
                l_linger: 0,
            };
            // SAFETY: `linger` is a live local of two C ints with no padding: its bytes are
            // valid to read for its size, and they are copied before it goes out of scope.
            let bytes = unsafe {
                std::slice::from_raw_parts(
                    (&linger as *const libc::linger).cast::<u8>(),
                    std::mem::size_of::<libc::linger>(),
                )
            };
            self.set_sockopt(c, libc::SOL_SOCKET, libc::SO_LINGER, bytes.to_vec());
        }
        self.close_after_flush(c);
    }

    /// Sends FIN (shutdown of the write side) once everything queued has been written;
    /// reading goes on, so a lingering close can drain what the peer still sends.
    pub fn shutdown_after_flush(&mut self, c: ConnId) {
        if self.is_open(c) {
            self.conns[c.index()].after_flush = AfterFlush::ShutdownWrite;
            self.mark_dirty(c);
        }
    }

    /// Stops delivering data. A little data already received may still arrive.
    pub fn pause_recv(&mut self, c: ConnId) {
        if self.is_open(c) && !self.conns[c.index()].paused {
            self.conns[c.index()].paused = true;
            self.actions.push(Action::PauseRecv(c));
        }
    }

    /// Bounds what `c` may still deliver after [`Io::pause_recv`]: each receive takes at most
    /// about `bytes` before the handler sees it (io_uring: the multishot receive's byte limit
    /// from Linux 6.17, for the receives armed from now on; the epoll driver reads a buffer
    /// at a time and stops at the pause anyway). For a connection whose reader holds what
    /// arrives until someone else drains it: an upstream relayed to a slow client.
    pub fn limit_recv(&mut self, c: ConnId, bytes: u32) {
        if self.is_open(c) {
            self.conns[c.index()].recv_limit = bytes.max(1);
        }
    }

    /// Resumes delivering data after [`Io::pause_recv`].
    pub fn resume_recv(&mut self, c: ConnId) {
        if self.is_open(c) && self.conns[c.index()].paused {
            self.conns[c.index()].paused = false;
            self.actions.push(Action::ResumeRecv(c));
        }
    }

    /// Closes every listener of this zone (graceful shutdown: no new connections here).
    pub fn stop_listening(&mut self) {
        self.stop_listening = true;
    }

    /// Starts accepting (or receiving datagrams) on another listening socket (bound,
    /// listening, non-blocking) once this callback batch is over (configuration reload).
    /// Returns the id its connections (or datagrams) will carry.
    pub fn add_listener(&mut self, l: impl Into<Listener>) -> ListenerId {
        let id = ListenerId(self.listener_count + self.new_listeners.len() as u32);
        self.new_listeners.push(l.into());
        id
    }

    /// Stops accepting on one listener and closes this zone's socket for it; connections
    /// accepted on it stay.
    pub fn close_listener(&mut self, id: ListenerId) {
        self.closed_listeners.push(id);
    }

    /// Whether an accept may still hand this zone a connection: a stream listener is open,
    /// one closed ([`Io::stop_listening`], [`Io::close_listener`]) still has an accept the
    /// kernel has not given back, or a connection accepted already waits for its peer
    /// address ([`crate::ZoneConfig::peer_addrs`]) before `on_accept`. io_uring cancels
    /// accepts asynchronously, and a connection the kernel accepted before the cancellation
    /// took effect still reaches `on_accept` afterwards. When this turns false, `on_timer`
    /// runs at once.
    ///
    /// A handler that exits once drained waits for it as well as for its last connection:
    /// [`Io::exit`] with a connection accepted meanwhile would close that connection
    /// unanswered (a client of a binary upgrade's old process saw its request fail).
    pub fn accepting(&self) -> bool {
        self.accepts_open > 0 || self.handovers > 0
    }

    /// The driver's count of stream listeners whose accepts are not given back
    /// ([`Io::accepting`]).
    pub(crate) fn set_accepts_open(&mut self, n: u32) {
        let was = self.accepting();
        self.accepts_open = n;
        self.accepting_changed(was);
    }

    /// A connection accepted: `on_accept` waits for its peer address query.
    pub(crate) fn handover_started(&mut self) {
        self.handovers += 1;
    }

    /// The peer address query of an accepted connection answered (`on_accept` follows, if
    /// the connection is still open).
    pub(crate) fn handover_done(&mut self) {
        let was = self.accepting();
        self.handovers = self.handovers.saturating_sub(1);
        self.accepting_changed(was);
    }

    /// `on_timer` runs at once when [`Io::accepting`] has just turned false.
    fn accepting_changed(&mut self, was: bool) {
        if was && !self.accepting() {
            self.timer_at(self.now);
        }
    }

    /// Bytes of this connection's output so far: written plus still queued.
    pub fn bytes_out(&self, c: ConnId) -> u64 {
        self.conns.get(c.index()).map_or(0, |x| x.sent) + self.pending(c)
    }

    /// Asks for [`Handler::on_timer`](crate::Handler::on_timer) to be called at `at` (or
    /// earlier), in addition to the interval `on_timer` itself returned.
    pub fn timer_at(&mut self, at: Instant) {
        self.timer_at = Some(self.timer_at.map_or(at, |t| t.min(at)));
    }

    /// When [`Handler::on_timer`](crate::Handler::on_timer) runs next as things stand: the
    /// interval it last returned, or an earlier [`Io::timer_at`] request (`None`: neither).
    /// A handler that looks at its own deadlines in `on_timer` and puts the next of them in
    /// what it returns need ask with `timer_at` only for a deadline earlier than this one. A
    /// deadline that keeps moving later (a retransmission timer, moved on by every packet
    /// sent) then costs no wake-up at each place it held: the zone wakes once, where it
    /// stands when that turn comes.
    pub fn timer_planned(&self) -> Option<Instant> {
        match (self.timer_next, self.timer_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Makes the zone loop ([`crate::run_zone`]) return after this iteration, once the
    /// kernel has given back the accepts still armed (a connection accepted meanwhile closes
    /// with the zone: see [`Io::accepting`]).
    pub fn exit(&mut self) {
        self.exit = true;
    }
}

/// A zone's datagram counters since it started ([`Io::dgram_stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DgramStats {
    /// Datagrams sent.
    pub sent: u64,
    /// Sends refused because the zone's queue of sends was full.
    pub queue_full: u64,
    /// Sends the kernel refused (no route, no buffer space, a listener gone).
    pub send_errors: u64,
    /// Datagrams on connected sockets larger than the zone's datagram buffers, dropped.
    pub truncated: u64,
}

/// Where a queued datagram goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DgramTo {
    /// From UDP listener `id` to `peer`, leaving from `from` when given (wildcard listeners).
    Listener {
        id: ListenerId,
        s: crate::send_to::SendTo,
    },
    /// On connected datagram socket `c` (generation `gen`: a send queued for a socket that
    /// closed before it went is dropped, never sent on a successor in the same slot).
    Conn { c: ConnId, gen: u32 },
}

/// A datagram queued by the handler, sent by the driver after the callback batch.
pub(crate) struct DgramOut {
    pub to: DgramTo,
    pub buf: Vec<u8>,
}
