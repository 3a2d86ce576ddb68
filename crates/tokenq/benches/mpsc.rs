//! Throughput of N producers and one consumer: `TokenQueue` against `Mutex<VecDeque>`.
//!
//! Each producer pushes `PER_PRODUCER` u64s (retrying when full); the benchmark thread is
//! the consumer and drains until it has them all. Both queues are bounded at `CAPACITY`
//! so neither can grow without limit. Throughput is reported in elements per second.

use std::collections::VecDeque;
use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use ringx_tokenq::TokenQueue;

const PER_PRODUCER: u64 = 20_000;
const CAPACITY: usize = 1024;
const BATCH: usize = 64;

fn token_queue(producers: u64) -> Duration {
    let (producer, mut consumer) = TokenQueue::<u64>::new(CAPACITY);
    let start = Arc::new(Barrier::new(producers as usize + 1));
    let handles: Vec<_> = (0..producers)
        .map(|_| {
            let producer = producer.clone();
            let start = start.clone();
            thread::spawn(move || {
                start.wait();
                for i in 0..PER_PRODUCER {
                    let mut item = i;
                    while let Err(back) = producer.push(item) {
                        item = back;
                        thread::yield_now();
                    }
                }
            })
        })
        .collect();
    let total = (producers * PER_PRODUCER) as usize;
    let mut out = Vec::with_capacity(BATCH);
    let mut got = 0;
    start.wait();
    let began = Instant::now();
    while got < total {
        out.clear();
        let n = consumer.pop_batch(&mut out, BATCH);
        if n == 0 {
            thread::yield_now();
        }
        got += n;
        std::hint::black_box(&out);
    }
    let elapsed = began.elapsed();
    handles.into_iter().for_each(|h| h.join().unwrap());
    elapsed
}

fn mutex_deque(producers: u64) -> Duration {
    let queue = Arc::new(Mutex::new(VecDeque::<u64>::with_capacity(CAPACITY)));
    let start = Arc::new(Barrier::new(producers as usize + 1));
    let handles: Vec<_> = (0..producers)
        .map(|_| {
            let queue = queue.clone();
            let start = start.clone();
            thread::spawn(move || {
                start.wait();
                for i in 0..PER_PRODUCER {
                    loop {
                        let mut q = queue.lock().unwrap();
                        if q.len() < CAPACITY {
                            q.push_back(i);
                            break;
                        }
                        drop(q);
                        thread::yield_now();
                    }
                }
            })
        })
        .collect();
    let total = (producers * PER_PRODUCER) as usize;
    let mut out = Vec::with_capacity(BATCH);
    let mut got = 0;
    start.wait();
    let began = Instant::now();
    while got < total {
        out.clear();
        {
            // Drain up to a batch per lock, like `pop_batch`, to keep the comparison fair.
            let mut q = queue.lock().unwrap();
            let n = q.len().min(BATCH);
            out.extend(q.drain(..n));
        }
        if out.is_empty() {
            thread::yield_now();
        }
        got += out.len();
        std::hint::black_box(&out);
    }
    let elapsed = began.elapsed();
    handles.into_iter().for_each(|h| h.join().unwrap());
    elapsed
}

fn mpsc(c: &mut Criterion) {
    let mut group = c.benchmark_group("mpsc");
    group.sample_size(10);
    for producers in [1u64, 2, 4, 8] {
        group.throughput(Throughput::Elements(producers * PER_PRODUCER));
        group.bench_with_input(
            BenchmarkId::new("token_queue", producers),
            &producers,
            |b, &n| b.iter_custom(|iters| (0..iters).map(|_| token_queue(n)).sum()),
        );
        group.bench_with_input(
            BenchmarkId::new("mutex_vecdeque", producers),
            &producers,
            |b, &n| b.iter_custom(|iters| (0..iters).map(|_| mutex_deque(n)).sum()),
        );
    }
    group.finish();
}

criterion_group!(benches, mpsc);
criterion_main!(benches);
