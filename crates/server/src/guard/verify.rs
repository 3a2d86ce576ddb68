//! Password hashes verified off the zone threads: `auth_basic`'s slow hashes (bcrypt,
//! SHA-crypt; `basic.rs` says which are slow) go to a small pool of worker threads
//! (`[runtime] auth_threads`, 2 by default), so a flood of wrong passwords costs the workers'
//! CPU, not the zone's: the zone goes on serving its other requests while the request that
//! asked waits as a `limit_req` delay does (its head kept, what was decided kept in its
//! [`Progress`](super::Progress)).
//!
//! The queues are the token-ordered queue of `ringx-tokenq` both ways, as `ringx echo --pool`
//! uses it (`crates/ringx/src/echo_pool.rs`):
//!
//! ```text
//!  zone 0 ─┐ push (one CAS)          ┌─ worker 0 ─┐ push         ┌─► zone 0's answers ─► wake
//!  zone 1 ─┼──► worker i's jobs ─────┤            ├──────────────┤
//!  ...     ┘   (bounded, QUEUE)      └─ worker 1 ─┘              └─► zone 1's answers ─► wake
//! ```
//!
//! * **Jobs**: each worker has its own queue, which every zone pushes to (the queue is
//!   multi-producer, single-consumer); a zone picks the worker with the shortest queue. A
//!   worker with nothing to do parks (`std::thread::park`); a push unparks it (one atomic
//!   swap when it is running, a futex wake when it is parked). The queues are bounded: when
//!   every worker has [`QUEUE`] jobs waiting, the request is refused (503 with `Retry-After`)
//!   instead of memory growing under a flood.
//! * **Answers**: each zone has one queue, which every worker pushes to. A worker wakes the
//!   zone ([`Waker::wake`]: `MSG_RING` into a parked zone's ring, nothing when it is running)
//!   only when the zone asked for a wake-up, that is once it had emptied its queue: one wake
//!   per batch, not per answer. The zone takes the answers in `Zone::control` and hands each
//!   to the request (connection, generation and stream) that waits for it. A zone never has
//!   more verifications in flight than its answer queue holds, so a worker's push never
//!   finds it full.
//! * Workers run at nice 10: where one shares a CPU with a zone (zones are pinned, workers
//!   are not), the zone's serving comes first and guessing gets what is left.
//!
//! Only the answer crosses back, with the 128-bit key of the credentials it is for, so a
//! late answer can never be taken for another request's; a wrong password is not remembered.

use std::io;
use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{JoinHandle, Thread};

use ringx_config::htpasswd::HashKind;
use ringx_engine::{ConnId, Waker};
use ringx_tokenq::{Consumer, Producer, TokenQueue};

/// Verifications that may wait per worker thread (a power of two); with every worker's queue
/// full a request is refused with 503.
pub const QUEUE: usize = 64;
/// The most worker threads (`[runtime] auth_threads`).
pub const MAX_THREADS: usize = 64;
/// The workers' nice value.
const NICE: libc::c_int = 10;

/// Who waits for a verification: a connection (by generation, so an answer for one that has
/// gone reaches no successor) and, on HTTP/2, its stream (0 on HTTP/1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tag {
    pub conn: ConnId,
    pub gen: u32,
    pub stream: u32,
}

/// A verification for a worker.
struct Job {
    zone: usize,
    tag: Tag,
    key: u128,
    kind: HashKind,
    hash: Arc<str>,
    pass: Vec<u8>,
}

impl Drop for Job {
    fn drop(&mut self) {
        // The password does not stay in freed memory longer than it must.
        self.pass.iter_mut().for_each(|b| *b = 0);
        std::hint::black_box(&self.pass);
    }
}

/// A worker's answer on its way back to the zone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Done {
    pub tag: Tag,
    /// The credentials' key (`basic.rs`).
    pub key: u128,
    pub ok: bool,
}

