//! Many producers, one consumer, real threads: exactly-once delivery, per-producer FIFO,
//! and the seed's global property (the consumer sees tokens 0, 1, 2, … in order).
#![cfg(not(loom))]

use std::thread;
use std::time::Instant;

use ringx_tokenq::{Token, TokenQueue};

/// Items are `producer << 32 | seq`.
fn run(producers: u64, per_producer: u64, capacity: usize) {
    let started = Instant::now();
    let (producer, mut consumer) = TokenQueue::<u64>::new(capacity);
    let handles: Vec<_> = (0..producers)
        .map(|id| {
            let producer = producer.clone();
            thread::spawn(move || {
                let mut tokens: Vec<Token> = Vec::with_capacity(per_producer as usize);
                for seq in 0..per_producer {
                    let mut item = id << 32 | seq;
                    let token = loop {
                        match producer.push_with_token(item) {
                            Ok(token) => break token,
                            Err(back) => {
                                item = back;
                                thread::yield_now();
                            }
                        }
                    };
                    tokens.push(token);
                }
                tokens
            })
        })
        .collect();
    drop(producer);

    let total = (producers * per_producer) as usize;
    let mut seen = Vec::with_capacity(total);
    while seen.len() < total {
        // Alternate the two consumer calls so both are exercised under contention.
        let got = if seen.len() % 3 == 0 {
            consumer.pop().map(|v| seen.push(v)).is_some() as usize
        } else {
            consumer.pop_batch(&mut seen, 64)
        };
        if got == 0 {
            thread::yield_now();
        }
    }
    let tokens: Vec<Vec<Token>> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(consumer.pop(), None);

    let mut next_seq = vec![0u64; producers as usize];
    for (position, &item) in seen.iter().enumerate() {
        let (id, seq) = ((item >> 32) as usize, item & 0xffff_ffff);
        // Exactly once + per-producer order: each producer's items arrive as 0, 1, 2, ...
        assert_eq!(
            seq, next_seq[id],
            "producer {id}: item {seq} out of order or duplicated"
        );
        next_seq[id] += 1;
        // Global order: the entry at position n of the consumer's stream holds token n.
        assert_eq!(
            tokens[id][seq as usize], position as u64,
            "entry {position} (producer {id} item {seq}) had a different token"
        );
    }
    assert!(
        next_seq.iter().all(|&n| n == per_producer),
        "some items never arrived"
    );
    eprintln!(
        "{producers} producers x {per_producer} (capacity {capacity}): {:?}",
        started.elapsed()
    );
}

#[test]
fn eight_producers_twenty_thousand_each() {
    run(8, 20_000, 1024);
}

#[test]
fn tiny_capacity_hammers_the_full_path() {
    run(4, 5_000, 2);
}
