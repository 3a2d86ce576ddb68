//! One line to stderr, formatted into a stack buffer and written with one `write(2)`: no
//! allocation, no lock, no stdio buffer shared with the program (whose own `stderr` may be
//! redirected or buffered differently).
//!
//! [`Once`] flags make each kind of message appear once per process; a child made by `fork`
//! inherits its parent's flags with its memory, so what the parent said is not repeated by
//! every worker.

use std::fmt::{self, Write as _};
use std::sync::atomic::{AtomicBool, Ordering};

/// A line longer than this is cut (with `...`).
const LINE_MAX: usize = 512;

struct Buf {
    bytes: [u8; LINE_MAX],
    len: usize,
}

impl fmt::Write for Buf {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let room = LINE_MAX - 4 - self.len;
        let n = s.len().min(room);
        self.bytes[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        if n < s.len() {
            self.bytes[self.len..self.len + 3].copy_from_slice(b"...");
            self.len += 3;
            return Err(fmt::Error);
        }
        Ok(())
    }
}

/// Writes `ringx-preload[PID]: MESSAGE\n` to stderr; `errno` is left as it was.
pub fn emit(msg: fmt::Arguments<'_>) {
    let saved = crate::errno::get();
    let mut b = Buf {
        bytes: [0; LINE_MAX],
        len: 0,
    };
    // SAFETY: getpid has no arguments and cannot fail.
    let pid = unsafe { libc::getpid() };
    let _ = write!(b, "ringx-preload[{pid}]: ");
    let _ = b.write_fmt(msg);
    b.bytes[b.len] = b'\n';
    b.len += 1;
    // SAFETY: the pointer and length describe the initialised prefix of the live buffer. A
    // short or failed write to stderr is not the program's concern: nothing to retry.
    unsafe { libc::write(2, b.bytes.as_ptr().cast(), b.len) };
    crate::errno::set(saved);
}

/// A message that is written once per process (tree, for what happens before a fork).
#[derive(Default)]
pub struct Once(AtomicBool);

impl Once {
    pub const fn new() -> Once {
        Once(AtomicBool::new(false))
    }

    /// Emits `msg` if this is the first call.
    pub fn emit(&self, msg: fmt::Arguments<'_>) {
        // Relaxed: the flag orders nothing else; at worst two threads racing both print.
        if !self.0.swap(true, Ordering::Relaxed) {
            emit(msg);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_lines_are_cut() {
        let mut b = Buf {
            bytes: [0; LINE_MAX],
            len: 0,
        };
        let long = "x".repeat(2 * LINE_MAX);
        assert!(b.write_str(&long).is_err());
        assert_eq!(b.len, LINE_MAX - 1);
        assert!(b.bytes[..b.len].ends_with(b"x..."));
        // Room is left for the newline.
        assert!(b.len < LINE_MAX);
    }
}