/// A worker's way back to one zone.
#[derive(Clone)]
struct ZoneLink {
    done: Producer<Done>,
    waker: Waker,
    /// Set by the zone once it has emptied its answers; the first worker to push after that
    /// takes it and wakes the zone.
    want_wake: Arc<AtomicBool>,
}

/// One worker: its queue of jobs and the way back to every zone. [`start`] runs each on a
/// thread of its own; tests run them by hand ([`unstarted`], [`Worker::run_one`]).
pub struct Worker {
    jobs: Consumer<Job>,
    zones: Vec<ZoneLink>,
}

impl Worker {
    /// Verifies the oldest job waiting and sends its answer back; false when none waits.
    pub fn run_one(&mut self) -> bool {
        let Some(job) = self.jobs.pop() else {
            return false;
        };
        // A hash crate that panics on some input refuses that password; the worker goes on
        // (a lost worker would leave its queued requests waiting until their timeout).
        let verify = || super::hash::verify_hash(job.kind, &job.hash, &job.pass);
        let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(verify)).unwrap_or(false);
        let link = &self.zones[job.zone];
        let mut done = Done {
            tag: job.tag,
            key: job.key,
            ok,
        };
        drop(job);
        // Never full (a zone keeps fewer in flight than its queue holds); if it were, the
        // zone is made to drain it and the push tried again.
        while let Err(d) = link.done.push(done) {
            done = d;
            link.waker.wake();
            std::thread::yield_now();
        }
        // SeqCst fence: either the zone sees this answer after asking for a wake-up, or this
        // sees its request for one (the zone has the mirror fence, `ZoneVerify::take`).
        fence(Ordering::SeqCst);
        if link.want_wake.swap(false, Ordering::AcqRel) {
            link.waker.wake();
        }
        true
    }

    fn run(mut self, stop: &AtomicBool) {
        // SAFETY: setpriority takes no pointers; PRIO_PROCESS with 0 is the calling thread on
        // Linux. A failure leaves the thread at the zones' priority, which is only less kind.
        unsafe {
            libc::setpriority(libc::PRIO_PROCESS, 0, NICE);
        }
        loop {
            if self.run_one() {
                continue;
            }
            if stop.load(Ordering::Acquire) {
                return;
            }
            // A push between the pop above and this park left the unpark token: it returns
            // at once.
            std::thread::park();
        }
    }
}

/// One zone's end of the pool: where its verifications go, and their answers come back.
pub struct ZoneVerify {
    zone: usize,
    /// Each worker's queue, and its thread to unpark (None: tests run the worker).
    workers: Vec<(Producer<Job>, Option<Thread>)>,
    done: Consumer<Done>,
    want_wake: Arc<AtomicBool>,
    /// Handed to the workers and not taken back yet.
    in_flight: usize,
    batch: Vec<Done>,
}

/// Why a verification was not handed over.
#[derive(Debug, PartialEq, Eq)]
pub struct Busy;

impl ZoneVerify {
    /// Hands the verification of `pass` against `hash` (of `kind`) for credentials `key` to
    /// the worker with the fewest waiting; [`Busy`] when every queue is full.
    pub fn submit(
        &mut self,
        tag: Tag,
        key: u128,
        (kind, hash): (HashKind, &Arc<str>),
        pass: &[u8],
    ) -> Result<(), Busy> {
        if self.in_flight >= self.done.capacity() {
            return Err(Busy);
        }
        let mut job = Job {
            zone: self.zone,
            tag,
            key,
            kind,
            hash: hash.clone(),
            pass: pass.to_vec(),
        };
        let mut order: Vec<usize> = (0..self.workers.len()).collect();
        order.sort_by_key(|&i| self.workers[i].0.len());
        for i in order {
            let (q, thread) = &self.workers[i];
            match q.push(job) {
                Ok(()) => {
                    if let Some(t) = thread {
                        t.unpark();
                    }
                    self.in_flight += 1;
                    return Ok(());
                }
                Err(j) => job = j,
            }
        }
        Err(Busy)
    }

