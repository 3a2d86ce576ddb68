//! `io_uring_enter(2)` through a registered ring descriptor (`IORING_REGISTER_RING_FDS`,
//! Linux 5.18), so the zone's one system call per loop iteration skips the file-table lookup
//! (`fget`/`fput`) the kernel otherwise does on every call.
//!
//! Hand-written because the `io-uring` crate keeps the registered index in a `Submitter` that
//! borrows the ring and cannot be stored beside it.

use std::io;
use std::os::fd::AsRawFd;
use std::time::Duration;

use io_uring::IoUring;

const IORING_REGISTER_RING_FDS: libc::c_uint = 20;
const IORING_ENTER_GETEVENTS: libc::c_uint = 1 << 0;
const IORING_ENTER_EXT_ARG: libc::c_uint = 1 << 3;
const IORING_ENTER_REGISTERED_RING: libc::c_uint = 1 << 4;

/// `struct io_uring_rsrc_update`.
#[repr(C)]
struct RsrcUpdate {
    offset: u32,
    resv: u32,
    data: u64,
}

/// `struct io_uring_getevents_arg`.
#[repr(C)]
struct GeteventsArg {
    sigmask: u64,
    sigmask_sz: u32,
    min_wait_usec: u32,
    ts: u64,
}

/// `struct __kernel_timespec`.
#[repr(C)]
struct KernelTimespec {
    tv_sec: i64,
    tv_nsec: i64,
}

// ABI facts, checked at compile time.
const _: () = assert!(std::mem::size_of::<RsrcUpdate>() == 16);
const _: () = assert!(std::mem::size_of::<GeteventsArg>() == 24);
const _: () = assert!(std::mem::size_of::<KernelTimespec>() == 16);

/// How the zone enters the kernel: through the registered index if the kernel took it, else
/// through the plain descriptor.
pub(crate) struct Enter {
    fd: libc::c_uint,
    registered: bool,
}

impl Enter {
    pub(crate) fn new(ring: &IoUring) -> Enter {
        let raw = ring.as_raw_fd();
        let mut up = RsrcUpdate {
            offset: u32::MAX,
            resv: 0,
            data: raw as u64,
        };
        // SAFETY: io_uring_register reads and writes one live RsrcUpdate (nr_args = 1);
        // offset u32::MAX asks the kernel to pick a free registered-ring slot.
        let r = unsafe {
            libc::syscall(
                libc::SYS_io_uring_register,
                raw,
                IORING_REGISTER_RING_FDS,
                &mut up as *mut RsrcUpdate,
                1,
            )
        };
        if r == 1 {
            Enter {
                fd: up.offset,
                registered: true,
            }
        } else {
            Enter {
                fd: raw as libc::c_uint,
                registered: false,
            }
        }
    }

    /// Submits `to_submit` entries and waits for at least one completion, at most `timeout`.
    pub(crate) fn submit_and_wait(
        &self,
        to_submit: u32,
        timeout: Option<Duration>,
    ) -> io::Result<()> {
        self.submit_and_wait_n(to_submit, 1, timeout)
    }

    /// Submits `to_submit` entries and waits for `min_complete` completions (0: only runs
    /// the completions the kernel deferred, and returns), at most `timeout`.
    pub(crate) fn submit_and_wait_n(
        &self,
        to_submit: u32,
        min_complete: u32,
        timeout: Option<Duration>,
    ) -> io::Result<()> {
        self.submit_and_wait_batch(to_submit, min_complete, 0, timeout)
    }

    /// Like [`Enter::submit_and_wait_n`], but waits for `min_complete` completions only for
    /// `min_wait_usec` microseconds; after that any single completion ends the wait
    /// (`io_uring_getevents_arg.min_wait_usec`, Linux 6.12). 0: no such bound.
    pub(crate) fn submit_and_wait_batch(
        &self,
        to_submit: u32,
        min_complete: u32,
        min_wait_usec: u32,
        timeout: Option<Duration>,
    ) -> io::Result<()> {
        let mut flags = IORING_ENTER_GETEVENTS;
        if self.registered {
            flags |= IORING_ENTER_REGISTERED_RING;
        }
        let ts;
        let arg;
        let (argp, argsz): (*const libc::c_void, usize) = match timeout {
            _ if min_wait_usec > 0 || timeout.is_some() => {
                ts = timeout.map(|t| KernelTimespec {
                    tv_sec: t.as_secs() as i64,
                    tv_nsec: t.subsec_nanos() as i64,
                });
                arg = GeteventsArg {
                    sigmask: 0,
                    sigmask_sz: 0,
                    min_wait_usec,
                    ts: ts.as_ref().map_or(0, |t| t as *const _ as u64),
                };
                flags |= IORING_ENTER_EXT_ARG;
                (
                    (&arg as *const GeteventsArg).cast(),
                    std::mem::size_of::<GeteventsArg>(),
                )
            }
            _ => (std::ptr::null(), 0),
        };
        // SAFETY: the kernel reads `argsz` bytes at `argp` (a live GeteventsArg whose `ts` is
        // 0 or points at a live timespec) only with EXT_ARG; without it both are null/0. The
        // submission-queue tail was published with Release when the entries were pushed.
        let r = unsafe {
            libc::syscall(
                libc::SYS_io_uring_enter,
                self.fd,
                to_submit,
                min_complete,
                flags,
                argp,
                argsz,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}
