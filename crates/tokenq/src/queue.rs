//! The queue itself: shared state, the producer handle and the consumer handle.

use std::fmt;
use std::mem::MaybeUninit;
use std::ops::Deref;

use crate::sync::{Arc, AtomicU64, Backoff, Ordering, UnsafeCell};

/// A reservation number: the position of an entry in the global publish order.
///
/// Token `n` is the `n`-th successful reservation on the queue (counting from 0), it is
/// also the entry's data-slot index before masking, and the consumer sees entries in
/// strictly increasing token order with no gaps. 64 bits never wrap in practice (at
/// 10⁹ pushes per second that takes 584 years), so tokens are unique for the queue's life.
pub type Token = u64;

/// Keeps the three hot counters on separate cache lines (128 bytes covers the adjacent
/// line prefetcher on x86 and the 128-byte lines of some Arm cores), so the consumer
/// advancing `head` does not invalidate the line producers CAS `tail` on.
#[repr(align(128))]
struct CachePadded<T>(T);

impl<T> Deref for CachePadded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// The shared state of a bounded, multi-producer single-consumer, order-preserving queue.
///
/// It is only reachable through its two handles, made by [`TokenQueue::new`]: any number
/// of [`Producer`]s (cloned) and exactly one [`Consumer`]. See the crate documentation for
/// the scheme; the names here follow the seed: `tail` is both the data ring's Tail and
/// `token_num`, `enqueue_num` is `enqueue_num`.
pub struct TokenQueue<T> {
    /// Token allocation: the next token to hand out, which is also the next data slot
    /// (before masking). Only ever advanced by a producer's CAS, by exactly 1.
    tail: CachePadded<AtomicU64>,
    /// Token checking: every token `< enqueue_num` is published (its slot is filled and
    /// visible to the consumer). Advanced only by the producer whose token equals it.
    enqueue_num: CachePadded<AtomicU64>,
    /// Every slot `< head` has been consumed and may be reused. Stored only by the consumer.
    head: CachePadded<AtomicU64>,
    /// `capacity - 1`; capacity is a power of two so `index & mask` picks the slot.
    mask: u64,
    /// The data ring. Slot `i & mask` holds an initialised `T` exactly when
    /// `head <= i < enqueue_num`, or when `i < tail` and its producer has filled it but
    /// not yet published it.
    slots: Box<[UnsafeCell<MaybeUninit<T>>]>,
}

// SAFETY: a `TokenQueue<T>` moves `T` values between threads (a producer writes one, the
// consumer reads it out), which is sound when `T: Send`. The slots are the only
// non-`Sync` part; every access to one is exclusive by the protocol argued at each
// `unsafe` block (a slot belongs to one producer from reservation to publish, then to the
// consumer until it advances `head`), with the happens-before edges coming from
// `enqueue_num` (Release/Acquire) and `head` (Release/Acquire). `T: Sync` is not needed
// because no two threads ever hold a reference to the same `T`.
unsafe impl<T: Send> Send for TokenQueue<T> {}
// SAFETY: as above; shared access (`&TokenQueue`) from many threads only touches the
// atomics and, through the protocol, disjoint slots.
unsafe impl<T: Send> Sync for TokenQueue<T> {}

impl<T> TokenQueue<T> {
    /// Creates a queue with room for `capacity` entries and returns its producer and
    /// consumer handles. Clone the producer for more producers.
    ///
    /// # Panics
    ///
    /// If `capacity` is zero or not a power of two.
    #[allow(clippy::new_ret_no_self)] // the queue is only ever used through its handles
    pub fn new(capacity: usize) -> (Producer<T>, Consumer<T>) {
        assert!(
            capacity.is_power_of_two(),
            "TokenQueue capacity must be a non-zero power of two, got {capacity}"
        );
        let slots = (0..capacity)
            .map(|_| UnsafeCell::new(MaybeUninit::uninit()))
            .collect();
        let queue = Arc::new(TokenQueue {
            tail: CachePadded(AtomicU64::new(0)),
            enqueue_num: CachePadded(AtomicU64::new(0)),
            head: CachePadded(AtomicU64::new(0)),
            mask: capacity as u64 - 1,
            slots,
        });
        let producer = Producer {
            queue: Arc::clone(&queue),
        };
        let consumer = Consumer {
            queue,
            head: 0,
            published: 0,
        };
        (producer, consumer)
    }

