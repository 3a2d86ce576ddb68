//! Session ticket keys that several hosts share (`[cluster]`, issue 42): ringx's own
//! [`ProducesTickets`], whose keys are put in by someone else (the cluster crate's ticket
//! thread, from Redis) instead of being made here, so that a ticket one host issued resumes
//! on another.
//!
//! A ticket is `key id (16 bytes) ‖ nonce (12) ‖ ChaCha20-Poly1305(state) ‖ tag (16)`, the
//! key id also authenticated as associated data. The id names the key that sealed it: a host
//! opens a ticket with that key alone, and refuses one whose id it does not know without
//! trying anything. One key seals (the current one); the others open only (the previous
//! one, kept one more period as rustls's `TicketRotator` keeps its previous generation).
//!
//! Nothing here waits: the handshake takes a read lock long enough to clone an `Arc`. Until
//! keys are put in, no ticket is issued (rustls then sends none in TLS 1.3 and an empty one
//! in TLS 1.2: the next handshake is a full one), so that no ticket is sealed under a key
//! that is replaced before anyone else could know it.
//!
//! Keys are secrets: their bytes are wiped when dropped ([`KeyMaterial`] in a
//! [`Zeroizing`], *ring*'s key schedule in a [`Wiped`]) and never printed (`Debug` shows
//! the id only).

use std::fmt;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, OnceLock, RwLock};

use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, CHACHA20_POLY1305, NONCE_LEN};
use ring::rand::{SecureRandom, SystemRandom};
use rustls::server::ProducesTickets;
use zeroize::Zeroizing;

use crate::wipe::Wiped;

/// Bytes of a key id, at the start of every ticket.
pub const ID_LEN: usize = 16;
/// Bytes of a key's secret (ChaCha20-Poly1305's key).
pub const SECRET_LEN: usize = 32;
const TAG_LEN: usize = 16;
/// What a ticket carries besides the sealed state: the id, the nonce, the tag.
pub const OVERHEAD: usize = ID_LEN + NONCE_LEN + TAG_LEN;

/// A key as it is stored and exchanged: its id, its secret, and when it was made
/// (milliseconds since the epoch, by the clock of whoever made it).
#[derive(Clone, PartialEq, Eq)]
pub struct KeyMaterial {
    pub id: [u8; ID_LEN],
    pub secret: Zeroizing<[u8; SECRET_LEN]>,
    pub created_ms: u64,
}

impl fmt::Debug for KeyMaterial {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "KeyMaterial {{ id: {}, created_ms: {}, secret: <hidden> }}",
            self.id_hex(),
            self.created_ms
        )
    }
}

impl KeyMaterial {
    /// A new key: random id and secret. `None` when the system has no random bytes.
    pub fn generate(created_ms: u64) -> Option<KeyMaterial> {
        let rng = SystemRandom::new();
        let mut id = [0u8; ID_LEN];
        let mut secret = Zeroizing::new([0u8; SECRET_LEN]);
        rng.fill(&mut id).ok()?;
        rng.fill(&mut secret[..]).ok()?;
        Some(KeyMaterial {
            id,
            secret,
            created_ms,
        })
    }

    /// The id in hex, for logs and the status page (the id says nothing of the secret).
    pub fn id_hex(&self) -> String {
        self.id.iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// A key ready to seal and open.
struct SealKey {
    id: [u8; ID_LEN],
    key: Wiped<LessSafeKey>,
}

impl SealKey {
    fn new(m: &KeyMaterial) -> Option<SealKey> {
        let unbound = UnboundKey::new(&CHACHA20_POLY1305, &m.secret[..]).ok()?;
        Some(SealKey {
            id: m.id,
            key: Wiped::new(LessSafeKey::new(unbound)),
        })
    }

    fn seal(&self, plain: &[u8]) -> Option<Vec<u8>> {
        let mut nonce = [0u8; NONCE_LEN];
        SystemRandom::new().fill(&mut nonce).ok()?;
        let mut out = Vec::with_capacity(plain.len() + OVERHEAD);
        out.extend_from_slice(&self.id);
        out.extend_from_slice(&nonce);
        out.extend_from_slice(plain);
        let tag = self
            .key
            .seal_in_place_separate_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(&self.id),
                &mut out[ID_LEN + NONCE_LEN..],
            )
            .ok()?;
        out.extend_from_slice(tag.as_ref());
        Some(out)
    }

    /// Opens a ticket whose id is this key's (the caller checked it).
    fn open(&self, ticket: &[u8]) -> Option<Vec<u8>> {
        let nonce =
            Nonce::try_assume_unique_for_key(ticket.get(ID_LEN..ID_LEN + NONCE_LEN)?).ok()?;
        let mut sealed = ticket.get(ID_LEN + NONCE_LEN..)?.to_vec();
        let n = self
            .key
            .open_in_place(nonce, Aad::from(&self.id), &mut sealed)
            .ok()?
            .len();
        sealed.truncate(n);
        Some(sealed)
    }
}

/// The keys in use: the one that seals, and those that open.
#[derive(Default)]
struct KeySet {
    current: Option<SealKey>,
    others: Vec<SealKey>,
}

impl KeySet {
    fn find(&self, id: &[u8]) -> Option<&SealKey> {
        self.current
            .iter()
            .chain(&self.others)
            .find(|k| k.id[..] == *id)
    }
}

/// Tickets issued and presented, for `/metrics`.
#[derive(Debug, Default)]
pub struct TicketCounters {
    /// Tickets sealed.
    pub issued: AtomicU64,
    /// Tickets not issued: no key yet.
    pub no_key: AtomicU64,
    /// Tickets presented and opened.
    pub opened: AtomicU64,
    /// Tickets presented under a key id this host does not know (another host's key not yet
    /// loaded, or one erased).
    pub unknown_key: AtomicU64,
    /// Tickets presented that did not open (too short, altered).
    pub refused: AtomicU64,
}

/// Ticket keys put in from outside, shared by every zone; see the module's documentation.
pub struct SharedTickets {
    keys: RwLock<Arc<KeySet>>,
    /// `[tls] ticket_key_rotate` in seconds: a key seals this long and opens as long again.
    period_s: AtomicU32,
    pub counters: TicketCounters,
}

impl fmt::Debug for SharedTickets {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.debug_struct("SharedTickets").finish_non_exhaustive()
    }
}

