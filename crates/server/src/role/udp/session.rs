//! A zone's UDP sessions: one per (listener, destination address, client address and port),
//! each with its own connected datagram socket to the server the client's address hashed to.
//! Looked up by that key for datagrams from the client, and by the socket's handle for
//! datagrams from the server; a slab of records with a free list, so a busy zone allocates
//! nothing per datagram and a closed session's slot is reused.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::time::Instant;

use ringx_engine::{ConnId, ListenerId};

/// What tells one session from another.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Key {
    /// Index of the listen address in `routes.udp_listen`.
    pub route: u32,
    /// The address the client wrote to (wildcard listeners; answers leave from it).
    pub local: Option<IpAddr>,
    pub peer: SocketAddr,
}

/// The most a session holds for a socket that is still connecting: datagrams, and bytes.
pub const HELD_MAX: usize = 16;
pub const HELD_BYTES: usize = 64 * 1024;

/// One client's session.
pub struct Session {
    pub key: Key,
    /// Bumped per session in this slot: timer entries name (slot, gen).
    pub gen: u32,
    /// The engine's id of the listener answers leave from.
    pub listener: ListenerId,
    /// Index of its `[[stream]]`.
    pub stream: usize,
    /// The upstream and server it goes to, in the upstream state of generation `pools_gen`.
    pub upstream: usize,
    pub server: usize,
    pub pools_gen: u32,
    /// The connected datagram socket to the server.
    pub up: ConnId,
    pub connected: bool,
    /// Datagrams from the client while the socket connects (bounded: `HELD_MAX`,
    /// `HELD_BYTES`).
    pub held: Vec<Vec<u8>>,
    pub held_bytes: usize,
    /// Answers still expected (`responses`): the session ends when this reaches 0.
    pub expect: Option<u64>,
    /// A datagram came back from the server.
    pub answered: bool,
    /// When the session ends unless a datagram passes either way first, and when its
    /// timer-wheel entry fires (an entry that fires early is filed again, as for client
    /// connections).
    pub deadline: Instant,
    pub wheel_at: Option<Instant>,
    /// Asked to close (`io.close` on its socket); the record goes at `on_closed`.
    pub closing: bool,
}

/// Sessions by slot, with the two indices into them.
#[derive(Default)]
pub struct Sessions {
    slots: Vec<Option<Session>>,
    gens: Vec<u32>,
    free: Vec<u32>,
    /// foldhash, seeded per map: a few multiplies per key instead of SipHash's rounds (the
    /// lookup is made for every datagram from a client), still keyed randomly since the
    /// addresses come from the network.
    by_key: HashMap<Key, u32, foldhash::fast::RandomState>,
    /// Slot of the session whose socket is each handle (`u32::MAX`: none).
    by_conn: Vec<u32>,
    /// Sessions open per stream.
    pub per_stream: Vec<u32>,
    pub open: usize,
}

const NONE: u32 = u32::MAX;

impl Sessions {
    /// The slot of the session with `key`.
    #[inline]
    pub fn find(&self, key: &Key) -> Option<u32> {
        self.by_key.get(key).copied()
    }

    /// The slot of the session whose socket is `u`.
    #[inline]
    pub fn by_conn(&self, u: ConnId) -> Option<u32> {
        match self.by_conn.get(u.index()) {
            Some(&i) if i != NONE => Some(i),
            _ => None,
        }
    }

    pub fn get_mut(&mut self, i: u32) -> Option<&mut Session> {
        self.slots.get_mut(i as usize).and_then(Option::as_mut)
    }

    pub fn get(&self, i: u32) -> Option<&Session> {
        self.slots.get(i as usize).and_then(Option::as_ref)
    }

    /// Stores a new session, giving it the slot's next generation; returns its slot.
    pub fn insert(&mut self, mut s: Session) -> u32 {
        let i = self.free.pop().unwrap_or_else(|| {
            self.slots.push(None);
            self.gens.push(0);
            (self.slots.len() - 1) as u32
        });
        let g = &mut self.gens[i as usize];
        *g = g.wrapping_add(1);
        s.gen = *g;
        let u = s.up.index();
        if self.by_conn.len() <= u {
            self.by_conn.resize(u + 1, NONE);
        }
        self.by_conn[u] = i;
        self.by_key.insert(s.key, i);
        if self.per_stream.len() <= s.stream {
            self.per_stream.resize(s.stream + 1, 0);
        }
        self.per_stream[s.stream] += 1;
        self.open += 1;
        self.slots[i as usize] = Some(s);
        i
    }

    /// Takes the session in slot `i` out of the lookup by key: a closing session, whose
    /// client's next datagram opens a new session while the old socket's close completes.
    pub fn detach(&mut self, i: u32) {
        if let Some(s) = self.get(i) {
            let key = s.key;
            if self.by_key.get(&key) == Some(&i) {
                self.by_key.remove(&key);
            }
        }
    }

    /// Removes the session in slot `i`.
    pub fn remove(&mut self, i: u32) -> Option<Session> {
        let s = self.slots.get_mut(i as usize)?.take()?;
        if self.by_key.get(&s.key) == Some(&i) {
            self.by_key.remove(&s.key);
        }
        if let Some(x) = self.by_conn.get_mut(s.up.index()) {
            *x = NONE;
        }
        if let Some(n) = self.per_stream.get_mut(s.stream) {
            *n = n.saturating_sub(1);
        }
        self.open -= 1;
        self.free.push(i);
        Some(s)
    }

    /// The session in slot `i` now has key `new` (a reload renumbered its listen address).
    pub fn rekey(&mut self, old: &Key, new: Key, i: u32) {
        if self.by_key.get(old) == Some(&i) {
            self.by_key.remove(old);
            self.by_key.insert(new, i);
        }
    }

    /// A session moved from stream `from` to stream `to` (a reload renumbered the streams).
    pub fn moved(&mut self, from: usize, to: usize) {
        if let Some(n) = self.per_stream.get_mut(from) {
            *n = n.saturating_sub(1);
        }
        if self.per_stream.len() <= to {
            self.per_stream.resize(to + 1, 0);
        }
        self.per_stream[to] += 1;
    }

    /// Every open session's slot.
    pub fn slots(&self) -> impl Iterator<Item = u32> + '_ {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.as_ref().map(|_| i as u32))
    }

    /// Sessions open on stream `i`.
    pub fn on_stream(&self, i: usize) -> u32 {
        self.per_stream.get(i).copied().unwrap_or(0)
    }
}