    /// The number of entries the queue can hold.
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Published entries not yet consumed, as of some recent moment (an estimate when
    /// other threads are pushing or popping).
    fn len(&self) -> usize {
        // Read `head` first: everything the consumer has consumed was published, and the
        // Acquire load makes that publication visible to the `enqueue_num` load that
        // follows, so `published >= head` (the saturating_sub is belt and braces).
        let head = self.head.load(Ordering::Acquire);
        let published = self.enqueue_num.load(Ordering::Acquire);
        published.saturating_sub(head) as usize
    }

    fn slot(&self, index: u64) -> &UnsafeCell<MaybeUninit<T>> {
        &self.slots[(index & self.mask) as usize]
    }

    /// Stage 1, token allocation: reserves the next data slot and token in one atomic
    /// step, or returns `None` if every slot is reserved or holds an unconsumed entry.
    fn reserve(&self) -> Option<Token> {
        let capacity = self.mask + 1;
        loop {
            // `head` is read before `tail`. The Acquire load of `head` synchronises with the
            // consumer's Release store, which makes (1) the consumer's reads of every slot
            // below `head` happen-before our write to the slot we reserve, and (2) the
            // reservations of every token below `head` visible, so the `tail` we read next
            // is `>= head` (coherence) and `tail - head` cannot underflow.
            let head = self.head.load(Ordering::Acquire);
            let tail = self.tail.load(Ordering::Relaxed);
            if tail - head >= capacity {
                // Full when `tail` was read, unless the consumer moved `head` meanwhile;
                // re-checking makes a reported `Full` true at the moment `tail` was read.
                if self.head.load(Ordering::Acquire) == head {
                    return None;
                }
                continue;
            }
            // The single atomic step of the seed's first stage: `tail` is the slot index
            // and `token_num` at once, so one CAS both takes slot `tail & mask` and token
            // `tail`. Relaxed suffices: uniqueness comes from the RMW itself, the slot's
            // freedom from the Acquire load of `head` above, and publication order from
            // `enqueue_num`. It is a CAS rather than a `fetch_add` so that a full queue
            // refuses the reservation instead of handing out a slot still in use.
            if self
                .tail
                .compare_exchange_weak(tail, tail + 1, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
            {
                return Some(tail);
            }
        }
    }

    /// Stage 2, filling the reserved slot.
    ///
    /// # Safety
    ///
    /// `token` must come from [`Self::reserve`] on this queue, by the caller, and must
    /// not have been written or published yet: the reservation is what makes the slot
    /// exclusively the caller's.
    unsafe fn write(&self, token: Token, value: T) {
        self.slot(token).with_mut(|slot| {
            // SAFETY: pointer validity: `slot` points into `self.slots`, which lives as
            // long as `self`. Exclusivity: the caller owns reservation `token` (no other
            // producer got this token; the CAS in `reserve` is an RMW), and the consumer
            // reads this slot only after `enqueue_num > token`, which we have not yet
            // stored. The previous occupant, token `token - capacity`, has been read out:
            // `reserve` saw `head > token - capacity` with an Acquire load synchronising
            // with the consumer's Release store made after that read, so the read
            // happens-before this write. Overwriting without dropping is right because
            // that read moved the old value out.
            unsafe { slot.cast::<T>().write(value) }
        });
    }

    /// Stage 3, token checking: waits until every earlier token is published, then
    /// publishes `token`.
    fn publish(&self, token: Token) {
        let mut backoff = Backoff::new();
        // The seed's `while (enqueue_num != msg_token_num)` spin (its thesis prints the
        // condition as `==`, which would be inverted). `volatile` in the seed is an
        // Acquire load here: it must re-read memory and also make the earlier producers'
        // slot writes visible, which volatile alone does not guarantee on weak hardware.
        while self.enqueue_num.load(Ordering::Acquire) != token {
            backoff.snooze();
        }
        // Only the holder of `token` can get here while `enqueue_num == token`, so a plain
        // store is the atomic "append metadata and increment" step of the seed: with the
        // slot index equal to the token, the metadata queue is the prefix `< enqueue_num`.
        // Release publishes our slot write, and, through the Acquire load above, those of
        // all earlier tokens.
        self.enqueue_num.store(token + 1, Ordering::Release);
    }

    /// Moves the entry at `index` out of its slot.
    ///
    /// # Safety
    ///
    /// The caller must be the queue's single consumer, `index` must satisfy
    /// `head <= index < enqueue_num` with `enqueue_num` read by an Acquire load, the entry
    /// must not have been taken before, and the shared `head` must not be advanced past
    /// `index` until this returns (after which the slot is logically uninitialised).
    unsafe fn take(&self, index: u64) -> T {
        self.slot(index).with_mut(|slot| {
            // SAFETY: pointer validity: `slot` points into `self.slots`, alive with
            // `self`. Initialisation and visibility: `index < enqueue_num` means the
            // producer of token `index` stored its value and then (directly, or through
            // the chain of later producers each Acquire-loading the previous Release
            // store) an `enqueue_num > index` with Release; our Acquire load of that value
            // makes the write happen-before this read. Exclusivity: producers reuse the
            // slot only for token `index + capacity`, which needs `head > index`, which
            // the caller stores only after this read; there is one consumer. Each entry
            // is taken once, so the `T` is moved out exactly once.
            unsafe { slot.cast::<T>().read() }
        })
    }
}

impl<T> Drop for TokenQueue<T> {
    fn drop(&mut self) {
        if !std::mem::needs_drop::<T>() {
            return;
        }
        // `&mut self`: every handle is gone, and the `Arc` that owned us synchronised
        // their last accesses with this thread, so Relaxed loads see final values.
        // Every reservation was published (the fill and publish steps cannot panic, and a
        // producer handle outlives its own push), so `[head, enqueue_num)` are exactly the
        // published-but-unconsumed entries.
        let head = self.head.load(Ordering::Relaxed);
        let end = self.enqueue_num.load(Ordering::Relaxed);
        debug_assert_eq!(end, self.tail.load(Ordering::Relaxed));
        for index in head..end {
            self.slot(index).with_mut(|slot| {
                // SAFETY: pointer validity: `slot` is in `self.slots`, alive during drop.
                // `head <= index < enqueue_num`: the slot holds an initialised, published,
                // never-read `T` (the consumer stores `head` after each read, and stored
                // nothing past `enqueue_num`). Ordering: the `Arc` drop's release/acquire
                // pair on the reference count makes all producer writes visible. Each
                // index is visited once, so each `T` is dropped exactly once.
                unsafe { slot.cast::<T>().drop_in_place() }
            });
        }
    }
}

impl<T> fmt::Debug for TokenQueue<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenQueue")
            .field("capacity", &self.capacity())
            .field("head", &self.head.load(Ordering::Relaxed))
            .field("enqueue_num", &self.enqueue_num.load(Ordering::Relaxed))
            .field("token_num", &self.tail.load(Ordering::Relaxed))
            .finish()
    }
}

