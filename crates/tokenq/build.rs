//! Declares the `loom` cfg so `--cfg loom` builds are checked, not warned about.
//!
//! The usual place would be `[lints.rust] unexpected_cfgs = { check-cfg = ['cfg(loom)'] }`
//! in Cargo.toml, but Cargo does not allow a `[lints.rust]` table next to
//! `[lints] workspace = true`, and the workspace lint table is shared with other crates.
//! A build script's `rustc-check-cfg` line has the same effect for this crate only.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(loom)");
}
