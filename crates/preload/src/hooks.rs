//! The functions the library defines in place of libc's. Each one makes the real call with
//! the program's arguments, unchanged, and returns its result with the `errno` it left; the
//! library's own work happens around it, on the side:
//!
//! | call | before the real call | after it (on success) |
//! |---|---|---|
//! | `listen` | | group a reuseport TCP listener ([`crate::passive::on_listen`]) |
//! | `epoll_ctl` | | `EPOLL_CTL_ADD` of a steered listener: claim it for the thread's CPU |
//! | `accept`, `accept4` | first use of a steered listener: claim it | |
//! | `connect` | bind a table port ([`crate::outbound`]) | |
//! | `close` | | give back the port of a steered connection |
//!
//! With no settings (the library loaded without `ringx run`) each one is the real call
//! behind one load of a pointer. A hook entered again on the same thread (a signal handler
//! that calls `close` while a hook runs, or the library's own descriptors closed inside a
//! hook) makes the real call only, so no lock is ever taken twice by one thread.
//!
//! Defined only in the library build: a unit-test binary defining `close` would route the
//! test harness's own calls here.

use std::cell::Cell;

use libc::{c_int, sockaddr, socklen_t};

use crate::fdstate::{self, FdState};
use crate::{errno, init, passive, real, sock};

thread_local! {
    static IN_HOOK: Cell<bool> = const { Cell::new(false) };
}

/// The calling thread is inside a hook until this is dropped.
struct Entered;

impl Drop for Entered {
    fn drop(&mut self) {
        IN_HOOK.with(|f| f.set(false));
    }
}

/// Marks the thread as inside a hook; None when it already is.
fn enter() -> Option<Entered> {
    IN_HOOK.with(|f| {
        if f.get() {
            None
        } else {
            f.set(true);
            Some(Entered)
        }
    })
}

/// Runs `f` with the program's errno kept as it was.
fn aside(f: impl FnOnce()) {
    let saved = errno::get();
    f();
    errno::set(saved);
}

/// `listen(2)`.
#[no_mangle]
pub extern "C" fn listen(fd: c_int, backlog: c_int) -> c_int {
    let r = real::listen(fd, backlog);
    if r == 0 {
        if let (Some(s), Some(_e)) = (init::settings(), enter()) {
            if s.listen_cpu {
                aside(|| passive::on_listen(fd));
            }
        }
    }
    r
}

/// Claims `fd` if it is a steered listener (`always`: even if this process did before).
fn claim_if_listener(fd: c_int, always: bool) {
    if let FdState::Listener { group, claimed } = fdstate::get(fd) {
        if always || !claimed {
            if let (Some(s), Some(_e)) = (init::settings(), enter()) {
                aside(|| passive::claim(fd, group, s.pin));
            }
        }
    }
}

/// `epoll_ctl(2)`.
///
/// # Safety
/// The program's arguments, as epoll_ctl(2) requires; they pass through unchanged.
#[no_mangle]
pub unsafe extern "C" fn epoll_ctl(
    epfd: c_int,
    op: c_int,
    fd: c_int,
    event: *mut libc::epoll_event,
) -> c_int {
    // SAFETY: the program's arguments go to the real call unchanged (this function's contract).
    let r = unsafe { real::epoll_ctl(epfd, op, fd, event) };
    if r == 0 && op == libc::EPOLL_CTL_ADD {
        claim_if_listener(fd, true);
    }
    r
}

/// `accept(2)`.
///
/// # Safety
/// The program's arguments, as accept(2) requires; they pass through unchanged.
#[no_mangle]
pub unsafe extern "C" fn accept(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
    claim_if_listener(fd, false);
    // SAFETY: the program's arguments go to the real call unchanged.
    unsafe { real::accept(fd, addr, len) }
}

/// `accept4(2)`.
///
/// # Safety
/// The program's arguments, as accept4(2) requires; they pass through unchanged.
#[no_mangle]
pub unsafe extern "C" fn accept4(
    fd: c_int,
    addr: *mut sockaddr,
    len: *mut socklen_t,
    flags: c_int,
) -> c_int {
    claim_if_listener(fd, false);
    // SAFETY: the program's arguments go to the real call unchanged.
    unsafe { real::accept4(fd, addr, len, flags) }
}

/// `connect(2)`.
///
/// # Safety
/// The program's arguments, as connect(2) requires; they pass through unchanged.
#[no_mangle]
pub unsafe extern "C" fn connect(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
    if let (Some(out), Some(_e)) = (init::outbound(), enter()) {
        aside(|| {
            // SAFETY: `addr` is the program's pointer with its length; connect(2) requires it
            // to be readable for `len` bytes (a program that passes a bad pointer would get
            // EFAULT from the kernel; from_raw refuses null and short lengths, and reads only
            // a sockaddr_in/in6 that `len` covers).
            let to = unsafe { sock::from_raw(addr, len) };
            if let Some(st) = to.and_then(|to| out.bind_for(fd, to)) {
                fdstate::set(fd, st);
            }
        });
    }
    // SAFETY: the program's arguments go to the real call unchanged.
    unsafe { real::connect(fd, addr, len) }
}

/// `close(2)`.
#[no_mangle]
pub extern "C" fn close(fd: c_int) -> c_int {
    let st = fdstate::take(fd);
    let r = real::close(fd);
    if let FdState::Active { zone, dest, port } = st {
        if let (Some(out), Some(_e)) = (init::outbound(), enter()) {
            aside(|| out.release(zone, dest, port));
        }
    }
    r
}
