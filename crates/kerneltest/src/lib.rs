//! The one way a test skips when the machine lacks what it needs: root, BPF, a network
//! namespace, io_uring, a recent enough kernel, two CPUs.
//!
//! A skip is never silent, and never happens where the kernel tests must run:
//!
//! - it prints `SKIP <test>: <why>` straight to the process's stderr, past the test harness's
//!   capture, so that `cargo test` (and `make unit`) shows it without `--nocapture`;
//! - except under CI (`CI` set, as `.ci/run` sets it, and root), where it panics instead:
//!   there a missing feature is a broken machine or a broken test, not a reason to pass.
//!
//! ```
//! fn bpf_test() {
//!     // None when BPF is usable here, else why not.
//!     let missing: Option<String> = None;
//!     if !ringx_kerneltest::require(missing) {
//!         return;
//!     }
//!     // ... the test proper
//! }
//! # bpf_test();
//! ```

use std::fmt::Display;
use std::io::Write as _;

/// Whether the test can go on: true when `missing` is None. Otherwise the test skips because
/// of it ([`skip`]) and this returns false (or panics, under CI as root).
#[track_caller]
pub fn require(missing: Option<String>) -> bool {
    match missing {
        None => true,
        Some(why) => {
            skip(why);
            false
        }
    }
}

/// The calling test skips because of `why`: prints `SKIP <test>: <why>` where the harness does
/// not capture it; under CI as root ([`must_run`]) panics with it instead.
#[track_caller]
pub fn skip(why: impl Display) {
    // libtest runs each test on a thread named after it.
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("<unnamed test thread>");
    assert!(
        !must_run(),
        "{test} cannot run: {why}; under CI (CI set, root) every kernel test must run, none skips"
    );
    // Not eprintln!: the harness captures that for a test that passes. A write to the handle
    // goes to file descriptor 2 as it is; one write, so that the harness's lines on stdout do
    // not land inside it where both go to one file.
    let line = format!("SKIP {test}: {why}\n");
    let _ = std::io::stderr().write_all(line.as_bytes());
}

/// True under CI as root, where every kernel test must run: `CI` set to anything but empty,
/// `false` or `0`, and the effective user root.
pub fn must_run() -> bool {
    let ci = std::env::var("CI").is_ok_and(|v| !matches!(v.as_str(), "" | "false" | "0"));
    // SAFETY: geteuid has no preconditions and cannot fail.
    ci && unsafe { libc::geteuid() } == 0
}

/// Runs `f` on a new thread inside a new network namespace (unshare(CLONE_NEWNET) affects
/// only the calling thread, and the namespace disappears with it, devices included).
/// Returns None, after skipping ([`skip`]), when namespaces are unavailable.
pub fn in_netns<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    let h = std::thread::spawn(move || {
        // SAFETY: unshare takes a flag word; it changes only this thread's namespaces.
        if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(f())
    });
    match h.join().expect("netns thread panicked") {
        Ok(v) => Some(v),
        Err(e) => {
            skip(format!("cannot create a network namespace: {e}"));
            None
        }
    }
}

/// Runs `ip ARGS` (in the calling thread's network namespace), panicking on failure.
pub fn ip(args: &str) {
    let out = std::process::Command::new("ip")
        .args(args.split_whitespace())
        .output()
        .expect("run ip (iproute2)");
    assert!(
        out.status.success(),
        "ip {args}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
