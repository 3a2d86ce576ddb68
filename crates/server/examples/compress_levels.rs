//! The cost of each compression level on one body: CPU time per compression (median of a
//! few timed rounds, one thread) and the compressed size, for gzip 1-9, brotli 0-9 and zstd
//! at a spread of levels. `bench/compress.py` runs it to choose the default levels.
//!
//! Usage: compress_levels FILE [ROUNDS]  (prints one JSON object per line)

use std::time::Instant;

use ringx_server::compress::encoder::compress;
use ringx_server::compress::Coding;

fn cpu_ns() -> u128 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into the live local.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u128 * 1_000_000_000 + ts.tv_nsec as u128
}

fn main() {
    let mut args = std::env::args().skip(1);
    let path = args.next().expect("usage: compress_levels FILE [ROUNDS]");
    let rounds: usize = args.next().map_or(7, |r| r.parse().expect("rounds"));
    let data = std::fs::read(&path).expect("read the body");
    let sets: [(Coding, &[u32]); 3] = [
        (Coding::Gzip, &[1, 2, 3, 4, 5, 6, 7, 8, 9]),
        (Coding::Brotli, &[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]),
        (Coding::Zstd, &[1, 2, 3, 5, 7, 9, 12, 15, 19]),
    ];
    for (coding, levels) in sets {
        for &level in levels {
            let mut size = 0;
            let mut samples = Vec::new();
            for _ in 0..rounds {
                // Enough repetitions for a measurable interval.
                let reps = 20;
                let (c0, w0) = (cpu_ns(), Instant::now());
                for _ in 0..reps {
                    size = compress(coding, level, &data).expect("compress").len();
                }
                let _wall = w0.elapsed();
                samples.push((cpu_ns() - c0) as f64 / reps as f64 / 1000.0);
            }
            samples.sort_by(f64::total_cmp);
            println!(
                "{{\"coding\": \"{}\", \"level\": {level}, \"us\": {:.1}, \"bytes\": {size}, \"input\": {}}}",
                coding.token(),
                samples[samples.len() / 2],
                data.len()
            );
        }
    }
}
