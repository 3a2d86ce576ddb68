//! 0-RTT's anti-replay: single-use session tickets kept by the process ([`SingleUseTickets`]).
//!
//! Early data can be replayed: whoever captured a client's first flight (its Initial with the
//! ClientHello, and the 0-RTT packets after it) can send it again, and a server that accepts
//! the same early data twice runs the request twice. RFC 8446 §8.1's remedy is single-use
//! tickets, which rustls makes a condition of 0-RTT: it accepts early data only on a
//! *stateful* ticket (an identifier of a session the server stores, not the session sealed
//! under the ticket keys), and it *takes* that session out of the store as it resumes it.
//! A replayed ClientHello then names a session that is gone: the handshake is a full one,
//! with no early data (and the replayer, who lacks the client's keys, cannot finish it).
//!
//! The store is the process's, shared by its zones: a ticket one zone issued resumes in
//! another, and a replay cannot succeed by reaching a zone that has not seen the ticket.
//! After a binary upgrade or a restart the new process knows none of the old tickets (a full
//! handshake, no replay either); a reload keeps them. What it costs: such tickets resume on
//! this process only, not on another host of a `[cluster]` (whose stateless ticket keys ringx
//! uses when 0-RTT is off).
//!
//! **Bounds.** At most [`CAPACITY`] sessions (a few hundred bytes each: about 10 MB in all);
//! past it the oldest is dropped, and a client that comes back with that ticket gets a full
//! handshake. Dropping can never allow a replay: a session leaves the store, it never returns.
//! A session older than [`LIFETIME`] (what rustls tells clients a stateful ticket lives) is
//! refused as it is taken. rustls checks, in addition, that the age the client gives the
//! ticket agrees with the server's to within 60 seconds (RFC 8446 §8.3's freshness check).
//! The lock is taken once per ticket issued and once per resumption: on handshakes only.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rustls::server::{ProducesTickets, StoresServerSessions};

/// Sessions kept at most.
pub const CAPACITY: usize = 32 * 1024;

/// How long a session can be resumed: rustls's stated lifetime of its stateful tickets.
pub const LIFETIME: Duration = Duration::from_secs(24 * 3600);

/// Sessions by ticket, each resumable once.
#[derive(Debug)]
pub struct SingleUseTickets {
    inner: Mutex<Inner>,
    capacity: usize,
    lifetime: Duration,
}

#[derive(Debug, Default)]
struct Inner {
    /// Session by ticket, and when it was stored (which tells an entry of `order` that is
    /// still the one stored under its ticket).
    sessions: HashMap<Vec<u8>, (Vec<u8>, Instant)>,
    /// Tickets oldest first; an entry whose session was taken (or replaced) is skipped.
    order: VecDeque<(Vec<u8>, Instant)>,
}

impl Default for SingleUseTickets {
    fn default() -> SingleUseTickets {
        SingleUseTickets::new(CAPACITY, LIFETIME)
    }
}

impl SingleUseTickets {
    /// A store of at most `capacity` sessions, each resumable for `lifetime`.
    pub fn new(capacity: usize, lifetime: Duration) -> SingleUseTickets {
        SingleUseTickets {
            inner: Mutex::new(Inner::default()),
            capacity: capacity.max(1),
            lifetime,
        }
    }

    /// Sessions stored now.
    pub fn len(&self) -> usize {
        self.lock().sessions.len()
    }

    /// Whether no session is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A zone that panicked holding the lock left the maps whole (every change to them is
        // one call that cannot fail half-way), so the store goes on.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Inner {
    /// Drops the oldest sessions until fewer than `capacity` are left, and the entries of
    /// `order` that no longer name a stored session.
    fn make_room(&mut self, capacity: usize) {
        while self.sessions.len() >= capacity || self.order.len() > 2 * capacity {
            let Some((ticket, at)) = self.order.pop_front() else {
                return;
            };
            if self.sessions.get(&ticket).is_some_and(|(_, t)| *t == at) {
                self.sessions.remove(&ticket);
            }
        }
    }
}

impl StoresServerSessions for SingleUseTickets {
    fn put(&self, ticket: Vec<u8>, session: Vec<u8>) -> bool {
        let now = Instant::now();
        let mut g = self.lock();
        g.make_room(self.capacity);
        g.order.push_back((ticket.clone(), now));
        g.sessions.insert(ticket, (session, now));
        true
    }

    /// TLS 1.2's session IDs: QUIC has TLS 1.3 only, and nothing is resumed twice here.
    fn get(&self, _ticket: &[u8]) -> Option<Vec<u8>> {
        None
    }

    fn take(&self, ticket: &[u8]) -> Option<Vec<u8>> {
        let (session, at) = self.lock().sessions.remove(ticket)?;
        (at.elapsed() < self.lifetime).then_some(session)
    }

    fn can_cache(&self) -> bool {
        true
    }
}

/// No stateless tickets: rustls then issues stateful ones, from its session store.
#[derive(Debug)]
pub struct StatefulOnly;

impl ProducesTickets for StatefulOnly {
    fn enabled(&self) -> bool {
        false
    }
    fn lifetime(&self) -> u32 {
        0
    }
    fn encrypt(&self, _plain: &[u8]) -> Option<Vec<u8>> {
        None
    }
    fn decrypt(&self, _cipher: &[u8]) -> Option<Vec<u8>> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(i: u32) -> Vec<u8> {
        i.to_be_bytes().to_vec()
    }

    #[test]
    fn a_ticket_resumes_once() {
        let s = SingleUseTickets::default();
        assert!(s.put(t(1), b"session".to_vec()));
        assert_eq!(s.get(&t(1)), None);
        assert_eq!(s.take(&t(1)).as_deref(), Some(&b"session"[..]));
        assert_eq!(s.take(&t(1)), None, "a second use is a replay");
        assert!(s.is_empty());
    }

    #[test]
    fn the_oldest_go_past_capacity_and_never_come_back() {
        let s = SingleUseTickets::new(3, LIFETIME);
        for i in 0..5 {
            s.put(t(i), t(i));
        }
        assert_eq!(s.len(), 3);
        assert_eq!(s.take(&t(0)), None);
        assert_eq!(s.take(&t(1)), None);
        assert_eq!(s.take(&t(4)), Some(t(4)));
        // Taken ones leave holes in the order, which do not evict the live ones.
        s.put(t(5), t(5));
        s.put(t(6), t(6));
        assert_eq!(s.take(&t(2)), None);
        assert_eq!(s.take(&t(3)), Some(t(3)));
        assert_eq!(s.take(&t(5)), Some(t(5)));
        assert_eq!(s.take(&t(6)), Some(t(6)));
        assert_eq!(s.take(&t(0)), None);
    }

    #[test]
    fn the_order_stays_bounded_when_tickets_are_taken() {
        let s = SingleUseTickets::new(4, LIFETIME);
        for i in 0..1000 {
            s.put(t(i), t(i));
            assert_eq!(s.take(&t(i)), Some(t(i)));
            assert!(s.lock().order.len() <= 2 * 4 + 1);
        }
    }

    #[test]
    fn an_expired_session_is_refused() {
        let s = SingleUseTickets::new(4, Duration::ZERO);
        s.put(t(1), t(1));
        assert_eq!(s.take(&t(1)), None);
        assert!(s.is_empty());
    }
}
