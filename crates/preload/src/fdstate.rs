//! What the library knows about each descriptor the program holds: one `AtomicU64` per
//! descriptor number, in a static table (zero pages until touched; nothing is allocated).
//!
//! * a steered listener: its group and whether this process already chose its CPU;
//! * an outgoing connection that took a source port from a table: the zone, the destination
//!   and the port, so that `close` gives the port back.
//!
//! `fork` copies the table with the memory, and the descriptors it describes are copied with
//! the same numbers; `exec` starts afresh with the new image. A descriptor above
//! [`MAX_FDS`] is never steered (its calls pass through, counted in
//! [`crate::stats::Counter::FdTooHigh`]).

use std::sync::atomic::{AtomicU64, Ordering};

pub const MAX_FDS: usize = 1 << 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FdState {
    /// Nothing the library cares about.
    None,
    /// A listener of group `group`; `claimed`: this process has tried to give it a CPU.
    Listener { group: u8, claimed: bool },
    /// A connection bound to `port` from zone `zone`'s table for destination `dest`.
    Active { zone: u16, dest: u16, port: u16 },
}

const KIND_SHIFT: u32 = 62;
const LISTENER: u64 = 1;
const ACTIVE: u64 = 2;

impl FdState {
    pub fn encode(self) -> u64 {
        match self {
            FdState::None => 0,
            FdState::Listener { group, claimed } => {
                (LISTENER << KIND_SHIFT) | u64::from(group) | (u64::from(claimed) << 8)
            }
            FdState::Active { zone, dest, port } => {
                (ACTIVE << KIND_SHIFT)
                    | u64::from(zone)
                    | (u64::from(dest) << 16)
                    | (u64::from(port) << 32)
            }
        }
    }

    pub fn decode(v: u64) -> FdState {
        match v >> KIND_SHIFT {
            LISTENER => FdState::Listener {
                group: v as u8,
                claimed: (v >> 8) & 1 == 1,
            },
            ACTIVE => FdState::Active {
                zone: v as u16,
                dest: (v >> 16) as u16,
                port: (v >> 32) as u16,
            },
            _ => FdState::None,
        }
    }
}

static TABLE: [AtomicU64; MAX_FDS] = [const { AtomicU64::new(0) }; MAX_FDS];

fn slot(fd: libc::c_int) -> Option<&'static AtomicU64> {
    usize::try_from(fd).ok().and_then(|i| TABLE.get(i))
}

/// The state of `fd` (None for a descriptor out of range).
pub fn get(fd: libc::c_int) -> FdState {
    // Relaxed: a descriptor's state is written by the thread that created, bound or closed
    // it, and a program that hands a descriptor to another thread orders that hand-off
    // itself (the kernel's fd table does not order our table).
    slot(fd).map_or(FdState::None, |s| {
        FdState::decode(s.load(Ordering::Relaxed))
    })
}

/// Sets the state of `fd`; false when `fd` is out of range.
pub fn set(fd: libc::c_int, st: FdState) -> bool {
    match slot(fd) {
        Some(s) => {
            s.store(st.encode(), Ordering::Relaxed);
            true
        }
        None => false,
    }
}

/// Clears the state of `fd` (it is being closed) and returns what it was.
pub fn take(fd: libc::c_int) -> FdState {
    // A swap: of two threads closing one descriptor at once, one gets the state.
    slot(fd).map_or(FdState::None, |s| {
        FdState::decode(s.swap(0, Ordering::Relaxed))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        for st in [
            FdState::None,
            FdState::Listener {
                group: 15,
                claimed: false,
            },
            FdState::Listener {
                group: 0,
                claimed: true,
            },
            FdState::Active {
                zone: 3,
                dest: 65535,
                port: 60999,
            },
        ] {
            assert_eq!(FdState::decode(st.encode()), st);
        }
        assert_eq!(FdState::None.encode(), 0);
    }

    #[test]
    fn table_bounds() {
        assert!(!set(-1, FdState::None));
        assert!(!set(MAX_FDS as i32, FdState::None));
        let st = FdState::Active {
            zone: 1,
            dest: 2,
            port: 3,
        };
        assert!(set(MAX_FDS as i32 - 1, st));
        assert_eq!(get(MAX_FDS as i32 - 1), st);
        assert_eq!(take(MAX_FDS as i32 - 1), st);
        assert_eq!(get(MAX_FDS as i32 - 1), FdState::None);
        assert_eq!(get(-5), FdState::None);
    }
}
