//! Cost of one pick per policy (16 servers, all usable, one of them tried),
//! and of building a Maglev table.
//!
//! `cargo bench -p ringx-balance -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion};
use ringx_balance::{Balancer, Maglev, Policy, ServerSpec};

const SERVERS: usize = 16;

fn names() -> Vec<String> {
    (0..SERVERS).map(|i| format!("10.0.0.{i}:80")).collect()
}

fn picks(c: &mut Criterion) {
    let specs: Vec<ServerSpec> = (0..SERVERS)
        .map(|i| ServerSpec {
            weight: 1 + (i % 3) as u32,
            backup: false,
        })
        .collect();
    let weights: Vec<u32> = specs.iter().map(|s| s.weight).collect();
    let maglev = Arc::new(Maglev::new(&names(), &weights));
    for policy in [
        Policy::RoundRobin,
        Policy::LeastConn,
        Policy::RandomTwo,
        Policy::Hash,
    ] {
        let mut b = Balancer::new(policy, &specs, Some(maglev.clone()), 1);
        let mut key = 0u64;
        c.bench_function(&format!("pick/{policy:?}"), |bench| {
            bench.iter(|| {
                key = key.wrapping_add(1);
                let i = b.pick(Some(&key.to_le_bytes()), |i| i != 5, black_box(&[3]));
                if let Some(i) = i {
                    b.started(i);
                    b.finished(i);
                }
                i
            })
        });
    }
    c.bench_function("maglev/new/16", |bench| {
        bench.iter(|| Maglev::new(black_box(&names()), &weights))
    });
}

criterion_group!(benches, picks);
criterion_main!(benches);
