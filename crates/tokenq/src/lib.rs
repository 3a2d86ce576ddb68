//! A bounded, multi-producer single-consumer queue that publishes entries in the order
//! their slots were reserved, without taking a lock: the *token-based lock-free
//! order-preserving enqueue* of seed 000 (VPPNGX, §4.2 and §5.2).
//!
//! # The problem the seed solves
//!
//! In VPPNGX several NGINX workers enqueue control-event messages into one VPP event queue.
//! A message has two parts: its data, written into a *data slot* taken from the tail of a
//! data ring, and its *metadata*, appended to a metadata queue that the consumer reads.
//! Once the session lock layer is gone, two workers can interleave: worker A takes slot 2,
//! worker B takes slot 3, B finishes writing first and appends its metadata first. The
//! consumer would then see slot 3 before slot 2, out of allocation order. The obvious
//! fix, a giant lock around the whole enqueue, serialises the slot fills as well.
//!
//! # The scheme
//!
//! Two counters, both starting at 0: `token_num` and `enqueue_num`. An enqueue is three
//! steps:
//!
//! 1. **Token allocation** (one atomic step): take the data slot at the ring's tail and
//!    advance the tail; read `token_num` as this message's token and advance it.
//! 2. **Fill** the slot. It belongs to this producer alone, so this needs no lock, and
//!    any number of producers fill their slots in parallel.
//! 3. **Token check**: wait until `enqueue_num == my_token`, then append the metadata and
//!    increment `enqueue_num` (one indivisible step).
//!
//! Order is preserved because `enqueue_num` walks through the tokens one at a time: the
//! producer holding token `n + 1` cannot publish until the holder of token `n` has, and
//! tokens are handed out in slot order. In the seed's example (figure 4-2) worker 3 gets
//! token N+1, finishes its fill first and spins; worker 2 (token N) publishes and moves
//! `enqueue_num` to N+1; only then does worker 3 publish.
//!
//! # How this crate maps it
//!
//! * **One counter is both the tail and `token_num`.** Both start at 0 and step 1 in the
//!   same atomic action, so they are always equal (the slot is `token & (capacity - 1)`).
//!   Keeping one `u64` makes the seed's "this whole step is atomic" literally one
//!   compare-and-swap, instead of packing two counters into one word. It is a CAS loop and
//!   not a `fetch_add` because the queue is bounded: the CAS only succeeds if
//!   `tail - head < capacity`, so a producer never takes a slot the consumer has not
//!   freed, and [`Producer::push`] returns `Err(value)` when the queue is full.
//! * **The metadata queue is implicit.** With slot index = token, the metadata the seed
//!   appends (which slot the message is in) is a function of the token, so "append the
//!   metadata and increment `enqueue_num`" is one Release store of `token + 1`: the
//!   consumer reads every slot below `enqueue_num`. Only the holder of token `n` can store
//!   while `enqueue_num == n`, so that store is the indivisible step the seed asks for.
//! * **`volatile` becomes Acquire/Release.** §5.2 makes `enqueue_num` `volatile` so the
//!   spin re-reads memory. In Rust the spin is an Acquire load, which also orders the
//!   earlier producers' slot writes before ours on weakly ordered CPUs (volatile alone
//!   would not). The spin issues `std::hint::spin_loop` a few dozen times and then
//!   `std::thread::yield_now`, so when producers outnumber cores the one holding the
//!   next token gets to run. (The thesis prints the loop as
//!   `while (enqueue_num == msg_token_num)`; the prose makes clear it waits while they
//!   *differ*, which is what this crate does.)
//! * **Counters are `u64`**, which do not wrap in practice (584 years at 10⁹ pushes/s),
//!   so tokens are unique for the life of the queue and comparisons need no wrap logic.
//!   The seed lets its `unsigned` counters wrap to 0; with 64 bits that never happens.
//! * **The consumer** reads `enqueue_num` (Acquire), moves entries out of every slot below
//!   it, and stores the new `head` (Release), which producers read to decide fullness.
//!
//! Producers never wait for the consumer (a full queue is an error, not a wait) and the
//! consumer never waits for producers (an empty queue is `None`), so there is no deadlock.
//! What the scheme does trade away, as in the seed, is *non-blocking* progress between
//! producers: if the thread holding token `n` is descheduled between steps 1 and 3,
//! producers with later tokens wait (yielding) until it runs again. No lock is taken, and
//! the window is only the slot fill, a move of one `T`.
//!
//! # Example
//!
//! ```
//! use ringx_tokenq::TokenQueue;
//!
//! let (producer, mut consumer) = TokenQueue::<u64>::new(8);
//! let workers: Vec<_> = (0..2u64)
//!     .map(|w| {
//!         let producer = producer.clone();
//!         std::thread::spawn(move || {
//!             for i in 0..100 {
//!                 let mut item = w * 1000 + i;
//!                 // Full is not an error to give up on here: retry until there is room.
//!                 while let Err(back) = producer.push(item) {
//!                     item = back;
//!                     std::thread::yield_now();
//!                 }
//!             }
//!         })
//!     })
//!     .collect();
//!
//! let mut got = Vec::new();
//! while got.len() < 200 {
//!     if consumer.pop_batch(&mut got, 16) == 0 {
//!         std::thread::yield_now();
//!     }
//! }
//! workers.into_iter().for_each(|w| w.join().unwrap());
//!
//! // Each producer's items arrive in the order it pushed them.
//! for w in 0..2u64 {
//!     let mine: Vec<u64> = got.iter().copied().filter(|x| x / 1000 == w).collect();
//!     assert_eq!(mine, (0..100).map(|i| w * 1000 + i).collect::<Vec<_>>());
//! }
//! assert_eq!(consumer.pop(), None);
//! ```
//!
//! [`Producer::push_with_token`] also returns the entry's [`Token`], its position in the
//! single global order the consumer observes (0, 1, 2, … with no gaps).
//!
//! # Compared with `Mutex<VecDeque<T>>`
//!
//! A `Mutex<VecDeque<T>>` gives the same guarantees (bounded if you check the length,
//! FIFO, one global order) and is the right choice when contention is low or simplicity
//! matters: it is a few lines, has no `unsafe`, and its critical section is short. Its
//! costs show under contention: every push and pop takes the same lock, the slot write
//! happens inside the critical section, a producer preempted while holding the lock stops
//! everyone *including the consumer*, and a contended `std` mutex parks threads in the
//! kernel. Here producers contend only on one CAS, fill their slots in parallel, and the
//! consumer never waits on a producer: it reads whatever prefix is published and drains
//! it in a batch with one store. A preempted producer still delays *later producers'*
//! publication (the order guarantee demands it), but not the consumer's progress on what
//! is already published. `benches/mpsc.rs` measures both.

#![deny(clippy::undocumented_unsafe_blocks, clippy::missing_safety_doc)]
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

mod queue;
mod sync;

pub use queue::{Consumer, Producer, Token, TokenQueue};

#[cfg(all(test, not(loom)))]
mod tests;
