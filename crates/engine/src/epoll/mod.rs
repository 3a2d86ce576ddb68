//! The epoll driver: the same [`Driver`] interface over readiness notification, for kernels
//! or sandboxes where io_uring is refused. Level-triggered; reads go into one zone-wide
//! scratch buffer handed to the handler as a borrowed slice (the same contract as the
//! io_uring buffer ring); writes are attempted at once and wait for `EPOLLOUT` only when the
//! socket is full; files go out with `sendfile(2)`.
//!
//! A connection's handle is its descriptor, so the connection tables are indexed by
//! descriptor and reach as far as the highest one (the process's other descriptors, other
//! zones' connections included, take numbers too); how many connections the zone holds is
//! bounded by counting: at `max_conns` accepted connections the listeners leave the epoll set
//! until one closes, and new connections wait in the kernel's accept queue meanwhile.

mod connect;
mod dgram;
mod listeners;
mod mmsg;
mod set;

use std::io;
use std::os::fd::{AsRawFd, IntoRawFd, RawFd};
use std::time::{Duration, Instant};

use crate::dgram::Datagram;
use crate::driver::Driver;
use crate::handler::Handler;
use crate::io::{Action, AfterFlush, Chunk, ConnId, ConnState, Ctl, Io, ListenerId};
use crate::listener::Listener;
use crate::waker::Waker;
use crate::zone::ZoneConfig;
use listeners::Listeners;
use set::{EpollSet, T_CONN, T_LISTENER, T_MASK, T_WAKE};

/// Interest bits registered for a connection (`EpollDriver::interest`).
const WANT_IN: u8 = 1;
const WANT_OUT: u8 = 2;

/// Reads per readable event before other connections get a turn.
const READ_BUDGET: usize = 16;

/// A zone's epoll back end.
pub struct EpollDriver {
    set: EpollSet,
    io: Io,
    /// The interest bits registered for each connection, indexed like `io.conns`.
    interest: Vec<u8>,
    listeners: Listeners,
    /// Accepted connections open now, and the most the zone holds (`ZoneConfig::max_conns`).
    accepted: u32,
    max_conns: u32,
    waker: Waker,
    events: Vec<libc::epoll_event>,
    rbuf: Vec<u8>,
    /// Datagrams are read into these, several per `recvmmsg` (`ZoneConfig::dgram_buffer_size`
    /// each; none of any size: no datagram sockets on this zone).
    drecv: mmsg::RecvBatch,
    waits: u64,
    /// How long to poll without blocking before parking (`busy_poll_us`).
    busy_poll: Duration,
}

impl EpollDriver {
    /// Creates the epoll instance of one zone.
    pub fn new(cfg: &ZoneConfig, waker: Waker) -> io::Result<Self> {
        let mut d = EpollDriver {
            set: EpollSet::new()?,
            // Indexed by descriptor: grows to the highest one (module docs).
            io: Io::new(1024),
            interest: vec![0; 1024],
            listeners: Listeners::new(),
            accepted: 0,
            max_conns: cfg.max_conns,
            events: vec![libc::epoll_event { events: 0, u64: 0 }; 1024],
            rbuf: vec![0; cfg.recv_buffer_size as usize],
            drecv: match cfg.dgram_buffers {
                0 => mmsg::RecvBatch::new(1, 0),
                // Up to 1 MiB of buffers: 32 datagrams a call, or 16 of 64 KiB (GRO).
                _ => {
                    let size = cfg.dgram_buffer_size as usize;
                    mmsg::RecvBatch::new(((1 << 20) / size.max(1)).clamp(1, 32), size)
                }
            },
            waker,
            waits: 0,
            busy_poll: cfg.busy_poll,
        };
        d.set.ctl(
            libc::EPOLL_CTL_ADD,
            d.waker.raw(),
            libc::EPOLLIN as u32,
            T_WAKE,
        )?;
        d.io.dgram_limit = cfg.max_datagrams_queued;
        d.io.gso_failed = !cfg.gso;
        Ok(d)
    }

    /// Tells the handler how many stream listeners can still accept ([`Io::accepting`]):
    /// closing one on epoll ends its accepts at once.
    fn count_accepts(&mut self) {
        let n = self.listeners.streams_open();
        self.io.set_accepts_open(n);
    }

