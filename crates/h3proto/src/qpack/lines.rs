//! The field lines this thread encoded last, kept to be copied rather than encoded again.
//!
//! Our encoder never uses the dynamic table (`encode.rs`), so a field's encoded line depends
//! on its name and value alone, and a server answers with the same few lines over and over:
//! `server`, `content-type`, `date` (the same for a whole second), `alt-svc`, `cache-control`.
//! Encoding one is a static-table lookup and a Huffman pass over the value, about a tenth of
//! what serving a small response over HTTP/3 costs in instructions; comparing the name and
//! value with the ones a slot holds is a few dozen.
//!
//! The cache is two-way set-associative (a field's set is a hash of its name and its value's
//! length, so a `date` keeps to one set and replaces its line each second; two fields whose
//! hashes meet both stay), per thread (a zone's thread owns its own, nothing is shared), and
//! bounded: `SETS` × 2 slots of at most `LONGEST` bytes of name and value each; longer fields
//! are encoded every time.

use std::cell::RefCell;

/// Sets in a thread's cache, of two slots each.
const SETS: usize = 32;

/// The longest name and the longest value a slot keeps.
const LONGEST: usize = 96;

/// One cached line: the field's name and value, then its encoding, in one buffer.
#[derive(Default)]
struct Slot {
    name: usize,
    value: usize,
    bytes: Vec<u8>,
}

impl Slot {
    fn holds(&self, name: &[u8], value: &[u8]) -> bool {
        self.name == name.len()
            && self.value == value.len()
            && self.bytes.len() >= self.name + self.value
            && &self.bytes[..self.name] == name
            && &self.bytes[self.name..self.name + self.value] == value
    }

    fn line(&self) -> &[u8] {
        &self.bytes[self.name + self.value..]
    }
}

/// A thread's cache: slots `2 × set` and `2 × set + 1` make a set.
struct Lines {
    slots: Vec<Slot>,
    /// Per set, the slot (0 or 1) used last: a miss replaces the other.
    last: Vec<u8>,
}

thread_local! {
    static LINES: RefCell<Lines> = RefCell::new(Lines {
        slots: (0..2 * SETS).map(|_| Slot::default()).collect(),
        last: vec![0; SETS],
    });
}

/// Which set `name` with a value of `value_len` bytes goes in (FNV-1a over the name and
/// the length: names are short, and similar ones must not meet).
fn set_of(name: &[u8], value_len: usize) -> usize {
    let mut h: u32 = 0x811c_9dc5;
    for &b in name {
        h = (h ^ u32::from(b)).wrapping_mul(0x0100_0193);
    }
    h = (h ^ value_len as u32).wrapping_mul(0x0100_0193);
    (h >> 16) as usize % SETS
}

/// An encoder of one field line: appends the line for a name and a value. The cache holds
/// the lines of one encoder only (`encode::encode_line`; tests' threads use their own).
pub(super) type Encode = fn(&mut Vec<u8>, &[u8], &[u8]);

/// Appends the line for `name: value` to `out`: copied from the thread's cache, or made by
/// `encode_line` and kept for next time.
pub(super) fn append(out: &mut Vec<u8>, name: &[u8], value: &[u8], encode_line: Encode) {
    let encode = |out: &mut Vec<u8>| encode_line(out, name, value);
    if name.len() > LONGEST || value.len() > LONGEST {
        return encode(out);
    }
    let set = set_of(name, value.len());
    LINES.with(|lines| {
        let Ok(mut lines) = lines.try_borrow_mut() else {
            return encode(out); // not reached: nothing here calls back in
        };
        let Lines { slots, last } = &mut *lines;
        for way in 0..2 {
            let slot = &slots[2 * set + way];
            if slot.holds(name, value) {
                out.extend_from_slice(slot.line());
                last[set] = way as u8;
                return;
            }
        }
        let way = 1 - usize::from(last[set]);
        last[set] = way as u8;
        let slot = &mut slots[2 * set + way];
        let start = out.len();
        encode(out);
        slot.bytes.clear();
        slot.bytes.extend_from_slice(name);
        slot.bytes.extend_from_slice(value);
        slot.bytes.extend_from_slice(&out[start..]);
        slot.name = name.len();
        slot.value = value.len();
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in for the real encoder (whose own tests check its lines through the cache,
    /// `encode.rs`): any function of the name and value will do.
    fn encode_line(out: &mut Vec<u8>, n: &[u8], v: &[u8]) {
        out.push(n.len() as u8);
        out.extend_from_slice(n);
        out.extend(v.iter().rev());
    }
    use proptest::prelude::*;

    fn cached(n: &[u8], v: &[u8]) -> Vec<u8> {
        let mut out = vec![7];
        append(&mut out, n, v, encode_line);
        out.split_off(1)
    }

    fn fresh(n: &[u8], v: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        encode_line(&mut out, n, v);
        out
    }

    #[test]
    fn a_line_seen_before_is_copied_and_a_changed_value_is_encoded_again() {
        let (a, b) = (
            b"Fri, 04 Dec 2026 05:00:00 GMT",
            b"Fri, 04 Dec 2026 05:00:01 GMT",
        );
        assert_eq!(cached(b"date", a), fresh(b"date", a));
        let held =
            |n: &[u8], v: &[u8]| LINES.with(|l| l.borrow().slots.iter().any(|s| s.holds(n, v)));
        assert!(held(b"date", a));
        assert_eq!(cached(b"date", a), fresh(b"date", a));
        assert_eq!(cached(b"date", b), fresh(b"date", b));
        assert!(held(b"date", b));
    }

    #[test]
    fn long_fields_are_not_kept() {
        let long = vec![b'a'; LONGEST + 1];
        assert_eq!(cached(b"x-long", &long), fresh(b"x-long", &long));
        LINES.with(|l| assert!(l.borrow().slots.iter().all(|s| !s.holds(b"x-long", &long))));
    }

    #[test]
    fn two_fields_of_one_set_both_stay() {
        let server = (&b"server"[..], &b"ringx/0.1.0"[..]);
        // A field of `server`'s set, whatever the hash: found by trying names.
        let other = (0..10_000)
            .map(|i| format!("x-{i}").into_bytes())
            .find(|n| set_of(n, 1) == set_of(server.0, server.1.len()))
            .unwrap();
        for _ in 0..3 {
            assert_eq!(cached(server.0, server.1), fresh(server.0, server.1));
            assert_eq!(cached(&other, b"v"), fresh(&other, b"v"));
        }
        let held =
            |n: &[u8], v: &[u8]| LINES.with(|l| l.borrow().slots.iter().any(|s| s.holds(n, v)));
        assert!(held(server.0, server.1) && held(&other, b"v"));
    }

    proptest! {
        /// Whatever shares a slot, each field's line is the one its own encoding makes.
        #[test]
        fn lines_are_always_the_fields_own(
            fields in proptest::collection::vec(("[a-c:]{1,4}", "[0-9a-z ]{0,6}"), 1..80)
        ) {
            for (n, v) in fields.iter().chain(fields.iter()) {
                prop_assert_eq!(cached(n.as_bytes(), v.as_bytes()), fresh(n.as_bytes(), v.as_bytes()));
            }
        }
    }
}