/// A producer handle: clone it for each producing thread (or share it; `push` takes
/// `&self`).
pub struct Producer<T> {
    queue: Arc<TokenQueue<T>>,
}

impl<T> Clone for Producer<T> {
    fn clone(&self) -> Self {
        Self {
            queue: Arc::clone(&self.queue),
        }
    }
}

impl<T> Producer<T> {
    /// Appends `value`, or gives it back in `Err` if the queue is full. Never blocks on a
    /// full queue and never overwrites; it may wait briefly (spin, then yield) for
    /// producers that reserved earlier to publish, so entries appear in reservation order.
    pub fn push(&self, value: T) -> Result<(), T> {
        self.push_with_token(value).map(drop)
    }

    /// Like [`push`](Self::push), and returns the entry's [`Token`]: its position in the
    /// order the consumer will see.
    pub fn push_with_token(&self, value: T) -> Result<Token, T> {
        let Some(token) = self.queue.reserve() else {
            return Err(value);
        };
        // SAFETY: `token` was just reserved by this call and is neither written nor
        // published; see `TokenQueue::write` for the pointer and ordering argument.
        unsafe { self.queue.write(token, value) };
        self.queue.publish(token);
        Ok(token)
    }

    /// Published entries not yet consumed (an estimate while other threads work).
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// Whether [`len`](Self::len) is zero.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The number of entries the queue can hold.
    pub fn capacity(&self) -> usize {
        self.queue.capacity()
    }
}

