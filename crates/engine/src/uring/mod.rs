//! The io_uring driver: multishot accept into direct descriptors, multishot receive into a
//! provided-buffer ring, sends that resume after short writes, file bodies spliced through a
//! pipe, and cancellation that closes a slot only once nothing in flight refers to it.
//!
//! One file per operation (`accept.rs`, `recv.rs`, ...): each builds its submission and handles
//! its completion, as functions over the driver's state (`state.rs`) or, where the operation
//! owns its buffer, as a type of its own (`wake::WakeOp`, `peer::PeerQueries`). This file runs
//! the loop: it carries out what the handler queued, waits, and routes completions by their
//! `userdata` tags. Operations call only operations below them (`close.rs` is called by all
//! and calls none); what follows a close (a free accept slot, an outbound slot back, the
//! handler's `on_closed`) is sequenced here.

mod accept;
mod bufring;
mod busy;
mod close;
mod conn;
mod connect;
mod ctl;
mod dgram_recv;
mod dgram_send;
mod dgram_state;
mod enter;
mod file_read;
mod msg;
mod pagecache;
mod peer;
mod pipes;
mod poll;
pub mod probe;
mod recv;
mod send;
mod sendfile;
mod sendmsg;
mod sockopt;
mod splice;
mod sqe;
mod state;
mod userdata;
mod wake;

pub use dgram_recv::OVERHEAD as DGRAM_OVERHEAD;
pub use state::UringDriver;

use std::io;
use std::time::{Duration, Instant};

use io_uring::{cqueue, IoUring};

use crate::driver::Driver;
use crate::handler::Handler;
use crate::io::{Action, ConnId, ConnState, Io, ListenerId};
use crate::listener::Listener as ListenSock;
use crate::waker::Waker;
use crate::zone::{SqPoll, ZoneConfig};
use bufring::{BufRing, BGID, BGID_DGRAM};
use pipes::PipePool;
use state::Listener;
use userdata::{unpack, Kind};

/// Most completions an adaptive batch waits for.
const MAX_BATCH_WAIT: u32 = 64;
/// Completions in the last wait from which the next one batches.
const BATCH_FROM: u32 = 8;
/// Most waits the batching gate stays shut after batches that did not fill.
const MAX_BATCH_BACKOFF: u64 = 64;

