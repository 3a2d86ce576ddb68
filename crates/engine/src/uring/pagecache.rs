//! What the page cache holds of a file being sent: one-byte reads that take only cached
//! bytes (`preadv2` with `RWF_NOWAIT`, `crate::sys::pread_uninit`) and `cachestat(2)`, which decide whether a body is read,
//! sent with `sendfile` or spliced (`file_read.rs`, `sendfile.rs`, `splice.rs`); and the
//! error all three report for a file that ends early.

/// The error for a file that ended before the bytes a response announced for it.
pub(super) fn file_shrank() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::UnexpectedEof,
        "file shrank while being sent",
    )
}

/// Whether the page cache holds all of `len` bytes of `fd` from `off`: `cachestat(2)` (Linux
/// 6.5, older than the descriptor install `sendfile.rs` needs); where it is refused (a seccomp
/// filter), one-byte `RWF_NOWAIT` reads of the first and last byte.
pub(super) fn cached(fd: i32, off: u64, len: u64) -> bool {
    /// `struct cachestat_range` and `struct cachestat` of <linux/mman.h>; the libc crate has
    /// no binding for x86_64 (syscall 451 on every architecture).
    #[repr(C)]
    struct Range {
        off: u64,
        len: u64,
    }
    #[repr(C)]
    #[derive(Default)]
    struct Stat {
        nr_cache: u64,
        nr_dirty: u64,
        nr_writeback: u64,
        nr_evicted: u64,
        nr_recently_evicted: u64,
    }
    const SYS_CACHESTAT: libc::c_long = 451;
    let range = Range { off, len };
    let mut st = Stat::default();
    // SAFETY: both pointers are to live, properly laid out locals; the kernel reads `range`
    // and writes `st` during this synchronous call only.
    let r = unsafe {
        libc::syscall(
            SYS_CACHESTAT,
            fd,
            &raw const range,
            &raw mut st,
            0 as libc::c_uint,
        )
    };
    if r == 0 {
        let page = page_size();
        let pages = (off + len).div_ceil(page) - off / page;
        return st.nr_cache >= pages;
    }
    probe(fd, off) && probe(fd, off + len - 1)
}

fn page_size() -> u64 {
    thread_local! {
        // SAFETY: sysconf has no preconditions.
        static PAGE: u64 = match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
            n if n > 0 => n as u64,
            _ => 4096,
        };
    }
    PAGE.with(|p| *p)
}

/// Whether the byte of `fd` at `off` is in the page cache (a one-byte `RWF_NOWAIT` read).
fn probe(fd: i32, off: u64) -> bool {
    let mut b = [std::mem::MaybeUninit::uninit()];
    crate::sys::pread_uninit(fd, &mut b, off, libc::RWF_NOWAIT).is_ok_and(|n| n == 1)
}
