//! `ringx echo --pool N`: Netpoll's execution model. Zones receive and deframe; handlers run
//! on a pool of threads; replies come back through one shared send ring per zone, filled by
//! all pool threads at once with the token-based, lock-free, order-preserving enqueue of seed
//! 000 §4.2 ([`ringx_tokenq`]). A connection's messages always go to the same pool thread, so
//! its replies keep their order; the token queue keeps the order in which pool threads
//! reserved their slots.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use ringx_engine::framing::{encode, Deframer};
use ringx_engine::{ConnId, Handler, Io, ListenerId, Waker};
use ringx_tokenq::{Consumer, Producer, TokenQueue};

/// A message handed to the pool.
pub struct Job {
    zone: usize,
    conn: ConnId,
    gen: u32,
    msg: Vec<u8>,
}

/// A framed reply on its way back to the zone that owns the connection.
pub struct Reply {
    conn: ConnId,
    gen: u32,
    frame: Vec<u8>,
}

/// The pool side of one zone: its shared send ring and how to wake it.
#[derive(Clone)]
pub struct ZoneLink {
    ring: Producer<Reply>,
    waker: Waker,
    /// Set by the zone when it wants a wake-up for the next reply (it has drained the ring);
    /// the first pool thread to push after that takes the flag and wakes it: one eventfd
    /// write per drain, not per reply.
    want_wake: Arc<AtomicBool>,
}

/// Per-zone ends created before the zones start.
pub struct ZoneEnds {
    pub link: ZoneLink,
    pub replies: Consumer<Reply>,
    pub want_wake: Arc<AtomicBool>,
}

pub fn zone_ends(waker: Waker, capacity: usize) -> ZoneEnds {
    let (ring, replies) = TokenQueue::new(capacity);
    let want_wake = Arc::new(AtomicBool::new(true));
    ZoneEnds {
        link: ZoneLink {
            ring,
            waker,
            want_wake: want_wake.clone(),
        },
        replies,
        want_wake,
    }
}

/// Starts `n` pool threads; returns one job sender per thread.
pub fn start_pool(n: usize, links: Vec<ZoneLink>) -> Vec<mpsc::Sender<Job>> {
    let mut senders = Vec::with_capacity(n);
    for i in 0..n {
        let (tx, rx) = mpsc::channel::<Job>();
        let links = links.clone();
        std::thread::Builder::new()
            .name(format!("ringx-pool-{i}"))
            .spawn(move || {
                for job in rx {
                    let mut frame = Vec::with_capacity(job.msg.len() + 4);
                    encode(&mut frame, &job.msg);
                    let link = &links[job.zone];
                    let mut reply = Reply {
                        conn: job.conn,
                        gen: job.gen,
                        frame,
                    };
                    loop {
                        match link.ring.push(reply) {
                            Ok(()) => break,
                            Err(r) => {
                                // Ring full: make sure the zone drains it, then retry.
                                reply = r;
                                link.waker.wake();
                                std::thread::yield_now();
                            }
                        }
                    }
                    if link.want_wake.swap(false, Ordering::AcqRel) {
                        link.waker.wake();
                    }
                }
            })
            .expect("spawn pool thread");
        senders.push(tx);
    }
    senders
}

/// The zone side: deframes, hands messages to the pool, sends what comes back.
pub struct PooledEcho {
    zone: usize,
    conns: Vec<(Deframer, u32)>,
    jobs: Vec<mpsc::Sender<Job>>,
    replies: Consumer<Reply>,
    want_wake: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    batch: Vec<Reply>,
}

impl PooledEcho {
    pub fn new(
        zone: usize,
        ends: ZoneEnds,
        jobs: Vec<mpsc::Sender<Job>>,
        stop: Arc<AtomicBool>,
    ) -> Self {
        PooledEcho {
            zone,
            conns: Vec::new(),
            jobs,
            replies: ends.replies,
            want_wake: ends.want_wake,
            stop,
            batch: Vec::with_capacity(256),
        }
    }

    fn drain(&mut self, io: &mut Io) {
        loop {
            while self.replies.pop_batch(&mut self.batch, 256) > 0 {
                for r in self.batch.drain(..) {
                    if self.conns.get(r.conn.index()).is_some_and(|c| c.1 == r.gen) {
                        io.write(r.conn, &r.frame);
                    }
                }
            }
            // Ask for a wake-up, then look once more: a reply pushed between the last pop and
            // the store would otherwise wait for the next one.
            self.want_wake.store(true, Ordering::SeqCst);
            if self.replies.is_empty() {
                return;
            }
            self.want_wake.store(false, Ordering::SeqCst);
        }
    }
}

impl Handler for PooledEcho {
    fn on_accept(&mut self, _: &mut Io, c: ConnId, _: ListenerId) {
        if self.conns.len() <= c.index() {
            self.conns
                .resize_with(c.index() + 1, || (Deframer::default(), 0));
        }
        let slot = &mut self.conns[c.index()];
        slot.0 = Deframer::default();
        slot.1 = slot.1.wrapping_add(1);
    }

    fn on_data(&mut self, io: &mut Io, c: ConnId, data: &[u8]) {
        let (zone, n) = (self.zone, self.jobs.len());
        let jobs = &self.jobs;
        let (deframer, gen) = &mut self.conns[c.index()];
        let gen = *gen;
        let r = deframer.feed(data, |msg| {
            // Same connection, same pool thread: replies stay in order.
            let job = Job {
                zone,
                conn: c,
                gen,
                msg: msg.to_vec(),
            };
            let _ = jobs[c.index() % n].send(job);
        });
        if r.is_err() {
            io.close(c);
        }
    }

    fn on_eof(&mut self, io: &mut Io, c: ConnId) {
        io.close_after_flush(c);
    }

    fn on_closed(&mut self, _: &mut Io, c: ConnId, _: Option<std::io::Error>) {
        let slot = &mut self.conns[c.index()];
        slot.1 = slot.1.wrapping_add(1); // late replies for this connection are dropped
    }

    fn on_timer(&mut self, _: &mut Io) -> Option<Duration> {
        None
    }

    fn on_wake(&mut self, io: &mut Io) {
        if self.stop.load(Ordering::Acquire) {
            io.exit();
            return;
        }
        self.drain(io);
    }
}