    /// The answers that came back (the zone was woken, `Zone::control`), oldest first; asks
    /// for a wake-up for the next one.
    pub fn take(&mut self) -> Vec<Done> {
        let mut out = std::mem::take(&mut self.batch);
        loop {
            while self.done.pop_batch(&mut out, 256) > 0 {}
            self.want_wake.store(true, Ordering::SeqCst);
            // Mirror of the worker's fence: an answer pushed before the store above is seen
            // here, one pushed after it finds the flag and wakes the zone.
            fence(Ordering::SeqCst);
            if self.done.is_empty() {
                break;
            }
            self.want_wake.store(false, Ordering::SeqCst);
        }
        self.in_flight -= out.len().min(self.in_flight);
        out
    }

    /// Gives the answer buffer back for the next [`take`](Self::take).
    pub fn recycle(&mut self, mut batch: Vec<Done>) {
        batch.clear();
        self.batch = batch;
    }

    /// Verifications handed over and not answered yet (as this zone last looked).
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }
}

/// The worker threads; dropping it stops and joins them (jobs still queued are dropped).
pub struct Pool {
    threads: Vec<JoinHandle<()>>,
    stop: Arc<AtomicBool>,
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        for t in &self.threads {
            t.thread().unpark();
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// The workers and the zones' ends, not started: `workers` of them for the zones woken by
/// `wakers`, in zone order.
pub fn unstarted(workers: usize, wakers: &[Waker]) -> (Vec<Worker>, Vec<ZoneVerify>) {
    let workers = workers.clamp(1, MAX_THREADS);
    let (producers, consumers): (Vec<_>, Vec<_>) =
        (0..workers).map(|_| TokenQueue::new(QUEUE)).unzip();
    // Room for every job that can be queued or running at once: a push never fails.
    let answers = (workers * (QUEUE + 1)).next_power_of_two();
    let mut links = Vec::with_capacity(wakers.len());
    let mut ends = Vec::with_capacity(wakers.len());
    for (zone, waker) in wakers.iter().enumerate() {
        let (done, mine) = TokenQueue::new(answers);
        let want_wake = Arc::new(AtomicBool::new(true));
        links.push(ZoneLink {
            done,
            waker: waker.clone(),
            want_wake: want_wake.clone(),
        });
        ends.push(ZoneVerify {
            zone,
            workers: producers.iter().map(|p| (p.clone(), None)).collect(),
            done: mine,
            want_wake,
            in_flight: 0,
            batch: Vec::new(),
        });
    }
    let workers = consumers
        .into_iter()
        .map(|jobs| Worker {
            jobs,
            zones: links.clone(),
        })
        .collect();
    (workers, ends)
}

/// Starts `threads` workers (`ringx-auth-N`) for the zones woken by `wakers`; returns the
/// pool and each zone's end, in zone order.
pub fn start(threads: usize, wakers: &[Waker]) -> io::Result<(Pool, Vec<ZoneVerify>)> {
    let (workers, mut ends) = unstarted(threads, wakers);
    let stop = Arc::new(AtomicBool::new(false));
    let mut pool = Pool {
        threads: Vec::with_capacity(workers.len()),
        stop: stop.clone(),
    };
    for (i, w) in workers.into_iter().enumerate() {
        let stop = stop.clone();
        let t = std::thread::Builder::new()
            .name(format!("ringx-auth-{i}"))
            .spawn(move || w.run(&stop))?;
        for e in &mut ends {
            e.workers[i].1 = Some(t.thread().clone());
        }
        pool.threads.push(t);
    }
    Ok((pool, ends))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `htpasswd -nbB -C 4 u secret`.
    const BCRYPT4: &str = "$2y$04$PSP8EQ/tSO3IOd.ESMCCZOSVl7MNmbPFnP892W9X4fHnLGQe1p.RK";

    fn tag(n: u32) -> Tag {
        Tag {
            conn: ConnId(n),
            gen: 1,
            stream: 0,
        }
    }

    #[test]
    fn answers_come_back_to_their_zone_with_their_tag() {
        let wakers = [Waker::new().unwrap(), Waker::new().unwrap()];
        let (mut workers, mut ends) = unstarted(1, &wakers);
        let hash: Arc<str> = BCRYPT4.into();
        let h = (HashKind::Bcrypt, &hash);
        assert_eq!(ends[1].submit(tag(7), 70, h, b"secret"), Ok(()));
        assert_eq!(ends[0].submit(tag(3), 30, h, b"wrong"), Ok(()));
        assert!(ends[0].take().is_empty(), "nothing verified yet");
        assert!(workers[0].run_one() && workers[0].run_one());
        assert!(!workers[0].run_one(), "the queue is empty");
        assert_eq!(
            ends[0].take(),
            [Done {
                tag: tag(3),
                key: 30,
                ok: false
            }]
        );
        let got = ends[1].take();
        assert_eq!(got.len(), 1);
        assert!(got[0].ok && got[0].tag == tag(7) && got[0].key == 70);
        assert_eq!(ends[1].in_flight(), 0);
    }

    #[test]
    fn a_zone_asks_for_one_wake_up_per_batch() {
        let wakers = [Waker::new().unwrap()];
        let (mut workers, mut ends) = unstarted(1, &wakers);
        let hash: Arc<str> = "$apr1$saltsalt$LrttParrLPdxvgutaSXWJ0".into();
        for i in 0..3 {
            ends[0]
                .submit(tag(i), 1, (HashKind::Md5Crypt, &hash), b"secret")
                .unwrap();
        }
        while workers[0].run_one() {}
        // The first answer took the wake-up the zone asked for; the others did not ask again.
        assert!(!ends[0].want_wake.load(Ordering::SeqCst));
        assert_eq!(ends[0].take().len(), 3);
        assert!(
            ends[0].want_wake.load(Ordering::SeqCst),
            "asks again once empty"
        );
    }

    #[test]
    fn full_queues_refuse_rather_than_grow() {
        let wakers = [Waker::new().unwrap()];
        let (mut workers, mut ends) = unstarted(2, &wakers);
        let hash: Arc<str> = BCRYPT4.into();
        let h = (HashKind::Bcrypt, &hash);
        for i in 0..2 * QUEUE as u32 {
            assert_eq!(ends[0].submit(tag(i), 0, h, b"x"), Ok(()), "job {i}");
        }
        assert_eq!(ends[0].submit(tag(999), 0, h, b"x"), Err(Busy));
        // Spread over both workers by queue length.
        assert_eq!(workers[0].jobs.len(), QUEUE);
        assert_eq!(workers[1].jobs.len(), QUEUE);
        assert!(workers[1].run_one());
        assert_eq!(ends[0].submit(tag(1000), 0, h, b"x"), Ok(()), "room again");
    }

    #[test]
    fn started_workers_verify_and_wake_the_zone() {
        let wakers = [Waker::new().unwrap()];
        let (pool, mut ends) = start(2, &wakers).unwrap();
        let hash: Arc<str> = BCRYPT4.into();
        for (i, p) in [&b"secret"[..], b"nope"].into_iter().enumerate() {
            ends[0]
                .submit(tag(i as u32), i as u128, (HashKind::Bcrypt, &hash), p)
                .unwrap();
        }
        let mut got = Vec::new();
        let end = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while got.len() < 2 && std::time::Instant::now() < end {
            std::thread::sleep(std::time::Duration::from_millis(2));
            got.extend(ends[0].take());
        }
        got.sort_by_key(|d| d.key);
        assert_eq!(got.iter().map(|d| d.ok).collect::<Vec<_>>(), [true, false]);
        assert!(wakers[0].stats().sent_none >= 1, "the zone was woken");
        drop(pool); // stops and joins
    }
}