impl Default for SharedTickets {
    fn default() -> Self {
        SharedTickets::new()
    }
}

impl SharedTickets {
    /// No keys yet (no ticket is issued until some are put in), rotated every 6 hours.
    pub fn new() -> SharedTickets {
        SharedTickets {
            keys: RwLock::new(Arc::new(KeySet::default())),
            period_s: AtomicU32::new(6 * 3600),
            counters: TicketCounters::default(),
        }
    }

    /// The rotation period (`[tls] ticket_key_rotate`), for the lifetime tickets announce.
    pub fn set_period(&self, secs: u32) {
        self.period_s.store(secs.max(1), Relaxed);
    }

    /// Puts in the keys: `current` seals (and opens), `others` open only. A key whose
    /// secret cannot be used is left out (none can fail: any 32 bytes are a key).
    pub fn install(&self, current: Option<&KeyMaterial>, others: &[&KeyMaterial]) {
        let set = KeySet {
            current: current.and_then(SealKey::new),
            others: others
                .iter()
                .filter(|k| current.is_none_or(|c| c.id != k.id))
                .filter_map(|k| SealKey::new(k))
                .collect(),
        };
        *self.keys.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(set);
    }

    /// The ids in use: the one that seals, then those that open.
    pub fn ids(&self) -> (Option<[u8; ID_LEN]>, Vec<[u8; ID_LEN]>) {
        let k = self.snapshot();
        let current = k.current.as_ref().map(|k| k.id);
        (current, k.others.iter().map(|k| k.id).collect())
    }

