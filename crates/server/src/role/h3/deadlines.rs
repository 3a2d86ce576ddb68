//! When a zone's QUIC connections are due: each one's next quinn-proto timer, kept so that the
//! zone wakes only for deadlines that still hold.
//!
//! quinn-proto moves a connection's deadline with nearly every packet: the idle timeout with
//! each one received, the loss-detection timer (RTT plus the peer's ack delay, some 25 ms) with
//! each ack-eliciting one sent. An entry per move would grow the heap without bound, so a
//! connection has one entry that counts, its earliest (`queued`). A later deadline gets no
//! entry of its own: the entry moves to it when it comes to the front ([`Deadlines::next`]).
//! An earlier one gets a new entry, and the old one is skipped when it comes. Such stale
//! entries could wait long (a connection quiet for a moment has its idle deadline, tens of
//! seconds away, queued; its next packet sent queues the loss-detection one in front): once
//! the heap holds more than twice an entry per slot, the stale ones are swept out.
//!
//! The front is put right before the zone is told when to wake, not when it is due: with a
//! hundred connections in a closed loop, the loss-detection deadlines they left behind stood
//! a quarter of a millisecond apart, and each wait then carried a timer earlier than the
//! kernel's tick, which costs two writes of the CPU's timer (a VM exit each on a virtual
//! machine) per wait. Waking where the deadlines stand took a third off the CPU per request
//! at 100 connections × 1 stream (bench/README.md).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Instant;

/// One connection slot's deadlines.
#[derive(Clone, Copy, Default)]
struct Slot {
    /// The generation of the connection in the slot.
    gen: u32,
    /// When quinn-proto last asked to be woken (None: it has no timer).
    deadline: Option<Instant>,
    /// The slot's entry in the heap that counts: never later than `deadline`.
    queued: Option<Instant>,
}

/// What [`Deadlines::next`] found at the front.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Front {
    /// The connection in this slot is due (its deadline is then forgotten).
    Due(u32),
    /// Nothing is due; the next deadline, if any.
    Next(Option<Instant>),
}

/// Entries beyond twice the slots' number that the heap may hold before it is swept.
const SLACK: usize = 64;

/// The deadlines of a zone's QUIC connections, by slot.
#[derive(Default)]
pub struct Deadlines {
    /// (when, slot, generation): entries that count, and stale ones not yet skipped.
    heap: BinaryHeap<Reverse<(Instant, u32, u32)>>,
    slots: Vec<Slot>,
}

impl Deadlines {
    /// The connection of generation `gen` in `slot` is next due at `at` (None: it has no
    /// timer). Returns true if that is earlier than the slot's entry: the caller asks the zone
    /// for a wake-up then if its next timer turn comes later.
    pub fn set(&mut self, slot: u32, gen: u32, at: Option<Instant>) -> bool {
        let i = slot as usize;
        if self.slots.len() <= i {
            self.slots.resize(i + 1, Slot::default());
        }
        let s = &mut self.slots[i];
        if s.gen != gen {
            *s = Slot {
                gen,
                ..Slot::default()
            };
        }
        s.deadline = at;
        match at {
            Some(at) if s.queued.is_none_or(|q| at < q) => {
                s.queued = Some(at);
                self.heap.push(Reverse((at, slot, gen)));
                if self.heap.len() > 2 * self.slots.len() + SLACK {
                    self.sweep();
                }
                true
            }
            _ => false,
        }
    }

    /// Drops the entries that no longer count: at most one per slot stays. Linear, and run
    /// only after as many pushes as there are slots, so a push's share is constant.
    fn sweep(&mut self) {
        let slots = &self.slots;
        self.heap.retain(|&Reverse((at, slot, gen))| {
            let s = &slots[slot as usize];
            s.gen == gen && s.queued == Some(at)
        });
    }

    /// The connection in `slot` is gone: its entries are skipped.
    pub fn clear(&mut self, slot: u32) {
        if let Some(s) = self.slots.get_mut(slot as usize) {
            s.deadline = None;
            s.queued = None;
        }
    }

    /// At `now`: the connection whose deadline is earliest, if it has come, or else when the
    /// earliest deadline is. Entries on the way that no longer count are dropped, and those
    /// whose deadline moved later are queued again there, whether due or not.
    pub fn next(&mut self, now: Instant) -> Front {
        while let Some(&Reverse((at, slot, gen))) = self.heap.peek() {
            let s = &mut self.slots[slot as usize];
            if s.gen != gen || s.queued != Some(at) {
                // The connection is gone, or an earlier entry replaced this one.
                self.heap.pop();
                continue;
            }
            match s.deadline {
                Some(d) if d > at => {
                    self.heap.pop();
                    s.queued = Some(d);
                    self.heap.push(Reverse((d, slot, gen)));
                    continue;
                }
                None => {
                    self.heap.pop();
                    s.queued = None;
                    continue;
                }
                Some(_) => {}
            }
            if at > now {
                return Front::Next(Some(at));
            }
            self.heap.pop();
            s.queued = None;
            s.deadline = None;
            return Front::Due(slot);
        }
        Front::Next(None)
    }

