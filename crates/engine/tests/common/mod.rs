//! Shared set-up for the engine's end-to-end tests: one zone on its own thread.

use std::net::SocketAddr;
use std::thread::JoinHandle;

use ringx_engine::{
    bind_reuseport, run_zone, EngineKind, Handler, ListenOptions, Waker, ZoneConfig,
};

/// A running zone: where it listens, how to wake it, and its thread (which returns `result`
/// applied to the handler once the zone exits).
pub struct TestZone<R> {
    pub addr: SocketAddr,
    pub waker: Waker,
    pub thread: JoinHandle<R>,
}

/// Starts `handler` on a zone with `cfg` (its engine decides the driver). Returns `None`, after
/// skipping (`ringx_kerneltest`: said, and a failure under CI), when io_uring is requested but
/// refused here.
pub fn spawn_zone<H, R>(cfg: ZoneConfig, mut handler: H, result: fn(H) -> R) -> Option<TestZone<R>>
where
    H: Handler + Send + 'static,
    R: Send + 'static,
{
    if cfg.engine == EngineKind::Uring {
        if let Err(why) = ringx_engine::uring::probe::check() {
            ringx_kerneltest::skip(format!("io_uring is unavailable here: {why}"));
            return None;
        }
    }
    let l = bind_reuseport("127.0.0.1:0".parse().unwrap(), &ListenOptions::default()).unwrap();
    let addr = l.local_addr().unwrap();
    let waker = Waker::new().unwrap();
    let w2 = waker.clone();
    let thread = std::thread::spawn(move || {
        run_zone(&cfg, vec![l], w2, &mut handler).unwrap();
        result(handler)
    });
    Some(TestZone {
        addr,
        waker,
        thread,
    })
}
