//! Small process and thread settings zones need.

use std::io;
use std::mem::MaybeUninit;
use std::os::fd::RawFd;

/// `UDP_SEGMENT` and `UDP_GRO` (linux/udp.h; not in the libc crate for glibc targets).
pub(crate) const UDP_SEGMENT: libc::c_int = 103;
pub(crate) const UDP_GRO: libc::c_int = 104;

/// Pins the calling thread to `cpu`.
pub fn pin_to_cpu(cpu: usize) -> io::Result<()> {
    // SAFETY: cpu_set_t is plain data for which all-zero is the empty set; CPU_SET writes
    // inside it (it checks `cpu` against the set size), and sched_setaffinity reads
    // `size_of::<cpu_set_t>()` bytes from a live local.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(
                e.kind(),
                format!("pin thread to CPU {cpu}: {e}"),
            ));
        }
    }
    Ok(())
}

/// The CPUs this process may run on, in order.
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: as in `pin_to_cpu`; sched_getaffinity fills a live local of the size given.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return (0..std::thread::available_parallelism().map_or(1, |n| n.get())).collect();
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect()
    }
}

/// The CPU the calling thread runs on now.
pub fn current_cpu() -> Option<usize> {
    // SAFETY: sched_getcpu takes no arguments.
    let c = unsafe { libc::sched_getcpu() };
    (c >= 0).then_some(c as usize)
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit and returns the new soft limit.
/// Every connection is a descriptor (epoll) or a registered-file slot, and the kernel caps
/// a registered-file table at this limit too.
pub fn raise_nofile() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit read or write one live rlimit struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return 1024;
        }
        if lim.rlim_cur < lim.rlim_max {
            let want = libc::rlimit {
                rlim_cur: lim.rlim_max,
                rlim_max: lim.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &want) == 0 {
                lim.rlim_cur = lim.rlim_max;
            }
        }
    }
    lim.rlim_cur
}

/// A signal set holding `signals`: for [`crate::ZonePoolBuilder::block_signals`] and the
/// `sigwait` that receives them.
pub fn sigset(signals: &[libc::c_int]) -> libc::sigset_t {
    // SAFETY: sigset_t is plain data; sigemptyset initialises the live local and sigaddset
    // sets bits inside it (an invalid number makes it fail with EINVAL and change nothing).
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for &s in signals {
            libc::sigaddset(&mut set, s);
        }
        set
    }
}

/// Ignores SIGPIPE: a write to a reset connection must return EPIPE, not kill the process.
pub fn ignore_sigpipe() {
    // SAFETY: installs the SIG_IGN disposition; no handler code runs.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
}

/// Keeps glibc's allocator from handing memory back to the kernel and fetching it again.
///
/// By default glibc trims a heap whose free top passes 128 KiB (`madvise`/`brk`) and grows it
/// again a page (`mprotect`, thread arenas) or 132 KiB (`brk`) at a time. Connections that come
/// and go make that a steady trickle of system calls (`brk`, `mprotect`, `madvise`), the only
/// ones an SQPOLL zone would still make. After this,
/// heaps keep up to `trim_threshold` bytes of free top and the main heap grows in `top_pad`
/// steps, so a warmed-up server makes none. The cost is memory: freed memory stays with the
/// process up to that much per heap, as with nginx's pools. Process-wide; call it at start-up,
/// before other threads allocate. No-op on other C libraries.
pub fn keep_heap(trim_threshold: usize, top_pad: usize) {
    #[cfg(target_env = "gnu")]
    {
        let clamp = |v: usize| v.min(i32::MAX as usize) as libc::c_int;
        // SAFETY: mallopt only sets allocator parameters (integers); it touches no caller
        // memory and glibc takes its arena lock around the change.
        unsafe {
            libc::mallopt(libc::M_TRIM_THRESHOLD, clamp(trim_threshold));
            libc::mallopt(libc::M_TOP_PAD, clamp(top_pad));
        }
    }
    #[cfg(not(target_env = "gnu"))]
    let _ = (trim_threshold, top_pad);
}

/// Reads into `dst` from `fd` at `off` with `preadv2`'s `flags` (0: a plain positional
/// read; `RWF_NOWAIT`: only what the page cache holds, `EAGAIN` rather than waiting for the
/// disk). Returns the bytes read: the first that many of `dst` are initialised.
pub fn pread_uninit(
    fd: RawFd,
    dst: &mut [MaybeUninit<u8>],
    off: u64,
    flags: libc::c_int,
) -> io::Result<usize> {
    let off = libc::off_t::try_from(off).map_err(|_| io::ErrorKind::InvalidInput)?;
    let iov = libc::iovec {
        iov_base: dst.as_mut_ptr().cast(),
        iov_len: dst.len(),
    };
    // SAFETY: the iovec covers `dst`, memory we hold exclusively for this synchronous call;
    // the kernel writes at most `iov_len` bytes there. A bad `fd` is an error, not UB.
    let n = unsafe { libc::preadv2(fd, &iov, 1, off, flags) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// Reads up to `want` bytes of `fd` at `off` onto the end of `buf`, straight into its spare
/// capacity (no zeroing first), with `flags` as [`pread_uninit`]; returns the bytes read.
/// The capacity grows to exactly what is asked: a caller that keeps buffers of a bounded
/// size (the zone's spare output vectors) gets no doubled one.
pub fn pread_append(
    fd: RawFd,
    buf: &mut Vec<u8>,
    want: usize,
    off: u64,
    flags: libc::c_int,
) -> io::Result<usize> {
    buf.reserve_exact(want);
    let n = pread_uninit(fd, &mut buf.spare_capacity_mut()[..want], off, flags)?;
    // SAFETY: `pread_uninit` initialised the first `n` (at most `want`) bytes of the spare
    // capacity, so the new length stays within the capacity and covers initialised bytes.
    unsafe { buf.set_len(buf.len() + n) };
    Ok(n)
}

/// `-errno` from a completion or a syscall return into an `io::Error`.
pub(crate) fn errno(res: i32) -> io::Error {
    io::Error::from_raw_os_error(-res)
}

/// Whether the running kernel's release is at least `major.minor` (`uname(2)`); false when
/// it cannot be read.
pub fn kernel_at_least(major: u32, minor: u32) -> bool {
    // SAFETY: utsname is plain data for which all-zero is valid; uname fills it in.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: `u` is a live utsname the call writes into.
    if unsafe { libc::uname(&mut u) } != 0 {
        return false;
    }
    let release: Vec<u8> = u
        .release
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    release_at_least(&String::from_utf8_lossy(&release), major, minor)
}

fn release_at_least(release: &str, major: u32, minor: u32) -> bool {
    let mut it = release
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<u32>().unwrap_or(0));
    let (a, b) = (it.next().unwrap_or(0), it.next().unwrap_or(0));
    (a, b) >= (major, minor)
}

/// `setsockopt(fd, level, name, &val)` for an integer option.
pub(crate) fn setsockopt_int(
    fd: std::os::fd::RawFd,
    level: libc::c_int,
    name: libc::c_int,
    val: libc::c_int,
) -> io::Result<()> {
    // SAFETY: setsockopt reads one live c_int of the size given; `fd` is the caller's.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&val as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod release_tests {
    #[test]
    fn releases_compare_by_major_then_minor() {
        use super::release_at_least as at;
        assert!(at("6.18.0-1-amd64", 6, 7));
        assert!(at("6.7.0", 6, 7));
        assert!(!at("6.6.30-foo", 6, 7));
        assert!(!at("5.19.0", 6, 7));
        assert!(at("7.0", 6, 7));
        assert!(!at("", 6, 7));
    }
}