    fn token(&self, c: ConnId) -> u64 {
        T_CONN | ((self.io.conns[c.index()].gen as u64) << 32) | c.0 as u64
    }

    fn interest(&self, c: ConnId) -> u8 {
        self.interest.get(c.index()).copied().unwrap_or(0)
    }

    fn set_interest(&mut self, c: ConnId, want: u8) {
        if self.interest.len() <= c.index() {
            self.interest.resize(c.index() + 1, 0);
        }
        self.interest[c.index()] = want;
    }

    /// Brings the kernel's interest set in line with what the connection needs.
    fn update_interest(&mut self, c: ConnId) {
        let conn = &self.io.conns[c.index()];
        let mut want = 0;
        if !conn.paused && !conn.eof {
            want |= WANT_IN;
        }
        if conn.in_flight {
            want |= WANT_OUT;
        }
        if want == self.interest(c) {
            return;
        }
        let mut ev = 0u32;
        if want & WANT_IN != 0 {
            ev |= libc::EPOLLIN as u32 | libc::EPOLLRDHUP as u32;
        }
        if want & WANT_OUT != 0 {
            ev |= libc::EPOLLOUT as u32;
        }
        let token = self.token(c);
        if let Err(e) = self.set.ctl(libc::EPOLL_CTL_MOD, c.0 as RawFd, ev, token) {
            // Closed by `flush`, which has the handler to tell.
            self.io.conns[c.index()].close_err = Some(e);
            self.io.actions.push(Action::Close(c));
            return;
        }
        self.set_interest(c, want);
    }

    fn accept<H: Handler>(&mut self, h: &mut H, id: u32) {
        for i in 0..64 {
            if self.accepted >= self.max_conns {
                // Readable with the table already full (not filled by this loop): a
                // connection is waiting. Otherwise a waiting one makes the listener readable
                // again at the next wait (level-triggered).
                if i == 0 {
                    self.listeners.table_full(&self.set, self.max_conns);
                    self.waker.set_full(true);
                }
                return;
            }
            let Some(l) = self.listeners.get(id) else {
                return;
            };
            // SAFETY: sockaddr_storage is plain data; all-zero is a valid value.
            let mut sa: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
            let mut sa_len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            // SAFETY: accept4 writes at most `sa_len` bytes into a live local and updates the
            // length; a non-negative result is a new descriptor that we own from here on
            // (closed in `close_now`).
            let fd = unsafe {
                libc::accept4(
                    l.as_raw_fd(),
                    (&mut sa as *mut libc::sockaddr_storage).cast(),
                    &mut sa_len,
                    libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                )
            };
            if fd < 0 {
                let e = io::Error::last_os_error();
                match e.raw_os_error() {
                    Some(libc::EAGAIN) | Some(libc::EINTR) | Some(libc::ECONNABORTED) => {}
                    Some(libc::EMFILE) | Some(libc::ENFILE) | Some(libc::ENOBUFS)
                    | Some(libc::ENOMEM) => {
                        tracing::warn!("accept: {e}: out of descriptors; raise `ulimit -n` (accepting again shortly)");
                        self.listeners.pause(&self.set);
                    }
                    // The socket no longer listens (shut down for a graceful stop): closing
                    // it also takes it out of the epoll set.
                    Some(libc::EINVAL) => {
                        self.listeners.close(id);
                        self.count_accepts();
                    }
                    _ => tracing::debug!("accept: {e}"),
                }
                return;
            }
            let c = ConnId(fd as u32);
            self.io.conn_mut(c).open();
            self.accepted += 1;
            self.waker.add_accept();
            self.set_interest(c, WANT_IN);
            self.io.conns[c.index()].peer = crate::addr::to_addr(&sa, sa_len as usize);
            if tracing::enabled!(target: crate::locality::LOCALITY_LOG, tracing::Level::DEBUG) {
                crate::locality::log_locality(fd, id, self.io.conns[c.index()].peer);
            }
            let token = self.token(c);
            if let Err(e) = self.set.ctl(
                libc::EPOLL_CTL_ADD,
                fd,
                libc::EPOLLIN as u32 | libc::EPOLLRDHUP as u32,
                token,
            ) {
                tracing::warn!("epoll_ctl add: {e}");
                // SAFETY: closes the descriptor accept4 just gave us; nothing else has it.
                unsafe { libc::close(fd) };
                self.io.conns[c.index()].state = ConnState::Free;
                self.accepted -= 1;
                continue;
            }
            h.on_accept(&mut self.io, c, ListenerId(id));
        }
    }
    /// Datagrams waiting on UDP listener `id`, each to the handler: taken several per
    /// `recvmmsg`, up to `DGRAM_BUDGET` before other sockets get a turn.
    fn datagrams<H: Handler>(&mut self, h: &mut H, id: u32) {
        let mut taken = 0;
        while taken < dgram::DGRAM_BUDGET {
            let Some(fd) = self.listeners.udp(id).map(AsRawFd::as_raw_fd) else {
                return;
            };
            let n = match self.drecv.recv(fd) {
                Ok(0) => return,
                Ok(n) => n,
                Err(e) => {
                    tracing::warn!("udp listener {id}: receive failed: {e}");
                    return;
                }
            };
            taken += n;
            for i in 0..n {
                let Some((g, data)) = self.drecv.get(i) else {
                    continue; // a sender that is not IPv4/IPv6
                };
                self.waker.add_in(g.len as u64);
                let dg = Datagram {
                    peer: g.peer,
                    local: g.control.local,
                    data,
                    truncated: g.truncated,
                    segment: g.control.segment,
                    ecn: g.control.ecn,
                };
                h.on_datagram(&mut self.io, ListenerId(id), dg);
            }
            if n < self.drecv.len() {
                return; // the socket is drained
            }
        }
    }