impl UringDriver {
    /// Sets up the ring, the direct-descriptor table and the receive buffers of one zone.
    pub fn new(cfg: &ZoneConfig, waker: Waker) -> io::Result<Self> {
        let ring = match &cfg.sqpoll {
            None => build_ring(cfg.ring_entries)?,
            Some(sq) => build_sqpoll_ring(cfg.ring_entries, sq)?,
        };
        // Slots [0, max_conns) for accepts, then max_outbound for outbound connections.
        ring.submitter()
            .register_files_sparse(cfg.max_conns + cfg.max_outbound)
            .map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!(
                        "register {} direct descriptors: {e} (lower max_conns or raise `ulimit -n`)",
                        cfg.max_conns + cfg.max_outbound
                    ),
                )
            })?;
        let outbound_slots = match cfg.max_outbound {
            0 => Vec::new(),
            n => match connect::limit_alloc_range(&ring, cfg.max_conns) {
                Ok(()) => (cfg.max_conns..cfg.max_conns + n).rev().collect(),
                Err(e) => {
                    tracing::warn!("io_uring file allocation range: {e}; outbound connections unavailable on this zone");
                    Vec::new()
                }
            },
        };
        let bufs = BufRing::new(&ring, BGID, cfg.recv_buffers, cfg.recv_buffer_size, true)?;
        let dbufs = match cfg.dgram_buffers {
            0 => None,
            n => Some(
                BufRing::new(&ring, BGID_DGRAM, n, cfg.dgram_buffer_size, false)
                    .map_err(|e| io::Error::new(e.kind(), format!("datagram buffers: {e}")))?,
            ),
        };
        let enter = enter::Enter::new(&ring);
        let mut d = UringDriver {
            ring,
            bufs,
            io: Io::new(cfg.max_conns as usize),
            uconns: std::iter::repeat_with(conn::UringConn::default)
                .take((cfg.max_conns + cfg.max_outbound) as usize)
                .collect(),
            listeners: Vec::new(),
            wake: wake::WakeOp::new(waker),
            cqes: Vec::with_capacity(1024),
            rearm_recv: Vec::new(),
            accept_backoff: false,
            exiting: false,
            accepted: 0,
            max_conns: cfg.max_conns,
            at_limit: false,
            pipes: PipePool::default(),
            waits: 0,
            enter,
            sqpoll: cfg.sqpoll.clone(),
            peer_addrs: cfg.peer_addrs,
            peers: peer::PeerQueries::default(),
            busy_poll: cfg.busy_poll,
            batch_wait_us: cfg.batch_wait.as_micros().min(u32::MAX as u128) as u32,
            batch_when_pending: cfg.batch_when_pending,
            last_batch: 0,
            last_inputs: 0,
            armed_recvs: 0,
            batch_want: 1,
            batch_skip_until: 0,
            batch_backoff: 1,
            busy: busy::Busy::new(std::time::Instant::now()),
            recv_limit: recv::RECV_ARM_LIMIT,
            sendfile_ok: true,
            dbufs,
            dgram_msgs: dgram_state::Templates::new(),
            dgram_sends: dgram_state::Sends::default(),
            rearm_dgram: Vec::new(),
        };
        d.io.slots = crate::io::Slots::Reserved(outbound_slots);
        d.io.sockopts = sockopt::supported();
        d.io.dgram_limit = cfg.max_datagrams_queued;
        d.io.gso_failed = !cfg.gso;
        d.wake
            .waker_set_ring(std::os::fd::AsRawFd::as_raw_fd(&d.ring));
        d.arm_wake();
        Ok(d)
    }

    /// Carries out queued actions and sends, until nothing new is queued.
    fn flush<H: Handler>(&mut self, h: &mut H) {
        loop {
            // Datagrams first: one queued before its socket's close goes out before it.
            dgram_send::submit_all(self);
            let mut actions = std::mem::take(&mut self.io.actions);
            for a in actions.drain(..) {
                match a {
                    Action::Close(c) => close::begin(self, c, None),
                    Action::PauseRecv(c) => recv::pause(self, c),
                    Action::ResumeRecv(c) => recv::resume(self, c),
                    Action::Connect(c) => connect::start(self, c),
                }
            }
            if self.io.actions.is_empty() {
                self.io.actions = actions;
            }
            for l in std::mem::take(&mut self.io.new_listeners) {
                if let Err(e) = Driver::add_listener(self, l) {
                    tracing::error!("cannot add a listener: {e}");
                }
            }
            for id in std::mem::take(&mut self.io.closed_listeners) {
                self.cancel_listener(id.0);
            }
            if self.io.stop_listening {
                self.io.stop_listening = false;
                for id in 0..self.listeners.len() as u32 {
                    self.cancel_listener(id);
                }
            }
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

    /// Stops accepting (or receiving datagrams) on listener `id`.
    fn cancel_listener(&mut self, id: u32) {
        match self.listeners.get(id as usize) {
            Some(l) if l.udp => dgram_recv::cancel_listener(self, id),
            Some(_) => accept::cancel(self, id),
            None => {}
        }
    }

    fn flush_conn<H: Handler>(&mut self, h: &mut H, c: ConnId) {
        let conn = &mut self.io.conns[c.index()];
        conn.dirty = false;
        let u = &mut self.uconns[c.index()];
        if conn.state != ConnState::Open || conn.in_flight || !conn::flush_has_work(conn, u) {
            return;
        }
        conn.skip_empty_front(&mut self.io.spares);
        if u.sock_fd.is_some() && !matches!(conn.out.front(), Some(crate::io::Chunk::File { .. })) {
            // Held only while a file is being sent, whichever way it went (`sendfile.rs`):
            // idle keep-alive connections must not fill the descriptor table the zone opens
            // files in.
            u.sock_fd = None;
        }
        if conn.ctl.is_some() {
            return ctl::flush(self, c);
        }
        if !conn.out.is_empty() {
            self.start_output(c);
            return;
        }
        match std::mem::replace(&mut conn.after_flush, crate::io::AfterFlush::Nothing) {
            crate::io::AfterFlush::Nothing => {}
            crate::io::AfterFlush::Close => return close::begin(self, c, None),
            crate::io::AfterFlush::ShutdownWrite => close::shutdown(self, c),
        }
        let conn = &mut self.io.conns[c.index()];
        if conn.notify_flushed {
            conn.notify_flushed = false;
            h.on_flushed(&mut self.io, c);
        }
    }

    /// Starts writing the front output chunk: bytes (with file bytes from the page cache
    /// read in behind them, `file_read.rs`) by send, file bytes not cached by splice.
    pub(super) fn start_output(&mut self, c: ConnId) {
        if self.io.conns[c.index()].out.is_empty() {
            return;
        }
        match file_read::read_ahead(self, c) {
            file_read::ReadAhead::Send => send::submit(self, c),
            file_read::ReadAhead::Splice => splice::submit(self, c),
            file_read::ReadAhead::Sendfile => sendfile::send_front(self, c),
            file_read::ReadAhead::Closed => {}
        }
    }

    fn dispatch<H: Handler>(&mut self, h: &mut H, ud: u64, res: i32, flags: u32) {
        let Some((kind, gen, idx)) = unpack(ud) else {
            tracing::warn!("completion with unknown user_data {ud:#x}");
            return;
        };
        match kind {
            Kind::Accept => accept::complete(self, h, idx, res, flags),
            Kind::Recv => recv::complete(self, h, ConnId(idx), gen, res, flags),
            Kind::Send => send::complete(self, ConnId(idx), gen, res),
            Kind::SpliceIn => splice::complete_in(self, ConnId(idx), gen, res),
            Kind::SpliceOut => splice::complete_out(self, ConnId(idx), gen, res),
            Kind::Cancel => close::complete_cancel(self, ConnId(idx), gen, res),
            Kind::Close => {
                if let Some(err) = close::complete(self, ConnId(idx), gen, res) {
                    self.closed(h, ConnId(idx), err);
                }
            }
            Kind::Shutdown => close::complete_shutdown(self, ConnId(idx), gen),
            Kind::CancelQuiet => {}
            Kind::CancelAccept => accept::complete_cancel(self, idx),
            Kind::Wake => self.arm_wake(),
            Kind::Msg => {} // a control wake-up: `check_wake` follows the batch
            Kind::FdInstall => sendfile::complete_fd_install(self, ConnId(idx), gen, res),
            Kind::PollOut => poll::complete(self, ConnId(idx), gen, res),
            Kind::Connect => connect::complete(self, h, ConnId(idx), gen, res),
            Kind::PeerName => accept::complete_peer(self, h, ConnId(idx), gen, res),
            Kind::SockOpt => sockopt::complete(self, ConnId(idx), gen, res),
            Kind::SendMsg => sendmsg::complete(self, ConnId(idx), gen, res),
            Kind::DgramRecv => dgram_recv::complete_listener(self, h, idx, res, flags),
            Kind::RecvDgram => dgram_recv::complete_conn(self, h, ConnId(idx), gen, res, flags),
            Kind::DgramSend => dgram_send::complete(self, idx, res),
            Kind::CancelDgram => {}
        }
    }

    /// Slot `c` is closed (`close::complete`): an accepted connection's slot is free for the
    /// next accept, an outbound one goes back to the reserved range, and the handler hears of
    /// it.
    fn closed<H: Handler>(&mut self, h: &mut H, c: ConnId, err: Option<io::Error>) {
        if c.0 < self.max_conns {
            accept::slot_freed(self);
        }
        connect::release(self, c);
        h.on_closed(&mut self.io, c, err);
    }

    /// Arms the eventfd read (`wake.rs`); again at each of its completions.
    fn arm_wake(&mut self) {
        let e = self.wake.entry();
        // SAFETY: the read's target is the boxed u64 of `self.wake` and its descriptor the
        // waker's eventfd, both owned by the driver, which outlives the ring's operations (the
        // ring is dropped first); one read is armed at a time.
        unsafe { self.push(&e) };
    }

    /// Once per loop iteration: one atomic load unless a control message is pending.
    #[inline]
    fn check_wake<H: Handler>(&mut self, h: &mut H) {
        if self.wake.waker.take_pending() {
            h.on_wake(&mut self.io);
        }
    }
}

impl UringDriver {
    /// SQPOLL: the kernel thread takes submissions; a system call is made only to wake it when
    /// it sleeps, or to sleep when there is nothing to do after spinning for `spin`.
    fn sqpoll_wait(&mut self, spin: Duration, timeout: Option<Duration>) -> io::Result<()> {
        if self.ring.submission().need_wakeup() {
            self.waits += 1;
            self.ring.submit()?;
        }
        let start = std::time::Instant::now();
        let limit = timeout.map_or(spin, |t| t.min(spin));
        loop {
            if !self.ring.completion().is_empty() {
                return Ok(());
            }
            if start.elapsed() >= limit {
                break;
            }
            std::hint::spin_loop();
        }
        if timeout.is_some_and(|t| start.elapsed() >= t) {
            // A timer is due: the loop runs it now, with no system call.
            return Ok(());
        }
        self.waits += 1;
        let (pending, t0) = self.wake.waker.park_begin();
        let timeout = if pending {
            Some(Duration::ZERO)
        } else {
            timeout
        };
        let r = match timeout {
            Some(t) => {
                let ts = io_uring::types::Timespec::from(t);
                let args = io_uring::types::SubmitArgs::new().timespec(&ts);
                self.ring.submitter().submit_with_args(1, &args).map(drop)
            }
            None => self.ring.submit_and_wait(1).map(drop),
        };
        self.wake.waker.park_end(t0);
        r
    }

    /// Without SQPOLL: submits, then (with a `busy_poll` budget) spins on the completion
    /// queue, and finally parks in `io_uring_enter` until a completion, the timeout or a
    /// control wake-up.
    fn enter_wait(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        let to_submit = self.ring.submission().len() as u32;
        let mut timeout = timeout;
        if !self.busy_poll.is_zero() && timeout != Some(Duration::ZERO) {
            // Submit and run deferred completions without waiting.
            self.waits += 1;
            self.enter.submit_and_wait_n(to_submit, 0, None)?;
            if !self.ring.completion().is_empty() {
                return Ok(());
            }
            let start = std::time::Instant::now();
            let budget = timeout.map_or(self.busy_poll, |t| t.min(self.busy_poll));
            // Spinning is waiting: it is taken off the busy share, so that a zone which
            // spins through idle gaps is not taken for a saturated one.
            loop {
                // With DEFER_TASKRUN the kernel holds completions until we enter; it raises
                // IORING_SQ_TASKRUN when it has some.
                if self.ring.submission().taskrun() {
                    self.busy.spun(start.elapsed());
                    self.waits += 1;
                    return self.enter.submit_and_wait_n(0, 0, None);
                }
                if !self.ring.completion().is_empty() || self.wake.waker.is_pending() {
                    self.busy.spun(start.elapsed());
                    return Ok(());
                }
                let spent = start.elapsed();
                if spent >= budget {
                    self.busy.spun(spent);
                    timeout = timeout.map(|t| t.saturating_sub(spent));
                    break;
                }
                std::hint::spin_loop();
            }
            return self.park(0, timeout);
        }
        self.park(to_submit, timeout)
    }

    /// Publishes `parked`, blocks in `io_uring_enter`, and counts the time parked.
    fn park(&mut self, to_submit: u32, timeout: Option<Duration>) -> io::Result<()> {
        self.waits += 1;
        let (pending, t0) = self.wake.waker.park_begin();
        let timeout = if pending {
            Some(Duration::ZERO)
        } else {
            timeout
        };
        // Batch only near saturation: the last wait brought at least four receives with data
        // and more completions are already waiting (IORING_SQ_TASKRUN: the kernel holds
        // deferred completions for us; only with `batch_when_pending`, otherwise waiting
        // work is taken at once), or the zone's thread was on the CPU for most of its
        // last measuring window (2 ms, busy-poll spinning not counted) and the last wait
        // brought more than two completions (one request and the send of the previous
        // response are two). The first gate counts arrivals, not completions: a short
        // connection brings six (accept, receive, send, cancel, the cancelled receive,
        // close), and counting them all opened the gate at half load, where every batch
        // ended on the kernel's min-wait timer (a timer interrupt, a VM exit on a virtual
        // machine), which cost short connections more CPU than batching saved. A lightly loaded
        // zone must not wait for a batch: that is pure latency. Waiting parks the zone, so a
        // batch that does not fill lowers the busy share and closes the second gate by
        // itself; and after each batch that does not fill, the gate stays shut for twice as
        // many waits as after the last one (up to 64; a batch that fills resets that).
        // A timer due sooner than the batch bound must not wait for it: the kernel's
        // min-wait timer would hold the wait past the timeout.
        let timer_soon =
            timeout.is_some_and(|t| t < Duration::from_micros(u64::from(self.batch_wait_us)));
        let backing_off = self.waits < self.batch_skip_until;
        let work_waiting = self.ring.submission().taskrun();
        // Without `batch_when_pending`, waiting work is taken at once: the zone never sleeps
        // for a batch it would not have slept for.
        let take_now = work_waiting && !self.batch_when_pending;
        let want = if self.batch_wait_us == 0 || pending || timer_soon || backing_off || take_now {
            1
        } else if work_waiting && self.last_inputs >= BATCH_FROM / 2 {
            self.last_batch.min(MAX_BATCH_WAIT)
        } else if self.busy.near_saturation() && self.last_batch > 2 {
            self.last_batch.clamp(BATCH_FROM, MAX_BATCH_WAIT)
        } else {
            1
        };
        // Never more than half the connections that can bring data: with ten connections in
        // a closed loop, a wait for eight ended on the timer nearly every time, and batching
        // then cost more CPU per message than it saved.
        let want = match want.min(self.armed_recvs / 2) {
            0..=2 => 1,
            w => w,
        };
        self.batch_want = want;
        let mut r = if want > 1 {
            self.enter
                .submit_and_wait_batch(to_submit, want, self.batch_wait_us, timeout)
        } else {
            self.enter.submit_and_wait(to_submit, timeout)
        };
        if want > 1
            && r.as_ref()
                .is_err_and(|e| e.raw_os_error() == Some(libc::EINVAL))
        {
            // A kernel before 6.12 refuses min_wait_usec: batch no more. Whatever this call
            // did not submit goes with the plain wait.
            tracing::info!("io_uring min_wait is not supported here; completion batching off");
            self.batch_wait_us = 0;
            let to_submit = self.ring.submission().len() as u32;
            r = self.enter.submit_and_wait(to_submit, timeout);
        }
        self.wake.waker.park_end(t0);
        r
    }
}

impl Driver for UringDriver {
    fn add_listener(&mut self, listener: ListenSock) -> io::Result<ListenerId> {
        let id = self.listeners.len() as u32;
        let v6 = listener.local_addr().is_ok_and(|a| a.is_ipv6());
        let udp = listener.is_udp();
        if udp && self.dbufs.is_none() {
            // The id is taken all the same: the handler was given it.
            self.listeners.push(Listener {
                v6,
                udp,
                sock: None,
                armed: false,
                multishot: false,
                closing: true,
                cancelling: false,
                sweeping: false,
                sends: 0,
            });
            self.io.listener_count = self.listeners.len() as u32;
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "a UDP listener on a zone without datagram buffers (ZoneConfig::dgram_buffers)",
            ));
        }
        self.listeners.push(Listener {
            v6,
            udp,
            sock: Some(listener),
            armed: false,
            multishot: false,
            closing: false,
            cancelling: false,
            sweeping: false,
            sends: 0,
        });
        self.io.listener_count = self.listeners.len() as u32;
        if udp {
            dgram_recv::arm_listener(self, id);
        } else {
            self.io.accepts_open += 1;
            accept::arm(self, id);
        }
        Ok(ListenerId(id))
    }

    fn quiesce<H: Handler>(&mut self, h: &mut H, limit: Duration) -> io::Result<()> {
        let deadline = Instant::now() + limit;
        self.exiting = true;
        for id in 0..self.listeners.len() as u32 {
            if !self.listeners[id as usize].udp {
                accept::cancel(self, id);
            }
        }
        // An accept's last completion comes once the kernel has taken its waiter off the
        // socket (`accept::complete_cancel` then lets the socket go).
        while self.listeners.iter().any(|l| !l.udp && l.sock.is_some()) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                tracing::warn!("zone exit: an accept was not given back within {limit:?}");
                break;
            }
            self.poll(h, Some(left.min(Duration::from_millis(10))))?;
        }
        Ok(())
    }

    fn poll<H: Handler>(&mut self, h: &mut H, timeout: Option<Duration>) -> io::Result<()> {
        self.flush(h);
        if self.accept_backoff {
            self.accept_backoff = false;
            for id in 0..self.listeners.len() as u32 {
                accept::arm(self, id);
            }
        }
        for c in std::mem::take(&mut self.rearm_recv) {
            recv::arm(self, c);
        }
        for id in std::mem::take(&mut self.rearm_dgram) {
            dgram_recv::arm_listener(self, id);
        }
        let r = if let Some(sq) = &self.sqpoll {
            let spin = sq.spin;
            self.sqpoll_wait(spin, timeout)
        } else {
            self.enter_wait(timeout)
        };
        self.wake.waker.set_waits(self.waits);
        if let Err(e) = r {
            match e.raw_os_error() {
                Some(libc::ETIME) | Some(libc::EINTR) | Some(libc::EBUSY) => {}
                _ => return Err(io::Error::new(e.kind(), format!("io_uring_enter: {e}"))),
            }
        }
        self.io.now = std::time::Instant::now();
        // Only the batching gate reads the busy share, and closing a window costs a system
        // call: none with SQPOLL (whose steady state makes none) or with batching off.
        if self.sqpoll.is_none() && self.batch_wait_us > 0 {
            self.busy.tick(self.io.now);
        }
        let mut cqes = std::mem::take(&mut self.cqes);
        cqes.extend(
            self.ring
                .completion()
                .map(|e: cqueue::Entry| (e.user_data(), e.result(), e.flags())),
        );
        self.last_batch = cqes.len() as u32;
        if self.batch_want > 1 {
            if self.last_batch < self.batch_want {
                // `waits` already counts the wait that missed; the next one is `waits + 1`.
                self.batch_skip_until = self.waits + 1 + self.batch_backoff;
                self.batch_backoff = (self.batch_backoff * 2).min(MAX_BATCH_BACKOFF);
            } else {
                self.batch_backoff = 1;
            }
            self.batch_want = 1;
        }
        // Start loading the records of every connection the batch names before handling the
        // first (`prefetch.rs`): the driver's two (`Io`'s and `conn.rs`'s) for receives and
        // sends, the handler's for receives only (a send's completion does not reach the
        // handler).
        if cqes.len() > 1 {
            for &(ud, res, _) in &cqes {
                let recv = res > 0 && userdata::is_recv(ud);
                if recv || userdata::is_send(ud) {
                    let c = ConnId(ud as u32);
                    if let Some(conn) = self.io.conns.get(c.index()) {
                        crate::prefetch(conn);
                    }
                    if let Some(u) = self.uconns.get(c.index()) {
                        crate::prefetch(u);
                    }
                    if recv {
                        h.prefetch(c);
                    }
                }
            }
        }
        let mut inputs = 0;
        for &(ud, res, flags) in &cqes {
            inputs += u32::from(res > 0 && userdata::is_recv(ud));
            self.dispatch(h, ud, res, flags);
        }
        self.last_inputs = inputs;
        cqes.clear();
        self.cqes = cqes;
        self.bufs.publish();
        if let Some(r) = self.dbufs.as_mut() {
            r.publish();
        }
        self.check_wake(h);
        h.on_batch_end(&mut self.io);
        self.flush(h);
        Ok(())
    }

    fn io(&mut self) -> &mut Io {
        &mut self.io
    }

    fn name(&self) -> &'static str {
        "uring"
    }

    fn waits(&self) -> u64 {
        self.waits
    }
}

