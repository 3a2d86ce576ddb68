//! L7 → XDP feedback: a client that keeps being refused by a limit (or keeps sending
//! malformed requests) is pushed into the XDP filter's block list for a while, so its packets
//! are dropped in the driver before the kernel allocates anything for them.
//!
//! The zones only count: refusals per client address go into one shared table (the lock-free
//! one of `limit.rs`), and the zone whose refusal reaches the threshold hands the address to
//! the escalation thread over a bounded channel (`try_send`: a zone never waits, and a full
//! channel drops the request, counted). That thread owns the block list (one bpf(2) update
//! per block and per unblock), keeps every block's expiry and removes it when it runs out.
//! Only addresses the proxy added are removed: one the operator blocked stays.
//!
//! Only the connection's own address is escalated: an address learned from a PROXY header or
//! a trusted `X-Forwarded-For` is not where the packets come from, and blocking the proxy in
//! front would block every client behind it.

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::limit::Table;

/// When to escalate, compiled from `escalate = { after, within, block_for }`.
#[derive(Clone, Copy, Debug)]
pub struct Escalation {
    pub after: u32,
    pub within: Duration,
    pub block_for: Duration,
}

/// Counters of both sides, for `/metrics`.
#[derive(Default)]
pub struct Stats {
    /// Addresses handed to the escalation thread by the zones.
    pub requested: AtomicU64,
    /// Requests dropped because the channel was full or no escalation thread runs.
    pub dropped: AtomicU64,
    /// Blocks added to the XDP list, and removed when they ran out.
    pub blocked: AtomicU64,
    pub expired: AtomicU64,
    /// Addresses blocked now.
    pub active: AtomicU64,
    /// Block-list updates that failed.
    pub errors: AtomicU64,
}

pub fn stats() -> &'static Stats {
    static S: OnceLock<Stats> = OnceLock::new();
    S.get_or_init(Stats::default)
}

/// The shared table of refusals per address.
fn table() -> &'static Table {
    Table::get("escalate", "", 1 << 16)
}

struct Block {
    ip: IpAddr,
    for_: Duration,
}

static SENDER: Mutex<Option<SyncSender<Block>>> = Mutex::new(None);

thread_local! {
    /// Each zone's copy of the sender, taken once (the mutex is not on the request path).
    static LOCAL: std::cell::RefCell<Option<SyncSender<Block>>> = const { std::cell::RefCell::new(None) };
}

/// A refusal (or a malformed request) from `ip`, the connection's own address: counted, and
/// escalated when it is the `after`th within `within`.
pub fn refused(ip: IpAddr, e: &Escalation, now: Instant) {
    let ip = ip.to_canonical();
    let key = match ip {
        IpAddr::V4(a) => super::key::hash64(&a.octets()),
        IpAddr::V6(a) => super::key::hash64(&a.octets()),
    };
    let ms = super::limit::nanos(now) / 1_000_000;
    let n = table().count_in_window(key, ms, e.within.as_millis() as u64);
    if n != u64::from(e.after) {
        return;
    }
    let s = stats();
    let sent = LOCAL.with(|l| {
        let mut l = l.borrow_mut();
        if l.is_none() {
            *l = SENDER.lock().unwrap_or_else(|p| p.into_inner()).clone();
        }
        match l.as_ref().map(|tx| {
            tx.try_send(Block {
                ip,
                for_: e.block_for,
            })
        }) {
            Some(Ok(())) => true,
            Some(Err(TrySendError::Full(_))) | None => false,
            Some(Err(TrySendError::Disconnected(_))) => {
                *l = None;
                false
            }
        }
    });
    if sent {
        s.requested.fetch_add(1, Ordering::Relaxed);
    } else {
        s.dropped.fetch_add(1, Ordering::Relaxed);
    }
}

