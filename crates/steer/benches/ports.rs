//! Cost of choosing a source port per connect: the precomputed table, the dynamic search
//! (`ff_rss_check`), and the kernel's own choice (bind to port 0 + getsockname).
//!
//! `cargo bench -p ringx-steer -- --warm-up-time 1 --measurement-time 3`
//! Hash evaluations per connect are printed from the table's counters after each run.

use std::hint::black_box;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use ringx_steer::ports::{Dest, PortTable, PortTableBuilder, PortTableConfig};
use ringx_steer::steering::{FlowSteering, Reta, ZoneMap};
use ringx_steer::toeplitz::DEFAULT_KEY;
use socket2::{Domain, Socket, Type};

fn steering(queues: u16) -> Arc<FlowSteering> {
    Arc::new(FlowSteering::rss(
        &DEFAULT_KEY,
        Reta::round_robin(128, queues).expect("power-of-two table"),
        ZoneMap::identity(queues),
        true,
    ))
}

fn config() -> PortTableConfig {
    PortTableConfig {
        // Released ports are ready again at once, so the loop never runs dry.
        time_wait: Duration::ZERO,
        ..PortTableConfig::default()
    }
}

fn report(name: &str, t: &PortTable) {
    let c = t.counters;
    let connects = c.table_hits + c.dynamic_hits;
    println!(
        "{name}: {connects} connects, {:.3} hash evaluations per connect \
         (table hits {}, dynamic searches {}, kernel fallbacks {})",
        c.hash_evals as f64 / connects.max(1) as f64,
        c.table_hits,
        c.dynamic_searches,
        c.kernel_fallbacks
    );
}

fn ports(c: &mut Criterion) {
    let dest: Dest = "10.0.0.1 10.0.0.2 8080".parse().expect("dest");
    let now = Instant::now();

    // (a) Table: take + release by handle, and by destination (one FxHash lookup each).
    let mut table = PortTableBuilder::new(steering(4), config())
        .dest(dest)
        .build(1)
        .expect("table");
    let id = table.dest_id(&dest).expect("configured");
    c.bench_function("table take+release (DestId)", |b| {
        b.iter(|| {
            let p = table.take_id(black_box(id), now).expect("port");
            table.release_id(id, black_box(p), now).expect("release");
        })
    });
    report("table (DestId)", &table);
    let mut table = PortTableBuilder::new(steering(4), config())
        .dest(dest)
        .build(1)
        .expect("table");
    c.bench_function("table take+release (Dest lookup)", |b| {
        b.iter(|| {
            let p = table.take(black_box(&dest), now).expect("port");
            table.release(black_box(&dest), p, now).expect("release");
        })
    });
    report("table (Dest lookup)", &table);

    // (b) Dynamic search: a destination not in the table, for 2, 4 and 16 queues.
    for queues in [2u16, 4, 16] {
        let mut table = PortTableBuilder::new(steering(queues), config())
            .build(1)
            .expect("table");
        let id = table.dest_id_or_insert(&dest);
        let name = format!("dynamic search take+release ({queues} queues)");
        c.bench_function(&name, |b| {
            b.iter(|| {
                let p = table.take_id(black_box(id), now).expect("port");
                table.release_id(id, black_box(p), now).expect("release");
            })
        });
        report(&name, &table);
    }

    // (c) The kernel's choice: socket + bind(127.0.0.1:0) + getsockname + close, and the
    // socket + close part alone.
    let any = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0));
    c.bench_function("kernel socket+bind(0)+getsockname+close", |b| {
        b.iter(|| {
            let s = Socket::new(Domain::IPV4, Type::STREAM, None).expect("socket");
            s.bind(&any.into()).expect("bind");
            black_box(s.local_addr().expect("getsockname"));
        })
    });
    c.bench_function("kernel socket+close (baseline)", |b| {
        b.iter(|| black_box(Socket::new(Domain::IPV4, Type::STREAM, None).expect("socket")))
    });
}

criterion_group!(benches, ports);
criterion_main!(benches);
