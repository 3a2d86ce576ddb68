//! The real libc functions behind the ones this library defines, found with
//! `dlsym(RTLD_NEXT, name)`: the next definition in the search order after this library,
//! normally glibc's.
//!
//! Every intercepted call goes on to one of these. They are resolved in the constructor
//! (start-up), and again on first use if some other library's constructor calls one before
//! ours ran; a resolved pointer is cached in an atomic, so a call costs one `Acquire` load.
//!
//! Inside this library the intercepted functions must never be called through `libc::` (the
//! symbol would resolve to this library's own definition: an endless recursion for `listen`,
//! `connect`, `accept4`, and a second pass through the hooks for `close`).

use std::ffi::{c_void, CStr};
use std::sync::atomic::{AtomicPtr, Ordering};

use libc::{c_int, sockaddr, socklen_t};

/// One lazily resolved symbol.
pub struct Sym {
    name: &'static CStr,
    ptr: AtomicPtr<c_void>,
}

impl Sym {
    const fn new(name: &'static CStr) -> Sym {
        Sym {
            name,
            ptr: AtomicPtr::new(std::ptr::null_mut()),
        }
    }

    /// The address of the next definition of the symbol; aborts (with a message) when there
    /// is none, since the program's call could then not be made at all.
    fn get(&self) -> *mut c_void {
        // Acquire pairs with the Release store below: a thread that sees the pointer sees
        // the loaded code it points to (dlsym's own locking already orders this; the
        // ordering keeps the argument local).
        let p = self.ptr.load(Ordering::Acquire);
        if !p.is_null() {
            return p;
        }
        // SAFETY: RTLD_NEXT is a valid pseudo-handle in a shared object, and the name is a
        // NUL-terminated static string.
        let p = unsafe { libc::dlsym(libc::RTLD_NEXT, self.name.as_ptr()) };
        if p.is_null() {
            crate::log::emit(format_args!(
                "no next definition of {:?} (is the library preloaded into a static program?)",
                self.name
            ));
            std::process::abort();
        }
        self.ptr.store(p, Ordering::Release);
        p
    }
}

pub static LISTEN: Sym = Sym::new(c"listen");
pub static CONNECT: Sym = Sym::new(c"connect");
pub static ACCEPT: Sym = Sym::new(c"accept");
pub static ACCEPT4: Sym = Sym::new(c"accept4");
pub static CLOSE: Sym = Sym::new(c"close");
pub static EPOLL_CTL: Sym = Sym::new(c"epoll_ctl");

/// Resolves every symbol now (the constructor), so that no intercepted call pays for dlsym.
pub fn resolve_all() {
    for s in [&LISTEN, &CONNECT, &ACCEPT, &ACCEPT4, &CLOSE, &EPOLL_CTL] {
        s.get();
    }
}

/// `listen(2)`.
pub fn listen(fd: c_int, backlog: c_int) -> c_int {
    type F = unsafe extern "C" fn(c_int, c_int) -> c_int;
    // SAFETY: the symbol is libc's `listen`, whose C type is F.
    let f: F = unsafe { std::mem::transmute::<*mut c_void, F>(LISTEN.get()) };
    // SAFETY: listen takes two integers and dereferences nothing.
    unsafe { f(fd, backlog) }
}

/// `connect(2)`.
///
/// # Safety
/// `addr` must be valid for reads of `len` bytes (or be what the program passed: the kernel
/// checks it and answers EFAULT).
pub unsafe fn connect(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
    type F = unsafe extern "C" fn(c_int, *const sockaddr, socklen_t) -> c_int;
    // SAFETY: the symbol is libc's `connect`, whose C type is F.
    let f: F = unsafe { std::mem::transmute::<*mut c_void, F>(CONNECT.get()) };
    // SAFETY: the caller's arguments pass through unchanged; see the function's contract.
    unsafe { f(fd, addr, len) }
}

/// `accept(2)`.
///
/// # Safety
/// `addr` and `len` are the program's: null, or valid as accept(2) requires.
pub unsafe fn accept(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
    type F = unsafe extern "C" fn(c_int, *mut sockaddr, *mut socklen_t) -> c_int;
    // SAFETY: the symbol is libc's `accept`, whose C type is F.
    let f: F = unsafe { std::mem::transmute::<*mut c_void, F>(ACCEPT.get()) };
    // SAFETY: the caller's arguments pass through unchanged.
    unsafe { f(fd, addr, len) }
}

/// `accept4(2)`.
///
/// # Safety
/// As [`accept`].
pub unsafe fn accept4(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t, flags: c_int) -> c_int {
    type F = unsafe extern "C" fn(c_int, *mut sockaddr, *mut socklen_t, c_int) -> c_int;
    // SAFETY: the symbol is libc's `accept4`, whose C type is F.
    let f: F = unsafe { std::mem::transmute::<*mut c_void, F>(ACCEPT4.get()) };
    // SAFETY: the caller's arguments pass through unchanged.
    unsafe { f(fd, addr, len, flags) }
}

/// `close(2)`.
pub fn close(fd: c_int) -> c_int {
    type F = unsafe extern "C" fn(c_int) -> c_int;
    // SAFETY: the symbol is libc's `close`, whose C type is F.
    let f: F = unsafe { std::mem::transmute::<*mut c_void, F>(CLOSE.get()) };
    // SAFETY: close takes an integer and dereferences nothing.
    unsafe { f(fd) }
}

/// `epoll_ctl(2)`.
///
/// # Safety
/// `event` is the program's: null, or valid for reading one `epoll_event`.
pub unsafe fn epoll_ctl(epfd: c_int, op: c_int, fd: c_int, event: *mut libc::epoll_event) -> c_int {
    type F = unsafe extern "C" fn(c_int, c_int, c_int, *mut libc::epoll_event) -> c_int;
    // SAFETY: the symbol is libc's `epoll_ctl`, whose C type is F.
    let f: F = unsafe { std::mem::transmute::<*mut c_void, F>(EPOLL_CTL.get()) };
    // SAFETY: the caller's arguments pass through unchanged.
    unsafe { f(epfd, op, fd, event) }
}
