//! Runs a future to completion on the calling thread. instant-acme is async; ringx's ACME
//! work runs on a thread of its own with a blocking HTTP client (`crate::http`), so its
//! futures complete without ever waiting on a reactor, and no runtime is needed.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::Thread;

struct Unpark(Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// Polls `f` until it is ready, parking the thread between polls.
pub fn block_on<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park();
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn ready_futures_complete() {
        assert_eq!(super::block_on(async { 40 + 2 }), 42);
    }
}