impl<T> fmt::Debug for Producer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Producer").field(&self.queue).finish()
    }
}

/// The consumer handle; there is exactly one per queue.
pub struct Consumer<T> {
    queue: Arc<TokenQueue<T>>,
    /// The next entry to take; mirrors the shared `head`, which only we store.
    head: u64,
    /// The last `enqueue_num` we read, so `pop` touches the shared counter only when it
    /// has run out of entries it already knows are published.
    published: u64,
}

impl<T> Consumer<T> {
    /// Takes the oldest entry (the lowest token), or `None` if nothing is published.
    pub fn pop(&mut self) -> Option<T> {
        if self.head == self.published {
            // Acquire: pairs with the Release store in `publish`, making the slot writes
            // of every token below the value read visible to `take`.
            self.published = self.queue.enqueue_num.load(Ordering::Acquire);
            if self.head == self.published {
                return None;
            }
        }
        // SAFETY: we are the single consumer (`Consumer` is not `Clone` and `pop` takes
        // `&mut self`); `head < published`, read with Acquire above or in an earlier call;
        // `head` has not been taken (we advance it right after); the shared `head` is
        // stored only below.
        let value = unsafe { self.queue.take(self.head) };
        self.head += 1;
        // Release: our read of the slot happens-before a producer's Acquire load of this
        // `head` and therefore before it reuses the slot.
        self.queue.head.store(self.head, Ordering::Release);
        Some(value)
    }

    /// Moves up to `max` entries, oldest first, onto the end of `out` and returns how
    /// many. Frees their slots with a single store, which is cheaper than `pop` in a loop
    /// when producers are busy.
    pub fn pop_batch(&mut self, out: &mut Vec<T>, max: usize) -> usize {
        if (self.published - self.head) < max as u64 {
            // Acquire: as in `pop`.
            self.published = self.queue.enqueue_num.load(Ordering::Acquire);
        }
        let n = (self.published - self.head).min(max as u64) as usize;
        if n == 0 {
            return 0;
        }
        // Reserve up front: the loop below must not panic between moving entries out and
        // storing `head`, or the queue's drop would drop them a second time. `push` into
        // reserved capacity neither allocates nor panics.
        out.reserve(n);
        for index in self.head..self.head + n as u64 {
            // SAFETY: single consumer (as in `pop`); `head <= index < published`, read
            // with Acquire; each index in this range is taken once; the shared `head` is
            // stored only after the loop.
            out.push(unsafe { self.queue.take(index) });
        }
        self.head += n as u64;
        // Release: as in `pop`, for all `n` slots at once.
        self.queue.head.store(self.head, Ordering::Release);
        n
    }

    /// Published entries not yet consumed (exact for the consumer's own pops, an
    /// underestimate while producers are pushing).
    pub fn len(&self) -> usize {
        let published = self.queue.enqueue_num.load(Ordering::Acquire);
        (published - self.head) as usize
    }

    /// Whether [`len`](Self::len) is zero.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The number of entries the queue can hold.
    pub fn capacity(&self) -> usize {
        self.queue.capacity()
    }
}

impl<T> fmt::Debug for Consumer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Consumer").field(&self.queue).finish()
    }
}