impl Drop for UringDriver {
    fn drop(&mut self) {
        // Take the buffer rings away from the kernel before their memory goes (BufRing::drop).
        let _ = self.ring.submitter().unregister_buf_ring(BGID);
        if self.dbufs.is_some() {
            let _ = self.ring.submitter().unregister_buf_ring(BGID_DGRAM);
        }
        // The waker's duplicate of the ring descriptor would keep the ring (and every
        // connection in its file table) alive.
        self.wake.waker.clear_direct();
    }
}

/// Creates a ring whose submissions a kernel thread polls, attached to the zones' shared SQ
/// thread when asked.
fn build_sqpoll_ring(entries: u32, sq: &SqPoll) -> io::Result<IoUring> {
    let mut first = sq
        .share
        .as_ref()
        .map(|s| s.first.lock().unwrap_or_else(|e| e.into_inner()));
    let mut b = IoUring::builder();
    b.setup_cqsize(entries * 4)
        .setup_submit_all()
        .setup_sqpoll(sq.idle.as_millis().min(u32::MAX as u128) as u32);
    if let Some(cpu) = sq.cpu {
        b.setup_sqpoll_cpu(cpu);
    }
    if let Some(Some(fd)) = first.as_deref() {
        b.setup_attach_wq(*fd);
    }
    let ring = b
        .build(entries)
        .map_err(|e| io::Error::new(e.kind(), format!("io_uring with SQPOLL: {e}")))?;
    if let Some(slot) = first.as_deref_mut() {
        if slot.is_none() {
            *slot = Some(std::os::fd::AsRawFd::as_raw_fd(&ring));
        }
    }
    Ok(ring)
}

/// Creates a ring with the flags a single-threaded zone wants, dropping ones the kernel lacks.
fn build_ring(entries: u32) -> io::Result<IoUring> {
    let mut b = IoUring::builder();
    b.setup_cqsize(entries * 4)
        .setup_submit_all()
        .setup_coop_taskrun()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .setup_taskrun_flag();
    match b.build(entries) {
        Ok(r) => Ok(r),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            // Kernels before 6.1 have no DEFER_TASKRUN / SINGLE_ISSUER.
            let mut b = IoUring::builder();
            b.setup_cqsize(entries * 4).setup_submit_all();
            b.build(entries)
        }
        Err(e) => Err(e),
    }
}