    /// Datagrams waiting on connected datagram socket `c`, each to the handler as `on_data`.
    fn dgram_readable<H: Handler>(&mut self, h: &mut H, c: ConnId) {
        for _ in 0..dgram::DGRAM_BUDGET {
            let conn = &self.io.conns[c.index()];
            if conn.state != ConnState::Open || conn.paused {
                return;
            }
            let buf = self.drecv.first();
            match dgram::recv_conn(c.0 as RawFd, buf) {
                Ok(Some(n)) if n > buf.len() => self.io.dgram_stats.truncated += 1,
                Ok(Some(0)) => {} // an empty datagram: nothing to pass on, and no end of stream
                Ok(Some(n)) => {
                    self.waker.add_in(n as u64);
                    h.on_data(&mut self.io, c, &self.drecv.first()[..n]);
                }
                Ok(None) => return,
                Err(e) => return self.close_now(c, Some(e), h),
            }
        }
    }

    fn readable<H: Handler>(&mut self, h: &mut H, c: ConnId) {
        if self.io.conns[c.index()].dgram {
            return self.dgram_readable(h, c);
        }
        for _ in 0..READ_BUDGET {
            let conn = &self.io.conns[c.index()];
            if conn.state != ConnState::Open || conn.paused || conn.eof {
                return;
            }
            // SAFETY: reads at most rbuf.len() bytes into our own live buffer.
            let n =
                unsafe { libc::read(c.0 as RawFd, self.rbuf.as_mut_ptr().cast(), self.rbuf.len()) };
            if n > 0 {
                let n = n as usize;
                self.waker.add_in(n as u64);
                h.on_data(&mut self.io, c, &self.rbuf[..n]);
                if n < self.rbuf.len() {
                    return;
                }
            } else if n == 0 {
                self.io.conns[c.index()].eof = true;
                self.update_interest(c);
                h.on_eof(&mut self.io, c);
                return;
            } else {
                let e = io::Error::last_os_error();
                match e.raw_os_error() {
                    Some(libc::EAGAIN) => return,
                    Some(libc::EINTR) => continue,
                    _ => return self.close_now(c, Some(e), h),
                }
            }
        }
    }