/// The escalation thread; dropping it stops the thread and lifts the blocks it added.
pub struct Escalator {
    stop: Option<SyncSender<Block>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// Starts the escalation thread on the block list pinned under `pin_dir` (the `[xdp]`
/// filter's). Opened now, while privileges last.
pub fn start(pin_dir: &Path) -> Result<Escalator, String> {
    let list = ringx_xdp::BlockList::open_pinned_at(pin_dir).map_err(|e| {
        format!(
            "escalation: cannot open the XDP block list under {}: {e}",
            pin_dir.display()
        )
    })?;
    // Entries an earlier run added and could not lift (it was killed) go now; the clients
    // are escalated again if they go on.
    let mut left = 0;
    for (c, o) in list.entries().map_err(|e| format!("escalation: {e}"))? {
        if o == ringx_xdp::Origin::Api && list.unblock(c).unwrap_or(false) {
            left += 1;
        }
    }
    if left > 0 {
        tracing::info!("escalation: lifted {left} blocks left by an earlier run");
    }
    let (tx, rx) = sync_channel::<Block>(4096);
    *SENDER.lock().unwrap_or_else(|p| p.into_inner()) = Some(tx.clone());
    let thread = std::thread::Builder::new()
        .name("ringx-escalate".into())
        .spawn(move || run(list, rx))
        .map_err(|e| format!("escalation: cannot start its thread: {e}"))?;
    Ok(Escalator {
        stop: Some(tx),
        thread: Some(thread),
    })
}

impl Drop for Escalator {
    fn drop(&mut self) {
        *SENDER.lock().unwrap_or_else(|p| p.into_inner()) = None;
        // A zero-length block is the stop signal (the zones' senders may outlive this).
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(Block {
                ip: IpAddr::from([0, 0, 0, 0]),
                for_: Duration::ZERO,
            });
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run(list: ringx_xdp::BlockList, rx: Receiver<Block>) {
    let s = stats();
    let mut active: HashMap<IpAddr, Instant> = HashMap::new();
    loop {
        let now = Instant::now();
        let next = active.values().min().copied();
        let msg = match next {
            Some(at) => rx.recv_timeout(at.saturating_duration_since(now)),
            None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
        };
        match msg {
            Ok(b) if b.for_.is_zero() => break,
            Ok(b) => {
                let until = Instant::now() + b.for_;
                if let Some(t) = active.get_mut(&b.ip) {
                    *t = (*t).max(until);
                    continue;
                }
                match list.block(ringx_xdp::Cidr::from(b.ip)) {
                    Ok(true) => {
                        active.insert(b.ip, until);
                        s.blocked.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(
                            "escalation: {} blocked in XDP for {:?} (it kept exceeding a limit)",
                            b.ip,
                            b.for_
                        );
                    }
                    Ok(false) => {} // blocked by the operator already: theirs to lift
                    Err(e) => {
                        s.errors.fetch_add(1, Ordering::Relaxed);
                        tracing::error!("escalation: cannot block {}: {e}", b.ip);
                    }
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
        let now = Instant::now();
        let due: Vec<IpAddr> = active
            .iter()
            .filter(|(_, t)| **t <= now)
            .map(|(ip, _)| *ip)
            .collect();
        for ip in due {
            active.remove(&ip);
            lift(&list, ip, s);
            s.expired.fetch_add(1, Ordering::Relaxed);
        }
        s.active.store(active.len() as u64, Ordering::Relaxed);
    }
    for ip in active.into_keys() {
        lift(&list, ip, s);
    }
    s.active.store(0, Ordering::Relaxed);
}

fn lift(list: &ringx_xdp::BlockList, ip: IpAddr, s: &Stats) {
    match list.unblock(ringx_xdp::Cidr::from(ip)) {
        Ok(_) => tracing::info!("escalation: {ip} unblocked"),
        Err(e) => {
            s.errors.fetch_add(1, Ordering::Relaxed);
            tracing::error!("escalation: cannot unblock {ip}: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An address is handed over once, at exactly `after` refusals within `within` (with no
    /// escalation thread running here, the hand-over is counted as dropped); another window
    /// counts afresh.
    #[test]
    fn an_address_is_escalated_once_at_the_threshold() {
        let e = Escalation {
            after: 3,
            within: Duration::from_secs(10),
            block_for: Duration::from_secs(60),
        };
        let ip: IpAddr = "198.51.100.77".parse().unwrap();
        let t0 = Instant::now();
        // No other unit test escalates (escalation needs an [xdp] section).
        let dropped = || stats().dropped.load(Ordering::Relaxed);
        let before = dropped();
        refused(ip, &e, t0);
        refused(ip, &e, t0);
        assert_eq!(dropped(), before, "under the threshold");
        refused(ip, &e, t0);
        assert_eq!(dropped(), before + 1, "handed over at the third refusal");
        for _ in 0..5 {
            refused(ip, &e, t0 + Duration::from_secs(1));
        }
        assert_eq!(dropped(), before + 1, "not again within the window");
        let other: IpAddr = "::ffff:198.51.100.78".parse().unwrap();
        let later = t0 + Duration::from_secs(20);
        for _ in 0..3 {
            refused(other, &e, later);
        }
        assert_eq!(dropped(), before + 2, "another address counts on its own");
        for _ in 0..3 {
            refused(ip, &e, later);
        }
        assert_eq!(dropped(), before + 3, "a new window counts afresh");
    }
}