    /// Entries in the heap, stale ones included.
    #[cfg(test)]
    fn entries(&self) -> usize {
        self.heap.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::time::Duration;

    fn ms(t0: Instant, n: u64) -> Instant {
        t0 + Duration::from_millis(n)
    }

    #[test]
    fn a_deadline_moved_later_is_woken_for_where_it_stands() {
        let t0 = Instant::now();
        let mut d = Deadlines::default();
        assert!(d.set(0, 1, Some(ms(t0, 25))), "a first deadline asks");
        for n in 26..=40 {
            assert!(!d.set(0, 1, Some(ms(t0, n))), "a later one does not");
        }
        assert_eq!(d.entries(), 1, "one entry however often it moved");
        assert_eq!(d.next(t0), Front::Next(Some(ms(t0, 40))));
        assert_eq!(d.next(ms(t0, 39)), Front::Next(Some(ms(t0, 40))));
        assert_eq!(d.next(ms(t0, 40)), Front::Due(0));
        assert_eq!(d.next(ms(t0, 40)), Front::Next(None), "due once");
    }

    #[test]
    fn a_deadline_moved_earlier_gets_its_own_entry() {
        let t0 = Instant::now();
        let mut d = Deadlines::default();
        d.set(0, 1, Some(ms(t0, 30_000)));
        assert!(d.set(0, 1, Some(ms(t0, 5))));
        assert_eq!(d.next(t0), Front::Next(Some(ms(t0, 5))));
        assert_eq!(d.next(ms(t0, 5)), Front::Due(0));
        // The old entry is stale: nothing is due at it.
        assert_eq!(d.next(ms(t0, 30_000)), Front::Next(None));
    }

    #[test]
    fn a_due_deadline_that_moved_on_waits() {
        let t0 = Instant::now();
        let mut d = Deadlines::default();
        d.set(0, 1, Some(ms(t0, 10)));
        d.set(0, 1, Some(ms(t0, 20)));
        assert_eq!(d.next(ms(t0, 15)), Front::Next(Some(ms(t0, 20))));
        // Moved on again, and due by the time the zone looks.
        d.set(0, 1, Some(ms(t0, 25)));
        assert_eq!(d.next(ms(t0, 30)), Front::Due(0));
    }

    #[test]
    fn gone_and_replaced_connections_are_not_due() {
        let t0 = Instant::now();
        let mut d = Deadlines::default();
        d.set(0, 1, Some(ms(t0, 10)));
        d.set(1, 1, Some(ms(t0, 20)));
        d.set(2, 1, Some(ms(t0, 30)));
        d.clear(0);
        // Slot 1's connection ended and another took the slot.
        d.set(1, 2, Some(ms(t0, 50)));
        // Slot 2's connection has no timer any more.
        d.set(2, 1, None);
        assert_eq!(d.next(ms(t0, 40)), Front::Next(Some(ms(t0, 50))));
        assert_eq!(d.next(ms(t0, 50)), Front::Due(1));
        assert_eq!(d.next(ms(t0, 100)), Front::Next(None));
        assert_eq!(d.entries(), 0);
    }

    #[test]
    fn stale_entries_do_not_pile_up() {
        let t0 = Instant::now();
        let mut d = Deadlines::default();
        // Fifty busy connections for 40 s. Each millisecond a connection either sent a packet
        // (its loss-detection deadline, 25 ms on) or had everything acknowledged (only its
        // idle deadline is left, 30 s on). Whenever its entry comes to the front with the
        // idle deadline standing it is queued there, and its next packet queues a new entry
        // in front of it: the idle one is stale, behind the live ones, for 30 s.
        for ms in 0..40_000u32 {
            let now = t0 + Duration::from_millis(u64::from(ms));
            for slot in 0..50u32 {
                let at = if (ms + slot) % 2 == 0 {
                    now + Duration::from_millis(25)
                } else {
                    now + Duration::from_secs(30)
                };
                d.set(slot, 1, Some(at));
            }
            assert!(matches!(d.next(now), Front::Next(Some(_))));
            assert!(
                d.entries() <= 2 * 50 + SLACK + 1,
                "{} entries after {ms} ms",
                d.entries()
            );
        }
    }

    #[derive(Clone, Debug)]
    enum Op {
        /// Slot, whether the slot gets a new connection, deadline (ms after now, or none).
        Set(u32, bool, Option<u64>),
        Clear(u32),
        /// The clock moves this many ms, then the zone takes what is due.
        Turn(u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0..6u32, any::<bool>(), proptest::option::weighted(0.9, 0..60u64))
                .prop_map(|(s, new, at)| Op::Set(s, new, at)),
            1 => (0..6u32).prop_map(Op::Clear),
            2 => (0..40u64).prop_map(Op::Turn),
        ]
    }

    proptest! {
        /// Against a model that keeps each slot's one current deadline: every connection is
        /// due exactly when its current deadline has come, earliest first, and `Next` is the
        /// earliest current deadline.
        #[test]
        fn matches_a_map_of_current_deadlines(ops in proptest::collection::vec(op(), 1..200)) {
            let t0 = Instant::now();
            let mut now = t0;
            let mut d = Deadlines::default();
            let mut gens = [1u32; 6];
            let mut model: [Option<Instant>; 6] = [None; 6];
            for o in ops {
                match o {
                    Op::Set(s, new, at) => {
                        if new {
                            gens[s as usize] += 1;
                        }
                        let at = at.map(|n| now + Duration::from_millis(n));
                        d.set(s, gens[s as usize], at);
                        model[s as usize] = at;
                    }
                    Op::Clear(s) => {
                        d.clear(s);
                        model[s as usize] = None;
                    }
                    Op::Turn(n) => {
                        now += Duration::from_millis(n);
                        loop {
                            let earliest = model.iter().flatten().min().copied();
                            match d.next(now) {
                                Front::Due(s) => {
                                    let at = model[s as usize];
                                    prop_assert!(at.is_some_and(|t| t <= now));
                                    prop_assert_eq!(at, earliest);
                                    model[s as usize] = None;
                                }
                                Front::Next(at) => {
                                    prop_assert_eq!(at, earliest);
                                    prop_assert!(at.is_none_or(|t| t > now));
                                    prop_assert!(d.entries() <= 2 * 6 + SLACK + 1);
                                    break;
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}
