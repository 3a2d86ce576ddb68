//! Model checking with loom: every interleaving (up to a preemption bound) and every
//! weak-memory outcome loom models, for small queues that do fill up.
//!
//! Run with:
//! `RUSTFLAGS="--cfg loom" cargo test -p ringx-tokenq --release --test loom`
#![cfg(loom)]

use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;

use ringx_tokenq::{Token, TokenQueue};

/// Runs `model` under [`builder`] and reports how many executions loom explored.
fn explore(name: &str, default_bound: usize, model: impl Fn() + Sync + Send + 'static) {
    // std atomics on purpose: they count executions outside the model, unseen by loom.
    let runs = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = runs.clone();
    let started = std::time::Instant::now();
    let builder = builder(default_bound);
    let bound = builder.preemption_bound;
    builder.check(move || {
        counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        model();
    });
    eprintln!(
        "{name}: {} executions, preemption bound {bound:?}, {:?}",
        runs.load(std::sync::atomic::Ordering::Relaxed),
        started.elapsed()
    );
}

/// `LOOM_MAX_PREEMPTIONS` overrides `default_bound`; the defaults are chosen so each
/// model finishes in well under a minute in release mode.
fn builder(default_bound: usize) -> loom::model::Builder {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(default_bound);
    }
    // Retry loops (full / empty) make long but finite paths; loom's default is 1000.
    builder.max_branches = 100_000;
    builder
}

/// Checks the consumer's stream: exactly once, per-producer FIFO, and token `n` at
/// position `n`. Items are `(producer, seq)`; `tokens[p][seq]` is what push returned.
fn check(seen: &[(usize, usize)], tokens: &[Vec<Option<Token>>]) {
    let mut next = vec![0; tokens.len()];
    for (position, &(p, seq)) in seen.iter().enumerate() {
        // Producers that give up on a full queue skip items, so "next" is "later than last".
        assert!(seq >= next[p], "producer {p}: item {seq} after {}", next[p]);
        next[p] = seq + 1;
        assert_eq!(
            tokens[p][seq],
            Some(position as Token),
            "stream position {position}"
        );
    }
    let accepted = tokens.iter().flatten().filter(|t| t.is_some()).count();
    assert_eq!(
        seen.len(),
        accepted,
        "every accepted push is consumed exactly once"
    );
}

/// Two producers push three items (two and one) into a capacity-2 queue, retrying once
/// (after a yield) when it is full, while the consumer makes one `pop` and one
/// `pop_batch`; after the joins it drains the rest. The retries are bounded on purpose:
/// unbounded retry loops on both sides (producer on full, consumer on empty) multiply
/// the stale values loom lets every loop iteration read, and such a model did not finish
/// in 5 minutes even at preemption bound 2.
#[test]
fn two_producers_retry_on_full() {
    explore("two_producers_retry_on_full", 4, || {
        let (producer, mut consumer) = TokenQueue::new(2);
        let handles: Vec<_> = [2, 1]
            .into_iter()
            .enumerate()
            .map(|(p, items)| {
                let producer = producer.clone();
                thread::spawn(move || {
                    (0..items)
                        .map(|seq| match producer.push_with_token((p, seq)) {
                            Ok(token) => Some(token),
                            Err(item) => {
                                thread::yield_now();
                                producer.push_with_token(item).ok()
                            }
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        drop(producer);
        let mut seen = Vec::new();
        if let Some(item) = consumer.pop() {
            seen.push(item);
        }
        consumer.pop_batch(&mut seen, 2);
        let tokens: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        while let Some(item) = consumer.pop() {
            seen.push(item);
        }
        check(&seen, &tokens);
        assert!(
            seen.len() >= 2,
            "a capacity-2 queue always takes the first two pushes"
        );
    });
}

/// Three producers push one item each into a capacity-2 queue and give up if it is full,
/// while the consumer takes what it can in one batch and one pop; the rest is drained
/// after the joins. Explores refusals racing with the consumer freeing a slot.
#[test]
fn three_producers_give_up_on_full() {
    explore("three_producers_give_up_on_full", 3, || {
        let (producer, mut consumer) = TokenQueue::new(2);
        let handles: Vec<_> = (0..3)
            .map(|p| {
                let producer = producer.clone();
                thread::spawn(move || vec![producer.push_with_token((p, 0)).ok()])
            })
            .collect();
        drop(producer);
        let mut seen = Vec::new();
        consumer.pop_batch(&mut seen, 2);
        if let Some(item) = consumer.pop() {
            seen.push(item);
        }
        let tokens: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        while let Some(item) = consumer.pop() {
            seen.push(item);
        }
        check(&seen, &tokens);
        let accepted = seen.len();
        assert!(
            (2..=3).contains(&accepted),
            "a capacity-2 queue takes 2 or 3 of 3, got {accepted}"
        );
    });
}

/// Counts drops, to check the queue drops unconsumed entries exactly once.
struct Counted(Arc<AtomicUsize>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

/// Two producers push while the consumer pops at most once and then the consumer handle
/// is dropped, racing the producers: every value is dropped exactly once, whether it was
/// refused, consumed, or left in the queue.
#[test]
fn unconsumed_entries_dropped_once() {
    explore("unconsumed_entries_dropped_once", 3, || {
        let drops = Arc::new(AtomicUsize::new(0));
        let (producer, mut consumer) = TokenQueue::new(2);
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let producer = producer.clone();
                let drops = drops.clone();
                thread::spawn(move || {
                    for _ in 0..2 {
                        // A refused value comes back in Err and is dropped here.
                        let _ = producer.push(Counted(drops.clone()));
                    }
                })
            })
            .collect();
        drop(producer);
        drop(consumer.pop());
        drop(consumer);
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(drops.load(Ordering::Relaxed), 4);
    });
}
