//! Shared set-up for the filter's kernel tests: a private pin directory per test, removed
//! afterwards, and skipping with a printed reason where BPF cannot run.

#![allow(dead_code)] // each test binary uses a different part

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use ringx_xdp::{Error, Filter, Settings};

/// A pin directory under /sys/fs/bpf that only this test uses; removed on drop.
pub struct PinDir(pub PathBuf);

impl PinDir {
    pub fn new(tag: &str) -> PinDir {
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        PinDir(PathBuf::from(format!(
            "/sys/fs/bpf/ringx-test-{}-{tag}-{n}",
            std::process::id()
        )))
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for PinDir {
    fn drop(&mut self) {
        // Link pins first would detach; tests detach themselves, this only cleans up.
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Why the kernel tests cannot run here, printed as "skipped: <reason>".
pub fn skip_reason() -> Option<String> {
    ringx_xdp::bpf_unavailable()
}

/// Loads the filter into a fresh pin directory, or prints why not and returns None.
pub fn load(tag: &str, settings: &Settings) -> Option<(Filter, PinDir)> {
    if let Some(why) = skip_reason() {
        eprintln!("skipped: {why}");
        return None;
    }
    let dir = PinDir::new(tag);
    match Filter::load(settings, dir.path()) {
        Ok(f) => Some((f, dir)),
        Err(e @ Error::Permission { .. }) => {
            eprintln!("skipped: {e}");
            None
        }
        Err(e) => panic!("loading the filter failed: {e}"),
    }
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
