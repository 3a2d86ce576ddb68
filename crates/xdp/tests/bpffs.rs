//! `ensure_pin_dir` under concurrent callers (issue 26: on a fresh machine, parallel tests each
//! found no bpffs and each mounted one; the second mount hid the first's pin directory).
//!
//! In a mount namespace of its own, with every bpffs unmounted from /sys/fs/bpf, threads and
//! processes call `ensure_pin_dir` at the same moment, round after round: afterwards exactly
//! one bpffs is mounted there, exactly one caller says it mounted it, and every caller's pin
//! directory is visible. Needs root; skips otherwise (`ringx_kerneltest`).

mod common;

use std::ffi::CString;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Barrier};

const ROOT: &str = "/sys/fs/bpf";
const ROUNDS: usize = 12;
const THREADS: usize = 6;
const PROCESSES: usize = 4;
/// The environment variable that makes this test binary a child loader (see `child_loader`).
const CHILD: &str = "RINGX_BPFFS_TEST_CHILD";
/// A child's exit status when its call mounted the bpffs (0: it found one).
const MOUNTED: i32 = 10;

fn cstr(s: &str) -> CString {
    CString::new(s).expect("no NUL")
}

/// bpffs mounts on /sys/fs/bpf in this thread's mount namespace (/proc/self would show the
/// main thread's, which stays in the original namespace).
fn bpffs_mounts() -> usize {
    let info = std::fs::read_to_string("/proc/thread-self/mountinfo").expect("read mountinfo");
    info.lines()
        .filter(|l| {
            // "... MOUNT_POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER_OPTIONS"
            let f: Vec<&str> = l.split_whitespace().collect();
            let fstype = l
                .split(" - ")
                .nth(1)
                .and_then(|r| r.split_whitespace().next());
            f.get(4) == Some(&ROOT) && fstype == Some("bpf")
        })
        .count()
}

/// Unmounts every filesystem stacked on /sys/fs/bpf (in this thread's namespace only).
fn unmount_all() {
    let root = cstr(ROOT);
    // SAFETY: umount2 reads a live NUL-terminated path. It fails (EINVAL) once nothing is
    // mounted there any more, which ends the loop.
    while unsafe { libc::umount2(root.as_ptr(), libc::MNT_DETACH) } == 0 {}
}

/// Moves the calling thread into a new mount namespace whose mounts do not propagate back,
/// with no bpffs on /sys/fs/bpf. Err: why not (the skip's reason).
fn private_namespace_without_bpffs() -> Result<(), String> {
    // SAFETY: unshare takes a flag word; CLONE_NEWNS affects only the calling thread (and
    // what it starts afterwards).
    if unsafe { libc::unshare(libc::CLONE_NEWNS) } != 0 {
        let e = std::io::Error::last_os_error();
        return Err(format!("cannot create a mount namespace: {e}"));
    }
    let (none, slash) = (cstr("none"), cstr("/"));
    // SAFETY: mount reads live NUL-terminated strings; a null data pointer is allowed. Making
    // every mount private first keeps the unmounts below from reaching the host.
    let r = unsafe {
        libc::mount(
            none.as_ptr(),
            slash.as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        )
    };
    if r != 0 {
        let e = std::io::Error::last_os_error();
        return Err(format!("cannot make / private in the new namespace: {e}"));
    }
    unmount_all();
    if bpffs_mounts() != 0 {
        return Err("a bpffs stays mounted on /sys/fs/bpf after unmounting".into());
    }
    Ok(())
}

fn pin_dir(round: usize, who: &str) -> PathBuf {
    PathBuf::from(format!(
        "{ROOT}/ringx-test-{}-bpffs-{round}-{who}",
        std::process::id()
    ))
}

/// What a loader saw: whether it mounted, or its error.
fn load(dir: &Path) -> Result<bool, String> {
    ringx_xdp::ensure_pin_dir(dir).map_err(|e| e.to_string())
}

/// Not a test of its own (ignored, so that a run lists it as such rather than as passed): the
/// entry point of the child processes, which run this binary with `CHILD` set to a pin
/// directory. A child waits for its stdin to close (all children are released together),
/// calls `ensure_pin_dir` and reports through its exit status.
#[test]
#[ignore = "the child process of concurrent_loaders_mount_one_bpffs"]
fn child_loader() {
    let Ok(dir) = std::env::var(CHILD) else {
        return;
    };
    let mut go = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut go);
    match load(Path::new(&dir)) {
        Ok(true) => std::process::exit(MOUNTED),
        Ok(false) => std::process::exit(0),
        Err(e) => {
            eprintln!("child loader: {e}");
            std::process::exit(1)
        }
    }
}

/// One round: every loader starts at once; returns how many said they mounted.
fn round(n: usize) -> usize {
    let exe = std::env::current_exe().expect("test binary path");
    let mut children = Vec::new();
    for p in 0..PROCESSES {
        let child = Command::new(&exe)
            .args([
                "--ignored",
                "--exact",
                "child_loader",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD, pin_dir(n, &format!("p{p}")))
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .expect("start a child loader");
        children.push(child);
    }
    let barrier = Arc::new(Barrier::new(THREADS + 1));
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let b = barrier.clone();
            let dir = pin_dir(n, &format!("t{t}"));
            std::thread::spawn(move || {
                b.wait();
                load(&dir)
            })
        })
        .collect();
    for c in &mut children {
        drop(c.stdin.take()); // EOF: go
    }
    barrier.wait();
    let mut mounted = 0;
    for (t, h) in threads.into_iter().enumerate() {
        match h.join().expect("loader thread panicked") {
            Ok(m) => mounted += usize::from(m),
            Err(e) => panic!("round {n}: thread {t}: {e}"),
        }
    }
    for (p, c) in children.into_iter().enumerate() {
        let st = c
            .wait_with_output()
            .expect("wait for a child loader")
            .status;
        match st.code() {
            Some(0) => {}
            Some(MOUNTED) => mounted += 1,
            _ => panic!("round {n}: process {p} failed: {st}"),
        }
    }
    mounted
}

#[test]
fn concurrent_loaders_mount_one_bpffs() {
    if !common::bpf() {
        return;
    }
    // A thread of its own: the new mount namespace is this thread's (and its children's).
    let outcome = std::thread::spawn(|| {
        private_namespace_without_bpffs()?;
        for n in 0..ROUNDS {
            let mounted = round(n);
            let stacked = bpffs_mounts();
            assert_eq!(stacked, 1, "round {n}: {stacked} bpffs mounted on {ROOT}");
            assert_eq!(
                mounted, 1,
                "round {n}: {mounted} loaders say they mounted it"
            );
            for who in (0..THREADS)
                .map(|t| format!("t{t}"))
                .chain((0..PROCESSES).map(|p| format!("p{p}")))
            {
                let dir = pin_dir(n, &who);
                assert!(dir.is_dir(), "round {n}: {} is hidden", dir.display());
                let _ = std::fs::remove_dir(&dir);
            }
            unmount_all();
        }
        Ok::<(), String>(())
    })
    .join()
    .expect("test thread panicked");
    if let Err(why) = outcome {
        ringx_kerneltest::skip(why);
    }
}