    /// Writes as much queued output as the socket takes.
    fn write_out<H: Handler>(&mut self, h: &mut H, c: ConnId) {
        loop {
            let conn = &mut self.io.conns[c.index()];
            if conn.state != ConnState::Open {
                return;
            }
            conn.skip_empty_front(&mut self.io.spares);
            if conn.ctl.is_some() && conn.ctl_due() {
                match self.write_control(c) {
                    Ok(true) => continue,
                    Ok(false) => return, // waiting for EPOLLOUT
                    Err(e) => return self.close_now(c, Some(e), h),
                }
            }
            let r = match conn.out.front() {
                None => break,
                Some(Chunk::Bytes { buf, pos }) => {
                    let rest = &buf[*pos..];
                    // A head followed by a file: MSG_MORE coalesces it with the file's bytes.
                    // The last bytes before a close to a peer that sends nothing more:
                    // MSG_MORE holds the tail segment back and the close's FIN rides on it
                    // (one segment, not two; see `Io::peer_done`).
                    let more = matches!(conn.out.get(1), Some(Chunk::File { .. }))
                        || (conn.out.len() == 1
                            && matches!(conn.after_flush, AfterFlush::Close)
                            && (conn.peer_done || conn.eof));
                    let flags = libc::MSG_NOSIGNAL | if more { libc::MSG_MORE } else { 0 };
                    // SAFETY: writes from a live slice of the queued vector.
                    unsafe { libc::send(c.0 as RawFd, rest.as_ptr().cast(), rest.len(), flags) }
                }
                Some(Chunk::File { file, off, end }) => {
                    let mut o = *off as libc::off_t;
                    let len = (end - off).min(1 << 30) as usize;
                    // SAFETY: sendfile reads/updates one live off_t; both descriptors are open.
                    unsafe { libc::sendfile(c.0 as RawFd, file.as_raw_fd(), &mut o, len) }
                }
            };
            if r > 0 {
                conn.sent += r as u64;
                self.waker.add_out(r as u64);
                if conn.advance(r as u64) {
                    conn.pop_front(&mut self.io.spares);
                }
                continue;
            }
            let e = if r == 0 {
                io::Error::new(io::ErrorKind::UnexpectedEof, "file shrank while being sent")
            } else {
                io::Error::last_os_error()
            };
            match e.raw_os_error() {
                Some(libc::EAGAIN) => {
                    conn.in_flight = true; // waiting for EPOLLOUT
                    self.update_interest(c);
                    return;
                }
                Some(libc::EINTR) => continue,
                _ => return self.close_now(c, Some(e), h),
            }
        }
        if self.interest(c) & WANT_OUT != 0 {
            self.update_interest(c);
        }
        let conn = &mut self.io.conns[c.index()];
        match std::mem::replace(&mut conn.after_flush, AfterFlush::Nothing) {
            AfterFlush::Nothing => {}
            AfterFlush::Close => return self.close_now(c, None, h),
            AfterFlush::ShutdownWrite => {
                // SAFETY: shutdown on a descriptor we own.
                unsafe { libc::shutdown(c.0 as RawFd, libc::SHUT_WR) };
            }
        }
        let conn = &mut self.io.conns[c.index()];
        if conn.notify_flushed {
            conn.notify_flushed = false;
            h.on_flushed(&mut self.io, c);
        }
    }
    /// Sets the socket option, or sends the TLS record, that is `c`'s first control
    /// operation, whose turn has come (a record may go in part: the rest stays first).
    /// `Ok(false)`: the socket is full, and the rest waits for `EPOLLOUT`. The record's bytes
    /// do not count in `sent`, which orders the operations.
    #[cold]
    fn write_control(&mut self, c: ConnId) -> io::Result<bool> {
        let conn = &mut self.io.conns[c.index()];
        let Some(op) = conn.ctl_front() else {
            return Ok(true);
        };
        match op {
            Ctl::SockOpt(o) => {
                // SAFETY: the option value is a live vector passed with its length; the
                // kernel copies what it reads. The descriptor is the connection's own.
                let r = unsafe {
                    libc::setsockopt(
                        c.0 as RawFd,
                        o.level,
                        o.name,
                        o.value.as_ptr().cast(),
                        o.value.len() as libc::socklen_t,
                    )
                };
                if r != 0 {
                    return Err(o.error(io::Error::last_os_error()));
                }
                conn.ctl_pop();
            }
            Ctl::TlsRecord(r) => {
                let n = r.send(c.0 as RawFd);
                if n < 0 {
                    let e = io::Error::last_os_error();
                    return match e.raw_os_error() {
                        Some(libc::EINTR) => Ok(true),
                        Some(libc::EAGAIN) => {
                            conn.in_flight = true; // waiting for EPOLLOUT
                            self.update_interest(c);
                            Ok(false)
                        }
                        _ => Err(e),
                    };
                }
                r.pos += n as usize;
                let done = r.pos == r.buf.len();
                self.waker.add_out(n as u64);
                if done {
                    conn.ctl_pop();
                }
            }
        }
        Ok(true)
    }

