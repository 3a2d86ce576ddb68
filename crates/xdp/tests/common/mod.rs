//! Shared set-up for the filter's kernel tests: a private pin directory per test, removed
//! afterwards, and skipping where BPF cannot run (`ringx_kerneltest`: said, and a failure
//! under CI).

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

/// Whether BPF can be used here; if not, the test skips ([`ringx_kerneltest::require`]).
/// Loading mounts a bpffs on /sys/fs/bpf where none is (`ringx_xdp::ensure_pin_dir`).
pub fn bpf() -> bool {
    ringx_kerneltest::require(ringx_xdp::bpf_unavailable())
}

/// Loads the filter into a fresh pin directory, or skips and returns None.
pub fn load(tag: &str, settings: &Settings) -> Option<(Filter, PinDir)> {
    if !bpf() {
        return None;
    }
    let dir = PinDir::new(tag);
    match Filter::load(settings, dir.path()) {
        Ok(f) => Some((f, dir)),
        Err(e @ Error::Permission { .. }) => {
            ringx_kerneltest::skip(e);
            None
        }
        Err(e) => panic!("loading the filter failed: {e}"),
    }
}
