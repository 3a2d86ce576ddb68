//! Fuzz the framing of relayed responses (issue 26): for any upstream response ringx parses,
//! the head the client gets, parsed again by ringx's own parser, declares exactly the body
//! ringx relays (or says the connection closes after it), and nothing after that body can be
//! read as a second response. The oracle is shared with the property tests:
//! `tests/common/forward.rs`.
#![no_main]

#[path = "../../tests/common/forward.rs"]
mod forward;

use forward::check_response;
use libfuzzer_sys::fuzz_target;
use ringx_http::Version;

fuzz_target!(|data: &[u8]| {
    let Some((&flags, input)) = data.split_first() else {
        return;
    };
    let client = if flags & 2 == 0 {
        Version::Http11
    } else {
        Version::Http10
    };
    if let Err(e) = check_response(input, flags & 1 == 1, client, flags & 4 == 0) {
        panic!("{e}");
    }
});
