//! The QPACK dynamic table as a decoder keeps it (RFC 9204 §3.2): entries the peer's
//! encoder inserted, oldest first, each with an absolute index (the count of inserts before
//! it), and a capacity the encoder sets within the maximum we announced
//! (SETTINGS_QPACK_MAX_TABLE_CAPACITY).
//!
//! The capacity bounds the memory: each entry counts its name, value and 32 bytes, so a
//! table of capacity C holds at most C bytes of fields in at most C / 32 entries. An insert
//! that does not fit even in an empty table, or a capacity over our maximum, is the
//! encoder's error; entries older than what fits are evicted (the encoder must not have
//! referenced them in a section still unacknowledged: if it did, the reference fails).

use std::collections::VecDeque;

/// Per-entry overhead (RFC 9204 §3.2.1).
pub const ENTRY_OVERHEAD: usize = 32;

/// Why the encoder stream asked for something the table cannot do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableError {
    /// A capacity over the maximum we announced.
    CapacityOverMax,
    /// An entry larger than the capacity.
    EntryTooLarge,
    /// An index that names no entry (never inserted, or evicted).
    NoSuchEntry,
}

/// A table entry: name and value.
type Entry = (Box<[u8]>, Box<[u8]>);

/// A decoder's dynamic table.
#[derive(Debug, Default)]
pub struct Table {
    /// Oldest first; `entries[0]` has absolute index `dropped`.
    entries: VecDeque<Entry>,
    dropped: u64,
    size: usize,
    capacity: usize,
    max_capacity: usize,
}

impl Table {
    /// An empty table of capacity 0 (the encoder raises it, RFC 9204 §3.2.3), allowed up to
    /// `max_capacity`.
    pub fn new(max_capacity: usize) -> Table {
        Table {
            max_capacity,
            ..Table::default()
        }
    }

    /// Inserts so far (the next entry's absolute index).
    pub fn insert_count(&self) -> u64 {
        self.dropped + self.entries.len() as u64
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    pub fn max_capacity(&self) -> usize {
        self.max_capacity
    }

    /// MaxEntries (RFC 9204 §4.5.1.1): what the Required Insert Count is encoded modulo.
    pub fn max_entries(&self) -> u64 {
        (self.max_capacity / ENTRY_OVERHEAD) as u64
    }

    /// Bytes in use (names, values and 32 per entry).
    pub fn size(&self) -> usize {
        self.size
    }

    /// The entry with absolute index `abs`, if it is still in the table.
    pub fn get(&self, abs: u64) -> Option<(&[u8], &[u8])> {
        let i = usize::try_from(abs.checked_sub(self.dropped)?).ok()?;
        self.entries.get(i).map(|(n, v)| (&n[..], &v[..]))
    }

    /// The entry `rel` back from the newest (encoder-stream relative index, §3.2.5).
    pub fn get_relative(&self, rel: u64) -> Option<(&[u8], &[u8])> {
        let abs = self.insert_count().checked_sub(rel)?.checked_sub(1)?;
        self.get(abs)
    }

    fn evict_to(&mut self, max: usize) {
        while self.size > max {
            let Some((n, v)) = self.entries.pop_front() else {
                break;
            };
            self.size -= n.len() + v.len() + ENTRY_OVERHEAD;
            self.dropped += 1;
        }
    }

    /// Set Dynamic Table Capacity.
    pub fn set_capacity(&mut self, cap: u64) -> Result<(), TableError> {
        let cap = usize::try_from(cap)
            .ok()
            .filter(|&c| c <= self.max_capacity)
            .ok_or(TableError::CapacityOverMax)?;
        self.capacity = cap;
        self.evict_to(cap);
        Ok(())
    }

    /// Inserts a new entry, evicting the oldest ones to make room.
    pub fn insert(&mut self, name: &[u8], value: &[u8]) -> Result<(), TableError> {
        let sz = name.len() + value.len() + ENTRY_OVERHEAD;
        if sz > self.capacity {
            return Err(TableError::EntryTooLarge);
        }
        self.evict_to(self.capacity - sz);
        self.size += sz;
        self.entries.push_back((name.into(), value.into()));
        Ok(())
    }

    /// Duplicate: inserts again the entry `rel` back from the newest.
    pub fn duplicate(&mut self, rel: u64) -> Result<(), TableError> {
        let (n, v) = self.get_relative(rel).ok_or(TableError::NoSuchEntry)?;
        let (n, v) = (n.to_vec(), v.to_vec());
        self.insert(&n, &v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_evicted_oldest_first() {
        let mut t = Table::new(100);
        assert_eq!(
            t.insert(b"a", b"b"),
            Err(TableError::EntryTooLarge),
            "capacity 0"
        );
        assert_eq!(t.set_capacity(101), Err(TableError::CapacityOverMax));
        t.set_capacity(100).unwrap();
        t.insert(b"n0", b"v0").unwrap(); // 36
        t.insert(b"n1", b"v1").unwrap(); // 72
        assert_eq!((t.insert_count(), t.size()), (2, 72));
        assert_eq!(t.get_relative(0), Some((&b"n1"[..], &b"v1"[..])));
        t.insert(b"n2", b"v2").unwrap(); // evicts n0
        assert_eq!((t.get(0), t.get(1).map(|e| e.0)), (None, Some(&b"n1"[..])));
        t.duplicate(1).unwrap(); // n1 again, evicting the old n1
        assert_eq!(
            (t.insert_count(), t.get(1), t.get(3).map(|e| e.0)),
            (4, None, Some(&b"n1"[..]))
        );
        assert_eq!(t.duplicate(2), Err(TableError::NoSuchEntry));
        t.set_capacity(36).unwrap();
        assert_eq!((t.size(), t.get(2), t.get(3).is_some()), (36, None, true));
        t.set_capacity(0).unwrap();
        assert_eq!((t.size(), t.insert_count(), t.get(3)), (0, 4, None));
        assert_eq!(t.max_entries(), 3);
    }
}