    fn close_now<H: Handler>(&mut self, c: ConnId, err: Option<io::Error>, h: &mut H) {
        let conn = &mut self.io.conns[c.index()];
        if !matches!(conn.state, ConnState::Open | ConnState::Connecting) {
            return;
        }
        match conn.outbound.take() {
            Some(o) => {
                if let Some(fd) = o.fd {
                    let _ = fd.into_raw_fd(); // the same descriptor as the handle, closed below
                }
            }
            None => self.accepted -= 1,
        }
        conn.state = ConnState::Free;
        conn.in_flight = false;
        conn.out.clear();
        let err = err.or_else(|| conn.close_err.take());
        // SAFETY: closes the connection's descriptor, which we own; close also removes it
        // from the epoll set.
        unsafe { libc::close(c.0 as RawFd) };
        self.listeners
            .closed(&self.set, self.accepted, self.max_conns);
        self.waker.set_full(self.listeners.is_full());
        h.on_closed(&mut self.io, c, err);
    }

    /// One `epoll_wait` into `events`.
    fn epoll_wait(&mut self, ms: i32) -> libc::c_int {
        self.waits += 1;
        self.set.wait(&mut self.events, ms)
    }

    /// Waits for events: with a `busy_poll` budget, non-blocking `epoll_wait` calls until
    /// something is ready or the budget is spent; then parks (publishing it, so a control
    /// message comes with an eventfd wake-up) until an event, the timeout or a wake-up.
    fn wait(&mut self, timeout: Option<Duration>) -> libc::c_int {
        let mut timeout = timeout;
        if !self.busy_poll.is_zero() && timeout != Some(Duration::ZERO) {
            let start = Instant::now();
            let budget = timeout.map_or(self.busy_poll, |t| t.min(self.busy_poll));
            loop {
                let n = self.epoll_wait(0);
                if n != 0 || self.waker.is_pending() {
                    return n;
                }
                let spent = start.elapsed();
                if spent >= budget {
                    timeout = timeout.map(|t| t.saturating_sub(spent));
                    break;
                }
                std::hint::spin_loop();
            }
        }
        let (pending, t0) = self.waker.park_begin();
        let ms = if pending {
            0
        } else {
            match timeout {
                None => -1,
                Some(d) => d.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32,
            }
        };
        let n = self.epoll_wait(ms);
        self.waker.park_end(t0);
        n
    }

    fn flush<H: Handler>(&mut self, h: &mut H) {
        loop {
            // Datagrams first: one queued before its socket's close goes out before it.
            let listeners = &self.listeners;
            let failed =
                dgram::send_all(&mut self.io, |id| listeners.udp(id).map(AsRawFd::as_raw_fd));
            for (c, e) in failed {
                self.close_now(c, Some(e), h);
            }
            let actions = std::mem::take(&mut self.io.actions);
            for a in &actions {
                match *a {
                    Action::Close(c) => self.close_now(c, None, h),
                    Action::Connect(c) => self.start_connect(h, c),
                    Action::PauseRecv(c) | Action::ResumeRecv(c) => {
                        if self.io.conns[c.index()].state == ConnState::Open {
                            self.update_interest(c);
                        }
                    }
                }
            }
            for l in std::mem::take(&mut self.io.new_listeners) {
                if let Err(e) = Driver::add_listener(self, l) {
                    tracing::error!("cannot add a listener: {e}");
                    self.listeners.add_none(); // keeps the ids the handler was given
                    self.io.listener_count = self.listeners.len() as u32;
                }
            }
            let closed = !self.io.closed_listeners.is_empty() || self.io.stop_listening;
            for id in std::mem::take(&mut self.io.closed_listeners) {
                self.listeners.close(id.0);
            }
            if self.io.stop_listening {
                self.io.stop_listening = false;
                self.listeners.close_all();
            }
            if closed {
                self.count_accepts();
            }
            if self.io.dirty.is_empty()
                && self.io.actions.is_empty()
                && self.io.dgram_out.is_empty()
            {
                break;
            }
            while let Some(c) = self.io.dirty.pop() {
                self.io.conns[c.index()].dirty = false;
                if !self.io.conns[c.index()].in_flight {
                    self.write_out(h, c);
                }
            }
        }
    }
}

