//! Single-threaded behaviour: order, full, empty, batches, drops.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::TokenQueue;

#[test]
fn fifo_single_producer() {
    let (p, mut c) = TokenQueue::new(8);
    for round in 0..5u32 {
        // Several laps around the ring, so slots are reused.
        for i in 0..8 {
            assert_eq!(
                p.push_with_token(round * 8 + i),
                Ok(u64::from(round * 8 + i))
            );
        }
        for i in 0..8 {
            assert_eq!(c.pop(), Some(round * 8 + i));
        }
    }
    assert_eq!(c.pop(), None);
}

#[test]
fn full_queue_returns_value() {
    let (p, mut c) = TokenQueue::new(4);
    for i in 0..4 {
        p.push(i).unwrap();
    }
    assert_eq!(p.len(), 4);
    assert_eq!(p.push(99), Err(99));
    assert_eq!(p.push(100), Err(100), "a refused push reserves nothing");
    assert_eq!(c.pop(), Some(0));
    assert_eq!(
        p.push_with_token(4),
        Ok(4),
        "one slot freed, one push accepted"
    );
    assert_eq!(p.push(5), Err(5));
    assert_eq!(
        (1..5).map(|_| c.pop().unwrap()).collect::<Vec<_>>(),
        [1, 2, 3, 4]
    );
    assert!(c.is_empty());
}

#[test]
fn pop_on_empty() {
    let (p, mut c) = TokenQueue::<String>::new(2);
    assert_eq!(c.pop(), None);
    assert_eq!(c.pop_batch(&mut Vec::new(), 10), 0);
    p.push("a".into()).unwrap();
    assert_eq!(c.pop().as_deref(), Some("a"));
    assert_eq!(c.pop(), None);
    assert_eq!(c.len(), 0);
}

#[test]
fn pop_batch_respects_max_and_appends() {
    let (p, mut c) = TokenQueue::new(16);
    for i in 0..10 {
        p.push(i).unwrap();
    }
    let mut out = vec![-1];
    assert_eq!(c.pop_batch(&mut out, 0), 0);
    assert_eq!(c.pop_batch(&mut out, 4), 4);
    assert_eq!(out, [-1, 0, 1, 2, 3]);
    assert_eq!(c.pop_batch(&mut out, 100), 6);
    assert_eq!(out, [-1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    // The slots freed by one batch store are reusable.
    for i in 10..26 {
        p.push(i).unwrap();
    }
    assert_eq!(p.push(26), Err(26));
    assert_eq!(c.pop(), Some(10));
}

#[test]
#[should_panic(expected = "power of two")]
fn capacity_must_be_power_of_two() {
    let _ = TokenQueue::<u8>::new(6);
}

#[test]
#[should_panic(expected = "power of two")]
fn capacity_must_be_non_zero() {
    let _ = TokenQueue::<u8>::new(0);
}

/// Counts its drops in a shared counter.
struct Counted(Arc<AtomicUsize>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

#[test]
fn drop_unconsumed_items_exactly_once() {
    let drops = Arc::new(AtomicUsize::new(0));
    let (p, mut c) = TokenQueue::new(8);
    // Wrap around once so unconsumed entries straddle the end of the ring.
    for _ in 0..6 {
        p.push(Counted(drops.clone())).ok().unwrap();
    }
    for _ in 0..5 {
        drop(c.pop().unwrap());
    }
    assert_eq!(drops.load(Ordering::Relaxed), 5);
    for _ in 0..7 {
        p.push(Counted(drops.clone())).ok().unwrap();
    }
    // Full: the refused value comes back and is dropped by us, not the queue.
    drop(p.push(Counted(drops.clone())).err().unwrap());
    assert_eq!(drops.load(Ordering::Relaxed), 6);
    let p2 = p.clone();
    drop(p);
    drop(c); // the consumer goes first; producers may still push
    drop(p2);
    assert_eq!(
        drops.load(Ordering::Relaxed),
        6 + 8,
        "8 unconsumed entries dropped once"
    );
    assert_eq!(Arc::strong_count(&drops), 1);
}

#[test]
fn drop_after_batch_and_zero_sized() {
    let (p, mut c) = TokenQueue::new(4);
    for _ in 0..4 {
        p.push(()).unwrap();
    }
    assert_eq!(p.push(()), Err(()));
    assert_eq!(c.pop_batch(&mut Vec::new(), 3), 3);
    assert_eq!(c.len(), 1);

    let drops = Arc::new(AtomicUsize::new(0));
    let (p, mut c) = TokenQueue::new(4);
    for _ in 0..4 {
        p.push(Counted(drops.clone())).ok().unwrap();
    }
    let mut out = Vec::new();
    c.pop_batch(&mut out, 3);
    drop((p, c));
    assert_eq!(drops.load(Ordering::Relaxed), 1, "only the unbatched entry");
    drop(out);
    assert_eq!(drops.load(Ordering::Relaxed), 4);
}

#[test]
fn handles_are_send_and_producer_clone() {
    fn send<T: Send>() {}
    fn clone<T: Clone>() {}
    send::<crate::Producer<String>>();
    send::<crate::Consumer<String>>();
    clone::<crate::Producer<String>>();
}
