//! Compiles `bpf/*.bpf.c` with clang (`-O2 -g -target bpf`) into `$OUT_DIR/<name>.o`, which
//! the crate embeds, and generates `$OUT_DIR/abi_gen.rs` from `bpf/ringx_xdp.h`: the reasons
//! (counter indices), the numeric `#define RX_*` constants and the struct sizes the header
//! asserts. The Rust side therefore cannot drift from the C side without failing to build.
//!
//! It also hands the toolchain it found to the build scripts of the crates that depend on this
//! one (Cargo's `links` metadata: `DEP_RINGX_XDP_CLANG`, `_CFLAGS`, `_INCLUDE`), so that
//! `ringx-steer` compiles its program with the same clang, flags and shared headers
//! (`bpf/parsing.h`).

use std::env;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

const HELP: &str = "run scripts/install-deps.sh (as root) to install clang, libbpf-dev and the \
                    kernel headers, or set RINGX_CLANG to a clang that can target BPF";

/// How every BPF program of the workspace is compiled.
const CFLAGS: [&str; 7] = [
    "-O2", "-g", "-target", "bpf", "-mcpu=v3", "-Wall", "-Werror",
];

fn main() {
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR"));
    let bpf = manifest.join("bpf");
    println!("cargo:rerun-if-changed=bpf");
    println!("cargo:rerun-if-env-changed=RINGX_CLANG");

    let header = bpf.join("ringx_xdp.h");
    let text = fs::read_to_string(&header).expect("read bpf/ringx_xdp.h");
    fs::write(out.join("abi_gen.rs"), generate_abi(&text)).expect("write abi_gen.rs");

    let clang = find_clang();
    let mut includes = vec![bpf.clone()];
    // `-target bpf` does not search the multiarch directory that holds <asm/types.h>.
    if let Some(dir) = multiarch_include() {
        includes.push(dir);
    }
    if !Path::new("/usr/include/bpf/bpf_helpers.h").exists() {
        panic!("ringx-xdp: /usr/include/bpf/bpf_helpers.h is missing (libbpf-dev); {HELP}");
    }
    // For dependents' build scripts (see the top): the include directories as a path list.
    let include = env::join_paths(&includes).expect("include paths without ':'");
    println!("cargo:clang={clang}");
    println!("cargo:cflags={}", CFLAGS.join(" "));
    println!("cargo:include={}", include.to_string_lossy());
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
        let obj = out.join(&name);
        let mut cmd = Command::new(&clang);
        cmd.args(CFLAGS);
        for i in &includes {
            cmd.arg("-I").arg(i);
        }
        cmd.arg("-c").arg(&src).arg("-o").arg(&obj);
        let status = cmd
            .status()
            .unwrap_or_else(|e| panic!("ringx-xdp: cannot run {clang}: {e}; {HELP}"));
        if !status.success() {
            panic!(
                "ringx-xdp: {clang} failed on {} ({status}); see the compiler output above",
                src.display()
            );
        }
    }
}

/// `$RINGX_CLANG`, else the first of clang, clang-19 .. clang-14 that runs.
fn find_clang() -> String {
    if let Ok(c) = env::var("RINGX_CLANG") {
        return c;
    }
    let candidates = [
        "clang", "clang-19", "clang-18", "clang-17", "clang-16", "clang-15", "clang-14",
    ];
    for c in candidates {
        if Command::new(c)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
        {
            return c.to_string();
        }
    }
    panic!("ringx-xdp: clang is not installed: the XDP program (bpf/*.bpf.c) is compiled with clang -target bpf; {HELP}");
}

fn multiarch_include() -> Option<PathBuf> {
    for cc in ["cc", "gcc", "clang"] {
        if let Ok(o) = Command::new(cc).arg("-print-multiarch").output() {
            let triple = String::from_utf8_lossy(&o.stdout).trim().to_string();
            if o.status.success() && !triple.is_empty() {
                let dir = PathBuf::from("/usr/include").join(triple);
                if dir.join("asm").is_dir() {
                    return Some(dir);
                }
            }
        }
    }
    let arch = env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let dir = PathBuf::from(format!("/usr/include/{arch}-linux-gnu"));
    dir.join("asm").is_dir().then_some(dir)
}

