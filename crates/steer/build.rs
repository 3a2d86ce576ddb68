//! Compiles `bpf/*.bpf.c` (the XDP software-steering program) into `$OUT_DIR/<name>.o`, which
//! the crate embeds. The clang, its flags and the shared BPF headers (`parsing.h`) are the
//! ones `ringx-xdp`'s build script found and published through its `links` metadata, so every
//! BPF program of the workspace is built one way.

use std::env;
use std::fs;
use std::path::PathBuf;
use std::process::Command;

fn dep(key: &str) -> String {
    env::var(format!("DEP_RINGX_XDP_{key}")).unwrap_or_else(|_| {
        panic!("ringx-steer: DEP_RINGX_XDP_{key} is unset: ringx-xdp's build script publishes it")
    })
}

fn main() {
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR"));
    let bpf = manifest.join("bpf");
    println!("cargo:rerun-if-changed=bpf");
    let clang = dep("CLANG");
    let cflags = dep("CFLAGS");
    let include = dep("INCLUDE");
    for dir in env::split_paths(&include) {
        println!("cargo:rerun-if-changed={}", dir.display());
    }

    let mut sources: Vec<PathBuf> = fs::read_dir(&bpf)
        .expect("read bpf/")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_string_lossy().ends_with(".bpf.c"))
        .collect();
    sources.sort();
    for src in sources {
        let name = src
            .file_name()
            .unwrap()
            .to_string_lossy()
            .replace(".bpf.c", ".o");
        let mut cmd = Command::new(&clang);
        cmd.args(cflags.split_whitespace());
        for dir in env::split_paths(&include) {
            cmd.arg("-I").arg(dir);
        }
        cmd.arg("-c").arg(&src).arg("-o").arg(out.join(&name));
        let status = cmd
            .status()
            .unwrap_or_else(|e| panic!("ringx-steer: cannot run {clang}: {e}"));
        if !status.success() {
            panic!(
                "ringx-steer: {clang} failed on {} ({status}); see the compiler output above",
                src.display()
            );
        }
    }
}