impl Driver for EpollDriver {
    fn add_listener(&mut self, listener: Listener) -> io::Result<ListenerId> {
        if listener.is_udp() && self.drecv.first().is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "a UDP listener on a zone without datagram buffers (ZoneConfig::dgram_buffers)",
            ));
        }
        let id = self.listeners.add(&self.set, listener)?;
        self.io.listener_count = self.listeners.len() as u32;
        self.count_accepts();
        Ok(ListenerId(id))
    }

    fn poll<H: Handler>(&mut self, h: &mut H, timeout: Option<Duration>) -> io::Result<()> {
        self.flush(h);
        let mut timeout = timeout;
        if let Some(t) = self.listeners.paused_until() {
            let now = Instant::now();
            if t <= now {
                self.listeners.resume(&self.set);
            } else {
                timeout = Some(timeout.map_or(t - now, |x| x.min(t - now)));
            }
        }
        let n = self.wait(timeout);
        self.waker.set_waits(self.waits);
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                return Ok(());
            }
            return Err(io::Error::new(e.kind(), format!("epoll_wait: {e}")));
        }
        self.io.now = Instant::now();
        for i in 0..n as usize {
            let ev = self.events[i];
            let (token, bits) = (ev.u64, ev.events);
            match token & T_MASK {
                T_LISTENER => {
                    let id = (token & 0xffff_ffff) as u32;
                    if self.listeners.udp(id).is_some() {
                        self.datagrams(h, id);
                    } else {
                        self.accept(h, id);
                    }
                }
                T_WAKE => {
                    let mut v = 0u64;
                    // SAFETY: reads 8 bytes into a live u64 from our eventfd.
                    unsafe { libc::read(self.waker.raw(), (&mut v as *mut u64).cast(), 8) };
                    // Only ends the wait: the pending flag is checked after the batch.
                }
                _ => {
                    let c = ConnId(token as u32);
                    let gen = ((token >> 32) as u32) & crate::slot::GEN_MASK;
                    let Some(conn) = self.io.conns.get(c.index()) else {
                        continue;
                    };
                    if conn.gen != gen {
                        continue; // an event for a connection closed earlier in this batch
                    }
                    if conn.state == ConnState::Connecting {
                        self.connected(h, c);
                        continue;
                    }
                    if conn.state != ConnState::Open {
                        continue;
                    }
                    if bits & (libc::EPOLLOUT as u32 | libc::EPOLLERR as u32) != 0 && conn.in_flight
                    {
                        self.io.conns[c.index()].in_flight = false;
                        self.write_out(h, c);
                    }
                    if bits
                        & (libc::EPOLLIN as u32
                            | libc::EPOLLRDHUP as u32
                            | libc::EPOLLHUP as u32
                            | libc::EPOLLERR as u32)
                        != 0
                    {
                        self.readable(h, c);
                    }
                }
            }
        }
        if self.waker.take_pending() {
            h.on_wake(&mut self.io);
        }
        h.on_batch_end(&mut self.io);
        self.flush(h);
        Ok(())
    }

    fn io(&mut self) -> &mut Io {
        &mut self.io
    }

    fn name(&self) -> &'static str {
        "epoll"
    }

    fn waits(&self) -> u64 {
        self.waits
    }
}

impl Drop for EpollDriver {
    fn drop(&mut self) {
        for (i, conn) in self.io.conns.iter().enumerate() {
            if matches!(conn.state, ConnState::Open | ConnState::Connecting)
                && conn.outbound.as_ref().is_none_or(|o| o.fd.is_none())
            {
                // SAFETY: closes descriptors this driver accepted and still owns.
                unsafe { libc::close(i as RawFd) };
            }
        }
    }
}
