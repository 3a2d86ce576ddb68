//! Shared set-up for the kernel tests: skipping with a printed reason where BPF cannot run,
//! and a private network namespace with its own devices.

#![allow(dead_code)] // each test binary uses a different part

/// Why the kernel tests cannot run here, printed as "skipped: <reason>".
pub fn skip_reason() -> Option<String> {
    ringx_xdp::bpf_unavailable()
}

/// Runs `f` on a new thread inside a new network namespace (unshare(CLONE_NEWNET) affects
/// only the calling thread, and the namespace disappears with it, devices included).
/// Returns None, printed, when namespaces are unavailable.
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
            eprintln!("skipped: cannot create a network namespace: {e}");
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
