//! `errno` of the calling thread: every hook saves it before its own system calls and puts
//! the real call's value back before returning, so the program sees exactly what the real
//! call left there.

/// The calling thread's `errno`.
pub fn get() -> libc::c_int {
    // SAFETY: __errno_location returns the address of the calling thread's errno, valid for
    // the thread's lifetime.
    unsafe { *libc::__errno_location() }
}

/// Sets the calling thread's `errno`.
pub fn set(v: libc::c_int) {
    // SAFETY: as in `get`; the thread writes its own errno.
    unsafe { *libc::__errno_location() = v }
}