    fn snapshot(&self) -> Arc<KeySet> {
        self.keys.read().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl ProducesTickets for SharedTickets {
    fn enabled(&self) -> bool {
        true
    }

    /// Twice the period, as rustls's `TicketRotator` says: a key seals for one period and
    /// opens for one more.
    fn lifetime(&self) -> u32 {
        self.period_s.load(Relaxed).saturating_mul(2)
    }

    fn encrypt(&self, plain: &[u8]) -> Option<Vec<u8>> {
        let keys = self.snapshot();
        let Some(k) = keys.current.as_ref() else {
            self.counters.no_key.fetch_add(1, Relaxed);
            return None;
        };
        let t = k.seal(plain)?;
        self.counters.issued.fetch_add(1, Relaxed);
        Some(t)
    }

    fn decrypt(&self, cipher: &[u8]) -> Option<Vec<u8>> {
        if cipher.len() < OVERHEAD {
            self.counters.refused.fetch_add(1, Relaxed);
            return None;
        }
        let keys = self.snapshot();
        let Some(k) = keys.find(&cipher[..ID_LEN]) else {
            self.counters.unknown_key.fetch_add(1, Relaxed);
            return None;
        };
        match k.open(cipher) {
            Some(p) => {
                self.counters.opened.fetch_add(1, Relaxed);
                Some(p)
            }
            None => {
                self.counters.refused.fetch_add(1, Relaxed);
                None
            }
        }
    }
}

/// The process's shared ticket keys: every configuration built with `[cluster]` and session
/// tickets takes these (across reloads, so that tickets outlive a reload), and the cluster
/// crate's ticket thread fills them.
pub fn global() -> Arc<SharedTickets> {
    static GLOBAL: OnceLock<Arc<SharedTickets>> = OnceLock::new();
    GLOBAL
        .get_or_init(|| Arc::new(SharedTickets::new()))
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(created_ms: u64) -> KeyMaterial {
        KeyMaterial::generate(created_ms).expect("random bytes")
    }

    fn with(current: &KeyMaterial, others: &[&KeyMaterial]) -> SharedTickets {
        let t = SharedTickets::new();
        t.install(Some(current), others);
        t
    }

    #[test]
    fn a_ticket_opens_on_another_holder_of_the_same_key() {
        let k = key(1);
        let (a, b) = (with(&k, &[]), with(&k.clone(), &[]));
        let t = a.encrypt(b"session state").expect("sealed");
        assert_eq!(t.len(), b"session state".len() + OVERHEAD);
        assert_eq!(&t[..ID_LEN], &k.id, "the ticket names its key");
        assert!(
            !t.windows(13).any(|w| w == b"session state"),
            "sealed, not in clear"
        );
        assert_eq!(b.decrypt(&t).as_deref(), Some(&b"session state"[..]));
        assert_eq!(b.counters.opened.load(Relaxed), 1);
        // A fresh nonce each time.
        assert_ne!(a.encrypt(b"x"), a.encrypt(b"x"));
    }

    #[test]
    fn an_unknown_key_id_is_refused() {
        let (k1, k2) = (key(1), key(2));
        let t = with(&k1, &[]).encrypt(b"state").unwrap();
        let other = with(&k2, &[]);
        assert_eq!(other.decrypt(&t), None);
        assert_eq!(other.counters.unknown_key.load(Relaxed), 1);
        assert_eq!(other.counters.refused.load(Relaxed), 0);
    }

    #[test]
    fn a_key_with_another_keys_id_opens_nothing() {
        // The same id, another secret: the tag does not match.
        let k = key(1);
        let mut forged = key(1);
        forged.id = k.id;
        let t = with(&k, &[]).encrypt(b"state").unwrap();
        let f = with(&forged, &[]);
        assert_eq!(f.decrypt(&t), None);
        assert_eq!(f.counters.refused.load(Relaxed), 1);
    }

    #[test]
    fn a_tampered_ticket_is_refused() {
        let k = key(1);
        let s = with(&k, &[]);
        let t = s.encrypt(b"some session state").unwrap();
        for i in ID_LEN..t.len() {
            let mut bad = t.clone();
            bad[i] ^= 0x01;
            assert_eq!(s.decrypt(&bad), None, "byte {i} flipped");
        }
        assert_eq!(s.decrypt(&t[..t.len() - 1]), None, "truncated");
        assert_eq!(
            s.decrypt(&t[..OVERHEAD - 1]),
            None,
            "shorter than the overhead"
        );
        assert_eq!(s.decrypt(b""), None);
        assert!(s.decrypt(&t).is_some(), "the original still opens");
    }

    #[test]
    fn without_keys_no_ticket_is_issued() {
        let s = SharedTickets::new();
        assert!(s.enabled());
        assert_eq!(s.encrypt(b"state"), None);
        assert_eq!(s.counters.no_key.load(Relaxed), 1);
        assert_eq!(s.decrypt(&[0u8; 64]), None);
    }

    #[test]
    fn after_a_rotation_the_previous_key_opens_but_no_longer_seals() {
        let (old, new) = (key(1), key(2));
        let s = with(&old, &[]);
        let before = s.encrypt(b"old ticket").unwrap();
        s.install(Some(&new), &[&old]);
        assert_eq!(s.ids(), (Some(new.id), vec![old.id]));
        let after = s.encrypt(b"new ticket").unwrap();
        assert_eq!(&after[..ID_LEN], &new.id, "the new key seals");
        assert_eq!(s.decrypt(&before).as_deref(), Some(&b"old ticket"[..]));
        assert_eq!(s.decrypt(&after).as_deref(), Some(&b"new ticket"[..]));
        // One more rotation: the oldest key is gone, its tickets with it.
        let newer = key(3);
        s.install(Some(&newer), &[&new]);
        assert_eq!(s.decrypt(&before), None);
        assert!(s.decrypt(&after).is_some());
    }

    #[test]
    fn lifetime_is_twice_the_period_and_debug_hides_the_secret() {
        let s = SharedTickets::new();
        s.set_period(600);
        assert_eq!(s.lifetime(), 1200);
        let k = key(7);
        let shown = format!("{k:?}");
        let secret_hex: String = k.secret.iter().map(|b| format!("{b:02x}")).collect();
        assert!(
            shown.contains(&k.id_hex()) && !shown.contains(&secret_hex),
            "{shown}"
        );
    }

    proptest::proptest! {
        #[test]
        fn decrypt_never_panics(input in proptest::collection::vec(proptest::num::u8::ANY, 0..300),
                                keep_id in proptest::bool::ANY) {
            let k = key(1);
            let s = with(&k, &[]);
            let mut input = input;
            if keep_id && input.len() >= ID_LEN {
                // Past the id check, into the AEAD.
                input[..ID_LEN].copy_from_slice(&k.id);
            }
            proptest::prop_assert_eq!(s.decrypt(&input), None);
        }
    }
}