/// Rust for the header's reasons, constants and asserted sizes.
fn generate_abi(h: &str) -> String {
    let mut reasons = Vec::new(); // (NAME, VERDICT, description)
    let mut consts = Vec::new(); // (NAME, value)
    let mut sizes = Vec::new(); // (struct name, size)
    for line in h.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("X(") {
            let (args, _) = rest.rsplit_once(')').expect("X(...) line");
            let mut it = args.splitn(3, ',');
            let name = it.next().unwrap().trim().to_string();
            let verdict = it.next().unwrap().trim().to_string();
            let desc = it.next().unwrap().trim().trim_matches('"').to_string();
            assert!(
                verdict == "PASS" || verdict == "DROP",
                "verdict of {name}: {verdict}"
            );
            reasons.push((name, verdict, desc));
        } else if let Some(rest) = line.strip_prefix("#define RX_") {
            let mut it = rest.split_whitespace();
            let (Some(name), Some(value)) = (it.next(), it.next()) else {
                continue;
            };
            if let Ok(v) = value.parse::<u64>() {
                consts.push((name.to_string(), v));
            }
        } else if let Some(rest) = line.strip_prefix("RX_ASSERT_SIZE(struct ") {
            let (args, _) = rest.split_once(')').expect("RX_ASSERT_SIZE(...)");
            let (name, size) = args.split_once(',').expect("RX_ASSERT_SIZE(struct x, n)");
            sizes.push((
                name.trim().to_uppercase(),
                size.trim().parse::<usize>().expect("size"),
            ));
        }
    }
    assert!(!reasons.is_empty(), "no X(...) lines in RX_REASONS");

    let mut s = String::from("// Generated by build.rs from bpf/ringx_xdp.h. Do not edit.\n\n");
    s += "/// Why the filter gave a packet its verdict: the index of its per-CPU counter\n";
    s += "/// (`RX_REASONS` in `bpf/ringx_xdp.h`).\n";
    s += "#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]\n#[repr(u32)]\npub enum Reason {\n";
    for (i, (name, _, desc)) in reasons.iter().enumerate() {
        let _ = writeln!(s, "    /// {desc}.\n    {} = {i},", camel(name));
    }
    s += "}\n\nimpl Reason {\n";
    let _ = writeln!(
        s,
        "    /// How many reasons there are (`RX_REASON_MAX`).\n    pub const COUNT: usize = {};",
        reasons.len()
    );
    s += "    /// Every reason, in counter order.\n    pub const ALL: [Reason; Self::COUNT] = [\n";
    for (name, _, _) in &reasons {
        let _ = writeln!(s, "        Reason::{},", camel(name));
    }
    s += "    ];\n\n    /// The counter's name in snake case (`drop_block`), as `ringx xdp stats` prints it.\n";
    s += "    pub const fn name(self) -> &'static str {\n        match self {\n";
    for (name, _, _) in &reasons {
        let _ = writeln!(
            s,
            "            Reason::{} => \"{}\",",
            camel(name),
            name.to_lowercase()
        );
    }
    s += "        }\n    }\n\n    /// The verdict packets counted under this reason got.\n";
    s += "    pub const fn verdict(self) -> Verdict {\n        match self {\n";
    for (name, v, _) in &reasons {
        let v = if v == "PASS" { "Pass" } else { "Drop" };
        let _ = writeln!(s, "            Reason::{} => Verdict::{v},", camel(name));
    }
    s += "        }\n    }\n\n    /// One line saying what the reason means.\n";
    s += "    pub const fn description(self) -> &'static str {\n        match self {\n";
    for (name, _, desc) in &reasons {
        let _ = writeln!(s, "            Reason::{} => {desc:?},", camel(name));
    }
    s += "        }\n    }\n}\n\n";
    for (name, v) in &consts {
        let _ = writeln!(
            s,
            "/// `RX_{name}` in `bpf/ringx_xdp.h`.\npub const {name}: u64 = {v};"
        );
    }
    for (name, size) in &sizes {
        let _ = writeln!(s, "/// `sizeof(struct {})` as `bpf/ringx_xdp.h` asserts it.\npub const SIZEOF_{name}: usize = {size};", name.to_lowercase());
    }
    s
}

/// `DROP_SYN_RATE` -> `DropSynRate`.
fn camel(name: &str) -> String {
    name.split('_')
        .map(|w| {
            let mut c = w.chars();
            match c.next() {
                Some(f) => f.to_ascii_uppercase().to_string() + &c.as_str().to_ascii_lowercase(),
                None => String::new(),
            }
        })
        .collect()
}
