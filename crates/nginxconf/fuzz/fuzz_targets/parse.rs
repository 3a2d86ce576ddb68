//! Any bytes: a tree, or an error at a line of the input; never a panic. (An `include` may
//! reach files of this machine: their errors are theirs.)
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    match ringx_nginxconf::parse_str("fuzz.conf", &text) {
        Err(e) if e.file == "fuzz.conf" => assert!(
            e.line >= 1 && e.line <= text.matches('\n').count() + 1,
            "{e}"
        ),
        _ => {}
    }
});
